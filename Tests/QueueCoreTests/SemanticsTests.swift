import Testing
@testable import QueueCore

// One test (at least) per cell of DESIGN.md's "Semantics" table, asserting exact action lists.

@Suite("Semantics: cached and fresh")
struct CachedAndFreshTests {
    @Test("cached and fresh × get: answered at once from the index, no task, no network")
    func get() {
        var s = makeScheduler()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .fresh, now: t(0)) == [.answer(w(1, 1), .ready)])
        #expect(s.allTasks.isEmpty)
        #expect(s.counts == LaneCounts())
    }

    @Test("cached and fresh × queue: no-op, reported as cached")
    func queue() {
        var s = makeScheduler()
        let (outcome, actions) = s.queue(U.a, cache: .fresh, now: t(0))
        #expect(outcome == .cached)
        #expect(actions == [])
        #expect(s.allTasks.isEmpty)
    }

    @Test("cached and fresh × demote: no-op")
    func demote() {
        var s = makeScheduler()
        #expect(s.demote(U.a.key, now: t(0)) == [])
        #expect(s.allTasks.isEmpty)
    }
}

@Suite("Semantics: cached but stale")
struct CachedButStaleTests {
    @Test("cached but stale × get: revalidates in the fast lane (start with revalidate=true)")
    func get() throws {
        var s = makeScheduler()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .stale, now: t(0))
                == [start(U.a, .fast, revalidate: true), .holdBackground(true)])
        let task = try #require(s.task(U.a.key))
        #expect(task.revalidate)
        #expect(task.lane == .fast && task.state == .running && task.waiters == [w(1, 1)] && task.attempts == 1)
        #expect(s.finish(U.a.key, .success, now: t(5))
                == [.answer(w(1, 1), .ready), .forget(key: U.a.key), .holdBackground(false)])
    }

    @Test("cached but stale × queue: refresh queued in the slow lane (start with revalidate=true)")
    func queue() throws {
        var s = makeScheduler()
        let (outcome, actions) = s.queue(U.a, cache: .stale, now: t(0))
        #expect(outcome == .queued)
        #expect(actions == [start(U.a, .slow, revalidate: true)])
        #expect(try #require(s.task(U.a.key)).revalidate)
    }

    @Test("cached but stale × queue then get: the promoted refresh keeps revalidate=true")
    func queueThenGet() throws {
        var s = makeScheduler()
        _ = s.queue(U.s1, cache: .missing, now: t(0))     // occupies the one slow slot
        #expect(s.queue(U.a, cache: .stale, now: t(0)) == (.queued, []))
        #expect(s.get(U.a, waiter: w(1, 1), cache: .stale, now: t(1))
                == [start(U.a, .fast, revalidate: true), .holdBackground(true)])
    }

    @Test("cached but stale × demote: no task exists, no action")
    func demote() {
        var s = makeScheduler()
        #expect(s.demote(U.a.key, now: t(0)) == [])
        #expect(s.allTasks.isEmpty)
    }
}

@Suite("Semantics: waiting in slow lane")
struct WaitingInSlowLaneTests {
    /// `s1` runs in the slow lane, `a` waits behind it.
    func setUp() -> Scheduler {
        var s = makeScheduler()
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, [start(U.s1, .slow)]))
        #expect(s.queue(U.a, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.state(U.a) == .waiting && s.lane(U.a) == .slow)
        return s
    }

    @Test("waiting in slow lane × get: promotes to the fast lane, no new task")
    func get() throws {
        var s = setUp()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1))
                == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.allTasks.count == 2)
        let task = try #require(s.task(U.a.key))
        #expect(task.lane == .fast && task.state == .running && task.attempts == 1 && task.waiters == [w(1, 1)])
        #expect(s.counts.slowWaiting == 0 && s.counts.fastRunning == 1 && s.counts.slowRunning == 1)
        #expect(s.finish(U.a.key, .success, now: t(2))
                == [.answer(w(1, 1), .ready), .forget(key: U.a.key), .holdBackground(false)])
    }

    @Test("waiting in slow lane × get with the fast lane full: promoted, waits in the fast lane")
    func getWithFastLaneFull() {
        var s = makeScheduler(fast: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.queue(U.a, cache: .missing, now: t(0))
        #expect(s.get(U.b, waiter: w(1, 1), cache: .missing, now: t(0)) == [start(U.b, .fast), .holdBackground(true)])
        #expect(s.get(U.a, waiter: w(1, 2), cache: .missing, now: t(0)) == [])
        #expect(s.state(U.a) == .waiting && s.lane(U.a) == .fast)
        #expect(s.counts.fastWaiting == 1 && s.counts.slowWaiting == 0)
        // b's slot goes to the promoted a, not to the slow lane.
        #expect(s.finish(U.b.key, .success, now: t(1))
                == [.answer(w(1, 1), .ready), .forget(key: U.b.key), start(U.a, .fast)])
    }

    @Test("waiting in slow lane × queue: no-op, reported as already")
    func queue() {
        var s = setUp()
        #expect(s.queue(U.a, cache: .missing, now: t(1)) == (.already, []))
        #expect(s.state(U.a) == .waiting && s.lane(U.a) == .slow)
        #expect(s.allTasks.count == 2)
    }

    @Test("waiting in slow lane × demote: no-op")
    func demote() {
        var s = setUp()
        let before = s.counts
        #expect(s.demote(U.a.key, now: t(1)) == [])
        #expect(s.state(U.a) == .waiting && s.lane(U.a) == .slow)
        #expect(s.counts == before)
    }

    @Test("waiting in slow lane × promote: moves to the fast lane and starts")
    func promote() {
        var s = setUp()
        #expect(s.promote(U.a.key, now: t(1)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.waiters(U.a) == [])
    }
}

@Suite("Semantics: running as slow")
struct RunningAsSlowTests {
    /// `a` runs in the slow lane, `s1` waits behind it.
    func setUp() -> Scheduler {
        var s = makeScheduler()
        #expect(s.queue(U.a, cache: .missing, now: t(0)) == (.queued, [start(U.a, .slow)]))
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, []))
        return s
    }

    @Test("running as slow × get: changeLane to fast in place, no new start, no abort")
    func get() throws {
        var s = setUp()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1))
                == [.changeLane(key: U.a.key, lane: .fast), .holdBackground(true)])
        let task = try #require(s.task(U.a.key))
        #expect(task.lane == .fast && task.state == .running && task.attempts == 1 && task.waiters == [w(1, 1)])
        #expect(s.counts.fastRunning == 1 && s.counts.slowRunning == 0 && s.counts.slowWaiting == 1)
        // The freed slow slot is not used while urgent work runs; it is once a finishes.
        #expect(s.finish(U.a.key, .success, now: t(2))
                == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.s1, .slow), .holdBackground(false)])
    }

    @Test("running as slow × queue: no-op")
    func queue() {
        var s = setUp()
        #expect(s.queue(U.a, cache: .missing, now: t(1)) == (.already, []))
        #expect(s.state(U.a) == .running && s.lane(U.a) == .slow)
    }

    @Test("running as slow × demote: no-op")
    func demote() {
        var s = setUp()
        let before = s.counts
        #expect(s.demote(U.a.key, now: t(1)) == [])
        #expect(s.state(U.a) == .running && s.lane(U.a) == .slow)
        #expect(s.counts == before)
    }

    @Test("running as slow × promote: changeLane to fast in place")
    func promote() {
        var s = setUp()
        #expect(s.promote(U.a.key, now: t(1)) == [.changeLane(key: U.a.key, lane: .fast), .holdBackground(true)])
        #expect(s.promote(U.a.key, now: t(1)) == [])
    }

    /// fastWidth 1, `b` runs fast (waiter w9.1), `a` runs slow (started before), `s1` waits in the slow lane.
    func setUpWithFastLaneFull() -> Scheduler {
        var s = makeScheduler(fast: 1, slow: 1)
        #expect(s.queue(U.a, cache: .missing, now: t(0)) == (.queued, [start(U.a, .slow)]))
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.get(U.b, waiter: w(9, 1), cache: .missing, now: t(0)) == [start(U.b, .fast), .holdBackground(true)])
        return s
    }

    @Test("running as slow × get with the fast lane full: goes on as background, then urgent in place when a slot frees")
    func getWhenFastLaneFull() throws {
        var s = setUpWithFastLaneFull()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1)) == [])
        let task = try #require(s.task(U.a.key))
        #expect(task.lane == .slow && task.state == .running && task.promotionPending && task.waiters == [w(1, 1)])
        #expect(s.counts.fastRunning == 1 && s.counts.slowRunning == 1)
        #expect(s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(1)) == [])      // one promotion, however many asks
        // b ends: a takes the fast slot in place (no start, no restart); s1 still waits (urgent work runs).
        #expect(s.finish(U.b.key, .success, now: t(2))
                == [.answer(w(9, 1), .ready), .forget(key: U.b.key), .changeLane(key: U.a.key, lane: .fast)])
        #expect(s.task(U.a.key)?.attempts == 1 && s.task(U.a.key)?.promotionPending == false)
        #expect(s.finish(U.a.key, .success, now: t(3))
                == [.answer(w(1, 1), .ready), .answer(w(2, 1), .ready), .forget(key: U.a.key), start(U.s1, .slow),
                    .holdBackground(false)])
    }

    @Test("running as slow × get with the fast lane full, then its waiter leaves: the promotion is withdrawn")
    func promotionWithdrawn() {
        var s = setUpWithFastLaneFull()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1)) == [])
        #expect(s.release([w(1, 1)], now: t(2)) == [])
        #expect(s.task(U.a.key)?.promotionPending == false && s.lane(U.a) == .slow)
        // b ends: a stays background (and still holds the one slow slot).
        #expect(s.finish(U.b.key, .success, now: t(3)) == [.answer(w(9, 1), .ready), .forget(key: U.b.key), .holdBackground(false)])
        #expect(s.finish(U.a.key, .success, now: t(4)) == [.forget(key: U.a.key), start(U.s1, .slow)])
    }

    @Test("running as slow × get with the fast lane full, then a transient failure: the retry is urgent")
    func pendingPromotionRetries() {
        var s = setUpWithFastLaneFull()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1)) == [])
        #expect(s.finish(U.a.key, .failure(.httpStatus(503)), now: t(2)) == [])
        #expect(s.lane(U.a) == .fast && s.task(U.a.key)?.promotionPending == false && s.waiters(U.a) == [w(1, 1)])
    }
}

@Suite("Semantics: waiting in fast lane")
struct WaitingInFastLaneTests {
    /// fastWidth 1: `b` runs fast, `a` waits in the fast lane with waiter w1.1.
    func setUp() -> Scheduler {
        var s = makeScheduler(fast: 1)
        #expect(s.get(U.b, waiter: w(9, 1), cache: .missing, now: t(0)) == [start(U.b, .fast), .holdBackground(true)])
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0)) == [])
        #expect(s.state(U.a) == .waiting && s.lane(U.a) == .fast)
        return s
    }

    @Test("waiting in fast lane × get: attaches another waiter")
    func get() {
        var s = setUp()
        #expect(s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(1)) == [])
        #expect(s.waiters(U.a) == [w(1, 1), w(2, 1)])
        #expect(s.allTasks.count == 2 && s.counts.waiters == 3)
        #expect(s.finish(U.b.key, .success, now: t(2)) == [.answer(w(9, 1), .ready), .forget(key: U.b.key), start(U.a, .fast)])
        #expect(s.finish(U.a.key, .success, now: t(3))
                == [.answer(w(1, 1), .ready), .answer(w(2, 1), .ready), .forget(key: U.a.key), .holdBackground(false)])
    }

    @Test("waiting in fast lane × queue: already, and it stays fast")
    func queue() {
        var s = setUp()
        #expect(s.queue(U.a, cache: .missing, now: t(1)) == (.already, []))
        #expect(s.state(U.a) == .waiting && s.lane(U.a) == .fast)
    }

    @Test("waiting in fast lane × demote: moves to the FRONT of the slow lane, waiters stay and are answered later")
    func demote() {
        var s = makeScheduler(fast: 1, slow: 1)
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, [start(U.s1, .slow)]))
        #expect(s.queue(U.s2, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.get(U.b, waiter: w(9, 1), cache: .missing, now: t(0)) == [start(U.b, .fast), .holdBackground(true)])
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0)) == [])

        #expect(s.demote(U.a.key, now: t(1)) == [])
        #expect(s.state(U.a) == .waiting && s.lane(U.a) == .slow && s.waiters(U.a) == [w(1, 1)])
        #expect(s.counts.fastWaiting == 0 && s.counts.slowWaiting == 2)
        // Fast lane empties: the slow lane resumes, but its one slot is still held by s1.
        #expect(s.finish(U.b.key, .success, now: t(2))
                == [.answer(w(9, 1), .ready), .forget(key: U.b.key), .holdBackground(false)])
        // a was put in front of s2, which was queued earlier.
        #expect(s.finish(U.s1.key, .success, now: t(3)) == [.forget(key: U.s1.key), start(U.a, .slow)])
        #expect(s.finish(U.a.key, .success, now: t(4))
                == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.s2, .slow)])
    }

    @Test("waiting in fast lane × demote twice: the second demote is a no-op")
    func demoteTwice() {
        var s = setUp()
        #expect(s.demote(U.a.key, now: t(1)) == [])
        #expect(s.demote(U.a.key, now: t(1)) == [])
        #expect(s.counts.slowWaiting == 1 && s.counts.fastWaiting == 0)
    }
}

@Suite("Semantics: running as fast")
struct RunningAsFastTests {
    func setUp() -> Scheduler {
        var s = makeScheduler()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0)) == [start(U.a, .fast), .holdBackground(true)])
        return s
    }

    @Test("running as fast × get: attaches another waiter")
    func get() {
        var s = setUp()
        #expect(s.get(U.a, waiter: w(2, 7), cache: .missing, now: t(1)) == [])
        #expect(s.waiters(U.a) == [w(1, 1), w(2, 7)])
        #expect(s.task(U.a.key)?.attempts == 1)
        #expect(s.finish(U.a.key, .success, now: t(2))
                == [.answer(w(1, 1), .ready), .answer(w(2, 7), .ready), .forget(key: U.a.key), .holdBackground(false)])
    }

    @Test("running as fast × queue: no-op")
    func queue() {
        var s = setUp()
        #expect(s.queue(U.a, cache: .missing, now: t(1)) == (.already, []))
        #expect(s.state(U.a) == .running && s.lane(U.a) == .fast)
    }

    @Test("running as fast × demote: changeLane to slow in place, not restarted, waiters answered on finish")
    func demote() throws {
        var s = setUp()
        #expect(s.queue(U.s1, cache: .missing, now: t(0)) == (.queued, []))
        #expect(s.demote(U.a.key, now: t(1)) == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        let task = try #require(s.task(U.a.key))
        #expect(task.lane == .slow && task.state == .running && task.attempts == 1 && task.waiters == [w(1, 1)])
        // a holds the one slow slot, so s1 keeps waiting.
        #expect(s.counts.slowRunning == 1 && s.counts.slowWaiting == 1 && s.counts.fastRunning == 0)
        #expect(s.finish(U.a.key, .success, now: t(2))
                == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.s1, .slow)])
    }

    @Test("running as fast × demote with the slow lane full, its response begun: parked with its bytes, resumes first in the slow lane")
    func demoteWhenSlowLaneFull() throws {
        var s = setUp()
        #expect(s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(1)) == [start(U.b, .fast)])
        #expect(s.responseStarted(U.b.key, now: t(1)) == [])
        #expect(s.queue(U.s1, cache: .missing, now: t(2)) == (.queued, []))
        #expect(s.demote(U.a.key, now: t(3)) == [.changeLane(key: U.a.key, lane: .slow)])
        #expect(s.demote(U.b.key, now: t(4)) == [.park(key: U.b.key), .holdBackground(false)])
        #expect(s.counts.slowRunning == 1)
        let parked = try #require(s.task(U.b.key))
        #expect(parked.lane == .slow && parked.state == .waiting && parked.attempts == 1 && parked.waiters == [w(2, 1)])
        #expect(s.counts.slowRunning == 1 && s.counts.slowWaiting == 2)
        // When the slot frees, the parked task goes before s1, and resuming is not a new attempt.
        #expect(s.finish(U.a.key, .success, now: t(5)) == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.b, .slow)])
        #expect(s.task(U.b.key)?.attempts == 1)
    }

    @Test("running as fast × demote with the slow lane full, no response yet: it lingers with its request out; promoted again, it moves back in place")
    func demoteLingers() throws {
        var s = setUp()
        #expect(s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(1)) == [start(U.b, .fast)])
        #expect(s.queue(U.s1, cache: .missing, now: t(2)) == (.queued, []))
        #expect(s.demote(U.a.key, now: t(3)) == [.changeLane(key: U.a.key, lane: .slow)])
        // Parking it would cost its request: a row shown again before the server answers would ask again.
        #expect(s.demote(U.b.key, now: t(4)) == [.changeLane(key: U.b.key, lane: .slow), .holdBackground(false)])
        let lingering = try #require(s.task(U.b.key))
        #expect(lingering.state == .running && lingering.lane == .slow && lingering.lingering && lingering.waiters == [w(2, 1)])
        #expect(s.counts.lingering == 1 && s.counts.slowRunning == 1 && s.counts.fastRunning == 0 && s.counts == s.recomputedCounts)
        #expect(s.promote(U.b.key, now: t(5)) == [.changeLane(key: U.b.key, lane: .fast), .holdBackground(true)])
        let back = try #require(s.task(U.b.key))
        #expect(back.state == .running && back.lane == .fast && !back.lingering && back.attempts == 1 && back.tries == 1)
        #expect(s.counts.lingering == 0 && s.counts.fastRunning == 1 && s.counts == s.recomputedCounts)
    }

    @Test("a lingering task whose response begins: parked when the slow lane is full (first in it), else it takes the slow place")
    func lingeringResponseBegins() throws {
        var s = setUp()
        _ = s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(1))
        _ = s.queue(U.s1, cache: .missing, now: t(2))
        _ = s.demote(U.a.key, now: t(3))
        _ = s.demote(U.b.key, now: t(4))
        #expect(s.responseStarted(U.b.key, now: t(5)) == [.park(key: U.b.key)])
        let parked = try #require(s.task(U.b.key))
        #expect(parked.state == .waiting && parked.lane == .slow && !parked.lingering && s.counts.lingering == 0)
        #expect(s.finish(U.a.key, .success, now: t(6)) == [.answer(w(1, 1), .ready), .forget(key: U.a.key), start(U.b, .slow)])
        #expect(s.task(U.b.key)?.attempts == 1, "resuming a park is the same attempt")

        var t2 = setUp()
        _ = t2.get(U.b, waiter: w(2, 1), cache: .missing, now: t(1))
        _ = t2.demote(U.a.key, now: t(3))
        _ = t2.demote(U.b.key, now: t(4))
        #expect(t2.finish(U.a.key, .success, now: t(5)) == [.answer(w(1, 1), .ready), .forget(key: U.a.key)])
        #expect(t2.responseStarted(U.b.key, now: t(6)) == [])
        #expect(t2.counts.slowRunning == 1 && t2.counts.lingering == 0 && t2.counts == t2.recomputedCounts)
        #expect(t2.responseStarted(U.b.key, now: t(7)) == [], "a second report changes nothing")
    }

    @Test("urgent work held back by per_host while a lingering task keeps its host's place: the lingering one (no byte came) is parked, the urgent one starts (it waited for the hidden row's server)")
    func lingeringYieldsHost() throws {
        var s = makeScheduler(fast: 4, slow: 1, perHost: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1))
        #expect(s.demote(U.a.key, now: t(2)) == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        #expect(s.task(U.a.key)?.lingering == true)
        #expect(s.get(U.a2, waiter: w(1, 2), cache: .missing, now: t(3))
                == [.park(key: U.a.key), start(U.a2, .fast), .holdBackground(true)])
        #expect(s.task(U.a.key)?.state == .waiting && s.counts.lingering == 0 && s.counts == s.recomputedCounts)
    }

    @Test("urgent work held back by per_host on another host: a lingering task keeps its request (parking it frees nothing for that work)")
    func lingeringKeepsPlaceForOtherHosts() throws {
        var s = makeScheduler(fast: 4, slow: 1, perHost: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1))
        #expect(s.demote(U.a.key, now: t(2)) == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(3))
        #expect(s.get(U.b2, waiter: w(1, 3), cache: .missing, now: t(4)) == [], "b2 waits for its host; a lingers on")
        #expect(s.task(U.a.key)?.lingering == true && s.task(U.b2.key)?.state == .waiting)
        #expect(s.get(U.a2, waiter: w(1, 4), cache: .missing, now: t(5))
                == [.park(key: U.a.key), start(U.a2, .fast)], "urgent work on a's host takes its place")
        #expect(s.counts == s.recomputedCounts)
    }

    @Test("a lingering task kept out through a background pause by its pending promotion is parked when the promotion is withdrawn")
    func lingeringParkedWhenPromotionWithdrawnWhilePaused() throws {
        var s = makeScheduler(fast: 1, slow: 1)
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        _ = s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(1))
        _ = s.demote(U.a.key, now: t(2))
        _ = s.get(U.b, waiter: w(1, 2), cache: .missing, now: t(3))
        _ = s.promote(U.a.key, now: t(4))
        #expect(s.task(U.a.key)?.lingering == true && s.task(U.a.key)?.promotionPending == true)
        #expect(!s.pauseBackground(true, now: t(5)).contains(.park(key: U.a.key)), "its promotion keeps it out")
        #expect(s.demote(U.a.key, now: t(6)) == [.park(key: U.a.key)], "nothing keeps it out any more")
        #expect(s.task(U.a.key)?.state == .waiting && s.counts.lingering == 0 && s.counts == s.recomputedCounts)
    }

    @Test("at most fastWidth tasks linger; a background pause parks them; a narrower fast lane parks the newest")
    func lingeringBounds() throws {
        var s = makeScheduler(fast: 2)
        _ = s.queue(U.s1, cache: .missing, now: t(0))
        for (n, u) in [U.a, U.b, U.c].enumerated() { _ = s.get(u, waiter: w(1, UInt64(n)), cache: .missing, now: t(1)) }
        #expect(s.demote(U.a.key, now: t(2)) == [.changeLane(key: U.a.key, lane: .slow), start(U.c, .fast)])
        #expect(s.demote(U.b.key, now: t(3)) == [.changeLane(key: U.b.key, lane: .slow)])
        #expect(s.demote(U.c.key, now: t(4)) == [.park(key: U.c.key), .holdBackground(false)], "two linger already")
        #expect(s.counts.lingering == 2 && s.counts == s.recomputedCounts)
        _ = s.get(U.a2, waiter: w(2, 1), cache: .missing, now: t(5))
        _ = s.get(U.a3, waiter: w(2, 2), cache: .missing, now: t(5))
        // Wanted again while the fast lane is full: its promotion waits for a slot, and it lingers meanwhile.
        _ = s.get(U.b, waiter: w(1, 9), cache: .missing, now: t(5))
        #expect(s.task(U.b.key)?.promotionPending == true && s.task(U.b.key)?.lingering == true)
        let paused = s.pauseBackground(true, now: t(6))
        #expect(paused.contains(.park(key: U.a.key)) && !paused.contains(.park(key: U.b.key)), "\(paused)")
        #expect(s.task(U.b.key)?.lingering == true && s.task(U.a.key)?.state == .waiting && s.counts == s.recomputedCounts)
        var narrow = makeScheduler(fast: 2)
        _ = narrow.queue(U.s1, cache: .missing, now: t(0))
        for (n, u) in [U.a, U.b].enumerated() { _ = narrow.get(u, waiter: w(1, UInt64(n)), cache: .missing, now: t(1)) }
        _ = narrow.demote(U.a.key, now: t(2))
        _ = narrow.demote(U.b.key, now: t(3))
        let actions = narrow.reconfigure(.init(fastWidth: 1, slowWidth: 1, retry: testRetry), now: t(4))
        #expect(actions == [.park(key: U.b.key)], "the most recent start goes: \(actions)")
        #expect(narrow.counts.lingering == 1 && narrow.counts == narrow.recomputedCounts)
    }

    @Test("running as fast × demote: yields to other urgent work (slow lane suspended again)")
    func demoteThenUrgent() {
        var s = setUp()
        #expect(s.demote(U.a.key, now: t(1)) == [.changeLane(key: U.a.key, lane: .slow), .holdBackground(false)])
        #expect(s.get(U.b, waiter: w(2, 1), cache: .missing, now: t(2)) == [start(U.b, .fast), .holdBackground(true)])
        #expect(s.promote(U.a.key, now: t(3)) == [.changeLane(key: U.a.key, lane: .fast)])
        #expect(s.counts.fastRunning == 2 && s.counts.slowRunning == 0)
    }
}

@Suite("Semantics: unknown")
struct UnknownTests {
    @Test("unknown × get: a new fast task starts")
    func get() throws {
        var s = makeScheduler()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0)) == [start(U.a, .fast), .holdBackground(true)])
        let task = try #require(s.task(U.a.key))
        #expect(task == TaskInfo(key: U.a.key, host: "a.example", lane: .fast, state: .running, waiters: [w(1, 1)],
                                 attempts: 1, tries: 1, revalidate: false, tentative: false, promotionPending: false, lingering: false,
                                 servedInTurn: 1))
    }

    @Test("unknown × queue: queued, a new slow task starts")
    func queue() throws {
        var s = makeScheduler()
        let (outcome, actions) = s.queue(U.a, cache: .missing, now: t(0))
        #expect(outcome == .queued)
        #expect(actions == [start(U.a, .slow)])
        #expect(try #require(s.task(U.a.key)).waiters == [])
        #expect(s.finish(U.a.key, .success, now: t(1)) == [.forget(key: U.a.key)])
    }

    @Test("unknown × demote: no action")
    func demote() {
        var s = makeScheduler()
        #expect(s.demote(U.a.key, now: t(0)) == [])
        #expect(s.promote(U.a.key, now: t(0)) == [])
        #expect(s.cancel(U.a.key, now: t(0)) == [])
        #expect(s.finish(U.a.key, .success, now: t(0)) == [])
        #expect(s.allTasks.isEmpty)
    }

    @Test("unknown × get: equivalent spellings of one URL share one task")
    func dedupByCanonicalKey() {
        var s = makeScheduler()
        #expect(s.get(url("HTTP://A.Example:80/a#top"), waiter: w(1, 1), cache: .missing, now: t(0))
                == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.get(url("http://a.example/./a"), waiter: w(1, 2), cache: .missing, now: t(0)) == [])
        #expect(s.queue(url("http://a.EXAMPLE/%61"), cache: .missing, now: t(0)) == (.already, []))
        #expect(s.allTasks.count == 1 && s.waiters(U.a) == [w(1, 1), w(1, 2)])
    }
}

@Suite("Semantics: failed recently")
struct FailedRecentlyTests {
    static let notFound = Failure.httpStatus(404)

    /// a fails permanently at t=1000; it is remembered until t=11000.
    func setUp() -> Scheduler {
        var s = makeScheduler()
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(0)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.finish(U.a.key, .failure(Self.notFound), now: t(1_000)) == [
            .remember(key: U.a.key, Self.notFound, until: t(11_000)),
            .answer(w(1, 1), .failed(Self.notFound)),
            .forget(key: U.a.key),
            .holdBackground(false),
        ])
        return s
    }

    @Test("failed recently × get: answered with the remembered failure until the negative TTL ends")
    func get() {
        var s = setUp()
        #expect(s.rememberedFailure(U.a.key, now: t(2_000)) == Self.notFound)
        #expect(s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(2_000)) == [.answer(w(2, 1), .failed(Self.notFound))])
        #expect(s.get(U.a, waiter: w(2, 2), cache: .stale, now: t(10_999)) == [.answer(w(2, 2), .failed(Self.notFound))])
        #expect(s.allTasks.isEmpty && s.counts.waiters == 0)
    }

    @Test("failed recently × get after the TTL passes (advance): a new task is created")
    func getAfterTTL() {
        var s = setUp()
        #expect(s.advance(to: t(10_999)) == [])
        #expect(s.get(U.a, waiter: w(2, 1), cache: .missing, now: t(10_999)) == [.answer(w(2, 1), .failed(Self.notFound))])
        #expect(s.advance(to: t(11_000)) == [])
        #expect(s.rememberedFailure(U.a.key, now: t(11_000)) == nil)
        #expect(s.get(U.a, waiter: w(2, 2), cache: .missing, now: t(11_000)) == [start(U.a, .fast), .holdBackground(true)])
        #expect(s.task(U.a.key)?.attempts == 1)
    }

    @Test("failed recently × queue: skipped and reported, nothing queued")
    func queue() {
        var s = setUp()
        #expect(s.queue(U.a, cache: .missing, now: t(5_000)) == (.skipped(Self.notFound), []))
        #expect(s.allTasks.isEmpty)
        #expect(s.advance(to: t(20_000)) == [])
        #expect(s.queue(U.a, cache: .missing, now: t(20_000)) == (.queued, [start(U.a, .slow)]))
    }

    @Test("failed recently × get with a fresh copy: the cache answers (fresh wins)")
    func getFresh() {
        var s = setUp()
        #expect(s.get(U.a, waiter: w(2, 1), cache: .fresh, now: t(2_000)) == [.answer(w(2, 1), .ready)])
        #expect(s.queue(U.a, cache: .fresh, now: t(2_000)) == (.cached, []))
    }

    @Test("failed recently × demote: no task, no action")
    func demote() {
        var s = setUp()
        #expect(s.demote(U.a.key, now: t(2_000)) == [])
    }

    @Test("failed recently: a policy failure (not HTTP) is remembered the same way")
    func policyFailure() {
        var s = makeScheduler()
        let tooLarge = Failure(code: .tooLarge, message: "over the size cap", isTransient: false)
        _ = s.queue(U.a, cache: .missing, now: t(0))
        #expect(s.finish(U.a.key, .failure(tooLarge), now: t(10))
                == [.remember(key: U.a.key, tooLarge, until: t(10_010)), .forget(key: U.a.key)])
        #expect(s.queue(U.a, cache: .missing, now: t(11)) == (.skipped(tooLarge), []))
    }

    @Test("failed recently: a failure restored with remember(_:_:until:) is answered")
    func restored() {
        var s = makeScheduler()
        s.remember(U.a.key, Self.notFound, until: t(500))
        #expect(s.get(U.a, waiter: w(1, 1), cache: .missing, now: t(499)) == [.answer(w(1, 1), .failed(Self.notFound))])
        #expect(s.get(U.a, waiter: w(1, 2), cache: .missing, now: t(500)) == [start(U.a, .fast), .holdBackground(true)])
    }
}
