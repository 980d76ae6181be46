import Testing
@testable import QueueCore

/// Metered networks, battery, power saver and quiet hours: what the background lane may do, and the pause itself.
@Suite("Background policy")
struct BackgroundPolicyTests {
    @Test("quiet hours parse HH:MM-HH:MM and refuse anything else")
    func quietHoursParse() throws {
        let day = try #require(QuietHours(parsing: "08:00-18:00"))
        #expect(day.start == 8 * 60 && day.end == 18 * 60 && day.description == "08:00-18:00")
        let night = try #require(QuietHours(parsing: "22:30-6:05"))
        #expect(night.start == 22 * 60 + 30 && night.end == 6 * 60 + 5 && night.description == "22:30-06:05")
        for bad in ["", "08:00", "08:00-", "-18:00", "8-18", "24:00-01:00", "08:60-09:00", "08:00-08:00", "+8:00-9:00",
                    "08:00-18:00-19:00", "08:0-09:00", " 08:00-09:00", "０８:00-09:00", "008:00-09:00"] {
            #expect(QuietHours(parsing: bad) == nil, "\(bad)")
        }
    }

    @Test("a window inside one day holds from its start up to, not including, its end")
    func sameDayWindow() throws {
        let quiet = try #require(QuietHours(parsing: "08:00-18:00"))
        for minute in 0..<1440 {
            #expect(quiet.contains(minute: minute) == (480..<1080).contains(minute), "minute \(minute)")
        }
        #expect(quiet.minutesUntilChange(from: 0) == 480)
        #expect(quiet.minutesUntilChange(from: 479) == 1)
        #expect(quiet.minutesUntilChange(from: 480) == 600)
        #expect(quiet.minutesUntilChange(from: 1079) == 1)
        #expect(quiet.minutesUntilChange(from: 1080) == 1440 - 1080 + 480)
    }

    @Test("a window that wraps midnight holds before its end and from its start")
    func wrappingWindow() throws {
        let quiet = try #require(QuietHours(parsing: "22:00-06:00"))
        for minute in 0..<1440 {
            #expect(quiet.contains(minute: minute) == (minute >= 1320 || minute < 360), "minute \(minute)")
        }
        #expect(quiet.minutesUntilChange(from: 1439) == 361)
        #expect(quiet.minutesUntilChange(from: 0) == 360)
        #expect(quiet.minutesUntilChange(from: 360) == 960)
    }

    @Test("every minute of the day: the next change is when contains() flips, never later, never zero")
    func changesMatchContains() throws {
        for text in ["08:00-18:00", "22:00-06:00", "00:00-00:01", "23:59-00:00", "00:01-00:00", "12:00-11:59"] {
            let quiet = try #require(QuietHours(parsing: text))
            for minute in 0..<1440 {
                let wait = quiet.minutesUntilChange(from: minute)
                #expect((1...1440).contains(wait))
                let inside = quiet.contains(minute: minute)
                #expect(quiet.contains(minute: (minute + wait) % 1440) != inside, "\(text) at \(minute): +\(wait)")
                for step in 1..<min(wait, 3) {
                    #expect(quiet.contains(minute: (minute + step) % 1440) == inside, "\(text) at \(minute)+\(step)")
                }
            }
        }
    }

    @Test("the strictest mode wins and names every condition that asks for it; nothing active is run")
    func decide() {
        let policy = BackgroundPolicy()
        #expect(policy.decide([]) == (.run, []))
        #expect(policy.decide([.onBattery]) == (.slow, [.onBattery]))
        #expect(policy.decide([.onBattery, .powerSaver]) == (.slow, [.onBattery, .powerSaver]))
        #expect(policy.decide([.onBattery, .metered]) == (.pause, [.metered]))
        #expect(policy.decide([.quietHours, .powerSaver]) == (.pause, [.quietHours]))
        let relaxed = BackgroundPolicy(metered: .run, onBattery: .run, powerSaver: .run)
        #expect(relaxed.decide([.metered, .onBattery, .powerSaver]) == (.run, []))
        let strict = BackgroundPolicy(metered: .slow, onBattery: .pause, powerSaver: .pause)
        #expect(strict.decide([.metered, .onBattery, .powerSaver]) == (.pause, [.onBattery, .powerSaver]))
        for mode in BackgroundMode.allCases {
            let only = BackgroundPolicy(metered: mode, onBattery: .run, powerSaver: .run)
            #expect(only.decide([.metered]).mode == mode)
            #expect(BackgroundPolicy(offline: mode).decide([.offline]).mode == mode)
        }
        // No network pauses by default, beside the other conditions that pause, in `Condition` order.
        #expect(policy.decide([.offline, .onBattery]) == (.pause, [.offline]))
        #expect(policy.decide([.offline, .metered, .quietHours]) == (.pause, [.metered, .quietHours, .offline]))
        #expect(BackgroundPolicy(offline: .run).decide([.offline]) == (.run, []))
    }

    @Test("paused: nothing starts in the slow lane, what runs there is parked, urgent work still runs")
    func pauseParksAndHolds() throws {
        var s = makeScheduler(slow: 2)
        #expect(s.queue(U.a, cache: .missing, now: t(0)).1 == [start(U.a, .slow)])
        #expect(s.queue(U.b, cache: .missing, now: t(1)).1 == [start(U.b, .slow)])
        let paused = s.pauseBackground(true, now: t(2))
        #expect(paused.filter { if case .park = $0 { true } else { false } }.count == 2, "\(paused)")
        #expect(s.counts.slowRunning == 0 && s.counts.slowWaiting == 2 && s.backgroundPaused)
        #expect(s.queue(U.c, cache: .missing, now: t(3)) == (.queued, []))
        #expect(s.pauseBackground(true, now: t(4)).isEmpty, "pausing twice changes nothing")
        // An urgent get of queued work takes it out of the pause.
        let urgent = s.get(U.c, waiter: w(1, 1), cache: .missing, now: t(5))
        #expect(urgent.contains(start(U.c, .fast)), "\(urgent)")
        // Demoting running urgent work while paused parks it: it waits with the rest.
        let demoted = s.demote(U.c.key, now: t(6))
        #expect(demoted.contains(.park(key: U.c.key)), "\(demoted)")
        #expect(s.counts.slowRunning == 0 && s.counts.fastRunning == 0)
        // Let go: the parked ones resume first, up to the width.
        let resumed = s.pauseBackground(false, now: t(7))
        #expect(resumed.filter { if case .start(_, .slow, _) = $0 { true } else { false } }.count == 2, "\(resumed)")
        #expect(s.counts.slowRunning == 2 && !s.backgroundPaused)
    }
}
