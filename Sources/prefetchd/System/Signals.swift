import CSystem
import Glibc

/// SIGTERM, SIGINT and SIGHUP delivered through a signalfd to the loop; SIGPIPE ignored.
final class SignalWatcher {
    private let signals: LoopDescriptor

    /// The signals the loop reads, as a set.
    private static var handled: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, signal) }
        return set
    }

    /// Blocks the signals the loop reads in this thread and every thread it starts. Called first thing in `main`:
    /// one that comes while the daemon starts (a SIGHUP during a long recovery) then waits for the loop instead of
    /// ending the process with its default action.
    static func blockHandledSignals() {
        var set = handled
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Reports each signal the loop reads to `handler` on the loop thread (those that came before it included).
    init(loop: EventLoop, handler: @escaping (Int32) -> Void) throws(SystemError) {
        signal(SIGPIPE, SIG_IGN)
        Self.blockHandledSignals()
        var set = Self.handled
        let fd = try syscall("signalfd") { signalfd(-1, &set, Int32(SFD_NONBLOCK | SFD_CLOEXEC)) }
        signals = try LoopDescriptor(fd, on: loop) { _ in
            var info = signalfd_siginfo()
            while read(fd, &info, MemoryLayout<signalfd_siginfo>.size) == MemoryLayout<signalfd_siginfo>.size {
                handler(Int32(info.ssi_signo))
            }
        }
    }
}
