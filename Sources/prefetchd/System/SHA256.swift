import CGdkPixbuf

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

    static func hex(of text: String) -> String {
        let hash = SHA256()
        var text = text
        text.withUTF8 { hash.update(UnsafeRawBufferPointer($0)) }
        return hash.hex()
    }
}
