import FoundationEssentials
import Glibc
import CSystem
import PrefetchProtocol

func runCommand(closedStreams: Set<Int32>) -> Int32 {
    do throws(CLIError) {
        let arguments = try Arguments.parse(try textArguments(), closedStreams: closedStreams)
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
        // --timeout bounds the whole wait, the greeting's too, except queue's: that bounds only the wait for the
        // fetches once every URL is queued (the list is sent whatever it says).
        let timeout = arguments.timeout.map { max(1, Int64($0 * 1000)) }
        let greetingTimeout = verb.name == "queue" ? nil : timeout
        let client = try Client(socketPath: arguments.socketPath,
                                greetingWithin: min(Client.greetingWait, greetingTimeout ?? .max))
        // get's and queue's --timeout bound the wait for the fetches, not the daemon's answers.
        if let timeout, verb.name != "get", verb.name != "queue" { client.answerWithin = timeout }
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

/// Fills closed standard descriptors, and says which were closed (`<&-`, `>&-`, `2>&-`). Else the next descriptor
/// opened (the daemon's socket) would take their number, and URLs would be read from it or the output go there.
/// Stdout gets an unlinked temporary file, so that what lands in it can be told: it was never written.
func fillClosedStandardDescriptors() -> Set<Int32> {
    var closed: Set<Int32> = []
    if fcntl(0, F_GETFD) < 0, open("/dev/null", O_RDONLY) == 0 { closed.insert(0) }
    if fcntl(1, F_GETFD) < 0 {
        var template = Array("/tmp/prefetchctl-stdout-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if fd >= 0 { template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) } }
        if fd == 1 { closed.insert(1) }
        if fd >= 0, fd != 1 { close(fd) }
    }
    if fcntl(2, F_GETFD) < 0, open("/dev/null", O_WRONLY) == 2 { closed.insert(2) }
    return closed
}

let closedStreams = fillClosedStandardDescriptors()
let stdoutClosed = closedStreams.contains(1)
let status = runCommand(closedStreams: closedStreams)
// Output that never arrived (a full disk, a closed stdout) was not given: a script must not take it for an answer.
let flushed = fflush(nil) == 0
let reason = !flushed ? String(cString: strerror(errno)) : ferror(pf_stdout()) != 0 ? "a write failed"
    : stdoutClosed && lseek(1, 0, SEEK_END) > 0 ? "stdout is closed" : nil
if let reason {
    Output.message("cannot write the output: \(reason)")
    exit(status == ExitCode.ok ? ExitCode.failed : status)
}
exit(status)
