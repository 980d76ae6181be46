import Testing
@testable import prefetchd

extension ResponseHeaders {
    /// Takes one header line given as text.
    mutating func take(_ line: some StringProtocol) {
        var line = String(line)
        line.withUTF8 { take(bytes: $0) }
    }
}

/// Headers as a server sends them, interpreted without trusting a number in them.
private func headers(_ lines: String...) -> ResponseHeaders {
    var headers = ResponseHeaders()
    headers.take("HTTP/1.1 200 OK\r\n")
    for line in lines { headers.take(Substring(line + "\r\n")) }
    return headers
}

private let now: Int64 = 1_800_000_000_000
private let day: Int64 = 86_400_000
/// 2^31 seconds in milliseconds: RFC 9111's ceiling for delta-seconds.
private let ceiling: Int64 = 2_147_483_648_000

@Suite struct ResponseHeadersTests {
    @Test("a folded Cache-Control (obs-fold) lost the directives on its second line, no-store among them")
    func foldedList() {
        let folded = headers("Cache-Control: max-age=60,", " no-store", "Content-Type: image/jpeg", "\tignored")
        #expect(folded.maxAge == 60 && folded.has("no-store") && folded.contentType == "image/jpeg")
        #expect(!folded.has("ignored"), "a fold after a field that is not a list is dropped")
    }

    @Test("trailer fields after a chunked body were merged: a trailer's Content-Type, ETag and no-cache replaced the header's")
    func trailersNotMerged() {
        var raw = headers("Content-Type: image/jpeg", "Cache-Control: max-age=60", "")
        for line in ["Cache-Control: no-cache", "ETag: \"from-trailer\"", "Content-Type: text/evil", "Content-Length: 5", ""] {
            raw.take(line + "\r\n")
        }
        #expect(raw.contentType == "image/jpeg" && raw.etag == nil && raw.maxAge == 60 && !raw.has("no-cache"))
        #expect(raw.contentLength == nil && raw.framingProblem == nil)
        // An interim response's section ends too; the final response after it is read.
        var interim = ResponseHeaders()
        for line in ["HTTP/1.1 103 Early Hints", "Link: </a.css>", "", "HTTP/1.1 200 OK", "ETag: \"e\"", ""] {
            interim.take(line + "\r\n")
        }
        #expect(interim.etag == "\"e\"")
    }

    @Test("max-age, Age and Retry-After of 9223372036854775807 (and 2000000000000000000) crashed the daemon; now 2^31 s")
    func hugeDeltaSeconds() {
        for value in ["9223372036854775807", "2000000000000000000", "99999999999999999999", "2147483649"] {
            #expect(headers("Cache-Control: max-age=\(value)").freshUntil(now: now, defaultTTL: day) == now + ceiling, "\(value)")
            #expect(headers("Cache-Control: max-age=60", "Age: \(value)").freshUntil(now: now, defaultTTL: day) == now, "\(value)")
            #expect(headers("Retry-After: \(value)").retryAfterMilliseconds(now: now) == ceiling, "\(value)")
        }
    }

    @Test("max-age=99999999999999999999 was taken as absent (a day from Last-Modified); an invalid max-age is stale at once")
    func invalidMaxAge() {
        let modified = "Last-Modified: Wed, 01 Jan 2020 00:00:00 GMT"
        #expect(headers("Cache-Control: max-age=99999999999999999999", modified).freshUntil(now: now, defaultTTL: day) == now + ceiling)
        for value in ["-5", "1.5", "abc", "", "0x10"] {
            #expect(headers("Cache-Control: max-age=\(value)", modified).freshUntil(now: now, defaultTTL: day) == now, "\(value)")
        }
        #expect(headers("Cache-Control: max-age=\"60\"").freshUntil(now: now, defaultTTL: day) == now + 60_000)
        #expect(headers("Age: -5").age == nil && headers("Age: 12").age == 12)
    }

    @Test("a value with a control character (an escape sequence for the terminal of whoever runs info, a CR in an ETag sent back) is not kept; a tab is")
    func controlCharactersInValues() {
        let hostile = headers("Content-Type: image/jpeg\u{1B}]0;owned\u{07}", "ETag: \"a\rX-Injected: 1\"",
                              "Last-Modified: Wed, 01 Jan 2020\u{00} 00:00:00 GMT", "Cache-Control: max-age=60\u{7F}")
        #expect(hostile.contentType == nil && hostile.etag == nil && hostile.lastModified == nil && hostile.cacheDirectives.isEmpty)
        #expect(headers("Content-Type: image/jpeg;\tq=1").contentType == "image/jpeg;\tq=1")
        #expect(headers("Content-Length: 12\u{1B}").framingProblem != nil)
        // A coding curl refuses is the server's lasting fault, not a stream broken on the way.
        #expect(headers("Content-Encoding: gz\u{01}ip").undecodableCoding == "gz?ip")
    }

    @Test("a body cut short looks like its end without Content-Length: HTTP/1 unless chunked, and HTTP/2 too (curl 7.88 takes a stream reset with NO_ERROR for its end: a cut image was not_an_image, permanent)")
    func bodyEndUnsure() {
        #expect(headers("Content-Type: image/png").endUnsure)
        #expect(!headers("Content-Length: 10").endUnsure)
        #expect(!headers("Transfer-Encoding: gzip, Chunked").endUnsure)
        #expect(!headers("Transfer-Encoding: chunked, gzip").endUnsure, "curl decodes chunks")
        #expect(!headers("Transfer-Encoding: gzip,\tchunked\u{0B}").endUnsure)
        for other in ["xchunked", "chunked-ext", "gzip, chunk", "chun ked"] {
            #expect(headers("Transfer-Encoding: \(other)").endUnsure, "\(other) is not chunked coding")
        }
        var http2 = ResponseHeaders()
        http2.take("HTTP/2 200\r\n")
        #expect(http2.endUnsure, "a reset with NO_ERROR ends the stream as its end does")
        http2.take("content-length: 10\r\n")
        #expect(!http2.endUnsure)
        var old = ResponseHeaders()
        old.take("HTTP/1.0 200 OK\r\n")
        #expect(old.endUnsure)
    }

    @Test("Cache-Control: = (a directive without a name, found by the fuzzer) crashed the daemon; now it is ignored")
    func emptyDirective() {
        for value in ["=", "=,", ", =60", "max-age=60, ="] {
            #expect(headers("Cache-Control: \(value)").freshUntil(now: now, defaultTTL: day) >= now, "\(value)")
        }
        #expect(headers("Cache-Control: =, max-age=60").maxAge == 60)
    }

    @Test("dates past the year 292 million and Expires far away stay within 2^31 s instead of overflowing")
    func farDates() {
        let farAway = headers("Expires: Fri, 31 Dec 99999999 23:59:59 GMT", "Date: Thu, 01 Jan 1970 00:00:01 GMT")
        #expect((now...(now + ceiling)).contains(farAway.freshUntil(now: now, defaultTTL: day)))
        let epoch = headers("Expires: Thu, 01 Jan 1970 00:00:00 GMT", "Date: Fri, 31 Dec 9999 23:59:59 GMT")
        #expect(epoch.freshUntil(now: now, defaultTTL: day) == now)
        #expect(headers("Retry-After: Fri, 31 Dec 9999 23:59:59 GMT").retryAfterMilliseconds(now: now) == ceiling)
        #expect(headers("Retry-After: Thu, 01 Jan 1970 00:00:00 GMT").retryAfterMilliseconds(now: now) == 0)
        #expect(headers("Retry-After: soon").retryAfterMilliseconds(now: now) == nil)
    }

    @Test("a Retry-After date counts from the response's Date, on the server's clock (a client clock an hour behind waited an hour more, an hour ahead not at all); without a Date, from now")
    func retryAfterDateFromTheServersDate() {
        let serverTime = "Date: Sat, 05 Dec 2026 06:00:00 GMT"
        let retryDate = "Retry-After: Sat, 05 Dec 2026 06:00:08 GMT"
        let serverNow: Int64 = 1_796_450_400_000  // 2026-12-05 06:00:00 UTC
        for clientNow in [serverNow, serverNow - 3_600_000, serverNow + 3_600_000] {
            #expect(headers(serverTime, retryDate).retryAfterMilliseconds(now: clientNow) == 8_000, "\(clientNow - serverNow)")
        }
        #expect(headers(retryDate).retryAfterMilliseconds(now: serverNow - 2_000) == 10_000)
        #expect(headers(serverTime, "Retry-After: 8").retryAfterMilliseconds(now: serverNow - 3_600_000) == 8_000)
    }

    @Test("Vary: * was reused from the cache; now it is stale at once and not kept for later hits")
    func varyStar() {
        for vary in ["*", "Accept, *", " * "] {
            let response = headers("Cache-Control: max-age=3600", "Vary: \(vary)")
            #expect(response.noStore && response.freshUntil(now: now, defaultTTL: day) == now, "\(vary)")
        }
        let accept = headers("Cache-Control: max-age=3600", "Vary: Accept")
        #expect(!accept.noStore && accept.freshUntil(now: now, defaultTTL: day) == now + 3_600_000)
    }

    @Test("two different Content-Length headers were accepted; now the framing is refused (RFC 9112 section 6.3)")
    func contentLengths() {
        #expect(headers("Content-Length: 5", "Content-Length: 7").framingProblem?.contains("5 and 7") == true)
        #expect(headers("Content-Length: 5, 7").framingProblem != nil)
        #expect(headers("Content-Length: -1").framingProblem != nil)
        #expect(headers("Content-Length: 99999999999999999999999").framingProblem == nil)
        let same = headers("Content-Length: 42", "Content-Length: 42, 42")
        #expect(same.framingProblem == nil && same.contentLength == 42)
        #expect(headers("Content-Length: 5", "Content-Length: 7", "HTTP/1.1 200 OK", "Content-Length: 3").framingProblem == nil,
                "a new response starts afresh")
    }

    @Test("a 206 is judged against the range asked for: the rest from the offset, or the whole file, nothing else",
          arguments: [
              // (offset asked for, Content-Range, expected)
              (5000, "bytes 5000-19418/19419", PartialBody.rest(bytes: 14419)),
              (5000, "bytes 5000-19418/*", .rest(bytes: 14419)),
              (5000, "bytes 0-19418/19419", .whole(bytes: 19419)),  // the resume answered with the whole file
              (0, "bytes 0-19418/19419", .whole(bytes: 19419)),
              (5000, "bytes 5100-19418/19419", nil),  // another offset: was appended, 19,319 bytes
              (5000, "bytes 5000-9999/19419", nil),  // ends before the end
              (0, "bytes 5100-19418/19419", nil),  // a 206 nobody asked for
              (0, "bytes 0-19418/*", nil),
              (5000, "bytes 5000-19418/19418", nil),
              (5000, "bytes 9000-5000/19419", nil),
              (5000, "bytes 5000-9223372036854775807/9223372036854775808", nil),
              (5000, "bytes 5000-99999999999999999999/*", nil),
              (5000, "items 5000-19418/19419", nil),
              (5000, "", nil),
          ] as [(Int64, String, PartialBody?)])
    func partialBodies(offset: Int64, contentRange: String, expected: PartialBody?) {
        let response = contentRange.isEmpty ? headers() : headers("Content-Range: \(contentRange)")
        let judged = response.partialBody(requestedFrom: offset)
        if let expected {
            #expect(judged == expected)
        } else if case .mismatch = judged {
        } else {
            Issue.record("\(contentRange) for an offset of \(offset) was taken as \(judged)")
        }
    }

    @Test("a 206 with a Content-Encoding is no range of the file; gzip marks a body as encoded, identity does not")
    func encodedRanges() {
        let gzipped = headers("Content-Range: bytes 0-99/100", "Content-Encoding: gzip")
        #expect(gzipped.isEncoded)
        if case .mismatch = gzipped.partialBody(requestedFrom: 0) {} else { Issue.record("an encoded 206 was accepted") }
        #expect(!headers("Content-Encoding: identity").isEncoded && !headers().isEncoded)
    }

    @Test("Accept-Ranges without the bytes unit (none, another unit) refuses ranges; absent, or bytes among others, does not")
    func acceptRanges() {
        #expect(headers("Accept-Ranges: none").refusesRanges && headers("Accept-Ranges: pages").refusesRanges)
        #expect(headers("accept-ranges:  NONE ").refusesRanges)
        #expect(!headers().refusesRanges && !headers("Accept-Ranges: bytes").refusesRanges)
        #expect(!headers("Accept-Ranges: pages", "Accept-Ranges: Bytes").refusesRanges)
    }

    @Test("header bytes are counted across a transfer's responses (interim ones too: they were counted per response), so a server sending endless lines or endless 1xx responses can be stopped; fields are per response")
    func byteCount() {
        var response = headers("Content-Type: image/png", "X-A: " + String(repeating: "a", count: 1000))
        let interim = response.byteCount
        #expect(interim > 1000)
        response.take("HTTP/1.1 200 OK\r\n")
        #expect(response.byteCount == interim + 17 && response.contentType == nil)
    }

    @Test("field names match in any ASCII case and only byte for byte; a value's bytes that are not UTF-8 are kept repaired, counted as received")
    func namesAndBytes() {
        let mixed = headers("CONTENT-type: image/png", "eTaG:\t\"v1\" ", "Content\rLength: 5", "Content-Lengths: 7")
        #expect(mixed.contentType == "image/png" && mixed.etag == "\"v1\"")
        #expect(mixed.contentLength == nil && mixed.framingProblem == nil, "only Content-Length itself is a length")
        var raw = ResponseHeaders()
        let line: [UInt8] = Array("Last-Modified: a".utf8) + [0xFF] + Array("b\r\n".utf8)
        line.withUnsafeBufferPointer { raw.take(bytes: $0) }
        #expect(raw.lastModified == "a\u{FFFD}b" && raw.byteCount == line.count)
    }
}
