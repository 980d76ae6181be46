import Foundation
import Testing

/// The daemon, the CLI and a real origin on 127.0.0.1, end to end.
@Suite(.serialized)
struct EndToEndTests {
    @Test("get prints a path whose bytes are the origin's; a second get is a cache hit with no origin request")
    func getThenHit() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let first = daemon.ctl("get", origin.url("/a.jpg"))
        #expect(first.status == 0, "\(first.stderr)")
        let path = first.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(FileManager.default.contents(atPath: path) == (try origin.body("/a.jpg")))
        #expect(try origin.count("/a.jpg") == 2)  // ours and the comparison fetch above

        let second = daemon.ctl("get", "--json", origin.url("/a.jpg"))
        #expect(second.status == 0)
        #expect(second.stdout.contains("\"from_cache\":true"))
        #expect(try origin.count("/a.jpg") == 2)
    }

    @Test("50 concurrent gets of one uncached URL: one origin request, 50 identical answers")
    func concurrentGetsCoalesce() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/same.jpg?delay=1")
        nonisolated(unsafe) var results = [CommandResult?](repeating: nil, count: 50)
        DispatchQueue.concurrentPerform(iterations: 50) { index in
            results[index] = daemon.ctl("get", url)
        }
        let answers = results.compactMap { $0 }
        #expect(answers.count == 50)
        #expect(answers.allSatisfy { $0.status == 0 }, "\(answers.map(\.stderr).filter { !$0.isEmpty }.prefix(3))")
        #expect(Set(answers.map(\.stdout)).count == 1)
        #expect(try origin.count("/same.jpg") == 1)
    }

    @Test("an urgent get overtakes the slow lane, and a get of a queued URL promotes it")
    func urgentOvertakesBackground() throws {
        let origin = try Origin()
        try origin.setDelay(3)
        let daemon = try DaemonUnderTest()
        let queued = (1...20).map { origin.url("/q\($0).jpg") }
        #expect(daemon.ctl(arguments: ["queue"] + queued).status == 0)
        #expect(try waitUntil(seconds: 10) { try origin.count("/q1.jpg") == 1 }, "q1 runs while the get is made")
        #expect(daemon.ctl("get", origin.url("/urgent.jpg")).status == 0)
        #expect(daemon.ctl("get", origin.url("/q15.jpg")).status == 0)

        let log = try origin.stats().log
        func start(_ path: String) -> Double? { log.first { $0.path == path }?.start }
        let urgentEnd = try #require(log.first { $0.path == "/urgent.jpg" }?.end)
        let q2Start = try #require(start("/q2.jpg"))
        // The origin notes a response's end once its handler returns, which may come after the daemon read the last
        // byte and sent its next request (0.15 ms once); q2 started while the urgent one ran would be 3 s early.
        #expect(urgentEnd <= q2Start + 0.1, "the urgent get must finish before the second queued URL starts")
        let q15 = try #require(start("/q15.jpg"))
        for n in 3...14 {
            if let other = start("/q\(n).jpg") { #expect(q15 < other, "q15 was promoted ahead of q\(n)") }
        }
    }

    @Test("the fast lane takes its clients in turns: a get from another client starts at the next free place, not after 24 gets one client made before it, nor after 24 URLs a queue --now promoted (it waited for all of them); also a get of one of those 24 (it waited in their turn)", arguments: ["get", "queue --now"], [false, true])
    func clientsTakeTurns(bulk: String, sameURL: Bool) throws {
        let origin = try Origin()
        try origin.setDelay(0.3)
        let daemon = try DaemonUnderTest(["--fast-width", "2"])
        let urls = (0..<24).map { origin.url("/bulk/\($0).jpg") }
        // Open to the end: a client leaving abandons its gets.
        let connection = try RawConnection(socket: daemon.socket)
        if bulk == "get" {
            _ = connection.receive()
            connection.send(urls.enumerated().map { "{\"id\":\($0),\"op\":\"get\",\"url\":\"\($1)\"}\n" }.joined())
        } else {
            #expect(daemon.ctl(arguments: ["queue", "--now"] + urls).status == 0)
        }
        #expect(waitUntil(seconds: 10) { (try? daemon.status().fast.waiting) == 22 }, "2 running, 22 waiting")
        let wanted = sameURL ? "/bulk/20.jpg" : "/other.jpg"
        #expect(daemon.ctl("get", origin.url(wanted)).status == 0)
        let log = try origin.stats().log
        let other = try #require(log.first { $0.path == wanted }?.start)
        let before = log.filter { $0.path.hasPrefix("/bulk/") && $0.path != wanted && $0.start < other }.count
        #expect(before <= 4, "\(before) of the 24 started before the other client's get")
    }

    @Test("one slow server does not hold the background lane: past background_slice the next fetch starts beside its fetch, the slow server's other URLs wait for it (a 1,100 B/s file held the lane 27 minutes)")
    func slowServerStepsAside() throws {
        let slow = try Origin(), other = try Origin()
        let daemon = try DaemonUnderTest(["--slow-width", "1", "--background-slice", "1"])
        // 2 MB at 20 KB/s: 100 s, well above the low-speed abort (1 KiB/s).
        let trickle = slow.url("/trickle.jpg?size=2000000&drip=20000")
        let elsewhere = (1...3).map { other.url("/e\($0).jpg") }
        #expect(daemon.ctl(arguments: ["queue", trickle, slow.url("/next.jpg")] + elsewhere).status == 0)
        let waited = daemon.ctl(arguments: ["queue", "--wait", "--timeout", "30"] + elsewhere)
        #expect(waited.status == 0, "the other server's URLs waited for the trickle: \(waited.stderr)")
        #expect(try slow.count("/next.jpg") == 0, "the slow server's next URL waits for its fetch past the slice")
        let running = daemon.ctl("list").stdout
        #expect(running.contains("trickle.jpg"), "the trickle goes on beside the others: \(running)")
        // The other server's fetches, one after the other: at most the trickle and one more ran at any moment.
        let log = try other.stats().log
        for (earlier, later) in zip(log, log.dropFirst()) {
            #expect(try #require(earlier.end) <= later.start, "\(earlier.path) and \(later.path) overlapped")
        }
    }

    /// One client per URL, each waiting for its `get` (kept open while the returned connections live).
    private static func getEach(_ urls: [String], from daemon: DaemonUnderTest) throws -> [RawConnection] {
        try urls.enumerated().map { index, url in
            let client = try RawConnection(socket: daemon.socket)
            client.send(#"{"id":\#(index),"op":"get","url":"\#(url)"}"# + "\n")
            return client
        }
    }

    @Test("slow servers do not hold the fast lane: past urgent_slice an urgent fetch steps aside, runs on, and another server's get starts beside it (eight gets of a server sending 1,200 B/s held every fast place for hours, every other get timed out)")
    func slowServersDoNotHoldTheFastLane() throws {
        let slow = try Origin(), other = try Origin()
        let daemon = try DaemonUnderTest(["--fast-width", "2", "--urgent-slice", "1"])
        // Three clients wait for 2 MB at 20 KB/s each (100 s, well above the low-speed abort): two take the places.
        let trickles = (1...3).map { slow.url("/t\($0).jpg?size=2000000&drip=20000") }
        let clients = try Self.getEach(trickles, from: daemon)
        #expect(try waitUntil(seconds: 10) { try slow.stats().log.count == 2 })
        let healthy = daemon.ctl("get", "--timeout", "15", other.url("/healthy.jpg"))
        #expect(healthy.status == 0, "the healthy server's get waited for the trickles: \(healthy.stderr)")
        #expect(try slow.stats().log.count == 3, "the third trickle started beside the first two")
        let status = try #require(JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any])
        let fast = status["fast"] as? [String: Any] ?? [:]
        #expect(fast["running"] as? Int == 3 && fast["stepped_aside"] as? Int == 2 && status["parked"] as? Int == 0,
                "\(status)")
        #expect(daemon.ctl("status").stdout.contains("fast lane: 3/2 running (2 of them past urgent_slice"))
        // `list` names the two (it said only that all three were running).
        let listed = try #require(JSONSerialization.jsonObject(with: daemon.ctl("list", "--json").stdoutData) as? [String: Any])
        let aside = (listed["tasks"] as? [[String: Any]] ?? []).filter { $0["stepped_aside"] as? Bool == true }
        #expect(aside.count == 2 && aside.allSatisfy { trickles.contains($0["url"] as? String ?? "") }, "\(listed)")
        #expect(daemon.ctl("list").stdout.components(separatedBy: "(past urgent_slice, taking no place)").count == 3)
        for url in trickles { #expect(try slow.count(URL(string: url)!.path) == 1, "\(url) ran on, not restarted") }
        withExtendedLifetime(clients) {}
    }

    @Test("twice fast_width slow gets do not hold the fast lane either: past its slice, with fast_width stepped aside, an urgent fetch yields its place to a get not begun and is parked, to resume with Range (sixteen trickles held it again at the defaults)")
    func moreSlowServersThanTwiceTheWidth() throws {
        let slow = try Origin(), other = try Origin()
        let daemon = try DaemonUnderTest(["--fast-width", "2", "--urgent-slice", "1"])
        let trickles = (1...4).map { slow.url("/t\($0).jpg?size=2000000&drip=20000") }  // 100 s each
        let clients = try Self.getEach(trickles, from: daemon)
        // Two take the places; after a slice they step aside and the other two take them, then those run out theirs.
        #expect(try waitUntil(seconds: 10) { try slow.stats().log.count == 4 })
        let healthy = daemon.ctl("get", "--timeout", "15", other.url("/healthy.jpg"))
        #expect(healthy.status == 0, "the healthy server's get waited for the trickles: \(healthy.stderr)")
        // The trickle parked for it resumes once the get is done, where it stopped.
        let resumed = try waitUntil(seconds: 10) { try slow.stats().log.contains { $0.range?.hasPrefix("bytes=") == true } }
        let requests = try slow.stats().log.map { "\($0.path) \($0.range ?? "-")" }
        #expect(resumed, "\(requests)")
        let status = try daemon.status()
        #expect(status.fast.running <= 4 && status.fast.steppedAside == 2, "\(status)")
        withExtendedLifetime(clients) {}
    }

    @Test("a slow server with more URLs queued than memory holds does not hold the background lane either: its rows stay in the durable queue while its fetch runs past the slice, and another server's URLs queued behind them are loaded and fetched (they waited for the whole slow fetch)")
    func slowServerWithALongQueue() throws {
        let slow = try Origin(), other = try Origin()
        let daemon = try DaemonUnderTest(["--slow-width", "1", "--background-slice", "1"])
        let trickle = slow.url("/trickle.jpg?size=2000000&drip=20000")
        let elsewhere = (1...3).map { other.url("/e\($0).jpg") }
        let urls = [trickle] + (0..<1100).map { slow.url("/s\($0).jpg") } + elsewhere
        #expect(daemon.ctl("queue", "-", stdin: urls.joined(separator: "\n") + "\n").status == 0)
        let waited = daemon.ctl(arguments: ["queue", "--wait", "--timeout", "30"] + elsewhere)
        #expect(waited.status == 0, "the other server's URLs waited for the trickle: \(waited.stderr)")
        #expect(try slow.stats().log.count == 1, "the slow server's other URLs wait for its fetch past the slice")
        let status = try #require(JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any])
        let slowLane = status["slow"] as? [String: Any] ?? [:]
        let queued = (status["backlog"] as? Int ?? 0) + (slowLane["waiting"] as? Int ?? 0) + (slowLane["running"] as? Int ?? 0)
        #expect(queued == 1101, "nothing of the slow server lost: \(status)")
    }

    @Test("two slow servers do not hold the background lane either: at slow_width 1 the second fetch past its slice yields its place to another server's URLs (they waited for one of the slow fetches to end), and resumes once they are fetched")
    func twoSlowServers() throws {
        let slow = try Origin(), slower = try Origin(), other = try Origin()
        let daemon = try DaemonUnderTest(["--slow-width", "1", "--background-slice", "1"])
        let trickles = [slow, slower].map { $0.url("/trickle.jpg?size=2000000&drip=20000") }  // 100 s each
        let elsewhere = (1...3).map { other.url("/e\($0).jpg") }
        #expect(daemon.ctl(arguments: ["queue"] + trickles + elsewhere).status == 0)
        let waited = daemon.ctl(arguments: ["queue", "--wait", "--timeout", "30"] + elsewhere)
        #expect(waited.status == 0, "the other server's URLs waited for the trickles: \(waited.stderr)")
        // The second trickle, parked at its slice for them, takes the place they left: it resumes where it stopped.
        #expect(try waitUntil(seconds: 10) { try slower.count("/trickle.jpg") == 2 })
        #expect(try slow.count("/trickle.jpg") == 1)
        #expect(try slower.stats().log.last?.range?.hasPrefix("bytes=") == true, "resumed with a Range")
        let status = try #require(JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any])
        let slowLane = status["slow"] as? [String: Any] ?? [:]
        #expect(slowLane["running"] as? Int == 2 && slowLane["waiting"] as? Int == 0 && status["parked"] as? Int == 0, "\(status)")
        let log = try other.stats().log
        for (earlier, later) in zip(log, log.dropFirst()) {
            #expect(try #require(earlier.end) <= later.start, "\(earlier.path) and \(later.path) overlapped")
        }
    }

    @Test("at slow_width 1, three slow servers: the third fetch past its slice, with nothing else to start, keeps running beside the first (it was parked too, and the lane ran one trickle alone: 12 slow servers took 53.9 s against 36.7 s)")
    func threeSlowServers() throws {
        let origins = try (0..<3).map { _ in try Origin() }
        let daemon = try DaemonUnderTest(["--slow-width", "1", "--background-slice", "1"])
        // At 200 KB/s: 10 s, then 5 s and 5 s. The first steps aside at its slice, the second yields to the third.
        let urls = zip(origins, [2_000_000, 1_000_000, 1_000_000]).map { $0.url("/trickle.jpg?size=\($1)&drip=200000") }
        #expect(daemon.ctl(arguments: ["queue"] + urls).status == 0)
        #expect(try waitUntil(seconds: 10) { try origins[2].count("/trickle.jpg") == 1 })
        var mostParked = 0, running = 0
        let end = monotonicSeconds() + 4
        while monotonicSeconds() < end {
            let status = try #require(JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any])
            mostParked = max(mostParked, status["parked"] as? Int ?? 0)
            running = (status["slow"] as? [String: Any])?["running"] as? Int ?? 0
            usleep(100_000)
        }
        #expect(mostParked == 1 && running == 2, "parked at most \(mostParked), running \(running)")
        #expect(daemon.ctl("status").stdout.contains("parked: 1 (stopped to resume later"))
        #expect(daemon.ctl(arguments: ["queue", "--wait", "--timeout", "60"] + urls).status == 0)
    }

    @Test("the bytes parked downloads keep stay within a quarter of max_cache_bytes: past it a park drops them (every slow server can have a download parked after its slice, and those bytes are not cache files)", arguments: [false, true])
    func parkedBytesBounded(small: Bool) throws {
        let slow = try Origin(), slower = try Origin(), third = try Origin()
        let daemon = try DaemonUnderTest(["--slow-width", "1", "--background-slice", "1"]
                                         + (small ? ["--max-cache-bytes", "1M"] : []))
        // 4 MB at 300 KB/s each: the second is parked after its slice for the third server's URL (which then holds
        // the place, unanswered), with about 300 KB, over a quarter of 1M.
        let trickles = [slow, slower].map { $0.url("/trickle.jpg?size=4000000&drip=300000") }
        #expect(daemon.ctl(arguments: ["queue"] + trickles + [third.url("/held.jpg?delay=60")]).status == 0)
        let parked = try waitUntil(seconds: 15) {
            guard try slow.count("/trickle.jpg") + slower.count("/trickle.jpg") == 2, try third.count("/held.jpg") == 1
            else { return false }
            let status = try JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any]
            let lane = status?["slow"] as? [String: Any] ?? [:]
            return lane["running"] as? Int == 2 && lane["waiting"] as? Int == 1
        }
        #expect(parked, "the second trickle was not parked")
        let bodies = try FileManager.default.contentsOfDirectory(atPath: daemon.cache + "/tmp")
        // The running ones' (the first trickle's, the third server's empty one) and the parked one's, kept or not.
        #expect(bodies.count == (small ? 2 : 3), "bodies in tmp/: \(bodies)")
    }

    @Test("demote withdraws a promotion still waiting for room in the fast lane (it was answered already, and the fetch became urgent work once room came)")
    func demoteWithdrawsAPendingPromotion() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--fast-width", "1"])
        let background = origin.url("/bg.jpg?size=600000&drip=100000")  // 6 s
        #expect(daemon.ctl("queue", background).status == 0)
        #expect(try waitUntil(seconds: 10) { try origin.count("/bg.jpg") == 1 })
        // An urgent get fills the fast lane: the promotion of the running background fetch waits for room.
        let urgent = try RawConnection(socket: daemon.socket)
        urgent.send("{\"id\":1,\"op\":\"get\",\"url\":\"\(origin.url("/urgent.jpg?delay=1.5"))\"}\n")
        #expect(try waitUntil(seconds: 10) { try origin.count("/urgent.jpg") == 1 })
        #expect(daemon.ctl("promote", background).stdout.contains("promoted"))
        let demoted = daemon.ctl("demote", background)
        #expect(demoted.stdout.contains("demoted"), "\(demoted.stdout)\(demoted.stderr)")
        var answer = urgent.receive()
        while let line = answer, line["id"] == nil { answer = urgent.receive() }  // the greeting first
        #expect(answer?["ok"] as? Bool == true, "\(String(describing: answer))")
        let tasks = try #require(JSONSerialization.jsonObject(with: daemon.ctl("list", "--json").stdoutData) as? [String: Any])
        let lanes = (tasks["tasks"] as? [[String: Any]] ?? []).map { $0["lane"] as? String }
        #expect(lanes == ["slow"], "the background fetch goes on as background work once the lane has room: \(tasks)")
    }

    @Test("queue with summary: the reply counts every status and lists only the URLs with an error; without it, one result per URL; prefetchctl queue prints the same counts")
    func queueSummary() throws {
        let origin = try Origin()
        try origin.setDelay(30)  // nothing finishes while the test looks
        let daemon = try DaemonUnderTest()
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        let a = origin.url("/summary/a.jpg"), b = origin.url("/summary/b.jpg")
        let urls = [a, a, "ftp://example.com/x.jpg", b]
        connection.send(#"{"id":1,"op":"queue","summary":true,"urls":["# + urls.map { "\"\($0)\"" }.joined(separator: ",") + "]}\n")
        let summary = try #require(connection.receive()?["result"] as? [String: Any])
        #expect(summary["counts"] as? [String: Int] == ["queued": 2, "already": 1, "rejected": 1])
        let listed = try #require(summary["results"] as? [[String: Any]])
        #expect(listed.count == 1 && listed.first?["url"] as? String == "ftp://example.com/x.jpg"
                && listed.first?["status"] as? String == "rejected")

        connection.send(#"{"id":2,"op":"queue","urls":["# + urls.map { "\"\($0)\"" }.joined(separator: ",") + "]}\n")
        let full = try #require(connection.receive()?["result"] as? [String: Any])
        #expect(full["counts"] == nil)
        #expect((full["results"] as? [[String: Any]])?.map { $0["status"] as? String } == ["already", "already", "rejected", "already"])

        let cli = daemon.ctl(arguments: ["queue", origin.url("/summary/c.jpg"), a, "ftp://example.com/y.jpg"])
        #expect(cli.status == 4)
        #expect(cli.stderr.contains("ftp://example.com/y.jpg: scheme_not_allowed"))
        #expect(cli.stderr.contains("1 queued, 1 already, 1 rejected"), "\(cli.stderr)")
    }

    @Test("requests pipelined behind a queue take effect after it: cancel cancels, promote promotes, info sees the URL; replies in order, a refused line's too")
    func pipelinedBehindQueue() throws {
        let origin = try Origin()
        try origin.setDelay(30)  // nothing finishes while the test looks
        let daemon = try DaemonUnderTest()
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        let a = origin.url("/pipelined/a.jpg"), b = origin.url("/pipelined/b.jpg"), c = origin.url("/pipelined/c.jpg")
        // One write: the daemon reads the four lines in one turn.
        connection.send(#"{"id":1,"op":"queue","urls":["\#(a)","\#(b)","\#(c)"]}"# + "\n"
                        + #"{"id":2,"op":"fly"}"# + "\n"
                        + #"{"id":3,"op":"cancel","urls":["\#(a)"]}"# + "\n"
                        + #"{"id":4,"op":"promote","urls":["\#(b)"]}"# + "\n"
                        + #"{"id":5,"op":"info","url":"\#(c)"}"# + "\n")
        let replies = (1...5).compactMap { _ in connection.receive() }
        #expect(replies.map { $0["id"] as? Int } == [1, 2, 3, 4, 5], "\(replies)")
        let statuses = { (reply: [String: Any]) in
            ((reply["result"] as? [String: Any])?["results"] as? [[String: Any]])?.map { $0["status"] as? String }
        }
        #expect(statuses(replies[0]) == ["queued", "queued", "queued"])
        #expect((replies[1]["error"] as? [String: Any])?["code"] as? String == "unknown_op")
        #expect(statuses(replies[2]) == ["cancelled"], "the cancel found the URL queued just before it")
        #expect(statuses(replies[3]) == ["promoted"])
        #expect((replies[4]["result"] as? [String: Any])?["task"] != nil, "info sees the queued URL")
        let listed = daemon.ctl("list", "--json").stdout
        #expect(!listed.contains("/pipelined/a.jpg") && listed.contains("/pipelined/b.jpg"), "\(listed)")
    }

    @Test("kill -9 right after queue of 1,000 URLs: after a restart all are queued or cached, the index is sound")
    func crashAfterQueue() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let urls = (1...1000).map { origin.url("/bulk/\($0).jpg") }
        let queued = daemon.ctl(arguments: ["queue", "--json", "-"], stdin: urls.joined(separator: "\n"))
        #expect(queued.status == 0)
        #expect(queued.lines.count == 1000)
        daemon.kill9()
        try daemon.start()

        let infos = daemon.ctl(arguments: ["get", "--timeout", "120", "-"], stdin: urls.joined(separator: "\n"))
        #expect(infos.status == 0, "\(infos.stderr.prefix(500))")
        #expect(infos.lines.count == 1000)
        let counts = try origin.stats().counts.filter { $0.key.hasPrefix("/bulk/") }
        #expect(counts.count == 1000)
        // Only what was in flight at the kill (the slow lane's one transfer, one uncommitted install) is fetched again.
        #expect(counts.values.filter { $0 > 1 }.count <= 2)
        let check = run("/usr/bin/env", ["python3", Paths.fixtures + "/check_index.py", daemon.cache])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
    }

    @Test("after kill -9 the daemon serves before it compares the index with the files (100,000 entries held the start for 1.6 s), then removes what no row names; a row whose file went is fetched again when asked for")
    func sweepAfterServing() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let kept = daemon.ctl("get", origin.url("/sweep/kept.jpg")).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let gone = daemon.ctl("get", origin.url("/sweep/gone.jpg")).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        daemon.kill9()
        let orphan = daemon.cache + "/files/ab/" + String(repeating: "ab", count: 32)
        #expect(FileManager.default.createFile(atPath: orphan, contents: Data(count: 10)))
        try FileManager.default.removeItem(atPath: gone)
        try daemon.start()
        #expect(waitUntil(seconds: 10) { daemon.log.contains("recovery: compared the index with the files") }, "\(daemon.log)")
        let lines = daemon.log.split(separator: "\n")
        let serving = try #require(lines.lastIndex { $0.contains(" serving ") })
        let compared = try #require(lines.lastIndex { $0.contains("recovery: compared") })
        #expect(serving < compared, "\(daemon.log)")
        #expect(lines[compared].hasSuffix("removed 1 rows without their file, 1 orphan files"), "\(lines[compared])")
        #expect(!FileManager.default.fileExists(atPath: orphan))
        #expect(FileManager.default.fileExists(atPath: kept))
        #expect(daemon.ctl("get", origin.url("/sweep/gone.jpg")).status == 0)
        #expect(try origin.count("/sweep/gone.jpg") == 2)
        #expect(try origin.count("/sweep/kept.jpg") == 1)
    }

    @Test("a start while another process holds a lock on the index names the lock (it said the index must be writable by the user prefetchd runs as)")
    func lockedIndexNamed() throws {
        let daemon = try DaemonUnderTest()
        daemon.child?.stop()
        let hold = "import sqlite3, sys, time; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
            + "db.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(30)"
        let started = run("/bin/sh", ["-c", "python3 -c \"\(hold)\" \(daemon.cache)/index.sqlite > \(daemon.directory.path)/held & "
                                      + "until grep -q locked \(daemon.directory.path)/held; do sleep 0.1; done; "
                                      + "\(Paths.prefetchd) --socket \(daemon.socket) --cache-dir \(daemon.cache); status=$?; kill $!; exit $status"])
        #expect(started.status == 1, "\(started)")
        #expect(started.stderr.contains("database is locked: another process holds a lock on it"), "\(started.stderr)")
    }

    @Test("after kill -9 the size limit waits for the comparison of the index with the files: sizes the index got wrong evicted intact entries at start (the sweep measured them again only after)")
    func sizeLimitWaitsForTheSweep() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-cache-bytes", "500000"])
        let urls = (0..<8).map { origin.url("/limit/\($0).jpg?size=40000") }
        #expect(daemon.ctl(arguments: ["get", "-"], stdin: urls.joined(separator: "\n")).status == 0)
        daemon.kill9()
        // Sizes recorded four times too large (another file system's blocks, a copied cache): 1.3 MB on record.
        let script = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
            + "db.execute('UPDATE entries SET allocated = allocated * 4'); db.commit()"
        #expect(run("/usr/bin/env", ["python3", "-c", script, daemon.cache + "/index.sqlite"]).status == 0)
        try daemon.start()
        #expect(waitUntil(seconds: 10) { daemon.log.contains("recovery: compared the index with the files") }, "\(daemon.log)")
        let status = try JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any]
        let cache = status?["cache"] as? [String: Any]
        #expect(cache?["entries"] as? Int == 8, "\(String(describing: cache))")
        #expect(!daemon.log.contains("evicted"), "\(daemon.log)")
        for url in urls { #expect(daemon.ctl("get", "--offline", url).status == 0) }
    }

    @Test("files go to files/ab/<sha256> (no directory made per file); a cache from the two-level layout keeps serving its files")
    func cacheLayout() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let old = daemon.ctl("get", origin.url("/layout/old.jpg")).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let name = (old as NSString).lastPathComponent
        #expect(old == daemon.cache + "/files/" + name.prefix(2) + "/" + name, "\(old)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: daemon.cache + "/files").count == 256)
        daemon.kill9()
        // As a cache written before: the file in files/ab/cd/, the index saying so.
        let twoLevel = "files/" + name.prefix(2) + "/" + name.dropFirst(2).prefix(2) + "/" + name
        try FileManager.default.createDirectory(atPath: daemon.cache + "/" + (twoLevel as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        try FileManager.default.moveItem(atPath: old, toPath: daemon.cache + "/" + twoLevel)
        let script = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
            + "db.execute('UPDATE entries SET file = ? WHERE file LIKE ?', (sys.argv[2], '%' + sys.argv[3])); db.commit()"
        #expect(run("/usr/bin/env", ["python3", "-c", script, daemon.cache + "/index.sqlite", twoLevel, name]).status == 0)
        try daemon.start()
        let served = daemon.ctl("get", "--offline", origin.url("/layout/old.jpg"))
        #expect(served.status == 0 && served.stdout.contains(twoLevel), "the start-up sweep kept it: \(served.stdout) \(daemon.log)")
        #expect(try origin.count("/layout/old.jpg") == 1)
        let new = daemon.ctl("get", origin.url("/layout/new.jpg")).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let newName = (new as NSString).lastPathComponent
        #expect(new == daemon.cache + "/files/" + newName.prefix(2) + "/" + newName)
        let check = run("/usr/bin/env", ["python3", Paths.fixtures + "/check_index.py", daemon.cache])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
    }

    @Test("the Python example in docs/protocol.md works against a live daemon")
    func pythonExample() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let result = run("/usr/bin/env", ["python3", Paths.repository + "/examples/client.py", "--socket", daemon.socket,
                                          origin.url("/py1.jpg"), origin.url("/py2.jpg")])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("/py1.jpg"))
        #expect(result.stdout.contains("/py2.jpg"))
    }

    @Test("get --timeout reports timeout (exit 5) while the fetch goes on")
    func getTimeout() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/slow.jpg?delay=2")
        let result = daemon.ctl("get", "--timeout", "0.5", url)
        #expect(result.status == 5)
        #expect(result.stderr.contains("timeout"))
        #expect(waitUntil(seconds: 15) { daemon.ctl("get", "--offline", url).status == 0 }, "the fetch went on")
        #expect(daemon.ctl("get", "--json", url).stdout.contains("\"from_cache\":true"))
        #expect(try origin.count("/slow.jpg") == 1)
    }

    @Test("a second daemon on a live socket refuses to start; a stale socket file is replaced")
    func socketOwnership() throws {
        let daemon = try DaemonUnderTest()
        let second = run(Paths.prefetchd, ["--socket", daemon.socket, "--cache-dir", daemon.directory.path + "/other"])
        #expect(second.status != 0)
        #expect(second.stderr.contains("already serving"))
        #expect(!FileManager.default.fileExists(atPath: daemon.directory.path + "/other"), "refused before making its cache")
        daemon.kill9()  // leaves the socket file behind
        #expect(FileManager.default.fileExists(atPath: daemon.socket))
        try daemon.start()
        #expect(daemon.ctl("ping").status == 0)
    }

    @Test("a daemon that stops removes its socket file only while it is its own: one bound at the path after it was deleted stays")
    func socketOfAnotherDaemonStays() throws {
        let first = try DaemonUnderTest()
        #expect(unlink(first.socket) == 0)
        let second = try ChildProcess(Paths.prefetchd, ["--socket", first.socket, "--cache-dir", first.directory.path + "/second"],
                                      stderrPath: first.directory.path + "/second.log")
        defer { second.stop(SIGTERM) }
        var answered = false
        for _ in 0..<200 where !answered {
            answered = first.ctl("ping").status == 0
            if !answered { usleep(25_000) }
        }
        #expect(answered, "the second daemon serves the path: \(second.stderrText)")
        first.child?.stop(SIGTERM)
        #expect(first.ctl("ping").status == 0, "the second daemon is still reachable")
    }

    @Test("SIGTERM keeps acknowledged queue entries for the next start")
    func termKeepsQueue() throws {
        let origin = try Origin()
        try origin.setDelay(5)
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl(arguments: ["queue"] + (1...5).map { origin.url("/t\($0).jpg") }).status == 0)
        daemon.child?.stop(SIGTERM)
        #expect(daemon.child?.process.terminationStatus == 0)
        try origin.setDelay(0)
        try daemon.start()
        let result = daemon.ctl(arguments: ["get", "--timeout", "30"] + (1...5).map { origin.url("/t\($0).jpg") })
        #expect(result.status == 0, "\(result.stderr)")
    }
}
