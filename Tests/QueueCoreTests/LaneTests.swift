import Testing
@testable import QueueCore

@Suite("Lanes: suspension, widths, per-host limit, reconfigure")
struct LaneTests {
    @Test("slow lane is suspended while fast work is pending or running, and resumes after")
    func slowLaneSuspension() {
        var s = makeScheduler(fast: 1)
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, [start(U.s1, .slow)]))
        #expect(s.queue(U.s2, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.counts.slowSuspended)
        #expect(s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(1)) == [])   // pending fast work
        // A slow task ends while urgent work runs: nothing slow is admitted.
        #expect(s.finish(U.s1.key, .success, now: t(2)) == [.forget(key: U.s1.key)])
        // a ends, b (pending) starts: still suspended, no report.
        #expect(s.finish(U.a.key, .success, now: t(3)) == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.b, .fast)])
        #expect(s.queue(U.s3, cache: .missing, now: t(3)) == (.queued, []))
        // The fast lane empties: the slow lane resumes, s2 first.
        #expect(s.finish(U.b.key, .success, now: t(4))
                == [.answer(w(1, 2), .ready), .forget(key: U.b.key), start(U.s2, .slow), .holdBackground(false)])
        #expect(!s.counts.slowSuspended)
        #expect(s.finish(U.s2.key, .success, now: t(5)) == [.forget(key: U.s2.key), start(U.s3, .slow)])
    }

    @Test("slow lane stays suspended while fast work waits only because of the per-host limit")
    func suspendedByBlockedFastWork() {
        var s = makeScheduler(fast: 4, perHost: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        #expect(s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(0)) == [])
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.counts.fastWaiting == 1 && s.counts.slowSuspended)
        #expect(s.finish(U.a.key, .success, now: t(1)) == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.a2, .fast)])
        #expect(s.finish(U.a2.key, .success, now: t(2))
                == [.answer(w(1, 2), .ready), .forget(key: U.a2.key), start(U.s1, .slow), .holdBackground(false)])
    }

    @Test("fast width: at most fastWidth fast tasks run, the rest wait in order")
    func fastWidth() {
        var s = makeScheduler(fast: 2)
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(0)) == [start(U.b, .fast)])
        #expect(s.get(U.c, waiter: w(1, 3), cache: .missing, now: t(0)) == [])
        #expect(s.get(U.a2, waiter: w(1, 4), cache: .missing, now: t(0)) == [])
        #expect(s.counts.fastRunning == 2 && s.counts.fastWaiting == 2)
        #expect(s.finish(U.b.key, .success, now: t(1)) == [.answer(w(1, 2), .ready), .forget(key: U.b.key), start(U.c, .fast)])
        #expect(s.cancel(U.a.key, now: t(2)) == [.abort(key: U.a.key), .answer(w(1, 1), .cancelled), .forget(key: U.a.key),
                                                 start(U.a2, .fast)])
    }

    @Test("a fast task that held its place for urgentSlice steps aside: the next urgent task starts beside it, up to fastWidth such; one more yields its place to urgent work not begun (parked); the background lane stays suspended")
    func urgentSlice() {
        var s = Scheduler(configuration: .init(fastWidth: 2, slowWidth: 1, retry: testRetry, urgentSlice: 1_000), seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))   // a trickling server's two images
        _ = s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(500))
        #expect(s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(600)) == [])  // a healthy server's waits
        _ = s.get(U.c, waiter: w(3, 1), cache: .missing, now: t(600))
        _ = s.get(U.b2, waiter: w(2, 2), cache: .missing, now: t(600))
        #expect(s.queue(U.s1, cache: .missing, now: t(600)) == (.queued, []))
        #expect(s.nextDeadline == t(1_000))
        #expect(s.advance(to: t(999)) == [])
        #expect(s.advance(to: t(1_000)) == [start(U.b, .fast)])
        #expect(s.counts.fastRunning == 3 && s.counts.fastSteppedAside == 1)
        #expect(s.hasSteppedAside(U.a.key) && !s.hasSteppedAside(U.a2.key) && !s.hasSteppedAside(U.b.key))
        #expect(s.nextDeadline == t(1_500))
        #expect(s.advance(to: t(1_500)) == [start(U.c, .fast)])
        #expect(s.counts.fastRunning == 4 && s.counts.fastSteppedAside == 2 && s.counts.fastWaiting == 1)
        // fastWidth have stepped aside: past its slice b keeps its place but yields it to b2, not begun; it is
        // parked, first in line.
        #expect(s.nextDeadline == t(2_000))
        #expect(s.advance(to: t(2_000)) == [.park(key: U.b.key), start(U.b2, .fast)])
        #expect(s.counts.fastRunning == 4 && s.counts.fastSteppedAside == 2 && s.counts.fastWaiting == 1)
        // Past its slice c yields to nothing begun before (b): it keeps its place.
        #expect(s.nextDeadline == t(2_500))
        #expect(s.advance(to: t(2_500)) == [])
        #expect(s.nextDeadline == t(3_000))  // b2's
        // One that stepped aside ends: c steps aside in its room without a stop, and b resumes in c's place.
        #expect(s.finish(U.a.key, .success, now: t(2_600))
                == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.b, .fast)])
        #expect(s.counts.fastRunning == 4 && s.counts.fastSteppedAside == 2 && s.counts.slowRunning == 0)
        // Demoted, one that stepped aside leaves the fast lane; a promotion in place needs a place, not a step aside.
        #expect(s.demote(U.a2.key, now: t(2_603)) == [.changeLane(key: U.a2.key, lane: .slow)])
        #expect(s.counts.fastRunning == 3 && s.counts.fastSteppedAside == 1 && !s.hasSteppedAside(U.a2.key))
        #expect(s.get(U.a2, waiter: w(4, 1), cache: .missing, now: t(2_604)) == [])  // b and b2 hold the places
        #expect(s.task(U.a2.key)?.promotionPending == true)
    }

    @Test("a preemptible urgent fetch yields its place to the turn owed one, also on its own host at per_host (it went to the next turn's work on another host: the host looked full while the fetch about to be parked held it)")
    func preemptionKeepsTurnsOnItsHost() {
        var s = Scheduler(configuration: .init(fastWidth: 1, slowWidth: 1, perHostLimit: 1, retry: testRetry,
                                               urgentSlice: 1_000), seed: 1)
        #expect(s.get(U.c, waiter: w(2, 1), cache: .missing, now: t(0)) == [start(U.c, .fast), .holdBackground(true)])
        _ = s.get(U.b, waiter: w(2, 2), cache: .missing, now: t(0))
        _ = s.get(U.b2, waiter: w(3, 1), cache: .missing, now: t(0))
        // c steps aside; client 3's turn comes before client 2's second.
        #expect(s.advance(to: t(1_000)) == [start(U.b2, .fast)])
        _ = s.get(U.a, waiter: w(3, 2), cache: .missing, now: t(1_000))
        // Past its slice b2 yields its place: to client 2's b, on b2's host, not to client 3's a.
        #expect(s.advance(to: t(2_000)) == [.park(key: U.b2.key), start(U.b, .fast)])
    }

    @Test("a get is not held back by 1,100 urgent tasks of a host at per_host ahead of it in other turns: each turn has a budget of entries to pass over, and past all turns' a turn's first entry is still looked at (one budget shared by all turns was used up, and every client's gets waited for that host's transfers)")
    func blockedTurnLeavesOthersTheirShare() {
        var s = Scheduler(configuration: .init(fastWidth: 4, slowWidth: 1, perHostLimit: 1, retry: testRetry,
                                               urgentSlice: nil), seed: 1)
        let slow = (0..<1_100).map { url("http://slow.example/\($0)") }
        _ = s.batch(now: t(0)) { s in
            slow.flatMap { u in s.queue(u, cache: .missing, now: t(0)).1 + s.promote(u.key, now: t(0)) }
        }
        #expect(s.counts.fastRunning == 1 && s.counts.fastWaiting == 1_099, "\(s.counts)")
        #expect(s.get(U.b, waiter: w(7, 1), cache: .missing, now: t(1)) == [start(U.b, .fast)])
        // Five more clients with 1,100 waiting gets each of that host: past 4,096 entries passed over in all, a turn's
        // first is still looked at, and the work behind them starts (four such clients held another's gets for
        // seconds).
        var more = s
        _ = more.batch(now: t(2)) { s in
            (10..<15).flatMap { client in
                (0..<1_100).flatMap { n in
                    s.get(url("http://slow.example/c\(client)-\(n)"), waiter: w(UInt64(client), UInt64(n)),
                          cache: .missing, now: t(2))
                }
            }
        }
        #expect(more.get(U.c, waiter: w(60, 1), cache: .missing, now: t(3)) == [start(U.c, .fast)])
    }

    @Test("a lingering task takes the slow lane's place freed past a slice before an abandoned fetch demoted at the same moment: it lingered first")
    func lingeringBeforeAbandonedDemotions() {
        var s = Scheduler(configuration: .init(fastWidth: 2, slowWidth: 1, retry: testRetry, backgroundSlice: 500,
                                               urgentSlice: nil), seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0))
        #expect(s.demote(U.a.key, now: t(0)) == [.changeLane(key: U.a.key, lane: .slow)])  // a holds the slow place
        #expect(s.demote(U.b.key, now: t(0)) == [.changeLane(key: U.b.key, lane: .slow), .holdBackground(false)])
        #expect(s.task(U.b.key)?.lingering == true)
        #expect(s.get(U.c, waiter: w(3, 1), cache: .missing, now: t(0)) == [start(U.c, .fast), .holdBackground(true)])
        _ = s.disconnect(client: 3, now: t(0))  // c runs on, abandoned: background work after its slice
        // At 500 a steps aside and c is demoted: b takes the place, c lingers.
        #expect(s.advance(to: t(500)) == [.changeLane(key: U.c.key, lane: .slow), .holdBackground(false)])
        #expect(s.task(U.b.key)?.lingering == false && s.task(U.c.key)?.lingering == true)
        #expect(s.counts.lingering == 1 && s.counts.slowRunning == 2 && s.counts.slowInTail == 1)
    }

    @Test("without urgentSlice, or for abandoned work, nothing steps aside; a lane made narrower takes back the places of those that stepped aside last, past its width")
    func urgentSliceLimits() {
        var s = Scheduler(configuration: .init(fastWidth: 1, slowWidth: 1, retry: testRetry, urgentSlice: nil), seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0))
        #expect(s.nextDeadline == nil && s.advance(to: t(60_000)) == [] && s.counts.fastSteppedAside == 0)

        var config = Scheduler.Configuration(fastWidth: 1, slowWidth: 1, retry: testRetry, urgentSlice: 1_000)
        s = Scheduler(configuration: config, seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        #expect(s.disconnect(client: 1, now: t(0)) == [])
        // Abandoned, it does not step aside: it is demoted after its background slice (30 s) instead.
        #expect(s.nextDeadline == t(30_000))
        #expect(s.advance(to: t(1_000)) == [] && s.counts.fastSteppedAside == 0)

        config.fastWidth = 2
        s = Scheduler(configuration: config, seed: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(0))
        #expect(s.advance(to: t(1_000)) == [])
        #expect(s.get(U.c, waiter: w(1, 3), cache: .missing, now: t(1_000)) == [start(U.c, .fast)])
        #expect(s.get(U.b2, waiter: w(1, 4), cache: .missing, now: t(1_000)) == [start(U.b2, .fast)])
        #expect(s.counts.fastRunning == 4 && s.counts.fastSteppedAside == 2)
        // Width 1: b, the last to step aside, takes a place again (preemptible); c and b2 are parked, the most recent
        // first.
        config.fastWidth = 1
        #expect(s.reconfigure(config, now: t(1_001)) == [.park(key: U.b2.key), .park(key: U.c.key)])
        #expect(s.counts.fastRunning == 2 && s.counts.fastSteppedAside == 1 && s.counts.fastWaiting == 2)
    }

    @Test("a slow task in its tail lets the next one start; at width 1 one such task counts, urgent work still suspends the lane")
    func tail() {
        var s = makeScheduler(slow: 1)
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, [start(U.s1, .slow)]))
        #expect(s.queue(U.s2, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.queue(U.s3, cache: .missing, now: t(0)) == (.queued, []))
        // s1 is near its end: s2 starts beside it; reported twice, nothing more.
        #expect(s.tailReached(U.s1.key, now: t(1)) == [start(U.s2, .slow)])
        #expect(s.tailReached(U.s1.key, now: t(1)) == [])
        #expect(s.counts.slowRunning == 2 && s.counts.slowInTail == 1)
        // s2 reaches its tail before s1 ends (a small file): it waits for s1 to end, then s3 starts.
        #expect(s.tailReached(U.s2.key, now: t(2)) == [])
        #expect(s.finish(U.s1.key, .success, now: t(3)) == [.forget(key: U.s1.key), start(U.s3, .slow)])
        #expect(s.counts.slowRunning == 2 && s.counts.slowInTail == 1)
        // Urgent work suspends the lane: a tail then starts nothing.
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(4)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.finish(U.s2.key, .success, now: t(5)) == [.forget(key: U.s2.key)])
        #expect(s.queue(U.s4, cache: .missing, now: t(5)) == (.queued, []))
        #expect(s.tailReached(U.s3.key, now: t(6)) == [])
        #expect(s.finish(U.a.key, .success, now: t(7))
                == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.s4, .slow), .holdBackground(false)])
        // Not a slow running task: ignored.
        #expect(s.tailReached(U.b.key, now: t(8)) == [])
    }

    @Test("a promoted task leaves its tail; a narrower lane and a pause park tasks in their tail last")
    func tailLeft() {
        var s = makeScheduler(slow: 2)
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.queue(U.s2, cache: .missing, now: t(0))
        _ = s.queue(U.s3, cache: .missing, now: t(0))
        #expect(s.tailReached(U.s1.key, now: t(1)) == [start(U.s3, .slow)])
        // Width 1: s1 (in its tail) keeps running beside one other; the newest start, s3, is parked.
        var narrower = s.configuration
        narrower.slowWidth = 1
        #expect(s.reconfigure(narrower, now: t(2)) == [.park(key: U.s3.key)])
        #expect(s.counts.slowRunning == 2 && s.counts.slowInTail == 1)
        // Promoted in place, s1 counts in the fast lane and no longer frees a place: nothing starts.
        #expect(s.get(U.s1, waiter: w(1, 1), cache: .missing, now: t(3)) == [.changeLane(key: U.s1.key, lane: .fast), .holdBackground(true)])
        #expect(s.counts.slowInTail == 0)
        #expect(s.finish(U.s1.key, .success, now: t(4))
                == [.answer(w(1, 1), .ready), .forget(key: U.s1.key), .holdBackground(false)])
        #expect(s.tailReached(U.s2.key, now: t(5)) == [start(U.s3, .slow)])
        #expect(s.pauseBackground(true, now: t(6)) == [.park(key: U.s3.key), .park(key: U.s2.key)])
        #expect(s.counts.slowRunning == 0 && s.counts.slowInTail == 0)
    }

    @Test("a narrower lane keeps a task in its tail when parking it would free no place")
    func tailKeptWhenNarrowing() {
        var s = makeScheduler(fast: 1, slow: 3)
        for u in [U.s1, U.s2, U.s3, U.s4] { _ = s.queue(u, cache: .missing, now: t(0)) }
        #expect(s.tailReached(U.s3.key, now: t(1)) == [start(U.s4, .slow)])
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(2))
        // The fast lane is full: s1 and s2 go on as background work until their turn.
        #expect(s.get(U.s1, waiter: w(1, 2), cache: .missing, now: t(2)) == [])
        #expect(s.get(U.s2, waiter: w(1, 3), cache: .missing, now: t(2)) == [])
        // Width 1: s4 goes first; s3 (in its tail, the only one) takes no place, so the newer promotion, s2, is next.
        var narrower = s.configuration
        narrower.slowWidth = 1
        #expect(s.reconfigure(narrower, now: t(3)) == [.park(key: U.s4.key), .park(key: U.s2.key)])
        #expect(s.counts.slowRunning == 2 && s.counts.slowInTail == 1)
    }

    @Test("a slow task past its slice steps aside: the next one of another host starts beside it, its own host's work waits for it")
    func sliceEnds() {
        var s = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: 30_000), seed: 1)
        for u in [U.s1, U.s2, U.b] { _ = s.queue(u, cache: .missing, now: t(0)) }
        #expect(s.nextDeadline == t(30_000))
        #expect(s.advance(to: t(29_999)) == [])
        // s1 (a server that trickles) ran for its slice: s2 waits for it, b starts beside it.
        #expect(s.advance(to: t(30_000)) == [start(U.b, .slow)])
        #expect(s.counts.slowRunning == 2 && s.counts.slowInTail == 1 && s.isPassedOver(U.s1.authority))
        #expect(s.nextDeadline == t(60_000))
        // s1 ends: its host's work may start again, once the lane has room.
        #expect(s.finish(U.s1.key, .success, now: t(31_000)) == [.forget(key: U.s1.key)])
        #expect(s.finish(U.b.key, .success, now: t(32_000)) == [.forget(key: U.b.key), start(U.s2, .slow)])
    }

    @Test("at width 1, a second slow task past its slice yields its place to a third server's start (parked at the back, its host passed over), and resumes into a place nothing else could take")
    func sliceYieldsToAnotherStart() {
        var s = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: 30_000), seed: 1)
        let d = url("http://d.example/d")
        for u in [U.s1, U.s2, U.b, U.b2, U.c] { _ = s.queue(u, cache: .missing, now: t(0)) }
        #expect(s.advance(to: t(30_000)) == [start(U.b, .slow)])
        // b runs long too, while s1 already takes no place: b is parked (its bytes kept) behind everything, and c,
        // of a third server, starts: two slow servers do not hold the lane.
        #expect(s.advance(to: t(60_000)) == [.park(key: U.b.key), start(U.c, .slow)])
        #expect(s.counts.slowRunning == 2 && s.parkedCount == 1 && s.isPassedOver(U.b.authority))
        #expect(s.slowWaitingOnHeldHosts(at: t(60_000)) == 3)  // s2, b2 and b
        // d comes while c runs: it goes before b, which takes only a place nothing else could.
        #expect(s.queue(d, cache: .missing, now: t(60_500)).1 == [])
        #expect(s.finish(U.c.key, .success, now: t(61_000)) == [.forget(key: U.c.key), start(d, .slow)])
        // d ends with s1 still past its slice: s2 waits for s1, b2 for b, and b resumes rather than leave the lane idle.
        #expect(s.finish(d.key, .success, now: t(62_000)) == [.forget(key: d.key), start(U.b, .slow)])
        #expect(s.task(U.b.key)?.attempts == 1 && s.parkedCount == 0 && !s.isPassedOver(U.b.authority))
        // s1 ends: s2 and b2 wait for the place b holds, in a slice of its own.
        #expect(s.finish(U.s1.key, .success, now: t(63_000)) == [.forget(key: U.s1.key)])
        #expect(s.nextDeadline == t(92_000))
        // b runs out that slice with room past a slice: it steps aside, and s2 starts.
        #expect(s.advance(to: t(92_000)) == [start(U.s2, .slow)])
        #expect(s.counts.slowInTail == 1 && s.isPassedOver(U.b.authority))
        #expect(s.finish(U.b.key, .success, now: t(93_000)) == [.forget(key: U.b.key)])
        #expect(s.finish(U.s2.key, .success, now: t(94_000)) == [.forget(key: U.s2.key), start(U.b2, .slow)])
    }

    @Test("each time a fetch parked after its slice loses its bytes (it starts over), its next slice is twice as long: one that cannot resume was stopped once a slice while other work kept coming, and never ended; one that resumes keeps its slice")
    func restartedSliceDoubles() {
        for resumes in [false, true] {
            var s = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: 1_000), seed: 1)
            for u in [U.s1, U.b] { _ = s.queue(u, cache: .missing, now: t(0)) }
            _ = s.advance(to: t(1_000))  // s1 steps aside, b starts
            var now: Int64 = 2_000, slice: Int64 = 1_000
            for n in 0..<8 {
                // b runs out its slice; new work of another server comes, and b yields its place to it.
                #expect(s.advance(to: t(now)) == [], "\(n)")
                let other = url("http://c.example/\(n)")
                #expect(s.queue(other, cache: .missing, now: t(now)).1 == [.park(key: U.b.key), start(other, .slow)], "\(n)")
                if !resumes { s.parkedWithoutBytes(U.b.key) }
                #expect(s.finish(other.key, .success, now: t(now + 1)) == [.forget(key: other.key), start(U.b, .slow)], "\(n)")
                slice = resumes ? slice : min(slice * 2, 64_000)
                now += 1 + slice
                #expect(s.nextDeadline == t(now), "\(n)")
            }
            #expect(slice == (resumes ? 1_000 : 64_000), "up to 64 times the slice")
        }
    }

    @Test("at width 1, a second slow task past its slice with nothing else to start keeps its place (the lane ran the first alone: 53.9 s against 36.7 s for 12 slow servers); it yields it to new work, and steps aside without a stop once the first ends")
    func slicePreemptible() {
        var s = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: 30_000), seed: 1)
        for u in [U.s1, U.b, U.s2] { _ = s.queue(u, cache: .missing, now: t(0)) }
        #expect(s.advance(to: t(30_000)) == [start(U.b, .slow)])
        #expect(s.advance(to: t(60_000)) == [])
        #expect(s.counts.slowRunning == 2 && s.parkedCount == 0 && s.isPassedOver(U.b.authority))
        #expect(s.nextDeadline == nil, "no slice runs")
        // s1 ends: b steps aside, and s2, of s1's host, takes the place.
        #expect(s.finish(U.s1.key, .success, now: t(61_000)) == [.forget(key: U.s1.key), start(U.s2, .slow)])
        #expect(s.counts.slowInTail == 1 && s.parkedCount == 0 && s.isPassedOver(U.b.authority))
        // Now s2 runs out its slice beside b: it keeps its place, and yields it to c when c comes.
        #expect(s.advance(to: t(91_000)) == [])
        #expect(s.queue(U.c, cache: .missing, now: t(91_500)).1 == [.park(key: U.s2.key), start(U.c, .slow)])
        #expect(s.counts.slowRunning == 2 && s.parkedCount == 1 && s.isPassedOver(U.s2.authority))
    }

    @Test("a task demoted while the slow lane's place is held by a task past its slice takes that place in place (it was parked, and restarted at once)")
    func demoteIntoYieldedPlace() {
        var s = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: 30_000), seed: 1)
        for u in [U.s1, U.b] { _ = s.queue(u, cache: .missing, now: t(0)) }
        _ = s.advance(to: t(30_000))
        #expect(s.advance(to: t(60_000)) == [])
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(60_001)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.responseStarted(U.a.key, now: t(60_002)) == [])
        #expect(s.demote(U.a.key, now: t(60_003))
                == [.park(key: U.b.key), .changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        #expect(s.counts.slowRunning == 2 && s.parkedCount == 1 && s.counts.lingering == 0)
    }

    @Test("a demoted fetch's slice begins when it takes a place in the slow lane, not at its urgent start: one demoted 0.6 s after its start ran out a 1 s slice 0.4 s later and waited behind an older trickle")
    func demotedSliceFromItsPlace() {
        var s = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: 1_000), seed: 1)
        _ = s.queue(U.b, cache: .missing, now: t(0))
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(100))
        // Demoted before its response with the slow lane full: it lingers, and takes the place when b ends.
        #expect(s.demote(U.a.key, now: t(700)) == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        #expect(s.counts.lingering == 1)
        #expect(s.finish(U.b.key, .success, now: t(900)) == [.forget(key: U.b.key)])
        #expect(s.counts.lingering == 0 && s.counts.slowRunning == 1)
        #expect(s.nextDeadline == t(1_900))
        _ = s.advance(to: t(1_899))
        #expect(s.counts.slowInTail == 0)
        _ = s.advance(to: t(1_900))
        #expect(s.counts.slowInTail == 1)
    }

    @Test("a task parked after its slice and queued again at the front still takes only a place nothing else could; a get takes it out of that at once")
    func slicedTaskAskedFor() {
        var s = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: 30_000), seed: 1)
        for u in [U.s1, U.b, U.c, U.s2] { _ = s.queue(u, cache: .missing, now: t(0)) }
        _ = s.advance(to: t(30_000))
        #expect(s.advance(to: t(60_000)) == [.park(key: U.b.key), start(U.c, .slow)])
        #expect(s.queue(U.b, cache: .missing, now: t(60_001), atFront: true).1 == [])
        #expect(s.isPassedOver(U.b.authority))
        #expect(s.get(U.b, waiter: w(1, 1), cache: .missing, now: t(60_002)) == [start(U.b, .fast), .holdBackground(true)])
        #expect(!s.isPassedOver(U.b.authority))
    }

    @Test("a task past its slice that is promoted leaves that state: its host's background work starts again; no slice, no stepping aside")
    func sliceLeft() {
        var s = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: 1_000), seed: 1)
        for u in [U.s1, U.s2] { _ = s.queue(u, cache: .missing, now: t(0)) }
        #expect(s.advance(to: t(1_000)) == [])
        #expect(s.counts.slowInTail == 1)
        #expect(s.get(U.s1, waiter: w(1, 1), cache: .missing, now: t(1_100))
                == [.changeLane(key: U.s1.key, lane: .fast), .holdBackground(true)])
        #expect(s.finish(U.s1.key, .success, now: t(1_200))
                == [.answer(w(1, 1), .ready), .forget(key: U.s1.key), start(U.s2, .slow), .holdBackground(false)])
        // Demoted back into the slow lane, a long-running urgent fetch gets a slice from its demotion.
        _ = s.get(U.a, waiter: w(1, 2), cache: .missing, now: t(1_300))
        _ = s.finish(U.s2.key, .success, now: t(1_300))
        #expect(s.demote(U.a.key, now: t(5_000)) == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        #expect(s.nextDeadline == t(6_000))
        _ = s.advance(to: t(5_999))
        #expect(s.counts.slowInTail == 0)
        _ = s.advance(to: t(6_000))
        #expect(s.counts.slowInTail == 1)

        var never = Scheduler(configuration: .init(slowWidth: 1, retry: testRetry, backgroundSlice: nil), seed: 1)
        for u in [U.s1, U.b] { _ = never.queue(u, cache: .missing, now: t(0)) }
        #expect(never.nextDeadline == nil)
        #expect(never.advance(to: t(10_000_000)) == [])
    }

    @Test("the fast lane takes its clients in turns, the one served least recently first: one client's many gets do not hold another's one, nor does asking again right after a start jump the turn; what a promote made urgent takes one turn for all of it (a get waited behind every URL a queue --now promoted before it)")
    func clientsTakeTurns() {
        var s = makeScheduler(fast: 1)
        /// Finishes the running fast task; returns the one that starts in its place.
        func next(after u: CanonicalURL) -> String? {
            let actions = s.finish(u.key, .success, now: t(1))
            return actions.compactMap { if case .start(let key, .fast, _) = $0 { key } else { nil } }.first
        }
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))  // runs
        _ = s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(0))
        _ = s.get(U.a3, waiter: w(1, 3), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0))
        #expect(next(after: U.a) == U.b.key, "client 2's one get, before client 1's second")
        _ = s.get(U.b2, waiter: w(2, 2), cache: .missing, now: t(1))  // asked as soon as b started
        #expect(next(after: U.b) == U.a2.key)
        #expect(next(after: U.a2) == U.b2.key)
        for u in [U.s1, U.s2, U.s3] {
            _ = s.queue(u, cache: .missing, now: t(1))
            _ = s.promote(u.key, now: t(1))
        }
        _ = s.get(U.c, waiter: w(3, 1), cache: .missing, now: t(1))
        #expect(next(after: U.b2) == U.s1.key)
        #expect(next(after: U.s1) == U.c.key, "after one promoted URL, not three")
        #expect(next(after: U.c) == U.a3.key)
        #expect(next(after: U.a3) == U.s2.key)
        // A URL waiting in another turn, asked for: it waits in the asker's turn too, and starts in the first to come.
        let later = (1...3).map { url("http://p.example/\($0)") }
        for u in later {
            _ = s.queue(u, cache: .missing, now: t(1))
            _ = s.promote(u.key, now: t(1))  // behind s3 in the promoted turn
        }
        _ = s.get(later[2], waiter: w(4, 1), cache: .missing, now: t(1))
        #expect(next(after: U.s2) == later[2].key && s.task(later[2].key)?.servedInTurn == 4)
        #expect(next(after: later[2]) == U.s3.key)
        #expect(s.counts == s.recomputedCounts)
    }

    @Test("slow width: at most slowWidth slow tasks run, in queue order")
    func slowWidth() {
        var s = makeScheduler(slow: 2)
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, [start(U.s1, .slow)]))
        #expect(s.queue(U.s2, cache: .missing, now: t(0)) == (.queued, [start(U.s2, .slow)]))
        #expect(s.queue(U.s3, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.queue(U.a, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.counts.slowRunning == 2 && s.counts.slowWaiting == 2)
        #expect(s.finish(U.s2.key, .success, now: t(1)) == [.forget(key: U.s2.key), start(U.s3, .slow)])
        #expect(s.finish(U.s1.key, .success, now: t(1)) == [.forget(key: U.s1.key), start(U.a, .slow)])
    }

    @Test("per-host limit: a blocked task keeps its place, other hosts go ahead")
    func perHostLimit() {
        var s = makeScheduler(fast: 4, perHost: 1)
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(0)) == [])
        #expect(s.get(U.a3, waiter: w(1, 3), cache: .missing, now: t(0)) == [])
        #expect(s.get(U.b, waiter: w(1, 4), cache: .missing, now: t(0)) == [start(U.b, .fast)])
        #expect(s.counts.fastRunning == 2 && s.counts.fastWaiting == 2)
        // a2 was queued before a3 and still goes first.
        #expect(s.finish(U.a.key, .success, now: t(1)) == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.a2, .fast)])
        #expect(s.finish(U.a2.key, .success, now: t(2)) == [.answer(w(1, 2), .ready), .forget(key: U.a2.key), start(U.a3, .fast)])
    }

    @Test("per-host limit: a host at its limit does not hide another host behind hundreds of its entries")
    func perHostLimitManyEntries() {
        var s = makeScheduler(fast: 8, perHost: 1)
        for i in 0..<500 { _ = s.get(url("http://a.example/\(i)"), waiter: w(1, UInt64(i)), cache: .missing, now: t(0)) }
        #expect(s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0)) == [start(U.b, .fast)])
        #expect(s.get(U.c, waiter: w(2, 2), cache: .missing, now: t(0)) == [start(U.c, .fast)])
    }

    @Test("per-host limit counts host:port, and slow and fast tasks together; urgent work waiting for a background fetch's host does not hold that fetch back (it would wait for ever)")
    func perHostLimitAuthority() {
        var s = makeScheduler(fast: 4, slow: 2, perHost: 1)
        let p1 = url("http://a.example:8080/1")
        #expect(s.queue(U.a, cache: .missing, now: t(0)) == (.queued, [start(U.a, .slow)]))
        #expect(s.queue(p1, cache: .missing, now: t(0)) == (.queued, [start(p1, .slow)]))   // other port, other host
        #expect(s.get(U.a2, waiter: w(1, 1), cache: .missing, now: t(0)) == [])
        #expect(s.counts.fastWaiting == 1)
        #expect(s.finish(U.a.key, .success, now: t(1)) == [.forget(key: U.a.key), start(U.a2, .fast), .holdBackground(true)])
    }

    @Test("reconfigure: widening the fast lane starts more work at once")
    func reconfigureFast() {
        var s = makeScheduler(fast: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(0))
        _ = s.get(U.c, waiter: w(1, 3), cache: .missing, now: t(0))
        #expect(s.counts.fastWaiting == 2)
        var config = s.configuration
        config.fastWidth = 3
        #expect(s.reconfigure(config, now: t(1)) == [start(U.b, .fast), start(U.c, .fast)])
        #expect(s.configuration.fastWidth == 3 && s.counts.fastRunning == 3)
    }

    @Test("reconfigure: widening the slow lane and lifting the per-host limit start more work")
    func reconfigureSlow() {
        var s = makeScheduler(slow: 1, perHost: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.queue(U.s2, cache: .missing, now: t(0))
        _ = s.queue(U.b, cache: .missing, now: t(0))
        #expect(s.reconfigure(.init(fastWidth: 8, slowWidth: 3, perHostLimit: 1, retry: testRetry), now: t(1))
                == [start(U.b, .slow)])
        #expect(s.reconfigure(.init(fastWidth: 8, slowWidth: 3, perHostLimit: nil, retry: testRetry), now: t(2))
                == [start(U.s2, .slow)])
        #expect(s.counts.slowRunning == 3)
    }

    @Test("reconfigure: a narrower slow lane parks its most recent starts; they resume first, in the same attempt")
    func reconfigureNarrowerSlow() {
        var s = makeScheduler(slow: 3)
        for u in [U.s1, U.s2, U.s3] { _ = s.queue(u, cache: .missing, now: t(0)) }
        _ = s.queue(U.a, cache: .missing, now: t(0))
        #expect(s.counts.slowRunning == 3)
        var config = s.configuration
        config.slowWidth = 1
        #expect(s.reconfigure(config, now: t(1)) == [.park(key: U.s3.key), .park(key: U.s2.key)])
        #expect(s.counts.slowRunning == 1 && s.counts.slowWaiting == 3)
        #expect(s.finish(U.s1.key, .success, now: t(2)) == [.forget(key: U.s1.key), start(U.s2, .slow)])
        #expect(s.finish(U.s2.key, .success, now: t(3)) == [.forget(key: U.s2.key), start(U.s3, .slow)])
        #expect(s.task(U.s3.key)?.attempts == 1)
    }

    @Test("reconfigure: a narrower fast lane parks its most recent starts at the front of the fast lane")
    func reconfigureNarrowerFast() {
        var s = makeScheduler(fast: 3)
        for (i, u) in [U.a, U.b, U.c, U.a2].enumerated() { _ = s.get(u, waiter: w(1, UInt64(i)), cache: .missing, now: t(0)) }
        var config = s.configuration
        config.fastWidth = 1
        #expect(s.reconfigure(config, now: t(1)) == [.park(key: U.c.key), .park(key: U.b.key)])
        #expect(s.counts.fastRunning == 1 && s.counts.fastWaiting == 3 && s.lane(U.b) == .fast)
        #expect(s.finish(U.a.key, .success, now: t(2)) == [.answer(w(1, 0), .ready), .forget(key: U.a.key), start(U.b, .fast)])
    }

    @Test("reconfigure: a wider fast lane takes a pending promotion in place")
    func reconfigureWiderFastPromotes() {
        var s = makeScheduler(fast: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))                       // runs slow
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))         // fills the fast lane
        #expect(s.get(U.s1, waiter: w(1, 2), cache: .missing, now: t(0)) == [])
        var config = s.configuration
        config.fastWidth = 2
        #expect(s.reconfigure(config, now: t(1)) == [.changeLane(key: U.s1.key, lane: .fast)])
        #expect(s.counts.fastRunning == 2 && s.counts.slowRunning == 0)
    }

    @Test("promotions counts background work made urgent: waiting, running (in place, or pending once); not new or urgent work")
    func promotionsCountBackgroundWorkMadeUrgent() {
        var s = makeScheduler(fast: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))                       // runs slow
        _ = s.queue(U.s2, cache: .missing, now: t(0))                       // waits slow
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))         // new urgent work fills the fast lane
        _ = s.get(U.a, waiter: w(1, 2), cache: .missing, now: t(0))         // already urgent
        #expect(s.promotions == 0)
        _ = s.get(U.s1, waiter: w(1, 3), cache: .missing, now: t(0))        // running, the fast lane full: pending
        _ = s.get(U.s1, waiter: w(1, 4), cache: .missing, now: t(0))        // still pending: not counted again
        #expect(s.promotions == 1)
        _ = s.promote(U.s2.key, now: t(0))                                  // waiting
        #expect(s.promotions == 2 && s.lane(U.s2) == .fast)
        _ = s.finish(U.a.key, .success, now: t(1))                          // s2 first: its turn never started
        _ = s.finish(U.s2.key, .success, now: t(2))                         // s1 takes its fast slot in place
        #expect(s.lane(U.s1) == .fast && s.promotions == 2)

        var roomy = makeScheduler(fast: 2)
        _ = roomy.queue(U.s1, cache: .missing, now: t(0))
        #expect(roomy.get(U.s1, waiter: w(1, 1), cache: .missing, now: t(0)).contains(.changeLane(key: U.s1.key, lane: .fast)))
        #expect(roomy.promotions == 1)
    }

    @Test("configuration clamps widths and limits to at least 1")
    func configurationClamps() {
        let config = Scheduler.Configuration(fastWidth: 0, slowWidth: -3, perHostLimit: 0)
        #expect(config.fastWidth == 1 && config.slowWidth == 1 && config.perHostLimit == 1)
    }
}

@Suite("Cancel, disconnect, withdraw")
struct CancelDisconnectWithdrawTests {
    @Test("cancel a running task: abort, every waiter answered cancelled, forget")
    func cancelRunning() {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(0))
        #expect(s.cancel(U.a.key, now: t(1)) == [.abort(key: U.a.key), .answer(w(1, 1), .cancelled),
                                                 .answer(w(2, 1), .cancelled), .forget(key: U.a.key),
                                                 .holdBackground(false)])
        #expect(s.allTasks.isEmpty && s.counts == LaneCounts())
        // No finish is expected for an aborted fetch; a late one is ignored.
        #expect(s.finish(U.a.key, .success, now: t(2)) == [])
    }

    @Test("cancel a waiting slow task: no abort, and no waiters to answer")
    func cancelWaiting() {
        var s = makeScheduler()
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.queue(U.s2, cache: .missing, now: t(0))
        #expect(s.cancel(U.s2.key, now: t(1)) == [.forget(key: U.s2.key)])
        #expect(s.finish(U.s1.key, .success, now: t(2)) == [.forget(key: U.s1.key)])
        #expect(s.allTasks.isEmpty)
    }

    @Test("cancel a running slow task frees its slot for the next slow task")
    func cancelRunningSlow() {
        var s = makeScheduler()
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.queue(U.s2, cache: .missing, now: t(0))
        #expect(s.cancel(U.s1.key, now: t(1)) == [.abort(key: U.s1.key), .forget(key: U.s1.key), start(U.s2, .slow)])
    }

    @Test("cancel a delayed task: waiters answered cancelled, no retry deadline left")
    func cancelDelayed() {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.finish(U.a.key, .failure(.httpStatus(503)), now: t(0))
        #expect(s.state(U.a)?.delayedUntil != nil && s.nextDeadline != nil)
        #expect(s.cancel(U.a.key, now: t(1)) == [.answer(w(1, 1), .cancelled), .forget(key: U.a.key)])
        #expect(s.nextDeadline == nil && s.counts == LaneCounts())
        #expect(s.advance(to: t(100_000)) == [])
    }

    @Test("disconnect removes the client's waiters without answering them; the fetch goes on")
    func disconnect() {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(0))
        #expect(s.disconnect(client: 1, now: t(0)) == [])
        #expect(s.waiters(U.a) == [w(2, 1)] && s.waiters(U.b) == [])
        #expect(s.state(U.a) == .running && s.state(U.b) == .running)
        #expect(s.counts.waiters == 1 && s.counts == s.recomputedCounts)
        #expect(s.finish(U.b.key, .success, now: t(1)) == [.forget(key: U.b.key)])
        #expect(s.finish(U.a.key, .success, now: t(1))
                == [.answer(w(2, 1), .ready), .forget(key: U.a.key), .holdBackground(false)])
        #expect(s.disconnect(client: 1, now: t(0)) == [])
        #expect(s.disconnect(client: 99, now: t(0)) == [])
    }

    @Test("disconnect of a client with many waiters on one key removes them all at once; the other client's stay, in order")
    func disconnectManyOnOneKey() {
        var s = makeScheduler()
        for request in 1...1000 {
            _ = s.get(U.a, waiter: w(1, UInt64(request)), cache: .missing, now: t(0))
            if request % 250 == 0 { _ = s.get(U.a, waiter: w(2, UInt64(request)), cache: .missing, now: t(0)) }
        }
        _ = s.get(U.b, waiter: w(1, 1001), cache: .missing, now: t(0))
        #expect(s.counts.waiters == 1005)
        #expect(s.disconnect(client: 1, now: t(0)) == [])
        #expect(s.waiters(U.a) == [w(2, 250), w(2, 500), w(2, 750), w(2, 1000)] && s.waiters(U.b) == [])
        #expect(s.counts.waiters == 4 && s.counts == s.recomputedCounts)
    }

    @Test("rows released together: each task's waiters filtered once; its last waiter out demotes it")
    func releaseManyOnOneKey() {
        var s = makeScheduler()
        for request in 1...1000 { _ = s.get(U.a, waiter: w(1, UInt64(request)), cache: .missing, now: t(0)) }
        _ = s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(1, 1001), cache: .missing, now: t(0))
        #expect(s.release((1...1001).map { w(1, UInt64($0)) }, now: t(0))
                == [.changeLane(key: U.b.key, lane: .slow)])
        #expect(s.waiters(U.a) == [w(2, 1)] && s.lane(U.a) == .fast && s.counts == s.recomputedCounts)
        #expect(s.responseStarted(U.a.key, now: t(0)) == [])
        #expect(s.release([w(2, 1), w(2, 1)], now: t(0)) == [.park(key: U.a.key), .holdBackground(false)])
        #expect(s.lane(U.a) == .slow && s.counts.waiters == 0 && s.counts == s.recomputedCounts)
    }

    @Test("disconnect of the only waiter of a waiting fast task: the task stays and still runs")
    func disconnectWaitingTask() {
        var s = makeScheduler(fast: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0))
        #expect(s.disconnect(client: 2, now: t(0)) == [])
        #expect(s.state(U.b) == .waiting && s.lane(U.b) == .fast)
        #expect(s.finish(U.a.key, .success, now: t(1)) == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.b, .fast)])
    }

    @Test("a client leaving with more than urgentKept tasks waiting in the fast lane: its orphaned gets let go, latest first; a queued one, one another client waits for, a running one (parked for work someone waits for) and a view's held one stay")
    func disconnectLetsGoPastTheBound() {
        var s = makeScheduler(fast: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))   // runs
        _ = s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(0))  // waits, the earliest: kept
        _ = s.get(U.a3, waiter: w(1, 3), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(1, 4), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0))   // another client waits for it too
        _ = s.queue(U.c, cache: .missing, now: t(0))
        _ = s.get(U.c, waiter: w(1, 5), cache: .missing, now: t(0))   // queued, then promoted
        s.hold(U.s1.key)
        _ = s.get(U.s1, waiter: w(1, 6), cache: .missing, now: t(0))   // a view row holds it
        _ = s.get(U.s2, waiter: w(1, 7), cache: .missing, now: t(0))   // the latest
        #expect(s.counts.fastWaiting == 6)
        #expect(s.disconnect(client: 1, urgentKept: 4, now: t(1))
                == [.letGo(key: U.s2.key), .letGo(key: U.a3.key), .park(key: U.a.key), start(U.b, .fast)])
        #expect(s.state(U.a) == .waiting && s.counts.fastWaiting == 4 && s.counts == s.recomputedCounts)
        #expect([U.a, U.a2, U.b, U.c, U.s1].allSatisfy { s.lane($0) == .fast } && s.task(U.s2.key) == nil)
        // Nothing else the client asked for is let go, however low the bound, but a download a client gone before left
        // parked is (with its bytes); then the fast lane empties.
        _ = s.get(U.s2, waiter: w(3, 1), cache: .missing, now: t(1))
        #expect(s.disconnect(client: 3, urgentKept: 0, now: t(1)) == [.letGo(key: U.s2.key), .letGo(key: U.a.key)])
        _ = s.queue(U.s3, cache: .missing, now: t(1))
        _ = s.get(U.s4, waiter: w(4, 1), cache: .missing, now: t(1))
        for key in [U.a, U.a2, U.c, U.s1] { _ = s.cancel(key.key, now: t(2)) }
        #expect(s.cancel(U.b.key, now: t(2)).contains(start(U.s4, .fast)))
        #expect(s.disconnect(client: 4, urgentKept: 0, now: t(3)) == [])  // running: it goes on
        #expect(s.get(U.b2, waiter: w(5, 1), cache: .missing, now: t(3)) == [.park(key: U.s4.key), start(U.b2, .fast)])
        // b2 runs on; s4, parked for it, is past the bound.
        #expect(s.disconnect(client: 5, urgentKept: 0, now: t(3)) == [.letGo(key: U.s4.key)])
        #expect(s.finish(U.b2.key, .success, now: t(4)) == [.forget(key: U.b2.key), start(U.s3, .slow), .holdBackground(false)])
    }

    @Test("the fast tasks a gone client left are set aside: what someone waits for starts first (a running one's place too, which is parked), the oldest of theirs next (the parked one first); one asked for again takes its turn at the end of the line")
    func disconnectSetsAside() {
        var s = makeScheduler(fast: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))   // runs
        _ = s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(0))
        _ = s.get(U.a3, waiter: w(1, 3), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(1, 4), cache: .missing, now: t(0))
        #expect(s.disconnect(client: 1, now: t(0)) == [])
        #expect(s.get(U.c, waiter: w(2, 1), cache: .missing, now: t(0)) == [.park(key: U.a.key), start(U.c, .fast)])
        _ = s.get(U.a3, waiter: w(3, 1), cache: .missing, now: t(0))  // waited for again
        #expect(s.counts.fastWaiting == 4 && s.counts == s.recomputedCounts)
        #expect(s.finish(U.c.key, .success, now: t(1)) == [.answer(w(2, 1), .ready), .forget(key: U.c.key), start(U.a3, .fast)])
        #expect(s.finish(U.a3.key, .success, now: t(2)) == [.answer(w(3, 1), .ready), .forget(key: U.a3.key), start(U.a, .fast)])
        #expect(s.finish(U.a.key, .success, now: t(3)) == [.forget(key: U.a.key), start(U.a2, .fast)])
        #expect(s.finish(U.a2.key, .success, now: t(4)) == [.forget(key: U.a2.key), start(U.b, .fast)])
        #expect(s.counts.fastWaiting == 0 && s.counts == s.recomputedCounts)
    }

    @Test("abandoned tasks stay behind the work someone waits for after a retry; a promotion only the gone client waited for is withdrawn: the transfer goes on as background work")
    func abandonedAfterRetryAndWithdrawnPromotion() {
        // B runs all along: it does not step aside (LaneTests.urgentSlice).
        var s = Scheduler(configuration: .init(fastWidth: 1, retry: testRetry, urgentSlice: nil), seed: 42)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.finish(U.a.key, .failure(.httpStatus(503)), now: t(0))  // waits for its retry
        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0))   // runs
        #expect(s.disconnect(client: 1, now: t(0)) == [])
        #expect(s.advance(to: t(10_000)) == [])                         // A's retry is due: it waits, abandoned
        _ = s.get(U.c, waiter: w(3, 1), cache: .missing, now: t(10_000))
        #expect(s.finish(U.b.key, .success, now: t(10_001))
                == [.answer(w(2, 1), .ready), .forget(key: U.b.key), start(U.c, .fast)])
        #expect(s.finish(U.c.key, .success, now: t(10_002))
                == [.answer(w(3, 1), .ready), .forget(key: U.c.key), start(U.a, .fast)])
        #expect(s.finish(U.a.key, .success, now: t(10_003)) == [.forget(key: U.a.key), .holdBackground(false)])

        _ = s.queue(U.s1, cache: .missing, now: t(20_000))              // runs as background work
        _ = s.get(U.b2, waiter: w(4, 1), cache: .missing, now: t(20_000))
        _ = s.get(U.s1, waiter: w(5, 1), cache: .missing, now: t(20_000)) // the fast lane is full: promotion pending
        #expect(s.task(U.s1.key)?.promotionPending == true)
        #expect(s.disconnect(client: 5, now: t(20_000)) == [])
        #expect(s.task(U.s1.key)?.promotionPending == false && s.lane(U.s1) == .slow && s.counts == s.recomputedCounts)
        #expect(s.finish(U.b2.key, .success, now: t(20_001)) == [.answer(w(4, 1), .ready), .forget(key: U.b2.key), .holdBackground(false)])
    }

    @Test("a narrower fast lane parks abandoned transfers first; a promote keeps its task from being abandoned or its promotion withdrawn by a client leaving")
    func abandonedParkedFirstAndPromoteKept() {
        var s = makeScheduler(fast: 2)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0))   // both run, b the newest
        _ = s.disconnect(client: 1, now: t(0))
        #expect(s.reconfigure(.init(fastWidth: 1, slowWidth: 1, retry: testRetry), now: t(1)) == [.park(key: U.a.key)])
        #expect(s.finish(U.b.key, .success, now: t(2)) == [.answer(w(2, 1), .ready), .forget(key: U.b.key), start(U.a, .fast)])

        _ = s.queue(U.s1, cache: .missing, now: t(3))                  // waits: a runs
        // Abandoned, a gives its place to work someone waits for.
        #expect(s.get(U.c, waiter: w(3, 1), cache: .missing, now: t(3)) == [.park(key: U.a.key), start(U.c, .fast)])
        _ = s.promote(U.s1.key, now: t(3))                             // urgent: waits in the fast lane
        _ = s.get(U.s1, waiter: w(4, 1), cache: .missing, now: t(3))
        #expect(s.disconnect(client: 4, now: t(3)) == [])
        #expect(s.finish(U.c.key, .success, now: t(4)) == [.answer(w(3, 1), .ready), .forget(key: U.c.key), start(U.s1, .fast)])
        #expect(s.finish(U.s1.key, .success, now: t(5)) == [.forget(key: U.s1.key), start(U.a, .fast)])
    }

    @Test("a running task a gone client abandoned gives its place on a host at per_host to work someone waits for there, with room in the lane; work on other hosts does not take it")
    func abandonedGivesUpItsHost() {
        var s = makeScheduler(fast: 2, perHost: 1)
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))   // runs on a.example
        #expect(s.disconnect(client: 1, now: t(0)) == [])               // room in the lane, nothing waits: it goes on
        #expect(s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(0)) == [start(U.b, .fast)])  // another host: beside it
        _ = s.finish(U.b.key, .success, now: t(1))
        #expect(s.get(U.a2, waiter: w(2, 2), cache: .missing, now: t(1)) == [.park(key: U.a.key), start(U.a2, .fast)])
        #expect(s.finish(U.a2.key, .success, now: t(2)) == [.answer(w(2, 2), .ready), .forget(key: U.a2.key), start(U.a, .fast)])
        #expect(s.counts == s.recomputedCounts)
    }

    @Test("a task a gone client abandoned is background work once it has run a slice: demoted, the slow lane no longer suspended for it (a get given up on a trickling server suspended every background fetch for hours); without a slice, never")
    func abandonedDemotedAfterItsSlice() {
        var s = makeScheduler()  // a slice of 30 s
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.queue(U.b, cache: .missing, now: t(0))
        #expect(s.disconnect(client: 1, now: t(1_000)) == [])  // goes on as urgent work for its slice
        #expect(s.nextDeadline == t(30_000))
        #expect(s.advance(to: t(29_999)) == [])
        #expect(s.advance(to: t(30_000)) == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        #expect(!s.counts.slowSuspended && s.counts == s.recomputedCounts && s.nextDeadline == t(60_000))
        #expect(s.advance(to: t(60_000)) == [start(U.b, .slow)], "a steps aside after its slice in the slow lane")

        // Left after its slice: demoted as the client leaves; asked for again, urgent again.
        var late = makeScheduler()
        _ = late.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        #expect(late.disconnect(client: 1, now: t(45_000))
                == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        #expect(late.get(U.a, waiter: w(2, 1), cache: .missing, now: t(46_000))
                == [.changeLane(key: U.a.key, lane: .fast), .holdBackground(true)])

        var never = Scheduler(configuration: .init(backgroundSlice: nil), seed: 1)
        _ = never.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = never.disconnect(client: 1, now: t(0))
        #expect(never.nextDeadline == nil && never.advance(to: t(100_000_000)) == [] && never.lane(U.a) == .fast)
    }

    @Test("an abandoned task does not start when the fast queue stopped at its limit of refused hosts before looking at everything someone waits for")
    func abandonedNotPastTheFastQueuesLimits() {
        var s = makeScheduler(fast: 65, perHost: 1)
        for host in 0..<64 { _ = s.get(url("http://h\(host).example/0"), waiter: w(2, UInt64(host)), cache: .missing, now: t(0)) }
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))   // the 65th running
        // 64 hosts at their limit, with work someone waits for ahead of everything else.
        for host in 0..<64 { _ = s.get(url("http://h\(host).example/1"), waiter: w(2, UInt64(64 + host)), cache: .missing, now: t(0)) }
        #expect(s.counts.fastRunning == 65 && s.counts.fastWaiting == 64)
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(0))   // waits: the lane is full
        _ = s.get(U.c, waiter: w(2, 200), cache: .missing, now: t(0))  // in the turn of the 64, behind them
        _ = s.disconnect(client: 1, now: t(0))
        #expect(s.finish(U.a.key, .success, now: t(1)) == [.forget(key: U.a.key)], "not b, nobody waits for it")
    }

    @Test("release removes one waiter without an answer; the others and the fetch go on")
    func release() {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.a, waiter: w(1, 2), cache: .missing, now: t(0))
        #expect(s.release([w(1, 1)], now: t(0)) == [])
        #expect(s.release([w(1, 1)], now: t(0)) == [])     // twice: nothing more
        #expect(s.release([w(7, 7)], now: t(0)) == [])     // unknown
        #expect(s.waiters(U.a) == [w(1, 2)] && s.counts.waiters == 1 && s.lane(U.a) == .fast)
        #expect(s.finish(U.a.key, .success, now: t(1))
                == [.answer(w(1, 2), .ready), .forget(key: U.a.key), .holdBackground(false)])
        // The client's other waiters are unaffected by the earlier release.
        _ = s.get(U.b, waiter: w(1, 3), cache: .missing, now: t(2))
        #expect(s.disconnect(client: 1, now: t(0)) == [])
        #expect(s.counts.waiters == 0 && s.counts == s.recomputedCounts)
    }
}

@Suite("Retries and failures")
struct RetryTests {
    static let unavailable = Failure.httpStatus(503)

    @Test("transient failure: delayed, then restarted after advance(to:) reaches nextDeadline")
    func transientRetry() throws {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .stale, now: t(0))
        #expect(s.finish(U.a.key, .failure(Self.unavailable), now: t(100)) == [.holdBackground(false)])
        let until = try #require(s.state(U.a)?.delayedUntil)
        #expect((600...1_100).contains(until.milliseconds))   // attempt 1: [base/2, base] after now
        #expect(s.nextDeadline == until)
        #expect(s.counts.delayed == 1 && s.counts.waiters == 1 && s.counts == s.recomputedCounts)
        #expect(s.advance(to: until + -1) == [])
        #expect(s.state(U.a)?.delayedUntil == until)
        #expect(s.advance(to: until) == [start(U.a, .fast, revalidate: true), .holdBackground(true)])
        #expect(s.nextDeadline == until + 5_000)  // its urgent slice's end
        let task = try #require(s.task(U.a.key))
        #expect(task.attempts == 2 && task.waiters == [w(1, 1)] && task.state == .running)
        #expect(s.finish(U.a.key, .success, now: until + 5)
                == [.answer(w(1, 1), .ready), .forget(key: U.a.key), .holdBackground(false)])
    }

    @Test("transient failure: the second backoff is twice the first (exponential)")
    func exponentialBetweenAttempts() throws {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.finish(U.a.key, .failure(Self.unavailable), now: t(0))
        let first = try #require(s.state(U.a)?.delayedUntil)
        _ = s.advance(to: first)
        _ = s.finish(U.a.key, .failure(Self.unavailable), now: first)
        let second = try #require(s.state(U.a)?.delayedUntil)
        #expect((500...1_000).contains(first.milliseconds))
        #expect((1_000...2_000).contains(second.milliseconds - first.milliseconds))
    }

    @Test("Retry-After is honoured when longer than the backoff, and waited for up to 5 s, in the fast lane")
    func retryAfterHonoured() {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        #expect(s.finish(U.a.key, .failure(.httpStatus(429, retryAfter: 5_000)), now: t(1_000)) == [.holdBackground(false)])
        #expect(s.nextDeadline == t(6_000))
        #expect(s.advance(to: t(5_999)) == [])
        #expect(s.advance(to: t(6_000)) == [start(U.a, .fast), .holdBackground(true)])
    }

    @Test("nobody waits out a retry over 5 s away: the waiters, and gets that come meanwhile, get the failure at once, and the retry is background work (a get waited 10 minutes for a 503 with Retry-After: 300, a stale copy too)")
    func longRetryIsNotWaitedFor() throws {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .stale, now: t(0))
        let actions = s.finish(U.a.key, .failure(.httpStatus(503, retryAfter: 30_000)), now: t(1_000))
        guard case .answer(w(1, 1), .failed(let told))? = actions.first else { Issue.record("\(actions)"); return }
        #expect(told.message == "the server answered HTTP 503; tried again in 30 s, in the background")
        #expect(told.httpStatus == 503 && told.isTransient && told.retryAfter == 30_000)
        #expect(s.task(U.a.key)?.waiters == [] && s.task(U.a.key)?.lane == .slow && s.counts.waiters == 0)
        let meanwhile = s.get(U.a, waiter: w(2, 1), cache: .stale, now: t(11_000))
        guard case .answer(w(2, 1), .failed(let later))? = meanwhile.first, meanwhile.count == 1 else {
            Issue.record("\(meanwhile)")
            return
        }
        #expect(later.message.hasSuffix("tried again in 20 s, in the background"))
        #expect(s.nextDeadline == t(31_000))
        #expect(s.advance(to: t(31_000)) == [start(U.a, .slow, revalidate: true)])
        // Within 5 s of it, a get waits for the retry again.
        _ = s.finish(U.a.key, .failure(.httpStatus(503, retryAfter: 4_000)), now: t(31_500))
        #expect(s.get(U.a, waiter: w(2, 2), cache: .stale, now: t(32_000)).allSatisfy { !$0.isAnswer })
        #expect(s.task(U.a.key)?.waiters == [w(2, 2)] && s.task(U.a.key)?.lane == .fast)
    }

    /// A connect timeout to a host that does not answer: no request was sent.
    static let deadHost = Failure(code: .timeout, message: "Failed to connect to 10.9.9.9 port 80 after 10002 ms",
                                  isTransient: true, unreached: true)

    @Test("a try that reached nothing for over 5 s (a connect timeout to a dead host) is not tried again while someone waits: the waiters get the failure, the retry is background work (16 dead hosts held the fast lane for 30 s a URL, healthy gets waited 19 s); a quick one is retried for them")
    func longUnreachedTryIsNotRepeatedForWaiters() throws {
        var s = makeScheduler()
        let dead = Self.deadHost
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        let actions = s.finish(U.a.key, .failure(dead), now: t(10_002))
        guard case .answer(w(1, 1), .failed(let told))? = actions.first else { Issue.record("\(actions)"); return }
        #expect(told.message.hasPrefix(dead.message + "; tried again in ") && told.message.hasSuffix(" s, in the background"))
        #expect(s.task(U.a.key)?.lane == .slow && s.task(U.a.key)?.waiters == [])
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(20_000))
        #expect(s.finish(U.b.key, .failure(dead), now: t(20_100)).allSatisfy { !$0.isAnswer })
        #expect(s.task(U.b.key)?.lane == .fast && s.task(U.b.key)?.waiters == [w(1, 2)])
    }

    @Test("a get's task whose try reached nothing for long ends after max_attempts, though its host keeps failing (the waiters gone, each try was given back its attempt: it was tried for ever, once a pause)")
    func givenUpGetEnds() throws {
        var s = makeScheduler()
        let dead = Self.deadHost
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.finish(U.a.key, .failure(dead), now: t(10_000))
        var now: Int64 = 10_000
        var forgotten = false
        for _ in 0..<6 where !forgotten {
            guard let until = s.task(U.a.key)?.state.delayedUntil else { break }
            now = until.milliseconds
            #expect(s.advance(to: until).contains(start(U.a, .slow)))
            now += 10_000
            forgotten = s.finish(U.a.key, .failure(dead), now: t(now)).contains(.forget(key: U.a.key))
        }
        #expect(forgotten && s.task(U.a.key) == nil, "\(String(describing: s.task(U.a.key)))")
    }

    @Test("a retry nobody waits for: a get meanwhile adopts a view's task though answered; with a fresh copy it waits; a promoted task stays urgent")
    func retryNotWaitedForEdges() throws {
        var s = makeScheduler()
        _ = s.queue(U.a, cache: .missing, now: t(0), tentative: true)
        _ = s.finish(U.a.key, .failure(.httpStatus(503, retryAfter: 30_000)), now: t(100))
        let answered = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(200))
        #expect(answered.count == 1 && s.task(U.a.key)?.tentative == false, "\(answered)")
        #expect(s.get(U.a, waiter: w(1, 2), cache: .fresh, now: t(300)).allSatisfy { !$0.isAnswer })
        #expect(s.task(U.a.key)?.waiters == [w(1, 2)])

        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(400))
        _ = s.promote(U.b.key, now: t(400))
        _ = s.finish(U.b.key, .failure(.httpStatus(503, retryAfter: 30_000)), now: t(500))
        #expect(s.task(U.b.key)?.waiters == [] && s.task(U.b.key)?.lane == .fast, "the promote still holds")
    }

    @Test("Retry-After is capped at retryAfterCap")
    func retryAfterCapped() {
        var s = makeScheduler()
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.finish(U.a.key, .failure(.httpStatus(503, retryAfter: 86_400_000)), now: t(0))
        #expect(s.nextDeadline == t(60_000))
    }

    @Test("a transient failure of a slow task retries in the slow lane; a get promotes the delayed task")
    func delayedSlowTaskPromoted() throws {
        var s = makeScheduler()
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        #expect(s.finish(U.s1.key, .failure(Self.unavailable), now: t(0)) == [])
        #expect(s.lane(U.s1) == .slow)
        #expect(s.get(U.s1, waiter: w(1, 1), cache: .missing, now: t(1)) == [])   // attached, still delayed
        #expect(s.lane(U.s1) == .fast && s.state(U.s1)?.delayedUntil != nil && !s.counts.slowSuspended)
        let until = try #require(s.nextDeadline)
        #expect(s.advance(to: until) == [start(U.s1, .fast), .holdBackground(true)])
    }

    @Test("retries that fall due together restart in deadline order, whatever the hash seed")
    func dueRetriesInDeadlineOrder() {
        // Different key pairs hash differently; each must restart the earlier deadline first.
        for i in 0..<20 {
            let early = url("http://r.example/early/\(i)"), late = url("http://r.example/late/\(i)")
            var s = makeScheduler(fast: 1)
            _ = s.get(late, waiter: w(1, 1), cache: .missing, now: t(0))
            _ = s.get(early, waiter: w(1, 2), cache: .missing, now: t(0))
            #expect(s.finish(late.key, .failure(.httpStatus(503, retryAfter: 5_000)), now: t(0)) == [start(early, .fast)])
            #expect(s.finish(early.key, .failure(.httpStatus(503, retryAfter: 3_000)), now: t(0)) == [.holdBackground(false)])
            #expect(s.advance(to: t(10_000)) == [start(early, .fast), .holdBackground(true)])
            #expect(s.state(late) == .waiting)
        }
    }

    @Test("maxAttempts exhausted: waiters get the failure, and a transient failure is not remembered")
    func attemptsExhausted() {
        var s = makeScheduler(retry: RetryPolicy(maxAttempts: 2, baseDelay: 100, maxDelay: 1_000))
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0))
        _ = s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(0))
        #expect(s.finish(U.a.key, .failure(Self.unavailable), now: t(0)) == [.holdBackground(false)])
        #expect(s.advance(to: t(1_000)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.finish(U.a.key, .failure(Self.unavailable), now: t(1_000)) == [
            .answer(w(1, 1), .failed(Self.unavailable)), .answer(w(2, 1), .failed(Self.unavailable)),
            .forget(key: U.a.key), .holdBackground(false),
        ])
        #expect(s.rememberedFailure(U.a.key, now: t(1_000)) == nil)
        #expect(s.get(U.a, waiter: w(1, 2), cache: .missing, now: t(1_001)) == [start(U.a, .fast), .holdBackground(true)])
    }

    @Test("maxAttempts 1: a transient failure is answered at once")
    func singleAttempt() {
        var s = makeScheduler(retry: RetryPolicy(maxAttempts: 1))
        let network = Failure(code: .network, message: "connection reset", isTransient: true)
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.get(U.s1, waiter: w(1, 1), cache: .missing, now: t(0))
        #expect(s.finish(U.s1.key, .failure(network), now: t(5))
                == [.answer(w(1, 1), .failed(network)), .forget(key: U.s1.key), .holdBackground(false)])
        #expect(s.nextDeadline == nil)
    }

    @Test("a permanent failure is never retried, whatever maxAttempts says")
    func permanentNotRetried() {
        var s = makeScheduler(retry: RetryPolicy(maxAttempts: 10, negativeTTL: 1_000))
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        let gone = Failure.httpStatus(410)
        #expect(s.finish(U.s1.key, .failure(gone), now: t(5)) == [.remember(key: U.s1.key, gone, until: t(1_005)),
                                                                    .forget(key: U.s1.key)])
        #expect(s.nextDeadline == nil && s.allTasks.isEmpty)
    }

    @Test("Failure.httpStatus: 404 and other 4xx are permanent", arguments: [400, 401, 403, 404, 410, 451, 499])
    func permanentStatus(status: Int) {
        let failure = Failure.httpStatus(status)
        #expect(!failure.isTransient)
        #expect(failure.code == .httpStatus)
        #expect(failure.message.contains("\(status)"))
    }

    @Test("Failure.httpStatus: 408, 429 and 5xx are transient", arguments: [408, 429, 500, 502, 503, 504, 599])
    func transientStatus(status: Int) {
        let failure = Failure.httpStatus(status, retryAfter: 1_234)
        #expect(failure.isTransient)
        #expect(failure.code == .httpStatus)
        #expect(failure.retryAfter == 1_234)
    }

    @Test("Failure.httpStatus: statuses outside 4xx/5xx are not transient", arguments: [200, 204, 301, 304, 600])
    func otherStatus(status: Int) {
        #expect(!Failure.httpStatus(status).isTransient)
    }
}

@Suite("RetryPolicy.delay")
struct RetryDelayTests {
    static let policy = RetryPolicy(maxAttempts: 10, baseDelay: 500, maxDelay: 60_000, retryAfterCap: 300_000)

    static func backoff(_ attempt: Int) -> Int64 { min(60_000, 500 << Int64(max(attempt - 1, 0))) }

    @Test("delay stays within [backoff/2, backoff], backoff doubling per attempt and capped at maxDelay",
          arguments: 1...12)
    func bounds(attempt: Int) {
        var random = SplitMix64(seed: UInt64(attempt) &* 7_919)
        let backoff = Self.backoff(attempt)
        var seen = Set<Int64>()
        for _ in 0..<500 {
            let d = Self.policy.delay(after: attempt, retryAfter: nil, random: &random)
            #expect(d >= backoff / 2 && d <= backoff, "attempt \(attempt): \(d) outside [\(backoff / 2), \(backoff)]")
            seen.insert(d)
        }
        #expect(seen.count > 1, "the delay is jittered")
    }

    @Test("backoff is exponential until maxDelay")
    func exponential() {
        #expect((1...8).map(Self.backoff) == [500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000])
        var random = SplitMix64(seed: 1)
        // Upper bounds of consecutive attempts double: the smallest delay of attempt n+1 is at least the
        // largest possible delay of attempt n.
        for attempt in 1...6 {
            let next = Self.policy.delay(after: attempt + 1, retryAfter: nil, random: &random)
            #expect(next >= Self.backoff(attempt))
        }
    }

    @Test("very large attempts and huge base delays do not overflow: capped at maxDelay")
    func noOverflow() {
        var random = SplitMix64(seed: 3)
        for attempt in [30, 41, 64, 1_000, Int.max] {
            let d = Self.policy.delay(after: attempt, retryAfter: nil, random: &random)
            #expect(d >= 30_000 && d <= 60_000)
        }
        let huge = RetryPolicy(baseDelay: Int64.max / 2, maxDelay: 10_000)
        let d = huge.delay(after: 5, retryAfter: nil, random: &random)
        #expect(d >= 5_000 && d <= 10_000)
    }

    @Test("attempt 0 or below behaves like attempt 1")
    func attemptZero() {
        var random = SplitMix64(seed: 5)
        for attempt in [0, -1, -1_000] {
            let d = Self.policy.delay(after: attempt, retryAfter: nil, random: &random)
            #expect(d >= 250 && d <= 500)
        }
    }

    @Test("deterministic for a given seed")
    func deterministic() {
        var r1 = SplitMix64(seed: 0xDEAD_BEEF), r2 = SplitMix64(seed: 0xDEAD_BEEF), r3 = SplitMix64(seed: 0xDEAD_BEF0)
        let a = (1...20).map { Self.policy.delay(after: $0 % 7 + 1, retryAfter: nil, random: &r1) }
        let b = (1...20).map { Self.policy.delay(after: $0 % 7 + 1, retryAfter: nil, random: &r2) }
        let c = (1...20).map { Self.policy.delay(after: $0 % 7 + 1, retryAfter: nil, random: &r3) }
        #expect(a == b)
        #expect(a != c)
    }

    @Test("Retry-After: honoured above the backoff, capped at retryAfterCap, ignored below the backoff or negative")
    func retryAfter() {
        var random = SplitMix64(seed: 9)
        #expect(Self.policy.delay(after: 1, retryAfter: 120_000, random: &random) == 120_000)   // above maxDelay too
        #expect(Self.policy.delay(after: 1, retryAfter: 300_000, random: &random) == 300_000)
        #expect(Self.policy.delay(after: 1, retryAfter: 300_001, random: &random) == 300_000)
        #expect(Self.policy.delay(after: 1, retryAfter: Int64.max, random: &random) == 300_000)
        for retryAfter: Int64 in [0, 1, 249, -5, Int64.min] {
            let d = Self.policy.delay(after: 1, retryAfter: retryAfter, random: &random)
            #expect(d >= 250 && d <= 500)
        }
    }

    @Test("SplitMix64 reproduces its reference sequence")
    func splitMixReference() {
        // Reference values for seed 1234567 from the published SplitMix64 algorithm.
        var r = SplitMix64(seed: 1_234_567)
        #expect([r.next(), r.next(), r.next()]
                == [6_457_827_717_110_365_317, 3_203_168_211_198_807_973, 9_817_491_932_198_370_423])
    }
}
