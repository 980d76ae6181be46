/// Hiding passwords: the one function everything that shows a URL to a person goes through.
extension CanonicalURL {
    /// `text` with the userinfo of every `scheme://userinfo@host` in it hidden: `user:password@` becomes `user:***@`,
    /// and a userinfo without a password (often a token) becomes `***@`.
    ///
    /// It works on any text, not only on one URL: a log message, or a JSON line (escape pairs such as `\"` count as
    /// part of the userinfo, so the line stays valid JSON). Text that already shows `***` stays as it is.
    public static func redactingUserinfo(in text: String) -> String {
        guard text.utf8.contains(UInt8(ascii: "@")) else { return text }
        return String(decoding: redactingUserinfo(in: Array(text.utf8)), as: UTF8.self)
    }

    /// `redactingUserinfo(in:)` over UTF-8 bytes.
    public static func redactingUserinfo(in bytes: [UInt8]) -> [UInt8] {
        guard bytes.contains(UInt8(ascii: "@")) else { return bytes }
        var out: [UInt8] = []
        var copied = bytes.startIndex
        var i = bytes.startIndex
        while i + 2 < bytes.endIndex {
            let slash = UInt8(ascii: "/")
            guard bytes[i] == UInt8(ascii: ":"), bytes[i + 1] == slash, bytes[i + 2] == slash else {
                i += 1
                continue
            }
            let start = i + 3
            let (end, at) = authorityEnd(bytes, from: start)
            if let at, at > start {
                let colon = bytes[start..<at].firstIndex(of: UInt8(ascii: ":"))
                let hidden = colon.map { $0 + 1 } ?? start
                if out.isEmpty { out.reserveCapacity(bytes.count) }
                out += bytes[copied..<hidden]
                out += Array("***".utf8)
                copied = at
            }
            // The authority ends at a `/`, which may begin the next `://` (`http://a@b://…`).
            i = max(start, end - 1)
        }
        guard copied > bytes.startIndex else { return bytes }
        out += bytes[copied...]
        return out
    }

    /// Where the authority starting at `start` ends (at `/`, `?`, `#`, a quote, a control character or a space),
    /// and its last `@`, if any. A userinfo may hold spaces (the parser takes `http://us er:secret@host/` and encodes
    /// them), a host may not: a space before any `@` with an `@` after it belongs to the userinfo, and the authority
    /// ends at the first space after the last `@`. (Prose with an `@` further on is hidden too, which is harmless.)
    private static func authorityEnd(_ bytes: [UInt8], from start: Int) -> (end: Int, at: Int?) {
        var at: Int? = nil
        var firstSpace: (index: Int, at: Int?)? = nil, spaceAfterAt: Int? = nil
        var j = start
        while j < bytes.endIndex {
            let b = bytes[j]
            if b < 0x20 || b == 0x7F || b == UInt8(ascii: "/") || b == UInt8(ascii: "?") || b == UInt8(ascii: "#")
                || b == UInt8(ascii: "\"") {
                break
            }
            if b == 0x20 {
                if firstSpace == nil { firstSpace = (j, at) }
                if spaceAfterAt == nil { spaceAfterAt = j }
            }
            if b == UInt8(ascii: "\\") {
                // A JSON escape pair; `\/` is an escaped slash and ends the authority.
                guard j + 1 < bytes.endIndex, bytes[j + 1] != UInt8(ascii: "/") else { break }
                j += 2
                continue
            }
            if b == UInt8(ascii: "@") {
                at = j
                spaceAfterAt = nil
            }
            j += 1
        }
        guard let firstSpace else { return (min(j, bytes.endIndex), at) }
        if firstSpace.at != nil || at == nil { return (firstSpace.index, firstSpace.at) }
        return (spaceAfterAt ?? min(j, bytes.endIndex), at)
    }
}
