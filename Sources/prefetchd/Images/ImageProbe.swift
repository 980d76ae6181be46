import CGdkPixbuf

/// What a file's header says about the image in it.
struct ImageInfo: Equatable, Sendable {
    var format: String
    var width: Int
    var height: Int
}

/// Header-only image inspection with gdk-pixbuf (no full decode).
enum ImageProbe {
    /// The format and size, or nil when gdk-pixbuf does not recognise the file as an image.
    static func probe(_ path: String) -> ImageInfo? {
        var width: Int32 = 0
        var height: Int32 = 0
        guard let format = gdk_pixbuf_get_file_info(path, &width, &height),
              let name = gdk_pixbuf_format_get_name(format) else { return nil }
        defer { g_free(name) }
        return ImageInfo(format: String(cString: name), width: Int(width), height: Int(height))
    }
}
