import Testing
@testable import QueueCore

/// Failures of this machine (a full disk) and of a host as a whole (the circuit breaker) as the waiters see them.
@Suite("Local conditions")
struct LocalConditionTests {
    static let diskFull = Failure(code: .diskFull, message: "writing the body: No space left on device", isTransient: true)
    static let network = Failure(code: .network, message: "connection refused", isTransient: true)

    @Test("disk_full: the waiter is answered at once, the queued task is kept without using an attempt, background work waits for the backoff")
    func diskFullKeepsTheTask() throws {
        var s = makeScheduler()
        #expect(s.queue(U.a, cache: .missing, now: t(0)) == (.queued, [start(U.a, .slow)]))
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(5))
        for attempt in 1...10 {
            let actions = s.finish(U.a.key, .failure(Self.diskFull), now: t(Int64(attempt) * 100_000))
            if attempt == 1 { #expect(actions.contains(.answer(w(1, 1), .failed(Self.diskFull))), "\(actions)") }
            #expect(!actions.contains { if case .forget = $0 { true } else { false } }, "the acknowledged URL stays queued")
            let task = try #require(s.task(U.a.key))
            #expect(task.lane == .slow && task.waiters.isEmpty && task.attempts == 0, "\(task)")
            let until = try #require(s.waitingForDiskUntil)
            #expect(task.state.delayedUntil == until)
            #expect(s.nextDeadline == until)
            // Space is still missing when the retry comes.
            #expect(s.advance(to: until) == [start(U.a, .slow)])
        }
        _ = s.finish(U.a.key, .failure(Self.diskFull), now: t(1_100_000))
        #expect(s.queue(U.b, cache: .missing, now: t(1_100_001)) == (.queued, []), "no background work starts meanwhile")
        #expect(s.get(U.c, waiter: w(2, 1), cache: .missing, now: t(1_100_002)).contains(start(U.c, .fast)), "urgent work does")
        let after = s.finish(U.c.key, .success, now: t(1_100_003))
        #expect(s.waitingForDiskUntil == nil, "a file written shows that space is back")
        #expect(after.contains(start(U.b, .slow)), "\(after)")
        #expect(s.counts == s.recomputedCounts)
    }

    @Test("the backoff grows while the disk stays full, up to the retry policy's maximum")
    func diskFullBackoffGrows() throws {
        var s = makeScheduler()
        _ = s.queue(U.a, cache: .missing, now: t(0))
        var waits: [Int64] = []
        var now = t(0)
        for _ in 0..<6 {
            _ = s.finish(U.a.key, .failure(Self.diskFull), now: now)
            let until = try #require(s.waitingForDiskUntil)
            waits.append(until.milliseconds - now.milliseconds)
            now = until
            _ = s.advance(to: now)
        }
        #expect(waits.last! >= waits.first!, "\(waits)")
        #expect(waits.allSatisfy { $0 <= testRetry.maxDelay }, "\(waits)")
    }

    @Test("the get whose own failure trips the circuit breaker gets that failure, not host_paused; other waiters get host_paused")
    func ownFailureTripsBreaker() throws {
        let retry = RetryPolicy(maxAttempts: 3, baseDelay: 100, maxDelay: 100, retryAfterCap: 1_000, negativeTTL: 1_000)
        var s = Scheduler(configuration: .init(fastWidth: 1, retry: retry, hostFailureThreshold: 1, hostPause: 5_000), seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.a2, waiter: w(2, 1), cache: .missing, now: t(0))
        let actions = s.finish(U.a.key, .failure(Self.network), now: t(10))
        #expect(actions.contains(.answer(w(1, 1), .failed(Self.network))), "\(actions)")
        let other = actions.compactMap { action -> ErrorCode? in
            if case .answer(w(2, 1), .failed(let failure)) = action { return failure.code }
            return nil
        }
        #expect(other == [.hostPaused])
        #expect(s.task(U.a.key)?.state.delayedUntil != nil, "the task itself is retried after the pause")
        #expect(s.counts == s.recomputedCounts)
    }
}
