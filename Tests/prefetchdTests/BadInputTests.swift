import Foundation
import Testing

/// Each bad input gets its documented error code, and the daemon keeps serving.
@Suite(.serialized)
struct BadInputTests {
    static let origin = try! Origin()

    /// A URL, the error code `get` must answer with, its exit status (4: the request was refused, 1: the fetch
    /// failed), and daemon flags the case needs.
    static let cases: [(url: String, code: String, exit: Int32, flags: [String])] = [
        ("file:///etc/passwd", "scheme_not_allowed", 4, []),
        ("ftp://127.0.0.1/x.jpg", "scheme_not_allowed", 4, []),
        ("http://exa mple.com/x.jpg", "invalid_url", 4, []),
        (origin.url("/r.jpg?redirect=file:///etc/passwd"), "scheme_not_allowed", 1, []),
        // A scheme curl does not know at all: it was a transient network failure, retried, pausing the host.
        (origin.url("/d.jpg?redirect=data%3Aimage%2Fpng%3Bbase64%2CAAAA"), "scheme_not_allowed", 1, []),
        // A Location curl cannot parse is the server's fault, not a bad request: the fetch fails with the 302.
        (origin.url("/r.jpg?redirect=http%3A%2F%2F127.0.0.1%3A99999%2Fok.png"), "http_status", 1, []),
        (origin.url("/missing.jpg?status=404"), "http_status", 1, []),
        (origin.url("/big.jpg?no_length=1&size=5000000"), "too_large", 1, ["--max-bytes", "1M"]),
        (origin.url("/drip.jpg?drip=1&size=100"), "timeout", 1, ["--low-speed-time", "2", "--max-attempts", "1"]),
        (origin.url("/short.jpg?short=100&size=5000"), "network", 1, ["--max-attempts", "1"]),
        (origin.url("/loop.jpg?redirect_loop=1"), "too_many_redirects", 1, []),
    ]

    @Test("a bad URL or a hostile origin gets its error code; the daemon keeps serving", arguments: 0..<cases.count)
    func badFetch(index: Int) throws {
        let (url, code, exit, flags) = Self.cases[index]
        let daemon = try DaemonUnderTest(flags)
        let result = daemon.ctl("get", "--json", "--timeout", "20", url)
        #expect(result.status == exit, "\(url): \(result.stderr)")
        #expect(errorCode(result.stdout) == code, "\(url): \(result.stdout) \(result.stderr)")
        #expect(daemon.ctl("get", Self.origin.url("/after-\(index).jpg")).status == 0, "the daemon keeps serving")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: daemon.cache + "/tmp")
        #expect(leftovers.isEmpty, "no temporary file is left after a failed fetch")
    }

    /// What `get` printed for `path`, with low_speed_time 2 s and one attempt, once it failed with `timeout`.
    func timedOut(_ path: String) throws -> String {
        let daemon = try DaemonUnderTest(["--low-speed-time", "2", "--max-attempts", "1"])
        let result = daemon.ctl("get", "--json", "--timeout", "20", Self.origin.url(path))
        #expect(errorCode(result.stdout) == "timeout", "\(result.stdout) \(result.stderr)")
        return result.stdout
    }

    @Test("a timeout says what timed out, in curl's words (it said only \"Timeout was reached\")")
    func timeoutSaysWhatTimedOut() throws {
        let printed = try timedOut("/drip-words.jpg?drip=1&size=100")
        #expect(printed.contains("Operation too slow"), "\(printed)")
    }

    @Test("a server that took the request and never answered was reported as \"Operation too slow. Less than 1024 bytes/sec transferred\"; now the message says that no response came")
    func noResponseSaysSo() throws {
        let printed = try timedOut("/silent.jpg?delay=8")
        #expect(printed.contains("the server took the request but sent no response within 2 s"), "\(printed)")
    }

    @Test("a body cut short says that the connection ended before it came, in curl's count (it said \"shorter than its Content-Length\", also for an HTTP/2 protocol error)")
    func bodyCutShortSaysSo() throws {
        let daemon = try DaemonUnderTest(["--max-attempts", "1"])
        let result = daemon.ctl("get", "--json", "--timeout", "20", Self.origin.url("/cut-words.jpg?short=100&size=5000"))
        #expect(errorCode(result.stdout) == "network", "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("the connection ended before the whole body came (transfer closed with 4900 bytes remaining to read)"),
                "\(result.stdout)")
    }

    @Test("an image cut short by a clean close, with no Content-Length to tell, is retried, not remembered as no image")
    func imageCutShortWithoutLengthIsRetried() throws {
        let daemon = try DaemonUnderTest()
        // The first answer closes the connection after 4,950 of the JPEG's 5,000 bytes (inside its scan); the second is whole.
        let url = Self.origin.url("/cut-without-length.jpg?no_length=1&cut_first=4950&size=5000")
        let result = daemon.ctl("get", "--json", "--timeout", "20", url)
        #expect(result.status == 0 && errorCode(result.stdout) == nil, "\(result.stdout) \(result.stderr)")
        #expect(try Self.origin.count("/cut-without-length.jpg") == 2)
        // A short file that its Content-Length matches stays not_an_image, remembered (ImageTests.rejected).
    }

    @Test("an image the server always cuts short, with no Content-Length to tell, is no image once the same bytes came twice, remembered; its host is not paused (one such file paused every URL of its host for 60 s)")
    func sameCutTwiceIsTheServersFile() throws {
        let daemon = try DaemonUnderTest()
        // Every answer closes the connection after 4,950 of the JPEG's 5,000 bytes, inside its scan.
        let urls = (1...3).map { Self.origin.url("/always-cut-\($0).jpg?no_length=1&short=4950&size=5000") }
        for (n, url) in urls.enumerated() {
            let result = daemon.ctl("get", "--json", "--timeout", "20", url)
            #expect(result.status == 1 && errorCode(result.stdout) == "not_an_image", "\(result.stdout) \(result.stderr)")
            #expect(try Self.origin.count("/always-cut-\(n + 1).jpg") == 2, "fetched twice, not three times")
        }
        #expect(errorCode(daemon.ctl("get", "--json", urls[0]).stdout) == "not_an_image")
        #expect(try Self.origin.count("/always-cut-1.jpg") == 2, "remembered")
        let other = daemon.ctl("get", "--json", Self.origin.url("/next-to-the-cut.jpg"))
        #expect(other.status == 0, "the host is not paused: \(other.stdout)")
    }

    @Test("a 503 with Retry-After: 300 is answered at once, saying when it is tried again, and so is the next get; the get waited out two such retries, 10 minutes")
    func longRetryAfterIsNotWaitedFor() throws {
        let daemon = try DaemonUnderTest()
        let url = Self.origin.url("/busy.jpg?status=503&retry_after=300")
        for _ in 0..<2 {
            let result = daemon.ctl("get", "--json", "--timeout", "20", url)
            #expect(result.status == 1 && errorCode(result.stdout) == "http_status", "\(result.stdout) \(result.stderr)")
            #expect(result.stdout.contains("the server answered HTTP 503; tried again in "), "\(result.stdout)")
            #expect(result.stdout.contains(" s, in the background"), "\(result.stdout)")
        }
        #expect(try Self.origin.count("/busy.jpg") == 1, "the server's wish is kept")
    }

    @Test("a permanent failure is remembered: the second get does not reach the origin")
    func negativeCache() throws {
        let daemon = try DaemonUnderTest()
        let url = Self.origin.url("/gone.jpg?status=410")
        #expect(errorCode(daemon.ctl("get", "--json", url).stdout) == "http_status")
        #expect(errorCode(daemon.ctl("get", "--json", url).stdout) == "http_status")
        #expect(try Self.origin.count("/gone.jpg") == 1)
    }

    @Test("a line that ends right after its 513th opening bracket is refused, not decoded (the decoder trapped: the daemon died, every waiting client with it)",
          arguments: [String(repeating: "[", count: 513), "{\"op\":\"ping\",\"id\":1,\"x\":" + String(repeating: "[", count: 512),
                      String(repeating: "[", count: 33) + String(repeating: "]", count: 33)])
    func deepNesting(line: String) throws {
        let daemon = try DaemonUnderTest()
        let connection = try RawConnection(socket: daemon.socket)
        #expect(connection.receive()?["hello"] as? String == "prefetchd")
        connection.send(line + "\n")
        let error = connection.receive()?["error"] as? [String: Any]
        #expect(error?["code"] as? String == "bad_request")
        #expect((error?["message"] as? String)?.contains("deeper than 32 levels") == true, "\(String(describing: error))")
        connection.send("{\"id\":2,\"op\":\"ping\"}\n")
        #expect(connection.receive()?["id"] as? Int == 2, "it still serves")
    }

    @Test("a string id holds at most 1,024 bytes (a waiting request holds its id until its reply: 8 clients of 8,192 gets with 60 KB ids held 3.95 GB): a longer one is bad_request with id null, and nothing is carried out")
    func longIdsRefused() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let connection = try RawConnection(socket: daemon.socket)
        #expect(connection.receive()?["hello"] as? String == "prefetchd")
        let longest = String(repeating: "é", count: 512), over = String(repeating: "i", count: 1025)
        connection.send("{\"id\":\"\(over)\",\"op\":\"queue\",\"urls\":[\"\(origin.url("/long-id.jpg"))\"]}\n")
        let refused = connection.receive()
        let error = refused?["error"] as? [String: Any]
        #expect(error?["code"] as? String == "bad_request" && refused?["id"] is NSNull, "\(String(describing: refused))")
        #expect((error?["message"] as? String)?.contains("id: a string of 1025 bytes as JSON writes it, over the 1024 an id may have") == true,
                "\(String(describing: error))")
        connection.send("{\"id\":\"\(longest)\",\"op\":\"ping\"}\n")
        #expect(connection.receive()?["id"] as? String == longest, "1,024 bytes of UTF-8 are fine")
        // Escapes count as they are written back: 171 control characters come back as 1,026 bytes (1,024 before).
        let escaped = String(repeating: "\\u0001", count: 171), fits = String(repeating: "\\u0001", count: 170)
        connection.send("{\"id\":\"\(escaped)\",\"op\":\"ping\"}\n")
        let refusedEscaped = connection.receive()
        #expect(refusedEscaped?["id"] is NSNull && ((refusedEscaped?["error"] as? [String: Any])?["message"] as? String)?
                    .contains("a string of 1026 bytes as JSON writes it") == true, "\(String(describing: refusedEscaped))")
        connection.send("{\"id\":\"\(fits)\",\"op\":\"ping\"}\n")
        #expect(connection.receive()?["id"] as? String == String(repeating: "\u{1}", count: 170))
        let info = daemon.ctl("info", origin.url("/long-id.jpg"))
        #expect(info.stdout.contains("cached: no") && !info.stdout.contains("task"), "not queued: \(info.stdout)")
    }

    @Test("protocol abuse: not JSON, unknown op, missing field, a negative list limit, a 1 MiB line without newline, answered after a queue sent before it in the same write (it came first)")
    func protocolAbuse() throws {
        let daemon = try DaemonUnderTest()
        let connection = try RawConnection(socket: daemon.socket)
        #expect(connection.receive()?["hello"] as? String == "prefetchd")

        connection.send("this is not json\n")
        #expect((connection.receive()?["error"] as? [String: Any])?["code"] as? String == "bad_request")
        connection.send("{\"id\":7,\"op\":\"fly\"}\n")
        let unknown = connection.receive()
        #expect(unknown?["id"] as? Int == 7)
        #expect((unknown?["error"] as? [String: Any])?["code"] as? String == "unknown_op")
        connection.send("{\"id\":\"x\",\"op\":\"get\"}\n")
        let missing = connection.receive()
        #expect(missing?["id"] as? String == "x")
        #expect((missing?["error"] as? [String: Any])?["code"] as? String == "bad_request")
        // A negative limit was taken as 0: an empty list, as if nothing were queued.
        connection.send("{\"id\":9,\"op\":\"list\",\"limit\":-1}\n")
        let negative = connection.receive()?["error"] as? [String: Any]
        #expect(negative?["code"] as? String == "bad_request")
        #expect(negative?["message"] as? String == "limit must be 0 or more, not -1")
        // An id out of Int64's range, fractional or of another type said "Expected to decode String but found number".
        for id in ["9223372036854775808", "1.5", "true", "[1]"] {
            connection.send("{\"id\":\(id),\"op\":\"ping\"}\n")
            let error = connection.receive()?["error"] as? [String: Any]
            #expect(error?["code"] as? String == "bad_request")
            #expect((error?["message"] as? String)?.hasSuffix("id: an id is a string or a whole number from -2^63 to 2^63-1") == true,
                    "\(id): \(error ?? [:])")
        }
        // A number that is not whole or out of range said "The given data was not valid JSON", with "id":null.
        for (field, number) in [("max_stale", "1.5"), ("limit", "99999999999999999999"), ("first", "1e400"), ("quality", "-0.5")] {
            connection.send("{\"id\":10,\"op\":\"get\",\"url\":\"http://127.0.0.1:1/a.jpg\",\"\(field)\":\(number)}\n")
            let reply = connection.receive()
            let message = (reply?["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(reply?["id"] as? Int == 10 && message.contains("\(field): not a whole number from "), "\(field): \(reply ?? [:])")
        }
        // Not whole as written, read as the whole number next to it: refused as 1.5 is, naming the field.
        for (field, number) in [("limit", "0.99999999999999999999"), ("max_stale", "-1e-400"), ("quality", "84.99999999999999999")] {
            connection.send("{\"id\":11,\"op\":\"get\",\"url\":\"http://127.0.0.1:1/a.jpg\",\"\(field)\":\(number)}\n")
            let reply = connection.receive()
            let message = (reply?["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(reply?["id"] as? Int == 11 && message.contains("\(field): not a whole number from "), "\(field): \(reply ?? [:])")
        }
        connection.send("{\"id\":1.0000000000000000001,\"op\":\"ping\"}\n")
        let badID = connection.receive()
        #expect(badID?["id"] is NSNull && ((badID?["error"] as? [String: Any])?["message"] as? String)?
            .hasSuffix("id: an id is a string or a whole number from -2^63 to 2^63-1") == true, "\(badID ?? [:])")
        // Valid JSON with a field of the wrong type: the id comes back (it was null: a pipelining client lost the reply).
        connection.send("{\"id\":\"q\",\"op\":\"queue\",\"urls\":\"http://127.0.0.1:1/a.jpg\"}\n")
        let wrongType = connection.receive()
        #expect(wrongType?["id"] as? String == "q" && (wrongType?["error"] as? [String: Any])?["code"] as? String == "bad_request")
        // Fields named in JSON's words (it said "No value associated with key CodingKeys(stringValue: \"op\", …)").
        for (line, said) in [("{\"id\":1}", "missing field \"op\""), ("{\"id\":1,\"op\":5}", "op: expected a string, found a number"),
                             ("{\"id\":1,\"op\":null}", "op: null where a value is needed"),
                             ("{\"id\":1,\"op\":\"queue\",\"urls\":\"x\"}", "urls: expected a list, found a string"),
                             ("{\"id\":1,\"op\":\"view\",\"urls\":[\"x\",{}]}", "urls[1]: expected a string, found an object"),
                             ("{\"id\":1,\"op\":\"queue\",\"urls\":[],\"summary\":1}", "summary: expected true or false, found a number")] {
            connection.send(line + "\n")
            let message = (connection.receive()?["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(message == "the line is not a JSON request object: " + said, "\(line)")
        }
        connection.send("{\"id\":8,\"op\":\"ping\"}\n")
        #expect(connection.receive()?["ok"] as? Bool == true, "the connection survives bad requests")

        let flood = try RawConnection(socket: daemon.socket)
        _ = flood.receive()
        // In one write behind a queue: the queue's reply comes first, as the requests came (it came after).
        flood.send("{\"id\":9,\"op\":\"queue\",\"urls\":[\"http://127.0.0.1:9/q.jpg\"]}\n" + String(repeating: "x", count: 1 << 20))
        let queued = flood.receive()
        #expect(queued?["id"] as? Int == 9 && queued?["ok"] as? Bool == true, "\(String(describing: queued))")
        #expect((flood.receive()?["error"] as? [String: Any])?["code"] as? String == "line_too_long")
        #expect(flood.receive() == nil, "the daemon closes a connection it cannot resynchronise")
        // Behind a get still fetching: its answer comes when the fetch ends, then the connection closes.
        let origin = try Origin()
        let waiting = try RawConnection(socket: daemon.socket)
        _ = waiting.receive()
        waiting.send("{\"id\":10,\"op\":\"get\",\"url\":\"\(origin.url("/slow.jpg?delay=1"))\"}\n" + String(repeating: "x", count: 1 << 17))
        #expect((waiting.receive()?["error"] as? [String: Any])?["code"] as? String == "line_too_long")
        let fetched = waiting.receive()
        #expect(fetched?["id"] as? Int == 10 && fetched?["ok"] as? Bool == true, "\(String(describing: fetched))")
        #expect(waiting.receive() == nil)
        #expect(daemon.ctl("ping").status == 0, "the daemon keeps serving")
    }

    @Test("a line read two ways is refused, naming its place: a second op behind an evict (the decoder took the first: the cache was emptied), a trailing comma, bytes that are not UTF-8 in one URL of a batch")
    func lineReadTwoWays() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/kept.jpg")
        #expect(daemon.ctl("get", url).status == 0)
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        for (line, said) in [("{\"op\":\"evict\",\"all\":true,\"op\":\"ping\",\"id\":1}", "at byte 26, a second member with the same name"),
                             ("{\"id\":2,\"op\":\"ping\",}", "at byte 21, a member name was expected after the comma")] {
            connection.send(line + "\n")
            let reply = connection.receive()
            #expect(reply?["id"] is NSNull && (reply?["error"] as? [String: Any])?["message"] as? String == "the line is not strict JSON: " + said,
                    "\(String(describing: reply))")
        }
        #expect(daemon.ctl("get", "--offline", url).status == 0, "still cached")
        var batch = Array("{\"id\":3,\"op\":\"queue\",\"urls\":[\"http://127.0.0.1:9/a.jpg\",\"http://127.0.0.1:9/".utf8)
        batch += [0xFF] + Array("b.jpg\"]}\n".utf8)
        _ = Glibc.send(connection.fd, batch, batch.count, Int32(MSG_NOSIGNAL))
        let reply = connection.receive()
        #expect((reply?["error"] as? [String: Any])?["message"] as? String == "the line is not strict JSON: at byte 77, a byte that is not UTF-8",
                "\(String(describing: reply))")
    }

    @Test("queue with both url and urls is a bad request (url was dropped silently), and so are get and info with urls, view with url and evict of all with URLs; a last request without its newline before a half-close is answered (it was dropped)")
    func urlAndURLsAndLastLine() throws {
        let daemon = try DaemonUnderTest()
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        connection.send("{\"id\":1,\"op\":\"queue\",\"url\":\"http://127.0.0.1:9/a.jpg\",\"urls\":[\"http://127.0.0.1:9/b.jpg\"]}\n")
        let both = connection.receive()?["error"] as? [String: Any]
        #expect(both?["code"] as? String == "bad_request" && both?["message"] as? String == "queue takes url or urls, not both",
                "\(String(describing: both))")
        // So are a get with urls (they were left unread) and an evict of all with URLs (it emptied the cache).
        for (line, said) in [("{\"id\":3,\"op\":\"get\",\"url\":\"http://127.0.0.1:9/a.jpg\",\"urls\":[\"http://127.0.0.1:9/b.jpg\"]}",
                              "get takes one url, not urls: send one request per URL"),
                             ("{\"id\":5,\"op\":\"info\",\"url\":\"http://127.0.0.1:9/a.jpg\",\"urls\":[]}",
                              "info takes one url, not urls: send one request per URL"),
                             ("{\"id\":6,\"op\":\"view\",\"url\":\"http://127.0.0.1:9/a.jpg\",\"urls\":[\"http://127.0.0.1:9/b.jpg\"]}",
                              "view takes urls, not url"),
                             ("{\"id\":4,\"op\":\"evict\",\"all\":true,\"urls\":[\"http://127.0.0.1:9/b.jpg\"]}",
                              "evict takes all or url(s), not both")] {
            connection.send(line + "\n")
            let refused = connection.receive()?["error"] as? [String: Any]
            #expect(refused?["code"] as? String == "bad_request" && refused?["message"] as? String == said, "\(String(describing: refused))")
        }
        connection.send("{\"id\":2,\"op\":\"ping\"}")
        connection.finishSending()
        let last = connection.receive()
        #expect(last?["id"] as? Int == 2 && last?["ok"] as? Bool == true, "\(String(describing: last))")
        #expect(connection.receive() == nil, "then the end of the stream")
        let info = daemon.ctl("info", "http://127.0.0.1:9/b.jpg").stdout
        #expect(info.contains("cached: no") && !info.contains("task"), "nothing was queued: \(info)")
    }

    @Test("prefetchctl exit codes: usage 2, unreachable 3, rejected 4")
    func exitCodes() throws {
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("frobnicate").status == 2)
        #expect(daemon.ctl("get").status == 2)
        #expect(run(Paths.prefetchctl, ["--socket", daemon.directory.path + "/nothing.sock", "ping"]).status == 3)
        #expect(daemon.ctl("get", "gopher://x/").status == 4)
        #expect(daemon.ctl("--help").status == 0)
        #expect(daemon.ctl("get", "--help").stdout.contains("Example"))
    }
}

/// Egress control on the address actually connected.
@Suite(.serialized)
struct EgressTests {
    @Test("deny_networks refuses a denied network by address and behind a DNS name; other addresses are fetched")
    func deniedNetworks() throws {
        let origin = try Origin()
        let denied = try DaemonUnderTest(["--deny-networks", "127.0.0.0/8, ::1/128"])
        for url in [origin.url("/d.jpg"), "http://localhost:\(origin.port)/d.jpg"] {
            let result = denied.ctl("get", "--json", url)
            #expect(errorCode(result.stdout) == "address_not_allowed", "\(url): \(result.stdout)")
        }
        #expect(try origin.count("/d.jpg") == 0, "no request reached the origin")
        let elsewhere = try DaemonUnderTest(["--deny-networks", "127.0.0.2/32,10.0.0.0/8"])
        #expect(elsewhere.ctl("get", origin.url("/d.jpg")).status == 0)
        let bad = run(Paths.prefetchd, ["--deny-networks", "10.0.0.0/33", "--check-config"])
        #expect(bad.status != 0 && bad.stderr.contains("10.0.0.0/33"), "\(bad.stderr)")
    }

    @Test("a link-local address where nothing answers is address_not_allowed at once, not a network failure retried and counted against the host (it was refused only after a connect that never came)")
    func linkLocalRefusedBeforeConnecting() throws {
        let daemon = try DaemonUnderTest()
        for url in ["http://[fe80::1]/x.jpg", "http://169.254.1.1/x.jpg"] {
            let started = Date()
            let result = daemon.ctl("get", "--json", url)
            #expect(errorCode(result.stdout) == "address_not_allowed", "\(url): \(result.stdout)")
            #expect(Date().timeIntervalSince(started) < 5, "\(url): refused without waiting for a connect timeout")
        }
        #expect(!daemon.ctl("status", "--json").stdout.contains("169.254.1.1"), "the host is not paused")
    }
}
