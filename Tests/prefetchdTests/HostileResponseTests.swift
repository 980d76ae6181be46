import Foundation
import Testing

/// What a server says is not trusted, and every number from outside is clamped or checked (issue 14): responses and
/// requests that crashed the daemon, cached a corrupt file or were misread, each against a real origin and daemon.
@Suite(.serialized)
struct HostileResponseTests {
    /// The JSON object of a `get --json` line.
    func entry(_ result: CommandResult) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout) \(result.stderr)")
    }

    func error(_ result: CommandResult) throws -> (code: String?, message: String) {
        let error = try entry(result)["error"] as? [String: Any]
        return (error?["code"] as? String, error?["message"] as? String ?? "")
    }

    /// Seconds from `fetched_at` to `fresh_until`.
    func lifetime(_ entry: [String: Any]) -> Int64? {
        guard let fetched = (entry["fetched_at"] as? NSNumber)?.int64Value,
              let fresh = (entry["fresh_until"] as? NSNumber)?.int64Value else { return nil }
        return fresh - fetched
    }

    @Test("Cache-Control: max-age=9223372036854775807 (and 2000000000000000000) killed the daemon at queue and get; max-age=99999999999999999999 was taken as absent. Now all are fresh for 2^31 s")
    func hugeMaxAge() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for (n, value) in ["9223372036854775807", "2000000000000000000", "99999999999999999999"].enumerated() {
            let url = origin.url("/max-age-\(n).jpg?cc=max-age%3D\(value)")
            #expect(daemon.ctl("queue", url).status == 0)
            let cached = try entry(daemon.ctl("get", "--json", url))
            #expect(lifetime(cached).map { (2_147_483_647...2_147_483_649).contains($0) } == true, "\(value): \(cached)")
            #expect(daemon.ctl("ping").status == 0, "the daemon is alive after max-age=\(value): \(daemon.log.suffix(300))")
        }
    }

    @Test("a body in 1-byte chunks is written in a few system calls, whole: one write per chunk (300,000 here) stopped the loop for seconds with a few such servers")
    func oneByteChunks() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let pid = try #require(daemon.child?.pid)
        /// Write system calls the daemon made so far, all threads (task I/O accounting).
        func writes() throws -> Int {
            let io = try String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8)
            return try #require(io.split(separator: "\n").first { $0.hasPrefix("syscw:") }.flatMap { Int($0.dropFirst(6).trimmingCharacters(in: .whitespaces)) })
        }
        let path = "/chunks.jpg?size=300000&chunked=1"
        let before = try writes()
        let got = daemon.ctl("get", origin.url(path))
        #expect(got.status == 0, "\(got.stderr)")
        let made = try writes() - before
        #expect(made < 3_000, "\(made) write system calls for a body of 300,000 1-byte chunks")
        let file = got.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(FileManager.default.contents(atPath: file) == (try origin.body("/chunks.jpg?size=300000")))
        #expect(try origin.count("/chunks.jpg") == 2, "fetched once by the daemon (and once by the test)")
    }

    @Test("Age: 9223372036854775807 killed the daemon; now the image is served, stale at once")
    func hugeAge() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let cached = try entry(daemon.ctl("get", "--json", origin.url("/age.jpg?header=Age:%209223372036854775807")))
        #expect(cached["path"] != nil)
        #expect(lifetime(cached).map { $0 <= 0 } == true, "\(cached)")
        #expect(daemon.ctl("ping").status == 0, "\(daemon.log.suffix(300))")
    }

    @Test("a 503 with Retry-After: 9223372036854775807 killed the daemon; now the get fails with http_status 503")
    func hugeRetryAfter() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "1"])
        let failed = try error(daemon.ctl("get", "--json", origin.url("/busy.jpg?status=503&retry_after=9223372036854775807")))
        #expect(failed.code == "http_status")
        #expect(daemon.ctl("ping").status == 0, "\(daemon.log.suffix(300))")
    }

    @Test("get --max-stale 9223372036854775807 (or 2^62) on a stale entry killed the daemon; now the stale copy is served, and a negative max_stale is a bad_request")
    func hugeMaxStale() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/stale.jpg?cc=max-age%3D0")
        #expect(daemon.ctl("get", url).status == 0)
        for seconds in ["9223372036854775807", "4611686018427387904"] {
            let served = try entry(daemon.ctl("get", "--json", "--max-stale", seconds, url))
            #expect(served["stale"] as? Bool == true, "\(seconds): \(served)")
        }
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        connection.send("{\"id\":1,\"op\":\"get\",\"url\":\"\(url)\",\"max_stale\":-9223372036854775808}\n")
        let refused = connection.receive()?["error"] as? [String: Any]
        #expect(refused?["code"] as? String == "bad_request")
        #expect((refused?["message"] as? String)?.contains("max_stale") == true)
        #expect(daemon.ctl("ping").status == 0, "\(daemon.log.suffix(300))")
    }

    @Test("a view of rows 0 to 9223372036854775807, or of rows near Int64.max, killed the daemon; now a bad_request")
    func hugeViewRows() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        let url = origin.url("/row.jpg")
        let cases = [
            ("\"first\":0,\"last\":9223372036854775807", "at most 1000 visible rows"),
            ("\"first\":9223372036854775806,\"last\":9223372036854775807", "below 100000"),
            ("\"first\":9223372036854775807,\"last\":9223372036854775807,\"ahead\":1000", "below 100000"),
        ]
        for (n, (fields, message)) in cases.enumerated() {
            connection.send("{\"id\":\(n),\"op\":\"view\",\"urls\":[\"\(url)\"],\(fields)}\n")
            let refused = connection.receive()?["error"] as? [String: Any]
            #expect(refused?["code"] as? String == "bad_request", "\(fields)")
            #expect((refused?["message"] as? String)?.contains(message) == true, "\(String(describing: refused))")
        }
        connection.send("{\"id\":9,\"op\":\"view\",\"urls\":[\"\(url)\"],\"first\":99999,\"last\":100500,\"ahead\":1000}\n")
        #expect(connection.receive()?["ok"] as? Bool == true, "rows past the end of the list are still fine")
        #expect(daemon.ctl("ping").status == 0, "\(daemon.log.suffix(300))")
    }

    @Test("a resume answered 206 with the whole file (Content-Range: bytes 0-19418/19419) was appended and cached as a corrupt 24,419-byte JPEG; now the file is the origin's, also when the kept bytes and the lie together pass max_bytes (that was a permanent too_large)",
          arguments: [[], ["--max-bytes", "20000"]])
    func resumeAnsweredWithTheWholeFile(flags: [String]) throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(flags)
        let cached = try entry(daemon.ctl("get", "--json", origin.url("/whole.jpg?size=19419&cut_first=5000&lie_range=0")))
        let requests = try origin.stats().log.filter { $0.path == "/whole.jpg" }
        #expect(requests.count == 2)
        #expect(requests.last?.range == "bytes=5000-" && requests.last?.status == 206, "the retry resumed and got the lie")
        #expect(cached["bytes"] as? Int == 19419)
        #expect(cached["sha256"] as? String == (try sha256Hex(origin.body("/whole.jpg?size=19419"))))
    }

    /// Gets `path?query` from an origin whose first answer is cut after 5,000 bytes, and whose answer to the resume
    /// is refused: the third request fetches the file whole, and what is cached is `path?whole`'s body. The refused
    /// resume costs no attempt (it did, so two attempts were not enough). Returns the origin's requests for the path.
    func refusedResume(_ path: String, _ query: String, whole: String) throws -> [Origin.Stats.Entry] {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "2"])
        let result = daemon.ctl("get", "--json", origin.url("\(path)?size=19419&cut_first=5000&\(query)"))
        let requests = try origin.stats().log.filter { $0.path == path }
        #expect(requests.map(\.range) == [nil, "bytes=5000-", nil], "\(result.stdout)")
        #expect(try entry(result)["sha256"] as? String == (try sha256Hex(origin.body("\(path)?size=19419\(whole)"))),
                "the file as the server has it now, whole")
        return requests
    }

    @Test("a resume answered 206 with the rest of another version of the file (a server that ignores If-Range) was joined to the bytes kept and cached as a file that never was; now the partial is dropped and the new version fetched whole")
    func resumeOfAnotherVersion() throws {
        let requests = try refusedResume("/changed.jpg", "changed=1&ignore_if_range=1", whole: "&changed=1")
        #expect(requests.dropFirst().first?.status == 206)
    }

    @Test("a server that changed a file but kept its Last-Modified, and ignores If-Range, sent the rest of the new version (25,000 bytes in all), which was joined to the 5,000 bytes kept of the old (19,419); now a rest of a file of another length is refused and the new version fetched whole")
    func resumeOfAnotherLength() throws {
        let requests = try refusedResume("/longer.jpg", "changed=1&changed_size=25000&no_etag=1&ignore_if_range=1",
                                         whole: "&changed=1&changed_size=25000")
        #expect(requests.dropFirst().first?.status == 206)
        #expect(requests.dropFirst().first?.headers?["If-Range"] == "Wed, 01 Jan 2020 00:00:00 GMT", "the validator matched")
    }

    @Test("a server that said Accept-Ranges: none was still sent a Range when its download was cut; now the download starts over without one")
    func noRangesNoResume() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let result = daemon.ctl("get", "--json", origin.url("/whole.jpg?size=19419&cut_first=5000&ranges=0"))
        #expect(try origin.stats().log.filter { $0.path == "/whole.jpg" }.map(\.range) == [nil, nil], "\(result.stdout)")
        #expect(try entry(result)["sha256"] as? String == (try sha256Hex(origin.body("/whole.jpg?size=19419"))))
    }

    @Test("a Last-Modified no later than the response's Date is a weak validator: it was sent as If-Range, and a file replaced within that second had its rest joined to the bytes kept; now such a download starts over")
    func weakLastModifiedNotForResume() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "2"])
        let query = "size=19419&cut_first=5000&no_etag=1&modified_now=1"
        let weak = daemon.ctl("get", "--json", origin.url("/weak.jpg?\(query)"))
        #expect(try origin.stats().log.filter { $0.path == "/weak.jpg" }.map(\.range) == [nil, nil], "\(weak.stdout)")
        #expect(try entry(weak)["sha256"] as? String == (try sha256Hex(origin.body("/weak.jpg?size=19419"))))
        // With a Last-Modified older than its Date, the same cut resumes.
        let strong = daemon.ctl("get", "--json", origin.url("/strong.jpg?size=19419&cut_first=5000&no_etag=1"))
        #expect(try origin.stats().log.filter { $0.path == "/strong.jpg" }.map(\.range) == [nil, "bytes=5000-"], "\(strong.stdout)")
        #expect(try entry(strong)["sha256"] as? String == (try sha256Hex(origin.body("/strong.jpg?size=19419"))))
    }

    @Test("a resume answered 206 without a validator, with the rest of another version, was joined to the bytes kept (the review's second pass: a 206 with no ETag or Last-Modified); now nothing is joined that no validator vouches for")
    func resumeWithoutValidator() throws {
        _ = try refusedResume("/bare.jpg", "changed=1&ignore_if_range=1&bare_206=1", whole: "&changed=1")
    }

    @Test("a resume answered 200 with the whole file gzipped was stored undecoded (curl decodes only what it asked for): a resume asks for the identity coding, and an encoded answer starts the download over with decoding")
    func encodedAnswerToAResume() throws {
        let requests = try refusedResume("/encoded.jpg", "gzip_later=1", whole: "")
        #expect(requests.dropFirst().first?.headers?["Accept-Encoding"] == "identity")
    }

    @Test("a refused resume whose task a reload parked while its end waited was started again anyway, and the scheduler's next start of it met a second transfer: the daemon died (SIGILL; this test caught it in 5 of 6 runs); now a fetch stopped while it ended is not started again from its end")
    func refusedResumeParkedWhileEnding() throws {
        // After a death (PREFETCHD_TEST_DIE_ON) the crash guard handles one URL at a time, so the refused resume's
        // end waits while variants of a 49-megapixel PNG are made: the reload lands in that time.
        let root = try TemporaryDirectory()
        let made = run("/usr/bin/env", ["python3", "-c", """
            import struct, sys, zlib
            def chunk(kind, data): return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
            row = b"\\0" + bytes((x * 7) & 0xFF for x in range(21000))
            open(sys.argv[1], "wb").write(b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 7000, 7000, 8, 2, 0, 0, 0))
                                          + chunk(b"IDAT", zlib.compress(row * 7000, 1)) + chunk(b"IEND", b""))
            """, root.path + "/big.png"])
        #expect(made.status == 0, "\(made.stderr)")
        let origin = try Origin(root: root.path)
        let configuration = root.path + "/prefetchd.conf"
        try "fast_width = 8\n".write(toFile: configuration, atomically: true, encoding: .utf8)
        let daemon = try DaemonUnderTest(["--config", configuration], environment: ["PREFETCHD_TEST_DIE_ON": "poison"])
        _ = daemon.ctl("get", origin.url("/poison.jpg"))
        #expect(waitUntil(seconds: 5) { !daemon.child!.process.isRunning })
        try daemon.start()  // the poisoned URL is not asked for again: the guard stays one at a time
        #expect(daemon.log.contains("one at a time"), "\(daemon.log)")
        let big = origin.url("/big.png")
        #expect(daemon.ctl("get", big).status == 0)

        func requests(_ path: String) throws -> [Origin.Stats.Entry] { try origin.stats().log.filter { $0.path == path } }
        let slow = origin.url("/slow.jpg?size=400000&drip=100000")
        let refused = origin.url("/refused.jpg?size=400000&cut_first=5000&changed=1&ignore_if_range=1&drip=200000")
        let client = try RawConnection(socket: daemon.socket)
        _ = client.receive()
        client.send(#"{"id":1,"op":"get","url":"\#(slow)"}"# + "\n")
        #expect(try waitUntil(seconds: 5) { try !requests("/slow.jpg").isEmpty })
        client.send(#"{"id":2,"op":"get","url":"\#(refused)"}"# + "\n")
        #expect(try waitUntil(seconds: 5) { try requests("/refused.jpg").first?.end != nil }, "the first answer is cut")
        for (id, side) in [(3, 1000), (4, 900), (5, 800), (6, 700)] {
            client.send(#"{"id":\#(id),"op":"get","url":"\#(big)","size":"\#(side)x\#(side)"}"# + "\n")
        }
        // The resume is refused at its first body byte, which comes with its headers: by the time the origin's log
        // shows the request, its end waits for the guard (or the reload parks it running, and nothing races).
        #expect(try waitUntil(seconds: 5) { try requests("/refused.jpg").count >= 2 }, "the resume is asked for")
        try "fast_width = 1\n".write(toFile: configuration, atomically: true, encoding: .utf8)
        kill(daemon.child!.pid, SIGHUP)  // parks the most recent start: the refused one, whose end waits
        var replies: [Int: [String: Any]] = [:]
        while !(3...6).allSatisfy({ replies[$0] != nil }), let reply = client.receive() { replies[reply["id"] as? Int ?? 0] = reply }
        #expect(daemon.ctl("cancel", slow).status == 0)  // the fast lane has room: the parked task starts
        while replies[2] == nil, let reply = client.receive() { replies[reply["id"] as? Int ?? 0] = reply }
        #expect(replies[2]?["ok"] as? Bool == true, "\(replies[2] ?? [:]) \(daemon.log.suffix(600))")
        #expect(daemon.child!.process.isRunning)
        let cached = try entry(daemon.ctl("get", "--json", refused))
        #expect(cached["sha256"] as? String == (try sha256Hex(origin.body("/refused.jpg?size=400000&changed=1"))))
    }

    @Test("a resumed transfer shows the whole body's size as its total (it showed the range's, 40000 under 20000+ bytes)")
    func resumedTotal() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/resumed.jpg?size=60000&cut_first=20000&drip=20000")  // 1 s, cut; then 2 s from 20000
        let client = try RawConnection(socket: daemon.socket)
        _ = client.receive()
        client.send(#"{"id":1,"op":"get","url":"\#(url)"}"# + "\n")
        var resumed: [String: Any]?
        #expect(try waitUntil(seconds: 15) {
            let list = try JSONSerialization.jsonObject(with: daemon.ctl("list", "--json").stdoutData) as? [String: Any]
            resumed = (list?["tasks"] as? [[String: Any]])?.first { ($0["bytes"] as? Int ?? 0) > 20000 }
            return resumed != nil
        })
        #expect(resumed?["total"] as? Int == 60000, "\(resumed ?? [:])")
        #expect(client.receive()?["ok"] as? Bool == true)
        #expect(try origin.stats().log.filter { $0.path == "/resumed.jpg" }.map(\.range) == [nil, "bytes=20000-"])
    }

    @Test("a resume answered 206 from another offset (bytes 5100-…) was appended and cached as a corrupt 19,319-byte JPEG; now the partial is dropped, the next attempt starts at 0 and the file is the origin's")
    func resumeAnsweredFromAnotherOffset() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let cached = try entry(daemon.ctl("get", "--json", origin.url("/offset.jpg?size=19419&cut_first=5000&lie_range=5100")))
        let requests = try origin.stats().log.filter { $0.path == "/offset.jpg" }
        #expect(requests.map(\.range) == [nil, "bytes=5000-", nil], "cut, lied to, then fetched whole")
        #expect(cached["bytes"] as? Int == 19419)
        #expect(cached["sha256"] as? String == (try sha256Hex(origin.body("/offset.jpg?size=19419"))))
    }

    @Test("a 206 to a request that asked for no range was taken as the whole body; now it fails with network, unless it is the whole file")
    func unaskedPartialContent() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "1", "--allow-non-images", "yes"])
        let failed = try error(daemon.ctl("get", "--json", origin.url("/part.bin?size=19419&range_unasked=5100")))
        #expect(failed.code == "network")
        #expect(failed.message.contains("5100-19418/19419"), "\(failed.message)")
        #expect(try entry(daemon.ctl("info", "--json", origin.url("/part.bin?size=19419&range_unasked=5100")))["cached"] == nil)
        let whole = try entry(daemon.ctl("get", "--json", origin.url("/all.bin?size=19419&range_unasked=0")))
        #expect(whole["sha256"] as? String == (try sha256Hex(origin.body("/all.bin?size=19419"))))
    }

    @Test("a Vary: * response was reused from the cache; now the second get asks the origin again")
    func varyStar() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/vary.jpg?header=Vary:%20*")
        #expect(daemon.ctl("get", url).status == 0)
        #expect(daemon.ctl("get", url).status == 0)
        #expect(try origin.count("/vary.jpg") == 2)
    }

    @Test("two different Content-Length headers were accepted; now the response is refused (network, not retried)")
    func twoContentLengths() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let failed = try error(daemon.ctl("get", "--json", origin.url("/two-lengths.jpg?header=Content-Length:%205")))
        #expect(failed.code == "network")
        #expect(failed.message.contains("Content-Length"), "\(failed.message)")
        #expect(try origin.count("/two-lengths.jpg") == 1, "permanent: not retried")
        #expect(daemon.ctl("get", origin.url("/same-length.jpg?header=Content-Length:%202048")).status == 0,
                "the same length twice is fine")
    }

    @Test("a 200 KB response header was reported as network: Out of memory and retried; now too_large names the headers")
    func hugeResponseHeaders() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for path in ["/one-line.jpg?big_header=200000", "/many-lines.jpg?many_headers=200"] {
            let failed = try error(daemon.ctl("get", "--json", origin.url(path)))
            #expect(failed.code == "too_large", "\(path): \(failed)")
            #expect(failed.message.contains("header"), "\(failed.message)")
            #expect(try origin.count(String(path.prefix { $0 != "?" })) == 1, "\(path): permanent, not retried")
        }
    }

    @Test("only the response whose body is kept counts against max_bytes: a 303 announcing 1 TB leads to the image (curl's own size limit judged the redirect: too_large, remembered for 5 minutes); a 200 announcing more than the limit is too_large before its body")
    func announcedLengthOfTheFinalResponseOnly() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-bytes", "1M"])
        let target = origin.url("/target.jpg").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let redirected = daemon.ctl("get", origin.url("/r.jpg?redirect_status=303&redirect_length=999999999999&redirect=\(target)"))
        #expect(redirected.status == 0, "\(redirected)")
        #expect(try origin.count("/target.jpg") == 1)
        let failed = try error(daemon.ctl("get", "--json", origin.url("/big.jpg?size=2000000")))
        #expect(failed.code == "too_large" && failed.message.contains("announced a body of 2000000 bytes"), "\(failed)")
        #expect(try origin.count("/big.jpg") == 1, "permanent, not retried")
    }

    @Test("an error page's or a redirect's body is read up to 64 KiB: a 404 and a 302 whose chunked bodies never end were read for as long as the server sent (2 GB/s), and the get never ended; now the 404 is http_status at once, the 302 too_large, and a 404 with a short body keeps its connection")
    func unkeptBodiesAreCut() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let page = daemon.ctl("get", "--json", "--timeout", "30", origin.url("/endless-404.jpg?status=404&endless_body=1"))
        #expect(page.status == 1, "\(page)")
        let notFound = try error(page)
        #expect(notFound.code == "http_status" && notFound.message.contains("404"), "\(notFound)")
        let target = origin.url("/target.jpg").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let redirect = daemon.ctl("get", "--json", "--timeout", "30",
                                  origin.url("/endless-302.jpg?redirect=\(target)&endless_body=1"))
        #expect(redirect.status == 1, "\(redirect)")
        let cut = try error(redirect)
        #expect(cut.code == "too_large" && cut.message.contains("302 redirect's body"), "\(cut)")
        #expect(try origin.count("/target.jpg") == 0)
        #expect(try origin.count("/endless-302.jpg") == 1, "permanent, not retried")
        // A short error page is read whole: the next request takes the same connection.
        _ = daemon.ctl("get", origin.url("/short-404.jpg?status=404"))
        #expect(daemon.ctl("get", origin.url("/after.jpg")).status == 0)
        let clients = try origin.stats().log.filter { ["/short-404.jpg", "/after.jpg"].contains($0.path) }.map(\.client)
        #expect(clients.count == 2 && clients[0] == clients[1], "\(clients)")
    }

    @Test("a chunk size line that never ends (1;x= and then bytes without a line end) was read at loop speed until low_speed_time, 30 GB in three attempts (curl skips an extension without counting it as body): now the response is too_large once it brought twice max_bytes on the wire (a MiB more)")
    func endlessChunkExtensionStops() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-bytes", "1M"])
        #expect(daemon.ctl("get", origin.url("/warm.jpg")).status == 0)  // its connection carries the next request
        for (path, query) in [("/ext-200.jpg", "endless_extension=1"), ("/ext-404.jpg", "endless_extension=1&status=404")] {
            let result = daemon.ctl("get", "--json", "--timeout", "20", origin.url(path + "?" + query))
            let failed = try error(result)
            #expect(failed.code == "too_large" && failed.message.contains("on the wire"), "\(path): \(result)")
            #expect(try origin.count(path) == 1, "\(path): permanent, not retried")
        }
        let stats = try origin.stats()
        #expect(stats.extensionBytes < 2 * 400 << 20, "\(stats.extensionBytes) bytes of extensions sent for the two")
        let clients = stats.log.filter { ["/warm.jpg", "/ext-200.jpg"].contains($0.path) }.map(\.client)
        #expect(clients.count == 2 && clients[0] == clients[1], "on a connection used before: \(clients)")
    }

    @Test("a 2xx whose body is not the resource (a 205 carries none, a 226 is a delta never asked for, a 201 describes what was made) was cached as the image; now http_status, once; a 203 or an unknown 2xx (299) is taken as a 200")
    func successesThatAreNotTheResource() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for status in [201, 205, 226] {
            let path = "/not-\(status).jpg"
            let failed = try error(daemon.ctl("get", "--json", origin.url(path + "?status_line=HTTP/1.1%20\(status)%20X")))
            #expect(failed.code == "http_status" && failed.message.contains("HTTP \(status)"), "\(status): \(failed)")
            #expect(try origin.count(path) == 1, "\(status): permanent, not retried")
        }
        for status in [203, 299] {
            let got = daemon.ctl("get", origin.url("/kept-\(status).jpg?status_line=HTTP/1.1%20\(status)%20X"))
            #expect(got.status == 0, "\(status): \(got)")
        }
    }

    @Test("interim responses count toward the header limit: 2,000 103 Early Hints (116 KB) are too_large, once (they were not counted; 20,000 met curl's own limit, a transient network failure); one is fine")
    func interimResponsesCounted() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/one-hint.jpg?early_hints=1")).status == 0)
        let failed = try error(daemon.ctl("get", "--json", origin.url("/hints.jpg?early_hints=2000")))
        #expect(failed.code == "too_large" && failed.message.contains("header"), "\(failed)")
        #expect(try origin.count("/hints.jpg") == 1, "permanent, not retried")
    }

    @Test("a second ETag carrying a CR was sent back in If-None-Match, where the CR cut the line in two (a header injected into the revalidation); now that value is not kept, and the server's own ETag revalidates")
    func carriageReturnInETag() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/etag-cr.jpg?cc=max-age%3D0&header=ETag:%20%22a%0DX-Injected:%201%22")
        #expect(daemon.ctl("get", url).status == 0)
        #expect(daemon.ctl("get", url).status == 0)
        let log = try origin.stats().log.filter { $0.path == "/etag-cr.jpg" }
        #expect(log.map(\.status) == [200, 304], "\(log.map(\.headers))")
        #expect(log.last?.ifNoneMatch?.hasPrefix("\"a") == false, "\(log.map(\.headers))")
    }

    @Test("a Content-Encoding: gzip image was refused as not_an_image (and remembered); now it is decoded and cached, and the size limit counts the decoded bytes")
    func gzipImage() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-bytes", "1M"])
        let cached = try entry(daemon.ctl("get", "--json", origin.url("/gz.jpg?gzip=1&size=50000")))
        #expect(cached["format"] as? String == "jpeg")
        #expect(cached["sha256"] as? String == (try sha256Hex(origin.body("/gz.jpg?size=50000"))))
        let bomb = try error(daemon.ctl("get", "--json", origin.url("/bomb.jpg?gzip=1&zeros=1&size=64000000")))
        #expect(bomb.code == "too_large", "\(bomb)")
    }

    @Test("a body in a coding nobody asked for (Content-Encoding: x-bogus) was a transient failure, asked for three times; now it fails once, permanently, and is remembered")
    func undecodableCoding() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/bogus.jpg?header=Content-Encoding:x-bogus")
        let failed = try error(daemon.ctl("get", "--json", url))
        #expect(failed.code == "network" && failed.message.contains("x-bogus"), "\(failed)")
        #expect(try origin.count("/bogus.jpg") == 1)
        let again = try error(daemon.ctl("get", "--json", url))
        #expect(again.code == "network", "\(again)")
        #expect(try origin.count("/bogus.jpg") == 1, "the remembered failure asked the server again")
        // A coding curl decodes, garbled (here: not gzip at all), stays transient: a stream broken on the way is
        // what the retries are for.
        let garbled = try error(daemon.ctl("get", "--json", origin.url("/garbled.jpg?header=Content-Encoding:gzip")))
        #expect(garbled.code == "network", "\(garbled)")
        #expect(try origin.count("/garbled.jpg") == 3)
    }

    @Test("zstd was asked for and decoded: a frame may ask for a 128 MiB window, which curl grants (50 MB of memory a transfer for 10 KB of zstd); now it is not asked for, and a zstd body is refused before curl decodes it")
    func zstdNotAskedFor() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let failed = try error(daemon.ctl("get", "--json", origin.url("/zstd.jpg?header=Content-Encoding:zstd")))
        #expect(failed.code == "network" && failed.message.contains("did not ask for") && failed.message.contains("zstd"),
                "\(failed)")
        let asked = try origin.stats().log.filter { $0.path == "/zstd.jpg" }.map { $0.headers?["Accept-Encoding"] }
        #expect(asked == ["gzip, deflate, br"], "once, without zstd")
        // An error page in zstd is not decoded either: its status is the answer.
        let page = try error(daemon.ctl("get", "--json", origin.url("/zstd-missing.jpg?status=404&header=Content-Encoding:zstd")))
        #expect(page.code == "http_status" && page.message.contains("404"), "\(page)")
    }

    @Test("bytes after the end of a gzip stream were reported in curl's words, as a failed write to disk; now as a body that cannot be decoded, not tried again, and not held against the server (five such URLs paused it)")
    func gzipTrailer() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for n in 0..<5 {
            let failed = try error(daemon.ctl("get", "--json", origin.url("/trailer\(n).jpg?gzip=1&gzip_trailer=garbage")))
            #expect(failed.code == "network" && failed.message.contains("Content-Encoding: gzip")
                    && failed.message.contains("bytes follow the end of its stream") && !failed.message.contains("disk"),
                    "\(failed)")
        }
        #expect(try origin.count("/trailer0.jpg") == 1, "the same body would come again")
        let whole = daemon.ctl("get", origin.url("/whole.jpg?gzip=1"))
        #expect(whole.status == 0, "\(whole.stderr)")
    }

    @Test("a response curl cannot parse (a Content-Length of -1, a NUL byte in a header, six stacked codings, a status code of 2000, also after a redirect, a chunk size that is not hex) is refused once, in words that say so, and does not pause its server (each was retried and counted against the host, most in curl's words)")
    func malformedResponses() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let cases = [("length", "header=Content-Length:-1", "the server's response is malformed (Invalid Content-Length"),
                     ("nul", "header=X-Note:a%00b", "the server's response is malformed (Nul byte in header)"),
                     ("codings", "header=Content-Encoding:gzip,gzip,gzip,gzip,gzip,gzip",
                      "the server's Content-Encoding is refused (Reject response due to more than 5 content encodings)"),
                     ("status", "status_line=HTTP/1.1%202000%20OK",
                      "the server's reply is not valid HTTP (Unsupported response code in HTTP response)"),
                     // After a redirect it was `scheme_not_allowed`, a permanent failure blaming the scheme.
                     ("redirected", "redirect=%2Ftarget.jpg%3Fstatus_line%3DHTTP%2F1.1%25202000%2520OK",
                      "the server's reply is not valid HTTP (Unsupported response code in HTTP response)"),
                     ("chunks", "chunked=1000&chunk_line=zz",
                      "the server's chunked body is malformed (Illegal or missing hexadecimal sequence in chunked-encoding)")]
        for round in 0..<2 {
            for (name, query, words) in cases {
                let failed = try error(daemon.ctl("get", "--json", origin.url("/\(name)\(round).jpg?\(query)")))
                #expect(failed.code == "network" && failed.message.contains(words), "\(failed)")
                #expect(try origin.count("/\(name)\(round).jpg") == 1, "the same response would come again")
            }
        }
        let good = daemon.ctl("get", origin.url("/good.jpg"))
        #expect(good.status == 0, "six malformed responses paused the server: \(good.stderr)")
    }

    @Test("host_start_rate 1e-300 was accepted and crashed the daemon when a host waited for a start; now it is refused")
    func tinyHostStartRate() throws {
        let refused = run(Paths.prefetchd, ["--check-config", "--host-start-rate", "1e-300"])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("--host-start-rate") && refused.stderr.contains("0.001"), "\(refused.stderr)")
        #expect(run(Paths.prefetchd, ["--check-config", "--host-start-rate", "0.001"]).status == 0)
    }

    @Test("a response nobody asked for, sent on an idle keep-alive connection, was cached as the next URL's image, and each later URL got the one before; now that connection is not used again (HTTP and HTTPS)", arguments: [false, true])
    func responseNobodyAskedFor(tls: Bool) throws {
        let ca = tls ? try TLSTests.PrivateCA() : nil
        let origin = try Origin(tls: ca.map { ($0.certificate, $0.key) })
        let plain = try Origin()  // serves the same bytes for a path, and urllib trusts it
        let daemon = try DaemonUnderTest(ca.map { ["--ca-file", $0.caFile] } ?? [])
        let asked = daemon.ctl("get", origin.url("/asked.jpg?unasked=0.2"))
        #expect(asked.status == 0, "\(asked.stderr)")
        usleep(700_000)  // the unasked response now waits on the idle connection
        for n in 1...3 {
            let path = "/after-\(n).jpg"
            let got = daemon.ctl("get", origin.url(path))
            let file = got.stdout.trimmingCharacters(in: .newlines)
            #expect(FileManager.default.contents(atPath: file) == (try plain.body(path)), "\(path): \(daemon.log.suffix(400))")
        }
        #expect(daemon.log.contains("bytes nobody asked for"), "\(daemon.log.suffix(400))")
    }

    @Test("a response nobody asked for that comes after the next request went out is taken as its answer, and each later answer on that connection as the next one's: a second after the last answer the connection is found with bytes waiting, with no request after it, and the answers it carried are evicted, and fetched again when asked for (3 of 3 stayed wrong, fresh for an hour)")
    func shiftedAnswersAreEvicted() throws {
        let origin = try Origin()
        let plain = try Origin()  // serves the same bytes for a path, counted apart
        let daemon = try DaemonUnderTest()
        // A's stray comes 0.5 s after A's answer; each of B, C and D is asked for before the answer before it came
        // (on one connection: a prefetchctl started for each was late for it on a loaded machine).
        let shifted = ["/b.jpg", "/c.jpg", "/d.jpg"]
        let connection = try RawConnection(socket: daemon.socket)
        #expect(connection.receive()?["hello"] as? String == "prefetchd")
        for (id, path) in zip(1..., ["/a.jpg?unasked=0.5"] + shifted.map { $0 + "?delay=0.5" }) {
            connection.send("{\"id\":\(id),\"op\":\"get\",\"url\":\"\(origin.url(path))\"}\n")
            let answer = connection.receive()
            #expect(answer?["id"] as? Int == id && answer?["ok"] as? Bool == true, "\(path): \(String(describing: answer))")
        }
        // D's own answer comes to the idle connection, and the look a second after D's end finds it.
        #expect(waitUntil(seconds: 5) { daemon.log.contains("the 4 answers it carried are not kept") }, "\(daemon.log.suffix(600))")
        for path in shifted {
            let got = daemon.ctl("get", origin.url(path + "?delay=0.5"))
            #expect(FileManager.default.contents(atPath: got.stdout.trimmingCharacters(in: .newlines))
                    == (try plain.body(path)), "\(path): \(daemon.log.suffix(600))")
        }
        #expect(try origin.count("/b.jpg") == 2, "fetched again")
    }

    @Test("a queued URL whose answer was evicted as untrusted (its connection later had bytes nobody asked for) was neither cached nor queued any more: lost (the soak of this session lost 2 of 14,806); now it is queued again and fetched on a connection of its own, once")
    func evictedQueuedAnswerIsQueuedAgain() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let a = origin.url("/queued-a.jpg"), b = origin.url("/queued-b.jpg?unasked=0.3")  // b's connection: a's
        #expect(daemon.ctl("queue", a, b).status == 0)
        #expect(try waitUntil(seconds: 10) { try origin.count("/queued-a.jpg") == 2 && origin.count("/queued-b.jpg") == 2 },
                "\(daemon.log.suffix(800))")
        #expect(daemon.log.contains("2 queued again, each to be fetched on a connection of its own"), "\(daemon.log.suffix(800))")
        #expect(try waitUntil(seconds: 5) { try entry(daemon.ctl("info", "--json", a))["cached"] != nil })
        let log = try origin.stats().log
        let first = log.filter { $0.path == "/queued-a.jpg" }.map(\.client), second = log.filter { $0.path == "/queued-b.jpg" }.map(\.client)
        #expect(first[0] == second[0], "a and b shared a connection")
        #expect(Set(first + second).count == 3, "each was fetched again on a connection of its own: \(first) \(second)")
        usleep(1_500_000)  // b's stray came again, on its own connection, which nothing else used
        #expect(try origin.count("/queued-a.jpg") == 2 && origin.count("/queued-b.jpg") == 2, "fetched again once")
    }

    @Test("eight idle connections of one server with bytes nobody asked for: a get with max_attempts 1 failed ('Failed sending data to the peer') once curl's five retries each met one of them; now all eight are ended at the first")
    func manyIdleConnectionsWithBytesNobodyAskedFor() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "1"])
        let busy = (0..<8).map { origin.url("/busy-\($0).jpg?delay=0.3&unasked=0.3") }
        #expect(daemon.ctl(arguments: ["get"] + busy).status == 0)
        usleep(800_000)  // each of the eight connections now holds a response nobody asked for
        let got = daemon.ctl("get", origin.url("/after.jpg"))
        #expect(got.status == 0, "\(got.stderr) \(daemon.log.suffix(600))")
        #expect(FileManager.default.contents(atPath: got.stdout.trimmingCharacters(in: .newlines)) == (try origin.body("/after.jpg")))
        #expect(daemon.log.contains("(and on 7 more)"), "\(daemon.log.suffix(600))")
    }

    @Test("bytes a server sent after a response, met by the next request on the reused connection, fail that try only: the URL is tried again on a connection of its own (it was refused for negative_ttl as \"not valid HTTP\")")
    func strayBytesOnAReusedConnection() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--fast-width", "1"])
        // The second starts on the first's connection as soon as the first ends, within the 50 ms before the CRLF.
        let got = daemon.ctl("get", origin.url("/crlf-first.jpg?crlf_after=1"), origin.url("/second.jpg"))
        #expect(got.status == 0, "\(got.stderr)")
        #expect(try origin.count("/second.jpg") == 2, "the second was not asked for on the connection with the CRLF")
    }

    @Test("a connection that ends inside the response's headers is a transient failure, tried again (curl took it for a response without a body: \"the body is empty\", refused for negative_ttl)")
    func connectionEndsInsideTheHeaders() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let got = daemon.ctl("get", origin.url("/cut-headers.jpg?cut_headers_first=1"))
        #expect(got.status == 0, "\(got.stderr)")
        #expect(try origin.count("/cut-headers.jpg") == 2)
    }

    @Test("a server ending an idle connection (a 408, then the end of it, at its keep-alive timeout), or a body with an empty line more, was warned about as bytes nobody asked for; neither is a response: the next get goes out on another connection, without a warning")
    func idleConnectionClosedByTheServer() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for (first, next) in [("/kept.jpg?idle_408=0.2", "/next.jpg"), ("/crlf.jpg?crlf_after=1", "/after-crlf.jpg")] {
            #expect(daemon.ctl("get", origin.url(first)).status == 0)
            usleep(600_000)
            let got = daemon.ctl("get", origin.url(next))
            #expect(FileManager.default.contents(atPath: got.stdout.trimmingCharacters(in: .newlines)) == (try origin.body(next)))
        }
        #expect(!daemon.log.contains("nobody asked for"), "\(daemon.log.suffix(400))")
    }
}
