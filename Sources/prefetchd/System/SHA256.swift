import CGdkPixbuf
import Glibc

/// An incremental SHA-256 (GLib's GChecksum, already linked through gdk-pixbuf).
final class SHA256 {
    private let checksum: OpaquePointer

    init() { checksum = g_checksum_new(G_CHECKSUM_SHA256) }
    deinit { g_checksum_free(checksum) }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        g_checksum_update(checksum, base.assumingMemoryBound(to: UInt8.self), gssize(bytes.count))
    }

    /// The digest as lowercase hex; the checksum cannot be updated afterwards.
    func hex() -> String { String(cString: g_checksum_get_string(checksum)) }

    /// The digest of a file's bytes, or nil when it cannot be read.
    static func hex(ofFile path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let hash = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { return hash.hex() }
            buffer.withUnsafeBytes { hash.update(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
        }
    }

    static func hex(of text: String) -> String {
        let hash = SHA256()
        var text = text
        text.withUTF8 { hash.update(UnsafeRawBufferPointer($0)) }
        return hash.hex()
    }
}
