import PrefetchProtocol
import QueueCore

/// The canonical keys of all views, each held once however many views list it (clients of one feed list the same
/// URLs), with a count of the rows that use it.
final class ViewKeys {
    private var keys: [String] = []
    private var references: [UInt32] = []
    private var ids: [String: UInt32] = [:]
    private var free: [UInt32] = []

    /// How many distinct keys are held.
    var count: Int { ids.count }

    /// What the views hold, as counted against `budget`: each distinct key's bytes and `keyOverhead`, `rowBytes` a
    /// row, and what rejected rows hold (`hold`).
    private(set) var bytes = 0

    /// What a distinct key holds besides its bytes: its slots in the arrays and the dictionary (with its spare room)
    /// and its allocation. Counted as its bytes alone, 100,000 distinct 15-byte keys a view took 5 times the budget.
    static let keyOverhead = 128

    /// What a row holds: its key's id (counted as nothing, 1,500 views of 100,000 rows of one URL held 629 MB).
    static let rowBytes = 4

    /// Counts bytes a view holds besides its keys, until it lets go of them.
    func hold(_ count: Int) { bytes += count }

    func letGo(_ count: Int) { bytes -= count }

    /// The most all views together may hold, as `bytes` counts it: past it, a `view` that adds rows is refused.
    static let budget = 256 << 20

    func retain(_ key: String) -> UInt32 {
        bytes += Self.rowBytes
        if let id = ids[key] {
            references[Int(id)] += 1
            return id
        }
        let id: UInt32
        if let reused = free.popLast() {
            id = reused
            keys[Int(id)] = key
            references[Int(id)] = 1
        } else {
            id = UInt32(keys.count)
            keys.append(key)
            references.append(1)
        }
        ids[key] = id
        bytes += key.utf8.count + Self.keyOverhead
        return id
    }

    func release(_ id: UInt32) {
        bytes -= Self.rowBytes
        references[Int(id)] -= 1
        guard references[Int(id)] == 0 else { return }
        bytes -= keys[Int(id)].utf8.count + Self.keyOverhead
        ids.removeValue(forKey: keys[Int(id)])
        keys[Int(id)] = ""
        free.append(id)
        if ids.isEmpty {
            // The last view closed: give the capacity back too.
            ids = [:]
            keys = []
            references = []
            free = []
        }
    }

    func key(_ id: UInt32) -> String { keys[Int(id)] }
}

/// A view's list: per row the id of its key in the shared `ViewKeys` (4 bytes a row), plus the few rows that cannot
/// be fetched. A row's `CanonicalURL` is parsed again from its key when the row is worked on.
final class ViewRows {
    /// One row: a URL to fetch, or the text the client sent and why it cannot be fetched.
    enum Row {
        case url(CanonicalURL)
        case rejected(String, WireError)
    }

    private let keys: ViewKeys
    private var ids: [UInt32] = []
    private var rejected: [Int: (text: String, error: WireError)] = [:]
    private static let noKey = UInt32.max

    init(keys: ViewKeys) { self.keys = keys }

    deinit {
        for id in ids where id != Self.noKey { keys.release(id) }
        keys.letGo(rejected.values.reduce(0) { $0 + Self.heldBytes($1.text, $1.error) })
    }

    var count: Int { ids.count }

    func append(_ url: CanonicalURL) { ids.append(keys.retain(url.key)) }

    func reject(_ text: String, _ error: WireError) {
        rejected[count] = (text, error)
        ids.append(Self.noKey)
        keys.hold(Self.heldBytes(text, error))
    }

    /// What a rejected row holds: its text, its error's message and their place in memory (about 185 bytes a row of
    /// an empty text were measured; counted as the text, 100,000 such rows a view were free).
    static func heldBytes(_ text: String, _ error: WireError) -> Int {
        text.utf8.count + error.message.utf8.count + 128
    }

    /// The row's canonical key; nil for a rejected row.
    func key(_ row: Int) -> String? {
        let id = ids[row]
        return id == Self.noKey ? nil : keys.key(id)
    }

    subscript(row: Int) -> Row {
        if let rejected = rejected[row] { return .rejected(rejected.text, rejected.error) }
        let key = key(row)!
        do {
            return .url(try CanonicalURL(key))
        } catch {
            // A canonical key parses to itself (tested by model and by fuzzing); should that ever fail, the row says so.
            return .rejected(key, WireError(.internal, "the canonical key \(key) no longer parses: \(error)"))
        }
    }
}
