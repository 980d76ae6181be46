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
    static let sequencesPerBatch = 1_000
    static let batches = 10
}

/// How a `finish` ends.
enum FinishKind: Equatable, Sendable, CustomStringConvertible {
    case ok
    case serverError(retryAfter: Int64?)
    case network
    case notFound

    var outcome: FetchOutcome {
        switch self {
        case .ok: .success
        case .serverError(let retryAfter): .failure(.httpStatus(503, retryAfter: retryAfter))
        case .network: .failure(Failure(code: "network", message: "connection reset", isTransient: true))
        case .notFound: .failure(.httpStatus(404))
        }
    }

    var description: String {
        switch self {
        case .ok: "ok"
        case .serverError(nil): "transient 503"
        case .serverError(let retryAfter?): "transient 503, Retry-After \(retryAfter)ms"
        case .network: "transient network error"
        case .notFound: "permanent 404"
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
    case disconnect(client: UInt64)
    case release(Waiter)
    case hold(key: Int)
    case unhold(key: Int, dropping: Bool)
    case finish(key: Int, FinishKind)
    case advance(by: Int64)

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
        case .disconnect(let client): return "disconnect client \(client)"
        case .release(let waiter): return "release \(waiter)"
        case .finish(let key, let kind): return "finish \(k(key)): \(kind)"
        case .advance(let by): return "advance time by \(by)ms"
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
    case slowStarted = "slow start", suspended = "slow lane suspended", hostLimited = "waiting on the per-host limit"
    case retryScheduled = "retry scheduled", retryStarted = "retry started", attemptsExhausted = "attempts exhausted"
    case answeredFromNegativeCache = "answered from the negative cache", queueSkipped = "queue skipped"
    case answeredReady = "answered ready", answeredFailed = "answered failed", answeredCancelled = "answered cancelled"
    case waiterLeft = "waiter left (disconnect or release)"
    case hostPaused = "host paused by the circuit breaker"
    case releasedAndDemoted = "the last waiter released, the task demoted"
    case dropped = "a tentative task dropped when no longer held"
    case adopted = "a tentative task adopted by an ordinary request"
    case tokenLimited = "waiting for a start token"
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
        /// Changed lane in place while running (exempt from its current lane's width).
        var inPlace: Bool
    }

    enum WaiterState: Equatable {
        case pending(key: String)
        case answered
        case gone
    }

    /// What a step may do besides starting work and reporting suspension.
    struct Allowed {
        var changeLane: (key: String, lane: Lane)?
        var abort: String?
        var park: String?
        var answers: (key: String, answer: Answer)?
        var forget: String?
        var remember: (key: String, failure: Failure, until: Moment)?
        var pauseHost: String?
    }

    let configuration: Scheduler.Configuration
    var scheduler: Scheduler
    var now = Moment(milliseconds: 0)
    var running: [String: Running] = [:]
    var waiters: [Waiter: WaiterState] = [:]
    var pending: [String: Set<Waiter>] = [:]
    var negative: [String: (failure: Failure, until: Moment)] = [:]
    var hostFailures: [String: Int] = [:]
    var pausedHosts: [String: Moment] = [:]
    var reportedSuspended = false
    /// Keys whose task is tentative, held counts, and tasks parked with their bytes.
    var tentative: Set<String> = []
    var holds: [String: Int] = [:]
    var parked: Set<String> = []
    /// Per host: start tokens left and when they were counted.
    var buckets: [String: (tokens: Double, at: Moment)] = [:]
    var step = 0
    var currentOp: Op?
    /// Counted by hand (cheaper than summing `pending` every step).
    var pendingCount = 0
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
            let existed = scheduler.task(key) != nil
            let isTentative = if case .viewGet = op { true } else { false }
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
                guard actions.count == 1, case .answer(waiter, .failed(let failure)) = actions[0], failure.code == "host_paused" else {
                    throw fail("get for the paused host \(u.authority) gave \(actions)")
                }
                waiters[waiter] = .answered
                coverage.note(.hostPaused)
            } else {
                waiters[waiter] = .pending(key: key)
                pending[key, default: []].insert(waiter)
                pendingCount += 1
                let changeLane = running[key]?.lane == .slow ? (key, Lane.fast) : nil
                if !existed, isTentative { tentative.insert(key) }
                if !isTentative, tentative.remove(key) != nil { coverage.note(.adopted) }
                try process(actions, Allowed(changeLane: changeLane))
                let task = scheduler.task(key)
                guard task?.lane == .fast else { throw fail("after get the task is \(String(describing: task))") }
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
            let actions = scheduler.demote(key, now: now)
            let runningFast = running[key]?.lane == .fast
            let slowFull = running.values.count { $0.lane == .slow } >= configuration.slowWidth
            try process(actions, Allowed(changeLane: runningFast && !slowFull ? (key, Lane.slow) : nil,
                                         park: runningFast && slowFull ? key : nil))
            if let before {
                let after = scheduler.task(key)
                guard after?.lane == .slow, after?.waiters == before.waiters, after?.attempts == before.attempts else {
                    throw fail("after demote the task is \(String(describing: after)), before \(before)")
                }
                guard before.lane == .fast || (after == before && actions == []) else {
                    throw fail("demote of a slow task changed it or acted: \(actions)")
                }
                if before.lane == .fast, before.state == .waiting { coverage.note(.demotedWhileWaiting) }
            } else {
                guard actions == [] else { throw fail("demote of an unknown key gave \(actions)") }
            }

        case .promote(let index):
            let key = RandomWorld.keys[index].key
            let existed = scheduler.task(key) != nil
            let actions = scheduler.promote(key, now: now)
            let changeLane = running[key]?.lane == .slow ? (key, Lane.fast) : nil
            try process(actions, Allowed(changeLane: changeLane))
            guard existed ? scheduler.task(key)?.lane == .fast : actions == [] else {
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

        case .disconnect(let client):
            let actions = scheduler.disconnect(client: client)
            guard actions == [] else { throw fail("disconnect gave \(actions)") }
            for (waiter, state) in waiters where waiter.client == client {
                if case .pending(let key) = state { leave(waiter, key: key) }
            }

        case .release(let waiter):
            guard case .pending(let key)? = waiters[waiter], let before = scheduler.task(key) else {
                let actions = scheduler.release(waiter, now: now)
                guard actions == [] else { throw fail("release of a waiter that does not wait gave \(actions)") }
                return try checkInvariants()
            }
            let actions = scheduler.release(waiter, now: now)
            leave(waiter, key: key)
            let demotes = before.waiters == [waiter] && before.lane == .fast
            let runningFast = demotes && running[key]?.lane == .fast
            try process(actions, Allowed(changeLane: runningFast ? (key, Lane.slow) : nil))
            let after = scheduler.task(key)
            guard after?.waiters == before.waiters.filter({ $0 != waiter }),
                  after?.lane == (demotes ? .slow : before.lane), demotes || actions == [] else {
                throw fail("release left \(String(describing: after)) (before \(before)), actions \(actions)")
            }
            if demotes { coverage.note(.releasedAndDemoted) }

        case .hold(let index):
            let key = RandomWorld.keys[index].key
            scheduler.hold(key)
            holds[key, default: 0] += 1

        case .unhold(let index, let dropping):
            let key = RandomWorld.keys[index].key
            let count = holds[key, default: 0]
            let task = scheduler.task(key)
            let drops = dropping && count == 1 && tentative.contains(key) && pending[key, default: []].isEmpty
                && running[key] == nil && !parked.contains(key)
            let actions = scheduler.unhold(key, dropping: dropping, now: now)
            holds[key] = count > 1 ? count - 1 : nil
            if drops {
                try process(actions, Allowed(forget: key))
                guard scheduler.task(key) == nil, actions.contains(.forget(key: key)) else {
                    throw fail("unhold did not drop the tentative task: \(actions)")
                }
                coverage.note(.dropped)
            } else {
                guard actions == [], scheduler.task(key) == task else {
                    throw fail("unhold changed \(String(describing: task)) to \(String(describing: scheduler.task(key))): \(actions)")
                }
            }

        case .finish(let index, let kind):
            let key = RandomWorld.keys[index].key
            // Only keys the model knows are running are ever finished; a shrunk sequence may lose the start.
            guard running[key] != nil else { return }
            guard let task = scheduler.task(key), task.state == .running else {
                throw fail("the model thinks \(key) runs, the scheduler has \(String(describing: scheduler.task(key)))")
            }
            running[key] = nil
            let actions = scheduler.finish(key, kind.outcome, now: now)
            var pauseHost: String?
            switch kind.outcome {
            case .success:
                hostFailures[task.host] = nil
            case .failure(let failure) where failure.isTransient:
                hostFailures[task.host, default: 0] += 1
                if let threshold = configuration.hostFailureThreshold, hostFailures[task.host]! >= threshold {
                    hostFailures[task.host] = nil
                    pauseHost = task.host
                    guard actions.contains(.pauseHost(host: task.host, until: now + configuration.hostPause)) else {
                        throw fail("\(task.host) failed \(threshold) times in a row but was not paused: \(actions)")
                    }
                }
            case .failure:
                break
            }
            switch kind.outcome {
            case .success:
                try process(actions, Allowed(answers: (key, .ready), forget: key, pauseHost: pauseHost))
                guard scheduler.task(key) == nil, actions.contains(.forget(key: key)) else { throw fail("success left the task") }
            case .failure(let failure) where failure.isTransient && task.attempts < configuration.retry.maxAttempts:
                try process(actions, Allowed(pauseHost: pauseHost))
                let after = scheduler.task(key)
                // A pause makes the task background work and answers its waiters host_paused.
                let expectedWaiters = pauseHost == nil ? task.waiters : []
                let expectedLane = pauseHost == nil ? task.lane : .slow
                guard let until = after?.state.delayedUntil, after?.waiters == expectedWaiters, after?.lane == expectedLane else {
                    throw fail("a retryable failure left the task \(String(describing: after))")
                }
                let policy = configuration.retry
                let backoff = min(policy.maxDelay, policy.baseDelay << Int64(task.attempts - 1))
                let honoured = min(max(failure.retryAfter ?? 0, 0), policy.retryAfterCap)
                let delay = until.milliseconds - now.milliseconds
                guard delay >= max(backoff / 2, honoured), delay <= max(backoff, honoured) else {
                    throw fail("retry delay \(delay)ms after attempt \(task.attempts) (backoff \(backoff), Retry-After \(honoured))")
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
            pausedHosts = pausedHosts.filter { $0.value > now }
            let actions = scheduler.advance(to: now)
            try process(actions, Allowed())
        }
        try checkInvariants()
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
        var slowStarted = false
        for (position, action) in actions.enumerated() {
            switch action {
            case .start(let key, let lane, let revalidate):
                guard running[key] == nil else { throw fail("start for \(key), which is already running") }
                guard lane == .slow || !slowStarted else { throw fail("a fast start after a slow start: \(actions)") }
                let task = scheduler.task(key)
                guard let task, task.state == .running, task.lane == lane, task.revalidate == revalidate else {
                    throw fail("\(action) but the task is \(String(describing: task))")
                }
                let laneRunning = running.values.count { $0.lane == lane }
                let width = lane == .fast ? configuration.fastWidth : configuration.slowWidth
                guard laneRunning < width else {
                    throw fail("start(\(lane)) of \(key) with \(laneRunning) already running (width \(width))")
                }
                if let limit = configuration.perHostLimit {
                    let onHost = running.values.count { $0.host == task.host }
                    guard onHost < limit else { throw fail("start of \(key) with \(onHost) on \(task.host) (limit \(limit))") }
                }
                if configuration.hostStartRate != nil {
                    let tokens = self.tokens(task.host)
                    guard tokens >= 1 else { throw fail("start of \(key) with \(tokens) tokens left on \(task.host)") }
                    buckets[task.host] = (tokens - 1, now)
                }
                parked.remove(key)
                running[key] = Running(lane: lane, host: task.host, inPlace: false)
                if lane == .slow { slowStarted = true; coverage.note(.slowStarted) }
                if task.attempts > 1 { coverage.note(.retryStarted) }

            case .changeLane(let key, let lane):
                guard let change = allowed.changeLane, change.key == key, change.lane == lane else {
                    throw fail("unexpected \(action)")
                }
                running[key]?.lane = lane
                running[key]?.inPlace = true
                if lane == .fast { coverage.note(.promotedInPlace) } else { coverage.note(.demotedInPlace) }

            case .abort(let key):
                guard allowed.abort == key else { throw fail("unexpected \(action)") }
                guard running.removeValue(forKey: key) != nil else { throw fail("abort of \(key), which is not running") }
                coverage.note(.aborted)

            case .park(let key):
                guard allowed.park == key else { throw fail("unexpected \(action)") }
                guard running.removeValue(forKey: key) != nil else { throw fail("park of \(key), which is not running") }
                parked.insert(key)
                guard scheduler.task(key)?.state == .waiting, scheduler.task(key)?.lane == .slow else {
                    throw fail("parked \(key) is not waiting in the slow lane")
                }
                coverage.note(.parked)

            case .answer(let waiter, .failed(let failure)) where failure.code == "host_paused":
                guard let host = allowed.pauseHost, case .pending(let key)? = waiters[waiter],
                      let task = scheduler.task(key), task.host == host, task.state != .running else {
                    throw fail("unexpected \(action)")
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

            case .slowLaneSuspended(let suspended):
                guard suspended != reportedSuspended else { throw fail("\(action) repeats the last report") }
                guard position == actions.count - 1 else { throw fail("\(action) is not the last action: \(actions)") }
                reportedSuspended = suspended
                if suspended { coverage.note(.suspended) }

            case .forget(let key):
                guard allowed.forget == key else { throw fail("unexpected \(action)") }
                guard pending[key]?.isEmpty ?? true else { throw fail("\(action) with waiters unanswered: \(pending[key]!)") }
                guard running[key] == nil else { throw fail("\(action) while the model has it running") }
                tentative.remove(key)
                parked.remove(key)

            case .remember(let key, let failure, let until):
                guard let remember = allowed.remember, remember.key == key, remember.failure == failure,
                      remember.until == until else { throw fail("unexpected \(action)") }
                negative[key] = (failure, until)

            case .pauseHost(let host, let until):
                guard allowed.pauseHost == host, until == now + configuration.hostPause else { throw fail("unexpected \(action)") }
                pausedHosts[host] = until
                coverage.note(.hostPaused)
            }
        }
        let counts = scheduler.counts
        guard !slowStarted || counts.fastWaiting + counts.fastRunning == 0 else {
            throw fail("a slow task started while fast work waits or runs: \(actions), counts \(counts)")
        }
    }

    /// What must hold between any two steps.
    mutating func checkInvariants() throws(Violation) {
        let tasks = scheduler.allTasks
        let counts = scheduler.counts
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
                if lane == .fast { recomputed.fastRunning += 1 } else { recomputed.slowRunning += 1 }
                runningCount += 1
                guard running[task.key]?.lane == lane else {
                    throw fail("\(task.key) runs in the \(lane) lane, the model has \(String(describing: running[task.key]))")
                }
            case (.delayed(let until), _):
                recomputed.delayed += 1
                guard until > now else { throw fail("\(task.key) is still delayed until \(until) at \(now)") }
                earliest = min(earliest ?? until, until)
            }
            recomputed.waiters += task.waiters.count
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
        guard counts == recomputed else { throw fail("counts \(counts) but the tasks say \(recomputed)") }
        guard counts.waiters == pendingCount else { throw fail("\(counts.waiters) waiters counted, \(pendingCount) in the model") }
        guard reportedSuspended == counts.slowSuspended else { throw fail("last report \(reportedSuspended), counts \(counts)") }
        // nextDeadline is the earliest retry or end of a host pause (or, with start rates, a token that comes sooner).
        let expectedDeadline = [earliest, pausedHosts.values.min()].compactMap { $0 }.min()
        let deadlineMatches = configuration.hostStartRate == nil
            ? scheduler.nextDeadline == expectedDeadline
            : expectedDeadline.map { expected in scheduler.nextDeadline.map { $0 <= expected } ?? false } ?? true
        guard deadlineMatches else {
            throw fail("nextDeadline \(String(describing: scheduler.nextDeadline)), earliest retry \(String(describing: earliest)), "
                       + "pauses \(pausedHosts)")
        }

        // Widths: tasks that changed lane in place are exempt; everything admitted respects the width.
        var slowAdmitted = 0, slowInPlace = 0, fastAdmitted = 0
        var perHost: [(host: String, running: Int)] = []
        for task in running.values {
            switch (task.lane, task.inPlace) {
            case (.slow, false): slowAdmitted += 1
            case (.slow, true): slowInPlace += 1
            case (.fast, false): fastAdmitted += 1
            case (.fast, true): break
            }
            if configuration.perHostLimit != nil {
                if let i = perHost.firstIndex(where: { $0.host == task.host }) { perHost[i].running += 1 }
                else { perHost.append((task.host, 1)) }
            }
        }
        guard slowAdmitted <= configuration.slowWidth else {
            throw fail("\(slowAdmitted) slow tasks admitted (width \(configuration.slowWidth))")
        }
        guard counts.slowRunning <= configuration.slowWidth + slowInPlace else {
            throw fail("slowRunning \(counts.slowRunning) > slowWidth \(configuration.slowWidth) + \(slowInPlace) in place")
        }
        guard fastAdmitted <= configuration.fastWidth else {
            throw fail("\(fastAdmitted) fast tasks admitted (width \(configuration.fastWidth))")
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
            }
            if hostFull { coverage.note(.hostLimited) }
            if let until = pausedHosts[task.host], until > now { hostFull = true }
            let room = task.lane == .fast ? counts.fastRunning < configuration.fastWidth
                : !counts.slowSuspended && counts.slowRunning < configuration.slowWidth
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
                guard hostFull || counts.fastRunning >= configuration.fastWidth else {
                    throw fail("\(task.key) waits in the fast lane with room to run (counts \(counts))")
                }
            case .slow:
                guard hostFull || counts.slowSuspended || counts.slowRunning >= configuration.slowWidth else {
                    throw fail("\(task.key) waits in the slow lane with room to run (counts \(counts))")
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
    /// covered.
    static func generate(seed: UInt64) -> (Scenario, Violation?, Coverage) {
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
            hostStartRate: coin() ? .init(perSecond: Double(roll(1...20)), burst: roll(1...3)) : nil)
        var scenario = Scenario(seed: seed, configuration: configuration, schedulerSeed: rng.next(), ops: [])
        var runner = Runner(configuration: configuration, seed: scenario.schedulerSeed)
        var issued: [Waiter] = []
        var nextRequest: UInt64 = 1

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
                switch below(100) {
                case 0..<18:
                    let waiter = Waiter(client: UInt64(roll(RandomWorld.clients)), request: nextRequest)
                    nextRequest += 1
                    issued.append(waiter)
                    op = below(3) == 0 ? .viewGet(spelling: spelling, waiter: waiter, cache: cache())
                        : .get(spelling: spelling, waiter: waiter, cache: cache())
                case 18..<26:
                    op = coin() ? .prefetch(spelling: spelling, cache: cache()) : .queue(spelling: spelling, cache: cache())
                case 26..<29:
                    // Mostly tentative tasks nobody holds yet: the ones an unhold may drop.
                    let unheld = runner.tentative.filter { runner.holds[$0] == nil && runner.running[$0] == nil }
                        .sorted().compactMap { RandomWorld.keyIndex[$0] }
                    op = .hold(key: below(4) != 0 ? element(unheld) ?? key : pick(lane: nil) ?? key)
                case 29..<34:
                    let held = runner.holds.keys.sorted()
                    let tentative = held.filter { runner.tentative.contains($0) && runner.running[$0] == nil }
                    let choice = coin() ? element(tentative) ?? element(held) : element(held)
                    op = .unhold(key: choice.flatMap { RandomWorld.keyIndex[$0] } ?? key, dropping: below(4) != 0)
                case 34..<40: op = .demote(key: pick(lane: .fast) ?? key)
                case 40..<44: op = .promote(key: pick(lane: .slow) ?? key)
                case 44..<48: op = .cancel(key: pick(lane: nil) ?? key)
                case 48..<51: op = .disconnect(client: UInt64(roll(RandomWorld.clients)))
                case 51..<55:
                    op = .release(element(issued) ?? Waiter(client: 1, request: 999))
                case 55..<85 where !runner.running.isEmpty:
                    let running = runner.running.keys.sorted()
                    let finishKey = RandomWorld.keyIndex[element(running)!]!
                    let kind: FinishKind
                    switch below(8) {
                    case 0..<4: kind = .ok
                    case 4: kind = .serverError(retryAfter: nil)
                    case 5: kind = .serverError(retryAfter: Int64(roll(0...3_000)))
                    case 6: kind = .network
                    default: kind = .notFound
                    }
                    op = .finish(key: finishKey, kind)
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
        for i in 0..<600 {
            let (_, violation, coverage) = Scenario.generate(seed: 0xC0DE &+ UInt64(i))
            #expect(violation == nil)
            total.add(coverage)
        }
        for situation in Situation.allCases {
            let count = total.counts[situation, default: 0]
            #expect(count >= 20, "\(situation.rawValue) happened only \(count) times in 600 sequences")
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
