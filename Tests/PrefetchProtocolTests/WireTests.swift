import FoundationEssentials
import Testing
@testable import PrefetchProtocol

@Suite("Line framing")
struct LineBufferTests {
    @Test("lines come out whole, in order, without their newline or a trailing CR; partial lines wait")
    func lines() {
        var buffer = LineBuffer(limit: 64)
        buffer.append(Array("one\r\ntw".utf8))
        #expect(buffer.next() == .line(Array("one".utf8)))
        #expect(buffer.next() == nil)
        buffer.append(Array("o\n\nthree\n".utf8))
        #expect(buffer.next() == .line(Array("two".utf8)))
        #expect(buffer.next() == .line([]))
        #expect(buffer.next() == .line(Array("three".utf8)))
        #expect(buffer.next() == nil)
        #expect(buffer.pending == 0)
    }

    @Test("once the stream ended, what is left is a last line (its CR dropped); nothing left is no line")
    func finish() {
        var buffer = LineBuffer(limit: 8)
        buffer.append(Array("one\ntwo\r".utf8))
        #expect(buffer.next() == .line(Array("one".utf8)))
        #expect(buffer.next() == nil)
        #expect(buffer.finish() == .line(Array("two".utf8)))
        #expect(buffer.finish() == nil && buffer.pending == 0)
    }

    @Test("a line of exactly the limit passes; one byte more is too long, with or without its newline")
    func limit() {
        var exact = LineBuffer(limit: 8)
        exact.append(Array("12345678\n".utf8))
        #expect(exact.next() == .line(Array("12345678".utf8)))
        var over = LineBuffer(limit: 8)
        over.append(Array("123456789".utf8))
        #expect(over.next() == .tooLong)
        var overWithNewline = LineBuffer(limit: 8)
        overWithNewline.append(Array("123456789\n".utf8))
        #expect(overWithNewline.next() == .tooLong)
    }

    @Test("unfinished counts the bytes after the last newline received, taken lines or not; append says whether a line ended")
    func unfinished() {
        var buffer = LineBuffer(limit: 64)
        #expect(buffer.append(Array("one\ntw".utf8)) && buffer.unfinished == 2 && buffer.pending == 6)
        #expect(!buffer.append(Array("o".utf8)) && buffer.unfinished == 3)
        #expect(buffer.next() == .line(Array("one".utf8)) && buffer.unfinished == 3)
        #expect(buffer.append(Array("\n".utf8)) && buffer.unfinished == 0 && buffer.pending == 4)
        #expect(buffer.next() == .line(Array("two".utf8)) && buffer.pending == 0 && buffer.unfinished == 0)
    }

    @Test("a stream cut into random pieces gives back its lines, whatever the sizes of lines and pieces (taken lines are let go of as it goes)")
    func randomPieces() {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let lines = (0..<Int.random(in: 0...40, using: &random)).map { index in
                Array(String(repeating: "x", count: Int.random(in: 0...9000, using: &random)).utf8) + Array("\(index)".utf8)
            }
            let stream = lines.flatMap { $0 + [0x0A] } + Array("rest".utf8)
            var buffer = LineBuffer(limit: 10_000)
            var taken: [[UInt8]] = [], offset = 0
            while offset < stream.count {
                let end = min(stream.count, offset + Int.random(in: 1...20_000, using: &random))
                buffer.append(stream[offset..<end])
                offset = end
                while case .line(let line)? = buffer.next() { taken.append(line) }
                #expect(buffer.unfinished == stream[..<end].count - ((stream[..<end].lastIndex(of: 0x0A) ?? -1) + 1))
            }
            #expect(taken == lines && buffer.pending == 4 && buffer.finish() == .line(Array("rest".utf8)))
        }
    }
}

@Suite("Wire types")
struct WireTypeTests {
    @Test("a batch summary counts every result by status and keeps only those with an error, in order")
    func batchSummary() {
        let refused = WireError(.invalidURL, "no scheme")
        let results = [ItemResult(url: "a", key: "a", status: .queued), ItemResult(url: "x", status: .rejected, error: refused),
                       ItemResult(url: "a", key: "a", status: .already), ItemResult(url: "b", key: "b", status: .queued),
                       ItemResult(url: "y", status: .rejected, error: refused)]
        let summary = BatchResult.summary(of: results)
        #expect(summary.counts == ["queued": 2, "already": 1, "rejected": 2])
        #expect(summary.results.map(\.url) == ["x", "y"])
        #expect(BatchResult.summary(of: []) == BatchResult(results: [], counts: [:]))
    }

    @Test("request ids may be numbers or strings and come back as they were")
    func requestIDs() throws {
        let decoder = JSONDecoder()
        let number = try decoder.decode(Request.self, from: Data(#"{"id":7,"op":"ping"}"#.utf8))
        let text = try decoder.decode(Request.self, from: Data(#"{"id":"a-1","op":"ping"}"#.utf8))
        #expect(number.id == .number(7) && text.id == .text("a-1"))
        #expect(throws: (any Error).self) { try decoder.decode(Request.self, from: Data(#"{"id":{},"op":"ping"}"#.utf8)) }
    }

    @Test("snake_case fields decode: max_stale, offline, size and the variant options")
    func requestFields() throws {
        let line = #"{"id":1,"op":"get","url":"http://a/x.jpg","max_stale":60,"offline":true,"size":"256x256","fit":"cover","upscale":true}"#
        let request = try JSONDecoder().decode(Request.self, from: Data(line.utf8))
        #expect(request.maxStale == 60 && request.offline == true && request.size == "256x256")
        #expect(request.fit == "cover" && request.upscale == true && request.format == nil)
    }

    @Test("an error reply always carries id, null when the request had none")
    func nullID() throws {
        let data = try JSONEncoder().encode(Reply<Ignored>(id: nil, error: WireError(.badRequest, "no")))
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains(#""id":null"#), "\(text)")
        #expect(text.contains(#""code":"bad_request""#))
    }

    @Test("every error code has a distinct wire name")
    func errorCodes() {
        let names = ErrorCode.allCases.map(\.rawValue)
        #expect(Set(names).count == names.count)
        #expect(names.contains("host_paused") && names.contains("unauthorized") && names.contains("pixel_limit"))
    }

    @Test("DirectJSON.swift writes every stored property of CacheEntry and WireError: a new one must be added there")
    func directJSONCoversEveryProperty() {
        let entry = CacheEntry(url: "u", path: "p", bytes: 1, sha256: "s", contentType: nil, format: nil, width: nil,
                               height: nil, fetchedAt: 0, freshUntil: 0)
        #expect(Mirror(reflecting: entry).children.compactMap(\.label) == [
            "url", "path", "bytes", "sha256", "contentType", "format", "width", "height", "fetchedAt", "freshUntil",
            "fromCache", "variant", "stale"])
        #expect(Mirror(reflecting: WireError(.badRequest, "m")).children.compactMap(\.label) == ["code", "message", "status"])
    }

    @Test("a reply with an entry is written byte for byte as JSONEncoder writes it: every ASCII character, UTF-8, absent fields, ids, errors")
    func directJSON() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var state: UInt64 = 18
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        let pieces = (0..<128).map { String(UnicodeScalar(UInt8($0))) } + ["é", "😀", "\u{2028}", "e\u{301}", "/", "\\u0000"]
        func text() -> String { (0..<next(12)).map { _ in pieces[next(pieces.count)] }.joined() }
        func maybe<T>(_ value: @autoclosure () -> T) -> T? { next(3) == 0 ? nil : value() }
        let ids: [RequestID?] = [nil, .number(0), .number(-7), .number(.max), .number(.min), .text(""), .text("a\"b/ü")]
        for round in 0..<600 {
            var entry = CacheEntry(url: text(), path: text(), bytes: Int64(next(1 << 30)) - 5, sha256: text(),
                                   contentType: maybe(text()), format: maybe(text()), width: maybe(next(99_999)),
                                   height: maybe(next(99_999)), fetchedAt: Int64(next(1 << 31)), freshUntil: .max,
                                   fromCache: maybe(next(2) == 0), stale: maybe(next(2) == 0))
            entry.variant = maybe(text())
            let id = ids[round % ids.count]
            let replies = [Reply(id: id, result: entry),
                           Reply<CacheEntry>(id: id, error: WireError(code: text(), message: text(), status: maybe(next(600))))]
            for reply in replies {
                let expected = Array(try encoder.encode(reply))
                #expect(reply.json == expected, "\(String(decoding: reply.json, as: UTF8.self)) ≠ \(String(decoding: expected, as: UTF8.self))")
            }
        }
    }
}

@Suite("Default paths")
struct DefaultPathsTests {
    @Test("socket and cache follow XDG, then the fallbacks; --socket and PREFETCHD_SOCKET win for the client")
    func paths() {
        #expect(DefaultPaths.socket(environment: ["XDG_RUNTIME_DIR": "/run/user/7"]) == "/run/user/7/prefetchd/ctl.sock")
        #expect(DefaultPaths.socket(environment: [:]).hasPrefix("/tmp/prefetchd-"))
        #expect(DefaultPaths.cacheDirectory(environment: ["XDG_CACHE_HOME": "/c"]) == "/c/prefetchd")
        #expect(DefaultPaths.cacheDirectory(environment: ["HOME": "/home/u"]) == "/home/u/.cache/prefetchd")
        #expect(DefaultPaths.clientSocket(flag: "/x.sock", environment: ["PREFETCHD_SOCKET": "/y.sock"]) == "/x.sock")
        #expect(DefaultPaths.clientSocket(flag: nil, environment: ["PREFETCHD_SOCKET": "/y.sock"]) == "/y.sock")
    }
}
