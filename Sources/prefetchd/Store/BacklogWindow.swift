/// The part of the durable queue the scheduler holds as slow tasks: which keys came from it, where the next read
/// starts, and whether the queue has anything left to read. The rest waits in the index only.
struct BacklogWindow {
    /// Keys the scheduler holds because they were loaded from the durable queue (or adopted into it).
    private var loaded: Set<String> = []
    /// The `seq` of the last row read.
    private var cursor: Int64 = 0
    /// Hosts whose rows were passed over because the host was paused, with the first such row's `seq`: they are read
    /// again once it is not.
    private(set) var hostsPassedOver: [String: Int64] = [:]
    /// Whether the last read found fewer rows than it asked for.
    private var exhausted = false

    /// How many rows to read now so that `window` slow tasks that may start are in memory: only once fewer than half
    /// of them are left, and never after a read ran out until something new is queued. Of the `slowWaiting` tasks,
    /// `blocked` wait for a paused host and take no place (a dead host's thousand URLs held back every other host's
    /// for hours), but all of them together stay under `blockedLimit` windows.
    func rowsWanted(slowWaiting: Int, blocked: Int, window: Int) -> Int? {
        let waiting = slowWaiting - blocked, most = Self.blockedLimit * window
        guard !exhausted, waiting < window / 2, slowWaiting < most else { return nil }
        return min(window - waiting, most - slowWaiting)
    }

    /// How many windows of slow tasks memory holds at most, those of paused hosts included.
    static let blockedLimit = 4

    /// Where the next read starts: after this `seq`.
    var readsAfter: Int64 { cursor }

    /// A read asked for `wanted` rows and got `count`.
    mutating func read(_ count: Int, of wanted: Int) {
        if count < wanted { exhausted = true }
    }

    /// The row `seq` was read.
    mutating func passed(_ seq: Int64) { cursor = seq }

    /// The row `seq` was read and left in the queue only: its `host` is paused.
    mutating func passedOver(_ seq: Int64, host: String) {
        cursor = seq
        if hostsPassedOver[host] == nil { hostsPassedOver[host] = seq }
    }

    /// Some of `hostsPassedOver` are not paused any more: the next reads go back to the first row passed over for them.
    mutating func resumeHosts(_ hosts: some Sequence<String>) {
        for host in hosts {
            guard let first = hostsPassedOver.removeValue(forKey: host) else { continue }
            cursor = min(cursor, first - 1)
            exhausted = false
        }
    }

    /// New URLs are in the durable queue: the next read may find them.
    mutating func queued() { exhausted = false }

    /// The index undid a turn's writes: rows the scheduler had finished with and dequeued are back in the queue, at
    /// their old places. The next reads start over from the queue's first row; rows of held keys are passed again.
    mutating func rewind() {
        cursor = 0
        exhausted = false
    }

    /// The scheduler holds `key`, which is in the durable queue.
    mutating func hold(_ key: String) { loaded.insert(key) }

    /// The scheduler forgot `key`.
    mutating func forget(_ key: String) { loaded.remove(key) }

    /// Of `queued` URLs in the durable queue, how many only the queue holds.
    func onlyQueued(of queued: Int64) -> Int64 { max(0, queued - Int64(loaded.count)) }
}
