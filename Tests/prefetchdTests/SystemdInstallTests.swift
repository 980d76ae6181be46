import Foundation
import Testing

/// What `make install` ships besides the binaries stays in step with them: the completions and prefetchctl(1) know
/// every verb and flag, and the units agree with the daemon's defaults. (`make check-systemd` checks the installed
/// tree itself: verify, security, ldd.)
struct SystemdInstallTests {
    static func file(_ path: String) throws -> String {
        try String(contentsOfFile: Paths.repository + "/" + path, encoding: .utf8)
    }

    /// Each verb of `prefetchctl --help` with the long flags its own help names.
    static func verbsAndFlags() -> [(verb: String, flags: [String])] {
        let general = run(Paths.prefetchctl, ["--help"]).stdout
        var inVerbs = false
        var verbs: [String] = []
        for line in general.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("Verbs:") { inVerbs = true; continue }
            if inVerbs && line.trimmingCharacters(in: .whitespaces).isEmpty { break }
            if inVerbs, let word = line.split(separator: " ").first { verbs.append(String(word)) }
        }
        return verbs.map { verb in
            let help = run(Paths.prefetchctl, [verb, "--help"]).stdout
            let flags = help.matches(of: /--[a-z][a-z-]*/).map { String($0.output) }
            return (verb, Array(Set(flags)).sorted())
        }
    }

    @Test("the bash, zsh and fish completions and prefetchctl(1) name every verb and flag of prefetchctl --help")
    func completionsKnowEveryFlag() throws {
        let bash = try Self.file("completions/prefetchctl.bash")
        let zsh = try Self.file("completions/_prefetchctl")
        let fish = try Self.file("completions/prefetchctl.fish")
        let manual = try Self.file("docs/man/prefetchctl.1")
        let all = Self.verbsAndFlags()
        #expect(all.count >= 10, "verbs parsed from --help: \(all.map(\.verb))")
        for (verb, flags) in all {
            #expect(bash.contains(verb) && zsh.contains("'\(verb):") && fish.contains("-a \(verb) "), "verb \(verb)")
            #expect(manual.contains(".BI \(verb) ") || manual.contains(".B \(verb)\n") || manual.contains(".BR \(verb) "),
                    "prefetchctl.1 lacks the verb \(verb)")
            for flag in flags where flag != "--help" {
                let name = String(flag.dropFirst(2))
                #expect(bash.contains(flag), "bash completion lacks \(verb) \(flag)")
                #expect(zsh.contains(flag), "zsh completion lacks \(verb) \(flag)")
                #expect(fish.contains("-l \(name)"), "fish completion lacks \(verb) \(flag)")
                #expect(manual.contains(flag.replacingOccurrences(of: "-", with: "\\-")), "prefetchctl.1 lacks \(flag)")
            }
        }
    }

    @Test("the socket unit listens where prefetchctl looks for the system daemon; the service runs what make install puts")
    func unitsAgree() throws {
        let socket = try Self.file("systemd/prefetchd.socket")
        let service = try Self.file("systemd/prefetchd.service")
        #expect(socket.contains("ListenStream=/run/prefetchd/ctl.sock"))
        #expect(socket.contains("FileDescriptorName=ctl"))
        #expect(socket.contains("SocketMode=0660") && socket.contains("SocketGroup=prefetch"))
        #expect(service.contains("ExecStart=/usr/local/bin/prefetchd\n"), "make install rewrites /usr/local/bin/")
        for directive in ["Type=notify", "WatchdogSec=", "Restart=on-failure", "ExecReload=kill -HUP $MAINPID",
                          "User=prefetchd", "Group=prefetch", "CacheDirectory=prefetchd", "StateDirectory=prefetchd",
                          "RuntimeDirectory=prefetchd", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"] {
            #expect(service.contains(directive), "prefetchd.service lacks \(directive)")
        }
        let sysusers = try Self.file("systemd/prefetchd.sysusers")
        #expect(sysusers.contains("g prefetch") && sysusers.contains("u prefetchd"))
        let makefile = try Self.file("Makefile")
        #expect(makefile.contains("test: test-deps check-core check-systemd"), "make test runs check-systemd")
    }
}
