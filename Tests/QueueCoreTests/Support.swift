@testable import QueueCore

// Small helpers shared by the QueueCore tests. Everything here is immutable: no global mutable state.

/// Parses a URL that the test knows is valid.
func url(_ text: String) -> CanonicalURL {
    do { return try CanonicalURL(text) } catch { fatalError("test URL \(text) did not parse: \(error.message)") }
}

func t(_ milliseconds: Int64) -> Moment { Moment(milliseconds: milliseconds) }

func w(_ client: UInt64, _ request: UInt64) -> Waiter { Waiter(client: client, request: request) }

func start(_ u: CanonicalURL, _ lane: Lane, revalidate: Bool = false) -> Action {
    .start(key: u.key, lane: lane, revalidate: revalidate)
}

/// URLs used by the example-based tests: `a*` on one host, `b*` on another.
enum U {
    static let a = url("http://a.example/a")
    static let a2 = url("http://a.example/a2")
    static let a3 = url("http://a.example/a3")
    static let b = url("http://b.example/b")
    static let b2 = url("http://b.example/b2")
    static let c = url("http://c.example/c")
    static let s1 = url("http://s.example/1")
    static let s2 = url("http://s.example/2")
    static let s3 = url("http://s.example/3")
    static let s4 = url("http://s.example/4")
}

/// A retry policy with round numbers, so deadlines are easy to reason about.
let testRetry = RetryPolicy(maxAttempts: 3, baseDelay: 1_000, maxDelay: 8_000, retryAfterCap: 60_000,
                            negativeTTL: 10_000)

func makeScheduler(fast: Int = 8, slow: Int = 1, perHost: Int? = nil, retry: RetryPolicy = testRetry,
                   seed: UInt64 = 42) -> Scheduler {
    Scheduler(configuration: .init(fastWidth: fast, slowWidth: slow, perHostLimit: perHost, retry: retry), seed: seed)
}

extension Scheduler {
    /// Counts recomputed from `allTasks`, to compare with the maintained `counts`.
    var recomputedCounts: LaneCounts {
        var c = LaneCounts()
        for task in allTasks {
            switch (task.state, task.lane) {
            case (.waiting, .fast): c.fastWaiting += 1
            case (.waiting, .slow): c.slowWaiting += 1
            case (.running, _) where task.lingering: c.lingering += 1
            case (.running, .fast): c.fastRunning += 1
            case (.running, .slow): c.slowRunning += 1
            case (.delayed, _): c.delayed += 1
            }
            c.waiters += task.waiters.count
        }
        return c
    }

    func state(_ u: CanonicalURL) -> TaskState? { task(u.key)?.state }
    func lane(_ u: CanonicalURL) -> Lane? { task(u.key)?.lane }
    func waiters(_ u: CanonicalURL) -> [Waiter]? { task(u.key)?.waiters }
}

extension TaskState {
    var delayedUntil: Moment? {
        if case .delayed(let until) = self { return until }
        return nil
    }
}

extension Action {
    /// Whether it answers a waiter.
    var isAnswer: Bool { if case .answer = self { true } else { false } }
}
