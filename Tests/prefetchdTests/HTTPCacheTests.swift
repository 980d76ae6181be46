import Foundation
import Testing

/// Freshness, revalidation, serving stale on purpose, retries and resumable downloads against a real origin.
@Suite(.serialized)
struct HTTPCacheTests {
    /// The JSON object of a `get --json` line.
    func entry(_ result: CommandResult) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout) \(result.stderr)")
    }

    @Test("a stale entry is revalidated with If-None-Match; the 304 keeps the same file")
    func revalidation() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/r.jpg?cc=max-age%3D0")
        let first = try entry(daemon.ctl("get", "--json", url))
        let second = try entry(daemon.ctl("get", "--json", url))
        #expect(first["path"] as? String == second["path"] as? String)
        #expect(first["sha256"] as? String == second["sha256"] as? String)
        let log = try origin.stats().log.filter { $0.path == "/r.jpg" }
        #expect(log.map(\.status) == [200, 304])
        #expect(try origin.stats().log.last?.ifNoneMatch != nil, "the second request is conditional")
    }

    @Test("a 304 that names another version than the one kept (RFC 9111 section 4.3.4): another strong ETag, another weak one (it refreshed the entry), or without an ETag another Last-Modified (it refreshed the entry): the file is fetched again in full",
          arguments: ["etag_304=%22other%22", "etag_304=W%2F%22other%22", "no_etag=1&modified_304=Tue,%2002%20Jan%202024%2000:00:00%20GMT"])
    func notModifiedNamingAnotherVersion(query: String) throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/other-304.jpg?cc=max-age%3D0&" + query)
        let first = try entry(daemon.ctl("get", "--json", url))
        let second = try entry(daemon.ctl("get", "--json", url))
        let log = try origin.stats().log.filter { $0.path == "/other-304.jpg" }
        #expect(log.map(\.status) == [200, 304, 200], "\(query)")
        let conditional = { (entry: Origin.Stats.Entry) in entry.ifNoneMatch != nil || entry.headers?["If-Modified-Since"] != nil }
        #expect(log.map(conditional) == [false, true, false], "\(query): then asked unconditionally")
        #expect(second["sha256"] as? String == first["sha256"] as? String && first["sha256"] != nil)
    }

    @Test("a 304 whose weak ETag matches the one kept by weak comparison (W/\"a\" and \"a\"), or that names no validator, confirms the entry: no second download")
    func notModifiedConfirming() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/same-304.jpg?cc=max-age%3D0")).status == 0)
        let headers = run("/usr/bin/curl", ["-sI", origin.url("/same-304.jpg")]).stdout
        let etag = try #require(headers.split(separator: "\r\n").first { $0.lowercased().hasPrefix("etag:") }?
            .dropFirst(5).trimmingCharacters(in: .whitespaces), "\(headers)")
        for query in ["etag_304=" + ("W/" + etag).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!, "bare_304=expires"] {
            let url = origin.url("/same-304.jpg?cc=max-age%3D0&" + query)
            #expect(daemon.ctl("get", url).status == 0 && daemon.ctl("get", url).status == 0)
        }
        let log = try origin.stats().log.filter { $0.path == "/same-304.jpg" }
        #expect(log.map(\.status) == [200, 200, 200, 304, 200, 304], "curl's HEAD, then one download each and a 304 that confirms it")
    }

    @Test("a fresh entry (max-age) is answered without a request; Expires works too")
    func freshHits() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for path in ["/m.jpg?cc=max-age%3D600", "/e.jpg?cc=&expires=600"] {
            daemon.ctl("get", origin.url(path))
            #expect(try entry(daemon.ctl("get", "--json", origin.url(path)))["from_cache"] as? Bool == true, "\(path)")
        }
        #expect(try origin.count("/m.jpg") == 1)
    }

    @Test("a no-store response is delivered but never reused")
    func noStore() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/n.jpg?cc=no-store")
        #expect(daemon.ctl("get", url).status == 0)
        #expect(daemon.ctl("get", url).status == 0)
        #expect(try origin.count("/n.jpg") == 2)
    }

    @Test("--max-stale answers at once from a stale entry and revalidates in the background; --offline never fetches")
    func servingStale() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/s.jpg?cc=max-age%3D1")
        daemon.ctl("get", url)
        usleep(1_500_000)
        let offline = try entry(daemon.ctl("get", "--json", "--offline", url))
        #expect(offline["stale"] as? Bool == true)
        #expect(try origin.count("/s.jpg") == 1)
        let missing = daemon.ctl("get", "--json", "--offline", origin.url("/never.jpg"))
        #expect(errorCode(missing.stdout) == "not_cached")
        #expect(try origin.count("/never.jpg") == 0)

        let served = try entry(daemon.ctl("get", "--json", "--max-stale", "60", url))
        #expect(served["stale"] as? Bool == true)
        try waitUntil(seconds: 5) { try origin.count("/s.jpg") >= 2 }
        #expect(try origin.count("/s.jpg") == 2, "a background revalidation followed")
    }

    @Test("a new body of a URL gets a new path and the old file goes (it was written over in place, and a look-up meanwhile deleted the new body)")
    func newBodyNewPath() throws {
        let root = try TemporaryDirectory()
        let file = root.path + "/changing.png"
        #expect(writePicture(file, size: "40x30", "xc:teal"))
        let origin = try Origin(root: root.path)
        let daemon = try DaemonUnderTest()
        let url = origin.url("/changing.png?cc=no-cache")
        let first = try #require(try entry(daemon.ctl("get", "--json", url))["path"] as? String)
        #expect(writePicture(file, size: "50x20", "xc:gold"))
        let second = try entry(daemon.ctl("get", "--json", url))
        let path = try #require(second["path"] as? String)
        #expect(path != first && !FileManager.default.fileExists(atPath: first), "\(first) -> \(path)")
        #expect(second["width"] as? Int == 50 && FileManager.default.contents(atPath: path) == FileManager.default.contents(atPath: file))
    }

    @Test("a 304 without Cache-Control keeps the stored max-age and must-revalidate, also with an Expires of its own (it made the entry fresh for a day, or for the Expires)")
    func bareNotModified() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "1"])
        let strict = "cc=max-age%3D2%2C%20must-revalidate"
        let urls = [origin.url("/bare.jpg?\(strict)&bare_304=1"),
                    origin.url("/bare-expires.jpg?\(strict)&expires=100&bare_304=expires")]
        #expect(daemon.ctl(arguments: ["get"] + urls).status == 0)
        usleep(2_200_000)
        #expect(daemon.ctl(arguments: ["get"] + urls).status == 0)
        for (url, path) in zip(urls, ["/bare.jpg", "/bare-expires.jpg"]) {
            #expect(try origin.stats().log.filter { $0.path == path }.map(\.status) == [200, 304])
            let cached = try #require(try entry(daemon.ctl("info", "--json", url))["cached"] as? [String: Any])
            let lifetime = (cached["fresh_until"] as? Int ?? 0) - (cached["fetched_at"] as? Int ?? 0)
            #expect((1...3).contains(lifetime), "\(path): \(cached)")
        }
        origin.child.stop()
        usleep(2_200_000)
        for url in urls {
            #expect(errorCode(daemon.ctl("get", "--json", url).stdout) == "network", "must-revalidate: not served stale")
        }
    }

    @Test("when revalidation fails with a network error the stale entry is served flagged, unless must-revalidate or no-cache (no-cache was served stale, also for --max-stale)")
    func staleIfError() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "1"])
        let plain = origin.url("/p.jpg?cc=max-age%3D1")
        let strict = origin.url("/q.jpg?cc=max-age%3D1%2C%20must-revalidate")
        let noCache = origin.url("/n.jpg?cc=no-cache")
        #expect(daemon.ctl("get", plain, strict, noCache).status == 0)
        origin.child.stop()
        usleep(1_200_000)
        #expect(try entry(daemon.ctl("get", "--json", plain))["stale"] as? Bool == true)
        #expect(errorCode(daemon.ctl("get", "--json", strict).stdout) == "network")
        #expect(errorCode(daemon.ctl("get", "--json", noCache).stdout) == "network")
        #expect(errorCode(daemon.ctl("get", "--json", "--max-stale", "3600", noCache).stdout) == "network")
    }

    @Test("429 with Retry-After: 2 is retried no sooner than 2 s later; 500, 500, 200 succeeds on the third try")
    func retries() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/busy.jpg?fail_first=1&fail_status=429&retry_after=2")).status == 0)
        let attempts = try origin.stats().log.filter { $0.path == "/busy.jpg" }
        #expect(attempts.map(\.status) == [429, 200])
        #expect(attempts[1].start - attempts[0].start >= 2.0)

        #expect(daemon.ctl("get", origin.url("/flaky.jpg?fail_first=2")).status == 0)
        #expect(try origin.stats().log.filter { $0.path == "/flaky.jpg" }.map(\.status) == [500, 500, 200])
    }

    @Test("a 20 MiB download killed with kill -9 halfway resumes with a Range request; the SHA-256 matches")
    func resumeAfterCrash() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let size = 20 * 1024 * 1024
        let url = origin.url("/big.jpg?size=\(size)&drip=6000000&cc=max-age%3D3600")
        #expect(daemon.ctl("queue", url).status == 0)
        #expect(waitUntil(seconds: 10) { transferBytes(daemon.ctl("list", "--json").stdout) >= Int64(size / 3) })
        daemon.kill9()
        try daemon.start()
        let result = try entry(daemon.ctl("get", "--json", "--timeout", "60", url))
        let expected = try sha256Hex(origin.body("/big.jpg?size=\(size)"))
        #expect(result["sha256"] as? String == expected)
        let requests = try origin.stats().log.filter { $0.path == "/big.jpg" }
        #expect(requests.count >= 2)
        #expect(requests.dropFirst().first?.range?.hasPrefix("bytes=") == true, "the restart resumed with Range")
        #expect(requests.dropFirst().first?.status == 206)
    }

    @Test("a resume refused with 416 (its kept body already whole, as a crash right after the end leaves it) starts over at once: the file is whole and nothing failed")
    func refusedResumeStartsOver() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let path = "/whole.jpg?size=200000"
        let url = origin.url(path)
        let body = try origin.body(path)
        // The state a SIGKILL leaves between a transfer's end and the commit of its end: the whole body in tmp/, a
        // record to resume it with the origin's ETag, and the URL queued.
        let script = """
            import hashlib, sqlite3, sys, urllib.request
            url, cache = sys.argv[1], sys.argv[2]
            etag = urllib.request.urlopen(url).headers["ETag"]
            name = hashlib.sha256(url.encode()).hexdigest()
            with open(cache + "/tmp/" + name, "wb") as f: f.write(urllib.request.urlopen(url).read())
            db = sqlite3.connect(cache + "/index.sqlite")
            db.execute("INSERT INTO partials(key, validator) VALUES (?, ?)", (url, etag))
            db.execute("INSERT INTO queue(seq, key, queued_at) VALUES (1, ?, 0)", (url,))
            db.commit()
            """
        daemon.kill9()
        let crafted = run("/usr/bin/env", ["python3", "-c", script, url, daemon.cache])
        try #require(crafted.status == 0, "\(crafted.stderr)")
        try daemon.start()
        let result = try entry(daemon.ctl("get", "--json", "--timeout", "30", url))
        #expect(result["sha256"] as? String == (try sha256Hex(body)))
        let requests = try origin.stats().log.filter { $0.path == "/whole.jpg" }.dropFirst(3)  // origin.body and the script
        #expect(requests.map(\.status) == [416, 200], "\(requests.map { ($0.status, $0.range) })")
        #expect(requests.first?.range == "bytes=200000-")
        let status = try JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any]
        #expect(status?["failed"] as? Int == 0, "a refused resume is not a failure")
    }

    @Test("a download's resume is recorded in the index once 64 KiB of it are on disk, not before; killed before, it starts over and is whole")
    func resumeRecordedOnceWorthIt() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let size = 200_000
        func url(_ name: String) -> String { origin.url("/\(name).jpg?size=\(size)&drip=40000&cc=max-age%3D3600") }
        func recorded() -> Int {
            let script = "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM partials').fetchone()[0])"
            let result = run("/usr/bin/env", ["python3", "-c", script, daemon.cache + "/index.sqlite"])
            return Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        }
        /// Waits until the running transfer holds between 1 byte and 64 KiB, reading the index first: a transfer still
        /// below 64 KiB after the read was below it during the read. Returns the records the read found.
        func recordsWhileShort() -> Int? {
            for _ in 0..<100 {
                let rows = recorded()
                let bytes = transferBytes(daemon.ctl("list", "--json").stdout)
                if bytes > 0 && bytes < 64 * 1024 { return rows }
                if bytes >= 64 * 1024 { return nil }
                usleep(20_000)
            }
            return nil
        }

        // Killed below 64 KiB: nothing recorded, so the start after the crash fetches it whole.
        #expect(daemon.ctl("queue", url("short")).status == 0)
        #expect(recordsWhileShort() == 0)
        daemon.kill9()
        try daemon.start()
        let result = try entry(daemon.ctl("get", "--json", "--timeout", "30", url("short")))
        let requests = try origin.stats().log.filter { $0.path == "/short.jpg" }
        #expect(requests.count == 2 && requests.last?.range == nil && requests.last?.status == 200, "\(requests)")
        #expect(result["sha256"] as? String == (try sha256Hex(origin.body("/short.jpg?size=\(size)"))))

        // Past 64 KiB it is recorded; done, the record goes.
        #expect(daemon.ctl("queue", url("long")).status == 0)
        #expect(recordsWhileShort() == 0)
        #expect(waitUntil(seconds: 10) { transferBytes(daemon.ctl("list", "--json").stdout) >= 96 * 1024 && recorded() == 1 })
        #expect(daemon.ctl("queue", "--wait", "--timeout", "30", url("long")).status == 0)
        #expect(recorded() == 0)
    }

    @Test("filling a 50 MiB cache with 5,000 files never exceeds limit + one object; the index agrees with the files")
    func evictionDuringFill() throws {
        let origin = try Origin()
        let limit = 50 * 1024 * 1024
        let daemon = try DaemonUnderTest(["--max-cache-bytes", "\(limit)", "--slow-width", "4"])
        let objectSize = 20_000
        let urls = (1...5000).map { origin.url("/fill/\($0).jpg?size=\(objectSize)") }
        #expect(daemon.ctl(arguments: ["queue", "-"], stdin: urls.joined(separator: "\n")).status == 0)
        var peak = 0
        for _ in 0..<1200 {
            peak = max(peak, directoryBytes(daemon.cache + "/files"))
            if try origin.stats().counts.filter({ $0.key.hasPrefix("/fill/") }).count == 5000,
               daemon.ctl("status", "--json").stdout.contains("\"running\":0,\"waiting\":0") { break }
            usleep(100_000)
        }
        peak = max(peak, directoryBytes(daemon.cache + "/files"))
        #expect(peak <= limit + objectSize, "peak \(peak) bytes on disk")
        #expect(peak > limit / 2)
        daemon.child?.stop()
        let check = run("/usr/bin/env", ["python3", Paths.fixtures + "/check_index.py", daemon.cache])
        #expect(check.status == 0, "\(check.stdout)")
    }
}

/// Bytes received by the first running transfer in `list --json` output.
func transferBytes(_ json: String) -> Int64 {
    guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
          let tasks = object["tasks"] as? [[String: Any]] else { return 0 }
    return tasks.compactMap { ($0["bytes"] as? NSNumber)?.int64Value }.max() ?? 0
}

/// The total size of the regular files under `path`.
func directoryBytes(_ path: String) -> Int {
    guard let enumerator = FileManager.default.enumerator(atPath: path) else { return 0 }
    var total = 0
    while let name = enumerator.nextObject() as? String {
        if let attributes = try? FileManager.default.attributesOfItem(atPath: path + "/" + name),
           attributes[.type] as? FileAttributeType == .typeRegular {
            total += (attributes[.size] as? Int) ?? 0
        }
    }
    return total
}

func sha256Hex(_ data: Data) throws -> String {
    let result = run("/usr/bin/env", ["python3", "-c", "import hashlib,sys;print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"],
                     stdinData: data)
    return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Lane changes never throw away bytes already received.
@Suite(.serialized)
struct ResumeTests {
    @Test("a demote that parks a running transfer (slow lane full) resumes it later from its offset")
    func demoteParksAndResumes() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let size = 8 * 1024 * 1024
        let slow = origin.url("/slow-lane.jpg?size=\(size)&drip=2000000")
        let urgent = origin.url("/urgent.jpg?size=\(size)&drip=2000000")
        #expect(daemon.ctl("queue", slow).status == 0)
        #expect(waitUntil(seconds: 5) { transferBytes(daemon.ctl("list", "--json").stdout) > 0 })
        let waiter = try ChildProcess(Paths.prefetchctl, ["--socket", daemon.socket, "get", "--json", urgent],
                                      stderrPath: daemon.directory.path + "/get.err")
        #expect(waitUntil(seconds: 10) { bytes(of: "/urgent.jpg", in: daemon.ctl("list", "--json").stdout) >= Int64(size / 4) })
        #expect(daemon.ctl("demote", urgent).stdout.contains("demoted"))
        waiter.process.waitUntilExit()
        #expect(waiter.process.terminationStatus == 0, "the waiter stays attached and gets its answer")
        let answer = String(decoding: waiter.stdout.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let requests = try origin.stats().log.filter { $0.path == "/urgent.jpg" }
        #expect(requests.count == 2, "parked once, resumed once")
        #expect(requests.last?.range?.hasPrefix("bytes=") == true)
        #expect(requests.last?.status == 206)
        let expected = try sha256Hex(origin.body("/urgent.jpg?size=\(size)"))
        #expect(answer.contains(expected))
    }

    /// Bytes received by the running transfer whose URL contains `path`.
    func bytes(of path: String, in json: String) -> Int64 {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any],
              let tasks = object["tasks"] as? [[String: Any]] else { return 0 }
        return tasks.first { ($0["url"] as? String)?.contains(path) == true }.flatMap { ($0["bytes"] as? NSNumber)?.int64Value } ?? 0
    }
}
