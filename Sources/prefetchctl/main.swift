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
        guard let verb = arguments.verb else {
            // Asked for, the usage is data; as the answer to a command line without a verb, a complaint.
            guard arguments.help else {
                Output.stderr(Help.general + "\n")
                return ExitCode.usage
            }
            print(Help.general)
            return ExitCode.ok
        }
        if arguments.help {
            print(Help.verb(verb.name) ?? Help.general)
            return ExitCode.ok
        }
        return try verb.run(arguments, try Client(socketPath: arguments.socketPath))
    } catch {
        Output.message(error.message)
        return error.exitCode
    }
}

exit(runCommand())
