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
        #expect(s.nextDeadline == t(5_030))
        _ = s.finish(U.b.key, .success, now: t(70))
        #expect(s.task(U.a3.key)?.state == .waiting)
        #expect(s.advance(to: t(5_030)) == [start(U.a3, .slow)])
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
        guard case .answer(w(2, 1), .failed(let failure))? = late.first else { Issue.record("\(late)"); return }
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

    @Test("a pause restored after a restart holds until it ends")
    func restored() {
        var s = breaker()
        s.pause(host: "a.example", until: t(1_000))
        #expect(s.queue(U.a, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.advance(to: t(999)) == [])
        #expect(s.advance(to: t(1_000)) == [start(U.a, .slow)])
    }
}
