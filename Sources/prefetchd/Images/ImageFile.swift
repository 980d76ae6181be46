import Glibc

/// An image file opened once for all its checks: what `fstat` says of it and its first `ImageHeader.prefixLength`
/// bytes (or `prefixLength`), read at once. `ImageHeader` parses the prefix; `ImageIntegrity` walks on from it,
/// reading the rest at explicit offsets, so that any number of walks share the descriptor. A small file is read once
/// in all.
final class ImageFile {
    let path: String
    /// Its size when it was opened: reading it for the prefix and the hash stops there.
    let size: Int64
    /// Which file this is, to tell whether a path still names it.
    let identity: FileIdentity
    /// The disk space it takes (its allocated blocks, as `du` counts).
    let allocated: Int64
    /// Its first `ImageHeader.prefixLength` bytes (all of a smaller file), valid as long as this object.
    let prefix: UnsafeRawBufferPointer
    let descriptor: Int32

    /// Opens the regular file at `path` (a symbolic link or anything else there is refused) and reads its first
    /// `prefixLength` bytes.
    init(_ path: String, prefixLength: Int = ImageHeader.prefixLength) throws(SystemError) {
        var info = stat()
        let fd = try openRegularFile(path, info: &info)
        let storage = UnsafeMutableRawBufferPointer.allocate(
            byteCount: Int(min(max(Int64(info.st_size), 0), Int64(prefixLength))), alignment: 1)
        var filled = 0
        do throws(SystemError) {
            while filled < storage.count {
                let count = try syscall("read", path) { read(fd, storage.baseAddress! + filled, storage.count - filled) }
                if count == 0 { break }
                filled += count
            }
        } catch {
            storage.deallocate()
            close(fd)
            throw error
        }
        self.path = path
        descriptor = fd
        size = Int64(info.st_size)
        identity = FileIdentity(info)
        allocated = Int64(info.st_blocks) * 512
        prefix = UnsafeRawBufferPointer(rebasing: storage[..<filled])
    }

    deinit {
        close(descriptor)
        prefix.deallocate()
    }

    /// The SHA-256 of the file as lowercase hex: its prefix, then the rest up to `size`, read on from there.
    func sha256() throws(SystemError) -> String {
        let hash = SHA256()
        hash.update(prefix)
        var offset = Int64(prefix.count)
        guard offset < size else { return hash.hex() }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: ImageHeader.prefixLength, alignment: 1)
        defer { buffer.deallocate() }
        while offset < size {
            let wanted = Int(min(Int64(buffer.count), size - offset))
            let count = try syscall("pread", path) { pread(descriptor, buffer.baseAddress!, wanted, off_t(offset)) }
            if count == 0 { break }
            hash.update(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            offset += Int64(count)
        }
        return hash.hex()
    }
}
