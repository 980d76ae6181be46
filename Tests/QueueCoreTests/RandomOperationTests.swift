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
    /// Spellings of the keys above, as a client might send them.
    static let spellings: [CanonicalURL] = keys + [
        url("HTTP://H1.Example:80/a#frag"), url("http://h2.example/x/../c"), url("https://H3.EXAMPLE:8443/%66"),
    ]
    static let keyIndex: [String: Int] = Dictionary(uniqueKeysWithValues: keys.enumerated().map { ($1.key, $0) })
    static let clients: ClosedRange<UInt64> = 1...3
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
    case queue(spelling: Int, cache: CacheState)
    case demote(key: Int)
    case promote(key: Int)
    case cancel(key: Int)
    case disconnect(client: UInt64)
    case withdraw(Waiter)
    case finish(key: Int, FinishKind)
    case advance(by: Int64)

    var description: String {
        func k(_ i: Int) -> String { RandomWorld.keys[i].key }
        func s(_ i: Int) -> String {
            let u = RandomWorld.spellings[i]
            return i < RandomWorld.keys.count ? u.key : "\(u.key) (spelling #\(i))"
        }
        switch self {
        case .get(let spelling, let waiter, let cache): return "get \(s(spelling)) as \(waiter), cache \(cache)"
        case .queue(let spelling, let cache): return "queue \(s(spelling)), cache \(cache)"
        case .demote(let key): return "demote \(k(key))"
        case .promote(let key): return "promote \(k(key))"
        case .cancel(let key): return "cancel \(k(key))"
        case .disconnect(let client): return "disconnect client \(client)"
        case .withdraw(let waiter): return "withdraw \(waiter)"
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
        var answers: (key: String, answer: Answer)?
        var forget: String?
        var remember: (key: String, failure: Failure, until: Moment)?
    }

    let configuration: Scheduler.Configuration
    var scheduler: Scheduler
    var now = Moment(milliseconds: 0)
    var running: [String: Running] = [:]
    var waiters: [Waiter: WaiterState] = [:]
    var pending: [String: Set<Waiter>] = [:]
    var negative: [String: (failure: Failure, until: Moment)] = [:]
    var reportedSuspended = false
    var step = 0
    var currentOp = ""

    init(configuration: Scheduler.Configuration, seed: UInt64) {
        self.configuration = configuration
        scheduler = Scheduler(configuration: configuration, seed: seed)
    }

    func fail(_ message: String) -> Violation { Violation(step: step, op: currentOp, message: message) }

    func check(_ condition: Bool, _ message: @autoclosure () -> String) throws(Violation) {
        if !condition { throw fail(message()) }
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
        currentOp = op.description
        defer { step += 1 }
        switch op {
        case .get(let spelling, let waiter, let cache):
            let u = RandomWorld.spellings[spelling], key = u.key
            let existed = scheduler.task(key) != nil
            let actions = scheduler.get(u, waiter: waiter, cache: cache, now: now)
            if !existed, cache == .fresh {
                try check(actions == [.answer(waiter, .ready)], "fresh get answered \(actions)")
                waiters[waiter] = .answered
            } else if !existed, let remembered = negative[key], remembered.until > now {
                try check(actions == [.answer(waiter, .failed(remembered.failure))],
                          "get of a recently failed key gave \(actions)")
                waiters[waiter] = .answered
            } else {
                waiters[waiter] = .pending(key: key)
                pending[key, default: []].insert(waiter)
                let changeLane = running[key]?.lane == .slow ? (key, Lane.fast) : nil
                try process(actions, Allowed(changeLane: changeLane))
                let task = scheduler.task(key)
                try check(task?.lane == .fast, "after get the task is \(String(describing: task))")
                if !existed { try check(task?.revalidate == (cache == .stale), "new task has the wrong revalidate flag") }
            }

        case .queue(let spelling, let cache):
            let u = RandomWorld.spellings[spelling], key = u.key
            let before = scheduler.task(key)
            let (outcome, actions) = scheduler.queue(u, cache: cache, now: now)
            if before != nil {
                try check(outcome == .already && actions == [], "queue of a known key gave \(outcome), \(actions)")
                try check(scheduler.task(key) == before, "queue changed a known task")
            } else if cache == .fresh {
                try check(outcome == .cached && actions == [], "queue of a fresh key gave \(outcome), \(actions)")
            } else if let remembered = negative[key], remembered.until > now {
                try check(outcome == .skipped(remembered.failure) && actions == [],
                          "queue of a recently failed key gave \(outcome), \(actions)")
            } else {
                try check(outcome == .queued, "queue of an unknown key gave \(outcome)")
                try process(actions, Allowed())
                let task = scheduler.task(key)
                try check(task?.lane == .slow && task?.revalidate == (cache == .stale) && task?.waiters == [],
                          "queued task is \(String(describing: task))")
            }

        case .demote(let index):
            let key = RandomWorld.keys[index].key
            let before = scheduler.task(key)
            let actions = scheduler.demote(key, now: now)
            let changeLane = running[key]?.lane == .fast ? (key, Lane.slow) : nil
            try process(actions, Allowed(changeLane: changeLane))
            if let before {
                let after = scheduler.task(key)
                try check(after?.lane == .slow, "after demote the task is \(String(describing: after))")
                try check(after?.waiters == before.waiters && after?.attempts == before.attempts,
                          "demote changed waiters or attempts")
                if before.lane == .slow { try check(after == before, "demote of a slow task changed it") }
            } else {
                try check(actions == [], "demote of an unknown key gave \(actions)")
            }

        case .promote(let index):
            let key = RandomWorld.keys[index].key
            let before = scheduler.task(key)
            let actions = scheduler.promote(key, now: now)
            let changeLane = running[key]?.lane == .slow ? (key, Lane.fast) : nil
            try process(actions, Allowed(changeLane: changeLane))
            if before != nil {
                try check(scheduler.task(key)?.lane == .fast, "after promote the task is not fast")
            } else {
                try check(actions == [], "promote of an unknown key gave \(actions)")
            }

        case .cancel(let index):
            let key = RandomWorld.keys[index].key
            let existed = scheduler.task(key) != nil
            let wasRunning = running[key] != nil
            let actions = scheduler.cancel(key, now: now)
            try process(actions, Allowed(abort: key, answers: (key, .cancelled), forget: key))
            try check(scheduler.task(key) == nil, "the task is still there after cancel")
            try check(running[key] == nil, "a running task was cancelled without an abort")
            try check(existed == actions.contains(.forget(key: key)), "forget missing or unexpected in \(actions)")
            try check(wasRunning == actions.contains(.abort(key: key)), "abort missing or unexpected in \(actions)")

        case .disconnect(let client):
            let actions = scheduler.disconnect(client: client)
            try check(actions == [], "disconnect gave \(actions)")
            for (waiter, state) in waiters where waiter.client == client {
                if case .pending(let key) = state {
                    waiters[waiter] = .gone
                    pending[key]?.remove(waiter)
                }
            }

        case .withdraw(let waiter):
            let actions = scheduler.withdraw(waiter)
            try check(actions == [], "withdraw gave \(actions)")
            if case .pending(let key)? = waiters[waiter] {
                waiters[waiter] = .gone
                pending[key]?.remove(waiter)
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
            switch kind.outcome {
            case .success:
                try process(actions, Allowed(answers: (key, .ready), forget: key))
                try check(scheduler.task(key) == nil && actions.contains(.forget(key: key)), "success left the task")
            case .failure(let failure) where failure.isTransient && task.attempts < configuration.retry.maxAttempts:
                try process(actions, Allowed())
                let after = scheduler.task(key)
                guard let until = after?.state.delayedUntil else {
                    throw fail("a retryable failure left the task \(String(describing: after))")
                }
                let policy = configuration.retry
                let backoff = min(policy.maxDelay, policy.baseDelay << Int64(task.attempts - 1))
                let honoured = min(max(failure.retryAfter ?? 0, 0), policy.retryAfterCap)
                let delay = until.milliseconds - now.milliseconds
                try check(delay >= max(backoff / 2, honoured) && delay <= max(backoff, honoured),
                          "retry delay \(delay)ms after attempt \(task.attempts) (backoff \(backoff), Retry-After \(honoured))")
                try check(after?.waiters == task.waiters && after?.lane == task.lane, "the retry changed the task")
            case .failure(let failure):
                var allowed = Allowed(answers: (key, .failed(failure)), forget: key)
                if !failure.isTransient {
                    allowed.remember = (key, failure, now + configuration.retry.negativeTTL)
                    try check(actions.first == .remember(key: key, failure, until: now + configuration.retry.negativeTTL),
                              "a permanent failure was not remembered first: \(actions)")
                } else {
                    try check(!actions.contains { if case .remember = $0 { true } else { false } },
                              "a transient failure was remembered")
                }
                try process(actions, allowed)
                try check(scheduler.task(key) == nil && actions.contains(.forget(key: key)), "failure left the task")
            }

        case .advance(let by):
            now = now + by
            let actions = scheduler.advance(to: now)
            try process(actions, Allowed())
        }
        try checkInvariants()
    }

    /// Walks one step's actions in order, updating the model.
    mutating func process(_ actions: [Action], _ allowed: Allowed) throws(Violation) {
        var slowStarted = false
        for (position, action) in actions.enumerated() {
            switch action {
            case .start(let key, let lane, let revalidate):
                try check(running[key] == nil, "start for \(key), which is already running")
                try check(!(lane == .fast && slowStarted), "a fast start after a slow start in one step: \(actions)")
                let host = scheduler.task(key)?.host ?? "?"
                let laneRunning = running.values.count { $0.lane == lane }
                let width = lane == .fast ? configuration.fastWidth : configuration.slowWidth
                try check(laneRunning < width, "start(\(lane)) of \(key) with \(laneRunning) already running (width \(width))")
                if let limit = configuration.perHostLimit {
                    let onHost = running.values.count { $0.host == host }
                    try check(onHost < limit, "start of \(key) with \(onHost) running on \(host) (limit \(limit))")
                }
                let task = scheduler.task(key)
                try check(task?.state == .running && task?.lane == lane && task?.revalidate == revalidate,
                          "start \(action) but the task is \(String(describing: task))")
                running[key] = Running(lane: lane, host: host, inPlace: false)
                if lane == .slow { slowStarted = true }

            case .changeLane(let key, let lane):
                try check(allowed.changeLane.map { $0.key == key && $0.lane == lane } ?? false, "unexpected \(action)")
                try check(running[key] != nil && running[key]?.lane != lane, "\(action) but the model has \(String(describing: running[key]))")
                running[key]?.lane = lane
                running[key]?.inPlace = true

            case .abort(let key):
                try check(allowed.abort == key, "unexpected \(action)")
                try check(running.removeValue(forKey: key) != nil, "abort of \(key), which is not running")

            case .answer(let waiter, let answer):
                guard let expected = allowed.answers else { throw fail("unexpected \(action)") }
                switch waiters[waiter] {
                case .pending(let key)?:
                    try check(key == expected.key, "\(waiter) waits for \(key) but was answered for \(expected.key)")
                case .answered?: throw fail("\(waiter) answered a second time (\(answer))")
                case .gone?: throw fail("\(waiter) answered after it disconnected or withdrew")
                case nil: throw fail("\(waiter) answered but never asked")
                }
                try check(answer == expected.answer, "\(waiter) answered \(answer), expected \(expected.answer)")
                waiters[waiter] = .answered
                pending[expected.key]?.remove(waiter)

            case .slowLaneSuspended(let suspended):
                try check(suspended != reportedSuspended, "\(action) repeats the last report")
                try check(position == actions.count - 1, "\(action) is not the last action: \(actions)")
                reportedSuspended = suspended

            case .forget(let key):
                try check(allowed.forget == key, "unexpected \(action)")
                try check(pending[key]?.isEmpty ?? true, "forget(\(key)) with waiters unanswered: \(pending[key]!)")
                try check(running[key] == nil, "forget(\(key)) while the model has it running")

            case .remember(let key, let failure, let until):
                try check(allowed.remember.map { $0.key == key && $0.failure == failure && $0.until == until } ?? false,
                          "unexpected \(action)")
                negative[key] = (failure, until)
            }
        }
        if slowStarted {
            try check(scheduler.counts.fastWaiting + scheduler.counts.fastRunning == 0,
                      "a slow task started while fast work waits or runs: \(actions), counts \(scheduler.counts)")
        }
    }

    /// What must hold between any two steps.
    func checkInvariants() throws(Violation) {
        let tasks = scheduler.allTasks
        let counts = scheduler.counts
        try check(Set(tasks.map(\.key)).count == tasks.count, "two tasks for one key")
        try check(counts == scheduler.recomputedCounts, "counts \(counts) but the tasks say \(scheduler.recomputedCounts)")

        var runningLanes: [String: Lane] = [:]
        var totalWaiters = 0
        var deadlines: [Moment] = []
        for task in tasks {
            if task.state == .running { runningLanes[task.key] = task.lane }
            try check(Set(task.waiters).count == task.waiters.count, "\(task.key) has a waiter twice")
            try check(Set(task.waiters) == pending[task.key] ?? [],
                      "\(task.key) has waiters \(task.waiters), the model \(pending[task.key] ?? [])")
            totalWaiters += task.waiters.count
            if let until = task.state.delayedUntil {
                try check(until > now, "\(task.key) is still delayed until \(until) at \(now)")
                deadlines.append(until)
            }
        }
        try check(runningLanes == running.mapValues(\.lane), "running \(runningLanes), the model \(running.mapValues(\.lane))")
        let modelPending = pending.values.reduce(0) { $0 + $1.count }
        try check(totalWaiters == modelPending && counts.waiters == modelPending,
                  "\(counts.waiters) waiters counted, \(modelPending) in the model")
        try check(reportedSuspended == counts.slowSuspended, "last report \(reportedSuspended), counts \(counts)")
        try check(scheduler.nextDeadline == deadlines.min(), "nextDeadline \(String(describing: scheduler.nextDeadline))")

        // Widths: tasks that changed lane in place are exempt; everything admitted respects the width.
        let slowAdmitted = running.values.count { $0.lane == .slow && !$0.inPlace }
        let slowInPlace = running.values.count { $0.lane == .slow && $0.inPlace }
        let fastAdmitted = running.values.count { $0.lane == .fast && !$0.inPlace }
        try check(slowAdmitted <= configuration.slowWidth, "\(slowAdmitted) slow tasks admitted (width \(configuration.slowWidth))")
        try check(counts.slowRunning <= configuration.slowWidth + slowInPlace,
                  "slowRunning \(counts.slowRunning) > slowWidth \(configuration.slowWidth) + \(slowInPlace) demoted in place")
        try check(fastAdmitted <= configuration.fastWidth, "\(fastAdmitted) fast tasks admitted (width \(configuration.fastWidth))")
        var perHost: [String: Int] = [:]
        for task in tasks where task.state == .running { perHost[task.host, default: 0] += 1 }
        if let limit = configuration.perHostLimit {
            try check(perHost.values.allSatisfy { $0 <= limit }, "per-host limit \(limit) exceeded: \(perHost)")
        }

        // Work-conserving: a waiting task has a reason to wait.
        for task in tasks where task.state == .waiting {
            let hostFull = configuration.perHostLimit.map { perHost[task.host, default: 0] >= $0 } ?? false
            switch task.lane {
            case .fast:
                try check(hostFull || counts.fastRunning >= configuration.fastWidth,
                          "\(task.key) waits in the fast lane with room to run (counts \(counts))")
            case .slow:
                try check(hostFull || counts.slowSuspended || counts.slowRunning >= configuration.slowWidth,
                          "\(task.key) waits in the slow lane with room to run (counts \(counts))")
            }
        }
    }

    /// Lets time pass and finishes everything with success until no task is left; then every waiter that did not
    /// leave must have had exactly one answer.
    mutating func drain() throws(Violation) {
        var rounds = 0
        while !scheduler.allTasks.isEmpty {
            rounds += 1
            try check(rounds < 1_000, "drain does not end")
            if !running.isEmpty {
                for key in running.keys.sorted() { try apply(.finish(key: RandomWorld.keyIndex[key]!, .ok)) }
            } else if let deadline = scheduler.nextDeadline {
                try apply(.advance(by: max(0, deadline.milliseconds - now.milliseconds)))
            } else {
                currentOp = "drain"
                throw fail("stuck: tasks remain, none runs and no retry is due: \(scheduler.allTasks)")
            }
        }
        currentOp = "end of drain"
        let unanswered = waiters.filter { if case .pending = $0.value { true } else { false } }.keys
        try check(unanswered.isEmpty, "never answered: \(unanswered.sorted { "\($0)" < "\($1)" })")
    }
}

/// A generated sequence: its configuration, the scheduler's seed and the operations.
struct Scenario {
    var seed: UInt64
    var configuration: Scheduler.Configuration
    var schedulerSeed: UInt64
    var ops: [Op]

    /// Generates a sequence from `seed` while running it; returns it with the first violation, if any.
    static func generate(seed: UInt64) -> (Scenario, Violation?) {
        var rng = SplitMix64(seed: seed)
        let retry = RetryPolicy(maxAttempts: Int.random(in: 1...3, using: &rng), baseDelay: 100, maxDelay: 800,
                                retryAfterCap: 1_500, negativeTTL: Int64.random(in: 500...4_000, using: &rng))
        let configuration = Scheduler.Configuration(
            fastWidth: Int.random(in: 1...4, using: &rng), slowWidth: Int.random(in: 1...2, using: &rng),
            perHostLimit: Bool.random(using: &rng) ? Int.random(in: 1...2, using: &rng) : nil, retry: retry)
        var scenario = Scenario(seed: seed, configuration: configuration, schedulerSeed: rng.next(), ops: [])
        var runner = Runner(configuration: configuration, seed: scenario.schedulerSeed)
        var issued: [Waiter] = []
        var nextRequest: UInt64 = 1

        func cache() -> CacheState {
            switch Int.random(in: 0..<20, using: &rng) {
            case 0..<12: .missing
            case 12..<17: .stale
            default: .fresh
            }
        }
        let count = Int.random(in: 40...120, using: &rng)
        do {
            for _ in 0..<count {
                let op: Op
                let key = Int.random(in: 0..<RandomWorld.keys.count, using: &rng)
                let spelling = Int.random(in: 0..<RandomWorld.spellings.count, using: &rng)
                let roll = Int.random(in: 0..<100, using: &rng)
                switch roll {
                case 0..<22:
                    let waiter = Waiter(client: UInt64.random(in: RandomWorld.clients, using: &rng), request: nextRequest)
                    nextRequest += 1
                    issued.append(waiter)
                    op = .get(spelling: spelling, waiter: waiter, cache: cache())
                case 22..<34: op = .queue(spelling: spelling, cache: cache())
                case 34..<40: op = .demote(key: key)
                case 40..<44: op = .promote(key: key)
                case 44..<48: op = .cancel(key: key)
                case 48..<51: op = .disconnect(client: UInt64.random(in: RandomWorld.clients, using: &rng))
                case 51..<55:
                    op = .withdraw(issued.randomElement(using: &rng) ?? Waiter(client: 1, request: 999))
                case 55..<85 where !runner.running.isEmpty:
                    let running = runner.running.keys.sorted()
                    let finishKey = RandomWorld.keyIndex[running.randomElement(using: &rng)!]!
                    let kind: FinishKind
                    switch Int.random(in: 0..<8, using: &rng) {
                    case 0..<4: kind = .ok
                    case 4: kind = .serverError(retryAfter: nil)
                    case 5: kind = .serverError(retryAfter: Int64.random(in: 0...3_000, using: &rng))
                    case 6: kind = .network
                    default: kind = .notFound
                    }
                    op = .finish(key: finishKey, kind)
                default:
                    switch Int.random(in: 0..<10, using: &rng) {
                    case 0..<4: op = .advance(by: Int64.random(in: 0...300, using: &rng))
                    case 4..<7:
                        let deadline = runner.scheduler.nextDeadline?.milliseconds ?? runner.now.milliseconds + 100
                        op = .advance(by: max(0, deadline - runner.now.milliseconds))
                    default: op = .advance(by: Int64.random(in: 0...5_000, using: &rng))
                    }
                }
                scenario.ops.append(op)
                try runner.apply(op)
            }
            try runner.drain()
        } catch {
            return (scenario, error)
        }
        return (scenario, nil)
    }

    func run(_ ops: [Op]) -> Violation? { Runner.run(ops, configuration: configuration, seed: schedulerSeed) }

    func report(shortest: [Op], violation: Violation) -> String {
        let c = configuration
        var lines = [
            "random sequence \(String(seed, radix: 16)) violates the scheduler's contract",
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
            let (scenario, violation) = Scenario.generate(seed: seed)
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
        let (a, _) = Scenario.generate(seed: 7)
        let (b, _) = Scenario.generate(seed: 7)
        #expect(a.ops == b.ops && a.configuration == b.configuration && a.schedulerSeed == b.schedulerSeed)
        #expect(a.run(a.ops) == nil)
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
        #expect(text.contains("sequence ab"))
        #expect(text.contains("fastWidth 2, slowWidth 1, perHostLimit 1"))
        #expect(text.contains("1. queue http://h1.example/a (spelling #6), cache stale"))
        #expect(text.contains("violation: step 1 (queue): boom"))
    }
}

extension Violation: Equatable {}
