import FoundationEssentials
import Glibc
import PrefetchProtocol

let environment = ProcessInfo.processInfo.environment
do {
    switch try Options.parse(Array(CommandLine.arguments.dropFirst()), environment: environment) {
    case .help:
        print(Options.usage)
    case .version:
        print("prefetchd \(prefetchVersion)")
    case .run(let options):
        try Daemon(options: options).run()
    }
} catch {
    writeStandardError("prefetchd: \(error)\n")
    exit(1)
}
