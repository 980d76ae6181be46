import CGdkPixbuf
import Glibc

/// One reference to a GdkPixbuf, dropped in `deinit`; confined to the thread that made it.
final class Pixbuf {
    let handle: OpaquePointer

    /// Takes over a reference the caller owns, as returned by `gdk_pixbuf_new` or `gdk_pixbuf_scale_simple`.
    init(owning handle: OpaquePointer) {
        self.handle = handle
    }

    /// Adds a reference to a pixbuf that something else owns, such as the one a loader returns.
    init(borrowing handle: OpaquePointer) {
        g_object_ref(UnsafeMutableRawPointer(handle))
        self.handle = handle
    }

    /// A new 8-bit RGB or RGBA pixbuf with undefined contents.
    convenience init(width: Int, height: Int, hasAlpha: Bool) throws(GLibError) {
        guard let handle = gdk_pixbuf_new(GDK_COLORSPACE_RGB, hasAlpha ? 1 : 0, 8, Int32(width), Int32(height)) else {
            throw GLibError("gdk_pixbuf_new \(width)x\(height)", taking: nil)
        }
        self.init(owning: handle)
    }

    deinit { g_object_unref(UnsafeMutableRawPointer(handle)) }

    var width: Int { Int(gdk_pixbuf_get_width(handle)) }
    var height: Int { Int(gdk_pixbuf_get_height(handle)) }
    var hasAlpha: Bool { gdk_pixbuf_get_has_alpha(handle) != 0 }
    var channels: Int { Int(gdk_pixbuf_get_n_channels(handle)) }
    var rowstride: Int { Int(gdk_pixbuf_get_rowstride(handle)) }

    /// An option the loader attached, such as `orientation`.
    func option(_ key: String) -> String? {
        gdk_pixbuf_get_option(handle, key).map { String(cString: $0) }
    }

    /// The EXIF orientation (1…8) the loader found, 1 when there was none.
    var orientation: Int {
        option("orientation").flatMap { Int($0) }.flatMap { (1...8).contains($0) ? $0 : nil } ?? 1
    }

    /// The ICC colour profile the loader attached, when it describes RGB data (its header's colour space) and is at
    /// most `ImageIntegrity.mostProfileBytes`: a variant's pixels are RGB, which a CMYK or grey profile would
    /// misdescribe, and a thumbnail of a few kilobytes would carry megabytes.
    var rgbProfile: [UInt8]? {
        guard let encoded = option("icc-profile"), encoded.utf8.count <= (ImageIntegrity.mostProfileBytes + 2) / 3 * 4
        else { return nil }
        var length: gsize = 0
        guard let decoded = g_base64_decode(encoded, &length) else { return nil }
        defer { g_free(decoded) }
        let profile = Array(UnsafeBufferPointer(start: decoded, count: Int(length)))
        // gdk-pixbuf's JPEG saver refuses one under 128 bytes (a header's size): a whole header, its own size
        // stated, its signature, RGB.
        guard (128...ImageIntegrity.mostProfileBytes).contains(profile.count) else { return nil }
        let stated = profile[0..<4].reduce(0) { $0 << 8 | Int($1) }
        return stated == profile.count && profile[36..<40].elementsEqual("acsp".utf8)
            && profile[16..<20].elementsEqual("RGB ".utf8) ? profile : nil
    }

    /// The pixbuf turned and flipped as its orientation option says (itself when there is nothing to do).
    func upright() throws(GLibError) -> Pixbuf {
        guard let turned = gdk_pixbuf_apply_embedded_orientation(handle) else {
            throw GLibError("gdk_pixbuf_apply_embedded_orientation", taking: nil)
        }
        return Pixbuf(owning: turned)
    }

    /// A view of a rectangle of this pixbuf, sharing its pixels.
    func cropped(x: Int, y: Int, width: Int, height: Int) throws(GLibError) -> Pixbuf {
        precondition(x >= 0 && y >= 0 && width > 0 && height > 0 && x + width <= self.width && y + height <= self.height)
        guard let part = gdk_pixbuf_new_subpixbuf(handle, Int32(x), Int32(y), Int32(width), Int32(height)) else {
            throw GLibError("gdk_pixbuf_new_subpixbuf", taking: nil)
        }
        return Pixbuf(owning: part)
    }

    /// A new `width` × `height` pixbuf showing the rectangle at (`x`, `y`) of size `regionWidth` × `regionHeight`
    /// (fractions allowed) of this one, scaled to fill it (box filtering when shrinking, bilinear when growing).
    /// With a `background` (0xRRGGBB) the result has no alpha: a picture with alpha is laid over that colour.
    /// Returns itself when there is nothing to do.
    func rendered(x: Double, y: Double, regionWidth: Double, regionHeight: Double, width: Int, height: Int,
                  background: UInt32? = nil) throws(GLibError) -> Pixbuf {
        let whole = x == 0 && y == 0 && regionWidth == Double(self.width) && regionHeight == Double(self.height)
        if whole && width == self.width && height == self.height && (background == nil || !hasAlpha) { return self }
        let scaleX = Double(width) / regionWidth
        let scaleY = Double(height) / regionHeight
        if let background, hasAlpha {
            let result = try Pixbuf(width: width, height: height, hasAlpha: false)
            result.fill(background << 8 | 0xFF)
            gdk_pixbuf_composite(handle, result.handle, 0, 0, Int32(width), Int32(height), -x * scaleX, -y * scaleY,
                                 scaleX, scaleY, GDK_INTERP_BILINEAR, 255)
            return result
        }
        let result = try Pixbuf(width: width, height: height, hasAlpha: hasAlpha)
        gdk_pixbuf_scale(handle, result.handle, 0, 0, Int32(width), Int32(height), -x * scaleX, -y * scaleY,
                         scaleX, scaleY, GDK_INTERP_BILINEAR)
        return result
    }

    /// Sets every pixel to `rgba` (0xRRGGBBAA).
    func fill(_ rgba: UInt32) { gdk_pixbuf_fill(handle, rgba) }

    /// The red, green, blue (and alpha) bytes of one pixel.
    func pixel(x: Int, y: Int) -> [UInt8] {
        precondition(x >= 0 && y >= 0 && x < width && y < height)
        let base = gdk_pixbuf_read_pixels(handle)! + y * rowstride + x * channels
        return (0..<channels).map { base[$0] }
    }

    /// Encodes with a gdk-pixbuf saver (`jpeg`, `png`, …) and its options (`quality` for JPEG) into `fd`, written
    /// here, so that a failed write keeps its errno (a full disk, a quota): the savers' own messages lose it ("Output
    /// file write error --- out of disk space?"). An `insertion` is written once `at` of the encoder's bytes were.
    func save(into fd: Int32, type: String, options: [(key: String, value: String)] = [],
              inserting insertion: (bytes: [UInt8], at: Int)? = nil) throws(EncodingError) {
        var keys: [UnsafeMutablePointer<CChar>?] = options.map { strdup($0.key) } + [nil]
        var values: [UnsafeMutablePointer<CChar>?] = options.map { strdup($0.value) } + [nil]
        defer { (keys + values).forEach { free($0) } }
        let output = EncodedOutput(fd: fd, insertion: insertion)
        var error: UnsafeMutablePointer<GError>?
        let saved = withExtendedLifetime(output) {
            keys.withUnsafeMutableBufferPointer { keys in
                values.withUnsafeMutableBufferPointer { values in
                    gdk_pixbuf_save_to_callbackv(handle, writeEncoded, Unmanaged.passUnretained(output).toOpaque(), type,
                                                 keys.baseAddress, values.baseAddress, &error)
                }
            }
        }
        guard saved == 0 else { return }
        let encoder = GLibError("gdk_pixbuf_save_to_callbackv \(type)", taking: error)
        throw output.failedWrite.map(EncodingError.write) ?? .encoder(encoder)
    }
}

/// Why an image could not be encoded into a file.
enum EncodingError: Error, CustomStringConvertible {
    /// The encoder failed.
    case encoder(GLibError)
    /// Writing what it made failed.
    case write(SystemError)

    var description: String {
        switch self {
        case .encoder(let error): "\(error)"
        case .write(let error): "\(error)"
        }
    }
}

/// Where `writeEncoded` puts an encoder's bytes, what it inserts into them, and its first failed write.
private final class EncodedOutput {
    let fd: Int32
    /// Bytes to write once `at` of the encoder's have been written.
    var insertion: (bytes: [UInt8], at: Int)?
    var written = 0
    var failedWrite: SystemError?

    init(fd: Int32, insertion: (bytes: [UInt8], at: Int)?) {
        self.fd = fd
        self.insertion = insertion
    }

    /// Writes the encoder's `count` bytes, and the insertion where it falls among them; false when a write failed.
    func take(_ bytes: UnsafePointer<CChar>, _ count: Int) -> Bool {
        guard let (inserted, at) = insertion, written + count >= at else {
            written += count
            return writeAll(bytes, count)
        }
        insertion = nil
        let before = at - written
        written += count
        return writeAll(bytes, before)
            && inserted.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { writeAll($0.baseAddress!, $0.count) } }
            && writeAll(bytes + before, count - before)
    }

    private func writeAll(_ bytes: UnsafePointer<CChar>, _ count: Int) -> Bool {
        var done = 0
        while done < count {
            let result = write(fd, bytes + done, count - done)
            if result < 0, Glibc.errno == EINTR { continue }
            guard result > 0 else {
                failedWrite = SystemError(call: "write", errno: result < 0 ? Glibc.errno : EIO, detail: "of an encoded image")
                return false
            }
            done += result
        }
        return true
    }
}

/// gdk-pixbuf's save callback: writes each piece whole to the `EncodedOutput` it is given; a failed write stops the
/// encoder (returning false with an error set, as the callback must).
private let writeEncoded: GdkPixbufSaveFunc = { bytes, count, error, data in
    let output = Unmanaged<EncodedOutput>.fromOpaque(data!).takeUnretainedValue()
    guard output.take(bytes!, Int(count)) else {
        let code = output.failedWrite?.errno ?? EIO
        g_set_error_literal(error, g_file_error_quark(), Int32(g_file_error_from_errno(code).rawValue), g_strerror(code))
        return 0
    }
    return 1
}
