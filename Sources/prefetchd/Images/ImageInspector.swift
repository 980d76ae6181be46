import CGdkPixbuf
import QueueCore

/// Decides whether a fetched body is kept, from its header alone: the format by magic number, then width and
/// height from gdk-pixbuf's header probe (from the container for AVIF), then a walk of the container to see that
/// the file is whole. No pixel is decoded, so it is cheap, but it reads the file: call it on a worker thread.
///
/// The order matters for safety: a format outside the allow-list is refused from its magic number before any
/// gdk-pixbuf loader sees it (SVG never reaches librsvg unless allowed), and a declared size over the pixel limit
/// is refused before gdk-pixbuf is asked (a PNG declaring 100000×100000 is refused from its IHDR).
enum ImageInspector {
    /// The verdict on the file at `path` under `policy`.
    ///
    /// - `.image` when it is a whole image of an allowed format within the pixel limit (upright size);
    /// - `.nonImage` when it is no image and the policy allows non-images;
    /// - `.rejected` with `not_an_image` (no image: HTML, an empty or garbage body, an image whose header
    ///   gdk-pixbuf cannot read, a truncated image), `format_not_allowed` (an image in another format, named in
    ///   the message, even when non-images are allowed), `pixel_limit`, or a transient `internal` when the file
    ///   cannot be read. When `endKnown` is false (a body whose cut looks like its end: `ResponseHeaders.endUnsure`),
    ///   an image that ends early, also before its JPEG frame header, is a transient `network` failure instead.
    static func inspect(_ path: String, policy: ImagePolicy, endKnown: Bool = true) -> ImageVerdict {
        do {
            return try judge(ImageFile(path), policy: policy, endKnown: endKnown)
        } catch {
            return .rejected(.imageIO("cannot inspect \(path): \(error)"))
        }
    }

    /// The verdict on `file`, opened already (`inspect(_:policy:endKnown:)`).
    static func inspect(_ file: ImageFile, policy: ImagePolicy, endKnown: Bool = true) -> ImageVerdict {
        do {
            return try judge(file, policy: policy, endKnown: endKnown)
        } catch {
            return .rejected(.imageIO("cannot inspect \(file.path): \(error)"))
        }
    }

    private static func judge(_ file: ImageFile, policy: ImagePolicy, endKnown: Bool) throws(SystemError) -> ImageVerdict {
        let header = ImageHeader.read(file)
        let sniffed: String
        switch header.kind {
        case .empty:
            return notAnImage("the body is empty", policy)
        case .markup(let language):
            return notAnImage("the body is \(language.uppercased()), not an image", policy)
        case .unknown:
            // Formats the sniffer does not know may still be allowed by configuration: ask gdk-pixbuf about them.
            guard !policy.allowedFormats.isSubset(of: ImageHeader.recognisedFormats),
                  let probed = gdkFileInfo(file.path) else {
                return notAnImage("the body is not an image of a known format", policy)
            }
            sniffed = probed.format
        case .image(let format):
            sniffed = format
        }
        guard policy.allows(sniffed) else { return .rejected(.formatNotAllowed(sniffed)) }
        if let width = header.width, let height = header.height,
           ImageInfo.pixels(width, height) > policy.maxPixels {
            return .rejected(.pixelLimit(width: width, height: height, limit: policy.maxPixels))
        }
        var probed: ImageInfo
        if let width = header.width, let height = header.height {
            // The header parser read the size: gdk-pixbuf's probe would open the file again and look up its MIME
            // type for the same answer. The structure check below still reads the whole file.
            probed = ImageInfo(format: sniffed, width: width, height: height)
        } else if sniffed == "jpeg" {
            guard let size = try ImageIntegrity.jpegFrameSize(file) else {
                // Metadata before the frame header can be large (an Exif thumbnail, an ICC profile): a cut there.
                if !endKnown, let problem = try ImageIntegrity.problem(file, format: "jpeg"), ImageIntegrity.endsEarly(problem) {
                    return .rejected(cutShort(problem))
                }
                return .rejected(.notAnImage("the JPEG has no frame header before its first scan (corrupt or truncated)"))
            }
            probed = ImageInfo(format: sniffed, width: size.width, height: size.height)
        } else if Self.decodingProbes.contains(sniffed) {
            // Not in the prefix: its meta box may come after the pixel data.
            guard let meta = try ImageIntegrity.isoMetaBox(file), let size = ImageHeader.isoPrimarySize(meta) else {
                if !endKnown, let problem = try ImageIntegrity.problem(file, format: sniffed), ImageIntegrity.endsEarly(problem) {
                    return .rejected(cutShort(problem))
                }
                return .rejected(.notAnImage("the \(sniffed) header declares no size (corrupt or truncated)"))
            }
            probed = ImageInfo(format: sniffed, width: size.turned ? size.height : size.width,
                               height: size.turned ? size.width : size.height)
        } else if let info = gdkFileInfo(file.path) {
            probed = info
        } else {
            return .rejected(.notAnImage("gdk-pixbuf cannot read the \(sniffed) header (corrupt or truncated)"))
        }
        guard policy.allows(probed.format) else { return .rejected(.formatNotAllowed(probed.format)) }
        guard probed.width > 0, probed.height > 0 else {
            return .rejected(.notAnImage("the \(probed.format) header declares \(probed.width)x\(probed.height)"))
        }
        if probed.pixels > policy.maxPixels {
            return .rejected(.pixelLimit(width: probed.width, height: probed.height, limit: policy.maxPixels))
        }
        if let problem = try ImageIntegrity.problem(file, format: probed.format) {
            guard endKnown || !ImageIntegrity.endsEarly(problem) else { return .rejected(cutShort(problem)) }
            return .rejected(.notAnImage(problem))
        }
        // After the structure check: a file cut short is judged as cut, which may be fetched again.
        if probed.format == "avif" {
            switch try avifSize(file, declared: probed, maxPixels: policy.maxPixels) {
            case .success(let size): probed = size
            case .failure(let failure): return .rejected(failure)
            }
        }
        let upright = header.swapsAxes
            ? ImageInfo(format: probed.format, width: probed.height, height: probed.width)
            : probed
        return .image(upright)
    }

    /// An AVIF's size as libavif decodes it, whatever the `ispe` property it `declared` says (`AVIFCodedSize`): the
    /// larger of the two, or why it is refused (`pixel_limit` over `maxPixels`, `not_an_image` where it cannot be
    /// read).
    static func avifSize(_ file: ImageFile, declared: ImageInfo, maxPixels: Int64) throws(SystemError) -> Result<ImageInfo, Failure> {
        switch try ImageIntegrity.avifCodedSize(file) {
        case nil:
            return .success(declared)
        case .success(let coded)?:
            if max(coded.decoded, ImageInfo.pixels(coded.width, coded.height)) > maxPixels {
                return .failure(.pixelLimit(coded, declared: declared, limit: maxPixels))
            }
            let larger = ImageInfo.pixels(coded.width, coded.height) > declared.pixels
            return .success(larger ? ImageInfo(format: declared.format, width: coded.width, height: coded.height) : declared)
        case .failure(.malformed(let problem))?:
            return .failure(.notAnImage(problem))
        case .failure(.unreadable)?:
            return .failure(.notAnImage("the AVIF's image data is not where its item locations (iloc) say, or its meta "
                                        + "box is over \(ImageIntegrity.maximumMetaBox >> 20) MiB"))
        }
    }

    /// An image that ends early in a body whose end cannot be told from a cut: transient, fetched again (the same
    /// bytes a second time are the server's file: `Fetches` then judges them with their end known).
    private static func cutShort(_ problem: String) -> Failure {
        Failure(code: .network, message: "the body ended inside the image, and without a Content-Length a cut cannot "
                + "be told from the end (a closed HTTP/1 connection, an HTTP/2 stream reset with NO_ERROR) (\(problem))",
                isTransient: true, endedInsideImage: true)
    }

    /// Formats whose gdk-pixbuf loader decodes the whole image before it reports the size (libavif's loader takes
    /// 1.3 s for 6000×4000), so `gdk_pixbuf_get_file_info` is no header probe for them: `ImageHeader` reads their
    /// size from the container instead.
    static let decodingProbes: Set<String> = ["avif", "heif"]

    /// gdk-pixbuf's header-only probe (`gdk_pixbuf_get_file_info`): the normalised format and the stored size, or
    /// nil when no loader recognises the file or its header cannot be read.
    static func gdkFileInfo(_ path: String) -> ImageInfo? {
        var width: Int32 = 0
        var height: Int32 = 0
        guard let format = gdk_pixbuf_get_file_info(path, &width, &height),
              let name = gdk_pixbuf_format_get_name(format) else { return nil }
        defer { g_free(name) }
        return ImageInfo(format: ImageFormats.normalise(String(cString: name)), width: Int(width), height: Int(height))
    }

    private static func notAnImage(_ message: String, _ policy: ImagePolicy) -> ImageVerdict {
        policy.allowNonImages ? .nonImage : .rejected(.notAnImage(message))
    }
}
