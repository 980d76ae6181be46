/// Which bodies prefetchd keeps: the image formats it accepts, how many pixels it will decode, and whether files
/// that are not images at all may be cached as they are.
struct ImagePolicy: Equatable, Sendable {
    static let defaultAllowedFormats: Set<String> = ["jpeg", "png", "gif", "webp", "avif"]
    static let defaultMaxPixels: Int64 = 50_000_000

    /// Normalised format names (see `ImageFormats.normalise`); SVG is not among the defaults.
    var allowedFormats: Set<String>
    /// The largest width × height decoded; a larger header is rejected with `pixel_limit` before any decode.
    var maxPixels: Int64
    /// Whether a body that is no image at all (HTML, JSON, an archive…) is kept as a plain file.
    /// Images of a format outside `allowedFormats` are refused either way.
    var allowNonImages: Bool

    init(allowedFormats: Set<String> = ImagePolicy.defaultAllowedFormats,
         maxPixels: Int64 = ImagePolicy.defaultMaxPixels, allowNonImages: Bool = false) {
        self.allowedFormats = Set(allowedFormats.map(ImageFormats.normalise))
        self.maxPixels = maxPixels
        self.allowNonImages = allowNonImages
    }

    func allows(_ format: String) -> Bool { allowedFormats.contains(ImageFormats.normalise(format)) }
}
