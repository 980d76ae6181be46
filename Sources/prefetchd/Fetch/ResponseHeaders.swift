import CCurl

/// The headers of the final response that matter to the cache (a redirect's headers are discarded).
struct ResponseHeaders: Equatable {
    var contentType: String?
    var contentLength: Int64?
    var etag: String?
    var lastModified: String?
    var cacheControl: String?
    var expires: String?
    var date: String?
    var age: Int64?
    var retryAfter: String?

    /// Takes one raw header line; a status line starts a new response.
    mutating func take(_ line: Substring) {
        if line.hasPrefix("HTTP/") {
            self = ResponseHeaders()
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = line[..<colon].lowercased()
        let value = String(line[line.index(after: colon)...].trimmingCharacters(in: " \t\r\n"))
        switch name {
        case "content-type": contentType = value
        case "content-length": contentLength = Int64(value)
        case "etag": etag = value
        case "last-modified": lastModified = value
        case "cache-control": cacheControl = cacheControl.map { $0 + ", " + value } ?? value
        case "expires": expires = value
        case "date": date = value
        case "age": age = Int64(value)
        case "retry-after": retryAfter = value
        default: break
        }
    }

    /// `Retry-After` in milliseconds from `now` (Unix ms), from seconds or an HTTP date.
    func retryAfterMilliseconds(now: Int64) -> Int64? {
        guard let retryAfter else { return nil }
        if let seconds = Int64(retryAfter) { return max(0, seconds) * 1000 }
        guard let date = Self.parseDate(retryAfter) else { return nil }
        return max(0, date - now)
    }

    /// The `max-age` directive, in seconds, if present.
    var maxAge: Int64? {
        directives.first { $0.name == "max-age" }.flatMap { $0.value.flatMap { Int64($0) } }
    }

    func has(_ directive: String) -> Bool { directives.contains { $0.name == directive } }

    private var directives: [(name: String, value: String?)] {
        (cacheControl ?? "").split(separator: ",").map { (part: Substring) -> (name: String, value: String?) in
            let pieces: [Substring] = part.split(separator: "=", maxSplits: 1)
            let name = String(pieces[0].trimmingCharacters(in: " \t")).lowercased()
            let value = pieces.count > 1 ? String(pieces[1].trimmingCharacters(in: " \t\"")) : nil
            return (name, value)
        }
    }

    /// When the response stops being fresh (Unix ms), per RFC 9111 section 4.2: the freshness lifetime from
    /// `max-age` (`s-maxage` is for shared caches and ignored), else `Expires` − `Date`, else 10% of the time since
    /// `Last-Modified` (at most `heuristicCap`), else `defaultTTL`; minus the response's current age (`Age`, `Date`).
    /// `no-cache` and `no-store` make it stale at once.
    func freshUntil(now: Int64, defaultTTL: Int64, heuristicCap: Int64 = 86_400_000) -> Int64 {
        if has("no-store") || has("no-cache") { return now }
        let dateValue = date.flatMap(Self.parseDate) ?? now
        let currentAge = max(max(0, now - dateValue), (age ?? 0) * 1000)
        let lifetime: Int64
        if let maxAge {
            lifetime = maxAge * 1000
        } else if let expires {
            lifetime = Self.parseDate(expires).map { $0 - dateValue } ?? 0  // an invalid Expires means already expired
        } else if let lastModified, let modified = Self.parseDate(lastModified), modified < dateValue {
            lifetime = min((dateValue - modified) / 10, heuristicCap)
        } else {
            lifetime = defaultTTL
        }
        return now + max(0, lifetime - currentAge)
    }

    /// The response may be delivered but not kept for later hits.
    var noStore: Bool { has("no-store") }
    /// A stale copy must never be served, not even when revalidation fails.
    var mustRevalidate: Bool { has("must-revalidate") || has("proxy-revalidate") }

    /// An HTTP date as Unix ms (curl's date parser).
    static func parseDate(_ text: String) -> Int64? {
        let seconds = curl_getdate(text, nil)
        return seconds < 0 ? nil : Int64(seconds) * 1000
    }
}

extension StringProtocol {
    func trimmingCharacters(in set: String) -> Substring {
        let chars = Set(set)
        var slice = Substring(self)
        while let first = slice.first, chars.contains(first) { slice.removeFirst() }
        while let last = slice.last, chars.contains(last) { slice.removeLast() }
        return slice
    }
}
