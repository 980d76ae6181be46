import Glibc

/// An image file opened once for all its checks: what `fstat` says of it and its first `ImageHeader.prefixLength`
/// bytes, read at once. `ImageHeader` parses the prefix; `ImageIntegrity` walks on from it, reading the rest at
/// explicit offsets, so that any number of walks share the descriptor. A small file is read once in all.
final class ImageFile {
    let path: String
    let size: Int64
    /// Which file this is, to tell whether a path still names it.
    let identity: FileIdentity
    /// The disk space it takes (its allocated blocks, as `du` counts).
    let allocated: Int64
    /// Its first `ImageHeader.prefixLength` bytes (all of a smaller file).
    let prefix: [UInt8]
    let descriptor: Int32

    /// Opens the regular file at `path` (a symbolic link or anything else there is refused) and reads its prefix.
    init(_ path: String) throws(SystemError) {
        var info = stat()
        let fd = try openRegularFile(path, info: &info)
        do throws(SystemError) {
            prefix = try Self.readPrefix(fd, path: path, count: Int(min(Int64(info.st_size), Int64(ImageHeader.prefixLength))))
        } catch {
            close(fd)
            throw error
        }
        self.path = path
        descriptor = fd
        size = Int64(info.st_size)
        identity = FileIdentity(info)
        allocated = Int64(info.st_blocks) * 512
    }

    deinit { close(descriptor) }

    /// The SHA-256 of the whole file as lowercase hex: its prefix, then the rest read on from there.
    func sha256() throws(SystemError) -> String {
        let hash = SHA256()
        prefix.withUnsafeBytes { hash.update($0) }
        var offset = Int64(prefix.count)
        guard offset < size else { return hash.hex() }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: ImageHeader.prefixLength, alignment: 1)
        defer { buffer.deallocate() }
        while true {
            let count = try syscall("pread", path) { pread(descriptor, buffer.baseAddress!, buffer.count, off_t(offset)) }
            if count == 0 { return hash.hex() }
            hash.update(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            offset += Int64(count)
        }
    }

    /// Up to `count` bytes from the start (fewer if the file is shorter now than `fstat` said).
    private static func readPrefix(_ fd: Int32, path: String, count: Int) throws(SystemError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let read = try syscall("read", path) {
                bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + filled, count - filled) }
            }
            if read == 0 { break }
            filled += read
        }
        bytes.removeSubrange(filled...)
        return bytes
    }
}
