import Foundation
import Testing

/// Passwords in URLs: the key keeps them (curl needs them to fetch), nothing a person is shown does.
struct SecretsTests {
    @Test("queue --wait of two URLs that differ only in their password: the one the server refuses fails, the other finishes (both were counted as one)")
    func queueWaitTellsPasswordsApart() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for round in 0..<2 {
            let path = "/two-passwords-\(round).jpg?auth=u:good&size=100000&drip=50000"  // about 2 s for the right one
            let good = "http://u:good@127.0.0.1:\(origin.port)" + path, bad = "http://u:bad@127.0.0.1:\(origin.port)" + path
            let urls = round == 0 ? [good, bad] : [bad, good]
            let waited = daemon.ctl(arguments: ["queue", "--wait", "--json"] + urls)
            #expect(waited.status == 1, "\(waited.stderr)")
            let ended = waited.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                .filter { ["finished", "failed"].contains($0["status"] as? String) }
            #expect(ended.compactMap { $0["status"] as? String }.sorted() == ["failed", "finished"], "\(waited.stdout)")
            let failure = ended.first { $0["status"] as? String == "failed" }?["error"] as? [String: Any]
            #expect(failure?["status"] as? Int == 401, "\(waited.stdout)")
            #expect(!waited.stdout.contains(":good@") && !waited.stdout.contains(":bad@"))
        }
    }

    @Test("prefetchctl's own messages show user:***@: a failed get (text and --json) and a URL too long to send printed the password")
    func prefetchctlHidesPasswords() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let base = "http://user:s3cr3t@127.0.0.1:\(origin.port)"
        let failed = daemon.ctl("get", base + "/hidden-404.jpg?status=404")
        let failedJSON = daemon.ctl("get", "--json", base + "/hidden-404.jpg?status=404")
        let long = base + "/" + String(repeating: "a", count: 70_000)
        let outputs = [failed.stderr, failedJSON.stdout, daemon.ctl("get", long).stderr, daemon.ctl("queue", long).stderr,
                       daemon.ctl("queue", "--json", long).stdout, daemon.ctl("cancel", long).stdout]
        for output in outputs {
            #expect(output.contains("user:***@127.0.0.1") && !output.contains("s3cr3t"), "\(output.prefix(300))")
        }
    }

    @Test("a URL pasted from list, its password shown as ***: cancel and info say unknown and ask for the password")
    func pastedHiddenPassword() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let hidden = "http://user:***@127.0.0.1:\(origin.port)/pasted.jpg?size=100000&drip=1000"  // 100 s: still running
        let url = hidden.replacingOccurrences(of: "***", with: "pw")
        #expect(daemon.ctl("queue", url).status == 0)
        #expect(daemon.ctl("list").stdout.contains(hidden))
        let hint = "list and info show a password as ***: give the URL with its password"
        let info = daemon.ctl("info", hidden)
        #expect(info.stdout.contains("cached: no") && info.stderr.contains(hint), "\(info.stdout)\(info.stderr)")
        let pasted = daemon.ctl("cancel", hidden)
        #expect(pasted.stdout.contains("unknown") && pasted.stderr.contains(hint), "\(pasted.stdout)\(pasted.stderr)")
        for never in ["/never-queued.jpg", "/never-queued.jpg?a=***@b"] {  // no password in the second either
            let other = daemon.ctl("cancel", "http://127.0.0.1:\(origin.port)" + never)
            #expect(other.stdout.contains("unknown") && other.stderr.isEmpty, "\(never): \(other.stderr)")
        }
        let cancelled = daemon.ctl("cancel", url)
        #expect(cancelled.stdout.contains("cancelled") && cancelled.stderr.isEmpty, "\(cancelled.stdout)\(cancelled.stderr)")
    }

    @Test("queue --wait of a URL with a password that takes seconds: finished, exit 0 (it asked info by the hidden key and said cancelled)")
    func queueWaitWithPassword() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = "http://user:pw@127.0.0.1:\(origin.port)/secret-wait.jpg?size=100000&drip=50000"  // about 2 s
        let waited = daemon.ctl("queue", "--wait", url)
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(waited.stderr.contains("1 queued; 1 finished, 0 failed"), "\(waited.stderr)")
        #expect(!waited.stderr.contains("pw@"), "\(waited.stderr)")
    }

    @Test("http://user:secret@host/… wrote the password to the log: log, status, list, info, watch and metrics show user:***@")
    func passwordNeverShown() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--log-level", "debug"])
        let secret = "s3cr3t-Pw"
        let base = "http://user:\(secret)@127.0.0.1:\(origin.port)"
        let slow = base + "/secret-slow.jpg?size=60000&drip=12000"   // 5 s: seen running by list and watch, also when slow
        let missing = base + "/secret-missing.jpg?status=404"

        let watcher = try RawConnection(socket: daemon.socket)
        _ = watcher.receive()
        watcher.send(#"{"id":"w","op":"watch"}"# + "\n")
        var shown: [(what: String, text: String)] = []

        shown.append(("queue", daemon.ctl("queue", "--json", slow).stdout))
        #expect(waitUntil(seconds: 10) { daemon.ctl("list", "--json").stdout.contains("secret-slow.jpg") })
        for arguments in [["list"], ["list", "--json"], ["status"], ["status", "--json"], ["info", slow],
                          ["info", "--json", slow]] {
            shown.append((arguments.joined(separator: " "), daemon.ctl(arguments: arguments).stdout))
        }
        let client = try RawConnection(socket: daemon.socket)
        _ = client.receive()
        client.send(#"{"id":"g","op":"get","url":"\#(missing)"}"# + "\n")
        shown.append(("get reply", try Self.text(#require(client.receive()))))

        var slowEnded = false, missingEnded = false, sawTransfer = false
        while !(slowEnded && missingEnded), let event = watcher.receive() {
            let text = try Self.text(event)
            shown.append(("watch", text))
            let url = event["url"] as? String ?? ""
            if url.contains("secret-slow.jpg"), event["event"] as? String == "finished" { slowEnded = true }
            if url.contains("secret-missing.jpg"), event["event"] as? String == "failed" { missingEnded = true }
            if let transfers = event["transfers"] as? [[String: Any]],
               transfers.contains(where: { ($0["url"] as? String)?.contains("user:***@") == true }) {
                sawTransfer = true
            }
        }
        #expect(slowEnded && missingEnded, "the watcher saw both fetches end")
        #expect(sawTransfer, "a snapshot showed the running transfer, redacted")
        for url in [slow, missing] {
            shown.append(("info after", daemon.ctl("info", "--json", url).stdout))
        }
        shown.append(("metrics", daemon.ctl("metrics").stdout))
        shown.append(("log", daemon.log))

        for (what, text) in shown {
            #expect(!text.contains(secret), "\(what) shows the password: \(text.prefix(2000))")
        }
        #expect(daemon.log.contains("user:***@127.0.0.1"), "the log still names the URL: \(daemon.log)")
        #expect(shown.contains { $0.what == "list --json" && $0.text.contains("user:***@127.0.0.1") })
        #expect(shown.contains { $0.what == "info after" && $0.text.contains("\"cached\"") }, "fetched with the password")
        #expect(try origin.count("/secret-slow.jpg") == 1)
    }

    /// `object` as a JSON line again (slashes escaped by JSONSerialization do not matter to what is looked for).
    static func text(_ object: [String: Any]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }
}
