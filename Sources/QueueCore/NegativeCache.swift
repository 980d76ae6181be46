/// The permanent failures remembered (the negative cache), each until it expires, at most `capacity` at once: past
/// that, the one remembered first goes. (A client asking for a million URLs that fail held every failure in memory,
/// expired ones too until the next retry came due.) Entries are kept in the order they were remembered, which is the
/// order they expire in while the TTL stays the same, so that expiring and bounding them costs O(1) per entry.
struct NegativeCache {
    let capacity: Int
    private var entries: [String: Entry] = [:]
    /// Keys in the order they were remembered, from `head` on; an item whose serial is not its key's entry's is stale
    /// (the key was remembered again since, or forgotten).
    private var order: [(key: String, serial: UInt64)] = []
    private var head = 0
    private var serial: UInt64 = 0

    private struct Entry {
        var failure: Failure
        var until: Moment
        var serial: UInt64
    }

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { entries.count }

    /// `key`'s failure, if it has not expired at `now`.
    func failure(_ key: String, at now: Moment) -> Failure? {
        guard let entry = entries[key], entry.until > now else { return nil }
        return entry.failure
    }

    /// Remembers `failure` for `key` until `until`; the oldest entries go while there are more than `capacity`.
    mutating func remember(_ key: String, _ failure: Failure, until: Moment) {
        serial += 1
        entries[key] = Entry(failure: failure, until: until, serial: serial)
        order.append((key, serial))
        while entries.count > capacity { dropFirst() }
        compact()
    }

    /// Forgets the entries expired at `now` that were remembered before any entry still valid.
    mutating func expire(at now: Moment) {
        while head < order.count {
            let item = order[head]
            if let entry = entries[item.key], entry.serial == item.serial, entry.until > now { break }
            dropFirst()
        }
        compact()
    }

    /// Drops the first item in order, and its entry when the item is not stale.
    private mutating func dropFirst() {
        let item = order[head]
        if entries[item.key]?.serial == item.serial { entries.removeValue(forKey: item.key) }
        head += 1
    }

    /// Gives back the room of the items passed, and of stale ones when they outnumber the live.
    private mutating func compact() {
        if head == order.count {
            order.removeAll(keepingCapacity: order.count <= 4 * capacity)
            head = 0
        } else if head >= 1_024, head * 2 >= order.count {
            order.removeFirst(head)
            head = 0
        } else if order.count - head > 2 * entries.count + 1_024 {
            order = order[head...].filter { entries[$0.key]?.serial == $0.serial }
            head = 0
        }
    }
}
