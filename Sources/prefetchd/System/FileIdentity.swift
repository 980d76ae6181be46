import Glibc

/// Which file a path named when it was taken (device and inode), to tell later whether the path still names it: a
/// file deleted, or replaced by another, behind the process's back.
struct FileIdentity: Equatable {
    private let device: UInt64
    private let inode: UInt64

    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// Whether `path` names this file now.
    func isNamed(by path: String) -> Bool { FileIdentity(path: path) == self }
}
