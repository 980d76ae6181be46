import CSystem
import Glibc

/// Whether the daemon's last run ended in a fatal signal of its own (a crash: SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT,
/// as a decoder's bug or a watchdog's abort sends) rather than a kill from outside (SIGKILL, the OOM killer) or a
/// power cut, which leave no mark: a handler writes the signal's number into a file beside the index
/// (`index.sqlite-crash`) before the signal takes the process as it would have. `CrashGuard` weighs deaths by it.
final class FatalSignalMark {
    /// The signal the last run ended in, if it was one of its own.
    let signal: Int32?
    private let path: String
    private let descriptor: Int32

    /// Opens (or makes) the mark in `directory` and reads it. Without it (it cannot be opened), every death weighs
    /// as a kill from outside.
    init(directory: String) {
        path = directory + "/" + CacheFiles.indexName + "-crash"
        descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        var text = [UInt8](repeating: 0, count: 8)
        let count = descriptor >= 0 ? pread(descriptor, &text, text.count, 0) : 0
        signal = count > 0 ? Int32(String(decoding: text.prefix(count).filter { (48...57).contains($0) }, as: UTF8.self)) : nil
        if descriptor < 0 { Log.warning("cannot open \(path): \(String(cString: strerror(errno))); crashes are not told from kills") }
    }

    /// Forgets the last run's signal (once its deaths are counted) and marks this run's from now on.
    func arm() {
        guard descriptor >= 0 else { return }
        if ftruncate(descriptor, 0) != 0 || pf_mark_fatal_signals(descriptor) != 0 {
            Log.warning("cannot arm \(path): \(String(cString: strerror(errno))); crashes are not told from kills")
        }
    }
}
