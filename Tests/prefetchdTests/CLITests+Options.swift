import Foundation
import Testing

/// What `prefetchctl VERB --help` names is what the verb takes, and what the shell completions offer it.
extension CLITests {
    /// The options every verb takes, as `prefetchctl --help` names them.
    static let everyVerbTakes: Set<String> = ["--socket", "--json", "--help", "--version"]

    /// What each verb takes, read from its help: the options named there and in the general help, `-o` and `-h`.
    static func taken() -> [(verb: String, options: Set<String>)] {
        SystemdInstallTests.verbsAndFlags().map { verb, flags in
            (verb, everyVerbTakes.union(flags).union(["-h"]).union(flags.contains("--output") ? ["-o"] : []))
        }
    }

    @Test("every verb takes exactly the options its --help names (and --socket, --json, --help, --version): any other is refused by name, exit 2, before connecting")
    func verbsTakeWhatTheirHelpNames() throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/nothing.sock"
        let verbs = Self.taken()
        #expect(verbs.count >= 10, "verbs parsed from --help: \(verbs.map(\.verb))")
        let options = verbs.reduce(Self.everyVerbTakes) { $0.union($1.options.filter { $0.hasPrefix("--") }) }
        #expect(options.isSuperset(of: ["--limit", "--offline", "--wait", "--size", "--ahead", "--all"]), "\(options.sorted())")
        let values = ["--socket": socket, "--timeout": "1", "--max-stale": "1", "--output": directory.path + "/out",
                      "--size": "8x8", "--fit": "cover", "--format": "png", "--quality": "50", "--limit": "1",
                      "--ahead": "1", "--behind": "1"]
        for (verb, takes) in verbs {
            let usage = run(Paths.prefetchctl, [verb, "--help"]).stdout.split(separator: "\n").first ?? ""
            let operand = usage.split(separator: " ").dropFirst(2).first.map(String.init) ?? ""
            let operands = operand.contains("URL") ? ["http://a/1.jpg"] : operand.contains("FILE") ? [directory.path + "/list.txt"] : []
            for option in options.sorted() {
                if takes.contains(option) {
                    let result = run(Paths.prefetchctl, ["--socket", socket, verb, option] + (values[option].map { [$0] } ?? []) + operands)
                    #expect(!result.stderr.contains("does not take"), "\(verb) \(option): \(result.stderr)")
                } else {
                    // A value no verb takes: the option is refused for what it is, not for its value.
                    let result = run(Paths.prefetchctl, ["--socket", socket, verb, option, "?"] + operands)
                    #expect(result.status == 2, "\(verb) \(option): \(result.stderr)")
                    #expect(result.stderr == "prefetchctl: \(verb) does not take \(option) (see prefetchctl \(verb) --help)\n",
                            "\(verb) \(option): \(result.stderr)")
                }
            }
        }
    }

    @Test("each option a verb's usage line names is explained in its help, or in the help it points to (evict --all and list --limit were named only)")
    func verbsExplainTheirOptions() {
        for (verb, _) in Self.taken() {
            let text = run(Paths.prefetchctl, [verb, "--help"]).stdout
            let parts = text.components(separatedBy: "\n\n")
            let usage = parts.first ?? "", body = parts.dropFirst().joined(separator: "\n")
            let pointedTo = ["get", "view"].filter { body.contains("prefetchctl \($0) --help") }
            let explained = pointedTo.reduce(body) { $0 + run(Paths.prefetchctl, [$1, "--help"]).stdout }
            let named = usage.split(whereSeparator: { " []|".contains($0) }).filter { $0.hasPrefix("--") }
            for option in Set(named.map(String.init)).subtracting(Self.everyVerbTakes).subtracting(["--timeout"]) {
                #expect(explained.contains(option), "prefetchctl \(verb) --help names \(option) without saying what it does")
            }
        }
    }

    @Test("the bash, fish and zsh completions offer each verb exactly the options it takes (they left out --timeout of info, status, list, formats, metrics, ping, and --socket and --version after a verb)")
    func completionsOfferOnlyWhatVerbsTake() throws {
        let bash = Paths.repository + "/completions/prefetchctl.bash"
        let fish = Paths.repository + "/completions/prefetchctl.fish"
        let zsh = try Self.zshOptions(String(contentsOfFile: Paths.repository + "/completions/_prefetchctl", encoding: .utf8))
        for (verb, takes) in Self.taken() {
            let script = "source \(bash); COMP_WORDS=(prefetchctl \(verb) -); COMP_CWORD=2; _prefetchctl; printf '%s\\n' \"${COMPREPLY[@]}\""
            let offeredByBash = Set(run("/usr/bin/env", ["bash", "-c", script]).lines)
            let offeredByFish = Set(run("/usr/bin/env", ["fish", "--no-config", "-c", "source \(fish); complete -C 'prefetchctl \(verb) -'"])
                .lines.compactMap { $0.split(separator: "\t").first.map(String.init) })
            let offeredByZsh = zsh[verb] ?? zsh["*"] ?? []
            for (shell, all) in [("bash", offeredByBash), ("fish", offeredByFish), ("zsh", offeredByZsh)] {
                let offered = all.filter { $0.hasPrefix("-") && $0 != "-" }
                #expect(offered.contains("--json"), "\(shell) offers \(verb) \(offered.sorted())")
                #expect(offered.isSubset(of: takes), "\(shell) offers \(verb) \(offered.subtracting(takes).sorted()), which it refuses")
                let missing = takes.filter { $0.hasPrefix("--") }.subtracting(offered)
                #expect(missing.isEmpty, "\(shell) does not offer \(verb) \(missing.sorted())")
            }
        }
    }

    /// The options `_prefetchctl` offers after each verb (`*` for the others): its `case $words[1]` branches, with the
    /// `[description]`s dropped, `$common` read as --socket, --json, -h, --help and --version, `$timeout` as --timeout.
    static func zshOptions(_ script: String) -> [String: Set<String>] {
        guard let start = script.range(of: "case $words[1] in") else { return [:] }
        var options: [String: Set<String>] = [:]
        for branch in script[start.upperBound...].components(separatedBy: ";;").dropLast() {
            let text = branch.replacingOccurrences(of: #"\[[^\]]*\]"#, with: "", options: .regularExpression)
            guard let close = text.firstIndex(of: ")") else { continue }
            let verbs = text[..<close].trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").map(String.init)
            var offered = Set(text[close...].matches(of: /(?:^|[\s{,'])(--?[a-z][a-z-]*)/).map { String($0.output.1) })
            if text.contains("$common") { offered.formUnion(["--socket", "--json", "-h", "--help", "--version"]) }
            if text.contains("$timeout") { offered.insert("--timeout") }
            for verb in verbs { options[verb] = offered }
        }
        return options
    }
}
