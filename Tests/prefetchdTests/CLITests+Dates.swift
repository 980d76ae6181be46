import Foundation
import Testing

/// `info` and `status` print times for a person: local time and how long ago or ahead, never epoch seconds;
/// `--json` keeps the numbers.
extension CLITests {
    /// `date -d @SECONDS +FORMAT` (coreutils): the local time the test expects, in the same time zone.
    static func localDate(_ seconds: Int64, _ format: String = "%Y-%m-%d %H:%M") -> String {
        run("/usr/bin/env", ["date", "-d", "@\(seconds)", "+" + format]).stdout.trimmingCharacters(in: .newlines)
    }

    /// The local time an instant in the future is shown as: the clock alone on the same day, else the date too.
    static func localUntil(_ seconds: Int64, now: Int64) -> String {
        localDate(seconds, "%F") == localDate(now, "%F") ? localDate(seconds, "%H:%M") : localDate(seconds)
    }

    /// Numbers of ten digits or more standing alone (not part of a hash or a file name): epoch seconds or milliseconds.
    static func longNumbers(_ text: String) -> [String] {
        text.split { !$0.isLetter && !$0.isNumber }.map(String.init).filter { $0.count >= 10 && $0.allSatisfy(\.isNumber) }
    }

    /// prefetchctl's output for `arguments` when the daemon answers `result` (JSON) to its one request.
    static func answered(_ arguments: [String], result: String) throws -> CommandResult {
        let recorder = try RecordingDaemon { line in "{\"id\":\(RecordingDaemon.id(line)),\"ok\":true,\"result\":\(result)}" }
        return run(Paths.prefetchctl, ["--socket", recorder.socket] + arguments)
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    @Test("info URL on a cached URL: 'fetched: 2026-12-01 12:43 (N s ago), fresh for 1 h 59 min', no epoch seconds; info --json keeps fetched_at and fresh_until")
    func infoShowsLocalDates() throws {
        let daemon = try DaemonUnderTest()
        let url = Self.origin.url("/dated.jpg?cc=max-age=7200")
        #expect(daemon.ctl("get", url).status == 0)
        let json = daemon.ctl("info", "--json", url)
        let object = try #require(try JSONSerialization.jsonObject(with: json.stdoutData) as? [String: Any], "\(json.stdout)")
        let cached = try #require(object["cached"] as? [String: Any])
        let fetchedAt = try #require(cached["fetched_at"] as? Int), freshUntil = try #require(cached["fresh_until"] as? Int)
        // max-age less the response's age, which the origin's whole-second Date header makes 0 or 1 s.
        #expect(fetchedAt > 1_000_000_000 && (7199...7200).contains(freshUntil - fetchedAt), "\(cached)")

        let human = daemon.ctl("info", url)
        #expect(human.status == 0, "\(human.stderr)")
        #expect(Self.longNumbers(human.stdout).isEmpty, "\(human.stdout)")
        #expect(!human.stdout.contains(String(fetchedAt)) && !human.stdout.contains(String(freshUntil)), "\(human.stdout)")
        let line = try #require(human.lines.first { $0.hasPrefix("  fetched: ") }, "\(human.stdout)")
        // A lifetime of 7200 s, read within the second of the fetch or a little later.
        #expect(line.hasPrefix("  fetched: \(Self.localDate(Int64(fetchedAt))) ("), "\(line)")
        #expect(line.contains(#/\(\d+ s ago\), fresh for (2 h|1 h 5[89] min)$/#), "\(line)")
    }

    @Test("status: 'up 3 s', and a paused host 'until 13:05 (in 59 s)' in local time, no epoch seconds; status --json keeps until")
    func statusShowsLocalTimes() throws {
        let daemon = try DaemonUnderTest()
        var paused: [[String: Any]] = []
        // 503s in a row pause the host (the circuit breaker); the pause is in memory, this daemon's only.
        for attempt in 0..<10 where paused.isEmpty {
            daemon.ctl("get", Self.origin.url("/down\(attempt).jpg?status=503"))
            let status = try JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any]
            paused = status?["paused_hosts"] as? [[String: Any]] ?? []
        }
        let host = try #require(paused.first, "no host was paused")
        let until = try #require(host["until"] as? Int)
        let now = Self.now()
        #expect(until > now && until <= now + 3600, "\(host)")

        let human = daemon.ctl("status")
        #expect(human.status == 0, "\(human.stderr)")
        #expect(!human.stdout.contains(String(until)), "\(human.stdout)")
        #expect(human.lines.first?.wholeMatch(of: /prefetchd [^,]+, pid \d+, up \d+ (s|min|min \d+ s), \d+ connections?/) != nil,
                "\(human.stdout)")
        let line = try #require(human.lines.first { $0.hasPrefix("paused host: ") }, "\(human.stdout)")
        let name = try #require(host["host"] as? String)
        #expect(line.hasPrefix("paused host: \(name) until \(Self.localUntil(Int64(until), now: now)) (in "), "\(line)")
        #expect(line.hasSuffix("): failed too often in a row"), "\(line)")
    }

    @Test("from the daemon's numbers: 12 min ago, fresh for 23 h, 3 d 3 h ago, stale since 2 h 30 min, a copy fetched in the future stale, up 1 h 5 min, in 2 d 3 h; numbers out of any range print, not trap")
    func spansAndDates() throws {
        let now = Self.now()
        func entry(fetched: Int64, freshUntil: Int64) -> String {
            """
            {"url":"http://a/1.jpg","key":"http://a/1.jpg","cached":{"url":"http://a/1.jpg","path":"/c/1","bytes":1,\
            "sha256":"ab","fetched_at":\(fetched),"fresh_until":\(freshUntil)}}
            """
        }
        // Each instant sits in the middle of the unit shown, so a second or two between here and prefetchctl's own
        // reading of the clock changes nothing.
        let cases: [(fetched: Int64, freshUntil: Int64, line: String)] = [
            (now - 750, now + 23 * 3600 + 1800, "(12 min ago), fresh for 23 h"),
            (now - 3 * 86_400 - 3 * 3600 - 1800, now - 2 * 3600 - 1830, "(3 d 3 h ago), stale since 2 h 30 min"),
            (now - 3930, now + 50 * 86_400 + 30, "(1 h 5 min ago), fresh for 50 d"),
            (now - 30 * 86_400 - 1800, now + 5 * 3600 + 1830, "(30 d ago), fresh for 5 h 30 min"),
            // As the daemon judges it (it said "fresh for 2 h 31 min" and the daemon revalidated the copy).
            (now + 2 * 3600 + 1830, now + 5 * 3600 + 1830,
             "(in 2 h 30 min), stale: fetched later than now (the clock was set back since); revalidated when asked for"),
        ]
        for (fetched, freshUntil, expected) in cases {
            let info = try Self.answered(["info", "http://a/1.jpg"], result: entry(fetched: fetched, freshUntil: freshUntil))
            #expect(info.status == 0, "\(info.stderr)")
            #expect(info.lines.contains("  fetched: \(Self.localDate(fetched)) \(expected)"), "\(info.stdout)")
        }
        let extreme = try Self.answered(["info", "http://a/1.jpg"], result: entry(fetched: .min, freshUntil: .max))
        #expect(extreme.status == 0, "\(extreme.stderr)")
        #expect(extreme.lines.contains { $0.hasPrefix("  fetched: \(Self.localDate(0)) (") && $0.contains(" d ago), fresh for ") },
                "\(extreme.stdout)")

        let pausedUntil = now + 750, diskUntil = now + 2 * 86_400 + 3 * 3600 + 1800
        let status = try Self.answered(["status"], result: """
            {"version":"0.1.0","pid":1,"uptime":3930,"fast":{"waiting":0,"running":0,"width":8},\
            "slow":{"waiting":0,"running":0,"width":1},"slow_suspended":false,"delayed":0,"backlog":0,\
            "cache":{"entries":0,"bytes":0,"limit":1000,"hits":0,"misses":0,"directory":"/c"},"connections":1,\
            "fetched":0,"failed":0,"paused_hosts":[{"host":"a:80","until":\(pausedUntil)}],"waiting_for_disk":\(diskUntil)}
            """)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.lines.first == "prefetchd 0.1.0, pid 1, up 1 h 5 min, 1 connection", "\(status.stdout)")
        #expect(status.lines.contains("paused host: a:80 until \(Self.localUntil(pausedUntil, now: now)) (in 12 min): "
                                      + "failed too often in a row"), "\(status.stdout)")
        #expect(status.lines.contains("slow lane waits for the cache to be writable (a full disk or a write error: see the "
                                      + "log); trying again at \(Self.localDate(diskUntil)) (in 2 d 3 h); queued URLs are kept"),
                "\(status.stdout)")
        #expect(Self.longNumbers(status.stdout).isEmpty, "\(status.stdout)")
    }
}
