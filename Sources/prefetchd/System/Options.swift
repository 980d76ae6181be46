import Glibc
import PrefetchProtocol
import QueueCore

/// Everything the daemon can be told on its command line; the defaults need no configuration at all.
struct Options {
    var socketPath: String
    var cacheDirectory: String
    var maxCacheBytes: Int64 = 1 << 30
    var fastWidth = 8
    var slowWidth = 1
    var perHostLimit: Int?
    var fetch = FetchSettings()
    var retry = RetryPolicy()
    /// Freshness when the response says nothing (ms).
    var defaultTTL: Int64 = 86_400_000
    /// Slow-lane tasks held in memory; the rest of the backlog stays in SQLite.
    var backlogWindow = 1024
    var workerThreads = 2
    var logLevel = Log.Level.info

    static let usage = """
        Usage: prefetchd [OPTIONS]

        The image-prefetch daemon: fetches URLs into a local cache through an urgent (parallel) lane and a
        background (serial) lane that waits while urgent work runs. Drive it with prefetchctl.

        Options (every one has a sane default; none is needed):
          --socket PATH           control socket (default $XDG_RUNTIME_DIR/prefetchd/ctl.sock,
                                  else /tmp/prefetchd-$UID/ctl.sock)
          --cache-dir DIR         cache and index (default $XDG_CACHE_HOME/prefetchd, else ~/.cache/prefetchd)
          --max-cache-bytes SIZE  cache size limit, LRU eviction beyond it (default 1G)
          --fast-width N          parallel urgent fetches (default 8)
          --slow-width N          parallel background fetches (default 1)
          --per-host N            running fetches per host at most (default: no limit)
          --max-bytes SIZE        largest body accepted (default 50M)
          --connect-timeout SEC   connect timeout (default 10)
          --low-speed-time SEC    abort a transfer slower than 1 KiB/s for this long (default 30)
          --max-attempts N        attempts per URL for transient failures (default 3)
          --negative-ttl SEC      how long a permanent failure is remembered (default 300)
          --default-ttl SEC       freshness when the server gives none (default 86400)
          --log-level LEVEL       error, warning, info or debug (default info)
          --help, --version

        Example:
          prefetchd --cache-dir /var/tmp/thumbs --max-cache-bytes 500M &
          prefetchctl get https://example.com/a.jpg
        """

    init(environment: [String: String]) {
        socketPath = DefaultPaths.socket(environment: environment)
        cacheDirectory = DefaultPaths.cacheDirectory(environment: environment)
    }

    enum Parsed {
        case run(Options)
        case help
        case version
    }

    /// Parses the command line; a bad flag or value throws a message that names it.
    static func parse(_ arguments: [String], environment: [String: String]) throws -> Parsed {
        var options = Options(environment: environment)
        var rest = arguments[...]
        func value(_ flag: String) throws -> String {
            guard let next = rest.popFirst() else { throw DaemonError("\(flag) needs a value") }
            return next
        }
        func number(_ flag: String, _ text: String, range: ClosedRange<Int64> = 1...Int64.max) throws -> Int64 {
            guard let n = parseSize(text), range.contains(n) else {
                throw DaemonError("\(flag): '\(text)' is not a number in \(range.lowerBound)...\(range.upperBound)")
            }
            return n
        }
        while let argument = rest.popFirst() {
            var flag = argument
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                flag = String(argument[..<equals])
                rest.insert(String(argument[argument.index(after: equals)...]), at: rest.startIndex)
            }
            switch flag {
            case "-h", "--help": return .help
            case "--version": return .version
            case "--socket": options.socketPath = try value(flag)
            case "--cache-dir": options.cacheDirectory = try value(flag)
            case "--max-cache-bytes": options.maxCacheBytes = try number(flag, value(flag))
            case "--fast-width": options.fastWidth = Int(try number(flag, value(flag), range: 1...1024))
            case "--slow-width": options.slowWidth = Int(try number(flag, value(flag), range: 1...1024))
            case "--per-host": options.perHostLimit = Int(try number(flag, value(flag), range: 1...1024))
            case "--max-bytes": options.fetch.maxBytes = try number(flag, value(flag))
            case "--connect-timeout": options.fetch.connectTimeout = try number(flag, value(flag), range: 1...3600) * 1000
            case "--low-speed-time": options.fetch.lowSpeedTime = try number(flag, value(flag), range: 1...3600)
            case "--max-attempts": options.retry.maxAttempts = Int(try number(flag, value(flag), range: 1...100))
            case "--negative-ttl": options.retry.negativeTTL = try number(flag, value(flag), range: 0...31_536_000) * 1000
            case "--default-ttl": options.defaultTTL = try number(flag, value(flag), range: 0...31_536_000) * 1000
            case "--log-level":
                let level = try value(flag)
                guard let parsed = ["error": Log.Level.error, "warning": .warning, "info": .info, "debug": .debug][level] else {
                    throw DaemonError("--log-level: '\(level)' is not one of error, warning, info, debug")
                }
                options.logLevel = parsed
            default:
                throw DaemonError("unknown option '\(argument)' (see prefetchd --help)")
            }
        }
        guard options.socketPath.hasPrefix("/") else { throw DaemonError("--socket must be an absolute path") }
        guard options.cacheDirectory.hasPrefix("/") else { throw DaemonError("--cache-dir must be an absolute path") }
        return .run(options)
    }

    /// `123`, `64K`, `50M`, `1G` (powers of 1024).
    static func parseSize(_ text: String) -> Int64? {
        let multipliers: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
        if let last = text.last?.uppercased().first, let multiplier = multipliers[last] {
            return Int64(text.dropLast()).flatMap { $0.multipliedReportingOverflow(by: multiplier).overflow ? nil : $0 * multiplier }
        }
        return Int64(text)
    }
}
