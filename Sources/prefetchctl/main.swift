import FoundationEssentials
import Glibc
import PrefetchProtocol

func runCommand() -> Int32 {
    do throws(CLIError) {
        let arguments = try Arguments.parse(try textArguments())
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
        // --timeout bounds the whole wait, the greeting's too.
        let timeout = arguments.timeout.map { max(1, Int64($0 * 1000)) }
        let client = try Client(socketPath: arguments.socketPath,
                                greetingWithin: min(Client.greetingWait, timeout ?? .max))
        if let timeout { client.answerWithin = timeout }
        return try verb.run(arguments, client)
    } catch {
        Output.message(error.message)
        return error.exitCode
    }
}

/// The command line's words after the program's name. One that is not UTF-8 text is a usage error: Swift's
/// `CommandLine.arguments` would repair it to U+FFFD, and a different URL would be fetched.
func textArguments() throws(CLIError) -> [String] {
    var words: [String] = []
    for index in 1..<max(1, Int(CommandLine.argc)) {  // argc is 0 when exec'd with an empty argv (kernels before 5.18)
        guard let pointer = CommandLine.unsafeArgv[index], let word = String(validatingCString: pointer) else {
            throw .usage("argument \(index) is not UTF-8 text; percent-encode the bytes of a URL (%FF)")
        }
        words.append(word)
    }
    return words
}

let status = runCommand()
// Output that never arrived (a full disk, a closed stdout) was not given: a script must not take it for an answer.
if fflush(nil) != 0 {
    Output.message("cannot write the output: \(String(cString: strerror(errno)))")
    exit(status == ExitCode.ok ? ExitCode.failed : status)
}
exit(status)
