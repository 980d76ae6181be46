import FoundationEssentials
import Glibc
import PrefetchProtocol
import QueueCore

SignalWatcher.blockHandledSignals()
let environment = ProcessInfo.processInfo.environment
do {
    switch try Options.parse(Array(CommandLine.arguments.dropFirst()), environment: environment) {
    case .help:
        print(Options.usage)
    case .version:
        print("prefetchd \(prefetchVersion)")
    case .check(let options):
        print("# prefetchd \(prefetchVersion): the configuration is valid; the effective settings, read from "
              + (options.configPath.map { "\($0) and the command line" } ?? "the command line (no configuration file)"))
        // The effective settings may hold a proxy URL with a password: shown as `user:***@`, as in the log.
        print(CanonicalURL.redactingUserinfo(in: options.description))
        for warning in ImageFormats.unavailableWarnings(policy: options.images) {
            writeStandardError("prefetchd: warning: \(warning)\n")
        }
    case .run(let options):
        try Daemon(options: options).run()
    }
} catch {
    writeStandardError("prefetchd: \(error)\n")
    exit(1)
}
