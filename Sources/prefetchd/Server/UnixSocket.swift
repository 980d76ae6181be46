import Glibc

/// Unix-domain socket calls, each wrapped once.
enum UnixSocket {
    static func address(_ path: String) throws(SystemError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else {
            throw SystemError(call: "bind", errno: ENAMETOOLONG, detail: "\(path) (at most \(capacity - 1) bytes)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    /// True when a process accepts connections on `path`.
    static func isAlive(_ path: String) -> Bool {
        guard var address = try? address(path) else { return false }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        return result == 0
    }

    /// Throws when a process accepts connections on `path`, which may be another prefetchd or another program.
    static func refuseIfServed(_ path: String) throws {
        if isAlive(path) {
            throw DaemonError("something is already serving \(path) (another prefetchd?); stop it first or pick another "
                              + "--socket")
        }
    }

    /// Whether a socket is at `path`; throws when something else is there: binding would replace it.
    static func holdsSocket(_ path: String) throws -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0 else { return false }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw DaemonError("\(path) exists and is not a socket; refusing to replace it")
        }
        return true
    }

    /// Binds and listens on `path` with permissions `mode`. A stale socket file is replaced; a live one is an error.
    static func listen(at path: String, mode: mode_t) throws -> Int32 {
        var address = try address(path)
        if try holdsSocket(path) {
            try refuseIfServed(path)
            unlink(path)
        }
        let fd = try syscall("socket") {
            socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        }
        do {
            let previous = umask(~mode & 0o777)
            defer { umask(previous) }
            try syscall("bind", path) {
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                }
            }
            try syscall("chmod", path) { chmod(path, mode) }
            try syscall("listen", path) { Glibc.listen(fd, 512) }
        } catch {
            close(fd)
            throw error
        }
        return fd
    }
}

/// A start-up or configuration problem, said plainly.
struct DaemonError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
