import Testing
@testable import QueueCore

@Suite("Redacting passwords in URLs")
struct RedactionTests {
    @Test("http://user:secret@host/… showed the password: any text shows user:***@ instead", arguments: [
        ("fetched http://user:secret@host.example/a.jpg (fast lane)", "fetched http://user:***@host.example/a.jpg (fast lane)"),
        ("http://user:secret@host.example", "http://user:***@host.example"),
        ("https://user:pa:ss@host.example:8443/x", "https://user:***@host.example:8443/x"),
        ("http://user:@host.example/", "http://user:***@host.example/"),
        ("http://u:p@a.example/ and https://v:q@b.example/?x#y", "http://u:***@a.example/ and https://v:***@b.example/?x#y"),
        ("http://h.example/?next=http://u:p@evil.example/", "http://h.example/?next=http://u:***@evil.example/"),
        ("http://a@http://b:c@d.example/", "http://***@http://b:***@d.example/"),
        ("'http://u:p@h.example' failed", "'http://u:***@h.example' failed"),
        ("http://ü:pässword@h.example/é", "http://ü:***@h.example/é"),
        ("http://u:p%40ss@h.example/", "http://u:***@h.example/"),
        // A userinfo with spaces, which the parser takes (encoded): the reply that echoed the text showed the password.
        ("http://us er:secret@h.example/x", "http://us er:***@h.example/x"),
        ("http://user:sec ret@h.example", "http://user:***@h.example"),
        (#"{"url":"http://a b:c d@h.example/x"}"#, #"{"url":"http://a b:***@h.example/x"}"#),
        ("get http://u:p@h.example and then mail a@b.example", "get http://u:***@h.example and then mail a@b.example"),
        ("x http://us er:secret@h.example failed", "x http://us er:***@h.example failed"),
        ("http://h.example and a@b c", "http://***@b c"),  // prose: hidden too, harmless
    ])
    func passwordsHidden(text: String, shown: String) {
        #expect(CanonicalURL.redactingUserinfo(in: text) == shown)
        #expect(CanonicalURL.redactingUserinfo(in: Array(text.utf8)) == Array(shown.utf8))
    }

    @Test("a userinfo without a password (often a token) is hidden whole")
    func tokens() {
        #expect(CanonicalURL.redactingUserinfo(in: "https://ghp_token123@git.example/a.png")
                == "https://***@git.example/a.png")
    }

    @Test("text without a userinfo is left alone", arguments: [
        "http://h.example/a@b", "http://h.example?q=a@b", "http://h.example#a@b", "http://@h.example/",
        "mail me at a@b.example", "mailto:a@b.example", "user:pass@host", "no url at all", "", "://", "http://",
        "http://user:***@h.example/", "http://***@h.example/",
        "http://h.example/ mail a@b.example",
    ])
    func untouched(text: String) {
        #expect(CanonicalURL.redactingUserinfo(in: text) == text)
    }

    @Test("a JSON line stays valid JSON: escape pairs are part of the userinfo, a quote ends it", arguments: [
        (#"{"url":"http://u:p@h.example","x":"a@b"}"#, #"{"url":"http://u:***@h.example","x":"a@b"}"#),
        (#"{"url":"http://u\"x:p\\q@h.example/"}"#, #"{"url":"http://u\"x:***@h.example/"}"#),
        (#"{"url":"http://h.example","e":"x@y"}"#, #"{"url":"http://h.example","e":"x@y"}"#),
    ])
    func json(line: String, shown: String) {
        #expect(CanonicalURL.redactingUserinfo(in: line) == shown)
    }

    @Test("a canonical key keeps its password for fetching; its redacted form names the same host")
    func keys() throws {
        let url = try CanonicalURL("HTTP://User:S%65cret@Example.COM:80/a")
        #expect(url.key == "http://User:Secret@example.com/a")
        let shown = CanonicalURL.redactingUserinfo(in: url.key)
        #expect(shown == "http://User:***@example.com/a")
        #expect(try CanonicalURL(shown).host == url.host)
    }
}
