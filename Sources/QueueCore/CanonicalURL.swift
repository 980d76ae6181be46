/// A URL in the canonical form that serves as its dedup key: scheme and host lowercased, IP addresses in one form
/// (IPv4 dotted decimal, IPv6 per RFC 5952), default port dropped, fragment dropped, dot segments removed,
/// percent-encoding normalised. Pure string work, no Foundation.
public struct CanonicalURL: Hashable, Sendable, CustomStringConvertible {
    /// Lowercased scheme, e.g. `https`.
    public let scheme: String
    /// Lowercased host; IPv4 addresses in dotted decimal, IPv6 literals in RFC 5952 form inside their brackets.
    public let host: String
    /// The explicit port, or nil when it is the scheme's default.
    public let port: Int?
    /// The whole canonical URL: the dedup key, and what is fetched.
    ///
    /// It keeps the userinfo, password included: curl needs it to fetch (also from the durable backlog after a
    /// restart), and two users' credentials may be allowed different content, so they must not share one cache entry.
    /// Whatever shows a key to a person (log lines, replies, events) passes it through `redactingUserinfo(in:)`.
    public let key: String

    /// `host` or `host:port`: what per-host limits count.
    public var authority: String { port.map { "\(host):\($0)" } ?? host }
    public var description: String { key }

    public enum ParseError: Error, Equatable, Sendable {
        case empty
        case tooLong
        case noScheme
        case schemeNotAllowed(String)
        case invalid(String)

        public var message: String {
            switch self {
            case .empty: return "the URL is empty"
            case .tooLong: return "the URL is longer than \(CanonicalURL.maximumLength) bytes"
            case .noScheme: return "the URL has no scheme (expected http:// or https://)"
            case .schemeNotAllowed(let scheme): return "the scheme \(scheme): is not allowed (only http and https)"
            case .invalid(let why): return "the URL is not valid: \(why)"
            }
        }
    }

    public static let maximumLength = 8192
    static let defaultPorts = ["http": 80, "https": 443]
    public static let webSchemes: Set<String> = ["http", "https"]

    /// Parses `text`, accepting only the `allowedSchemes` (lowercase).
    public init(_ text: String, allowedSchemes: Set<String> = webSchemes) throws(ParseError) {
        var bytes = Array(text.utf8)
        while let last = bytes.last, last == 0x20 || last == 0x09 || last == 0x0A || last == 0x0D { bytes.removeLast() }
        let leading = bytes.prefix { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }.count
        bytes.removeFirst(leading)
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= Self.maximumLength else { throw .tooLong }
        if let bad = bytes.first(where: { $0 < 0x20 || $0 == 0x7F }) {
            throw .invalid("control character 0x\(String(bad, radix: 16)) in the URL")
        }

        // scheme ":"
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0,
              Self.isAlpha(bytes[0]),
              bytes[..<colon].allSatisfy({ Self.isAlpha($0) || Self.isDigit($0) || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E })
        else { throw .noScheme }
        let scheme = String(decoding: bytes[..<colon].map(Self.lowercased), as: UTF8.self)
        guard allowedSchemes.contains(scheme) else { throw .schemeNotAllowed(scheme) }
        var rest = bytes[(colon + 1)...]
        guard rest.starts(with: "//".utf8) else { throw .invalid("expected // after \(scheme):") }
        rest = rest.dropFirst(2)

        // authority: up to the first "/", "?" or "#"
        let authorityEnd = rest.firstIndex { $0 == 0x2F || $0 == 0x3F || $0 == 0x23 } ?? rest.endIndex
        var authority = rest[rest.startIndex..<authorityEnd]
        rest = rest[authorityEnd...]
        var userinfo: [UInt8]? = nil
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) {
            userinfo = Self.normalisePercent(authority[authority.startIndex..<at], keep: .userinfo)
            authority = authority[(at + 1)...]
        }
        let (host, port) = try Self.parseHostPort(authority, scheme: scheme)

        // path, query; the fragment is dropped
        let fragmentStart = rest.firstIndex(of: UInt8(ascii: "#")) ?? rest.endIndex
        rest = rest[rest.startIndex..<fragmentStart]
        let queryStart = rest.firstIndex(of: UInt8(ascii: "?")) ?? rest.endIndex
        var path = Self.normalisePercent(rest[rest.startIndex..<queryStart], keep: .path)
        path = Self.removeDotSegments(path)
        if path.isEmpty { path = [UInt8(ascii: "/")] }
        let query = queryStart < rest.endIndex
            ? Self.normalisePercent(rest[(queryStart + 1)...], keep: .query) : nil

        var key: [UInt8] = []
        key.reserveCapacity(bytes.count + 16)
        key.append(contentsOf: scheme.utf8)
        key.append(contentsOf: "://".utf8)
        if let userinfo {
            key.append(contentsOf: userinfo)
            key.append(UInt8(ascii: "@"))
        }
        key.append(contentsOf: host.utf8)
        if let port {
            key.append(UInt8(ascii: ":"))
            key.append(contentsOf: String(port).utf8)
        }
        key.append(contentsOf: path)
        if let query {
            key.append(UInt8(ascii: "?"))
            key.append(contentsOf: query)
        }
        // Percent-encoding can make the key longer than the text; a key must parse again (found by Fuzz/).
        guard key.count <= Self.maximumLength else { throw .tooLong }

        self.scheme = scheme
        self.host = host
        self.port = port
        self.key = String(decoding: key, as: UTF8.self)
    }

    /// Decodes percent-escapes of unreserved characters, uppercases the others, and escapes every byte not in `keep`.
    /// A `%` that starts no escape (`%zz`, a final `%`) stays as it was sent: escaping it would ask for another URL.
    /// An escape right after such a `%` stays encoded when decoding it would make a new escape with that `%`
    /// (`%%41` must not become `%A`), so a key parses to itself.
    private static func normalisePercent(_ bytes: ArraySlice<UInt8>, keep: ByteClass) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var loneSign: Int? = nil   // where the last `%` that starts no escape went in `out`
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let b = bytes[i]
            guard b == UInt8(ascii: "%") else {
                if keep.contains(b) { out.append(b) } else { appendEscape(b, to: &out) }
                i += 1
                continue
            }
            guard i + 2 < bytes.endIndex, let hi = hexValue(bytes[i + 1]), let lo = hexValue(bytes[i + 2]) else {
                loneSign = out.count
                out.append(b)
                i += 1
                continue
            }
            let decoded = hi << 4 | lo
            let joinsLoneSign = loneSign.map { out.count - $0 <= 2 } ?? false
            if isUnreserved(decoded), !(joinsLoneSign && isHexDigit(decoded)) {
                out.append(decoded)
            } else {
                appendEscape(decoded, to: &out)
            }
            i += 3
        }
        return out
    }

    /// RFC 3986 section 5.2.4.
    private static func removeDotSegments(_ path: [UInt8]) -> [UInt8] {
        guard hasDotSegment(path) else { return path }
        let absolute = path.first == UInt8(ascii: "/")
        let segments = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst(absolute ? 1 : 0)
        var output: [ArraySlice<UInt8>] = []
        var trailingSlash = false
        for segment in segments {
            trailingSlash = false
            if segment.elementsEqual(".".utf8) {
                trailingSlash = true
            } else if segment.elementsEqual("..".utf8) {
                if !output.isEmpty { output.removeLast() }
                trailingSlash = true
            } else {
                output.append(segment)
            }
        }
        var result: [UInt8] = absolute ? [UInt8(ascii: "/")] : []
        result += output.joined(separator: [UInt8(ascii: "/")])
        if trailingSlash, result.last != UInt8(ascii: "/") { result.append(UInt8(ascii: "/")) }
        return result
    }

    /// Whether a segment of `path` is `.` or `..` (a dot in a name, `a.jpg`, is none).
    private static func hasDotSegment(_ path: [UInt8]) -> Bool {
        let dot = UInt8(ascii: "."), slash = UInt8(ascii: "/")
        var start = 0
        while start <= path.count {
            let end = path[start...].firstIndex(of: slash) ?? path.count
            let length = end - start
            if (length == 1 || length == 2), path[start..<end].allSatisfy({ $0 == dot }) { return true }
            start = end + 1
        }
        return false
    }

    private static func appendEscape(_ b: UInt8, to out: inout [UInt8]) {
        out += [UInt8(ascii: "%"), hexDigits[Int(b >> 4)], hexDigits[Int(b & 0xF)]]
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case 0x30...0x39: return b - 0x30
        case 0x41...0x46: return b - 0x41 + 10
        case 0x61...0x66: return b - 0x61 + 10
        default: return nil
        }
    }

    static func isAlpha(_ b: UInt8) -> Bool { (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b) }
    static func isDigit(_ b: UInt8) -> Bool { (0x30...0x39).contains(b) }
    static func isHexDigit(_ b: UInt8) -> Bool { hexValue(b) != nil }
    static func lowercased(_ b: UInt8) -> UInt8 { (0x41...0x5A).contains(b) ? b + 0x20 : b }
    static func isUnreserved(_ b: UInt8) -> Bool {
        isAlpha(b) || isDigit(b) || b == 0x2D || b == 0x2E || b == 0x5F || b == 0x7E
    }
    static func isSubDelim(_ b: UInt8) -> Bool { "!$&'()*+,;=".utf8.contains(b) }

    /// The bytes a part of the URL keeps as they are (RFC 3986); any other is percent-encoded. Looked up in a table
    /// made once: a byte is tested for each byte of every URL.
    struct ByteClass {
        private let member: [Bool]

        init(_ test: (UInt8) -> Bool) { member = (0...255).map { test(UInt8($0)) } }

        func contains(_ b: UInt8) -> Bool { member[Int(b)] }

        static let userinfo = ByteClass { isUnreserved($0) || isSubDelim($0) || $0 == 0x3A }
        static let path = ByteClass { userinfo.contains($0) || $0 == 0x40 || $0 == 0x2F }
        static let query = ByteClass { path.contains($0) || $0 == 0x3F }
    }
}
