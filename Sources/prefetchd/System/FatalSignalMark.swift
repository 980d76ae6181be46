import CSystem
import Glibc

/// Whether the daemon's last run ended in a fatal signal of its own (a crash: SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT,
/// as a decoder's bug, a stack overflow or a watchdog's abort raises) rather than a kill from outside (SIGKILL, the
/// OOM killer) or a power cut, which leave no mark: a handler writes the signal's number into a file beside the index
/// (`index.sqlite-crash`) before the signal takes the process as it would have. `CrashGuard` weighs deaths by it.
final class FatalSignalMark {
    /// The signal the last run ended in, if it was one of its own.
    let signal: Int32?
    private let path: String
    private let descriptor: Int32

    /// The signals marked, as the handler writes them: two digits and a newline.
    private static let marked: Set<Int32> = [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT]
    /// What the mark holds when no crash is marked: as long as a mark, so that writing one needs no new space (a full
    /// disk).
    private static let cleared: [UInt8] = Array("--\n".utf8)

    /// Opens (or makes) the mark in `directory` and reads it. Without it (it cannot be opened, or it is not a file of
    /// the daemon's own: a link, a FIFO, a directory), every death weighs as a kill from outside.
    init(directory: String) {
        path = directory + "/" + CacheFiles.indexName + "-crash"
        var fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        var info = stat()
        if fd >= 0, fstat(fd, &info) != 0 || info.st_mode & S_IFMT != S_IFREG || info.st_nlink != 1 {
            Log.warning("\(path) is not a file of prefetchd's own (a link, a FIFO, a directory): crashes are not told "
                        + "from kills; remove it")
            close(fd)
            fd = -1
        } else if fd < 0 {
            Log.warning("cannot open \(path): \(String(cString: strerror(errno))); crashes are not told from kills")
        }
        descriptor = fd
        var text = [UInt8](repeating: 0, count: 3)
        let count = fd >= 0 ? pread(fd, &text, text.count, 0) : 0
        let number = count == 3 && text[2] == 0x0A && text[0...1].allSatisfy { (48...57).contains($0) }
            ? Int32(text[0] - 48) * 10 + Int32(text[1] - 48) : nil
        signal = number.flatMap { Self.marked.contains($0) ? $0 : nil }
    }

    /// Forgets the last run's signal (once its deaths are counted) and marks this run's from now on; the calling
    /// thread (the loop's) gets a stack for the handler, as the workers do (`startDetachedThread`).
    func arm() {
        guard descriptor >= 0 else { return }
        guard pwrite(descriptor, Self.cleared, Self.cleared.count, 0) == Self.cleared.count,
              ftruncate(descriptor, off_t(Self.cleared.count)) == 0,
              pf_mark_fatal_signals(descriptor) == 0 else {
            Log.warning("cannot arm \(path): \(String(cString: strerror(errno))); crashes are not told from kills")
            return
        }
        _ = pf_signal_stack_begin()
    }
}
