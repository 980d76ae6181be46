import Glibc
import Synchronization

/// A transfer's body file, open for writing. It is opened on the fetcher's file thread: making a file's inode can
/// take a millisecond on a busy ext4 (it skips the inodes deleted in the last minutes one by one), which the loop
/// thread may not wait for. Made there, then used by the loop thread alone.
struct BodyFile: Sendable {
    let descriptor: Int32
    /// Bytes kept from an earlier attempt: 0 unless resuming.
    let length: Int64

    /// Opens the body file at `path`: empty, made if needed, or, when `resuming`, positioned after the bytes it
    /// holds. Whatever else is found at `path` (a symbolic link planted there, a FIFO, a
    /// directory) is removed, never opened through, and the download starts over: nothing outside the cache is written.
    static func open(_ path: String, resuming: Bool) throws(SystemError) -> BodyFile {
        var resuming = resuming
        var opened = try openRegular(path, truncating: !resuming)
        if opened == nil {
            deleteEntry(path)
            resuming = false
            opened = try openRegular(path, truncating: true)
        }
        guard let descriptor = opened else {
            throw SystemError(call: "open", errno: EEXIST, detail: "\(path): something other than a regular file came back")
        }
        guard resuming else { return BodyFile(descriptor: descriptor, length: 0) }
        let length = lseek(descriptor, 0, SEEK_END)
        guard length >= 0 else {
            let error = SystemError(call: "lseek", errno: errno, detail: path)
            close(descriptor)
            throw error
        }
        return BodyFile(descriptor: descriptor, length: Int64(length))
    }

    /// Opens (or makes) the regular file at `path` for writing, without following a symbolic link or waiting for a
    /// FIFO's reader; nil when something else is there.
    private static func openRegular(_ path: String, truncating: Bool) throws(SystemError) -> Int32? {
        let slash = path.lastIndex(of: "/")!
        let directory = try openDirectory(String(path[..<slash]))
        defer { close(directory) }
        let flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (truncating ? O_TRUNC : 0)
        let descriptor = openat(directory, String(path[path.index(after: slash)...]), flags, CacheFiles.fileMode)
        if descriptor < 0 {
            guard errno == ELOOP || errno == ENXIO || errno == EISDIR else {
                throw SystemError(call: "open", errno: errno, detail: path)
            }
            return nil
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            return nil
        }
        return descriptor
    }

    /// The directory of the body files (`tmp/`), opened without following a symbolic link; made again where it
    /// was deleted, or where a file or a link was put in its place behind the daemon's back (every download failed
    /// until a restart, or went where the link pointed).
    private static func openDirectory(_ path: String) throws(SystemError) -> Int32 {
        let flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
        var descriptor = Glibc.open(path, flags)
        if descriptor < 0, errno == ENOENT || errno == ENOTDIR || errno == ELOOP {
            try CacheFiles.makeDirectory(replacing: path, mode: CacheFiles.privateDirectoryMode)
            descriptor = Glibc.open(path, flags)
        }
        guard descriptor >= 0 else { throw SystemError(call: "open", errno: errno, detail: path) }
        return descriptor
    }
}

/// Opening a body file on the body-files thread, which the loop thread may cancel: a view scrolled fast starts and
/// stops transfers faster than files can be made, and a stopped one must cost no file and hold no descriptor, also
/// while its result waits for the loop thread.
final class BodyFileJob: Sendable {
    private enum State: Equatable { case queued, cancelled, begun, opened(Int32), abandoned }
    private let state = Mutex(State.queued)

    /// On the body-files thread: opens the file unless the job was cancelled; a file whose job was cancelled while
    /// it was opened is closed here (its deletion follows as a job of its own). Nil when there is nothing to deliver.
    func run(_ open: () -> Result<BodyFile, SystemError>) -> Result<BodyFile, SystemError>? {
        let go = state.withLock { state in
            guard state == .queued else { return false }
            state = .begun
            return true
        }
        guard go else { return nil }
        let body = open()
        let delivered = state.withLock { state in
            guard state == .begun else { return false }
            if case .success(let file) = body { state = .opened(file.descriptor) }
            return true
        }
        guard !delivered else { return body }
        if case .success(let file) = body { close(file.descriptor) }
        return nil
    }

    /// On the loop thread, once: cancels the job, closing a file it opened whose result has not been taken yet;
    /// returns whether it had begun (its file may exist). A cancelled job's result is never used.
    func cancel() -> Bool {
        state.withLock { state in
            let begun: Bool
            switch state {
            case .queued, .cancelled:
                begun = false
            case .opened(let descriptor):
                close(descriptor)
                begun = true
            case .begun, .abandoned:
                begun = true
            }
            state = begun ? .abandoned : .cancelled
            return begun
        }
    }
}
