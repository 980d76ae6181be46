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
        return "/tmp/prefetchd-\(getuid())/ctl.sock"
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
