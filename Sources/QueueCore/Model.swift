/// The two lanes: `fast` for work a person waits for, `slow` for background prefetch.
public enum Lane: String, Equatable, Hashable, Sendable {
    case fast, slow
}

/// One request waiting for a task's result: a client (connection) and a request number unique within it.
public struct Waiter: Hashable, Sendable, CustomStringConvertible {
    public var client: UInt64
    public var request: UInt64

    public init(client: UInt64, request: UInt64) {
        self.client = client
        self.request = request
    }

    public var description: String { "w\(client).\(request)" }
}

/// What the cache holds for a key when a request arrives; the caller looks it up, QueueCore decides.
public enum CacheState: Equatable, Sendable {
    case missing, fresh, stale
}

/// The one answer every waiter gets.
public enum Answer: Equatable, Sendable {
    /// The key is in the cache now (the caller knows where).
    case ready
    case failed(Failure)
    case cancelled
}

/// The reply to `queue`.
public enum QueueOutcome: Equatable, Sendable {
    case queued
    /// A task for the key exists already; nothing changed.
    case already
    case cached
    /// The key failed permanently not long ago; nothing was queued.
    case skipped(Failure)
}

/// How a fetch ended.
public enum FetchOutcome: Equatable, Sendable {
    case success
    case failure(Failure)
}

/// What the scheduler asks its owner to do.
public enum Action: Equatable, Sendable {
    /// Start fetching `key` in `lane`; `revalidate` asks for a conditional request against the cached copy.
    case start(key: String, lane: Lane, revalidate: Bool)
    /// A running fetch changed lane in place (promote or demote): keep its bytes, change its priority.
    case changeLane(key: String, lane: Lane)
    /// Stop a running fetch and drop its bytes; no `finish` is expected for it.
    case abort(key: String)
    /// Stop a running fetch but keep its bytes: it waits again and resumes where it stopped when it next starts
    /// (a `start` of the same key, with a `Range` request when the body can be resumed). No `finish` is expected for it.
    case park(key: String)
    case answer(Waiter, Answer)
    /// Urgent fetches started running (true), or none runs any more (false): running background fetches should be
    /// held back on the wire, or go on. Urgent work that cannot start (its host's limit, a paused host) holds
    /// nothing back, since it takes no bandwidth and may wait for the very background fetch that would be held.
    case holdBackground(Bool)
    /// The key's task is gone (done, given up or cancelled): its durable backlog entry can go.
    case forget(key: String)
    /// The key's task is gone before its fetch ran, since nobody asks for it any more (`Scheduler.disconnect`): what
    /// the durable queue holds for it stays there.
    case letGo(key: String)
    /// The key's waiting background task left memory (`Scheduler.Configuration.slowWaitingKept`): the durable queue
    /// keeps it (the owner queues it there if it is not) and it is read back in its turn.
    case toBacklog(key: String)
    /// A permanent failure to remember (and persist) until `until`.
    case remember(key: String, Failure, until: Moment)
    /// A host failed too often in a row: it gets no new work until `until` (persist it; show it in status).
    case pauseHost(host: String, until: Moment)
}

/// Where a task stands.
public enum TaskState: Equatable, Sendable {
    case waiting
    case running
    /// Failed transiently; waits until `until` before it may run again.
    case delayed(until: Moment)
}

/// A read-only view of one task.
public struct TaskInfo: Equatable, Sendable {
    public var key: String
    public var host: String
    public var lane: Lane
    public var state: TaskState
    public var waiters: [Waiter]
    /// Attempts counted against the URL (`maxAttempts`): a try that failed for want of disk space, or that did not
    /// reach a host failing already, is given back.
    public var attempts: Int
    /// Fetches started so far (a parked transfer's resume is not a new one), counted or not.
    public var tries: Int
    public var revalidate: Bool
    /// Created for a view and not adopted by an ordinary request.
    public var tentative: Bool
    /// Running in the slow lane with urgent waiters while the fast lane is full: it moves there in place in its turn.
    public var promotionPending: Bool
    /// Running, demoted while it waited for its response with the slow lane full: in no lane until the response
    /// begins (`Scheduler.responseStarted`).
    public var lingering: Bool
    /// The fast lane's turn (a client, or `Scheduler.promotedTurn`) whose queue it last started from (for the tests).
    var servedInTurn: UInt64?
}

/// Task counts per lane and state, kept up to date by the scheduler.
public struct LaneCounts: Equatable, Sendable {
    public var fastWaiting = 0
    public var fastRunning = 0
    public var slowWaiting = 0
    public var slowRunning = 0
    /// Running slow tasks in their tail (counted in `slowRunning` too): they leave their place to the next.
    public var slowInTail = 0
    /// Running fast tasks that held their place for `urgentSlice` (counted in `fastRunning` too): they take none any
    /// more, so that slow servers do not hold the fast lane from every other.
    public var fastSteppedAside = 0
    /// Running tasks demoted while they waited for their response, in no lane (counted in neither lane's `running`):
    /// their requests stay out until the response begins.
    public var lingering = 0
    public var delayed = 0
    public var waiters = 0

    public init() {}

    public var tasks: Int { fastWaiting + fastRunning + slowWaiting + slowRunning + lingering + delayed }
    /// The slow lane is suspended while urgent work waits or runs.
    public var slowSuspended: Bool { fastWaiting + fastRunning > 0 }
}
