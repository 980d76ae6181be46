import Glibc
import PrefetchProtocol
import QueueCore

/// Running as a service: the reload on SIGHUP, the status line systemd shows, and the start-up socket.
extension Daemon {
    /// The socket passed by systemd, else one bound at `options.socketPath` with `options.socketMode`.
    func openListeningSocket() throws -> (fd: Int32, path: String, activated: SocketActivation?) {
        if let activation = passedSocket {
            let path = activation.path ?? "the socket passed by systemd"
            if path != options.socketPath {
                Log.info("serving the socket systemd passed (\(path)); the socket setting \(options.socketPath) is not used")
            }
            return (activation.fd, path, activation)
        }
        let path = options.socketPath
        let directory = String(path[..<path.lastIndex(of: "/")!])
        // A socket others may use needs a directory they can pass through.
        let mode: mode_t = 0o700 | (options.socketMode & 0o060 != 0 ? 0o010 : 0) | (options.socketMode & 0o006 != 0 ? 0o001 : 0)
        if !directory.isEmpty { try makeDirectories(directory, mode: mode) }
        if let problem = Options.untrustedSocketDirectory(path) { throw problem }
        return (try UnixSocket.listen(at: path, mode: options.socketMode), path, nil)
    }

    /// Re-reads the configuration file and the command line: applies what can change live (lane widths, limits,
    /// TTLs, log level, access), logs what needs a restart, and keeps everything as it was when the file is bad.
    func reload() {
        guard !shuttingDown else { return }
        notifier.reloading()
        defer { notifier.ready() }
        let next: Options
        do {
            guard case .run(let parsed) = try Options.parse(options.arguments, environment: options.environment) else {
                return
            }
            next = parsed
        } catch {
            Log.error("SIGHUP: keeping the running configuration: \(error)")
            return
        }
        if let path = options.configPath, next.configPath == nil {
            // The default file was read at start and is not there now (moved away, or rewritten by delete and
            // write): its settings stay, as when a file given with --config cannot be read.
            return Log.error("SIGHUP: keeping the running configuration: \(path) is gone; restart prefetchd to run "
                             + "without a configuration file")
        }
        let (reloaded, applied, needRestart) = options.reloaded(next)
        do {
            // The file's socket and cache directory wait for a restart: metrics_textfile is checked against the
            // running ones.
            try reloaded.checkMetricsTextfile()
        } catch {
            return Log.error("SIGHUP: keeping the running configuration: \(error)")
        }
        if let tooFew = Self.descriptorShortage(limit: clients.descriptorLimit, options: reloaded) {
            Log.warning("SIGHUP: \(tooFew)")
        }
        options = reloaded
        Log.threshold = options.logLevel
        clients.reconfigure(options)
        clients.reserveDescriptors(forWork: workDescriptors)
        fetches.reconfigure(options)
        do { try enforceCacheLimit() } catch { Log.error("SIGHUP: cannot evict to stay under max_cache_bytes: \(error)") }
        variants.reconfigure(options)
        apply(scheduler.reconfigure(options.schedulerConfiguration, now: .now))
        conditions.update(policy: options.background)
        fetches.limitBackgroundRate(backgroundRateLimit)
        if options.metricsTextfile != nil { metricsTicker.arm(intervalMilliseconds: 5000) }
        let source = options.configPath ?? "no configuration file"
        Log.info("SIGHUP: reloaded \(source)" + (applied.isEmpty ? ", nothing changed" : "; applied " + applied.joined(separator: ", ")))
        if !needRestart.isEmpty {
            Log.warning("SIGHUP: restart prefetchd to apply " + needRestart.joined(separator: ", "))
        }
    }

    /// The background lane follows the conditions (metered network, battery, power saver, quiet hours, no network):
    /// paused, capped or free. Each change is logged once.
    func backgroundConditionsChanged() {
        apply(scheduler.pauseBackground(conditions.mode == .pause, now: .now))
        fetches.limitBackgroundRate(backgroundRateLimit)
        Log.info("background lane: " + backgroundState.summary)
    }

    /// The background lane's download rate in all while a condition says slow (`slow_rate`); nil otherwise.
    var backgroundRateLimit: Int64? { conditions.mode == .slow ? options.slowRate : nil }

    var backgroundState: BackgroundState { conditions.state(rateLimit: options.slowRate) }

    /// One line for `systemctl status`: the lanes, retries, the backlog and the clients.
    func serviceStatus() -> String {
        let counts = scheduler.counts, lanes = self.lanes  // counted as `status` counts them
        return "fast \(lanes.fast.running)/\(lanes.fast.width) running"
            + (lanes.fast.steppedAside.map { " (\($0) of them past urgent_slice)" } ?? "") + ", \(lanes.fast.waiting) waiting; "
            + "slow \(lanes.slow.running)/\(lanes.slow.width) running"
            + (lanes.slow.lingering.map { " (\($0) of them lingering)" } ?? "") + ", \(lanes.slow.waiting) waiting"
            + (counts.slowSuspended ? " (suspended)" : "") + (conditions.mode == .run ? "" : " (\(backgroundState.summary))")
            + (counts.delayed > 0 ? ", \(counts.delayed) retrying later" : "")
            + ", \(backlogOnly) in backlog; \(clients.count) client\(clients.count == 1 ? "" : "s")"
    }
}
