import Glibc

/// The listening socket systemd (or `systemd-socket-activate`) passed to this process, read from `LISTEN_PID`,
/// `LISTEN_FDS` and `LISTEN_FDNAMES` as sd_listen_fds(3) reads them, without libsystemd.
struct SocketActivation {
    /// The first passed descriptor; the others follow it.
    static let firstDescriptor: Int32 = 3

    /// The listening socket, non-blocking and close-on-exec; the daemon owns it but must not unlink its path.
    let fd: Int32
    /// Its path, when it has one.
    let path: String?
    /// The group owning the socket file (the unit's `SocketGroup=`), when it has a path.
    let group: gid_t?

    /// Whether systemd passed this process sockets (before `receive` took them); `LISTEN_FDS` without this process's
    /// `LISTEN_PID` is a variable inherited from elsewhere: the daemon binds its socket itself.
    static func isOffered(environment: [String: String]) -> Bool {
        environment["LISTEN_PID"].flatMap { pid_t($0) } == getpid()
            && (environment["LISTEN_FDS"].flatMap { Int32($0) } ?? 0) > 0
    }

    /// The passed socket named `ctl`, else the only (or first) one; nil when nothing was passed to this process.
    /// Unused passed descriptors are closed, and the `LISTEN_*` variables are removed from the environment.
    static func receive(environment: [String: String]) throws -> SocketActivation? {
        guard isOffered(environment: environment), let count = environment["LISTEN_FDS"].flatMap({ Int32($0) }) else {
            return nil
        }
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
        let names = environment["LISTEN_FDNAMES"].map { $0.split(separator: ":", omittingEmptySubsequences: false) } ?? []
        let index = names.firstIndex { $0 == "ctl" }.map(Int32.init) ?? 0
        guard index < count else { throw DaemonError("LISTEN_FDNAMES names more descriptors than LISTEN_FDS=\(count)") }
        // Every passed descriptor is open (as sd_listen_fds(3) checks): a count from a broken or hostile environment
        // fails at the first one that is not, instead of walking up to 2^31 numbers.
        let passed = Int(firstDescriptor)..<(Int(firstDescriptor) + Int(count))
        if let missing = passed.first(where: { fcntl(Int32($0), F_GETFD) < 0 }) {
            throw DaemonError("LISTEN_FDS=\(count) passes descriptors \(passed.lowerBound)-\(passed.upperBound - 1), "
                              + "but \(missing) is not open")
        }
        let fd = firstDescriptor + index
        for other in passed.map(Int32.init) where other != fd {
            Log.warning("socket activation: closing passed descriptor \(other), which prefetchd does not use")
            close(other)
        }
        try check(fd)
        let flags = try syscall("fcntl(F_GETFL)", "fd \(fd)") { fcntl(fd, F_GETFL) }
        try syscall("fcntl(F_SETFL)", "fd \(fd)") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        try syscall("fcntl(F_SETFD)", "fd \(fd)") { fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let path = Self.path(of: fd)
        var info = stat()
        let group = path.flatMap { stat($0, &info) == 0 ? info.st_gid : nil }
        return SocketActivation(fd: fd, path: path, group: group)
    }

    /// Throws unless `fd` is a listening Unix stream socket.
    private static func check(_ fd: Int32) throws {
        func option(_ name: Int32) throws -> Int32 {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            try syscall("getsockopt", "passed fd \(fd)") { getsockopt(fd, SOL_SOCKET, name, &value, &length) }
            return value
        }
        guard try option(SO_DOMAIN) == AF_UNIX, try option(SO_TYPE) == Int32(SOCK_STREAM.rawValue),
              try option(SO_ACCEPTCONN) != 0 else {
            throw DaemonError("the socket passed as fd \(fd) is not a listening Unix stream socket "
                              + "(prefetchd.socket must use ListenStream= with a path)")
        }
    }

    /// The bound path of a Unix socket; nil for an abstract or unnamed one.
    static func path(of fd: Int32) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        let path = withUnsafeBytes(of: address.sun_path) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        return path.hasPrefix("/") ? path : nil
    }
}
