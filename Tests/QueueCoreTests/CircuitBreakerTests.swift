import Testing
@testable import QueueCore

@Suite("Circuit breaker")
struct CircuitBreakerTests {
    static let network = Failure(code: .network, message: "connection refused", isTransient: true)

    func breaker() -> Scheduler {
        let retry = RetryPolicy(maxAttempts: 1, baseDelay: 100, maxDelay: 100, retryAfterCap: 1_000, negativeTTL: 1_000)
        return Scheduler(configuration: .init(retry: retry, hostFailureThreshold: 2, hostPause: 5_000), seed: 1)
    }

    @Test("a host that fails transiently twice in a row is paused; get fails fast; queued work waits for the pause to end")
    func pausesAndResumes() throws {
        var s = breaker()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        #expect(s.finish(U.a.key, .failure(Self.network), now: t(10))
                == [.answer(w(1, 1), .failed(Self.network)), .forget(key: U.a.key), .holdBackground(false)])
        _ = s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(20))
        let second = s.finish(U.a2.key, .failure(Self.network), now: t(30))
        #expect(second.first == .pauseHost(host: "a.example", until: t(5_030)))
        #expect(s.paused.map(\.host) == ["a.example"])

        let refused = s.get(U.a3, waiter: w(1, 3), cache: .missing, now: t(40))
        guard case .answer(w(1, 3), .failed(let failure))? = refused.first else { Issue.record("\(refused)"); return }
        #expect(failure.code == .hostPaused && failure.isTransient)
        #expect(s.task(U.a3.key) == nil)

        #expect(s.queue(U.a3, cache: .missing, now: t(50)) == (.queued, []))
        #expect(s.queue(U.b, cache: .missing, now: t(60)) == (.queued, [start(U.b, .slow)]), "other hosts go on")
        #expect(s.isPaused("a.example", at: t(5_029)) && !s.isPaused("a.example", at: t(5_030)) && !s.isPaused("b.example", at: t(60)))
        #expect(s.slowWaitingOnHeldHosts(at: t(60)) == 1, "a3 waits for its host; b runs")
        #expect(s.slowWaitingOnHeldHosts(at: t(5_030)) == 0, "the pause is over")
        #expect(s.nextDeadline == t(5_030))
        _ = s.finish(U.b.key, .success, now: t(70))
        #expect(s.task(U.a3.key)?.state == .waiting)
        #expect(s.advance(to: t(5_030)) == [start(U.a3, .slow)])
        #expect(s.paused.isEmpty)
    }

    @Test("the transfers one dropped connection ends count as one failure of the host (an HTTP/2 connection carries many): no pause, each retried")
    func droppedConnectionCountsOnce() throws {
        let retry = RetryPolicy(maxAttempts: 3, baseDelay: 100, maxDelay: 100, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(fastWidth: 8, retry: retry, hostFailureThreshold: 3, hostPause: 5_000), seed: 1)
        let urls = (1...6).map { url("http://a.example/\($0)") }
        for (n, u) in urls.enumerated() { _ = s.get(u, waiter: w(1, UInt64(n)), cache: .missing, now: t(0)) }
        var dropped = Self.network
        dropped.connection = "[10.0.0.1]:40000>[10.0.0.2]:443"
        for u in urls {
            #expect(!s.finish(u.key, .failure(dropped), now: t(10)).contains { if case .pauseHost = $0 { true } else { false } })
        }
        #expect(s.paused.isEmpty && urls.allSatisfy { s.task($0.key)?.waiters.count == 1 }, "every get waits for its retry")
        // Other connections' failures are further evidence: with the one before, the third pauses the host.
        var other = dropped
        _ = s.advance(to: t(200))
        for (n, port) in [40001, 40002].enumerated() {
            other.connection = "[10.0.0.1]:\(port)>[10.0.0.2]:443"
            let actions = s.finish(urls[n].key, .failure(other), now: t(300))
            #expect(actions.contains(.pauseHost(host: "a.example", until: t(5_300))) == (n == 1), "\(actions)")
        }
    }

    @Test("a body that ended cleanly inside its image is retried but never counts towards pausing its host (one broken file on a server paused all its URLs)")
    func cleanEndInsideImageNeverPauses() throws {
        var s = breaker()
        var cut = Self.network
        cut.endedInsideImage = true
        for (n, u) in [U.a, U.a2, U.a3].enumerated() {
            _ = s.get(u, waiter: w(1, UInt64(n)), cache: .missing, now: t(Int64(n) * 10))
            #expect(s.finish(u.key, .failure(cut), now: t(Int64(n) * 10 + 5))
                    == [.answer(w(1, UInt64(n)), .failed(cut)), .forget(key: u.key), .holdBackground(false)])
        }
        #expect(s.paused.isEmpty)
        // Another failure of the host still counts: the cuts did not count, so it takes two.
        _ = s.get(U.a, waiter: w(1, 9), cache: .missing, now: t(100))
        #expect(!s.finish(U.a.key, .failure(Self.network), now: t(110)).contains { if case .pauseHost = $0 { true } else { false } })
        #expect(s.paused.isEmpty)
    }

    @Test("when a host is paused, its waiting urgent work fails fast and moves to the background; the slow lane resumes")
    func failFastOnPause() throws {
        let retry = RetryPolicy(maxAttempts: 1, baseDelay: 100, maxDelay: 100, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(fastWidth: 2, retry: retry, hostFailureThreshold: 2, hostPause: 5_000), seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(0))
        _ = s.get(U.a3, waiter: w(2, 1), cache: .missing, now: t(0))
        #expect(s.task(U.a3.key)?.state == .waiting)
        _ = s.finish(U.a.key, .failure(Self.network), now: t(10))
        #expect(s.task(U.a3.key)?.state == .running, "a3 took the free slot")
        _ = s.queue(U.b, cache: .missing, now: t(15))
        let actions = s.finish(U.a2.key, .failure(Self.network), now: t(20))
        #expect(actions.contains(.pauseHost(host: "a.example", until: t(5_020))))
        // a3 runs: it keeps its waiter. Nothing else of a.example waits, so b starts once the fast lane is empty.
        #expect(s.task(U.a3.key)?.waiters == [w(2, 1)])
        _ = s.get(url("http://a.example/late"), waiter: w(3, 1), cache: .missing, now: t(30))
        let late = s.finish(U.a3.key, .failure(Self.network), now: t(40))
        #expect(late.first == .pauseHost(host: "a.example", until: t(5_040)), "the host still fails: paused again")
        guard case .answer(w(2, 1), .failed(let failure))? = late.dropFirst().first else { Issue.record("\(late)"); return }
        #expect(failure.code == .network)
        #expect(late.contains(start(U.b, .slow)), "the slow lane is not held by the paused host: \(late)")
    }

    @Test("a waiting get on a host that gets paused is answered host_paused at once, its task kept for later")
    func waitingGetAnsweredOnPause() throws {
        let retry = RetryPolicy(maxAttempts: 1, baseDelay: 100, maxDelay: 100, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(fastWidth: 2, retry: retry, hostFailureThreshold: 2, hostPause: 5_000), seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(0))
        _ = s.get(U.a3, waiter: w(2, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(2, 2), cache: .missing, now: t(0))
        _ = s.finish(U.a.key, .failure(Self.network), now: t(10))  // a3 or b takes the slot: a3 (FIFO)
        _ = s.get(url("http://a.example/w"), waiter: w(3, 1), cache: .missing, now: t(11))
        let actions = s.finish(U.a2.key, .failure(Self.network), now: t(20))
        let pausedAnswers = actions.compactMap { action -> Waiter? in
            if case .answer(let waiter, .failed(let failure)) = action, failure.code == .hostPaused { return waiter }
            return nil
        }
        #expect(pausedAnswers == [w(3, 1)], "\(actions)")
        let parked = try #require(s.task("http://a.example/w"))
        #expect(parked.lane == .slow && parked.waiters.isEmpty)
    }

    @Test("urgent work a pause sends to the background stays in memory up to slowWaitingKept, the rest goes to the durable queue (queue --now lines on a host that paused again and again held 99,500 URLs, 158 MB)")
    func pauseKeepsTheSlowLaneBound() throws {
        let retry = RetryPolicy(maxAttempts: 1, baseDelay: 100, maxDelay: 100, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(fastWidth: 2, retry: retry, hostFailureThreshold: 2, hostPause: 5_000,
                                               slowWaitingKept: 3), seed: 1)
        let urls = (11...20).map { url("http://a.example/\($0)") }
        for u in urls {
            _ = s.queue(u, cache: .missing, now: t(0))
            _ = s.promote(u.key, now: t(0))
        }
        #expect(s.counts.fastRunning == 2 && s.counts.fastWaiting == 8)
        _ = s.finish(urls[0].key, .failure(Self.network), now: t(10))
        #expect(s.task(urls[2].key)?.state == .running)
        _ = s.get(url("http://a.example/30"), waiter: w(1, 1), cache: .missing, now: t(15))
        let actions = s.finish(urls[1].key, .failure(Self.network), now: t(20))
        #expect(actions.contains(.pauseHost(host: "a.example", until: t(5_020))))
        let left = actions.compactMap { action -> String? in if case .toBacklog(let key) = action { key } else { nil } }
        // In key order: 14, 15 and 16 fill the slow lane to its bound; the rest leave memory, the get's task too once
        // its waiter has its answer.
        #expect(left == urls[6...].map(\.key) + ["http://a.example/30"], "\(actions)")
        #expect(actions.contains(.answer(w(1, 1), .failed(Scheduler.hostPaused("a.example", until: t(5_020), now: t(20))))))
        #expect(s.counts.slowWaiting == 3 && s.counts.fastWaiting == 0)
        #expect(urls[3...5].allSatisfy { s.task($0.key)?.lane == .slow && s.task($0.key)?.state == .waiting })
        #expect(s.task(urls[2].key)?.state == .running, "what runs goes on")
    }

    @Test("a success in between resets the count; permanent failures do not count")
    func resets() {
        var s = breaker()
        let notFound = Failure.httpStatus(404)
        for (index, outcome) in [FetchOutcome.failure(Self.network), .success, .failure(Self.network), .failure(notFound)].enumerated() {
            let u = url("http://a.example/\(index)")
            _ = s.get(u, waiter: w(1, UInt64(index)), cache: .missing, now: t(Int64(index) * 10))
            let actions = s.finish(u.key, outcome, now: t(Int64(index) * 10 + 5))
            #expect(!actions.contains { if case .pauseHost = $0 { true } else { false } })
        }
        #expect(s.paused.isEmpty)
    }

    static let unreachable = Failure(code: .network, message: "could not connect", isTransient: true, unreached: true)

    /// Runs `u`'s task, due now or at its retry, to `outcome`; returns the actions of its finish.
    func fail(_ s: inout Scheduler, _ u: CanonicalURL, _ failure: Failure, at now: inout Moment) -> [Action] {
        if case .delayed(let until)? = s.state(u) { now = max(now, until) }
        if let pause = s.paused.first(where: { $0.host == u.authority })?.until { now = max(now, pause) }
        _ = s.advance(to: now)
        #expect(s.state(u) == .running, "\(u.key) should run at \(now)")
        now = now + 10
        return s.finish(u.key, .failure(failure), now: now)
    }

    @Test("queued work on a host that cannot be reached keeps its attempts: the breaker paces it, one try per pause, and it is fetched when the host is back")
    func outageKeepsQueuedWork() throws {
        let retry = RetryPolicy(maxAttempts: 3, baseDelay: 100, maxDelay: 800, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(retry: retry, hostFailureThreshold: 3, hostPause: 5_000), seed: 1)
        var now = t(0)
        #expect(s.queue(U.a, cache: .missing, now: now) == (.queued, [start(U.a, .slow)]))
        var pauses: [Moment] = []
        for _ in 0..<12 {
            for action in fail(&s, U.a, Self.unreachable, at: &now) {
                if case .pauseHost(_, let until) = action { pauses.append(until) }
            }
            #expect(s.task(U.a.key)?.attempts == 1, "only the first failure, on a host not failing yet, is charged")
        }
        #expect(s.task(U.a.key)?.tries == 12, "each try counts as one (a retry opens a connection of its own)")
        // Failures 3 to 12 each paused the host: the count lasts until a success, so a pause ends with one try.
        #expect(pauses.count == 10)
        #expect(zip(pauses, pauses.dropFirst()).allSatisfy { $1.milliseconds - $0.milliseconds >= 5_000 })
        #expect(fail(&s, U.a, Self.unreachable, at: &now).contains { if case .pauseHost = $0 { true } else { false } })
        now = s.paused.first!.until
        #expect(s.advance(to: now) == [start(U.a, .slow)])
        #expect(s.finish(U.a.key, .success, now: now + 10) == [.forget(key: U.a.key)])
        #expect(s.paused.isEmpty && s.task(U.a.key) == nil)
    }

    @Test("what an outage does not forgive: tries that reached the server, the first failure on a host, and failures a get waits for")
    func chargedFailures() throws {
        let retry = RetryPolicy(maxAttempts: 2, baseDelay: 100, maxDelay: 800, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(retry: retry, hostFailureThreshold: 100, hostPause: 5_000), seed: 1)
        var now = t(0)
        // A server that answers 503 was reached: each answer costs the URL an attempt, however long the host fails.
        _ = s.queue(U.a, cache: .missing, now: now)
        let unavailable = Failure.httpStatus(503)
        _ = fail(&s, U.a, unavailable, at: &now)
        #expect(fail(&s, U.a, unavailable, at: &now).contains(.forget(key: U.a.key)))
        // With a success in between, no failure finds its host failing: each one is charged.
        _ = s.queue(U.b, cache: .missing, now: now)
        _ = fail(&s, U.b, Self.unreachable, at: &now)
        #expect(s.queue(U.b2, cache: .missing, now: now) == (.queued, [start(U.b2, .slow)]))
        _ = s.finish(U.b2.key, .success, now: now + 1)
        #expect(fail(&s, U.b, Self.unreachable, at: &now).contains(.forget(key: U.b.key)))
        // A get waiting for its answer gets it after max_attempts, as before: a person is waiting.
        _ = s.get(U.c, waiter: w(1, 1), cache: .missing, now: now)
        _ = fail(&s, U.c, Self.unreachable, at: &now)
        let answered = fail(&s, U.c, Self.unreachable, at: &now)
        #expect(answered.first == .answer(w(1, 1), .failed(Self.unreachable)) && s.task(U.c.key) == nil)
    }

    @Test("without a circuit breaker nothing paces an outage's tries, so every failure is charged")
    func noBreakerNoForgiveness() {
        let retry = RetryPolicy(maxAttempts: 2, baseDelay: 100, maxDelay: 800, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(retry: retry, hostFailureThreshold: nil), seed: 1)
        var now = t(0)
        _ = s.queue(U.a, cache: .missing, now: now)
        _ = fail(&s, U.a, Self.unreachable, at: &now)
        #expect(fail(&s, U.a, Self.unreachable, at: &now).contains(.forget(key: U.a.key)))
    }

    @Test("a pause restored after a restart is a host failing: after it, one failure pauses it again, and costs queued work nothing")
    func restoredPauseKeepsCounting() {
        let retry = RetryPolicy(maxAttempts: 1, baseDelay: 100, maxDelay: 800, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(retry: retry, hostFailureThreshold: 5, hostPause: 5_000), seed: 1)
        s.pause(host: "a.example", until: t(1_000))
        _ = s.queue(U.a, cache: .missing, now: t(0))
        #expect(s.advance(to: t(1_000)) == [start(U.a, .slow)])
        let actions = s.finish(U.a.key, .failure(Self.unreachable), now: t(1_010))
        #expect(actions.first == .pauseHost(host: "a.example", until: t(6_010)))
        #expect(s.task(U.a.key)?.attempts == 0 && s.task(U.a.key)?.tries == 1, "kept, with max_attempts 1")
    }

    @Test("a host's failures in a row are forgotten after twice the longer of a pause and the longest backoff")
    func failuresForgotten() {
        let retry = RetryPolicy(maxAttempts: 1, baseDelay: 100, maxDelay: 800, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(retry: retry, hostFailureThreshold: 2, hostPause: 5_000), seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.finish(U.a.key, .failure(Self.network), now: t(10))
        // 10 s later a.example is not one failure from a pause any more, nor failing: a2's failure is charged.
        _ = s.queue(U.a2, cache: .missing, now: t(10_010))
        let actions = s.finish(U.a2.key, .failure(Self.unreachable), now: t(10_020))
        #expect(!actions.contains { if case .pauseHost = $0 { true } else { false } }, "\(actions)")
        #expect(actions.contains(.forget(key: U.a2.key)), "charged: its one attempt is used up")
        // Within the time, the count goes on: one more failure pauses the host.
        _ = s.queue(U.a3, cache: .missing, now: t(10_030))
        #expect(s.finish(U.a3.key, .failure(Self.network), now: t(19_000)).first == .pauseHost(host: "a.example", until: t(24_000)))
    }

    @Test("a pause restored after a restart holds until it ends")
    func restored() {
        var s = breaker()
        s.pause(host: "a.example", until: t(1_000))
        #expect(s.queue(U.a, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.advance(to: t(999)) == [])
        #expect(s.advance(to: t(1_000)) == [start(U.a, .slow)])
    }
}
