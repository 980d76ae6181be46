import CGdkPixbuf

/// The image formats gdk-pixbuf can load on this machine, and the short names prefetchd uses for formats.
enum ImageFormats {
    /// One gdk-pixbuf loader, as `prefetchctl formats` lists it.
    struct Loader: Equatable, Sendable {
        /// The normalised name, as used in `ImagePolicy.allowedFormats`.
        var name: String
        var description: String
        var mimeTypes: [String]
        var extensions: [String]
        /// Whether gdk-pixbuf can also write the format.
        var isWritable: Bool
        /// Whether the format is vector (SVG) and renders at any size.
        var isScalable: Bool
        /// Whether gdk-pixbuf has the loader switched off.
        var isDisabled: Bool
        var license: String
        /// Whether the policy the list was made for accepts the format.
        var isAllowed: Bool
    }

    /// Every loader gdk-pixbuf found (from its loaders.cache and the built-in ones), sorted by name.
    static func available(policy: ImagePolicy = ImagePolicy()) -> [Loader] {
        var loaders: [Loader] = []
        let list = gdk_pixbuf_get_formats()
        defer { g_slist_free(list) }
        var node = list
        while let current = node {
            if let format = current.pointee.data.map({ OpaquePointer($0) }) {
                let name = normalise(take(gdk_pixbuf_format_get_name(format)))
                loaders.append(Loader(
                    name: name,
                    description: take(gdk_pixbuf_format_get_description(format)),
                    mimeTypes: takeList(gdk_pixbuf_format_get_mime_types(format)),
                    extensions: takeList(gdk_pixbuf_format_get_extensions(format)),
                    isWritable: gdk_pixbuf_format_is_writable(format) != 0,
                    isScalable: gdk_pixbuf_format_is_scalable(format) != 0,
                    isDisabled: gdk_pixbuf_format_is_disabled(format) != 0,
                    license: take(gdk_pixbuf_format_get_license(format)),
                    isAllowed: policy.allows(name)))
            }
            node = current.pointee.next
        }
        return loaders.sorted { $0.name < $1.name }
    }

    /// The allowed formats gdk-pixbuf has no enabled loader for (worth a warning at start-up), sorted.
    static func unavailable(policy: ImagePolicy) -> [String] {
        let loaded = Set(available(policy: policy).filter { !$0.isDisabled }.map(\.name))
        return policy.allowedFormats.subtracting(loaded).sorted()
    }

    /// A warning for each of those, for the log at start-up and for `--check-config` (a typo in `allowed_formats`
    /// looks the same to gdk-pixbuf as a loader not installed).
    static func unavailableWarnings(policy: ImagePolicy) -> [String] {
        unavailable(policy: policy).map {
            "the allowed image format \($0) has no gdk-pixbuf loader installed (see prefetchctl formats); such images will be refused"
        }
    }

    /// The short lowercase name for a format: gdk-pixbuf's own names, with common aliases folded in
    /// (`jpg` → `jpeg`, `tif` → `tiff`, `image/svg+xml` → `svg`).
    static func normalise(_ name: String) -> String {
        var name = name.lowercased()
        if name.hasPrefix("image/") { name.removeFirst(6) }
        switch name {
        case "jpg", "pjpeg": return "jpeg"
        case "tif": return "tiff"
        case "svg+xml", "svgz": return "svg"
        case "x-icon", "vnd.microsoft.icon", "cur": return "ico"
        default: return name
        }
    }

    private static func take(_ text: UnsafeMutablePointer<gchar>?) -> String {
        guard let text else { return "" }
        defer { g_free(text) }
        return String(cString: text)
    }

    private static func takeList(_ list: UnsafeMutablePointer<UnsafeMutablePointer<gchar>?>?) -> [String] {
        guard let list else { return [] }
        defer { g_strfreev(list) }
        var result: [String] = []
        var index = 0
        while let item = list[index] {
            result.append(String(cString: item))
            index += 1
        }
        return result
    }
}
