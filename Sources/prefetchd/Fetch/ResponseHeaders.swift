import CCurl
import QueueCore

/// The headers of the final response that matter to the cache (a redirect's headers are discarded).
///
/// Every number in them comes from a server and is not trusted: parsed strictly, clamped (RFC 9111 section 1.2.2),
/// combined with saturating arithmetic. Fuzz/FuzzHeaders.swift fuzzes this file.
struct ResponseHeaders: Equatable {
    var contentType: String?
    /// The announced body length; see `framingProblem` for values that disagree.
    var contentLength: Int64?
    var contentRange: String?
    /// The codings applied to the body (`gzip`, …), all occurrences joined.
    var contentEncoding: String?
    var etag: String?
    var lastModified: String?
    /// The `Cache-Control` directives of every such line, in order, parsed as they arrive.
    var cacheDirectives: [CacheDirective] = []
    var expires: String?
    var date: String?
    /// `Age` in seconds (clamped); an invalid value is ignored (RFC 9111 section 5.1).
    var age: Int64?
    var retryAfter: String?
    var vary: String?
    /// The range units the server accepts for this resource, all occurrences joined.
    var acceptRanges: String?
    /// Why the body's length cannot be trusted (RFC 9112 section 6.3), when it cannot.
    var framingProblem: String?
    /// The status line said HTTP/1.0 or 1.1, and a `Transfer-Encoding` named `chunked`: with neither a length nor
    /// chunks, such a body ends when the connection closes.
    private var http1 = false
    private var chunked = false
    /// Bytes of header lines so far: this response's and those of the interim (1xx) and redirect responses before it.
    var byteCount = 0
    /// The empty line that ends the header section came: what follows until another status line is a trailer
    /// section, whose fields are not merged into the header's (RFC 9110 section 6.5.1).
    private(set) var sectionEnded = false
    /// The list field of the last line, which a folded line continues.
    private var foldedList: Field?

    /// Header lines of a transfer, in bytes, at most: curl 7.88 refuses one line over 100 KiB (with "Out of
    /// memory") but not many lines, so the transfer counts them; interim responses count too (20,000 `103 Early
    /// Hints` met curl's own 300 KB limit, a transient `network` failure).
    static let maximumBytes = 100 * 1024
    /// RFC 9111 section 1.2.2: a delta-seconds value above 2^31 is taken as 2^31.
    static let maximumDeltaSeconds: Int64 = 1 << 31
    /// The longest freshness lifetime, age or Retry-After in milliseconds, whatever a date says: 2^31 s (68 years).
    static let maximumSpan: Int64 = maximumDeltaSeconds * 1000

    /// Takes one raw header line as curl hands it over: bytes, not necessarily UTF-8; a status line starts a new
    /// response, and trailer fields after a chunked body are counted but not kept. Only the fields kept become
    /// Strings; names are matched without case, as the ASCII tokens they are (RFC 9110 section 5.1).
    mutating func take(bytes line: UnsafeBufferPointer<UInt8>) {
        if line.starts(with: "HTTP/".utf8) {
            self = ResponseHeaders(byteCount: byteCount)
            http1 = line.starts(with: "HTTP/1.".utf8)
        }
        byteCount = byteCount.saturatingAdd(line.count)
        guard !sectionEnded else { return }
        if line.allSatisfy(Self.isSpace) {
            sectionEnded = true
            return
        }
        let field: Field
        var start: Int
        if line.first == 0x20 || line.first == 0x09 {
            // obs-fold (RFC 9112 section 5.2): the line goes on with the field before it. Only a list field takes
            // it (a folded `Cache-Control: max-age=60,` then ` no-store` lost its no-store).
            guard let list = foldedList else { return }
            field = list
            start = line.startIndex
        } else {
            foldedList = nil
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")),
                  let named = Field(name: UnsafeBufferPointer(rebasing: line[..<colon])) else { return }
            field = named
            start = colon + 1
            if field == .cacheControl || field == .contentEncoding || field == .vary { foldedList = field }
        }
        var end = line.endIndex
        while start < end, Self.isSpace(line[start]) { start += 1 }
        while end > start, Self.isSpace(line[end - 1]) { end -= 1 }
        let bytes = UnsafeBufferPointer(rebasing: line[start..<end])
        if field == .transferEncoding {
            // Read as curl reads it, control characters and all: what matters is whether curl decodes chunks.
            chunked = chunked || Self.namesChunked(bytes)
            return
        }
        // RFC 9110 section 5.5: a control character (HTAB aside) has no place in a field value. Such a value is
        // not kept: it would be shown to people (a content type), sent back (an ETag) or parsed. A coding is kept
        // with `?` for each one: it names no coding curl decodes, so its refusal is the server's lasting fault.
        let isControl = { (byte: UInt8) in (byte < 0x20 && byte != 0x09) || byte == 0x7F }
        let value: String
        if field != .contentLength, bytes.contains(where: isControl) {
            guard field == .contentEncoding else { return }
            value = String(decoding: bytes.map { isControl($0) ? UInt8(ascii: "?") : $0 }, as: UTF8.self)
        } else {
            value = String(decoding: bytes, as: UTF8.self)
        }
        func joined(_ old: String?) -> String { old.map { $0 + ", " + value } ?? value }
        switch field {
        case .contentType: contentType = value
        case .contentLength: takeContentLength(value)
        case .contentRange: contentRange = value
        case .contentEncoding: contentEncoding = joined(contentEncoding)
        case .etag: etag = value
        case .lastModified: lastModified = value
        case .cacheControl: cacheDirectives += CacheDirective.list(value)
        case .expires: expires = value
        case .date: date = value
        case .age: age = Self.deltaSeconds(value)
        case .retryAfter: retryAfter = value
        case .vary: vary = joined(vary)
        case .acceptRanges: acceptRanges = joined(acceptRanges)
        case .transferEncoding: break  // taken from its bytes above
        }
    }

    /// A body cut short looks like its end: HTTP/1.x with neither `Content-Length` nor chunked coding ends when the
    /// connection closes (RFC 9112 section 6.3), and curl 7.88 takes an HTTP/2 stream reset with `NO_ERROR` for the end
    /// of a body (`http2.c`: only a reset with an error code fails the transfer), so one without `Content-Length` cut
    /// by such a reset looks whole too. Chunked bodies mark their end.
    var endUnsure: Bool { contentLength == nil && !(http1 && chunked) }

    /// Whether a `Transfer-Encoding` value has the coding `chunked` among its comma-separated codings, as curl reads
    /// it: curl then decodes chunks, and sees a body cut short, whatever comes before or after (`chunked, gzip`);
    /// `xchunked` is not that coding.
    private static func namesChunked(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
        value.split(separator: UInt8(ascii: ",")).contains { coding in
            let name = coding.drop { isCurlSpace($0) }.reversed().drop { isCurlSpace($0) }
            return name.count == 7 && zip(name.reversed(), "chunked".utf8).allSatisfy { lowercased($0) == $1 }
        }
    }

    /// curl's `ISSPACE`: space, tab, line feed, vertical tab, form feed, carriage return.
    private static func isCurlSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }

    /// What a field value is trimmed of (the line's own CR LF included).
    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A
    }

    /// The fields kept, by their lower-case names.
    private enum Field: String, CaseIterable {
        case contentType = "content-type", contentLength = "content-length", contentRange = "content-range"
        case contentEncoding = "content-encoding", etag, lastModified = "last-modified", cacheControl = "cache-control"
        case expires, date, age, retryAfter = "retry-after", vary, transferEncoding = "transfer-encoding"
        case acceptRanges = "accept-ranges"

        private static let names = allCases.map { (field: $0, name: Array($0.rawValue.utf8)) }

        /// The field a name is, in any case; nil for a field not kept.
        init?(name: UnsafeBufferPointer<UInt8>) {
            guard let match = Self.names.first(where: { candidate in
                candidate.name.count == name.count && zip(candidate.name, name).allSatisfy { $0 == ResponseHeaders.lowercased($1) }
            }) else { return nil }
            self = match.field
        }
    }

    /// An ASCII upper-case letter in lower case; any other byte as it is.
    private static func lowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
    }

    /// `Content-Length`, possibly a list or repeated: every value must be the same number.
    private mutating func takeContentLength(_ value: String) {
        for part in value.split(separator: ",", omittingEmptySubsequences: false) {
            guard let length = Self.digits(part.trimmingCharacters(in: " \t")) else {
                framingProblem = "the response's Content-Length '\(value.prefix(40))' is not a number"
                continue
            }
            if let contentLength, contentLength != length {
                framingProblem = "the response has two different Content-Length values (\(contentLength) and \(length))"
            }
            contentLength = contentLength ?? length
        }
    }

    /// `Retry-After` in milliseconds, from seconds or an HTTP date, at most `maximumSpan`. A date counts from the
    /// response's `Date`, on the server's own clock, else from `now` (Unix ms): a client clock an hour off would wait
    /// an hour more, or not at all.
    func retryAfterMilliseconds(now: Int64) -> Int64? {
        guard let retryAfter else { return nil }
        if let seconds = Self.deltaSeconds(retryAfter) { return seconds * 1000 }
        guard let retryDate = Self.parseDate(retryAfter) else { return nil }
        let sent = date.flatMap(Self.parseDate) ?? now
        return min(max(0, retryDate.saturatingSubtract(sent)), Self.maximumSpan)
    }

    /// The `max-age` directive in seconds (at most 2^31), if present; one that is not a number gives 0, so the
    /// response is stale at once (RFC 9111 section 4.2.1).
    var maxAge: Int64? {
        guard let directive = cacheDirectives.first(where: { $0.name == "max-age" }) else { return nil }
        return directive.value.flatMap(Self.deltaSeconds) ?? 0
    }

    func has(_ directive: String) -> Bool { cacheDirectives.contains { $0.name == directive } }

    /// `Vary: *`: the response matches no later request, so it is never reused (RFC 9111 section 4.1).
    var variesOnEverything: Bool {
        Self.members(of: vary).contains("*")
    }

    /// The members of a comma-separated header value, trimmed and lowercased, empty ones left out.
    private static func members(of value: String?) -> [String] {
        (value ?? "").split(separator: ",").map { $0.trimmingCharacters(in: " \t").lowercased() }.filter { !$0.isEmpty }
    }

    /// The codings applied to the body, in order, lowercased (`identity` left out).
    private var codings: [String] {
        Self.members(of: contentEncoding).filter { $0 != "identity" }
    }

    /// Whether a coding other than `identity` was applied to the body.
    var isEncoded: Bool { !codings.isEmpty }

    /// The codings the daemon asks for (`Accept-Encoding`): gzip and deflate, and br when this libcurl decodes it.
    static let decodedCodings = ["gzip", "deflate"]
        + (Int(pf_version_info().pointee.features) & Int(CURL_VERSION_BROTLI) != 0 ? ["br"] : [])

    /// The first coding applied to the body that the daemon did not ask for, if any.
    var undecodableCoding: String? {
        codings.first { $0 != "x-gzip" && !Self.decodedCodings.contains($0) }
    }

    /// When the response stops being fresh (Unix ms), per RFC 9111 section 4.2: the freshness lifetime from
    /// `max-age` (`s-maxage` is for shared caches and ignored), else `Expires` − `Date`, else 10% of the time since
    /// `Last-Modified` (at most `heuristicCap`), else `defaultTTL`; minus the response's current age (`Age`, `Date`).
    /// `no-cache`, `no-store` and `Vary: *` make it stale at once. The result is within `now...now + maximumSpan`.
    func freshUntil(now: Int64, defaultTTL: Int64, heuristicCap: Int64 = 86_400_000) -> Int64 {
        if has("no-store") || has("no-cache") || variesOnEverything { return now }
        let dateValue = date.flatMap(Self.parseDate) ?? now
        let currentAge = max(now.saturatingSubtract(dateValue), (age ?? 0) * 1000, 0)
        let lifetime: Int64
        if let maxAge {
            lifetime = maxAge * 1000
        } else if let expires {
            // An invalid Expires means already expired.
            lifetime = Self.parseDate(expires).map { $0.saturatingSubtract(dateValue) } ?? 0
        } else if let lastModified, let modified = Self.parseDate(lastModified), modified < dateValue {
            lifetime = min(dateValue.saturatingSubtract(modified) / 10, heuristicCap)
        } else {
            lifetime = defaultTTL
        }
        let remaining = min(max(0, lifetime.saturatingSubtract(currentAge)), Self.maximumSpan)
        return now.saturatingAdd(remaining)
    }

    /// The response may be delivered but not kept for later hits.
    var noStore: Bool { has("no-store") || variesOnEverything }
    /// A stale copy must never be served, not even when revalidation fails (RFC 9111: `no-cache` too).
    var mustRevalidate: Bool { has("must-revalidate") || has("proxy-revalidate") || has("no-cache") }

    /// What a `206` body is, judged against the request: it was asked for from byte `offset` to the end (0: no range
    /// was asked for). Anything but the rest from `offset`, or the whole file, is refused.
    func partialBody(requestedFrom offset: Int64) -> PartialBody {
        guard let contentRange, let range = ContentRange(contentRange) else {
            return .mismatch("the server answered 206 without a valid Content-Range ('\((contentRange ?? "").prefix(60))')")
        }
        guard !isEncoded else {
            return .mismatch("the server answered 206 with a Content-Encoding: its range is not one of the file's bytes")
        }
        if offset > 0, range.first == offset, range.complete.map({ range.last + 1 == $0 }) ?? true {
            return .rest(bytes: range.last - range.first + 1)
        }
        if range.first == 0, let complete = range.complete, range.last + 1 == complete {
            return .whole(bytes: complete)
        }
        let asked = offset > 0 ? "the bytes from \(offset)" : "the whole file"
        return .mismatch("the server answered a request for \(asked) with Content-Range: \(contentRange.prefix(60))")
    }

    /// The server said it serves no byte ranges of this resource (`Accept-Ranges: none`, RFC 9110 section 14.3): a
    /// download of it cannot be resumed, and asking would cost a request.
    var refusesRanges: Bool {
        acceptRanges != nil && !Self.members(of: acceptRanges).contains("bytes")
    }

    /// `Last-Modified` when it is a strong validator (RFC 9110 section 8.8.2.2): the response's `Date` is a second or
    /// more later, so the file cannot have changed again within the second it names. Only a strong one may be an
    /// `If-Range` (section 13.1.5): a file replaced within that second, rest and all, would be joined to the bytes kept.
    var strongLastModified: String? {
        guard let lastModified, let date, let modified = Self.parseDate(lastModified), let sent = Self.parseDate(date),
              sent.saturatingSubtract(modified) >= 1000 else { return nil }
        return lastModified
    }

    /// An HTTP date as Unix ms (curl's date parser); dates past the year 292 million saturate.
    static func parseDate(_ text: String) -> Int64? {
        let seconds = curl_getdate(text, nil)
        return seconds < 0 ? nil : Int64(seconds).saturatingMultiply(1000)
    }

    /// RFC 9111 delta-seconds: digits only, a value above 2^31 taken as 2^31.
    static func deltaSeconds(_ text: some StringProtocol) -> Int64? {
        digits(text).map { min($0, maximumDeltaSeconds) }
    }

    /// A non-empty run of ASCII digits as a number, `Int64.max` when it does not fit; nil for anything else.
    static func digits(_ text: some StringProtocol) -> Int64? {
        guard !text.isEmpty else { return nil }
        var value: Int64 = 0
        for byte in text.utf8 {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            value = value.saturatingMultiply(10).saturatingAdd(Int64(byte - UInt8(ascii: "0")))
        }
        return value
    }
}

/// One `Cache-Control` directive: its name in lower case, and its value without quotes, if it has one.
struct CacheDirective: Equatable {
    let name: String
    let value: String?

    /// The directives of one header value, comma-separated.
    static func list(_ text: String) -> [CacheDirective] {
        text.split(separator: ",").map { part in
            // Not omitting empty pieces: `=` alone has a name, empty (the fuzzer found the index out of range).
            let pieces = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return CacheDirective(name: pieces[0].trimmingCharacters(in: " \t").lowercased(),
                                  value: pieces.count > 1 ? String(pieces[1].trimmingCharacters(in: " \t\"")) : nil)
        }
    }
}

/// What a `206` response's body is, for a request from a given offset.
enum PartialBody: Equatable {
    /// The rest of the file, from the offset asked for: `bytes` of it.
    case rest(bytes: Int64)
    /// The whole file, from byte 0 (what was held before is dropped): `bytes` in all.
    case whole(bytes: Int64)
    /// Anything else, in words: never appended nor kept.
    case mismatch(String)
}

/// `Content-Range: bytes first-last/complete` (or `/*`), RFC 9110 section 14.4.
struct ContentRange: Equatable {
    let first: Int64
    let last: Int64
    /// The file's length, when the server knows it.
    let complete: Int64?

    init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: " \t")
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst(6).trimmingCharacters(in: " ")
        let halves = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let ends = halves[0].split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        // A value that does not fit is no range of a file this daemon could hold.
        guard ends.count == 2, let first = ResponseHeaders.digits(ends[0]), let last = ResponseHeaders.digits(ends[1]),
              first <= last, last < .max else { return nil }
        if halves[1] == "*" {
            complete = nil
        } else {
            guard let complete = ResponseHeaders.digits(halves[1]), complete < .max, last < complete else { return nil }
            self.complete = complete
        }
        self.first = first
        self.last = last
    }
}

extension StringProtocol {
    /// The text without the leading and trailing Unicode scalars that are in `set`.
    func trimmingCharacters(in set: String) -> Substring {
        var scalars = Substring(self).unicodeScalars[...]
        while let first = scalars.first, set.unicodeScalars.contains(first) { scalars = scalars.dropFirst() }
        while let last = scalars.last, set.unicodeScalars.contains(last) { scalars = scalars.dropLast() }
        return Substring(scalars)
    }
}
