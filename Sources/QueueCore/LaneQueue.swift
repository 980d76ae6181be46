/// A double-ended queue of task keys with lazy removal: entries whose ticket no longer matches their task are
/// skipped when popped, so promote, demote and cancel never search the queue.
struct LaneQueue: Sendable {
    struct Entry: Sendable {
        var key: String
        var ticket: UInt64
    }

    /// Entries put in front (demoted work); the last element comes out first.
    private var front: [Entry] = []
    private var back: [Entry] = []
    private var head = 0

    var storedCount: Int { front.count + back.count - head }

    /// Whether the last `popFirst` stopped at its limits with entries it did not look at.
    private(set) var gaveUp = false

    mutating func pushBack(_ entry: Entry) { back.append(entry) }
    mutating func pushFront(_ entry: Entry) { front.append(entry) }

    /// Removes and returns the first live entry that `accept` takes. `accept` judges a whole group (a host): once it
    /// refuses an entry, the rest of its group is passed over without asking, so one busy host does not hide the
    /// others behind it. At most `groupLimit` groups are refused and `passLimit` live entries passed over; those keep
    /// their places.
    mutating func popFirst(isLive: (Entry) -> Bool, group: (Entry) -> String, accept: (Entry) -> Bool,
                           groupLimit: Int = 64, passLimit: Int = 1024) -> Entry? {
        var refused: Set<String> = []
        var passedCount = 0
        return popFirst(isLive: isLive, group: group, accept: accept, refused: &refused, passed: &passedCount,
                        groupLimit: groupLimit, passLimit: passLimit)
    }

    /// `popFirst` as one of several queues looked at in turn: the groups refused and the entries passed over so far
    /// (in the queues before) count against the limits, and a group refused there is passed over here too.
    mutating func popFirst(isLive: (Entry) -> Bool, group: (Entry) -> String, accept: (Entry) -> Bool,
                           refused: inout Set<String>, passed passedCount: inout Int,
                           groupLimit: Int = 64, passLimit: Int = 1024) -> Entry? {
        var passed: [Entry] = []
        defer { front.append(contentsOf: passed.reversed()) }
        gaveUp = true
        while refused.count < groupLimit, passedCount < passLimit, let entry = popAny() {
            guard isLive(entry) else { continue }
            let name = group(entry)
            if !refused.contains(name) {
                if accept(entry) { return entry }
                refused.insert(name)
            }
            passed.append(entry)
            passedCount += 1
        }
        gaveUp = refused.count >= groupLimit || passedCount >= passLimit
        return nil
    }

    /// Drops stale entries once they outnumber the live ones, so churn cannot grow the queue without bound.
    mutating func compactIfNeeded(liveCount: Int, isLive: (Entry) -> Bool) {
        guard storedCount > 2 * liveCount + 256 else { return }
        front = front.filter(isLive)
        back = back[head...].filter(isLive)
        head = 0
    }

    private mutating func popAny() -> Entry? {
        if let entry = front.popLast() { return entry }
        guard head < back.count else {
            releaseStorage()
            return nil
        }
        let entry = back[head]
        head += 1
        if head >= 1024, head * 2 >= back.count {
            back.removeFirst(head)
            head = 0
        }
        return entry
    }

    /// Empty: gives back the arrays' storage (an array never shrinks by itself), so a burst does not keep its peak.
    private mutating func releaseStorage() {
        if front.capacity > 1024 { front = [] }
        if back.capacity > 1024 {
            back = []
            head = 0
        }
    }
}
