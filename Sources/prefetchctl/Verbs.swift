import PrefetchProtocol

/// What each verb takes, checked before connecting: a command line that is wrong in any way — an unknown verb or
/// option, an option the verb does not take, an operand too many or missing — is a usage error (exit 2) for every
/// verb, and nothing is sent. `prefetchctl VERB --help` shows the same options; so do the shell completions.
struct Verb: Sendable {
    enum Operands: Sendable {
        /// None at all.
        case none
        /// Exactly one, described for the message.
        case one(String)
        /// URLs, or `-` alone to read them from stdin.
        case urls
    }

    let name: String
    let operands: Operands
    /// Options besides `common`, which every verb takes.
    let options: Set<Option>
    /// Carries out the command on a connection to the daemon; returns the exit code.
    let run: @Sendable (Arguments, Client) throws(CLIError) -> Int32

    static let common: Set<Option> = [.socket, .json, .help, .version]
    static let variant: Set<Option> = [.size, .fit, .format, .quality, .upscale]

    static let all: [Verb] = [
        Verb(name: "get", operands: .urls, options: variant.union([.timeout, .maxStale, .offline, .output]), run: GetCommand.run),
        batch(.queue, options: [.wait, .timeout, .now]),
        batch(.demote, options: [.timeout]),
        batch(.promote, options: [.timeout]),
        batch(.cancel, options: [.timeout]),
        batch(.evict, options: [.all, .timeout]),
        Verb(name: "info", operands: .one("exactly one URL"), options: [.timeout], run: InspectCommand.info),
        Verb(name: "status", operands: .none, options: [.timeout], run: InspectCommand.status),
        Verb(name: "list", operands: .none, options: [.limit, .timeout], run: InspectCommand.list),
        Verb(name: "formats", operands: .none, options: [.timeout], run: InspectCommand.formats),
        Verb(name: "metrics", operands: .none, options: [.timeout], run: MetricsCommand.run),
        Verb(name: "watch", operands: .none, options: [], run: WatchCommand.run),
        Verb(name: "view", operands: .one("one list: a file of URLs, or - to read the list from stdin up to an empty line"),
             options: variant.union([.ahead, .behind]), run: ViewCommand.run),
        Verb(name: "ping", operands: .none, options: [.timeout], run: InspectCommand.ping),
    ]

    /// `queue`, `demote`, `promote`, `cancel`, `evict`: a list of URLs, one result each.
    private static func batch(_ op: Operation, options: Set<Option> = []) -> Verb {
        Verb(name: op.rawValue, operands: .urls, options: options,
             run: { arguments, client throws(CLIError) in try BatchCommand.run(op, arguments, client: client) })
    }

    static func named(_ name: String) -> Verb? { all.first { $0.name == name } }

    /// Throws the usage error for the first of `given` this verb does not take, naming the option as spelled and the
    /// verb.
    func refuseOptions(_ given: [Arguments.Given]) throws(CLIError) {
        guard let foreign = given.first(where: { !Self.common.contains($0.option) && !options.contains($0.option) }) else { return }
        throw .usage("\(name) does not take \(foreign.spelled) (see prefetchctl \(name) --help)")
    }

    /// Throws the usage error the operands and the options' values make together, if any.
    func check(_ arguments: Arguments) throws(CLIError) {
        let see = "(see prefetchctl \(name) --help)"
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
            } else if operands == ["-"], arguments.stdinClosed {
                throw .usage("- reads the URLs from stdin, but stdin is closed")
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
