import Glibc

/// Tells systemd about readiness, reloads, stops, status and liveness: datagrams to `$NOTIFY_SOCKET`, as
/// sd_notify(3) sends them, without libsystemd. Does nothing when `NOTIFY_SOCKET` is unset.
///
/// The watchdog and status timers run on the event loop, so a stuck loop stops the `WATCHDOG=1` pings and systemd
/// restarts the service. Confined to the loop thread.
final class SystemdNotifier {
    private let fd: Int32
    private var address = sockaddr_un()
    private var addressLength: socklen_t = 0
    /// Half of `$WATCHDOG_USEC`, in ms, when systemd asked this process for pings.
    let watchdogInterval: Int64?
    private var nextWatchdog: Int64?
    /// The status line (lane counts); asked at most once a second, sent when it changed.
    var status: () -> String = { "" }
    private var lastStatus = ""
    private var lastStatusCheck: Int64 = 0
    /// A loop turn ended since the last check, so the status may have changed.
    private var statusStale = false
    /// Between `READY=1` and `STOPPING=1`: status updates are sent.
    private var serving = false
    private var warned = false
    private var timer: LoopTimer!

    static let statusInterval: Int64 = 1000

    var isEnabled: Bool { fd >= 0 }

    init(environment: [String: String], loop: EventLoop) {
        var fd: Int32 = -1
        if let target = environment["NOTIFY_SOCKET"], !target.isEmpty {
            do {
                (address, addressLength) = try Self.address(target)
                fd = try syscall("socket", "for NOTIFY_SOCKET") {
                    socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
                }
            } catch {
                Log.warning("NOTIFY_SOCKET=\(target): \(error); not notifying systemd")
            }
        }
        self.fd = fd
        // As sd_watchdog_enabled(3): a WATCHDOG_PID that is not this process's pid (or no pid at all) means no pings.
        let forThisProcess = environment["WATCHDOG_PID"].map { pid_t($0) == getpid() } ?? true
        if fd >= 0, let usec = environment["WATCHDOG_USEC"].flatMap({ Int64($0) }), usec > 0, forThisProcess {
            watchdogInterval = max(1, usec / 2000)
        } else {
            watchdogInterval = nil
        }
        timer = loop.makeTimer { [unowned self] in self.timerFired(now: monotonicMilliseconds()) }
    }

    deinit { if fd >= 0 { close(fd) } }

    /// `/path` or `@abstract` as a socket address and its length.
    private static func address(_ target: String) throws -> (sockaddr_un, socklen_t) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let abstract = target.hasPrefix("@")
        guard abstract || target.hasPrefix("/") else { throw DaemonError("not an absolute path nor an @abstract name") }
        var bytes = Array(target.utf8)
        if abstract { bytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { throw DaemonError("longer than \(capacity - 1) bytes") }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        return (address, socklen_t(pathOffset + bytes.count + (abstract ? 0 : 1)))
    }

    /// Sends one datagram of `KEY=value` lines; a failure is logged once and otherwise ignored.
    func notify(_ state: String) {
        guard fd >= 0 else { return }
        var bytes = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { target in
                sendto(fd, &bytes, bytes.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT), target, addressLength)
            }
        }
        if sent < 0 && !warned {
            warned = true
            Log.warning("sendto NOTIFY_SOCKET: \(String(cString: strerror(errno))) (further failures are not logged)")
        }
    }

    /// `READY=1` with the status line; starts the watchdog pings.
    func ready() {
        guard fd >= 0 else { return }
        lastStatus = status()
        lastStatusCheck = monotonicMilliseconds()
        statusStale = false
        notify("READY=1\nSTATUS=\(lastStatus)")
        serving = true
        if let watchdogInterval, nextWatchdog == nil {
            notify("WATCHDOG=1")
            nextWatchdog = monotonicMilliseconds() + watchdogInterval
        }
        timer.schedule(at: due)
    }

    /// `RELOADING=1`, stamped with the monotonic clock as systemd 253 and later expect; `ready` ends the reload.
    func reloading(status: String = "reloading the configuration") {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        notify("RELOADING=1\nMONOTONIC_USEC=\(Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000)\n"
               + "STATUS=\(status)")
    }

    /// `STOPPING=1`; no more watchdog pings.
    func stopping(reason: String) {
        notify("STOPPING=1\nSTATUS=stopping (\(reason))")
        nextWatchdog = nil
        serving = false
        statusStale = false
        timer.cancel()
    }

    /// Called at the end of every loop turn: the status is checked now if a second has passed since the last
    /// check, else when the timer is due.
    func turnEnded() {
        guard serving else { return }
        statusStale = true
        let now = monotonicMilliseconds()
        if now - lastStatusCheck >= Self.statusInterval { checkStatus(now: now) }
        timer.schedule(at: due)
    }

    /// When the next watchdog ping or status check is due (monotonic ms).
    private var due: Int64? {
        let status = statusStale ? lastStatusCheck + Self.statusInterval : nil
        switch (nextWatchdog, status) {
        case let (watchdog?, status?): return min(watchdog, status)
        case let (watchdog, status): return watchdog ?? status
        }
    }

    /// Sends what is due at monotonic time `now`.
    private func timerFired(now: Int64) {
        if let watchdog = nextWatchdog, watchdog <= now, let watchdogInterval {
            notify("WATCHDOG=1")
            nextWatchdog = now + watchdogInterval
        }
        if statusStale, now - lastStatusCheck >= Self.statusInterval { checkStatus(now: now) }
        timer.schedule(at: due)
    }

    private func checkStatus(now: Int64) {
        statusStale = false
        lastStatusCheck = now
        let current = status()
        guard current != lastStatus else { return }
        lastStatus = current
        notify("STATUS=\(current)")
    }
}
