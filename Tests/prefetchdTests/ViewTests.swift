import Foundation
import Testing

/// A client of the `view` op on a raw connection: sends requests, collects the events and replies it reads.
final class ViewClient {
    let connection: RawConnection
    private var nextID = 0
    private(set) var events: [[String: Any]] = []
    private(set) var replies: [Int: [String: Any]] = [:]

    init(socket: String) throws {
        connection = try RawConnection(socket: socket)
        _ = connection.receive()
    }

    /// Sends a `view` request with `fields`; returns its id.
    @discardableResult
    func send(_ fields: [String: Any]) throws -> Int {
        nextID += 1
        var object = fields
        object["id"] = nextID
        object["op"] = "view"
        connection.send(String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self) + "\n")
        return nextID
    }

    /// Reads until `condition` holds (events and replies are kept); false when the connection ends or stalls 20 s.
    @discardableResult
    func read(until condition: (ViewClient) -> Bool) -> Bool {
        while !condition(self) {
            guard let line = connection.receive() else { return false }
            if let id = line["id"] as? Int { replies[id] = line } else { events.append(line) }
        }
        return true
    }

    /// Rows that got a `view_ready` event.
    var readyRows: Set<Int> { Set(events.filter { $0["event"] as? String == "view_ready" }.compactMap { $0["row"] as? Int }) }
}

/// `view`: scrolling a long list against a slow origin, the per-host start rate, bad requests, `prefetchctl view`.
@Suite(.serialized)
struct ViewTests {
    /// 1,100 URLs queued: the first one holds the slow lane for 30 s, the last 76 are past the backlog's first read.
    static func queueBehindTheWindow(_ daemon: DaemonUnderTest, _ origin: Origin, _ name: String) -> [String] {
        let urls = (0..<1100).map { origin.url("/\(name)/\($0).jpg?delay=30") }
        #expect(daemon.ctl("queue", "-", stdin: urls.joined(separator: "\n") + "\n").status == 0)
        return urls
    }

    /// The queued URLs `status` counts: the tasks, and those only the durable backlog holds.
    static func queued(_ daemon: DaemonUnderTest) throws -> Int {
        let status = try daemon.status()
        return status.fast.waiting + status.fast.running + status.slow.waiting + status.slow.running + status.delayed
            + Int(status.backlog)
    }

    static func info(_ daemon: DaemonUnderTest, _ url: String) throws -> [String: Any] {
        let result = daemon.ctl("info", "--json", url)
        return try #require(try JSONSerialization.jsonObject(with: result.stdoutData) as? [String: Any], "\(result.stderr)")
    }

    @Test("scrolling 1,000 rows a screen at a time: visible rows first, rows left behind demoted then dropped, nothing fetched twice but a parked transfer's resume, no urgent work after close")
    func scroll() throws {
        let origin = try Origin()
        try origin.setDelay(0.4)
        let daemon = try DaemonUnderTest(["--fast-width", "8"])
        let paths = (0..<1000).map { "/v\($0).jpg" }
        let screen = 20, ahead = 20, behind = 10
        func visible(_ k: Int) -> Range<Int> { (k * screen)..<(k * screen + screen) }

        let view = try ViewClient(socket: daemon.socket)
        var sentAt: [Double] = []
        try view.send(["urls": paths.map(origin.url), "first": 0, "last": screen - 1, "ahead": ahead, "behind": behind])
        sentAt.append(monotonicSeconds())
        var demotedSeen: [Int] = []
        for k in 1...9 {
            usleep(300_000)
            if k == 3 {
                // Screen 0 scrolled out 0.6 s ago; what had not started waits as background work, in `list` and `info`.
                let list = daemon.ctl("list", "--json")
                let tasks = try #require(try JSONSerialization.jsonObject(with: list.stdoutData) as? [String: Any])["tasks"]
                    as? [[String: Any]] ?? []
                for row in visible(0) {
                    guard let task = tasks.first(where: { $0["url"] as? String == origin.url(paths[row]) }) else { continue }
                    // Never started (a row that was running when it scrolled away is parked, to resume later).
                    if task["state"] as? String == "waiting", task["attempts"] as? Int == 0 {
                        #expect(task["lane"] as? String == "slow", "row \(row): \(task)")
                        demotedSeen.append(row)
                    }
                }
                let row = try #require(demotedSeen.last, "no row of screen 0 was left waiting: \(tasks)")
                let task = try #require(try Self.info(daemon, origin.url(paths[row]))["task"] as? [String: Any])
                #expect(task["lane"] as? String == "slow" && task["waiters"] as? Int == 0, "\(task)")
            }
            try view.send(["first": k * screen, "last": k * screen + screen - 1, "ahead": ahead, "behind": behind])
            sentAt.append(monotonicSeconds())
        }
        // The last screen's rows all become ready, then look-ahead rows start.
        #expect(view.read { Set(visible(9)).isSubset(of: $0.readyRows) }, "last screen: \(view.readyRows.sorted())")
        let everVisible = Set((0...9).flatMap { Array(visible($0)) })
        let rowOfPath = Dictionary(uniqueKeysWithValues: paths.enumerated().map { ($1, $0) })
        var starts: [Int: Double] = [:]
        #expect(try waitUntil(seconds: 10) {
            starts = [:]
            for entry in try origin.stats().log { if let row = rowOfPath[entry.path] { starts[row] = min(starts[row] ?? .infinity, entry.start) } }
            return starts.keys.count { !everVisible.contains($0) } >= 3
        }, "no look-ahead row started after the last screen")

        // Visible rows first: whenever a look-ahead row started, every row then visible (its screen sent 0.2 s
        // earlier, the next not yet) had started already.
        var checked = 0
        for (row, start) in starts where !everVisible.contains(row) {
            guard let k = sentAt.lastIndex(where: { $0 <= start - 0.2 }), k + 1 == sentAt.count || sentAt[k + 1] > start else { continue }
            for visibleRow in visible(k) {
                #expect((starts[visibleRow] ?? .infinity) <= start, "look-ahead row \(row) started before visible row \(visibleRow) (screen \(k))")
            }
            checked += 1
        }
        let lookAheadStarts = starts.filter { !everVisible.contains($0.key) }.map { ($0.key, $0.value - sentAt[0]) }.sorted { $0.1 < $1.1 }
        #expect(checked >= 3, "look-ahead starts \(lookAheadStarts), screens sent at \(sentAt.map { $0 - sentAt[0] })")

        // Screen 0's waiting rows are far from screen 9: their work was dropped, never fetched.
        for row in demotedSeen {
            #expect(try Self.info(daemon, origin.url(paths[row]))["task"] == nil, "row \(row) still has a task")
            #expect(try origin.count(paths[row]) == 0, "row \(row) was fetched")
        }

        // Jump to rows 500-519 and close at once: no urgent work stays behind; it goes on as background work.
        try view.send(["first": 500, "last": 519, "ahead": 0, "behind": 0])
        #expect(view.read { $0.replies.count == 11 })
        close(view.connection.fd)
        #expect(waitUntil(seconds: 5) {
            let status = daemon.ctl("status", "--json")
            guard let object = try? JSONSerialization.jsonObject(with: status.stdoutData) as? [String: Any],
                  let fast = object["fast"] as? [String: Any] else { return false }
            return fast["waiting"] as? Int == 0 && fast["running"] as? Int == 0
        }, "urgent work left after the view closed")
        let list = daemon.ctl("list", "--json")
        let tasks = try #require(try JSONSerialization.jsonObject(with: list.stdoutData) as? [String: Any])["tasks"] as? [[String: Any]] ?? []
        #expect(tasks.allSatisfy { $0["lane"] as? String == "slow" }, "\(tasks)")

        try origin.setDelay(0)
        #expect(waitUntil(seconds: 60) { (try? Self.taskCount(daemon)) == 0 }, "the background work did not drain")
        let counts = try origin.stats().counts
        for row in 500..<520 { #expect((1...2).contains(counts[paths[row]] ?? 0), "row \(row) was not fetched as background work") }
        // Once each, or twice for a transfer parked when its row scrolled away (the slow lane was full) and resumed.
        for (path, count) in counts where path.hasPrefix("/v") { #expect(count <= 2, "\(path) fetched \(count) times") }
    }

    static func taskCount(_ daemon: DaemonUnderTest) throws -> Int {
        let status = daemon.ctl("status", "--json")
        let object = try #require(try JSONSerialization.jsonObject(with: status.stdoutData) as? [String: Any])
        let fast = object["fast"] as? [String: Any] ?? [:], slow = object["slow"] as? [String: Any] ?? [:]
        return [fast["waiting"], fast["running"], slow["waiting"], slow["running"], object["delayed"]].compactMap { $0 as? Int }.reduce(0, +)
    }

    @Test("a view flicked between two screens every 0.5 s, the server's first byte after 1.2 s: every row loads while the flicking goes on (none did: each hidden row's request was dropped, then asked again)")
    func flickFasterThanFirstByte() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        // A background backlog fills the slow lane: hidden rows cannot go on in it.
        #expect(daemon.ctl(arguments: ["queue"] + (0..<50).map { origin.url("/bg\($0).jpg?delay=3") }).status == 0)
        let rows = (0..<20).map { origin.url("/flick\($0).jpg?delay=1.2") }
        let view = try ViewClient(socket: daemon.socket)
        try view.send(["urls": rows, "first": 0, "last": 9, "ahead": 0, "behind": 0])
        let began = Date()
        let flicks = 20  // 10 s
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) let connection = view.connection  // writes only, while this thread reads
        DispatchQueue.global().async {
            for flick in 1...flicks {
                usleep(500_000)
                let first = flick % 2 * 10
                connection.send("{\"id\":\(1000 + flick),\"op\":\"view\",\"first\":\(first),\"last\":\(first + 9),\"ahead\":0,\"behind\":0}\n")
            }
            done.signal()
        }
        #expect(view.read { $0.readyRows.count == rows.count }, "rows ready: \(view.readyRows.sorted())")
        let loaded = Date().timeIntervalSince(began)
        done.wait()
        #expect(loaded < Double(flicks) * 0.5, "every row loaded \(loaded) s after the first screen, the flicking lasted \(Double(flicks) * 0.5) s")
        let asked = try (0..<20).map { try origin.count("/flick\($0).jpg") }
        #expect(asked.allSatisfy { $0 <= 4 }, "requests per row: \(asked)")
    }

    @Test("host_start_rate 20/s: 500 visible-range changes in 2 s start no more than the burst plus 20 per second")
    func startRate() throws {
        let origin = try Origin()
        let burst = 10
        let daemon = try DaemonUnderTest(["--host-start-rate", "20", "--host-start-burst", String(burst)])
        let paths = (0..<6000).map { "/r\($0).jpg" }
        let view = try ViewClient(socket: daemon.socket)
        for part in stride(from: 0, to: paths.count, by: 1000) {
            try view.send(["urls": paths[part..<part + 1000].map(origin.url), "append": part > 0])
        }
        let began = Date()
        for change in 0..<500 {
            try view.send(["first": change * 10, "last": change * 10 + 19, "ahead": 0, "behind": 0])
            usleep(4_000)
        }
        let sending = Date().timeIntervalSince(began)
        #expect(sending < 4, "sending the changes took \(sending) s")
        // The last range's rows are served in the end, at the limited rate.
        #expect(view.read { Set(4990...5009).isSubset(of: $0.readyRows) }, "ready: \(view.readyRows.count) rows")

        let log = try origin.stats().log.filter { $0.path.hasPrefix("/r") }.sorted { $0.start < $1.start }
        let starts = log.map(\.start)
        #expect(Set(log.map(\.path)).count == log.count, "a row was requested twice")
        let first = try #require(starts.first)
        for (i, start) in starts.enumerated() {
            // One request of slack for the time between the daemon's start and the origin's clock reading.
            let allowed = Double(burst) + 20 * (start - first) + 1
            #expect(Double(i + 1) <= allowed, "\(i + 1) starts by \(start - first) s (allowed \(allowed)): \(log.prefix(i + 1).map { ($0.path, $0.start - first) })")
        }
        let within2s = starts.count { $0 - first <= 2 }
        #expect(within2s <= burst + 40 + 1, "\(within2s) starts in the first 2 s")
        #expect(daemon.ctl("ping").status == 0)
    }

    @Test("queue of a URL a view prefetched answered `already` and kept nothing: scrolling away or a restart lost it; it is durable")
    func queueAdoptsLookAhead() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let view = try ViewClient(socket: daemon.socket)
        let urls = (0..<50).map { origin.url("/look/\($0).jpg?delay=3") }
        let id = try view.send(["urls": urls, "first": 0, "last": 0, "ahead": 10, "behind": 0])
        #expect(view.read { $0.replies[id] != nil })
        let queued = daemon.ctl("queue", "--json", urls[5])
        #expect(queued.status == 0 && queued.stdout.contains("\"status\":\"already\""), "\(queued.stdout)")
        // The view scrolls far away (its look-ahead would be dropped), then the daemon dies.
        try view.send(["first": 40, "last": 40, "ahead": 0, "behind": 0])
        daemon.kill9()
        try daemon.start()
        let status = try daemon.status()
        #expect(status.slow.waiting + status.slow.running + Int(status.backlog) == 1, "\(status)")
        #expect(waitUntil(seconds: 15) { (try? origin.count("/look/5.jpg")) ?? 0 >= 1 && daemon.ctl("get", "--offline", urls[5]).status == 0 },
                "the queued URL is fetched after the restart: \(daemon.log)")
    }

    @Test("a view that prefetched rows the durable queue held but had not loaded yet (behind 1,024 others), then scrolled far from them, dequeued them: acknowledged URLs lost; now they stay queued")
    func lookAheadKeepsWhatTheQueueHolds() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let urls = Self.queueBehindTheWindow(daemon, origin, "held")
        let listed = Array(urls[1060..<1100])
        #expect(try Self.info(daemon, listed[5])["task"].flatMap { ($0 as? [String: Any])?["state"] as? String } == "backlog")
        let view = try ViewClient(socket: daemon.socket)
        let id = try view.send(["urls": listed, "first": 0, "last": 0, "ahead": 10, "behind": 0])
        #expect(view.read { $0.replies[id] != nil })
        let far = try view.send(["first": 39, "last": 39, "ahead": 0, "behind": 0])  // rows 1-10 are far now: dropped
        #expect(view.read { $0.replies[far] != nil })
        #expect(try Self.queued(daemon) == 1100, "every queued URL is still queued, once")
        for url in listed[1...10] {
            let task = try Self.info(daemon, url)["task"] as? [String: Any]
            #expect(task != nil, "\(url) stays queued")
        }
    }

    @Test("a visible row whose URL the durable queue holds, scrolled far away before it ran, stays queued, counted once; so does a get's")
    func shownRowsKeepWhatTheQueueHolds() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let urls = Self.queueBehindTheWindow(daemon, origin, "shown")
        let listed = Array(urls[1060..<1100])  // past the backlog's first read
        let view = try ViewClient(socket: daemon.socket)
        // 20 rows visible: 8 run (the fast lane's width), 12 wait; then all 20 are far away.
        let id = try view.send(["urls": listed, "first": 0, "last": 19, "ahead": 0, "behind": 0])
        #expect(view.read { $0.replies[id] != nil })
        let far = try view.send(["first": 39, "last": 39, "ahead": 0, "behind": 0])
        #expect(view.read { $0.replies[far] != nil })
        for url in listed[0..<20] {
            let task = try Self.info(daemon, url)["task"] as? [String: Any]
            #expect(task != nil, "\(url) stays queued")
        }
        // A get of a queued URL, given up: its task, the queue's, goes on.
        #expect(daemon.ctl("get", "--timeout", "0.3", listed[30]).status != 0)
        #expect(try Self.info(daemon, listed[30])["task"] as? [String: Any] != nil)
        // Each queued URL once: a row's task, or a get's, is not also counted as held only by the durable backlog.
        #expect(try Self.queued(daemon) == 1100)
    }

    @Test("a get --max-stale of a stale URL the durable queue holds but had not read: its revalidation is the queue's task, counted once; a promote of such a URL starts its queue wait")
    func staleAnswerKeepsTheQueuesTask() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let stale = origin.url("/stale.jpg?cc=max-age%3D0")
        #expect(daemon.ctl("get", stale).status == 0)
        let urls = Self.queueBehindTheWindow(daemon, origin, "held")
        #expect(daemon.ctl("queue", stale).status == 0)
        #expect(daemon.ctl("get", "--max-stale", "3600", stale).status == 0)
        #expect(try Self.queued(daemon) == 1101)
        // A promote loads such a URL and starts it at once in the fast lane: its wait is measured.
        #expect(daemon.ctl("promote", urls[1090]).status == 0)
        let metrics = daemon.ctl("metrics").stdout
        #expect(metrics.contains("prefetchd_queue_wait_seconds_count{lane=\"fast\"} 2\n"), "\(metrics)")
    }

    @Test("bad view requests get bad_request and change nothing; rejected URLs are listed and reported when visible")
    func badRequests() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let view = try ViewClient(socket: daemon.socket)
        let bad: [([String: Any], String)] = [
            ([:], "view needs urls"),
            (["first": 0], "first and last go together"),
            (["first": 5, "last": 2], "first <= last"),
            (["first": 0, "last": 1000], "at most 1000 visible rows"),
            (["first": 0, "last": 9, "ahead": 5000], "ahead and behind"),
            (["ahead": 3], "need first and last"),
            (["urls": [origin.url("/a.jpg")], "fit": "cover"], "need size"),
            (["urls": [origin.url("/a.jpg")], "size": "0x0"], "size"),
        ]
        for (fields, message) in bad {
            let id = try view.send(fields)
            #expect(view.read { $0.replies[id] != nil })
            let error = view.replies[id]?["error"] as? [String: Any]
            #expect(error?["code"] as? String == "bad_request", "\(fields): \(String(describing: view.replies[id]))")
            let text = (error?["message"] as? String) ?? ""
            #expect(text.contains(message), "\(text)")
        }
        let id = try view.send(["urls": [origin.url("/a.jpg"), "ftp://example.com/b.jpg", origin.url("/c.jpg")], "first": 0, "last": 2])
        #expect(view.read { $0.replies[id] != nil && $0.events.count == 3 })
        let result = try #require(view.replies[id]?["result"] as? [String: Any])
        #expect(result["rows"] as? Int == 3 && result["first"] as? Int == 0 && result["last"] as? Int == 2)
        let rejected = try #require(result["rejected"] as? [[String: Any]])
        #expect(rejected.count == 1 && rejected.first?["row"] as? Int == 1)
        let failed = try #require(view.events.first { $0["event"] as? String == "view_failed" })
        #expect(failed["row"] as? Int == 1 && (failed["error"] as? [String: Any])?["code"] as? String == "scheme_not_allowed")
        #expect(view.readyRows == [0, 2])
        let metrics = daemon.ctl("metrics").stdout
        for sample in ["prefetchd_view_events_total{event=\"view_ready\"} 2", "prefetchd_view_events_total{event=\"view_failed\"} 1",
                       "prefetchd_views 1"] {
            #expect(metrics.contains(sample + "\n"), "\(sample) not in the metrics")
        }
        for event in view.events where event["event"] as? String == "view_ready" {
            let path = try #require(event["path"] as? String)
            let row = try #require(event["row"] as? Int)
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == origin.body(row == 0 ? "/a.jpg" : "/c.jpg"))
        }
    }

    @Test("a view with a size gets variants; a row shown again is answered again, from the cache")
    func variantsAndCache() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let view = try ViewClient(socket: daemon.socket)
        try view.send(["urls": (0..<10).map { origin.url("/s\($0).jpg") }, "first": 0, "last": 1, "size": "4x4", "ahead": 0, "behind": 0])
        #expect(view.read { $0.readyRows == [0, 1] })
        #expect(view.events.allSatisfy { ($0["variant"] as? String)?.hasPrefix("4x4-contain") == true && $0["width"] as? Int == 4 })
        try view.send(["first": 5, "last": 5])
        #expect(view.read { $0.readyRows.contains(5) })
        try view.send(["first": 0, "last": 0])
        #expect(view.read { $0.events.count == 4 }, "\(view.events)")
        #expect(view.events.last?["row"] as? Int == 0)
        #expect(try origin.count("/s0.jpg") == 1)
    }

    @Test("prefetchctl view prints ROW PATH lines for visible rows, reads ranges from stdin, exits when they are answered")
    func cli() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let directory = try TemporaryDirectory()
        let list = directory.path + "/list.txt"
        try ((0..<30).map { origin.url("/l\($0).jpg") } + ["# a comment", "", "not a url"]).joined(separator: "\n")
            .write(toFile: list, atomically: true, encoding: .utf8)
        // The second range comes once the first is answered (sooner, rows 0-2 would scroll away unanswered).
        let script = "{ echo 0 2; sleep 1; echo nonsense; echo 10 11; } | \"$0\" --socket \"$1\" view \"$2\" --ahead 0 --behind 0"
        let result = run("/bin/sh", ["-c", script, Paths.prefetchctl, daemon.socket, list])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.lines.map { $0.split(separator: " ", maxSplits: 1) }
        #expect(Set(lines.compactMap { Int($0[0]) }) == [0, 1, 2, 10, 11], "\(result.stdout)")
        for line in lines {
            let row = try #require(Int(line[0]))
            #expect(try Data(contentsOf: URL(fileURLWithPath: String(line[1]))) == origin.body("/l\(row).jpg"))
        }
        #expect(result.stderr.contains("row 30 (not a url): invalid_url"), "\(result.stderr)")
        #expect(result.stderr.contains("ignored 'nonsense'"), "\(result.stderr)")

        let fromStdin = daemon.ctl("view", "-", "--json", stdin: "\(origin.url("/l0.jpg"))\nftp://x/y\n\n0 1\n")
        #expect(fromStdin.status == 1, "a visible row failed: \(fromStdin.stderr)")
        let events = fromStdin.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(Set(events.compactMap { $0["event"] as? String }) == ["view_ready", "view_failed"], "\(fromStdin.stdout)")

        // A range the daemon refuses exits 4, as a refused request does (it exited 0).
        let refused = daemon.ctl("view", list, stdin: "0 99999\n")
        #expect(refused.status == 4 && refused.stderr.contains("range 0 99999: bad_request"), "\(refused.stderr)")

        let missing = daemon.ctl("view", directory.path + "/nope.txt")
        #expect(missing.status == 2 && missing.stderr.contains("cannot read the list"), "\(missing.stderr)")
    }
}
