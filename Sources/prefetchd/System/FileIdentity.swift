import Glibc

/// Which file a path named when it was taken (device and inode), to tell later whether the path still names it: a
/// file deleted, or replaced by another, behind the process's back.
struct FileIdentity: Equatable {
    private let device: UInt64
    private let inode: UInt64

    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        self.init(info)
    }

    /// The file open at `descriptor`.
    init?(descriptor: Int32) {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        self.init(info)
    }

    /// The file `info` (from `stat`, `lstat` or `fstat`) describes.
    init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// Whether `path` names this file now.
    func isNamed(by path: String) -> Bool { FileIdentity(path: path) == self }

    /// Whether the entry at `path` is this file itself now: a symbolic link to it is not.
    func isEntry(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && FileIdentity(info) == self
    }
}
