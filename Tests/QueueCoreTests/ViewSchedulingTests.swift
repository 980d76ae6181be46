import Testing
@testable import QueueCore

@Suite("Views: tentative tasks, holds, release, queueing at the front")
struct ViewSchedulingTests {
    @Test("queue at the front puts a new task, or a waiting one, first in the slow lane")
    func queueAtFront() {
        var s = makeScheduler()
        _ = s.get(U.c, waiter: w(9, 1), cache: .missing, now: t(0))        // suspends the slow lane
        for u in [U.a, U.a2, U.a3] { _ = s.queue(u, cache: .missing, now: t(0)) }
        #expect(s.queue(U.b, cache: .missing, now: t(0), atFront: true).0 == .queued)
        #expect(s.queue(U.a3, cache: .missing, now: t(0), atFront: true).0 == .already)
        let actions = s.finish(U.c.key, .success, now: t(1))
        #expect(actions.contains(start(U.a3, .slow)) && !actions.contains(start(U.b, .slow)))
        #expect(s.finish(U.a3.key, .success, now: t(2)).contains(start(U.b, .slow)))
        #expect(s.finish(U.b.key, .success, now: t(3)).contains(start(U.a, .slow)))
    }

    @Test("a tentative task is adopted by an ordinary get or queue")
    func adoption() {
        var s = makeScheduler()
        _ = s.get(U.c, waiter: w(9, 1), cache: .missing, now: t(0))
        _ = s.queue(U.a, cache: .missing, now: t(0), tentative: true)
        _ = s.queue(U.b, cache: .missing, now: t(0), tentative: true)
        #expect(s.task(U.a.key)?.tentative == true)
        _ = s.queue(U.a, cache: .missing, now: t(0))
        #expect(s.task(U.a.key)?.tentative == false)
        _ = s.get(U.b, waiter: w(1, 1), cache: .missing, now: t(0))
        #expect(s.task(U.b.key)?.tentative == false)
        // A tentative request never makes an ordinary task tentative.
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(0), tentative: true)
        #expect(s.task(U.b.key)?.tentative == false)
    }

    @Test("releasing the last waiter demotes the task; releasing one of two leaves it urgent")
    func release() {
        var s = makeScheduler(fast: 1)
        _ = s.get(U.c, waiter: w(9, 1), cache: .missing, now: t(0))        // runs; the rest waits
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0), tentative: true)
        _ = s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(0))
        #expect(s.release([w(1, 1)], now: t(1)) == [])
        #expect(s.lane(U.a) == .fast && s.waiters(U.a) == [w(2, 1)])
        #expect(s.release([w(2, 1)], now: t(1)) == [])
        #expect(s.lane(U.a) == .slow && s.state(U.a) == .waiting && s.counts == s.recomputedCounts)
    }

    @Test("releasing the last waiter of a running fetch makes it background in place")
    func releaseRunning() {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0), tentative: true)
        #expect(s.release([w(1, 1)], now: t(1)) == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        #expect(s.state(U.a) == .running && s.lane(U.a) == .slow)
    }

    @Test("releasing the last waiter of a running fetch whose response began while the slow lane is full parks it; it resumes first")
    func releaseRunningIntoFullSlowLane() throws {
        var s = makeScheduler(fast: 2, slow: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0), tentative: true)
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(0), tentative: true)
        _ = s.responseStarted(U.b.key, now: t(0))
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        #expect(s.release([w(1, 1)], now: t(1)) == [.changeLane(key: U.a.key, lane: .slow)])
        #expect(s.release([w(1, 2)], now: t(1)) == [.park(key: U.b.key), .holdBackground(false)])
        let parked = try #require(s.task(U.b.key))
        #expect(parked.lane == .slow && parked.state == .waiting && parked.attempts == 1)
        #expect(s.counts.slowRunning == 1 && s.counts.slowWaiting == 2)
        // The slot frees: b resumes (same attempt) before s1, which was queued earlier.
        #expect(s.finish(U.a.key, .success, now: t(2)) == [.forget(key: U.a.key), start(U.b, .slow)])
        #expect(s.task(U.b.key)?.attempts == 1)
    }

    @Test("unhold drops a tentative waiting task once no row holds it")
    func drop() {
        var s = makeScheduler()
        _ = s.get(U.c, waiter: w(9, 1), cache: .missing, now: t(0))
        _ = s.queue(U.a, cache: .missing, now: t(0), tentative: true, atFront: true)
        s.hold(U.a.key)
        s.hold(U.a.key)
        #expect(s.unhold(U.a.key, dropping: true, now: t(1)) == [])
        #expect(s.task(U.a.key) != nil && s.holdCount(U.a.key) == 1)
        #expect(s.unhold(U.a.key, dropping: true, now: t(1)) == [.forget(key: U.a.key)])
        #expect(s.task(U.a.key) == nil && s.holdCount(U.a.key) == 0 && s.counts == s.recomputedCounts)
        #expect(s.unhold(U.a.key, dropping: true, now: t(1)) == [])       // not held: nothing
    }

    @Test("unhold never drops an adopted, running or waited-for task, nor one let go of without dropping, nor a parked one while at most fastWidth are parked")
    func keep() {
        var s = makeScheduler(fast: 2, slow: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))                       // ordinary, runs in the slow lane
        _ = s.get(U.c, waiter: w(9, 1), cache: .missing, now: t(0))         // suspends the slow lane
        _ = s.queue(U.a, cache: .missing, now: t(0))                        // ordinary
        _ = s.queue(U.b, cache: .missing, now: t(0), tentative: true)
        _ = s.get(U.a2, waiter: w(1, 1), cache: .missing, now: t(0), tentative: true)   // running, tentative
        _ = s.get(U.b2, waiter: w(1, 2), cache: .missing, now: t(0), tentative: true)   // waiting, waited for
        _ = s.responseStarted(U.a2.key, now: t(0))
        for key in [U.a, U.b, U.a2, U.b2].map(\.key) { s.hold(key) }
        #expect(s.unhold(U.a.key, dropping: true, now: t(1)) == [])
        #expect(s.unhold(U.b.key, dropping: false, now: t(1)) == [])
        #expect(s.unhold(U.a2.key, dropping: true, now: t(1)) == [])
        #expect(s.unhold(U.b2.key, dropping: true, now: t(1)) == [])
        #expect([U.a, U.b, U.a2, U.b2].allSatisfy { s.task($0.key) != nil })
        // A running tentative fetch released while the slow lane is full is parked with its bytes: never dropped.
        #expect(s.release([w(1, 1)], now: t(2)) == [.park(key: U.a2.key), start(U.b2, .fast)])
        #expect(s.counts.slowRunning == 1 && s.state(U.a2) == .waiting)
        s.hold(U.a2.key)
        #expect(s.unhold(U.a2.key, dropping: true, now: t(2)) == [])
        // Nor one parked by an explicit demote.
        _ = s.queue(U.b, cache: .missing, now: t(2))                       // adopted
        _ = s.get(U.b, waiter: w(3, 1), cache: .missing, now: t(2))
        #expect(s.state(U.b2) == .running)
        _ = s.responseStarted(U.b2.key, now: t(3))
        #expect(s.demote(U.b2.key, now: t(3)) == [.park(key: U.b2.key), start(U.b, .fast)])
        #expect(s.release([w(1, 2)], now: t(3)) == [])
        s.hold(U.b2.key)
        #expect(s.unhold(U.b2.key, dropping: true, now: t(3)) == [])
        #expect(s.task(U.a2.key)?.state == .waiting && s.task(U.b2.key)?.state == .waiting)
    }

    @Test("beyond fastWidth parked tasks, one let go of with dropping goes with its bytes: a flicked list leaves no pile of parked downloads")
    func dropParkedBeyondFastWidth() {
        var s = makeScheduler(fast: 2, slow: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))                       // runs in the slow lane: it is full
        for (n, u) in zip(UInt64(1)..., [U.a, U.a2, U.a3]) {
            _ = s.get(u, waiter: w(1, n), cache: .missing, now: t(0), tentative: true)
            _ = s.responseStarted(u.key, now: t(0))
            s.hold(u.key)
            _ = s.release([w(1, n)], now: t(1))                         // scrolled out of sight: parked
        }
        #expect(s.parkedCount == 3 && [U.a, U.a2, U.a3].allSatisfy { s.state($0) == .waiting })
        #expect(s.unhold(U.a.key, dropping: true, now: t(2)) == [.forget(key: U.a.key)])
        #expect(s.parkedCount == 2 && s.task(U.a.key) == nil && s.counts == s.recomputedCounts)
        #expect(s.unhold(U.a2.key, dropping: true, now: t(2)) == [], "two parked: kept for a scroll back")
        #expect(s.parkedCount == 2 && s.state(U.a2) == .waiting)
        // A parked task that resumes is no longer counted.
        #expect(s.finish(U.s1.key, .success, now: t(3)).contains(start(U.a3, .slow)))
        #expect(s.parkedCount == 1)
    }
}

@Suite("Batches")
struct BatchTests {
    @Test("a scroll as one batch: released rows do not start on the way, the new screen does, slow_width holds")
    func scroll() {
        var s = makeScheduler(fast: 8, slow: 1)
        let screen0 = (0..<20).map { url("http://v.example/\($0)") }, screen1 = (20..<40).map { url("http://v.example/\($0)") }
        for (i, u) in screen0.enumerated() { _ = s.get(u, waiter: w(1, UInt64(i)), cache: .missing, now: t(0), tentative: true) }
        #expect(s.counts.fastRunning == 8 && s.counts.fastWaiting == 12)
        for u in screen0.prefix(8) { _ = s.responseStarted(u.key, now: t(0)) }
        let actions = s.batch(now: t(1)) { s in
            var actions: [Action] = []
            actions += s.release((0..<20).map { w(1, UInt64($0)) }, now: t(1))
            for (i, u) in screen1.enumerated() { actions += s.get(u, waiter: w(1, UInt64(20 + i)), cache: .missing, now: t(1), tentative: true) }
            return actions
        }
        let started = actions.compactMap { if case .start(let key, _, _) = $0 { key } else { nil } }
        #expect(started == screen1.prefix(8).map(\.key))
        // One released transfer goes on in place as background work; the other seven are parked with their bytes.
        #expect(actions.filter { if case .changeLane = $0 { true } else { false } } == [.changeLane(key: screen0[0].key, lane: .slow)])
        #expect(actions.filter { if case .park = $0 { true } else { false } } == screen0[1..<8].map { .park(key: $0.key) })
        #expect(s.counts.slowRunning == 1 && s.counts.slowWaiting == 19 && s.counts.fastRunning == 8)
        #expect(s.counts == s.recomputedCounts)
    }

    @Test("events between deferAdmission and admitDeferred start nothing until the outermost ends, and then start what one batch of them starts (queue --now of a list applies each promotion's actions as it comes)")
    func deferredAdmission() {
        let urls = (0..<12).map { url("http://d.example/\($0)") }
        func events(_ s: inout Scheduler) -> [Action] {
            var actions: [Action] = []
            for u in urls {
                actions += s.queue(u, cache: .missing, now: t(1)).1
                actions += s.promote(u.key, now: t(1))
            }
            return actions
        }
        var batched = makeScheduler(fast: 4, slow: 1), deferred = batched
        let once = batched.batch(now: t(1)) { events(&$0) }
        deferred.deferAdmission()
        var actions = events(&deferred)
        deferred.deferAdmission()  // nested: still nothing starts
        #expect(deferred.admitDeferred(now: t(1)) == [] && deferred.counts.fastRunning == 0 && deferred.counts.fastWaiting == 12)
        actions += deferred.admitDeferred(now: t(1))
        #expect(actions == once)
        #expect(actions.filter { if case .start = $0 { true } else { false } }.count == 4)
        #expect(deferred.counts == batched.counts && deferred.counts == deferred.recomputedCounts)
    }

    @Test("a view scrolling 1,000 times never runs more than slow_width background transfers; parked ones resume")
    func scrollingFast() {
        var s = makeScheduler(fast: 8, slow: 1)
        var visible: [(CanonicalURL, Waiter)] = []
        var request: UInt64 = 0
        var maxSlow = 0, maxFast = 0, parks = 0
        var running: Set<String> = []
        for scroll in 0..<1_000 {
            let screen = (0..<10).map { url("http://v.example/\((scroll * 3 + $0) % 400)") }
            let actions = s.batch(now: t(Int64(scroll))) { s in
                var actions: [Action] = []
                actions += s.release(visible.map(\.1), now: t(Int64(scroll)))
                visible = screen.map { u in
                    request += 1
                    return (u, w(1, request))
                }
                for (u, waiter) in visible { actions += s.get(u, waiter: waiter, cache: .missing, now: t(Int64(scroll)), tentative: true) }
                return actions
            }
            // The server answers at once: each start's response begins.
            for action in actions {
                switch action {
                case .start(let key, _, _): running.insert(key); _ = s.responseStarted(key, now: t(Int64(scroll)))
                case .park(let key): running.remove(key); parks += 1
                default: break
                }
            }
            // Every fifth scroll a transfer ends.
            if scroll % 5 == 0, let key = running.sorted().first {
                running.remove(key)
                for case .start(let key, _, _) in s.finish(key, .success, now: t(Int64(scroll))) {
                    running.insert(key)
                    _ = s.responseStarted(key, now: t(Int64(scroll)))
                }
            }
            maxSlow = max(maxSlow, s.counts.slowRunning)
            maxFast = max(maxFast, s.counts.fastRunning)
        }
        #expect(maxSlow == 1 && maxFast == 8 && running.count == s.counts.fastRunning + s.counts.slowRunning)
        #expect(parks > 1_000)
        // Nothing was started from byte 0 again: a parked task resumes within its first attempt.
        #expect(s.allTasks.allSatisfy { $0.attempts <= 1 })
        #expect(s.counts == s.recomputedCounts)
    }

    @Test("a scroll before the server answered: released transfers linger with their requests out (up to fast_width), none is parked")
    func scrollBeforeResponses() {
        var s = makeScheduler(fast: 8, slow: 1)
        let screen0 = (0..<20).map { url("http://v.example/\($0)") }, screen1 = (20..<40).map { url("http://v.example/\($0)") }
        for (i, u) in screen0.enumerated() { _ = s.get(u, waiter: w(1, UInt64(i)), cache: .missing, now: t(0), tentative: true) }
        let actions = s.batch(now: t(1)) { s in
            var actions = s.release((0..<20).map { w(1, UInt64($0)) }, now: t(1))
            for (i, u) in screen1.enumerated() { actions += s.get(u, waiter: w(1, UInt64(20 + i)), cache: .missing, now: t(1), tentative: true) }
            return actions
        }
        #expect(actions.compactMap { if case .start(let key, _, _) = $0 { key } else { nil } } == screen1.prefix(8).map(\.key))
        #expect(!actions.contains { if case .park = $0 { true } else { false } })
        #expect(s.counts.slowRunning == 1 && s.counts.lingering == 7 && s.counts.fastRunning == 8 && s.counts == s.recomputedCounts)
        // Shown again before their responses: back in the fast lane in turn, without a new request.
        let back = s.batch(now: t(2)) { s in
            var actions = s.release((20..<40).map { w(1, UInt64($0)) }, now: t(2))
            for (i, u) in screen0.enumerated() { actions += s.get(u, waiter: w(1, UInt64(40 + i)), cache: .missing, now: t(2), tentative: true) }
            return actions
        }
        let restarted = back.compactMap { if case .start(let key, _, _) = $0 { key } else { nil } }.filter { key in screen0.prefix(8).contains { $0.key == key } }
        #expect(restarted == [], "no new request for the rows whose requests were out: \(back)")
        #expect(screen0.prefix(8).allSatisfy { s.task($0.key)?.state == .running && s.task($0.key)?.tries == 1 })
        #expect(s.counts.lingering <= 8 && s.counts == s.recomputedCounts)
    }

    @Test("a view flicked between two screens every 500 ms, the server's first byte after 0.6-1.4 s: every row loads while the flicking goes on (none did: each hidden row's request was dropped)",
          arguments: [1, 2, 3] as [UInt64])
    func flickFasterThanFirstByte(seed: UInt64) {
        var s = makeScheduler(fast: 8, slow: 1)
        var random = SplitMix64(seed: seed)
        for n in 0..<50 { _ = s.queue(url("http://bg.example/\(n)"), cache: .missing, now: t(0)) }
        let rows = (0..<20).map { url("http://v.example/\($0)") }
        var visible: [Waiter] = []
        var request: UInt64 = 0
        var due: [String: (response: Int64, end: Int64, responded: Bool)] = [:]
        var requests: [String: Int] = [:]
        var loaded: Set<String> = []
        func apply(_ actions: [Action], at now: Int64) {
            for action in actions {
                switch action {
                case .start(let key, _, _):
                    let firstByte = now + 600 + Int64(random.next() % 800)
                    due[key] = (firstByte, firstByte + 100, false)
                    requests[key, default: 0] += 1
                case .park(let key), .abort(let key): due[key] = nil
                default: break
                }
            }
        }
        for tick in 0..<120 {  // 250 ms each: 30 s
            let now = Int64(tick) * 250
            for key in due.keys.sorted() {
                guard let event = due[key] else { continue }
                if !event.responded, event.response <= now {
                    due[key]!.responded = true
                    apply(s.responseStarted(key, now: t(now)), at: now)
                }
                if let event = due[key], event.responded, event.end <= now {
                    due[key] = nil
                    loaded.insert(key)
                    apply(s.finish(key, .success, now: t(now)), at: now)
                }
            }
            guard tick % 2 == 0, tick < 80 else { continue }  // a flick every 500 ms for 20 s, then the person stops
            let screen = (tick / 2) % 2 == 0 ? rows[0..<10] : rows[10..<20]
            let actions = s.batch(now: t(now)) { s in
                var actions = s.release(visible, now: t(now))
                visible = screen.map { _ in request += 1; return w(1, request) }
                for (u, waiter) in zip(screen, visible) {
                    actions += s.get(u, waiter: waiter, cache: loaded.contains(u.key) ? .fresh : .missing, now: t(now), tentative: true)
                }
                return actions
            }
            apply(actions, at: now)
            if tick == 78 {
                let asked = rows.map { requests[$0.key, default: 0] }
                #expect(rows.allSatisfy { loaded.contains($0.key) }, "every row loaded while the flicking went on; requests per row \(asked)")
            }
        }
        #expect(s.counts == s.recomputedCounts)
    }

    @Test("without a batch, each release would start the next waiting row of the screen being left")
    func unbatched() {
        var s = makeScheduler(fast: 8, slow: 1)
        let screen0 = (0..<20).map { url("http://v.example/\($0)") }
        for (i, u) in screen0.enumerated() { _ = s.get(u, waiter: w(1, UInt64(i)), cache: .missing, now: t(0), tentative: true) }
        let actions = s.release([w(1, 0)], now: t(1))
        #expect(actions.contains(.start(key: screen0[8].key, lane: .fast, revalidate: false)))
    }
}

@Suite("Per-host start rate (token bucket)")
struct StartRateTests {
    func scheduler(perSecond: Double, burst: Int, fast: Int = 8) -> Scheduler {
        Scheduler(configuration: .init(fastWidth: fast, slowWidth: 1, retry: testRetry,
                                       hostStartRate: .init(perSecond: perSecond, burst: burst)), seed: 1)
    }

    @Test("a burst starts at once; then one start per 1/rate seconds, woken by nextDeadline")
    func burstThenRate() {
        var s = scheduler(perSecond: 10, burst: 3)
        var started: [String] = []
        for (i, u) in [U.a, U.a2, U.a3, url("http://a.example/4"), url("http://a.example/5")].enumerated() {
            for case .start(let key, _, _) in s.get(u, waiter: w(1, UInt64(i)), cache: .missing, now: t(0)) { started.append(key) }
        }
        #expect(started == [U.a.key, U.a2.key, U.a3.key])
        #expect(s.nextDeadline == t(100))
        #expect(s.advance(to: t(99)).isEmpty)
        #expect(s.advance(to: t(100)).contains(.start(key: "http://a.example/4", lane: .fast, revalidate: false)))
        #expect(s.nextDeadline == t(200))
        #expect(s.advance(to: t(200)).contains(.start(key: "http://a.example/5", lane: .fast, revalidate: false)))
        #expect(s.nextDeadline == t(5_000))  // the first starts' urgent slices end
    }

    @Test("hosts have buckets of their own")
    func perHost() {
        var s = scheduler(perSecond: 1, burst: 1)
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0)).contains(start(U.a, .fast)))
        #expect(!s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(0)).contains(start(U.a2, .fast)))
        #expect(s.get(U.b, waiter: w(1, 3), cache: .missing, now: t(0)).contains(start(U.b, .fast)))
        #expect(s.nextDeadline == t(1000))
    }

    @Test("when tokens are scarce, urgent work gets them before background work")
    func urgentFirst() {
        var s = scheduler(perSecond: 1, burst: 1)
        _ = s.queue(U.a, cache: .missing, now: t(0))
        _ = s.queue(U.a2, cache: .missing, now: t(0))                       // waits for a token
        _ = s.get(U.a3, waiter: w(1, 1), cache: .missing, now: t(10))       // urgent, waits for a token too
        #expect(s.finish(U.a.key, .success, now: t(20)).isEmpty == false)
        let actions = s.advance(to: t(1000))
        #expect(actions.contains(start(U.a3, .fast)) && !actions.contains(start(U.a2, .slow)))
        _ = s.finish(U.a3.key, .success, now: t(1100))
        #expect(s.advance(to: t(2000)).contains(start(U.a2, .slow)))
    }

    @Test("a host waiting for tokens does not hold up another host's work queued behind hundreds of its entries")
    func noHeadOfLineBlocking() {
        var s = scheduler(perSecond: 1, burst: 1, fast: 100)
        for i in 0..<300 { _ = s.get(url("http://a.example/\(i)"), waiter: w(1, UInt64(i)), cache: .missing, now: t(0)) }
        #expect(s.counts.fastRunning == 1 && s.counts.fastWaiting == 299)
        #expect(s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(1)).contains(start(U.b, .fast)))
    }

    @Test("over 10 simulated seconds a host gets no more than burst + rate × time starts")
    func bound() {
        var s = scheduler(perSecond: 20, burst: 5, fast: 100)
        var starts: [Int64] = []
        var now: Int64 = 0
        var request: UInt64 = 0
        while now <= 10_000 {
            // A new urgent request every 5 ms, and every running fetch finishes 5 ms after it started.
            request += 1
            var actions = s.get(url("http://a.example/\(request)"), waiter: w(1, request), cache: .missing, now: t(now))
            actions += s.advance(to: t(now))
            for case .start(let key, _, _) in actions {
                starts.append(now)
                _ = s.finish(key, .success, now: t(now))
            }
            now += 5
        }
        for (i, at) in starts.enumerated() {
            #expect(Double(i + 1) <= 5 + 20 * Double(at) / 1000 + 1e-9, "start \(i + 1) at \(at) ms")
        }
        #expect(starts.count >= 200)
    }
}
