import Glibc

/// Disk space held for the index: a file of `bytes` beside it (`index.sqlite-reserve`). When bodies fill the disk,
/// SQLite cannot grow its log, a commit fails and the index could not even be opened again (its shared-memory file
/// is made on opening); giving the reserve up lets the index be opened and written. It is taken again once twice as
/// much is free, so that taking it leaves as much again to the index.
struct SpaceReserve {
    static let bytes: Int64 = 1 << 20
    let path: String

    init(indexPath: String) { path = indexPath + "-reserve" }

    /// Whether the file holds its blocks: a sparse one (a backup restored sparse-aware, a copy made with
    /// `cp --sparse`) has the size and none of the space, and giving it up freed nothing.
    var isHeld: Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && Int64(info.st_blocks) * 512 >= Self.bytes
    }

    /// Gives the space back to the file system; returns whether a reserve was there.
    @discardableResult
    func release() -> Bool { unlink(path) == 0 }

    /// Whether twice `bytes` are free on the reserve's file system (true when that cannot be told).
    var hasRoom: Bool {
        (availableBytes(under: String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])) ?? .max) >= UInt(2 * Self.bytes)
    }

    /// Takes the space when twice `bytes` are free; returns whether the reserve is held now.
    @discardableResult
    func take() -> Bool {
        if isHeld { return true }
        guard hasRoom else { return false }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        guard descriptor >= 0 else { return false }
        let allocated = posix_fallocate(descriptor, 0, off_t(Self.bytes)) == 0
        close(descriptor)
        if !allocated { release() }
        return allocated
    }
}
