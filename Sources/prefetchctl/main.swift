import FoundationEssentials
import Glibc
import PrefetchProtocol

func runCommand() -> Int32 {
    do throws(CLIError) {
        let arguments = try Arguments.parse(Array(CommandLine.arguments.dropFirst()))
        if arguments.version {
            print("prefetchctl \(prefetchVersion)")
            return ExitCode.ok
        }
        guard let name = arguments.verb else {
            // Asked for, the usage is data; as the answer to a command line without a verb, a complaint.
            guard arguments.help else {
                Output.stderr(Help.general + "\n")
                return ExitCode.usage
            }
            print(Help.general)
            return ExitCode.ok
        }
        guard let verb = Verb.named(name) else { throw .usage("unknown verb '\(name)' (see prefetchctl --help)") }
        if arguments.help {
            print(Help.verb(verb.name) ?? Help.general)
            return ExitCode.ok
        }
        try verb.check(arguments)
        let socket = DefaultPaths.clientSocket(flag: arguments.socket, environment: ProcessInfo.processInfo.environment)
        let client = try Client(socketPath: socket)
        switch verb.name {
        case "get": return try GetCommand.run(arguments, client: client)
        case "queue": return try BatchCommand.run(.queue, arguments, client: client)
        case "demote": return try BatchCommand.run(.demote, arguments, client: client)
        case "promote": return try BatchCommand.run(.promote, arguments, client: client)
        case "cancel": return try BatchCommand.run(.cancel, arguments, client: client)
        case "evict": return try BatchCommand.run(.evict, arguments, client: client)
        case "info": return try InspectCommand.info(arguments, client: client)
        case "status": return try InspectCommand.status(arguments, client: client)
        case "list": return try InspectCommand.list(arguments, client: client)
        case "metrics": return try MetricsCommand.run(arguments, client: client)
        case "formats": return try InspectCommand.formats(arguments, client: client)
        case "watch": return try WatchCommand.run(arguments, client: client)
        case "view": return try ViewCommand.run(arguments, client: client)
        default: return try InspectCommand.ping(arguments, client: client)
        }
    } catch {
        Output.message(error.message)
        return error.exitCode
    }
}

exit(runCommand())
