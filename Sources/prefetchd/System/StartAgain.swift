import CSQLite
import Glibc

/// Starting the daemon again after it found its index damaged while serving (`Daemon.run`): the program is executed
/// anew in the same process (same pid, arguments and environment, so that systemd and its watchdog follow), so that
/// nothing of the stopped run lives on (its threads, descriptors, GLib's bus connection). The damage goes along in
/// `PREFETCHD_INDEX_DAMAGED` (`N:message`, N the starts for damage so far), and the new start sets the index aside,
/// keeping what of the queue can be read (`Store.init`). A socket systemd passed is passed on as systemd passes it;
/// one the daemon bound is bound again.
enum StartAgain {
    private static let variable = "PREFETCHD_INDEX_DAMAGED"
    /// A disk that damages each new index does not make the daemon start for ever.
    private static let limit = 3

    /// The damage the run before this start found, taken out of the environment.
    static func takeDamage(environment: [String: String]) -> (starts: Int, damage: DatabaseError)? {
        guard let value = environment[variable] else { return nil }
        unsetenv(variable)
        let parts = value.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let starts = Int(parts[0]), (1...limit).contains(starts) else { return nil }
        return (starts, DatabaseError(call: "a query while serving", code: SQLITE_CORRUPT, message: String(parts[1])))
    }

    /// Executes the program again with `damage`; returns only by throwing.
    static func exec(after damage: DatabaseError, starts: Int, passedSocket: SocketActivation?) throws -> Never {
        guard starts < limit else {
            throw DaemonError("the index was found damaged \(starts + 1) times since prefetchd started (last: "
                              + "\(damage.message)); stopped: is the disk failing?")
        }
        setenv(variable, "\(starts + 1):\(damage.message)", 1)
        if let passedSocket {
            // As systemd passes it: descriptor 3, kept open across exec, for this pid.
            if passedSocket.fd != SocketActivation.firstDescriptor {
                try syscall("dup2", "the passed socket") { dup2(passedSocket.fd, SocketActivation.firstDescriptor) }
            }
            try syscall("fcntl(F_SETFD)", "the passed socket") { fcntl(SocketActivation.firstDescriptor, F_SETFD, 0) }
            setenv("LISTEN_PID", String(getpid()), 1)
            setenv("LISTEN_FDS", "1", 1)
            setenv("LISTEN_FDNAMES", "ctl", 1)
        }
        let program = runningProgram()
        execv(program, CommandLine.unsafeArgv)
        throw SystemError(call: "execv", errno: errno, detail: "\(program), to start again after the index was found damaged")
    }

    /// The path of the running program (the process keeps its name), or `/proc/self/exe` when it was deleted since
    /// (an upgrade that replaced it: its inode still runs).
    private static func runningProgram() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { return "/proc/self/exe" }
        let path = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return path.hasSuffix(" (deleted)") || access(path, X_OK) != 0 ? "/proc/self/exe" : path
    }
}
