import Testing
@testable import QueueCore

/// A `ParseError` without the free-text reason of `.invalid`, so expectations stay readable.
enum ErrorKind: Equatable, CustomStringConvertible {
    case empty, tooLong, noScheme, schemeNotAllowed(String), invalid

    init(_ error: CanonicalURL.ParseError) {
        switch error {
        case .empty: self = .empty
        case .tooLong: self = .tooLong
        case .noScheme: self = .noScheme
        case .schemeNotAllowed(let scheme): self = .schemeNotAllowed(scheme)
        case .invalid: self = .invalid
        }
    }

    var description: String {
        switch self {
        case .empty: "empty"
        case .tooLong: "tooLong"
        case .noScheme: "noScheme"
        case .schemeNotAllowed(let scheme): "schemeNotAllowed(\(scheme))"
        case .invalid: "invalid"
        }
    }
}

/// A URL text as a test argument: shown escaped and shortened in test output, so control characters and very long
/// inputs do not land in the log as they are.
struct URLText: ExpressibleByStringLiteral, CustomTestStringConvertible, Sendable {
    var text: String
    init(_ text: String) { self.text = text }
    init(stringLiteral text: String) { self.text = text }
    var testDescription: String {
        let escaped = text.debugDescription
        return escaped.count <= 80 ? escaped : "\(escaped.prefix(60))… (\(text.utf8.count) bytes)"
    }
}

/// The key for `text`, or the kind of error it gave.
func parse(_ text: String) -> Result<String, CanonicalURL.ParseError> {
    do { return .success(try CanonicalURL(text).key) } catch { return .failure(error) }
}

@Suite("CanonicalURL")
struct CanonicalURLTests {
    /// A host name label of `count` letters.
    static func label(_ count: Int) -> String { String(repeating: "a", count: count) }
    /// Three labels of 63 letters and one of `lastLabel`: 192 characters and the last label.
    static func name(lastLabel: Int) -> String { [label(63), label(63), label(63), label(lastLabel)].joined(separator: ".") }

    @Test("scheme and host are lowercased, path case is preserved", arguments: [
        ("HTTP://Example.COM/Path/To/File.JPG", "http://example.com/Path/To/File.JPG"),
        ("hTtPs://EXAMPLE.com", "https://example.com/"),
        ("http://Sub-Domain_1.Example.org/A?B=C", "http://sub-domain_1.example.org/A?B=C"),
    ])
    func caseNormalisation(input: String, key: String) throws {
        #expect(try CanonicalURL(input).key == key)
    }

    @Test("ports: defaults dropped, others kept, leading zeros and empty ports normalised", arguments: [
        ("http://example.com:80/x", "http://example.com/x"),
        ("https://example.com:443/x", "https://example.com/x"),
        ("http://example.com:443/x", "http://example.com:443/x"),
        ("https://example.com:80/x", "https://example.com:80/x"),
        ("http://example.com:8080/x", "http://example.com:8080/x"),
        ("http://example.com:65535/", "http://example.com:65535/"),
        ("http://example.com:1/", "http://example.com:1/"),
        ("http://example.com:0080/x", "http://example.com/x"),
        ("http://example.com:08080/x", "http://example.com:8080/x"),
        ("http://example.com:0000000443/x", "http://example.com:443/x"),
        ("https://example.com:000000000443/x", "https://example.com/x"),
        ("http://example.com:/x", "http://example.com/x"),
        ("http://a:/", "http://a/"),
        ("http://a:", "http://a/"),
    ])
    func ports(input: String, key: String) throws {
        #expect(try CanonicalURL(input).key == key)
    }

    @Test("fragments are dropped, queries kept", arguments: [
        ("http://example.com/x#frag", "http://example.com/x"),
        ("http://example.com#frag", "http://example.com/"),
        ("http://example.com/x?q=1#frag", "http://example.com/x?q=1"),
        ("http://example.com/a?b#c?d", "http://example.com/a?b"),
        ("http://example.com/a#b/../c", "http://example.com/a"),
        ("http://example.com/x?", "http://example.com/x?"),
        ("http://example.com?q", "http://example.com/?q"),
        ("http://example.com/x?a=1&b=2&a=0", "http://example.com/x?a=1&b=2&a=0"),
        ("http://example.com/x?next=/a/../b?c:d@e", "http://example.com/x?next=/a/../b?c:d@e"),
    ])
    func fragmentsAndQueries(input: String, key: String) throws {
        #expect(try CanonicalURL(input).key == key)
    }

    @Test("percent-encoding is normalised", arguments: [
        ("http://example.com/%7e", "http://example.com/~"),
        ("http://example.com/%7Euser/", "http://example.com/~user/"),
        ("http://example.com/%41%42%63", "http://example.com/ABc"),
        ("http://example.com/%2D%2e%5F%7E%30", "http://example.com/-._~0"),
        ("http://example.com/a%2fb", "http://example.com/a%2Fb"),
        ("http://example.com/a%2Fb", "http://example.com/a%2Fb"),
        ("http://example.com/%3d%3F%23", "http://example.com/%3D%3F%23"),
        ("http://example.com/%c3%a9", "http://example.com/%C3%A9"),
        ("http://example.com/é", "http://example.com/%C3%A9"),
        ("http://example.com/日本", "http://example.com/%E6%97%A5%E6%9C%AC"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("http://example.com/a%20b", "http://example.com/a%20b"),
        ("http://example.com/%25", "http://example.com/%25"),
        ("http://example.com/%2541", "http://example.com/%2541"),
        ("http://example.com/a\"<>\\^`{|}", "http://example.com/a%22%3C%3E%5C%5E%60%7B%7C%7D"),
        ("http://example.com/!$&'()*+,;=:@", "http://example.com/!$&'()*+,;=:@"),
        ("http://example.com/x?q=a b&r=%7e&s=%2f&t=é", "http://example.com/x?q=a%20b&r=~&s=%2F&t=%C3%A9"),
    ])
    func percentEncoding(input: String, key: String) throws {
        #expect(try CanonicalURL(input).key == key)
    }

    @Test("%zz in a path reached the server as %25zz: a % that starts no escape is kept as sent", arguments: [
        ("http://example.com/%zz", "http://example.com/%zz"),
        ("http://example.com/%", "http://example.com/%"),
        ("http://example.com/%4", "http://example.com/%4"),
        ("http://example.com/100%", "http://example.com/100%"),
        ("http://example.com/a%g1b", "http://example.com/a%g1b"),
        ("http://example.com/100%?q=5%&r=%zz", "http://example.com/100%?q=5%&r=%zz"),
        ("http://us%er:p%@example.com/", "http://us%er:p%@example.com/"),
        ("http://example.com/%zz%7e", "http://example.com/%zz~"),
        ("http://example.com/%%7e", "http://example.com/%~"),
        // Decoding %41 right after a lone % would make a new escape (%A…), another URL: it stays encoded.
        ("http://example.com/%%41", "http://example.com/%%41"),
        ("http://example.com/%%411", "http://example.com/%%411"),
        ("http://example.com/%A%31", "http://example.com/%A%31"),
        ("http://example.com/%%%41", "http://example.com/%%%41"),
    ])
    func lonePercentSigns(input: String, key: String) throws {
        let url = try CanonicalURL(input)
        #expect(url.key == key)
        #expect(try CanonicalURL(url.key) == url)
    }

    @Test("empty path becomes /, dot segments are removed (RFC 3986 5.2.4)", arguments: [
        ("http://example.com", "http://example.com/"),
        ("http://example.com/", "http://example.com/"),
        ("http://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/a/b/c/./../../g", "http://example.com/a/g"),
        ("http://example.com/../a", "http://example.com/a"),
        ("http://example.com/../../a/../../b", "http://example.com/b"),
        ("http://example.com/a/..", "http://example.com/"),
        ("http://example.com/a/b/..", "http://example.com/a/"),
        ("http://example.com/a/.", "http://example.com/a/"),
        ("http://example.com/.", "http://example.com/"),
        ("http://example.com/./a", "http://example.com/a"),
        ("http://example.com/a/%2e%2E/b", "http://example.com/b"),
        ("http://example.com/a/%2e/b", "http://example.com/a/b"),
        ("http://example.com/a/.../b", "http://example.com/a/.../b"),
        ("http://example.com/a/..b/.c", "http://example.com/a/..b/.c"),
        ("http://example.com/a//b/../c", "http://example.com/a//c"),
        ("http://example.com/a/b/../", "http://example.com/a/"),
        ("http://example.com/a.b/c/", "http://example.com/a.b/c/"),
        ("http://example.com/a%2F..%2Fb", "http://example.com/a%2F..%2Fb"),
    ])
    func paths(input: String, key: String) throws {
        #expect(try CanonicalURL(input).key == key)
    }

    @Test("userinfo is kept (case and all), percent-normalised", arguments: [
        ("http://user:pass@Example.com/", "http://user:pass@example.com/"),
        ("http://User@example.com:80/", "http://User@example.com/"),
        ("http://us%65r:p%7ess@example.com/", "http://user:p~ss@example.com/"),
        ("http://a@b@example.com/", "http://a%40b@example.com/"),
        ("http://@example.com/", "http://@example.com/"),
    ])
    func userinfo(input: String, key: String) throws {
        #expect(try CanonicalURL(input).key == key)
    }

    @Test("IPv6 and IPv4 literals", arguments: [
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("http://[FE80::1]/", "http://[fe80::1]/"),
        ("http://[::1]:80/", "http://[::1]/"),
        ("https://[2001:DB8::A]:443", "https://[2001:db8::a]/"),
        ("http://[::FFFF:192.0.2.1]/", "http://[::ffff:192.0.2.1]/"),
        ("http://[::1]:/", "http://[::1]/"),
        ("http://127.0.0.1:8080/x", "http://127.0.0.1:8080/x"),
    ])
    func ipLiterals(input: String, key: String) throws {
        #expect(try CanonicalURL(input).key == key)
    }

    @Test("[::1] and [0:0:0:0:0:0:0:1], 127.1 and 127.0.0.1 were different keys for one host: now one key", arguments: [
        ["http://[::1]/", "http://[0:0:0:0:0:0:0:1]/", "http://[0000:0000:0000:0000:0000:0000:0000:0001]:80/",
         "http://[0::1]/", "http://[::0:1]/", "http://[::0.0.0.1]/"],
        ["http://127.0.0.1/", "http://127.1/", "http://127.0.1/", "http://2130706433/", "http://0x7f.0.0.1/",
         "http://0X7F000001/", "http://0177.0.0.1/", "http://017700000001/", "http://127.0.0.1./", "http://0x7f.1:80/"],
        ["http://10.0.0.1:8080/x", "http://10.1:8080/x", "http://167772161:8080/x", "http://012.0.0.01:8080/x"],
        ["http://[2001:db8::1]/", "http://[2001:DB8:0:0:0:0:0:1]/", "http://[2001:0db8::0001]/"],
        ["http://[::ffff:192.0.2.1]/", "http://[::FFFF:c000:0201]/", "http://[0:0:0:0:0:ffff:192.0.2.1]/"],
        ["http://0.0.0.0/", "http://0/", "http://0x0/", "http://00/", "http://0.0x/"],
    ])
    func oneKeyPerAddress(spellings: [String]) throws {
        let urls = try spellings.map { try CanonicalURL($0) }
        #expect(Set(urls.map(\.key)).count == 1, "\(urls.map(\.key))")
        #expect(Set(urls.map(\.authority)).count == 1, "per-host limits count one host")
    }

    @Test("IP addresses are written one way: IPv4 dotted decimal, IPv6 per RFC 5952", arguments: [
        ("http://127.1/", "127.0.0.1"),
        ("http://1.2.3/", "1.2.0.3"),
        ("http://0xffffffff/", "255.255.255.255"),
        ("http://4294967295/", "255.255.255.255"),
        ("http://0x7f.1/", "127.0.0.1"),
        ("http://[0:0:0:0:0:0:0:0]/", "[::]"),
        ("http://[1:0:0:0:0:0:0:0]/", "[1::]"),
        ("http://[2001:db8:0:0:1:0:0:1]/", "[2001:db8::1:0:0:1]"),      // 4.2.3: the first of equal runs
        ("http://[2001:db8:0:0:1:0:0:0]/", "[2001:db8:0:0:1::]"),       // 4.2.3: the longest run
        ("http://[2001:db8::1:1:1:1:1]/", "[2001:db8:0:1:1:1:1:1]"),    // 4.2.2: one zero piece is no ::
        ("http://[2001:DB8:00AB::0001]/", "[2001:db8:ab::1]"),          // 4.1, 4.3: no leading zeros, lowercase
        ("http://[::ffff:c000:201]/", "[::ffff:192.0.2.1]"),            // 5: IPv4-mapped in dotted decimal
        ("http://[64:ff9b::192.0.2.33]/", "[64:ff9b::c000:221]"),
        ("http://1e100.net/", "1e100.net"),
        ("http://0x1.example/", "0x1.example"),
        ("http://a.0x1g/", "a.0x1g"),
        ("http://123.example/", "123.example"),
        ("http://example.com./", "example.com."),
    ])
    func addressForms(input: String, host: String) throws {
        let url = try CanonicalURL(input)
        #expect(url.host == host)
        #expect(try CanonicalURL(url.key) == url)
    }

    @Test("host names within DNS's limits are kept, punycode included", arguments: [
        "http://xn--bcher-kva.example/",                 // bücher
        "http://xn--r8jz45g.xn--zckzah/",                // 例え.テスト
        "http://xn--nxasmq6b.com./",
        URLText("http://\(Self.label(63)).example/"),
        URLText("http://\(Self.name(lastLabel: 61))./"),      // 253 characters and the final dot
    ] as [URLText])
    func namesWithinLimits(input: URLText) throws {
        let url = try CanonicalURL(input.text)
        #expect(try CanonicalURL(url.key) == url)
    }

    @Test("a host name no resolver could look up is refused, saying why", arguments: [
        ("http://xn--/", "not punycode"),
        ("http://a.xn--abc-.example/", "not punycode"),                      // no character beyond ASCII
        ("http://xn---abc.example/", "not punycode"),
        ("http://xn--ab_c.example/", "not punycode"),
        ("http://xn--99999999999999999999999999/", "not punycode"),           // a number that never ends
        ("http://a..example/", "empty label"),
        ("http://.example/", "empty label"),
        ("http://example../", "empty label"),
        (URLText("http://\(Self.label(64)).example/"), "longer than 63"),
        (URLText("http://\(Self.name(lastLabel: 62))/"), "longer than 253"),
    ] as [(URLText, String)])
    func namesBeyondLimits(input: URLText, reason: String) {
        #expect {
            try CanonicalURL(input.text)
        } throws: { error in
            guard case .invalid(let message) = error as? CanonicalURL.ParseError else { return false }
            return message.contains(reason)
        }
    }

    @Test("surrounding whitespace is trimmed")
    func trimming() throws {
        #expect(try CanonicalURL("  http://example.com/x \n").key == "http://example.com/x")
        #expect(try CanonicalURL("\t\r\nhttp://example.com/x\r\n").key == "http://example.com/x")
    }

    @Test("the parts: scheme, host, port, authority")
    func parts() throws {
        let u = try CanonicalURL("HTTP://Example.com:8080/x")
        #expect(u.scheme == "http" && u.host == "example.com" && u.port == 8080)
        #expect(u.authority == "example.com:8080" && u.description == "http://example.com:8080/x")
        let d = try CanonicalURL("https://example.com:443/")
        #expect(d.port == nil && d.authority == "example.com")
        let v6 = try CanonicalURL("http://[::1]:8080/")
        #expect(v6.host == "[::1]" && v6.authority == "[::1]:8080")
        let withUser = try CanonicalURL("http://u:p@h.example/")
        #expect(withUser.host == "h.example" && withUser.authority == "h.example")
    }

    @Test("equivalent spellings give one key (and equal values)", arguments: [
        ["http://example.com/~a", "HTTP://EXAMPLE.COM:80/%7Ea", "http://example.com/b/../%7ea#x", "http://example.com/./~a"],
        ["https://example.com/", "https://example.com", "https://Example.com:443", "https://example.com:0443/#"],
        ["http://example.com/a%2Fb", "http://example.com/a%2fb"],
        ["http://example.com/é", "http://example.com/%c3%a9", "http://example.com/%C3%A9"],
    ])
    func equivalentSpellings(spellings: [String]) throws {
        let urls = try spellings.map { try CanonicalURL($0) }
        #expect(Set(urls.map(\.key)).count == 1, "\(urls.map(\.key))")
        #expect(Set(urls).count == 1)
    }

    @Test("different resources keep different keys", arguments: [
        ("http://example.com/a", "https://example.com/a"),
        ("http://example.com/a", "http://example.com/A"),
        ("http://example.com/a", "http://example.com:8080/a"),
        ("http://example.com/a/b", "http://example.com/a%2Fb"),
        ("http://example.com/a", "http://example.com/a?"),
        ("http://example.com/a?x=1", "http://example.com/a?X=1"),
        ("http://u@example.com/a", "http://example.com/a"),
        ("http://example.com/a=b", "http://example.com/a%3Db"),
    ])
    func distinct(a: String, b: String) throws {
        #expect(try CanonicalURL(a).key != CanonicalURL(b).key)
    }

    @Test("canonicalising a key again changes nothing", arguments: [
        "HTTP://Example.COM:80/a/./b/../%7e%2f?q=%7e#f", "http://[FE80::1]:8080", "http://u%7e@h.example/é?x y",
        "https://example.com:0443/%zz/..", "http://example.com/a%2F..%2Fb", "http://[0:0:0:0:0:0:0:1]/%zz%%41",
        "http://0x7f.1/a%", "http://u:p%@[::ffff:1.2.3.4]/%A%31", "http://127.0.0.1./%%%7e",
    ])
    func idempotent(input: String) throws {
        let once = try CanonicalURL(input)
        #expect(try CanonicalURL(once.key) == once)
    }

    static let longPath = String(repeating: "a", count: CanonicalURL.maximumLength - "http://x/".utf8.count)

    @Test("garbage is refused with the right error", arguments: [
        ("", .empty),
        ("   ", .empty),
        ("\n\t\r ", .empty),
        ("not a url", .noScheme),
        ("example.com/x", .noScheme),
        ("//example.com/x", .noScheme),
        ("://example.com/", .noScheme),
        ("1http://example.com/", .noScheme),
        ("ht tp://example.com/", .noScheme),
        ("http:example.com", .invalid),
        ("http:/example.com/", .invalid),
        ("http://", .invalid),
        ("http:///x", .invalid),
        ("http://?q", .invalid),
        ("http://#f", .invalid),
        ("http://:80/", .invalid),
        ("http://user@/x", .invalid),
        ("http://exa mple.com/", .invalid),
        ("http://exämple.com/", .invalid),
        ("http://exa%6Dple.com/", .invalid),
        ("http://a:b:c/", .invalid),
        ("http://example.com:0/", .invalid),
        ("http://example.com:00/", .invalid),
        ("http://example.com:70000/", .invalid),
        ("http://example.com:65536/", .invalid),
        ("http://example.com:99999999999999999999999/", .invalid),
        ("http://example.com:abc/", .invalid),
        ("http://example.com:8o/", .invalid),
        ("http://example.com:-1/", .invalid),
        ("http://example.com:+80/", .invalid),
        ("http://example.com: 80/", .invalid),
        ("http://[::1/", .invalid),
        ("http://[::1]x/", .invalid),
        ("http://[::1]:x/", .invalid),
        ("http://[]/", .invalid),
        ("http://[zz::1]/", .invalid),
        ("http://[127.0.0.1]/", .invalid),
        ("http://[1:2:3:4:5:6:7:8:9]/", .invalid),
        ("http://[1:2:3:4:5:6:7]/", .invalid),
        ("http://[1::2::3]/", .invalid),
        ("http://[1:::2]/", .invalid),
        ("http://[12345::]/", .invalid),
        ("http://[:1]/", .invalid),
        ("http://[1:]/", .invalid),
        ("http://[::1.2.3.256]/", .invalid),
        ("http://[::01.2.3.4]/", .invalid),
        ("http://[::1.2.3]/", .invalid),
        ("http://[::0x1.2.3.4]/", .invalid),
        ("http://[1:2:3:4:5:6:7:1.2.3.4]/", .invalid),
        ("http://[fe80::1%25eth0]/", .invalid),
        ("http://1.2.3.256/", .invalid),
        ("http://256.1.1.1/", .invalid),
        ("http://1.2.3.4.5/", .invalid),
        ("http://1..1/", .invalid),
        ("http://4294967296/", .invalid),
        ("http://99999999999999999999999999999/", .invalid),
        ("http://08.1.1.1/", .invalid),
        ("http://0x100.1.1.1/", .invalid),
        ("http://a.1/", .invalid),
        ("http://exa\u{0}mple.com/", .invalid),
        ("http://example.com/a\tb", .invalid),
        ("http://example.com/a\nb", .invalid),
        ("http://example.com/\u{7F}", .invalid),
        ("http://example.com/\u{1B}[31m", .invalid),
        ("file:///etc/passwd", .schemeNotAllowed("file")),
        ("ftp://x/", .schemeNotAllowed("ftp")),
        ("FTP://x/", .schemeNotAllowed("ftp")),
        ("javascript:alert(1)", .schemeNotAllowed("javascript")),
        ("data:image/png;base64,AAAA", .schemeNotAllowed("data")),
        ("gopher://x/", .schemeNotAllowed("gopher")),
        (URLText("http://x/" + longPath + "a"), .tooLong),
        (URLText(String(repeating: "x", count: 100_000)), .tooLong),
    ] as [(URLText, ErrorKind)])
    func garbage(input: URLText, expected: ErrorKind) {
        switch parse(input.text) {
        case .success(let key):
            Issue.record("\(input.testDescription) parsed as \(key.prefix(80)), expected \(expected)")
        case .failure(let error):
            #expect(ErrorKind(error) == expected, "\(input.testDescription): \(error.message)")
            #expect(!error.message.isEmpty)
        }
    }

    @Test("exactly maximumLength bytes is accepted, one more is not")
    func lengthLimit() throws {
        let atLimit = "http://x/" + Self.longPath
        #expect(atLimit.utf8.count == CanonicalURL.maximumLength)
        #expect(try CanonicalURL(atLimit).key == atLimit)
        #expect(throws: CanonicalURL.ParseError.tooLong) { try CanonicalURL(atLimit + "b") }
        // Surrounding whitespace does not count.
        #expect(try CanonicalURL("  " + atLimit + "\n").key == atLimit)
    }

    @Test("allowedSchemes widens or narrows what is accepted")
    func allowedSchemes() throws {
        #expect(try CanonicalURL("FTP://Files.example/x", allowedSchemes: ["ftp"]).key == "ftp://files.example/x")
        #expect(try CanonicalURL("ftp://files.example:21/x", allowedSchemes: ["ftp"]).port == 21)
        #expect(throws: CanonicalURL.ParseError.schemeNotAllowed("http")) {
            try CanonicalURL("http://example.com/", allowedSchemes: ["https"])
        }
    }
}
