import Foundation
import Testing

/// A fake systemd notification socket: a datagram Unix socket at a path, or an abstract `@name`.
final class NotifyListener {
    let fd: Int32
    /// The value for `NOTIFY_SOCKET`.
    let address: String

    /// One datagram and when the kernel queued it (seconds; SO_TIMESTAMP, so a late read does not skew it).
    struct Message {
        let time: Double
        let text: String
        /// The `KEY=value` assignments of the datagram.
        var fields: [String: String] {
            Dictionary(text.split(separator: "\n").compactMap { line in
                line.firstIndex(of: "=").map { (String(line[..<$0]), String(line[line.index(after: $0)...])) }
            }, uniquingKeysWith: { $1 })
        }
    }

    private(set) var received: [Message] = []

    /// `path` binds a file socket; nil binds an abstract one with a random name.
    init(path: String?) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        var bytes: [UInt8]
        if let path {
            address = path
            bytes = Array(path.utf8)
        } else {
            address = "@prefetchd-test-" + UUID().uuidString.prefix(8).lowercased()
            bytes = Array(address.utf8)
            bytes[0] = 0
        }
        var socketAddress = sockaddr_un()
        socketAddress.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &socketAddress.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count + (path == nil ? 0 : 1))
        let result = withUnsafePointer(to: &socketAddress) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard result == 0 else {
            close(fd)
            throw HarnessError("bind \(address): errno \(errno)")
        }
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, Self.timestampOption, &on, socklen_t(MemoryLayout<Int32>.size))
    }

    /// SO_TIMESTAMP (SO_TIMESTAMP_OLD on 64-bit Linux), also the control message type.
    private static let timestampOption: Int32 = 29

    deinit { close(fd) }

    /// The next datagram, or nil after `timeout` seconds.
    func next(timeout: Double) -> Message? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, Int32(timeout * 1000)) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var control = [UInt8](repeating: 0, count: 256)
        var stamp: Double?
        let count = buffer.withUnsafeMutableBytes { data in
            control.withUnsafeMutableBytes { controlBytes -> Int in
                var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
                return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                    var header = msghdr()
                    header.msg_iov = vectorPointer
                    header.msg_iovlen = 1
                    header.msg_control = controlBytes.baseAddress
                    header.msg_controllen = controlBytes.count
                    let count = recvmsg(fd, &header, 0)
                    // struct cmsghdr { size_t len; int level; int type; } then the data, 8-byte aligned.
                    var offset = 0
                    while count > 0, offset + 16 <= Int(header.msg_controllen) {
                        let length = controlBytes.load(fromByteOffset: offset, as: Int.self)
                        let level = controlBytes.load(fromByteOffset: offset + 8, as: Int32.self)
                        let type = controlBytes.load(fromByteOffset: offset + 12, as: Int32.self)
                        if level == SOL_SOCKET, type == Self.timestampOption, length >= 16 + MemoryLayout<timeval>.size {
                            let time = controlBytes.loadUnaligned(fromByteOffset: offset + 16, as: timeval.self)
                            stamp = Double(time.tv_sec) + Double(time.tv_usec) / 1e6
                        }
                        guard length > 0 else { break }
                        offset += (length + 7) & ~7
                    }
                    return count
                }
            }
        }
        guard count > 0 else { return nil }
        let message = Message(time: stamp ?? monotonicSeconds(), text: String(decoding: buffer[..<count], as: UTF8.self))
        received.append(message)
        return message
    }

    /// Reads until a datagram satisfies `predicate`; nil after `timeout` seconds.
    func waitFor(timeout: Double = 10, _ predicate: (Message) -> Bool) -> Message? {
        let end = monotonicSeconds() + timeout
        while monotonicSeconds() < end {
            if let message = next(timeout: end - monotonicSeconds()), predicate(message) { return message }
        }
        return nil
    }

    /// Every datagram that arrives within `seconds`.
    func collect(for seconds: Double) -> [Message] {
        var messages: [Message] = []
        let end = monotonicSeconds() + seconds
        while monotonicSeconds() < end {
            if let message = next(timeout: end - monotonicSeconds()) { messages.append(message) }
        }
        return messages
    }
}

func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// The test process's environment without anything a service manager sets, plus `extra`.
func serviceEnvironment(_ extra: [String: String] = [:]) -> [String: String] {
    var environment = ProcessInfo.processInfo.environment
    for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES",
                 "JOURNAL_STREAM", "RUNTIME_DIRECTORY", "CACHE_DIRECTORY"] {
        environment.removeValue(forKey: name)
    }
    return environment.merging(extra) { $1 }
}

/// A prefetchd started with a chosen environment (and optionally through another program, such as
/// `systemd-socket-activate`), in its own temporary directory.
final class ServiceDaemon: @unchecked Sendable {
    let directory: TemporaryDirectory
    let child: ChildProcess
    let socket: String
    /// The daemon's pid when a launcher runs in front of it (learnt from `status`), else the child's.
    private(set) var pid: Int32
    private let launched: Bool
    var cache: String { directory.path + "/cache" }
    var log: String { child.stderrText }

    /// Starts `prefetchd --socket … --cache-dir … arguments` and waits until `ping` answers (unless `wait` is
    /// false). `launcher` runs in front of the daemon, e.g. `["systemd-socket-activate", "-l", socket]`; it runs
    /// under a small wrapper process, because Foundation's Process takes a child that closes inherited descriptors
    /// (as systemd-socket-activate does) for one that exited, and then blocks in waitpid.
    init(_ arguments: [String] = [], environment: [String: String] = [:], launcher: ((String) -> [String])? = nil,
         directory: TemporaryDirectory? = nil, wait: Bool = true) throws {
        self.directory = try directory ?? TemporaryDirectory()
        socket = self.directory.path + "/ctl.sock"
        let daemon = [Paths.prefetchd, "--cache-dir", self.directory.path + "/cache"]
            + (launcher == nil ? ["--socket", socket] : []) + arguments
        var command = daemon
        if let launcher {
            // The wrapper keeps Foundation's descriptor open, clears the signal mask the test process passes on
            // (a blocked SIGCHLD would hang a shell's `wait`) and exits with the launched program's status.
            let wrapper = """
                import os, signal, sys
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                pid = os.fork()
                if pid == 0:
                    os.execv(sys.argv[1], sys.argv[1:])
                _, status = os.waitpid(pid, 0)
                sys.exit(os.waitstatus_to_exitcode(status))
                """
            command = ["/usr/bin/env", "python3", "-c", wrapper] + launcher(socket) + daemon
        }
        launched = launcher != nil
        child = try ChildProcess(command[0], Array(command.dropFirst()), stderrPath: self.directory.path + "/daemon.log",
                                 environment: serviceEnvironment(environment))
        pid = child.pid
        if wait { try waitUntilServing() }
    }

    func waitUntilServing() throws {
        for _ in 0..<200 {
            if ctl("ping").status == 0 {
                if launched, let daemon = try status()["pid"] as? Int { pid = Int32(daemon) }
                return
            }
            guard child.process.isRunning else { throw HarnessError("prefetchd exited: \(child.stderrText)") }
            usleep(25_000)
        }
        throw HarnessError("prefetchd did not answer within 5 s: \(child.stderrText)")
    }

    /// Waits until the log contains `text`; false after `timeout` seconds.
    func waitForLog(_ text: String, timeout: Double = 5) -> Bool {
        let end = monotonicSeconds() + timeout
        while monotonicSeconds() < end {
            if log.contains(text) { return true }
            usleep(20_000)
        }
        return false
    }

    func signal(_ signal: Int32) { kill(pid, signal) }

    @discardableResult
    func ctl(_ arguments: String...) -> CommandResult {
        run(Paths.prefetchctl, ["--socket", socket] + arguments)
    }

    /// `prefetchctl status --json`, decoded.
    func status() throws -> [String: Any] {
        let result = ctl("status", "--json")
        guard result.status == 0,
              let object = try JSONSerialization.jsonObject(with: result.stdoutData) as? [String: Any] else {
            throw HarnessError("status failed: \(result.stdout) \(result.stderr)")
        }
        return object
    }

    func fastWidth() throws -> Int? { (try status()["fast"] as? [String: Any])?["width"] as? Int }

    deinit {
        if launched && pid != child.pid && child.process.isRunning { kill(pid, SIGKILL) }
        child.stop(SIGKILL)
    }
}

/// Runs `command` as another user through `setpriv` (root only): `uid`, `gid`, and supplementary `groups`.
func runAs(uid: UInt32, gid: UInt32, groups: [UInt32] = [], _ command: [String]) -> CommandResult {
    let groupFlags = groups.isEmpty ? ["--clear-groups"] : ["--groups=" + groups.map(String.init).joined(separator: ",")]
    return run("/usr/bin/setpriv", ["--reuid=\(uid)", "--regid=\(gid)"] + groupFlags + ["--"] + command)
}

/// A copy of prefetchctl that any user can run (the build directory may not be reachable for them).
func publicPrefetchctl(in directory: TemporaryDirectory) throws -> String {
    let copy = directory.path + "/prefetchctl"
    if !FileManager.default.fileExists(atPath: copy) {
        try copyExecutable(Paths.prefetchctl, to: copy)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: copy)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
    }
    return copy
}

/// Copies a program with `cp`, in a process of its own: a copy written by this process is open for writing while
/// other tests start children, one of which may inherit that descriptor and make the copy's `exec` fail with
/// ETXTBSY (exit 126; ConfigTests.usersOwnConfiguration failed so in 2 of 3 runs of its suite).
func copyExecutable(_ source: String, to destination: String) throws {
    let copied = run("/bin/cp", [source, destination])
    guard copied.status == 0 else { throw HarnessError("cp \(source) \(destination): \(copied.stderr)") }
}

/// Writes `text` to `path`.
func write(_ text: String, to path: String) throws {
    try text.write(toFile: path, atomically: true, encoding: .utf8)
}
