import Foundation
import Testing

/// `metrics` in the Prometheus format, and `--json` on every verb.
@Suite(.serialized)
struct ObservabilityTests {
    /// The samples of `prefetchctl metrics`, parsed by prometheus_client's own parser.
    func metrics(_ daemon: DaemonUnderTest) throws -> [String: Double] {
        let text = daemon.ctl("metrics")
        #expect(text.status == 0)
        let parsed = run("/usr/bin/env", ["python3", Paths.fixtures + "/parse_metrics.py"], stdin: text.stdout)
        #expect(parsed.status == 0, "\(parsed.stderr)")
        return try #require(JSONSerialization.jsonObject(with: parsed.stdoutData) as? [String: Double])
    }

    @Test("metrics parse with the Prometheus reference parser and move by the expected amounts")
    func prometheusMetrics() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let before = try metrics(daemon)
        #expect(before["prefetchd_fetches_total{lane=fast,result=ok}"] == 0)
        #expect(before["prefetchd_cache_limit_bytes{}"] == Double(1 << 30))

        daemon.ctl("get", origin.url("/m1.jpg?size=1000"), origin.url("/m2.jpg?size=3000"), origin.url("/m3.jpg?status=404"))
        daemon.ctl("get", origin.url("/m1.jpg?size=1000"))
        #expect(daemon.ctl("queue", origin.url("/m4.jpg?size=500")).status == 0)
        try waitUntil(seconds: 10) { try metrics(daemon)["prefetchd_fetches_total{lane=slow,result=ok}"] == 1 }

        let after = try metrics(daemon)
        #expect(after["prefetchd_fetches_total{lane=fast,result=ok}"] == 2)
        #expect(after["prefetchd_fetches_total{lane=fast,result=error}"] == 1)
        #expect(after["prefetchd_fetches_total{lane=slow,result=ok}"] == 1)
        #expect(after["prefetchd_fetch_errors_total{code=http_status}"] == 1)
        #expect(after["prefetchd_downloaded_bytes_total{}"] == 4500)
        #expect(after["prefetchd_cache_hits_total{}"] == 1)
        #expect(after["prefetchd_cache_misses_total{}"] == 3)
        #expect(after["prefetchd_queued_total{}"] == 1)
        #expect(after["prefetchd_cache_entries{}"] == 3)
        #expect(after["prefetchd_get_latency_seconds_count{}"] == 4)
        #expect(after["prefetchd_fetch_duration_seconds_count{lane=fast}"] == 3)
        #expect(after["prefetchd_queue_wait_seconds_count{lane=slow}"] == 1)
        #expect(!after.keys.contains { $0.contains("127.0.0.1") || $0.contains("m1.jpg") }, "no URL or host as a label")
    }

    @Test("a get answered by a remembered failure makes no task: the queue wait of the URL's next fetch starts when that fetch is asked for")
    func queueWaitStartsWithTheTask() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--negative-ttl", "1"])
        let url = origin.url("/gone.jpg?status=404")
        #expect(daemon.ctl("get", url).status == 1)  // fetched: 404, remembered for 1 s
        #expect(daemon.ctl("get", url).status == 1)  // the remembered failure answers: nothing to fetch
        Thread.sleep(forTimeInterval: 1.5)
        #expect(daemon.ctl("get", url).status == 1)  // fetched again
        let after = try metrics(daemon)
        #expect(after["prefetchd_queue_wait_seconds_count{lane=fast}"] == 2)
        #expect(try #require(after["prefetchd_queue_wait_seconds_sum{lane=fast}"]) < 1, "the first answer's time was taken as the task's creation")
    }

    /// Runs a verb with `--json` and returns its first line as an object.
    func json(_ daemon: DaemonUnderTest, _ arguments: String...) throws -> [String: Any] {
        let result = daemon.ctl(arguments: arguments + ["--json"])
        let line = try #require(result.lines.first, "\(arguments): no output; \(result.stderr)")
        return try #require(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(arguments): \(line)")
    }

    @Test("a line per fetched file filled the log of a big drain: per file at debug level, a summary at info when the work runs out")
    func activitySummary() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let urls = (0..<3).map { origin.url("/summary/\($0).jpg") } + [origin.url("/summary/missing.jpg?status=404")]
        _ = daemon.ctl(arguments: ["get", "-"], stdin: urls.joined(separator: "\n"))
        #expect(waitUntil(seconds: 5) { daemon.log.contains("fetched 3 (") }, "\(daemon.log)")
        #expect(daemon.log.contains("revalidated 0, failed 1; 0 queued"), "\(daemon.log)")
        #expect(!daemon.log.contains("fetched \(urls[0])"), "no line per file at the default level")
        #expect(daemon.log.contains("failed \(urls[3])"), "a failure keeps its own line")

        let verbose = try DaemonUnderTest(["--log-level", "debug"])
        #expect(verbose.ctl("get", urls[0]).status == 0)
        #expect(waitUntil(seconds: 5) { verbose.log.contains("fetched \(urls[0]) (fast lane") }, "\(verbose.log)")
    }

    @Test("every verb's --json output parses and carries the documented fields")
    func jsonEverywhere() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/j.jpg")
        func has(_ object: [String: Any], _ fields: [String], _ verb: String) {
            for field in fields { #expect(object[field] != nil, "\(verb) --json lacks \(field): \(object)") }
        }
        has(try json(daemon, "get", url), ["url", "path", "bytes", "sha256", "fetched_at", "fresh_until", "from_cache"], "get")
        has(try json(daemon, "queue", origin.url("/j2.jpg?delay=2")), ["url", "key", "status"], "queue")
        has(try json(daemon, "promote", origin.url("/j2.jpg?delay=2")), ["url", "status"], "promote")
        has(try json(daemon, "demote", origin.url("/j2.jpg?delay=2")), ["url", "status"], "demote")
        has(try json(daemon, "info", url), ["url", "key", "cached"], "info")
        has(try json(daemon, "list"), ["tasks", "backlog"], "list")
        let status = try json(daemon, "status")
        has(status, ["version", "pid", "uptime", "fast", "slow", "slow_suspended", "delayed", "backlog", "cache",
                     "connections", "fetched", "failed", "paused_hosts"], "status")
        has(try #require(status["cache"] as? [String: Any]), ["entries", "bytes", "limit", "hits", "misses", "directory"], "status.cache")
        has(try json(daemon, "cancel", origin.url("/j2.jpg?delay=2")), ["url", "status"], "cancel")
        has(try json(daemon, "evict", url), ["url", "status"], "evict")
        has(try json(daemon, "ping"), ["pong", "version"], "ping")
        has(try json(daemon, "metrics"), ["text"], "metrics")
        let failed = try json(daemon, "get", origin.url("/nope.jpg?status=404"))
        has(failed, ["url", "error"], "get (failure)")
    }
}

/// The textfile for node_exporter and the image format list.
@Suite(.serialized)
struct TextfileAndFormatsTests {
    @Test("metrics_textfile is written atomically and parses; a symbolic link planted at PATH.tmp is not written through")
    func textfile() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/prefetchd.prom", victim = directory.path + "/victim.txt"
        try write("keep me\n", to: victim)
        #expect(symlink(victim, path + ".tmp") == 0)
        let daemon = try DaemonUnderTest(["--metrics-textfile", path])
        #expect(waitUntil(seconds: 8) { FileManager.default.fileExists(atPath: path) })
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "keep me\n", "the link's target was overwritten")
        let parsed = run("/usr/bin/env", ["python3", Paths.fixtures + "/parse_metrics.py"],
                         stdin: (try? String(contentsOfFile: path, encoding: .utf8)) ?? "")
        #expect(parsed.status == 0 && parsed.stdout.contains("prefetchd_cache_limit_bytes"), "\(parsed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: path + ".tmp"))
        #expect(daemon.ctl("ping").status == 0)
    }

    @Test("formats lists the loaders and the policy; allowed_formats changes it")
    func formats() throws {
        let daemon = try DaemonUnderTest(["--allowed-formats", "png,svg"])
        let result = daemon.ctl("formats", "--json")
        let object = try #require(JSONSerialization.jsonObject(with: result.stdoutData) as? [String: Any])
        let formats = try #require(object["formats"] as? [[String: Any]])
        let allowed = Set(formats.filter { $0["allowed"] as? Bool == true }.compactMap { $0["name"] as? String })
        #expect(allowed == ["png", "svg"], "\(allowed)")
        #expect(formats.contains { $0["name"] as? String == "jpeg" && $0["allowed"] as? Bool == false })
        #expect(daemon.ctl("formats").stdout.contains("allowed png"))
    }
}
