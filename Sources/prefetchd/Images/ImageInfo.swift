import QueueCore

/// What prefetchd knows about an image without decoding it: its format and its size as a viewer sees it.
///
/// `width` and `height` are upright: a JPEG whose EXIF orientation turns it by 90° reports its stored height as its
/// width. The pixel count, and so the pixel limit, is the same either way.
struct ImageInfo: Equatable, Hashable, Sendable {
    /// A lowercase gdk-pixbuf format name: `jpeg`, `png`, `gif`, `webp`, `avif`, `svg`, `bmp`, `tiff`, `ico`…
    var format: String
    var width: Int
    var height: Int

    var pixels: Int64 { Self.pixels(width, height) }

    /// `width × height`, stopping at `Int64.max`: a header may claim 4294967295 × 4294967295.
    static func pixels(_ width: Int, _ height: Int) -> Int64 {
        Int64(width).saturatingMultiply(Int64(height))
    }
}
