/// The part of the durable queue the scheduler holds as slow tasks: which keys came from it, where the next read
/// starts, and whether the queue has anything left to read. The rest waits in the index only.
struct BacklogWindow {
    /// Keys the scheduler holds because they were loaded from the durable queue (or adopted into it).
    private var loaded: Set<String> = []
    /// The `seq` of the last row read.
    private var cursor: Int64 = 0
    /// Whether the last read found fewer rows than it asked for.
    private var exhausted = false

    /// How many rows to read now so that `window` slow tasks are in memory: only once fewer than half of them are
    /// left (`slowWaiting`), and never after a read ran out until something new is queued.
    func rowsWanted(slowWaiting: Int, window: Int) -> Int? {
        guard !exhausted, slowWaiting < window / 2 else { return nil }
        return window - slowWaiting
    }

    /// Where the next read starts: after this `seq`.
    var readsAfter: Int64 { cursor }

    /// A read asked for `wanted` rows and got `count`.
    mutating func read(_ count: Int, of wanted: Int) {
        if count < wanted { exhausted = true }
    }

    /// The row `seq` was read.
    mutating func passed(_ seq: Int64) { cursor = seq }

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
