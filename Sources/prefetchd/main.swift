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
        if let problem = CacheFiles.unusable(options.cacheDirectory, checkingAccess: true) { throw DaemonError(problem) }
        print("# prefetchd \(prefetchVersion): the configuration is valid; the effective settings, read from "
              + (options.configPath.map { "\($0) and the command line" } ?? "the command line (no configuration file)"))
        print(options.description)
        for warning in ImageFormats.unavailableWarnings(policy: options.images) {
            writeStandardError("prefetchd: warning: \(warning)\n")
        }
    case .run(let options):
        try Daemon.checkDescriptorLimit()
        MemoryTrimmer.mapLargeBlocksApart()
        // Passed descriptors are checked before the daemon opens any: one of its own would look passed.
        let passedSocket = try SocketActivation.receive(environment: options.environment)
        let before = StartAgain.takeDamage(environment: options.environment)
        do {
            if let damage = try serve(options, passedSocket: passedSocket, settingAside: before?.damage) {
                try StartAgain.exec(after: damage, starts: before?.starts ?? 0, passedSocket: passedSocket)
            }
        } catch let error as DatabaseError where error.isDiskFull {
            throw DaemonError("the disk of \(options.cacheDirectory) is full: the index cannot be written (\(error.message)); "
                              + "what is queued stays queued: free some space, or choose another --cache-dir")
        }
    }
} catch {
    writeStandardError("prefetchd: \(Log.oneLine("\(error)"))\n")
    exit(1)
}

/// Makes the daemon and serves until it stops; returns the damage it found in the index while serving, if that
/// stopped it. `damage`: found by the run before (`StartAgain`); the daemon sets the index aside.
func serve(_ options: Options, passedSocket: SocketActivation?, settingAside damage: DatabaseError?) throws -> DatabaseError? {
    let daemon: Daemon
    do {
        daemon = try Daemon(options: options, passedSocket: passedSocket, damage: damage)
    } catch let error as DatabaseError where error.isCorrupt && damage == nil {
        // Met by the start outside what it checks after a clean stop (`Store.openIndex`).
        Log.error("the index is damaged (\(error.message)): starting again")
        daemon = try Daemon(options: options, passedSocket: passedSocket, damage: error)
    }
    return try daemon.run()
}
