import CSystem
import Glibc

/// SIGTERM, SIGINT and SIGHUP delivered through a signalfd to the loop; SIGPIPE ignored.
final class SignalWatcher {
    private let signals: LoopDescriptor

    /// Blocks the signals (call before any thread starts) and reports each one to `handler` on the loop thread.
    init(loop: EventLoop, handler: @escaping (Int32) -> Void) throws(SystemError) {
        signal(SIGPIPE, SIG_IGN)
        var set = sigset_t()
        sigemptyset(&set)
        for signal in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, signal) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        let fd = try syscall("signalfd") { signalfd(-1, &set, Int32(SFD_NONBLOCK | SFD_CLOEXEC)) }
        signals = try LoopDescriptor(fd, on: loop) { _ in
            var info = signalfd_siginfo()
            while read(fd, &info, MemoryLayout<signalfd_siginfo>.size) == MemoryLayout<signalfd_siginfo>.size {
                handler(Int32(info.ssi_signo))
            }
        }
    }
}
