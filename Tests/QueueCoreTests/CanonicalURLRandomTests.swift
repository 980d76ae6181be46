import Testing
@testable import QueueCore

/// Random spellings of random hosts, paths and passwords (seeded, so a failure repeats): one address gets one key,
/// every key parses to itself, no `%` is escaped into `%25`, and redaction hides exactly the password.
@Suite("CanonicalURL, random")
struct CanonicalURLRandomTests {
    static let rounds = 3_000

    @Test("every spelling of a random IPv4 address gives one key: the dotted decimal one")
    func ipv4() throws {
        var random = SplitMix64(seed: 14)
        for _ in 0..<Self.rounds {
            let address = UInt32.random(in: .min ... .max, using: &random)
            let dotted = "\(address >> 24).\(address >> 16 & 0xFF).\(address >> 8 & 0xFF).\(address & 0xFF)"
            let port = Bool.random(using: &random) ? "" : ":\(Int.random(in: 1...65535, using: &random))"
            for _ in 0..<3 {
                let spelling = Self.ipv4Spelling(address, &random)
                let url = try CanonicalURL("http://\(spelling)\(port)/x")
                #expect(url.host == dotted, "\(spelling)")
                #expect(try CanonicalURL(url.key) == url)
            }
        }
    }

    @Test("every spelling of a random IPv6 address gives one key, in RFC 5952 form")
    func ipv6() throws {
        var random = SplitMix64(seed: 5952)
        for _ in 0..<Self.rounds {
            // Zero pieces are common, so that `::` has runs to choose from.
            let pieces = (0..<8).map { _ in Bool.random(using: &random) ? 0 : UInt16.random(in: .min ... .max, using: &random) }
            let plain = "http://[" + pieces.map { String($0, radix: 16) }.joined(separator: ":") + "]/"
            let expected = try CanonicalURL(plain)
            #expect(try CanonicalURL(expected.key) == expected)
            let host = expected.host.dropFirst().dropLast()
            #expect(host.ranges(of: "::").count <= 1, "\(host): one :: at most")
            #expect(host == host.lowercased())
            #expect(!host.split(separator: ":").contains { $0.count > 1 && $0.first == "0" && !$0.contains(".") },
                    "\(host): no leading zeros")
            if host.contains("::") { #expect(host.split(separator: ":").count <= 6, "\(host): :: stands for 2+ pieces") }
            for _ in 0..<3 {
                let spelling = Self.ipv6Spelling(pieces, &random)
                #expect(try CanonicalURL("http://[\(spelling)]/").key == expected.key, "\(spelling)")
            }
        }
    }

    @Test("random paths: keys parse to themselves, and a % is never escaped into %25")
    func paths() throws {
        let pieces = ["%", "%%", "a", "F", "1", "%41", "%7e", "%7E", "%zz", "%2f", "%25", "/", ".", "..", "é", " ", "?",
                      "%4", "%A", "@", ":", "~"]
        var random = SplitMix64(seed: 3986)
        for _ in 0..<Self.rounds * 3 {
            let path = (0..<Int.random(in: 1...12, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
            let text = "http://h.example/" + path
            let url = try CanonicalURL(text)
            #expect(try CanonicalURL(url.key) == url, "\(text) -> \(url.key)")
            #expect(!url.key.contains("%25") || text.contains("%25"), "\(text) -> \(url.key)")
        }
    }

    @Test("random userinfo: the key keeps it; redaction leaves exactly user:***@ and the rest of the key")
    func passwords() throws {
        let alphabet = Array("abcXYZ019-._~!$&'()*+,;=%:é ")
        var random = SplitMix64(seed: 3)
        for _ in 0..<Self.rounds {
            func word() -> String {
                String((0..<Int.random(in: 1...10, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
            }
            let url = try CanonicalURL("https://\(word()):\(word())@h.example/p?q")
            let userinfo = url.key.dropFirst("https://".count).prefix { $0 != "@" }
            let user = userinfo.prefix { $0 != ":" }
            let shown = CanonicalURL.redactingUserinfo(in: url.key)
            #expect(shown == "https://\(user):***@h.example/p?q", "\(url.key)")
            #expect(CanonicalURL.redactingUserinfo(in: shown) == shown)
        }
    }

    /// `address` as WHATWG URL and curl read it: one to four parts, each decimal, octal or hex, maybe a final dot.
    static func ipv4Spelling(_ address: UInt32, _ random: inout SplitMix64) -> String {
        let count = Int.random(in: 1...4, using: &random)
        var parts: [UInt32] = (0..<(count - 1)).map { address >> (8 * (3 - $0)) & 0xFF }
        parts.append(count == 1 ? address : address & (UInt32.max >> (8 * (count - 1))))
        let text = parts.map { part -> String in
            switch Int.random(in: 0..<3, using: &random) {
            case 0: return String(part)
            case 1: return (Bool.random(using: &random) ? "0x" : "0X") + String(part, radix: 16, uppercase: Bool.random(using: &random))
            default: return "0" + String(part, radix: 8)
            }
        }.joined(separator: ".")
        return Bool.random(using: &random) ? text + "." : text
    }

    /// `pieces` as RFC 4291 allows: leading zeros or not, either case, `::` for any run of zeros, maybe the last
    /// 32 bits in dotted decimal.
    static func ipv6Spelling(_ pieces: [UInt16], _ random: inout SplitMix64) -> String {
        let dotted = Bool.random(using: &random)
        let hexCount = dotted ? 6 : 8
        var tokens = pieces.prefix(hexCount).map { piece -> String in
            let hex = String(piece, radix: 16, uppercase: Bool.random(using: &random))
            return String(repeating: "0", count: Int.random(in: 0...(4 - hex.count), using: &random)) + hex
        }
        if dotted { tokens.append("\(pieces[6] >> 8).\(pieces[6] & 0xFF).\(pieces[7] >> 8).\(pieces[7] & 0xFF)") }
        // Runs of zero pieces among the hex ones; one of them (or part of it) may become `::`.
        var runs: [Range<Int>] = []
        var index = 0
        while index < hexCount {
            guard pieces[index] == 0 else { index += 1; continue }
            let start = index
            while index < hexCount, pieces[index] == 0 { index += 1 }
            runs.append(start..<index)
        }
        guard let run = runs.randomElement(using: &random), Bool.random(using: &random) else {
            return tokens.joined(separator: ":")
        }
        let start = Int.random(in: run, using: &random)
        let end = Int.random(in: (start + 1)...run.upperBound, using: &random)
        return tokens[..<start].joined(separator: ":") + "::" + tokens[end...].joined(separator: ":")
    }
}
