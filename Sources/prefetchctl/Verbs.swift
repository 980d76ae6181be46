/// What each verb takes, checked before connecting: a command line that is wrong in any way — an unknown verb or
/// option, an option the verb does not take, an operand too many or missing — is a usage error (exit 2) for every
/// verb, and nothing is sent.
struct Verb {
    enum Operands {
        /// None at all.
        case none
        /// Exactly one, described for the message.
        case one(String)
        /// URLs, or `-` alone to read them from stdin.
        case urls
    }

    let name: String
    let operands: Operands
    /// Options besides `--socket`, `--json`, `--help` and `--version`, which every verb takes.
    let options: Set<String>

    static let common: Set<String> = ["--socket", "--json", "--help", "--version"]
    static let variant: Set<String> = ["--size", "--fit", "--format", "--quality", "--upscale"]

    static let all: [Verb] = [
        Verb(name: "get", operands: .urls,
             options: variant.union(["--timeout", "--max-stale", "--offline", "--output"])),
        Verb(name: "queue", operands: .urls, options: ["--wait", "--timeout", "--now"]),
        Verb(name: "demote", operands: .urls, options: []),
        Verb(name: "promote", operands: .urls, options: []),
        Verb(name: "cancel", operands: .urls, options: []),
        Verb(name: "evict", operands: .urls, options: ["--all"]),
        Verb(name: "info", operands: .one("exactly one URL"), options: []),
        Verb(name: "status", operands: .none, options: []),
        Verb(name: "list", operands: .none, options: ["--limit"]),
        Verb(name: "formats", operands: .none, options: []),
        Verb(name: "metrics", operands: .none, options: []),
        Verb(name: "watch", operands: .none, options: []),
        Verb(name: "view", operands: .one("one list: a file of URLs, or - to read the list from stdin up to an empty line"),
             options: variant.union(["--ahead", "--behind"])),
        Verb(name: "ping", operands: .none, options: []),
    ]

    static func named(_ name: String) -> Verb? { all.first { $0.name == name } }

    /// Throws the usage error `arguments` make for this verb, if any.
    func check(_ arguments: Arguments) throws(CLIError) {
        let see = "(see prefetchctl \(name) --help)"
        if let option = arguments.given.first(where: { !Self.common.contains($0) && !options.contains($0) }) {
            throw .usage("\(name) does not take \(option) \(see)")
        }
        let operands = arguments.operands
        switch self.operands {
        case .none:
            guard operands.isEmpty else { throw .usage("\(name) takes no operands, but got '\(operands[0])' \(see)") }
        case .one(let what):
            guard operands.count == 1 else { throw .usage("\(name) takes \(what) \(see)") }
        case .urls:
            if arguments.all {
                guard operands.isEmpty else { throw .usage("\(name) --all takes no URLs") }
            } else if operands.isEmpty {
                throw .usage("\(name) needs at least one URL (or - to read them from stdin)")
            } else if operands.count > 1, operands.contains("-") {
                throw .usage("- reads the URLs from stdin and goes alone")
            }
        }
        if arguments.size == nil, arguments.fit != nil || arguments.format != nil || arguments.quality != nil || arguments.upscale {
            throw .usage("--fit, --format, --quality and --upscale go with --size WxH")
        }
        if arguments.timeout != nil, name == "queue", !arguments.wait {
            throw .usage("queue takes --timeout with --wait only")
        }
        if arguments.output != nil, operands.count > 1 {
            throw .usage("-o takes exactly one URL")
        }
    }
}
