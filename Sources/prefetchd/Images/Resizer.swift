import CGdkPixbuf
import Glibc
import QueueCore

/// Makes variants: decodes an original at the smallest scale the spec needs, turns it upright, crops and scales it,
/// and writes the result atomically.
///
/// A pure function of files with no shared state: call it on a worker thread, never on the loop thread (decoding
/// a large image takes a while). Several calls may run at once on different threads.
enum Resizer {
    /// Writes the variant of `source` described by `spec` to `destination` (through a temporary file in the same
    /// directory, then `rename`) and returns the variant's format and size.
    ///
    /// Throws a `Failure`: `not_an_image` when the original is not an image gdk-pixbuf can decode, or is corrupt or
    /// truncated; `pixel_limit` when its stored size is over `maxPixels` (checked from the header and again when
    /// the loader reports the size, before it allocates), or an animated WebP's frames are together; `disk_full` or
    /// `internal` (both transient) when a file cannot be read or written. Nothing is left at `destination` or beside
    /// it on failure. The temporary file is noted in `placed` while a start-up sweep runs.
    static func makeVariant(source: String, spec: VariantSpec, destination: String,
                            maxPixels: Int64 = ImagePolicy.defaultMaxPixels,
                            placed: PlacedDuringSweep? = nil) throws(Failure) -> ImageInfo {
        let original: ImageFile
        do throws(SystemError) { original = try ImageFile(source) } catch { throw .imageIO(error) }
        let header = ImageHeader.read(original)
        let sniffed: String?
        switch header.kind {
        case .image(let format): sniffed = format
        case .unknown: sniffed = nil  // A format allowed by configuration that only gdk-pixbuf recognises.
        case .empty, .markup: throw .notAnImage("the original is not an image")
        }
        if let width = header.width, let height = header.height, ImageInfo.pixels(width, height) > maxPixels {
            throw .pixelLimit(width: width, height: height, limit: maxPixels)
        }
        if let sniffed {
            let problem: String?
            do throws(SystemError) {
                problem = try ImageIntegrity.problem(original, format: sniffed)
            } catch {
                throw .imageIO(error)
            }
            if let problem { throw .notAnImage(problem) }
        }
        if sniffed == "avif" {
            let decodesATrack: Bool, size: Result<ImageInfo, Failure>
            do throws(SystemError) {
                decodesATrack = try ImageIntegrity.avifDecodesATrack(original)
                let declared = ImageInfo(format: "avif", width: header.width ?? 0, height: header.height ?? 0)
                size = try ImageInspector.avifSize(original, declared: declared, maxPixels: maxPixels)
            } catch {
                throw .imageIO(error)
            }
            // libavif decodes the first track of an image sequence instead of the image the checks sized.
            if decodesATrack {
                throw .notAnImage("no variant is made of an AVIF image sequence: libavif's loader decodes its track, "
                                  + "whose size is not checked")
            }
            if case .failure(let failure) = size { throw failure }
        }
        if sniffed == "webp", let width = header.width, let height = header.height {
            let frames: Int
            do throws(SystemError) { frames = try ImageIntegrity.webpFrames(original) } catch { throw .imageIO(error) }
            if animationPixels(frames: frames, width: width, height: height) > maxPixels {
                throw .pixelLimit(frames: frames, width: width, height: height, limit: maxPixels)
            }
        }

        let (decoded, stored, sourceFormat) = try decode(original, format: sniffed, spec: spec,
                                                         orientation: header.orientation, maxPixels: maxPixels)
        let outputFormat = spec.outputFormat(forSource: sourceFormat)
        // The orientation the loader found is the one applied, whatever the header parse guessed.
        let swapped = (5...8).contains(decoded.orientation)
        let upright = swapped ? (width: stored.height, height: stored.width) : stored
        let geometry = VariantGeometry(sourceWidth: upright.width, sourceHeight: upright.height, spec: spec)
        // An upscaled variant is held to the same limit as an original: it costs as much to keep and to decode.
        if Int64(geometry.outputWidth) * Int64(geometry.outputHeight) > maxPixels {
            throw .pixelLimit(width: geometry.outputWidth, height: geometry.outputHeight, limit: maxPixels)
        }
        let image: Pixbuf
        do throws(GLibError) {
            image = try shape(decoded, uprightSize: upright, geometry: geometry, flatten: outputFormat == .jpeg)
        } catch {
            throw .imageIO("cannot resize \(source): \(error)")
        }
        try write(image, format: outputFormat, quality: spec.quality, profile: decoded.rgbProfile, to: destination,
                  placed: placed)
        return ImageInfo(format: outputFormat.rawValue, width: geometry.outputWidth, height: geometry.outputHeight)
    }

    /// What a frame of an animated WebP costs at least, in pixels, however small its canvas: the loader's time per
    /// frame grows with their number (80,000 frames of 1×1, 1 MB: 26 s of a worker; at this cost, 12,207 frames).
    static let smallestFrameCost: Int64 = 64 * 64

    /// The pixels gdk-pixbuf's WebP loader holds for an animation of `frames` on a `width` × `height` canvas: a canvas
    /// each, of at least `smallestFrameCost` (the check here and the job's share of the budget, `Variants`).
    static func animationPixels(frames: Int, width: Int, height: Int) -> Int64 {
        max(ImageInfo.pixels(width, height), smallestFrameCost).saturatingMultiply(Int64(frames))
    }

    /// Formats whose loader decodes at a smaller size directly: libjpeg at 1/2, 1/4 or 1/8, librsvg at any size.
    /// Other loaders decode at full size and scale afterwards, so they are left at full size and `shape` scales
    /// once, from the upright picture.
    static let scalingLoaders: Set<String> = ["jpeg", "svg"]

    /// Feeds the file to a loader, asking scaling loaders for the size the spec needs; returns the picture, the
    /// stored size of the original and its format.
    private static func decode(_ source: ImageFile, format sniffed: String?, spec: VariantSpec, orientation: Int,
                               maxPixels: Int64) throws(Failure)
        -> (Pixbuf, stored: (width: Int, height: Int), format: String) {
        // The loader of the format the inspection found, from the header or (a format only gdk-pixbuf knows) from
        // its probe: never one gdk-pixbuf picks by sniffing the bytes again.
        guard let format = sniffed ?? ImageInspector.gdkFileInfo(source.path)?.format else {
            throw .notAnImage("no gdk-pixbuf loader recognises the original")
        }
        var overLimit: (width: Int, height: Int)?
        func decodeSize(width: Int, height: Int) -> (width: Int, height: Int)? {
            if ImageInfo.pixels(width, height) > maxPixels {
                overLimit = (width, height)
                return (0, 0)
            }
            guard scalingLoaders.contains(format) else { return nil }
            // The spec applies to the upright picture; an EXIF turn by 90° swaps the sides it is measured on.
            let swapped = (5...8).contains(orientation)
            let geometry = VariantGeometry(sourceWidth: swapped ? height : width, sourceHeight: swapped ? width : height,
                                           spec: spec)
            return geometry.decodeSize(storedWidth: width, storedHeight: height)
        }
        let loader: PixbufLoader
        do throws(GLibError) {
            loader = try PixbufLoader(format: format, onSizePrepared: decodeSize)
        } catch {
            throw .notAnImage("cannot decode the \(format) original: \(error)")
        }
        // Of a GIF, only what its first frame needs: the variant is of that frame. Of a JPEG or PNG, the picture
        // without its metadata.
        var pieces: [PixbufLoader.Piece]?
        var frame: (width: Int, height: Int)?
        if sniffed == "gif" {
            do throws(SystemError) {
                if let first = try ImageIntegrity.gifFirstFrame(source) {
                    (pieces, frame) = (first.pieces, (first.width, first.height))
                }
            } catch {
                throw .imageIO(error)
            }
        } else if let sniffed {
            pieces = try ImageIntegrity.variantPieces(source, format: sniffed)
        }
        if let frame, ImageInfo.pixels(frame.width, frame.height) > maxPixels {
            throw .pixelLimit(width: frame.width, height: frame.height, limit: maxPixels)
        }
        var failure: Failure?
        do throws(ImageReadError) {
            try loader.feed(source, pieces: pieces ?? [.file(0 ..< .max)], stop: { overLimit != nil })
            do throws(GLibError) { try loader.close() } catch { throw .decode(error) }
        } catch {
            switch error {
            case .io(let error): failure = .imageIO(error)
            case .decode(let error): failure = .notAnImage("cannot decode the \(format) original: \(error)")
            }
        }
        if let overLimit { throw .pixelLimit(width: overLimit.width, height: overLimit.height, limit: maxPixels) }
        if let failure { throw failure }
        guard let pixbuf = loader.pixbuf, let stored = loader.storedSize else {
            throw .notAnImage("gdk-pixbuf decoded no picture from the \(format) original")
        }
        // libpng only warns when the pixel data inside whole chunks is broken; the rows it never wrote show it.
        if format == "png" && loader.updatedRowsEnd < pixbuf.height {
            throw .notAnImage("the png original's pixel data is broken: \(loader.updatedRowsEnd) of \(pixbuf.height) rows decoded")
        }
        return (pixbuf, stored, format)
    }

    /// Turns the decoded picture upright, then crops and scales it to `geometry` (worked out for the original's
    /// upright size); JPEG output is laid over white when the picture has alpha.
    private static func shape(_ decoded: Pixbuf, uprightSize: (width: Int, height: Int), geometry: VariantGeometry,
                              flatten: Bool) throws(GLibError) -> Pixbuf {
        let upright = try decoded.upright()

        // The decoded picture may be smaller than the original: map the crop onto its pixels.
        let scaleX = Double(upright.width) / Double(uprightSize.width)
        let scaleY = Double(upright.height) / Double(uprightSize.height)
        let crop = geometry.crop
        return try upright.rendered(x: crop.x * scaleX, y: crop.y * scaleY, regionWidth: crop.width * scaleX,
                                    regionHeight: crop.height * scaleY, width: geometry.outputWidth,
                                    height: geometry.outputHeight, background: flatten ? 0xFFFFFF : nil)
    }

    /// Encodes to a temporary file beside `destination`, with the original's colour profile if it had one, then
    /// renames it into place.
    private static func write(_ image: Pixbuf, format: VariantSpec.Format, quality: Int, profile: [UInt8]?,
                              to destination: String, placed: PlacedDuringSweep?) throws(Failure) {
        let slash = destination.lastIndex(of: "/")
        let directory = slash.map { String(destination[..<$0]) } ?? "."
        let name = slash.map { String(destination[destination.index(after: $0)...]) } ?? destination
        var temporary = ""
        var fd: Int32 = -1
        do throws(SystemError) {
            // A start-up sweep may delete it before it is noted: then another is made (it passes a name once).
            for _ in 0..<3 where fd < 0 {
                var template = Array("\(directory)/.\(name).XXXXXX".utf8CString)
                fd = try syscall("mkstemp", "in \(directory)") {
                    template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
                }
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)  // not handed on by an exec (StartAgain)
                temporary = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
                placed?.note(temporary)
                var info = stat()
                if fstat(fd, &info) == 0, info.st_nlink == 0 {
                    close(fd)
                    fd = -1
                }
            }
            guard fd >= 0 else { throw SystemError(call: "mkstemp", errno: ENOENT, detail: "in \(directory), deleted 3 times") }
            fchmod(fd, CacheFiles.fileMode)
        } catch {
            throw .imageIO(error)
        }
        do throws(EncodingError) {
            let options: [(key: String, value: String)] = format == .jpeg ? [("quality", String(quality))] : []
            do throws(EncodingError) {
                switch (format, profile) {
                case (.jpeg, let profile?):
                    try image.save(into: fd, type: "jpeg", options: options + [("icc-profile", base64(profile))])
                case (.png, let profile?):
                    // After the signature and the header chunk.
                    try image.save(into: fd, type: "png", options: options, inserting: (pngProfileChunk(profile), at: 33))
                default:
                    try image.save(into: fd, type: format.rawValue, options: options)
                }
            } catch {
                close(fd)
                throw error
            }
            // A file system may report a failed write only here (NFS: a full disk, a quota); EINTR released it.
            if close(fd) != 0, Glibc.errno != EINTR {
                throw .write(SystemError(call: "close", errno: Glibc.errno, detail: temporary))
            }
        } catch {
            unlink(temporary)
            switch error {
            case .write(let error): throw .imageIO(error)  // a full disk or a quota: disk_full
            case .encoder(let error): throw .imageIO("cannot write the variant: \(error)")
            }
        }
        do throws(SystemError) {
            try syscall("rename", "\(temporary) to \(destination)") { rename(temporary, destination) }
        } catch {
            unlink(temporary)
            throw .imageIO(error)
        }
    }

    private static func base64(_ bytes: [UInt8]) -> String {
        let text = g_base64_encode(bytes, gsize(bytes.count))!
        defer { g_free(text) }
        return String(cString: text)
    }

    /// A PNG iCCP chunk carrying `profile`, deflated in stored blocks (a profile is small, and compressing it would
    /// need zlib). gdk-pixbuf's PNG saver hands libpng the profile before the header chunk, so libpng takes the
    /// picture for grey and refuses every RGB profile: the chunk is put in its place instead.
    static func pngProfileChunk(_ profile: [UInt8]) -> [UInt8] {
        let body = Array("iCCP".utf8) + Array("ICC profile".utf8) + [0, 0] + storedZlib(profile)
        return bigEndian(UInt32(body.count - 4)) + body + bigEndian(CRC32.checksum(body))
    }

    /// `bytes` as a zlib stream of stored (uncompressed) deflate blocks, with its Adler-32.
    static func storedZlib(_ bytes: [UInt8]) -> [UInt8] {
        var zlib: [UInt8] = [0x78, 0x01]
        var start = 0
        repeat {
            let end = min(start + 65_535, bytes.count)
            let length = UInt16(end - start)
            zlib += [end == bytes.count ? 1 : 0, UInt8(length & 0xFF), UInt8(length >> 8),
                     UInt8(~length & 0xFF), UInt8(~length >> 8)]
            zlib += bytes[start..<end]
            start = end
        } while start < bytes.count
        var (a, b): (UInt32, UInt32) = (1, 0)  // Adler-32
        for byte in bytes {
            a = (a + UInt32(byte)) % 65_521
            b = (b + a) % 65_521
        }
        return zlib + bigEndian(b << 16 | a)
    }

    private static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }
}
