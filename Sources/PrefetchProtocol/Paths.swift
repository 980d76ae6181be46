#if canImport(Glibc)
import Glibc
#endif

/// Where the daemon listens and keeps its cache when nothing says otherwise.
public enum DefaultPaths {
    /// `$XDG_RUNTIME_DIR/prefetchd/ctl.sock`, else `/tmp/prefetchd-$UID/ctl.sock`.
    public static func socket(environment: [String: String]) -> String {
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            return runtime + "/prefetchd/ctl.sock"
        }
        return sharedTemporarySocket
    }

    /// The socket in the fallback directory, in /tmp, where any user may make that directory first.
    public static var sharedTemporarySocket: String { "/tmp/prefetchd-\(getuid())/ctl.sock" }

    /// Why the directory a socket is in cannot be trusted, or nil. It must be this user's (or root's, with
    /// `rootToo`), a link to it too, and neither its group nor others may write to it, unless it is root's and
    /// sticky, as /tmp is (they cannot remove what is not theirs; in a sticky directory of this user's, others could
    /// still make the socket first). Another user who made `/tmp/prefetchd-$UID` first could replace the socket with
    /// their own, read every request (URLs with credentials) and answer with paths of their choosing.
    public static func untrustedDirectory(of socketPath: String, rootToo: Bool) -> String? {
        guard let slash = socketPath.lastIndex(of: "/") else { return nil }
        let directory = slash == socketPath.startIndex ? "/" : String(socketPath[..<slash])
        let trusted = { (owner: uid_t) in owner == geteuid() || (rootToo && owner == 0) }
        var link = stat(), info = stat()
        guard lstat(directory, &link) == 0, stat(directory, &info) == 0 else { return nil }  // connecting or binding says
        if (link.st_mode & S_IFMT) == S_IFLNK, !trusted(link.st_uid) {
            return "\(directory) is a link that belongs to uid \(link.st_uid)"
        }
        if !trusted(info.st_uid) { return "\(directory) belongs to uid \(info.st_uid), not to this user" }
        if info.st_mode & 0o022 != 0, info.st_mode & S_ISVTX == 0 || info.st_uid != 0 {
            return "\(directory) may be written by others (mode \(String(info.st_mode & 0o7777, radix: 8)))"
        }
        return nil
    }

    /// `$XDG_CACHE_HOME/prefetchd`, else `~/.cache/prefetchd`.
    public static func cacheDirectory(environment: [String: String]) -> String {
        if let cache = environment["XDG_CACHE_HOME"], cache.hasPrefix("/") {
            return cache + "/prefetchd"
        }
        let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? homeFromPasswd() ?? "/tmp"
        return home + "/.cache/prefetchd"
    }

    /// The system service's socket (systemd/prefetchd.socket).
    public static let systemSocket = "/run/prefetchd/ctl.sock"

    /// The socket `prefetchctl` talks to: `--socket`, else `$PREFETCHD_SOCKET`, else the user daemon's socket when
    /// it exists, else the system service's when that exists, else the user default.
    public static func clientSocket(flag: String?, environment: [String: String]) -> String {
        if let path = flag ?? environment["PREFETCHD_SOCKET"].flatMap({ $0.isEmpty ? nil : $0 }) { return path }
        let user = socket(environment: environment)
        if access(user, F_OK) != 0, access(systemSocket, F_OK) == 0 { return systemSocket }
        return user
    }

    private static func homeFromPasswd() -> String? {
        guard let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir else { return nil }
        return String(cString: dir)
    }
}
