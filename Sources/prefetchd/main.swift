import FoundationEssentials
import Glibc
import PrefetchProtocol
import QueueCore

SignalWatcher.blockHandledSignals()
openClosedStandardDescriptors()
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
        // Passed descriptors are checked before the daemon opens any: one of its own would look passed.
        let passedSocket = try SocketActivation.receive(environment: options.environment)
        do {
            let daemon: Daemon
            do {
                daemon = try Daemon(options: options, passedSocket: passedSocket)
            } catch let error as DatabaseError where error.isCorrupt {
                // Damage the start met outside what it checks after a clean stop (`Store.openIndex`): started again,
                // it reads the index through and moves it aside.
                Log.error("the index is damaged (\(error.message)): starting again")
                daemon = try Daemon(options: options, passedSocket: passedSocket)
            }
            try daemon.run()
        } catch let error as DatabaseError where error.isDiskFull {
            throw DaemonError("the disk of \(options.cacheDirectory) is full: the index cannot be written (\(error.message)); "
                              + "what is queued stays queued: free some space, or choose another --cache-dir")
        }
    }
} catch {
    writeStandardError("prefetchd: \(Log.oneLine("\(error)"))\n")
    exit(1)
}
