import Testing
@testable import QueueCore

// Seeded random operation sequences against a model of what the scheduler promises. Each sequence is
// generated while it runs (so `finish` is only called for keys the model knows are running), recorded, and on a
// violation shrunk by removing operations until no single removal keeps it failing.

/// The small world the sequences live in: 6 keys on 3 hosts, some with several spellings.
enum RandomWorld {
    static let keys: [CanonicalURL] = [
        url("http://h1.example/a"), url("http://h1.example/b"),
        url("http://h2.example/c"), url("http://h2.example/d"),
        url("https://h3.example:8443/e"), url("https://h3.example:8443/f"),
    ]
    /// The keys above and other spellings of them, as a client might send them.
    static let spellingTexts = keys.map(\.key) + [
        "HTTP://H1.Example:80/a#frag", "http://h2.example/x/../c", "https://H3.EXAMPLE:8443/%66",
    ]
    static let spellings = spellingTexts.map(url)
    static let keyIndex: [String: Int] = Dictionary(uniqueKeysWithValues: keys.enumerated().map { ($1.key, $0) })
    static let clients = 1...3
    /// The servers that give no validators: a park loses the bytes of their downloads (`parkedWithoutBytes`).
    static let startOver: Set<String> = ["h2.example", "h3.example:8443"]
    static let sequencesPerBatch = 1_000
    static let batches = 10
}

/// How a `finish` ends.
enum FinishKind: Equatable, Sendable, CustomStringConvertible {
    case ok
    case serverError(retryAfter: Int64?)
    /// A connection reset, on one of two connections (ids 0 and 1): the failures on one count once for its host.
    case network(connection: Int?)
    /// No answer from the server (no connection): when its host was failing already, not the URL's fault.
    case unreachable
    case notFound
    /// This machine's disk is full: not the URL's fault, and not the host's.
    case diskFull
    /// Another failure of this machine (the cache not writable, out of descriptors): as a full disk.
    case local

    /// A failure of this machine, not of the URL or its host.
    var isLocal: Bool { self == .diskFull || self == .local }

    var outcome: FetchOutcome {
        switch self {
        case .ok: .success
        case .serverError(let retryAfter): .failure(.httpStatus(503, retryAfter: retryAfter))
        case .network(let connection): .failure(Failure(code: .network, message: "connection reset", isTransient: true,
                                                        connection: connection.map { "connection \($0)" }))
        case .unreachable: .failure(Failure(code: .network, message: "could not connect", isTransient: true,
                                            unreached: true))
        case .notFound: .failure(.httpStatus(404))
        case .diskFull: .failure(Failure(code: .diskFull, message: "writing the body: No space left on device",
                                         isTransient: true))
        case .local: .failure(Failure(code: .internal, message: "cannot start the transfer: open: Permission denied",
                                      isTransient: true))
        }
    }

    var description: String {
        switch self {
        case .ok: "ok"
        case .serverError(nil): "transient 503"
        case .serverError(let retryAfter?): "transient 503, Retry-After \(retryAfter)ms"
        case .network(nil): "transient network error"
        case .network(let connection?): "transient network error on connection \(connection)"
        case .unreachable: "transient, the server not reached (could not connect)"
        case .notFound: "permanent 404"
        case .diskFull: "disk_full (this machine's disk is full)"
        case .local: "internal (this machine cannot write the cache)"
        }
    }
}

/// One step of a random sequence.
enum Op: Equatable, Sendable, CustomStringConvertible {
    case get(spelling: Int, waiter: Waiter, cache: CacheState)
    /// A view's visible row: a tentative `get`.
    case viewGet(spelling: Int, waiter: Waiter, cache: CacheState)
    case queue(spelling: Int, cache: CacheState)
    /// A view's look-ahead row: a tentative `queue` at the front of the slow lane.
    case prefetch(spelling: Int, cache: CacheState)
    case demote(key: Int)
    case promote(key: Int)
    case cancel(key: Int)
    /// A client leaves; past `urgentKept` tasks waiting in the fast lane, its orphaned urgent tasks are let go.
    case disconnect(client: UInt64, urgentKept: Int)
    /// Waiters that stop waiting together (a view's rows scrolled out of sight).
    case release([Waiter])
    case hold(key: Int)
    case unhold(key: Int, dropping: Bool)
    case finish(key: Int, FinishKind)
    case tail(key: Int)
    /// The running transfer's response began.
    case response(key: Int)
    case advance(by: Int64)
    /// New lane widths (`reconfigure`); the other settings stay.
    case widths(fast: Int, slow: Int)
    /// Background work paused (a metered network, quiet hours) or let go on.
    case pauseBackground(Bool)

    var description: String {
        func k(_ i: Int) -> String { RandomWorld.keys[i].key }
        func s(_ i: Int) -> String {
            let text = RandomWorld.spellingTexts[i], key = RandomWorld.spellings[i].key
            return text == key ? key : "\(text) (= \(key))"
        }
        switch self {
        case .get(let spelling, let waiter, let cache): return "get \(s(spelling)) as \(waiter), cache \(cache)"
        case .viewGet(let spelling, let waiter, let cache):
            return "tentative get \(s(spelling)) as \(waiter), cache \(cache)"
        case .queue(let spelling, let cache): return "queue \(s(spelling)), cache \(cache)"
        case .prefetch(let spelling, let cache): return "tentative queue at front \(s(spelling)), cache \(cache)"
        case .hold(let key): return "hold \(k(key))"
        case .unhold(let key, let dropping): return "unhold \(k(key))\(dropping ? ", dropping" : "")"
        case .demote(let key): return "demote \(k(key))"
        case .promote(let key): return "promote \(k(key))"
        case .cancel(let key): return "cancel \(k(key))"
        case .disconnect(let client, let kept):
            return "disconnect client \(client)\(kept == .max ? "" : ", keeping \(kept) urgent tasks waiting")"
        case .release(let waiters): return "release \(waiters.map(\.description).joined(separator: ", "))"
        case .finish(let key, let kind): return "finish \(k(key)): \(kind)"
        case .tail(let key): return "tail of \(k(key))"
        case .response(let key): return "response of \(k(key)) began"
        case .advance(let by): return "advance time by \(by)ms"
        case .widths(let fast, let slow): return "reconfigure to fastWidth \(fast), slowWidth \(slow)"
        case .pauseBackground(let paused): return paused ? "pause background work" : "let background work go on"
        }
    }
}

struct Violation: Error, CustomStringConvertible {
    var step: Int
    var op: String
    var message: String
    var description: String { "step \(step + 1) (\(op)): \(message)" }
}

/// The situations a good random run must reach, counted so a change of weights cannot quietly stop exercising them.
enum Situation: String, CaseIterable {
    case promotedInPlace = "promoted in place", demotedInPlace = "demoted in place"
    case demotedWhileWaiting = "demoted while waiting in the fast lane", aborted = "aborted"
    case parked = "parked by a demote while the slow lane was full"
    case parkedOnRelease = "the last waiter released while the slow lane was full: parked"
    case parkedByNarrowing = "a narrower lane parked what ran beyond its width"
    case promotionDeferred = "a running slow task promoted while the fast lane was full: it goes on as background"
    case promotedInTurn = "a deferred promotion moved to the fast lane in place when its turn came"
    case slowStarted = "slow start", suspended = "slow lane suspended", hostLimited = "waiting on the per-host limit"
    case retryScheduled = "retry scheduled", retryStarted = "retry started", attemptsExhausted = "attempts exhausted"
    case retryNotWaitedFor = "a retry not waited for", getOfRetryNotWaitedFor = "a get of a retry nobody waits for"
    case answeredFromNegativeCache = "answered from the negative cache", queueSkipped = "queue skipped"
    case answeredReady = "answered ready", answeredFailed = "answered failed", answeredCancelled = "answered cancelled"
    case waiterLeft = "waiter left (disconnect or release)"
    case hostPaused = "host paused by the circuit breaker"
    case pausedAgain = "a host failing since its last pause paused again by one more failure"
    case sameConnectionFailure = "a failure on the connection of the host's last counted failure: not counted again"
    case attemptGivenBack = "background work that did not reach a host failing already: the attempt given back"
    case failuresForgotten = "a host's failures in a row forgotten after a long quiet time"
    case releasedAndDemoted = "the last waiter released, the task demoted"
    case letGo = "a client left: urgent tasks only its gets asked for let go, past the fast lane's bound"
    case abandonedStarted = "a task a gone client abandoned started, nothing else in the fast lane able to"
    case abandonedYielded = "a running task a gone client abandoned parked for work someone waits for in a full fast lane"
    case abandonedYieldedHost = "a running task a gone client abandoned parked for work someone waits for on its host, at per_host"
    case parkedAbandonedLetGo = "a client left past the fast lane's bound: a download another gone client left, parked, let go"
    case abandonedDemoted = "a task a gone client abandoned ran in the fast lane for a slice: demoted"
    case turnTaken = "fast work started while another client's turn had work that could start: it goes next"
    case releasedTogether = "several waiters of one task released together"
    case dropped = "a tentative task dropped when no longer held"
    case droppedParked = "a parked tentative task dropped with its bytes when no longer held, more than fastWidth parked"
    case adopted = "a tentative task adopted by an ordinary request"
    case tokenLimited = "waiting for a start token"
    case diskFull = "disk_full: the task kept as background work waiting for the disk, its attempt given back"
    case diskFullAnswered = "disk_full answered the task's waiters at once"
    case diskFullDuringWait = "disk_full while the disk wait lasted: the wait never shortens"
    case diskFullAgain = "disk_full again before any success: the backoff grows"
    case waitedForDisk = "waited for disk: a slow task with room to run held back only by the disk wait"
    case diskWaitEnded = "disk wait ended"
    case diskWaitCleared = "a success cleared the disk wait"
    case diskTaskPromoted = "a get or promote of a task waiting for the disk: it tries again now"
    case diskTaskRemoved = "a task waiting for the disk cancelled or dropped"
    case diskTaskRetried = "a task that waited for the disk started again"
    case parkedByPause = "background paused: what ran in the slow lane parked"
    case startedBesideTail = "a slow task in its tail: the next one started"
    case steppedAside = "a slow task ran past its slice and stepped aside"
    case passedOverAfterSlice = "slow work waited for its host's task past its slice"
    case becamePreemptible = "a slow task ran out its slice, slowWidth others stepped aside: it keeps its place, preemptible"
    case preemptibleSteppedAside = "a preemptible task stepped aside when room past a slice freed"
    case urgentSteppedAside = "a fast task held its place for urgentSlice and stepped aside"
    case demotedToBacklog = "demoted while waiting with slowWaitingKept tasks waiting in the slow lane: to the durable queue"
    case pausedToBacklog = "urgent and waiting when its host paused, slowWaitingKept tasks waiting in the slow lane: to the durable queue"
    case urgentKeptPlace = "a fast task past its urgentSlice kept its place, preemptible: fastWidth others had stepped aside"
    case urgentPreempted = "a preemptible fast task yielded its place to urgent work not begun: parked"
    case startedBesideSteppedAside = "a fast task started in the place of one that stepped aside"
    case preempted = "a preemptible task yielded its place to another's start: parked at the back"
    case demotedIntoYieldedPlace = "a running task demoted into the place a preemptible task yielded"
    case restartedAgain = "a task parked after its slice without its bytes a second time, after a slice twice as long"
    case slicedResumed = "a task parked after its slice started again, into a place nothing else could take"
    case waitedForPause = "a slow task with room to run held back only by the background pause"
    case lingered = "a running fast task demoted before its response with the slow lane full: it lingers"
    case lingeringPromoted = "a lingering task promoted: back in the fast lane in place, or its promotion pending"
    case lingeringParked = "a lingering task's response began: parked"
    case lingeringTookPlace = "a lingering task took a place that freed in the slow lane"
    case lingeringParkedByNarrowing = "a narrower fast lane or a background pause parked a lingering task"
    case lingeringYieldedHost = "urgent work held back by per_host: a lingering task of a host at its limit parked"
    case parkedNotLingering = "demoted with the slow lane full after its response began (or with fastWidth lingering): parked"

    /// What slices do past the first fetch that steps aside: counted in the sequences with slow servers.
    static let slices: [Situation] = [.becamePreemptible, .preemptibleSteppedAside, .preempted, .demotedIntoYieldedPlace,
                                      .slicedResumed, .restartedAgain]
}

struct Coverage {
    var counts: [Situation: Int] = [:]
    mutating func note(_ situation: Situation) { counts[situation, default: 0] += 1 }
    mutating func add(_ other: Coverage) { counts.merge(other.counts, uniquingKeysWith: +) }
}

/// The scheduler plus a model of what it must be doing, checked after every step.
struct Runner {
    struct Running: Equatable {
        var lane: Lane
        var host: String
        /// Promoted while the fast lane was full: still running in the slow lane, waiting for a fast slot.
        var promotionPending = false
        /// The place of its start among all starts (a narrower lane parks the most recent first).
        var order: Int
        /// When it started: a try that reached nothing for longer than anyone waits is not repeated for waiters.
        var startedAt: Moment
        /// When its slice began: its start, or when it took a place in the slow lane (demoted, or settled lingering).
        var sliceFrom: Moment
        /// A slow task near its end, or past its slice: it takes no place in the lane (unless background is paused).
        var inTail = false
        /// A slow task that ran for `backgroundSlice` (`inTail` too): no other slow task of its host starts meanwhile.
        var overran = false
        /// Past its slice while slowWidth others have stepped aside: it keeps its place, yields it to any other slow
        /// start, and steps aside once there is room.
        var preemptible = false
        /// Its response began.
        var responded = false
        /// Demoted before its response with the slow lane full: in no lane, its request out.
        var lingering = false
        /// A fast task that held its place for `urgentSlice` (since `sliceFrom`) and stepped aside: it takes none.
        var urgentOverran = false
        /// A fast task past its urgent slice while `fastWidth` others stepped aside: it keeps its place, yields it to
        /// urgent work not begun (parked), and steps aside once there is room.
        var urgentPreemptible = false
    }

    enum WaiterState: Equatable {
        case pending(key: String)
        case answered
        case gone
    }

    /// What a step may do besides starting work, moving a deferred promotion to the fast lane in its turn and
    /// reporting suspension.
    struct Allowed {
        var changeLane: (key: String, lane: Lane)?
        var abort: String?
        /// The parks expected, in order, with the lane each parked task then waits in.
        var parks: [(key: String, lane: Lane)] = []
        /// Abandoned tasks that ran in the fast lane for a slice, demoted in this order: each changes lane or is parked
        /// as a `demote` would at that point (`expectDemotion`).
        var demotions: [String] = []
        /// New widths: a lane beyond its width parks its most recent start, one at a time.
        var narrowing = false
        var answers: (key: String, answer: Answer)?
        var forget: String?
        var remember: (key: String, failure: Failure, until: Moment)?
        var pauseHost: String?
        /// A waiting task demoted past `slowWaitingKept`: it leaves memory for the durable queue.
        var toBacklog: String?
    }

    var configuration: Scheduler.Configuration
    var scheduler: Scheduler
    var now = Moment(milliseconds: 0)
    var running: [String: Running] = [:]
    var waiters: [Waiter: WaiterState] = [:]
    var pending: [String: Set<Waiter>] = [:]
    var negative: [String: (failure: Failure, until: Moment)] = [:]
    /// Per host: transient failures in a row and when the last came; forgotten after a quiet time (`failures(of:)`).
    var hostFailures: [String: (count: Int, last: Moment, connection: String?)] = [:]
    /// Fetches started per key, counted against the URL or not.
    var tries: [String: Int] = [:]
    var pausedHosts: [String: Moment] = [:]
    var reportedHold = false
    /// Keys whose task is tentative, held counts, and tasks parked with their bytes.
    var tentative: Set<String> = []
    var holds: [String: Int] = [:]
    var parked: Set<String> = []
    /// Keys parked at the back of the slow lane after their slice (yielding to another start), while they wait there.
    var sliced: Set<String> = []
    /// Per key, how many times its task was parked after its slice without its bytes: each doubles its next slice (up
    /// to 64 times).
    var restarts: [String: Int] = [:]
    /// Keys an ordinary `queue` asked for while their task lives: a client leaving never lets them go.
    var queued: Set<String> = []
    /// Delayed tasks whose retry nobody waits for, with the failure and the retry's time: a get meanwhile is answered.
    var notWaitedFor: [String: (failure: Failure, until: Moment)] = [:]
    /// Fast tasks nobody waits for since their client left: waiting, they start after those someone waits for.
    var abandoned: Set<String> = []
    /// Tasks a `promote` made urgent, until a demote: a client leaving neither abandons them nor withdraws that.
    var promoted: Set<String> = []
    /// The turns each task waits in, in the fast lane: the client whose `get` made it urgent (or `promotedTurn`), and
    /// up to `turnsPerTask` in all of the other clients that asked for it while it was urgent.
    var turns: [String: Set<UInt64>] = [:]
    /// Per turn whose fast work could start at every fast start since it last started (and that had fast work waiting
    /// at the end of every step since): the turns that started fast work meanwhile. Round robin: none of them starts
    /// again before it.
    var startedWhileWaiting: [UInt64: Set<UInt64>] = [:]
    /// Per host: start tokens left and when they were counted.
    var buckets: [String: (tokens: Double, at: Moment)] = [:]
    /// Attempts started per task (a resumed park is the same attempt; disk_full gives one back).
    var attempts: [String: Int] = [:]
    /// The disk is full: no slow start before this. Cleared when it passes and by any success.
    var diskWaitUntil: Moment?
    /// Background work is paused: the slow lane has no room.
    var backgroundPaused = false
    var slowCapacity: Int { backgroundPaused ? 0 : configuration.slowWidth }
    /// The places running tasks take in `lane`: one each, but up to `slowWidth` slow ones in their tail take none
    /// while background work goes on.
    func occupying(_ lane: Lane) -> Int {
        let inLane = running.values.count { $0.lane == lane && !$0.lingering }
        if lane == .fast { return inLane - fastSteppedAside }
        guard !backgroundPaused else { return inLane }
        return inLane - min(running.values.count { $0.lane == .slow && $0.inTail }, configuration.slowWidth)
    }
    /// Fast tasks that stepped aside after their urgent slice.
    var fastSteppedAside: Int { running.values.count(where: \.urgentOverran) }
    /// Fast tasks that take a place, when their urgent slice ends (none for an abandoned one): each steps aside then,
    /// while fewer than `fastWidth` have.
    var urgentSliceEnds: [(key: String, end: Moment)] {
        guard let slice = configuration.urgentSlice else { return [] }
        return running.filter { $0.value.lane == .fast && !$0.value.lingering && !$0.value.urgentOverran
                                && !$0.value.urgentPreemptible && !abandoned.contains($0.key) }
            .map { ($0.key, $0.value.sliceFrom + slice) }
    }
    /// Past their urgent slice, fast tasks are preemptible, and step aside while fewer than `fastWidth` have.
    mutating func stepAsideAfterUrgentSlice() {
        for (key, end) in urgentSliceEnds where end <= now { running[key]?.urgentPreemptible = true }
        settleUrgentPreemptible()
        if running.values.contains(where: \.urgentPreemptible) { coverage.note(.urgentKeptPlace) }
    }
    /// Room past an urgent slice goes at once to the preemptible fast tasks, the oldest start first: they step aside.
    mutating func settleUrgentPreemptible() {
        while fastSteppedAside < configuration.fastWidth,
              let key = running.filter(\.value.urgentPreemptible).min(by: { $0.value.order < $1.value.order })?.key {
            running[key]?.urgentPreemptible = false
            running[key]?.urgentOverran = true
            coverage.note(.urgentSteppedAside)
        }
    }
    /// disk_full failures since the last success: they set the backoff.
    var diskFailures = 0
    /// Tasks a disk_full delayed, until when; and those whose disk delay passed that have not started since.
    var diskDelayed: [String: Moment] = [:]
    var backFromDisk: Set<String> = []
    /// While a fetch's end is processed: the tasks of its host that leave memory for the durable queue if that end
    /// pauses the host (waiting in the fast lane, not parked, tentative or held; `Scheduler.failFast`).
    var leaveMemoryOnPause: Set<String> = []
    var step = 0
    var currentOp: Op?
    /// Counted by hand (cheaper than summing `pending` every step).
    var pendingCount = 0
    var starts = 0
    var coverage = Coverage()

    init(configuration: Scheduler.Configuration, seed: UInt64) {
        self.configuration = configuration
        scheduler = Scheduler(configuration: configuration, seed: seed)
    }

    func fail(_ message: String) -> Violation {
        Violation(step: step, op: currentOp?.description ?? "drain", message: message)
    }

    /// Runs every operation, then drains, checking the model all along.
    static func run(_ ops: [Op], configuration: Scheduler.Configuration, seed: UInt64) -> Violation? {
        var runner = Runner(configuration: configuration, seed: seed)
        do {
            for op in ops { try runner.apply(op) }
            try runner.drain()
        } catch { return error }
        return nil
    }

    // MARK: Steps

    mutating func apply(_ op: Op) throws(Violation) {
        currentOp = op
        defer { step += 1 }
        switch op {
        case .get(let spelling, let waiter, let cache), .viewGet(let spelling, let waiter, let cache):
            let u = RandomWorld.spellings[spelling], key = u.key
            let before = scheduler.task(key), existed = before != nil
            let isTentative = if case .viewGet = op { true } else { false }
            // Urgent in this client's turn alone: new, background work (not already promoted), or abandoned; urgent
            // already, in this client's turn too.
            var taskTurns = turns[key, default: []]
            if before.map({ abandoned.contains(key) || $0.lane == .slow && !$0.promotionPending }) ?? true {
                taskTurns = [waiter.client]
            } else if taskTurns.count < Scheduler.turnsPerTask {
                taskTurns.insert(waiter.client)
            }
            let actions = scheduler.get(u, waiter: waiter, cache: cache, now: now, tentative: isTentative)
            if !existed, cache == .fresh {
                guard actions == [.answer(waiter, .ready)] else { throw fail("fresh get answered \(actions)") }
                waiters[waiter] = .answered
            } else if !existed, let remembered = negative[key], remembered.until > now {
                guard actions == [.answer(waiter, .failed(remembered.failure))] else {
                    throw fail("get of a recently failed key gave \(actions)")
                }
                waiters[waiter] = .answered
                coverage.note(.answeredFromNegativeCache)
            } else if running[key] == nil, let until = pausedHosts[u.authority], until > now {
                guard actions.count == 1, case .answer(waiter, .failed(let failure)) = actions[0], failure.code == .hostPaused else {
                    throw fail("get for the paused host \(u.authority) gave \(actions)")
                }
                waiters[waiter] = .answered
                coverage.note(.hostPaused)
            } else if cache != .fresh, let retry = notWaitedFor[key], retry.until > now {
                let told = Scheduler.retriedLater(retry.failure, in: retry.until.milliseconds - now.milliseconds)
                guard actions == [.answer(waiter, .failed(told))] else { throw fail("get of a retry nobody waits for gave \(actions)") }
                waiters[waiter] = .answered
                if !isTentative, tentative.remove(key) != nil { coverage.note(.adopted) }
                coverage.note(.getOfRetryNotWaitedFor)
            } else {
                waiters[waiter] = .pending(key: key)
                pending[key, default: []].insert(waiter)
                turns[key] = taskTurns
                abandoned.remove(key)  // asked for again: it takes its turn
                pendingCount += 1
                let changeLane = expectPromotion(key)
                // Waiting for this machine, it tries again now (its waiters learn at once whether it still fails).
                if diskDelayed.removeValue(forKey: key) != nil {
                    backFromDisk.insert(key)
                    coverage.note(.diskTaskPromoted)
                }
                if !existed, isTentative { tentative.insert(key) }
                if !isTentative, tentative.remove(key) != nil { coverage.note(.adopted) }
                try process(actions, Allowed(changeLane: changeLane))
                let task = scheduler.task(key)
                guard task?.lane == .fast || task?.promotionPending == true else {
                    throw fail("after get the task is \(String(describing: task))")
                }
                guard existed || task?.revalidate == (cache == .stale) else { throw fail("new task, wrong revalidate flag") }
            }

        case .queue(let spelling, let cache), .prefetch(let spelling, let cache):
            let u = RandomWorld.spellings[spelling], key = u.key
            var before = scheduler.task(key)
            let isTentative = if case .prefetch = op { true } else { false }
            let (outcome, actions) = scheduler.queue(u, cache: cache, now: now, tentative: isTentative, atFront: isTentative)
            if before != nil, !isTentative, tentative.remove(key) != nil {
                before?.tentative = false
                coverage.note(.adopted)
            }
            let expected: QueueOutcome
            if before != nil {
                expected = .already
            } else if cache == .fresh {
                expected = .cached
            } else if let remembered = negative[key], remembered.until > now {
                expected = .skipped(remembered.failure)
            } else {
                expected = .queued
            }
            guard outcome == expected else { throw fail("queue gave \(outcome), expected \(expected)") }
            if !isTentative, expected == .queued || expected == .already { queued.insert(key) }
            if case .skipped = outcome { coverage.note(.queueSkipped) }
            if expected == .queued {
                if isTentative { tentative.insert(key) }
                try process(actions, Allowed())
                let task = scheduler.task(key)
                guard task?.lane == .slow && task?.revalidate == (cache == .stale) && task?.waiters == [] else {
                    throw fail("queued task is \(String(describing: task))")
                }
            } else {
                guard actions == [] && scheduler.task(key) == before else { throw fail("\(outcome) but \(actions)") }
            }

        case .demote(let index):
            let key = RandomWorld.keys[index].key
            let before = scheduler.task(key)
            let toBacklog = demotionLeavesMemory(before)
            abandoned.remove(key)
            promoted.remove(key)
            let actions = scheduler.demote(key, now: now)
            var allowed = expectDemotion(key)
            allowed.toBacklog = toBacklog ? key : nil
            try process(actions, allowed)
            if !allowed.parks.isEmpty { coverage.note(.parked) }
            if toBacklog {
                guard scheduler.task(key) == nil, actions.first == .toBacklog(key: key) else {
                    throw fail("demoted past slowWaitingKept: \(actions), the task \(String(describing: scheduler.task(key)))")
                }
            } else if let before {
                let after = scheduler.task(key)
                guard after?.lane == .slow, after?.waiters == before.waiters, after?.attempts == before.attempts,
                      after?.promotionPending == false else {
                    throw fail("after demote the task is \(String(describing: after)), before \(before)")
                }
                // A withdrawn promotion parks a lingering task while background work is paused (checked above).
                guard before.lane == .fast || before.promotionPending || (after == before && actions == []) else {
                    throw fail("demote of a slow task changed it or acted: \(actions)")
                }
                if before.lane == .fast, before.state == .waiting { coverage.note(.demotedWhileWaiting) }
            } else {
                guard actions == [] else { throw fail("demote of an unknown key gave \(actions)") }
            }

        case .promote(let index):
            let key = RandomWorld.keys[index].key
            let before = scheduler.task(key), existed = before != nil
            if let before, abandoned.contains(key) || before.lane == .slow && !before.promotionPending {
                turns[key] = [Scheduler.promotedTurn]
            }
            abandoned.remove(key)  // asked for again
            if existed { promoted.insert(key) }
            let changeLane = expectPromotion(key)
            if diskDelayed.removeValue(forKey: key) != nil {
                backFromDisk.insert(key)
                coverage.note(.diskTaskPromoted)
            }
            let actions = scheduler.promote(key, now: now)
            try process(actions, Allowed(changeLane: changeLane))
            let after = scheduler.task(key)
            guard existed ? after?.lane == .fast || after?.promotionPending == true : actions == [] else {
                throw fail("promote gave \(actions), the task is \(String(describing: scheduler.task(key)))")
            }

        case .cancel(let index):
            let key = RandomWorld.keys[index].key
            let existed = scheduler.task(key) != nil
            let wasRunning = running[key] != nil
            let actions = scheduler.cancel(key, now: now)
            try process(actions, Allowed(abort: key, answers: (key, .cancelled), forget: key))
            guard scheduler.task(key) == nil, running[key] == nil else { throw fail("the task is still there after cancel") }
            guard existed == actions.contains(.forget(key: key)), wasRunning == actions.contains(.abort(key: key)) else {
                throw fail("cancel gave \(actions)")
            }

        case .disconnect(let client, let kept):
            let gone = waiters.filter { $0.key.client == client }.compactMap { waiter, state -> (Waiter, String)? in
                if case .pending(let key) = state { (waiter, key) } else { nil }
            }
            for (waiter, key) in gone { leave(waiter, key: key) }
            // A client that asks again after this is another connection, with a turn of its own.
            startedWhileWaiting[client] = nil
            for turn in startedWhileWaiting.keys { startedWhileWaiting[turn]!.remove(client) }
            // The client's turn leaves the tasks others wait in (for their next waits: a retry, a park), or passes to
            // someone still waiting (a promoted task's to the promoted turn).
            for key in Set(gone.map(\.1)) where turns[key]?.contains(client) == true {
                let next = scheduler.task(key)?.waiters.first { $0.client != client }
                guard turns[key]!.count > 1 || next != nil || promoted.contains(key) else { continue }
                turns[key]!.remove(client)
                if turns[key]!.isEmpty { turns[key] = [next?.client ?? Scheduler.promotedTurn] }
            }
            // Let go: the urgent tasks only `get`s asked for, nobody waits for and not started, the client's latest
            // requests first, while more than `kept` wait in the fast lane.
            var expected: [Action] = [], fastWaiting = scheduler.counts.fastWaiting
            for (_, key) in gone.sorted(by: { $0.0.request > $1.0.request }) where fastWaiting > kept {
                guard let task = scheduler.task(key), task.lane == .fast, task.state == .waiting,
                      pending[key, default: []].isEmpty, !queued.contains(key), !task.tentative, !parked.contains(key),
                      holds[key] == nil, !expected.contains(.letGo(key: key)) else { continue }
                expected.append(.letGo(key: key))
                fastWaiting -= 1
            }
            // Then (a client that had waiters) the downloads of clients gone before, parked for work someone waited
            // for, in key order.
            for key in parked.sorted() where !gone.isEmpty && fastWaiting > kept && abandoned.contains(key) {
                guard let task = scheduler.task(key), task.lane == .fast, task.state == .waiting,
                      pending[key, default: []].isEmpty, !queued.contains(key), !task.tentative, holds[key] == nil
                else { continue }
                expected.append(.letGo(key: key))
                fastWaiting -= 1
                coverage.note(.parkedAbandonedLetGo)
            }
            // Abandoned: the fast tasks nobody waits for now. A promotion only the client waited for is withdrawn (a
            // lingering one parked while background work is paused).
            var parks: [(key: String, lane: Lane)] = []
            for (_, key) in gone.sorted(by: { $0.0.request < $1.0.request })
            where pending[key, default: []].isEmpty && !promoted.contains(key) {
                if running[key]?.promotionPending == true {
                    running[key]!.promotionPending = false
                    if running[key]!.lingering, backgroundPaused { parks.append((key, .slow)) }
                } else if scheduler.task(key)?.lane == .fast {
                    abandoned.insert(key)
                }
            }
            let demotions = abandonedPastSlice()
            let actions = scheduler.disconnect(client: client, urgentKept: kept, now: now)
            let lettingGo = Array(actions.prefix { if case .letGo = $0 { true } else { false } })
            guard lettingGo == expected else { throw fail("disconnect gave \(actions), expected \(expected) first") }
            try process(actions, Allowed(parks: parks, demotions: demotions))
            if !lettingGo.isEmpty { coverage.note(.letGo) }

        case .release(let batch):
            // Released together, as a scroll does: the same as one at a time, each of which the model checks.
            let keys = batch.compactMap { if case .pending(let key)? = waiters[$0] { key } else { nil } }
            if Set(keys).count < keys.count { coverage.note(.releasedTogether) }
            var together = scheduler
            let batchActions = together.release(batch, now: now)
            var actions: [Action] = []
            for waiter in batch { actions += try release(waiter) }
            let byKey = { (a: TaskInfo, b: TaskInfo) in a.key < b.key }
            guard batchActions == actions, together.counts == scheduler.counts,
                  together.allTasks.sorted(by: byKey) == scheduler.allTasks.sorted(by: byKey) else {
                throw fail("released together: \(batchActions); one at a time: \(actions)")
            }

        case .hold(let index):
            let key = RandomWorld.keys[index].key
            scheduler.hold(key)
            holds[key, default: 0] += 1

        case .unhold(let index, let dropping):
            let key = RandomWorld.keys[index].key
            let count = holds[key, default: 0]
            let task = scheduler.task(key)
            let dropsParked = parked.contains(key) && parked.count > configuration.fastWidth
            let drops = dropping && count == 1 && tentative.contains(key) && pending[key, default: []].isEmpty
                && running[key] == nil && (!parked.contains(key) || dropsParked)
            let actions = scheduler.unhold(key, dropping: dropping, now: now)
            holds[key] = count > 1 ? count - 1 : nil
            if drops {
                try process(actions, Allowed(forget: key))
                guard scheduler.task(key) == nil, actions.contains(.forget(key: key)) else {
                    throw fail("unhold did not drop the tentative task: \(actions)")
                }
                coverage.note(dropsParked ? .droppedParked : .dropped)
            } else {
                guard actions == [], scheduler.task(key) == task else {
                    throw fail("unhold changed \(String(describing: task)) to \(String(describing: scheduler.task(key))): \(actions)")
                }
            }

        case .tail(let index):
            let key = RandomWorld.keys[index].key
            let actions = scheduler.tailReached(key, now: now)
            guard let task = running[key], task.lane == .slow, !task.inTail, !task.lingering else {
                guard actions == [] else { throw fail("a tail that changes nothing gave \(actions)") }
                return try checkInvariants()
            }
            running[key]?.inTail = true
            running[key]?.preemptible = false
            try process(actions, Allowed())
            if actions.contains(where: { if case .start(_, .slow, _) = $0 { true } else { false } }) {
                coverage.note(.startedBesideTail)
            }

        case .response(let index):
            let key = RandomWorld.keys[index].key
            let actions = scheduler.responseStarted(key, now: now)
            guard let task = running[key], !task.responded else {
                guard actions == [] else { throw fail("a response of a task not waiting for one gave \(actions)") }
                return try checkInvariants()
            }
            running[key]?.responded = true
            guard task.lingering else {
                guard actions == [] else { throw fail("a response of a task in its lane gave \(actions)") }
                return try checkInvariants()
            }
            // It would have taken a free place in the slow lane already: it is parked.
            coverage.note(.lingeringParked)
            try process(actions, Allowed(parks: [(key, task.promotionPending ? .fast : .slow)]))
            guard actions.first == .park(key: key) else { throw fail("expected \(key) parked first: \(actions)") }

        case .finish(let index, let kind):
            let key = RandomWorld.keys[index].key
            // Only keys the model knows are running are ever finished; a shrunk sequence may lose the start.
            guard running[key] != nil else { return }
            guard let task = scheduler.task(key), task.state == .running else {
                throw fail("the model thinks \(key) runs, the scheduler has \(String(describing: scheduler.task(key)))")
            }
            let ended = running.removeValue(forKey: key)!
            let wasPromoted = ended.promotionPending
            let failuresBefore = failures(of: task.host)
            if failuresBefore == 0, hostFailures[task.host] != nil { coverage.note(.failuresForgotten) }
            leaveMemoryOnPause = configuration.slowWaitingKept == nil ? [] : Set(scheduler.allTasks.filter {
                $0.host == task.host && $0.state == .waiting && $0.lane == .fast && !parked.contains($0.key)
                    && !tentative.contains($0.key) && holds[$0.key] == nil
            }.map(\.key))
            defer { leaveMemoryOnPause = [] }
            let actions = scheduler.finish(key, kind.outcome, now: now)
            var pauseHost: String?
            switch kind.outcome {
            case .success:
                hostFailures[task.host] = nil
            case .failure(let failure) where failure.isTransient && !kind.isLocal && failuresBefore > 0
                && failure.connection != nil && hostFailures[task.host]?.connection == failure.connection:
                // The connection of the failure counted last: the same drop ended it, nothing more is counted.
                coverage.note(.sameConnectionFailure)
            case .failure(let failure) where failure.isTransient && !kind.isLocal:
                // A failure of this machine neither counts against the host nor resets its count; a pause does not
                // reset it either.
                let count = failuresBefore + 1
                hostFailures[task.host] = (count, now, failure.connection)
                if let threshold = configuration.hostFailureThreshold, count >= threshold {
                    if count > threshold { coverage.note(.pausedAgain) }
                    pauseHost = task.host
                    guard actions.contains(.pauseHost(host: task.host, until: now + configuration.hostPause)) else {
                        throw fail("\(task.host) failed \(threshold) times in a row but was not paused: \(actions)")
                    }
                }
            case .failure:
                break
            }
            if kind == .unreachable, failuresBefore > 0, task.waiters.isEmpty, queued.contains(key),
               configuration.hostFailureThreshold != nil,
               configuration.hostPause > 0 {
                attempts[key, default: 0] -= 1
                coverage.note(.attemptGivenBack)
            }
            let tries = attempts[key, default: 0]
            switch kind.outcome {
            case .success:
                // A file written shows that space is back: background work may start in this very step.
                if diskWaitUntil != nil { coverage.note(.diskWaitCleared) }
                // What waited for this machine tries again now, not at the end of its backoff.
                for key in diskDelayed.keys { backFromDisk.insert(key) }
                diskDelayed = [:]
                diskWaitUntil = nil
                diskFailures = 0
                try process(actions, Allowed(answers: (key, .ready), forget: key, pauseHost: pauseHost))
                guard scheduler.task(key) == nil, actions.contains(.forget(key: key)) else { throw fail("success left the task") }
            case .failure(let failure) where kind.isLocal:
                try expectDiskWait(key, failure, actions)
            case .failure(let failure) where failure.isTransient && tries < configuration.retry.maxAttempts:
                // The failure that pauses the host is the answer of this task's waiters (the others of the host get
                // host_paused); the task becomes background work. A task waiting for its promotion retries in the
                // fast lane. Nobody waits out a retry over `longestWaitedRetry` away, nor one after a try that reached
                // nothing for longer: the waiters get the failure, and the retry is background work.
                let after = scheduler.task(key)
                guard let until = after?.state.delayedUntil else { throw fail("a retryable failure left the task \(String(describing: after))") }
                let longest = Scheduler.longestWaitedRetry
                let notWaited = pauseHost == nil && (until.milliseconds - now.milliseconds > longest
                    || (failure.unreached && now.milliseconds - ended.startedAt.milliseconds > longest))
                notWaitedFor[key] = notWaited ? (failure, until) : nil
                let givenUp = notWaited && !task.waiters.isEmpty
                if givenUp { coverage.note(.retryNotWaitedFor) }
                let answer: Answer? = pauseHost != nil ? .failed(failure)
                    : givenUp ? .failed(Scheduler.retriedLater(failure, in: until.milliseconds - now.milliseconds)) : nil
                try process(actions, Allowed(answers: answer.map { (key, $0) }, pauseHost: pauseHost))
                let expectedWaiters = pauseHost == nil && !givenUp ? task.waiters : []
                let expectedLane = pauseHost != nil || (givenUp && !promoted.contains(key)) ? .slow : wasPromoted ? .fast : task.lane
                guard after?.waiters == expectedWaiters, after?.lane == expectedLane else {
                    throw fail("a retryable failure left the task \(String(describing: after))")
                }
                let policy = configuration.retry
                let backoff = min(policy.maxDelay, policy.baseDelay << Int64(max(tries, 1) - 1))
                let honoured = min(max(failure.retryAfter ?? 0, 0), policy.retryAfterCap)
                let delay = until.milliseconds - now.milliseconds
                guard delay >= max(backoff / 2, honoured), delay <= max(backoff, honoured) else {
                    throw fail("retry delay \(delay)ms after attempt \(tries) (backoff \(backoff), Retry-After \(honoured))")
                }
                coverage.note(.retryScheduled)
            case .failure(let failure):
                var allowed = Allowed(answers: (key, .failed(failure)), forget: key, pauseHost: pauseHost)
                if failure.isTransient { coverage.note(.attemptsExhausted) }
                if !failure.isTransient {
                    let until = now + configuration.retry.negativeTTL
                    allowed.remember = (key, failure, until)
                    guard actions.first == .remember(key: key, failure, until: until) else {
                        throw fail("a permanent failure was not remembered first: \(actions)")
                    }
                }
                try process(actions, allowed)
                guard scheduler.task(key) == nil, actions.contains(.forget(key: key)) else { throw fail("failure left the task") }
            }

        case .advance(let by):
            now = now + by
            // Past its slice, a slow task steps aside while fewer than slowWidth have; otherwise it keeps its place,
            // preemptible (in key order).
            if let slice = configuration.backgroundSlice {
                for (key, task) in running.sorted(by: { $0.key < $1.key }) where task.lane == .slow && !task.lingering
                    && !task.inTail && !task.preemptible && task.sliceFrom + (slice << min(restarts[key, default: 0], 6)) <= now {
                    if overrunCount < configuration.slowWidth {
                        running[key]?.inTail = true
                        running[key]?.overran = true
                        coverage.note(.steppedAside)
                    } else {
                        running[key]?.preemptible = true
                        coverage.note(.becamePreemptible)
                    }
                }
            }
            stepAsideAfterUrgentSlice()
            // Lingering tasks take the places freed past a slice before the abandoned tasks demoted now: they came first.
            settleLingering()
            pausedHosts = pausedHosts.filter { $0.value > now }
            if let until = diskWaitUntil, until <= now {
                diskWaitUntil = nil
                coverage.note(.diskWaitEnded)
            }
            for (key, until) in diskDelayed where until <= now {
                diskDelayed[key] = nil
                backFromDisk.insert(key)
            }
            let demotions = abandonedPastSlice()
            let actions = scheduler.advance(to: now)
            try process(actions, Allowed(demotions: demotions))

        case .widths(let fast, let slow):
            configuration.fastWidth = fast
            configuration.slowWidth = slow
            // Narrower: those that stepped aside last beyond the width take a place again, preemptible.
            while fastSteppedAside > fast,
                  let key = running.filter(\.value.urgentOverran).max(by: { $0.value.order < $1.value.order })?.key {
                running[key]?.urgentOverran = false
                running[key]?.urgentPreemptible = true
            }
            stepAsideAfterUrgentSlice()
            let actions = scheduler.reconfigure(configuration, now: now)
            try process(actions, Allowed(narrowing: true))

        case .pauseBackground(let paused):
            backgroundPaused = paused
            let actions = scheduler.pauseBackground(paused, now: now)
            for action in actions { if case .park = action { coverage.note(.parkedByPause) } }
            try process(actions, Allowed(narrowing: true))
        }
        try checkInvariants()
    }

    /// A `disk_full` finish of `key`: its waiters are answered with it at once and nothing is forgotten; the task
    /// gives its attempt back and waits, as background work, until the disk wait ends. The wait is a backoff from the
    /// retry policy after as many attempts as disk_full failures came since the last success, and never shortens one
    /// already running; no slow task starts before it ends (checked in `process`, also for this step's starts).
    /// A host's transient failures in a row, as the scheduler must count them: forgotten once it went twice the longer
    /// of a pause and the longest backoff without one.
    func failures(of host: String) -> Int {
        guard let entry = hostFailures[host] else { return 0 }
        let forgetAfter = 2 * max(configuration.hostPause, configuration.retry.maxDelay)
        return now.milliseconds - entry.last.milliseconds < forgetAfter ? entry.count : 0
    }

    mutating func expectDiskWait(_ key: String, _ failure: Failure, _ actions: [Action]) throws(Violation) {
        notWaitedFor[key] = nil
        diskFailures += 1
        let policy = configuration.retry
        let backoff = min(policy.maxDelay, policy.baseDelay << Int64(min(diskFailures - 1, 40)))
        let lowest = max(diskWaitUntil ?? now, now + backoff / 2), highest = max(diskWaitUntil ?? now, now + backoff)
        guard let until = scheduler.waitingForDiskUntil, until >= lowest, until <= highest else {
            throw fail("after disk_full number \(diskFailures) the disk wait ends at "
                       + "\(String(describing: scheduler.waitingForDiskUntil)), expected \(lowest)...\(highest) (backoff \(backoff), "
                       + "wait before \(String(describing: diskWaitUntil)))")
        }
        coverage.note(.diskFull)
        if diskWaitUntil != nil { coverage.note(.diskFullDuringWait) }
        if diskFailures > 1 { coverage.note(.diskFullAgain) }
        if !pending[key, default: []].isEmpty { coverage.note(.diskFullAnswered) }
        diskWaitUntil = until
        attempts[key, default: 0] -= 1
        try process(actions, Allowed(answers: (key, .failed(failure))))
        let after = scheduler.task(key)
        guard after?.state == .delayed(until: until), after?.lane == .slow, after?.waiters == [],
              after?.promotionPending == false, after?.attempts == attempts[key] else {
            throw fail("disk_full left the task \(String(describing: after)), expected delayed until \(until) in the "
                       + "slow lane with no waiters and \(attempts[key] ?? 0) attempts")
        }
        diskDelayed[key] = until
    }

    /// What a promotion of `key` must do: change a running slow task's lane in place when the fast lane has room;
    /// when it is full, nothing yet (the model notes the promotion pending).
    mutating func expectPromotion(_ key: String) -> (key: String, lane: Lane)? {
        guard let task = running[key], task.lane == .slow, !task.promotionPending else { return nil }
        if task.lingering { coverage.note(.lingeringPromoted) }
        if occupying(.fast) < configuration.fastWidth { return (key, .fast) }
        running[key]?.promotionPending = true
        coverage.note(.promotionDeferred)
        return nil
    }

    /// The task of `key` is gone: what the model knew of it goes too.
    mutating func dropTask(_ key: String) {
        tentative.remove(key)
        queued.remove(key)
        restarts[key] = nil
        notWaitedFor[key] = nil
        abandoned.remove(key)
        promoted.remove(key)
        parked.remove(key)
        attempts[key] = nil
        tries[key] = nil
        backFromDisk.remove(key)
    }

    /// Whether a demotion of the task `before` sends it to the durable queue: waiting in the fast lane, nobody waiting
    /// for it, not parked, tentative or held, while `slowWaitingKept` tasks wait in the slow lane.
    func demotionLeavesMemory(_ before: TaskInfo?) -> Bool {
        guard let before, let kept = configuration.slowWaitingKept, scheduler.counts.slowWaiting >= kept else {
            return false
        }
        return before.state == .waiting && before.lane == .fast && before.waiters.isEmpty && !parked.contains(before.key)
            && !tentative.contains(before.key) && holds[before.key] == nil
    }

    /// What a demotion of `key` (also by the release of its last waiter) may do: a running fast task changes lane in
    /// place when the slow lane has room; otherwise it lingers (a lane change too) when its response has not begun,
    /// background work is not paused and fewer than `fastWidth` linger, and is parked at the slow lane's front
    /// otherwise; a pending promotion is withdrawn (while background work is paused, a lingering task it kept out is
    /// then parked).
    mutating func expectDemotion(_ key: String) -> Allowed {
        guard let task = running[key] else { return Allowed() }
        if task.promotionPending {
            running[key]?.promotionPending = false
            return task.lingering && backgroundPaused ? Allowed(parks: [(key, .slow)]) : Allowed()
        }
        guard task.lane == .fast else { return Allowed() }
        if occupying(.slow) < slowCapacity {
            return Allowed(changeLane: (key, .slow))
        }
        if slowCapacity > 0, running.values.contains(where: \.preemptible) {
            coverage.note(.demotedIntoYieldedPlace)
            return Allowed(changeLane: (key, .slow))  // after the park of the preemptible task that yields its place
        }
        if !task.responded, !backgroundPaused, running.values.count(where: \.lingering) < configuration.fastWidth {
            running[key]?.lingering = true
            coverage.note(.lingered)
            return Allowed(changeLane: (key, .slow))
        }
        coverage.note(.parkedNotLingering)
        return Allowed(parks: [(key, .slow)])
    }

    /// The abandoned tasks running in the fast lane (not lingering).
    var abandonedRunning: [String: Running] {
        running.filter { $0.value.lane == .fast && !$0.value.lingering && abandoned.contains($0.key) }
    }

    /// The abandoned tasks running in the fast lane that take a place there (not stepped aside).
    var abandonedHoldingPlace: [String: Running] { abandonedRunning.filter { !$0.value.urgentOverran } }

    /// The abandoned tasks that have run in the fast lane for a slice since their start, the oldest start first: each
    /// is demoted now (abandoned no more).
    mutating func abandonedPastSlice() -> [String] {
        guard let slice = configuration.backgroundSlice else { return [] }
        let due = abandonedRunning.filter { $0.value.startedAt + slice <= now }
        abandoned.subtract(due.keys)
        return due.sorted { $0.value.order < $1.value.order }.map(\.key)
    }

    /// One waiter released, checked against the model; returns the scheduler's actions.
    mutating func release(_ waiter: Waiter) throws(Violation) -> [Action] {
        guard case .pending(let key)? = waiters[waiter], let before = scheduler.task(key) else {
            let actions = scheduler.release([waiter], now: now)
            guard actions == [] else { throw fail("release of a waiter that does not wait gave \(actions)") }
            return actions
        }
        var leaving = before
        leaving.waiters.removeAll { $0 == waiter }
        let toBacklog = before.waiters == [waiter] && demotionLeavesMemory(leaving)
        let actions = scheduler.release([waiter], now: now)
        leave(waiter, key: key)
        let last = before.waiters == [waiter]
        if last { promoted.remove(key) }  // demoted
        let demotes = last && before.lane == .fast
        var allowed = last ? expectDemotion(key) : Allowed()
        allowed.toBacklog = toBacklog ? key : nil
        try process(actions, allowed)
        if toBacklog {
            guard scheduler.task(key) == nil else { throw fail("released past slowWaitingKept, the task stays") }
            return actions
        }
        let after = scheduler.task(key)
        guard after?.waiters == before.waiters.filter({ $0 != waiter }),
              after?.lane == (demotes ? .slow : before.lane), demotes || actions == [] || !allowed.parks.isEmpty,
              !last || after?.promotionPending == false else {
            throw fail("release left \(String(describing: after)) (before \(before)), actions \(actions)")
        }
        if demotes { coverage.note(.releasedAndDemoted) }
        if !allowed.parks.isEmpty { coverage.note(.parkedOnRelease) }
        return actions
    }

    /// A waiter disconnects or is released: it must never be answered now.
    mutating func leave(_ waiter: Waiter, key: String) {
        waiters[waiter] = .gone
        pending[key]?.remove(waiter)
        pendingCount -= 1
        coverage.note(.waiterLeft)
    }

    /// Walks one step's actions in order, updating the model.
    mutating func process(_ actions: [Action], _ allowed: Allowed) throws(Violation) {
        var allowed = allowed
        var slowStarted = false
        /// The start a preemptible fast task was just parked for: only work not begun could take its place.
        var preemptedFor: String?
        settlePreemptible()
        for (position, action) in actions.enumerated() {
            switch action {
            case .start(let key, let lane, let revalidate):
                guard running[key] == nil else { throw fail("start for \(key), which is already running") }
                notWaitedFor[key] = nil
                guard lane == .slow || !slowStarted else { throw fail("a fast start after a slow start: \(actions)") }
                let task = scheduler.task(key)
                guard let task, task.state == .running, task.lane == lane, task.revalidate == revalidate else {
                    throw fail("\(action) but the task is \(String(describing: task))")
                }
                if lane == .fast, !abandoned.contains(key) { try checkTurn(of: key, notBegunOnly: preemptedFor == key) }
                preemptedFor = nil
                if abandoned.contains(key) {
                    // Nothing else waiting in the fast lane could start: its host at its limit, paused, or out of tokens.
                    let passedOver = RandomWorld.keys.map(\.key).filter { other in
                        guard !abandoned.contains(other), let waiting = scheduler.task(other), waiting.lane == .fast,
                              waiting.state == .waiting else { return false }
                        if let until = pausedHosts[waiting.host], until > now { return false }
                        if let limit = configuration.perHostLimit,
                           running.values.count(where: { $0.host == waiting.host }) >= limit { return false }
                        return tokens(waiting.host) >= 1
                    }
                    guard passedOver.isEmpty else { throw fail("\(key), abandoned, started before \(passedOver)") }
                    coverage.note(.abandonedStarted)
                }
                let laneRunning = occupying(lane)
                let width = lane == .fast ? configuration.fastWidth : slowCapacity
                if lane == .fast, fastSteppedAside > 0, running.values.count(where: { $0.lane == .fast }) >= width {
                    coverage.note(.startedBesideSteppedAside)
                }
                guard laneRunning < width else {
                    throw fail("start(\(lane)) of \(key) with \(laneRunning) already running (width \(width))")
                }
                if let limit = configuration.perHostLimit {
                    let onHost = running.values.count { $0.host == task.host }
                    guard onHost < limit else { throw fail("start of \(key) with \(onHost) on \(task.host) (limit \(limit))") }
                }
                if lane == .slow, let until = diskWaitUntil {
                    throw fail("slow start of \(key) while the disk wait lasts until \(until)")
                }
                if lane == .slow, running.values.contains(where: { ($0.overran || $0.preemptible) && $0.host == task.host }) {
                    throw fail("slow start of \(key) while a slow task of \(task.host) runs past its slice")
                }
                if lane == .slow, sliced.contains(key) {
                    // Only into a place nothing else could take.
                    if let other = slowStartable().first { throw fail("\(key), parked after its slice, started before \(other)") }
                    sliced.remove(key)
                    coverage.note(.slicedResumed)
                } else if lane == .slow, let other = slicedTask(of: task.host) {
                    throw fail("slow start of \(key) while \(other) of \(task.host) waits, parked after its slice")
                }
                if configuration.hostStartRate != nil {
                    let tokens = self.tokens(task.host)
                    guard tokens >= 1 else { throw fail("start of \(key) with \(tokens) tokens left on \(task.host)") }
                    buckets[task.host] = (tokens - 1, now)
                }
                if parked.remove(key) == nil {
                    attempts[key, default: 0] += 1
                    tries[key, default: 0] += 1
                }
                if backFromDisk.remove(key) != nil { coverage.note(.diskTaskRetried) }
                starts += 1
                running[key] = Running(lane: lane, host: task.host, order: starts, startedAt: now, sliceFrom: now)
                if lane == .slow { slowStarted = true; coverage.note(.slowStarted) }
                if tries[key, default: 0] > 1 { coverage.note(.retryStarted) }

            case .changeLane(let key, let lane):
                let inTurn = lane == .fast && running[key]?.promotionPending == true
                if inTurn {
                    // A deferred promotion takes a fast slot that freed (this step's own starts come after it).
                    let fastRunning = occupying(.fast)
                    guard fastRunning < configuration.fastWidth else {
                        throw fail("\(action) with \(fastRunning) fast tasks running (width \(configuration.fastWidth))")
                    }
                    try checkTurn(of: key)
                    coverage.note(.promotedInTurn)
                } else if allowed.demotions.first == key {
                    allowed.demotions.removeFirst()
                    guard let change = expectDemotion(key).changeLane, change.key == key, change.lane == lane else {
                        throw fail("\(action) of \(key), abandoned past its slice, not what a demote does now")
                    }
                    coverage.note(.abandonedDemoted)
                } else {
                    guard let change = allowed.changeLane, change.key == key, change.lane == lane else {
                        throw fail("unexpected \(action)")
                    }
                    allowed.changeLane = nil
                }
                running[key]?.lane = lane
                running[key]?.promotionPending = false
                running[key]?.inTail = false
                running[key]?.overran = false
                running[key]?.preemptible = false
                running[key]?.urgentOverran = false
                running[key]?.urgentPreemptible = false
                running[key]?.sliceFrom = now
                settlePreemptible()
                if lane == .fast { running[key]?.lingering = false }
                if lane == .fast { coverage.note(.promotedInPlace) } else { coverage.note(.demotedInPlace) }

            case .abort(let key):
                guard allowed.abort == key else { throw fail("unexpected \(action)") }
                guard running.removeValue(forKey: key) != nil else { throw fail("abort of \(key), which is not running") }
                settlePreemptible()
                coverage.note(.aborted)

            case .park(let key):
                let expected: (key: String, lane: Lane)
                if running[key]?.lingering == true, allowed.parks.first?.key != key { settleLingering() }
                // Lingering tasks take the free places before a preemptible one yields its own (to one of them).
                if running[key]?.preemptible == true { settleLingering() }
                if let task = running[key], task.lingering, allowed.parks.first?.key != key {
                    let lingering = running.filter { $0.value.lingering }
                    let rank = { (task: Running) in (task.promotionPending ? 0 : 1, task.order) }
                    // A narrowing step: those beyond fastWidth, the most recent start first and a pending promotion
                    // last; while background work is paused, every one without a pending promotion.
                    let beyond = lingering.count > configuration.fastWidth
                    let narrowed = allowed.narrowing ? lingering.filter { beyond || backgroundPaused && !$0.value.promotionPending } : [:]
                    // Any step: urgent work waits with room in the fast lane, held back by per_host alone, while the
                    // newest lingering task without a pending promotion keeps its place on that host: the urgent work
                    // starts on that host in this step, or waits for the host's next start token.
                    var yielded: [String: Running] = [:]
                    if let limit = configuration.perHostLimit,
                       occupying(.fast) < configuration.fastWidth {
                        let startingHosts = Set(actions[(position + 1)...].compactMap { later -> String? in
                            guard case .start(let started, .fast, _) = later else { return nil }
                            return scheduler.task(started)?.host
                        })
                        let waitingHosts = Set(RandomWorld.keys.compactMap { url in
                            scheduler.task(url.key).flatMap { $0.lane == .fast && $0.state == .waiting ? $0.host : nil }
                        })
                        yielded = lingering.filter {
                            !$0.value.promotionPending
                                && (startingHosts.contains($0.value.host)
                                    || tokens($0.value.host) < 1 && waitingHosts.contains($0.value.host))
                                && running.values.count(where: { [host = $0.value.host] in $0.host == host }) >= limit
                        }
                    }
                    let newestNarrowed = narrowed.max { rank($0.value) < rank($1.value) }?.key
                    let newestYielded = yielded.max { $0.value.order < $1.value.order }?.key
                    guard key == newestNarrowed || key == newestYielded else {
                        throw fail("\(action) of a lingering task: \(lingering.count) linger (fastWidth \(configuration.fastWidth)"
                                   + "\(backgroundPaused ? ", background paused" : ""))")
                    }
                    expected = (key, task.promotionPending ? .fast : .slow)
                    coverage.note(key == newestNarrowed ? .lingeringParkedByNarrowing : .lingeringYieldedHost)
                } else if running[key]?.preemptible == true, let next = placeTaker(after: position, in: actions) {
                    // A full lane: the preemptible task that ran longest yields its place to a lingering task, or to
                    // another's start.
                    let oldest = running.filter(\.value.preemptible).min { $0.value.order < $1.value.order }!.key
                    guard key == oldest, occupying(.slow) == slowCapacity else {
                        throw fail("\(action) for \(next) with \(occupying(.slow)) places taken, oldest preemptible \(oldest)")
                    }
                    expected = (key, .slow)
                    sliced.insert(key)
                    if let host = scheduler.task(key)?.host, RandomWorld.startOver.contains(host) {
                        scheduler.parkedWithoutBytes(key)
                        restarts[key, default: 0] += 1
                        if restarts[key]! > 1 { coverage.note(.restartedAgain) }
                    }
                    coverage.note(.preempted)
                } else if abandoned.contains(key), let task = running[key], task.lane == .fast, !task.lingering,
                          abandonedMayYield(key, task, after: position, in: actions) {
                    expected = (key, .fast)
                } else if running[key]?.urgentPreemptible == true, abandonedHoldingPlace.isEmpty,
                          allowed.parks.first?.key != key, allowed.demotions.first != key,
                          !allowed.narrowing || occupying(.fast) <= configuration.fastWidth,
                          position + 1 < actions.count, case .start(let next, .fast, _) = actions[position + 1] {
                    // A full lane: the preemptible fast task that started first yields its place to urgent work not
                    // begun.
                    let oldest = running.filter(\.value.urgentPreemptible).min { $0.value.order < $1.value.order }!.key
                    guard key == oldest, occupying(.fast) == configuration.fastWidth, !parked.contains(next),
                          !abandoned.contains(next) else {
                        throw fail("\(action) for \(next) with \(occupying(.fast)) fast places taken, oldest preemptible "
                                   + "\(oldest)\(parked.contains(next) ? ", \(next) parked before" : "")")
                    }
                    expected = (key, .fast)
                    preemptedFor = next
                    coverage.note(.urgentPreempted)
                } else if allowed.narrowing, let lane = running[key]?.lane {
                    // The most recent start of a lane beyond its width, a pending promotion only when no other is
                    // left; that one then waits in the fast lane.
                    let width = lane == .fast ? configuration.fastWidth : slowCapacity
                    // Those in their tail go before pending promotions only, and only when parking them frees a place
                    // (more than slowWidth are in their tail, or background work is paused).
                    // So do fast tasks that stepped aside, only when more than fastWidth have.
                    let tails = running.values.count { $0.lane == .slow && $0.inTail }
                    let inLane = running.filter {
                        $0.value.lane == lane && !$0.value.lingering
                            && (!$0.value.inTail || backgroundPaused || tails > configuration.slowWidth)
                            && !$0.value.urgentOverran
                    }
                    let abandoned = self.abandoned  // parked first
                    let rank = { (key: String, task: Running) in
                        (abandoned.contains(key) ? 1 : 0, task.promotionPending ? 0 : 1, task.inTail ? 0 : 1, task.order)
                    }
                    let newest = inLane.max { rank($0.key, $0.value) < rank($1.key, $1.value) }!
                    guard occupying(lane) > width, newest.key == key else {
                        throw fail("\(action) with \(occupying(lane)) places taken in the \(lane) lane (width \(width)), newest \(newest.key)")
                    }
                    expected = (key, newest.value.promotionPending ? .fast : lane)
                    coverage.note(.parkedByNarrowing)
                } else if allowed.parks.first?.key != key, allowed.demotions.first == key {
                    allowed.demotions.removeFirst()
                    guard let first = expectDemotion(key).parks.first, first.key == key else {
                        throw fail("\(action) of \(key), abandoned past its slice, not what a demote does now")
                    }
                    expected = first
                    coverage.note(.abandonedDemoted)
                } else {
                    guard let first = allowed.parks.first, first.key == key else {
                        throw fail("unexpected \(action), expected parks \(allowed.parks.map(\.key))")
                    }
                    allowed.parks.removeFirst()
                    expected = first
                }
                guard running.removeValue(forKey: key) != nil else { throw fail("park of \(key), which is not running") }
                settlePreemptible()
                if sliced.contains(key) { settleLingering() }
                parked.insert(key)
                let task = scheduler.task(key)
                guard task?.lane == expected.lane, task?.state == .waiting, task?.promotionPending == false else {
                    throw fail("parked \(key) is \(String(describing: task)), expected waiting in the \(expected.lane) lane")
                }

            case .answer(let waiter, .failed(let failure)) where failure.code == .hostPaused:
                guard let host = allowed.pauseHost, case .pending(let key)? = waiters[waiter] else {
                    throw fail("unexpected \(action)")
                }
                if let task = scheduler.task(key) {
                    guard task.host == host, task.state != .running else { throw fail("unexpected \(action)") }
                } else {
                    guard leaveMemoryOnPause.contains(key) else { throw fail("unexpected \(action)") }
                }
                waiters[waiter] = .answered
                pending[key]?.remove(waiter)
                pendingCount -= 1
                coverage.note(.answeredFailed)

            case .answer(let waiter, let answer):
                guard let expected = allowed.answers else { throw fail("unexpected \(action)") }
                switch waiters[waiter] {
                case .pending(let key)?:
                    guard key == expected.key else { throw fail("\(waiter) waits for \(key), answered for \(expected.key)") }
                case .answered?: throw fail("\(waiter) answered a second time (\(answer))")
                case .gone?: throw fail("\(waiter) answered after it disconnected or withdrew")
                case nil: throw fail("\(waiter) answered but never asked")
                }
                guard answer == expected.answer else { throw fail("\(waiter) answered \(answer), expected \(expected.answer)") }
                waiters[waiter] = .answered
                pending[expected.key]?.remove(waiter)
                pendingCount -= 1
                switch answer {
                case .ready: coverage.note(.answeredReady)
                case .failed: coverage.note(.answeredFailed)
                case .cancelled: coverage.note(.answeredCancelled)
                }

            case .holdBackground(let held):
                guard held != reportedHold else { throw fail("\(action) repeats the last report") }
                guard position == actions.count - 1 else { throw fail("\(action) is not the last action: \(actions)") }
                reportedHold = held
                if held { coverage.note(.suspended) }

            case .forget(let key):
                guard allowed.forget == key else { throw fail("unexpected \(action)") }
                guard pending[key]?.isEmpty ?? true else { throw fail("\(action) with waiters unanswered: \(pending[key]!)") }
                guard running[key] == nil else { throw fail("\(action) while the model has it running") }
                dropTask(key)
                if diskDelayed.removeValue(forKey: key) != nil { coverage.note(.diskTaskRemoved) }

            case .toBacklog(let key):
                if allowed.pauseHost != nil, leaveMemoryOnPause.contains(key) {
                    coverage.note(.pausedToBacklog)
                } else {
                    guard allowed.toBacklog == key else { throw fail("unexpected \(action)") }
                    allowed.toBacklog = nil
                    coverage.note(.demotedToBacklog)
                }
                guard scheduler.task(key) == nil, running[key] == nil, pending[key, default: []].isEmpty else {
                    throw fail("\(action), but the task is \(String(describing: scheduler.task(key)))")
                }
                dropTask(key)
                turns[key] = nil

            case .letGo(let key):
                parked.remove(key)
                restarts[key] = nil
                notWaitedFor[key] = nil
                abandoned.remove(key)
                promoted.remove(key)
                guard scheduler.task(key) == nil, running[key] == nil, pending[key, default: []].isEmpty else {
                    throw fail("\(action), but the task is \(String(describing: scheduler.task(key)))")
                }
                attempts[key] = nil
                tries[key] = nil
                if diskDelayed.removeValue(forKey: key) != nil { coverage.note(.diskTaskRemoved) }
                backFromDisk.remove(key)

            case .remember(let key, let failure, let until):
                guard let remember = allowed.remember, remember.key == key, remember.failure == failure,
                      remember.until == until else { throw fail("unexpected \(action)") }
                negative[key] = (failure, until)

            case .pauseHost(let host, let until):
                guard allowed.pauseHost == host, until == now + configuration.hostPause else { throw fail("unexpected \(action)") }
                pausedHosts[host] = until
                coverage.note(.hostPaused)
                // What waits on it goes to the slow lane, abandoned no more.
                abandoned = abandoned.filter { running[$0] != nil || scheduler.task($0)?.host != host }
            }
        }
        settleLingering()
        guard allowed.demotions.isEmpty else {
            throw fail("\(allowed.demotions) ran for a slice abandoned, not demoted: \(actions)")
        }
        let counts = scheduler.counts
        guard !slowStarted || counts.fastWaiting + counts.fastRunning == 0 else {
            throw fail("a slow task started while fast work waits or runs: \(actions), counts \(counts)")
        }
    }

    /// Lingering tasks take the slow lane's free places, without an action: pending promotions first, then the
    /// earliest starts.
    mutating func settleLingering() {
        let rank = { (task: Running) in (task.promotionPending ? 0 : 1, task.order) }
        while occupying(.slow) < slowCapacity,
              let next = running.filter({ $0.value.lingering }).min(by: { rank($0.value) < rank($1.value) }) {
            running[next.key]?.lingering = false
            running[next.key]?.sliceFrom = now
            coverage.note(.lingeringTookPlace)
        }
    }

    /// Running slow tasks that stepped aside after their slice.
    var overrunCount: Int { running.values.count(where: \.overran) }

    /// Round robin between the fast lane's turns: the turn of `key`, starting (or taking its pending promotion in),
    /// must not have started fast work already since another turn had work that could start, all along.
    /// `notBegunOnly`: the start took a preemptible task's place, which only work not begun may take.
    mutating func checkTurn(of key: String, notBegunOnly: Bool = false) throws(Violation) {
        guard let turn = scheduler.task(key)?.servedInTurn, turns[key]?.contains(turn) == true else {
            throw fail("\(key) starts in the fast lane in turn \(String(describing: scheduler.task(key)?.servedInTurn)), "
                       + "not one of its turns \(turns[key] ?? [])")
        }
        let startable = startableTurns(besides: key, notBegunOnly: notBegunOnly)
        for other in startable where other != turn {
            if startedWhileWaiting[other, default: []].contains(turn) {
                throw fail("turn \(turn) started \(key), again, while turn \(other) had work that could start")
            }
            startedWhileWaiting[other, default: []].insert(turn)
            coverage.note(.turnTaken)
        }
        startedWhileWaiting = startedWhileWaiting.filter { startable.contains($0.key) && $0.key != turn }
    }

    /// The turns with fast work (not abandoned) that could start now, besides `key`: waiting, its host neither paused
    /// nor at per_host nor out of tokens, or a pending promotion.
    func startableTurns(besides key: String, notBegunOnly: Bool = false) -> Set<UInt64> {
        var startable = notBegunOnly ? []
            : Set(running.filter { $0.key != key && $0.value.promotionPending }.flatMap { turns[$0.key] ?? [] })
        for task in scheduler.allTasks where task.key != key && task.state == .waiting && task.lane == .fast
            && running[task.key] == nil && !abandoned.contains(task.key) && !(notBegunOnly && parked.contains(task.key)) {
            if let until = pausedHosts[task.host], until > now { continue }
            if let limit = configuration.perHostLimit, running.values.count(where: { $0.host == task.host }) >= limit {
                continue
            }
            if tokens(task.host) < 1 { continue }
            startable.formUnion(turns[task.key] ?? [])
        }
        return startable
    }

    /// Who takes the place a preemptible task yields in a park at `position`: a lingering task (they take places
    /// first), else the task demoted or started right after it (not one parked after its slice).
    func placeTaker(after position: Int, in actions: [Action]) -> String? {
        if let lingering = running.filter(\.value.lingering).keys.min() { return lingering }
        guard position + 1 < actions.count else { return nil }
        switch actions[position + 1] {
        case .changeLane(let next, .slow): return next
        case .start(let next, .slow, _) where !sliced.contains(next): return next
        default: return nil
        }
    }

    /// Whether an abandoned task running in the fast lane may be parked at `position` for work someone waits for: in a
    /// full lane, the newest abandoned task, for the start that follows; on a host at per_host, the newest abandoned
    /// task there, for that host's start that follows (after the park of a task in a full lane, when this one took no
    /// place: it stepped aside after its urgent slice), or its next token.
    mutating func abandonedMayYield(_ key: String, _ task: Running, after position: Int, in actions: [Action]) -> Bool {
        let next = fastPlaceTaker(after: position, in: actions)
        if occupying(.fast) == configuration.fastWidth, next != nil,
           key == abandonedHoldingPlace.max(by: { $0.value.order < $1.value.order })?.key {
            coverage.note(.abandonedYielded)
            return true
        }
        let waitingOnHost = scheduler.allTasks.contains {
            $0.state == .waiting && $0.lane == .fast && $0.host == task.host && !abandoned.contains($0.key)
        }
        guard let limit = configuration.perHostLimit, running.values.count(where: { $0.host == task.host }) >= limit,
              key == abandonedRunning.filter({ $0.value.host == task.host }).max(by: { $0.value.order < $1.value.order })?.key,
              next.flatMap({ scheduler.task($0)?.host }) == task.host || waitingOnHost && tokens(task.host) < 1
                || task.urgentOverran && nextAfterParks(position, actions).flatMap({ scheduler.task($0)?.host }) == task.host
        else { return false }
        coverage.note(.abandonedYieldedHost)
        return true
    }

    /// Who takes a fast place after the parks that follow `position`.
    func nextAfterParks(_ position: Int, _ actions: [Action]) -> String? {
        let parks = actions[(position + 1)...].prefix { if case .park = $0 { true } else { false } }.count
        return fastPlaceTaker(after: position + parks, in: actions)
    }

    /// Who takes the fast place an abandoned task gives up in a park at `position`: the task someone waits for that
    /// starts right after it, or the pending promotion that moves in.
    func fastPlaceTaker(after position: Int, in actions: [Action]) -> String? {
        guard position + 1 < actions.count else { return nil }
        switch actions[position + 1] {
        case .start(let next, .fast, _) where !abandoned.contains(next): return next
        case .changeLane(let next, .fast) where running[next]?.promotionPending == true: return next
        default: return nil
        }
    }

    /// Room past a slice goes at once to the preemptible tasks, the longest running first: they step aside.
    mutating func settlePreemptible() {
        settleUrgentPreemptible()
        while overrunCount < configuration.slowWidth,
              let key = running.filter(\.value.preemptible).min(by: { $0.value.order < $1.value.order })?.key {
            running[key]?.preemptible = false
            running[key]?.inTail = true
            running[key]?.overran = true
            coverage.note(.preemptibleSteppedAside)
        }
    }

    /// Waiting slow tasks not parked after their slice whose host lets them start now (the lane aside).
    func slowStartable() -> [String] {
        scheduler.allTasks.filter { task in
            guard task.state == .waiting, task.lane == .slow, !sliced.contains(task.key) else { return false }
            if let until = pausedHosts[task.host], until > now { return false }
            if running.values.contains(where: { ($0.overran || $0.preemptible) && $0.host == task.host }) { return false }
            if slicedTask(of: task.host) != nil { return false }
            if let limit = configuration.perHostLimit, running.values.count(where: { $0.host == task.host }) >= limit {
                return false
            }
            return tokens(task.host) >= 1
        }.map(\.key)
    }

    /// A task of `host` parked after its slice and waiting.
    func slicedTask(of host: String) -> String? {
        sliced.sorted().first { scheduler.task($0)?.host == host }
    }

    /// What must hold between any two steps.
    mutating func checkInvariants() throws(Violation) {
        // A task parked after its slice stops being one when it leaves the slow lane's queue (promoted, gone).
        sliced = sliced.filter { scheduler.task($0).map { $0.state == .waiting && $0.lane == .slow } ?? false }
        let tasks = scheduler.allTasks
        // A turn without fast work waiting may leave the round: it starts afresh when work comes.
        let waitingTurns = tasks.filter {
            ($0.state == .waiting && $0.lane == .fast || $0.promotionPending) && !abandoned.contains($0.key)
        }.flatMap { turns[$0.key] ?? [] }
        startedWhileWaiting = startedWhileWaiting.filter { waitingTurns.contains($0.key) }
        for url in RandomWorld.keys where scheduler.hasTask(url.key) != (scheduler.task(url.key) != nil) {
            throw fail("hasTask(\(url.key)) disagrees with task(_:)")
        }
        let counts = scheduler.counts
        let passedOver = Set(running.values.filter { $0.overran || $0.preemptible }.map(\.host)
                                 + sliced.compactMap { scheduler.task($0)?.host })
        let heldNow = passedOver.union(scheduler.paused.filter { $0.until > now }.map(\.host))
        if slowCapacity > 0, running.values.contains(where: \.lingering), running.values.contains(where: \.preemptible) {
            throw fail("a task lingers while a preemptible one keeps its place in the slow lane")
        }
        for host in RandomWorld.keys.map(\.authority) where scheduler.isPassedOver(host) != passedOver.contains(host) {
            throw fail("isPassedOver(\(host)) is \(scheduler.isPassedOver(host)), the model disagrees")
        }
        let blocked = tasks.count { $0.state == .waiting && $0.lane == .slow && heldNow.contains($0.host) }
        guard scheduler.slowWaitingOnHeldHosts(at: now) == blocked else {
            throw fail("\(scheduler.slowWaitingOnHeldHosts(at: now)) slow tasks wait on paused or passed-over hosts, recounted \(blocked)")
        }
        var recomputed = LaneCounts()
        var earliest: Moment?
        var runningCount = 0
        var waitingTasks = 0
        for (i, task) in tasks.enumerated() {
            for j in 0..<i where tasks[j].key == task.key { throw fail("two tasks for \(task.key)") }
            switch (task.state, task.lane) {
            case (.waiting, .fast): recomputed.fastWaiting += 1; waitingTasks += 1
            case (.waiting, .slow): recomputed.slowWaiting += 1; waitingTasks += 1
            case (.running, let lane):
                if task.lingering { recomputed.lingering += 1 }
                else if lane == .fast { recomputed.fastRunning += 1 } else { recomputed.slowRunning += 1 }
                runningCount += 1
                guard running[task.key]?.lingering == task.lingering else {
                    throw fail("\(task.key) \(task.lingering ? "lingers" : "does not linger"), the model has \(String(describing: running[task.key]))")
                }
                guard running[task.key]?.lane == lane, running[task.key]?.promotionPending == task.promotionPending else {
                    throw fail("\(task.key) runs in the \(lane) lane\(task.promotionPending ? ", promotion pending" : ""), "
                               + "the model has \(String(describing: running[task.key]))")
                }
            case (.delayed(let until), _):
                recomputed.delayed += 1
                guard until > now else { throw fail("\(task.key) is still delayed until \(until) at \(now)") }
                earliest = min(earliest ?? until, until)
            }
            recomputed.waiters += task.waiters.count
            guard task.attempts == attempts[task.key, default: 0], task.tries == tries[task.key, default: 0] else {
                throw fail("\(task.key) has \(task.attempts) attempts and \(task.tries) tries, the model "
                           + "\(attempts[task.key, default: 0]) and \(tries[task.key, default: 0])")
            }
            guard task.state == .running || !task.promotionPending else {
                throw fail("\(task.key) is \(task.state) with a promotion pending")
            }
            guard task.tentative == tentative.contains(task.key) else {
                throw fail("\(task.key) is \(task.tentative ? "" : "not ")tentative, the model says otherwise")
            }
            guard scheduler.holdCount(task.key) == holds[task.key, default: 0] else {
                throw fail("\(task.key) is held \(scheduler.holdCount(task.key)) times, the model says \(holds[task.key, default: 0])")
            }
            // Same waiters as the model: same count, all known, none twice. (Plain loops: this runs every step.)
            let expected = pending[task.key]
            guard task.waiters.count == expected?.count ?? 0 else {
                throw fail("\(task.key) has waiters \(task.waiters), the model \(expected ?? [])")
            }
            if let expected, !expected.isEmpty {
                for (j, waiter) in task.waiters.enumerated() {
                    var twice = false
                    for k in 0..<j where task.waiters[k] == waiter { twice = true }
                    guard expected.contains(waiter), !twice else {
                        throw fail("\(task.key) has waiters \(task.waiters), the model \(expected)")
                    }
                }
            }
        }
        guard runningCount == running.count else { throw fail("the model has \(running) running, the tasks \(tasks)") }
        recomputed.slowInTail = running.values.count { $0.inTail }
        recomputed.fastSteppedAside = fastSteppedAside
        guard counts == recomputed else { throw fail("counts \(counts) but the tasks say \(recomputed)") }
        guard scheduler.parkedCount == parked.count else {
            throw fail("\(scheduler.parkedCount) tasks counted parked, the model has \(parked.sorted())")
        }
        guard counts.waiters == pendingCount else { throw fail("\(counts.waiters) waiters counted, \(pendingCount) in the model") }
        // Background transfers are held exactly while urgent ones run.
        guard reportedHold == (counts.fastRunning > 0) else { throw fail("last report \(reportedHold), counts \(counts)") }
        guard scheduler.waitingForDiskUntil == diskWaitUntil else {
            throw fail("the scheduler waits for the disk until \(String(describing: scheduler.waitingForDiskUntil)), "
                       + "the model until \(String(describing: diskWaitUntil))")
        }
        for (key, until) in diskDelayed where scheduler.task(key)?.state != .delayed(until: until) {
            throw fail("\(key) should wait for the disk until \(until), it is \(String(describing: scheduler.task(key)))")
        }
        // nextDeadline is the earliest retry, end of a host pause, end of the disk wait or end of a slow task's slice
        // (or, with start rates, a token that comes sooner).
        let sliceEnd = configuration.backgroundSlice.flatMap { slice in
            running.filter { $0.value.lane == .slow && !$0.value.lingering && !$0.value.inTail && !$0.value.preemptible }
                .map { $0.value.sliceFrom + (slice << min(restarts[$0.key, default: 0], 6)) }.min()
        }
        // Or the end of the first slice an abandoned task runs in the fast lane, which is then demoted.
        let abandonedSliceEnd = configuration.backgroundSlice.flatMap { slice in
            self.abandonedRunning.map { $0.value.startedAt + slice }.min()
        }
        if let abandonedSliceEnd, abandonedSliceEnd <= now {
            throw fail("an abandoned task runs in the fast lane past its slice (ended \(abandonedSliceEnd))")
        }
        // Or the end of a fast task's urgent slice, while it could step aside.
        let urgentSliceEnd = urgentSliceEnds.map(\.end).min()
        let expectedDeadline = [earliest, pausedHosts.values.min(), diskWaitUntil, sliceEnd, abandonedSliceEnd,
                                urgentSliceEnd].compactMap { $0 }.min()
        let deadlineMatches = configuration.hostStartRate == nil
            ? scheduler.nextDeadline == expectedDeadline
            : expectedDeadline.map { expected in scheduler.nextDeadline.map { $0 <= expected } ?? false } ?? true
        guard deadlineMatches else {
            throw fail("nextDeadline \(String(describing: scheduler.nextDeadline)), earliest retry \(String(describing: earliest)), "
                       + "pauses \(pausedHosts), disk wait \(String(describing: diskWaitUntil))")
        }

        // Widths bound the running tasks at every moment: a lane change in place needs room in the lane it enters.
        let slowRunning = occupying(.slow)
        // Lingering tasks: at most fastWidth, none whose response began, none in the fast lane, and while background
        // work is paused only those an urgent waiter wants.
        let lingering = running.filter { $0.value.lingering }
        guard lingering.isEmpty || occupying(.slow) >= slowCapacity else {
            throw fail("\(lingering.keys.sorted()) linger while the slow lane has room")
        }
        guard lingering.count <= configuration.fastWidth,
              lingering.allSatisfy({ !$0.value.responded && $0.value.lane == .slow
                                     && (!backgroundPaused || $0.value.promotionPending) }) else {
            throw fail("lingering \(lingering) (fastWidth \(configuration.fastWidth)\(backgroundPaused ? ", paused" : ""))")
        }
        var fastRunning = 0, promotionsPending = 0
        var perHost: [(host: String, running: Int)] = []
        for task in running.values {
            if task.lane == .fast { fastRunning += 1 }
            if task.promotionPending { promotionsPending += 1 }
            if configuration.perHostLimit != nil {
                if let i = perHost.firstIndex(where: { $0.host == task.host }) { perHost[i].running += 1 }
                else { perHost.append((task.host, 1)) }
            }
        }
        let slowOccupied = counts.slowRunning - (backgroundPaused ? 0 : min(counts.slowInTail, configuration.slowWidth))
        guard slowRunning <= slowCapacity, slowOccupied <= slowCapacity else {
            throw fail("\(slowRunning) slow tasks running in their places (counted \(slowOccupied)), room for \(slowCapacity)"
                       + (backgroundPaused ? " (background paused)" : ""))
        }

        guard scheduler.backgroundPaused == backgroundPaused else {
            throw fail("the scheduler says background paused \(scheduler.backgroundPaused), the model \(backgroundPaused)")
        }
        // Those past their urgent slice take no place: at most twice the width run.
        let fastOccupied = occupying(.fast)
        guard fastOccupied <= configuration.fastWidth, fastRunning <= 2 * configuration.fastWidth,
              fastSteppedAside <= configuration.fastWidth, counts.fastRunning - counts.fastSteppedAside == fastOccupied else {
            throw fail("\(fastRunning) fast tasks running, \(fastOccupied) in their places (counted \(counts)), "
                       + "width \(configuration.fastWidth)")
        }
        // A promotion waits only for a fast slot, and none an abandoned task holds.
        let abandonedRunning = !abandonedHoldingPlace.isEmpty
        guard promotionsPending == 0 || fastOccupied >= configuration.fastWidth && !abandonedRunning else {
            throw fail("\(promotionsPending) promotions pending with \(fastRunning) fast tasks running (width \(configuration.fastWidth))")
        }
        if let limit = configuration.perHostLimit {
            for (host, count) in perHost where count > limit {
                throw fail("per-host limit \(limit) exceeded on \(host): \(running)")
            }
        }

        // Work-conserving: a waiting task has a reason to wait.
        guard waitingTasks > 0 else { return }
        for task in tasks where task.state == .waiting {
            var hostFull = false
            if let limit = configuration.perHostLimit {
                for (host, count) in perHost where host == task.host { hostFull = count >= limit }
                // Not a reason when a task nobody waits for any more holds a place there (it gives it up), if the
                // lane then has room for it (one that stepped aside gives none).
                if hostFull, task.lane == .fast, !abandoned.contains(task.key),
                   running.contains(where: { $0.value.host == task.host && $0.value.lane == .fast && !$0.value.lingering
                                             && abandoned.contains($0.key)
                                             && (!$0.value.urgentOverran || fastOccupied < configuration.fastWidth) }) {
                    throw fail("\(task.key) waits for its host's per_host limit while an abandoned task holds a place there")
                }
            }
            if hostFull { coverage.note(.hostLimited) }
            if let until = pausedHosts[task.host], until > now { hostFull = true }
            if task.lane == .slow, running.values.contains(where: { ($0.overran || $0.preemptible) && $0.host == task.host }) {
                hostFull = true
                coverage.note(.passedOverAfterSlice)
            }
            if task.lane == .slow, !sliced.contains(task.key), slicedTask(of: task.host) != nil { hostFull = true }
            // The disk wait holds back the slow lane only: urgent work still starts. A preemptible task's place is
            // room for any task but one parked after its slice.
            let yielding = !sliced.contains(task.key) && running.values.contains(where: \.preemptible)
            let slowLaneFull = counts.slowSuspended || slowCapacity == 0 || slowOccupied >= slowCapacity && !yielding
            // Work someone waits for takes the place of a running task nobody waits for any more.
            let abandonedPlace = abandonedRunning && !abandoned.contains(task.key)
                // And urgent work not begun takes a preemptible one's.
                || running.values.contains(where: \.urgentPreemptible) && !abandoned.contains(task.key)
                    && !parked.contains(task.key)
            let room = task.lane == .fast ? fastOccupied < configuration.fastWidth || abandonedPlace
                : !slowLaneFull && diskWaitUntil == nil
            if let rate = configuration.hostStartRate, room, !hostFull, tokens(task.host) < 1 {
                // Waiting for a token is a reason only while a wake-up for it is due (give or take the rounding to
                // whole milliseconds, done when the scheduler last looked).
                let due = now + Int64(((1 - tokens(task.host)) * 1000 / rate.perSecond).rounded(.up))
                guard let deadline = scheduler.nextDeadline, deadline <= due + 1 else {
                    throw fail("\(task.key) waits for a token due at \(due) but nextDeadline is \(String(describing: scheduler.nextDeadline))")
                }
                hostFull = true
                coverage.note(.tokenLimited)
            }
            switch task.lane {
            case .fast:
                guard hostFull || fastOccupied >= configuration.fastWidth && !abandonedPlace else {
                    throw fail("\(task.key) waits in the fast lane with room to run (counts \(counts)\(abandonedPlace ? ", an abandoned task runs" : ""))")
                }
            case .slow:
                guard hostFull || slowLaneFull || diskWaitUntil != nil else {
                    throw fail("\(task.key) waits in the slow lane with room to run (counts \(counts))")
                }
                if !hostFull, !slowLaneFull { coverage.note(.waitedForDisk) }
                if !hostFull, backgroundPaused, !counts.slowSuspended, counts.slowRunning < configuration.slowWidth {
                    coverage.note(.waitedForPause)
                }
            }
        }
    }

    /// The model's start tokens for `host` now.
    func tokens(_ host: String) -> Double {
        guard let rate = configuration.hostStartRate else { return .infinity }
        guard let bucket = buckets[host] else { return Double(rate.burst) }
        let elapsed = Double(max(0, now.milliseconds - bucket.at.milliseconds))
        return min(Double(rate.burst), bucket.tokens + elapsed * rate.perSecond / 1000)
    }

    /// Lets time pass and finishes everything with success until no task is left; then every waiter that did not
    /// leave must have had exactly one answer.
    mutating func drain() throws(Violation) {
        // Paused background work waits for the pause to end: end it, so that everything can finish.
        if backgroundPaused { try apply(.pauseBackground(false)) }
        var rounds = 0
        while !scheduler.allTasks.isEmpty {
            rounds += 1
            guard rounds < 1_000 else { throw fail("drain does not end") }
            if !running.isEmpty {
                for key in running.keys.sorted() { try apply(.finish(key: RandomWorld.keyIndex[key]!, .ok)) }
            } else if let deadline = scheduler.nextDeadline {
                try apply(.advance(by: max(0, deadline.milliseconds - now.milliseconds)))
            } else {
                currentOp = nil
                throw fail("stuck: tasks remain, none runs and no retry is due: \(scheduler.allTasks)")
            }
        }
        currentOp = nil
        let unanswered = waiters.filter { if case .pending = $0.value { true } else { false } }.keys
        guard unanswered.isEmpty else { throw fail("never answered: \(unanswered.sorted { "\($0)" < "\($1)" })") }
    }
}

/// A generated sequence: its configuration, the scheduler's seed and the operations.
struct Scenario {
    var seed: UInt64
    var configuration: Scheduler.Configuration
    var schedulerSeed: UInt64
    var ops: [Op]

    /// Generates a sequence from `seed` while running it; returns it with the first violation, if any, and what it
    /// covered. `slowServers`: short slices, and half the steps queue, advance time or reach a tail, so that several
    /// slow tasks run past their slices at once (preemptible, parked for another, started again).
    static func generate(seed: UInt64, slowServers: Bool = false) -> (Scenario, Violation?, Coverage) {
        var rng = SplitMix64(seed: seed)
        /// A number in `range` (plain modulo: the bias is irrelevant here, and the generic `random(in:using:)` is
        /// slow in debug builds, which is how tests run).
        func below(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
        func roll(_ range: ClosedRange<Int>) -> Int { range.lowerBound + below(range.count) }
        func coin() -> Bool { rng.next() & 1 == 0 }
        func element<T>(_ items: [T]) -> T? { items.isEmpty ? nil : items[below(items.count)] }
        let retry = RetryPolicy(maxAttempts: roll(1...3), baseDelay: 100, maxDelay: 800,
                                retryAfterCap: 1_500, negativeTTL: Int64(roll(500...4_000)))
        let configuration = Scheduler.Configuration(
            fastWidth: roll(1...4), slowWidth: roll(1...2),
            perHostLimit: coin() ? roll(1...2) : nil, retry: retry,
            hostFailureThreshold: coin() ? roll(1...3) : nil, hostPause: Int64(roll(100...2_000)),
            hostStartRate: coin() ? .init(perSecond: Double(roll(1...20)), burst: roll(1...3)) : nil,
            // From the seed, not the generator: the sequences stay the ones the coverage floors were set for.
            backgroundSlice: slowServers ? 200 + Int64(seed % 801) : seed % 3 == 0 ? nil : 200 + Int64(seed / 3 % 2_801),
            urgentSlice: seed % 2 == 0 ? nil : 300 + Int64(seed / 2 % 3_001),
            slowWaitingKept: seed % 4 < 2 ? Int(seed / 4 % 3) : nil)
        var scenario = Scenario(seed: seed, configuration: configuration, schedulerSeed: rng.next(), ops: [])
        var runner = Runner(configuration: configuration, seed: scenario.schedulerSeed)
        var issued: [Waiter] = []
        var nextRequest: UInt64 = 1
        /// A connection that dropped: the other running transfers of its host fail with it, one step each.
        var dropping: (host: String, connection: Int)?

        func cache() -> CacheState {
            switch below(20) {
            case 0..<12: .missing
            case 12..<17: .stale
            default: .fresh
            }
        }
        /// Half the time, a key whose task is in `lane` (any lane when nil), waiting ones first, so that lane
        /// changes of waiting and running tasks are both common.
        func pick(lane: Lane?) -> Int? {
            guard coin() else { return nil }
            let tasks = runner.scheduler.allTasks.filter { lane == nil || $0.lane == lane }
            let waiting = tasks.filter { $0.state == .waiting }
            let keys = (waiting.isEmpty || coin() ? tasks : waiting).map(\.key).sorted()
            return element(keys).flatMap { RandomWorld.keyIndex[$0] }
        }
        let count = roll(40...120)
        do {
            for _ in 0..<count {
                let op: Op
                let key = below(RandomWorld.keys.count)
                let spelling = below(RandomWorld.spellings.count)
                let droppedNext = dropping.flatMap { drop in
                    runner.running.filter { $0.value.host == drop.host }.keys.sorted().first
                }
                if droppedNext == nil { dropping = nil }
                var draw = droppedNext == nil ? below(100) : -1
                if slowServers, draw >= 0, coin() { draw = element([18, 18, 18, 96, 99, 99])! }  // queue, tail, advance
                switch draw {
                case -1:
                    op = .finish(key: RandomWorld.keyIndex[droppedNext!]!, .network(connection: dropping!.connection))
                case 0..<18:
                    let waiter = Waiter(client: UInt64(roll(RandomWorld.clients)), request: nextRequest)
                    nextRequest += 1
                    issued.append(waiter)
                    op = below(3) == 0 ? .viewGet(spelling: spelling, waiter: waiter, cache: cache())
                        : .get(spelling: spelling, waiter: waiter, cache: cache())
                case 18..<26:
                    op = coin() ? .prefetch(spelling: spelling, cache: cache()) : .queue(spelling: spelling, cache: cache())
                case 26..<30:
                    // Mostly tentative tasks nobody holds yet: the ones an unhold may drop.
                    let unheld = runner.tentative.filter { runner.holds[$0] == nil && runner.running[$0] == nil }
                        .sorted().compactMap { RandomWorld.keyIndex[$0] }
                    op = .hold(key: below(4) != 0 ? element(unheld) ?? key : pick(lane: nil) ?? key)
                case 30..<36:
                    let held = runner.holds.keys.sorted()
                    // Droppable ones first: tentative, not running (parked or waiting), nobody waiting.
                    let tentative = held.filter {
                        runner.tentative.contains($0) && runner.running[$0] == nil && runner.pending[$0, default: []].isEmpty
                    }
                    let choice = below(4) != 0 ? element(tentative) ?? element(held) : element(held)
                    op = .unhold(key: choice.flatMap { RandomWorld.keyIndex[$0] } ?? key, dropping: below(4) != 0)
                case 36..<42: op = .demote(key: pick(lane: .fast) ?? key)
                case 42..<46:
                    // Running slow tasks half the time: with the fast lane full, their promotion waits for a slot.
                    let runningSlow = runner.running.filter { $0.value.lane == .slow }.keys.sorted()
                    op = .promote(key: (coin() ? element(runningSlow).flatMap { RandomWorld.keyIndex[$0] } : nil)
                                  ?? pick(lane: .slow) ?? key)
                case 46..<50: op = .cancel(key: pick(lane: nil) ?? key)
                case 50..<53:
                    // Odd clients leave with a bound on the urgent tasks kept (drawn without a roll of its own, so
                    // that the other steps stay as they were).
                    let client = roll(RandomWorld.clients)
                    op = .disconnect(client: UInt64(client), urgentKept: client % 2 == 0 ? .max : client / 2 % 3)
                case 53..<57:
                    // Mostly a waiter that still waits (the release that demotes, or parks, its task).
                    let waiting = runner.waiters.filter { if case .pending = $0.value { true } else { false } }.keys
                        .sorted { ($0.client, $0.request) < ($1.client, $1.request) }
                    let one = (below(4) != 0 ? element(waiting) : nil) ?? element(issued) ?? Waiter(client: 1, request: 999)
                    if below(3) == 0 {
                        // A scroll: several at once, often waiters of one task, sometimes one twice.
                        let sameTask = waiting.filter { runner.waiters[$0] == runner.waiters[one] }
                        op = .release([one] + (0..<roll(1...4)).compactMap { _ in element(coin() ? sameTask : waiting) })
                    } else {
                        op = .release([one])
                    }
                case 57..<59:
                    op = below(2) == 0 ? .widths(fast: roll(1...4), slow: roll(1...2)) : .pauseBackground(!runner.backgroundPaused)
                case 59..<67 where runner.running.values.contains(where: \.lingering),
                     87..<96 where runner.running.values.contains(where: \.lingering)
                    || runner.occupying(.slow) >= runner.slowCapacity
                    && runner.running.values.contains(where: { $0.lane == .fast && !$0.responded }):
                    // Lingering: a demote that makes a task linger, then its response, a promotion, or what parks
                    // lingering ones (a narrower fast lane, a pause).
                    let lingering = runner.running.filter { $0.value.lingering }.keys.sorted()
                    let candidates = runner.running.filter { $0.value.lane == .fast && !$0.value.responded }.keys.sorted()
                    let index = { (key: String) in RandomWorld.keyIndex[key]! }
                    switch lingering.isEmpty ? 0 : below(12) {
                    case 0 where !candidates.isEmpty, 1 where !candidates.isEmpty: op = .demote(key: index(element(candidates)!))
                    case 0, 1, 2, 3: op = .response(key: index(element(lingering)!))
                    case 4: op = .promote(key: index(element(lingering)!))
                    case 5 where lingering.count > 1:
                        op = .widths(fast: lingering.count - 1, slow: runner.configuration.slowWidth)
                    case 6...9 where runner.configuration.perHostLimit != nil:
                        // Urgent work for the other URL of a lingering task's host: per_host may hold it back.
                        let waiter = Waiter(client: UInt64(roll(RandomWorld.clients)), request: nextRequest)
                        nextRequest += 1
                        issued.append(waiter)
                        op = .get(spelling: index(element(lingering)!) ^ 1, waiter: waiter, cache: .missing)
                    default: op = .pauseBackground(!runner.backgroundPaused)
                    }
                case 59..<84 where !runner.running.isEmpty:
                    let running = runner.running.keys.sorted()
                    let finishKey = RandomWorld.keyIndex[element(running)!]!
                    let kind: FinishKind
                    switch below(10) {
                    case 0..<4: kind = .ok
                    case 4: kind = .serverError(retryAfter: nil)
                    case 5: kind = .serverError(retryAfter: Int64(roll(0...3_000)))
                    case 6:
                        let host = runner.running[RandomWorld.keys[finishKey].key]!.host
                        let connection = roll(0...1)
                        if runner.running.values.count(where: { $0.host == host }) > 1, coin() {
                            dropping = (host, connection)
                            kind = .network(connection: connection)
                        } else {
                            kind = .network(connection: coin() ? nil : connection)
                        }
                    case 7: kind = .notFound
                    case 8: kind = .unreachable
                    default: kind = coin() ? .diskFull : .local
                    }
                    op = .finish(key: finishKey, kind)
                case 84..<87 where runner.running.values.contains(where: { !$0.responded }):
                    // Mostly a lingering one's, else any whose response has not begun.
                    let lingering = runner.running.filter { $0.value.lingering }.keys.sorted()
                    let waiting = runner.running.filter { !$0.value.responded }.keys.sorted()
                    op = .response(key: RandomWorld.keyIndex[(coin() ? element(lingering) : nil) ?? element(waiting)!]!)
                case 96..<99 where runner.running.values.contains(where: { $0.lane == .slow }):
                    let runningSlow = runner.running.filter { $0.value.lane == .slow }.keys.sorted()
                    op = .tail(key: RandomWorld.keyIndex[element(runningSlow)!]!)
                default:
                    switch below(10) {
                    case 0..<4: op = .advance(by: Int64(roll(0...300)))
                    case 4..<7:
                        let deadline = runner.scheduler.nextDeadline?.milliseconds ?? runner.now.milliseconds + 100
                        op = .advance(by: max(0, deadline - runner.now.milliseconds))
                    default: op = .advance(by: Int64(roll(0...5_000)))
                    }
                }
                scenario.ops.append(op)
                try runner.apply(op)
            }
            try runner.drain()
        } catch {
            return (scenario, error, runner.coverage)
        }
        return (scenario, nil, runner.coverage)
    }

    func run(_ ops: [Op]) -> Violation? { Runner.run(ops, configuration: configuration, seed: schedulerSeed) }

    func report(shortest: [Op], violation: Violation) -> String {
        let c = configuration
        var lines = [
            "random sequence with seed 0x\(String(seed, radix: 16)) violates the scheduler's contract",
            "configuration: fastWidth \(c.fastWidth), slowWidth \(c.slowWidth), perHostLimit "
                + "\(c.perHostLimit.map(String.init) ?? "none"), maxAttempts \(c.retry.maxAttempts), negativeTTL "
                + "\(c.retry.negativeTTL)ms, scheduler seed 0x\(String(schedulerSeed, radix: 16))",
            "shortest failing sequence (\(shortest.count) of \(ops.count) operations, then drain):",
        ]
        for (i, op) in shortest.enumerated() { lines.append("  \(i + 1). \(op)") }
        lines.append("violation: \(violation)")
        return lines.joined(separator: "\n")
    }
}

/// Removes operations while `fails` still holds: chunks first, then one at a time until no single removal keeps
/// it failing.
func shrink<T>(_ items: [T], fails: ([T]) -> Bool) -> [T] {
    var items = items
    var chunk = max(1, items.count / 2)
    while true {
        var removed = false
        var start = 0
        while start < items.count {
            let candidate = Array(items[..<start] + items[min(items.count, start + chunk)...])
            if fails(candidate) {
                items = candidate
                removed = true
            } else {
                start += chunk
            }
        }
        if chunk > 1 { chunk = max(1, chunk / 2) } else if !removed { return items }
    }
}

@Suite("Random operation sequences")
struct RandomOperationTests {
    @Test("random operation sequences keep every invariant (10 batches × 1,000 seeded sequences)",
          arguments: 0..<RandomWorld.batches)
    func randomSequences(batch: Int) {
        var total = 0
        for i in 0..<RandomWorld.sequencesPerBatch {
            let seed = 0x5EED_0000 &+ UInt64(batch * RandomWorld.sequencesPerBatch + i) &* 0x9E37_79B9
            let (scenario, violation, _) = Scenario.generate(seed: seed)
            total += scenario.ops.count
            guard violation != nil else { continue }
            let shortest = shrink(scenario.ops) { scenario.run($0) != nil }
            Issue.record(Comment(rawValue: scenario.report(shortest: shortest, violation: scenario.run(shortest)!)))
            return
        }
        #expect(total >= 40 * RandomWorld.sequencesPerBatch)
    }

    @Test("random sequences with slow servers (short slices, several fetches past theirs at once) keep every invariant and reach each way a slice ends (2,000 seeded sequences)")
    func slowServerSequences() {
        var total = Coverage()
        for i in 0..<2_000 {
            let seed = 0x5105_0000 &+ UInt64(i) &* 0x9E37_79B9
            let (scenario, violation, coverage) = Scenario.generate(seed: seed, slowServers: true)
            total.add(coverage)
            guard violation != nil else { continue }
            let shortest = shrink(scenario.ops) { scenario.run($0) != nil }
            Issue.record(Comment(rawValue: scenario.report(shortest: shortest, violation: scenario.run(shortest)!)))
            return
        }
        for situation in Situation.slices {
            let count = total.counts[situation, default: 0]
            // A demote with the slow lane full and a task in it past its slice: 32 times (LaneTests.demoteIntoYieldedPlace);
            // a second park without bytes after a doubled slice: 8 times (LaneTests.restartedSliceDoubles).
            let floor = situation == .demotedIntoYieldedPlace ? 20 : situation == .restartedAgain ? 5 : 100
            #expect(count >= floor, "\(situation.rawValue) happened only \(count) times in 2,000 sequences")
        }
    }

    @Test("the same seed generates the same sequence")
    func deterministic() {
        let (a, _, _) = Scenario.generate(seed: 7)
        let (b, _, _) = Scenario.generate(seed: 7)
        #expect(a.ops == b.ops && a.configuration == b.configuration && a.schedulerSeed == b.schedulerSeed)
        #expect(a.run(a.ops) == nil)
    }

    @Test("the random sequences reach every interesting situation")
    func coverage() {
        var total = Coverage()
        for i in 0..<2_000 {
            let (_, violation, coverage) = Scenario.generate(seed: 0xC0DE &+ UInt64(i))
            #expect(violation == nil)
            total.add(coverage)
        }
        for situation in Situation.allCases where !Situation.slices.contains(situation) {
            let count = total.counts[situation, default: 0]
            // More parked tasks than fastWidth, one of them held by a view and let go of, takes a rare state of its
            // own: 9 times in 1,600 sequences (ViewSchedulingTests.dropParkedBeyondFastWidth tests it directly).
            // A try that reached nothing for over 5 s, with someone waiting, needs long advances of time: 11 times,
            // and a get during its backoff 3 (LaneTests.longUnreachedTryIsNotRepeatedForWaiters, longRetryIsNotWaitedFor
            // and retryNotWaitedForEdges test both directly). What several fetches past their slices at once do is
            // counted in the sequences with slow servers (`slowServerSequences`).
            // A download another gone client left parked, let go by one leaving past the bound: 4 times
            // (LaneTests.disconnectLetsGoPastTheBound tests it directly); an abandoned task parked for urgent work on
            // its host at per_host: 18 times (LaneTests.abandonedGivesUpItsHost). Both were 5 and 21 before abandoned
            // tasks were demoted after a slice, which ends some of them first.
            // Urgent work a pause sent to the durable queue past slowWaitingKept: 10 times
            // (CircuitBreakerTests.pauseKeepsTheSlowLaneBound tests it directly).
            let rare: [Situation] = [.droppedParked, .retryNotWaitedFor, .parkedAbandonedLetGo, .pausedToBacklog]
            let floor = situation == .getOfRetryNotWaitedFor ? 1 : rare.contains(situation) ? 3
                : situation == .abandonedYieldedHost ? 15 : 20
            #expect(count >= floor, "\(situation.rawValue) happened only \(count) times in 2,000 sequences")
        }
    }

    @Test("shrink finds the shortest failing sequence, one removal at a time")
    func shrinker() {
        let ops: [Op] = (0..<60).map { .advance(by: Int64($0)) } + [.get(spelling: 2, waiter: w(1, 1), cache: .missing)]
            + (0..<30).map { .demote(key: $0 % 6) } + [.cancel(key: 2)] + (0..<20).map { .promote(key: $0 % 6) }
        // "Fails" when a get of key 2 is followed later by a cancel of key 2, with at least one advance before.
        let fails = { (ops: [Op]) -> Bool in
            guard let get = ops.firstIndex(where: { if case .get(2, _, _) = $0 { true } else { false } }),
                  let cancel = ops.lastIndex(of: .cancel(key: 2)), get < cancel else { return false }
            return ops[..<get].contains { if case .advance = $0 { true } else { false } }
        }
        let shortest = shrink(ops, fails: fails)
        #expect(shortest.count == 3)
        #expect(Array(shortest.dropFirst()) == [.get(spelling: 2, waiter: w(1, 1), cache: .missing), .cancel(key: 2)])
        #expect(fails(shortest))
    }

    @Test("a violation is reported readably")
    func report() {
        let scenario = Scenario(seed: 0xAB, configuration: .init(fastWidth: 2, slowWidth: 1, perHostLimit: 1),
                                schedulerSeed: 0xCD, ops: [.queue(spelling: 6, cache: .stale), .advance(by: 5)])
        let text = scenario.report(shortest: [.queue(spelling: 6, cache: .stale)],
                                   violation: Violation(step: 0, op: "queue", message: "boom"))
        #expect(text.contains("seed 0xab violates"))
        #expect(text.contains("fastWidth 2, slowWidth 1, perHostLimit 1"))
        #expect(text.contains("1. queue HTTP://H1.Example:80/a#frag (= http://h1.example/a), cache stale"))
        #expect(text.contains("violation: step 1 (queue): boom"))
    }
}

extension Violation: Equatable {}
