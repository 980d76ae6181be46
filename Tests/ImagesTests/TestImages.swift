import Testing
import Glibc
@testable import prefetchd

/// A fresh directory under /tmp for one test, removed with everything in it when the value goes away.
final class Scratch {
    let path: String

    init() {
        var template = Array("/tmp/prefetchd-images-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    deinit {
        for name in names() { unlink(path + "/" + name) }
        rmdir(path)
    }

    func file(_ name: String) -> String { path + "/" + name }

    /// The names in the directory (or in `subdirectory` of it), hidden ones included, sorted.
    func names(in subdirectory: String? = nil) -> [String] {
        guard let directory = opendir(subdirectory.map(file) ?? path) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    @discardableResult
    func write(_ name: String, _ bytes: [UInt8]) -> String {
        let target = file(name)
        let handle = fopen(target, "wb")!
        if !bytes.isEmpty { fwrite(bytes, 1, bytes.count, handle) }
        fclose(handle)
        return target
    }

    @discardableResult
    func write(_ name: String, text: String) -> String { write(name, Array(text.utf8)) }

    /// An image made with gdk-pixbuf and saved as `type`: `color` (0xRRGGBBAA) everywhere, then each band's
    /// rectangle painted in its colour.
    @discardableResult
    func image(_ name: String, width: Int, height: Int, type: String = "jpeg", alpha: Bool = false,
               color: UInt32 = 0xFF0000FF, bands: [(x: Int, y: Int, width: Int, height: Int, color: UInt32)] = [],
               options: [(key: String, value: String)] = []) throws -> String {
        let pixbuf = try Pixbuf(width: width, height: height, hasAlpha: alpha)
        pixbuf.fill(color)
        for band in bands {
            try pixbuf.cropped(x: band.x, y: band.y, width: band.width, height: band.height).fill(band.color)
        }
        let target = file(name)
        let fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw SystemError(call: "open", errno: errno, detail: target) }
        defer { close(fd) }
        try pixbuf.save(into: fd, type: type, options: type == "jpeg" && options.isEmpty ? [("quality", "80")] : options)
        return target
    }
}

/// The committed fixtures, made by Fixtures/make-fixtures.sh: 48×32, left half red, right half blue.
enum Fixtures {
    static let directory: String = {
        let file = #filePath
        return String(file[..<file.lastIndex(of: "/")!]) + "/Fixtures"
    }()

    static func path(_ name: String) -> String { directory + "/" + name }
}

enum Bytes {
    static func read(_ path: String) -> [UInt8] {
        guard let handle = fopen(path, "rb") else { return [] }
        defer { fclose(handle) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = fread(&chunk, 1, chunk.count, handle)
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        return bytes
    }

    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }

    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    /// A PNG chunk with its length and CRC.
    static func pngChunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
        let body = Array(type.utf8) + data
        return bigEndian(UInt32(data.count)) + body + bigEndian(crc32(body))
    }

    /// A PNG signature and an IHDR declaring `width` × `height` RGB, and optionally the start of an IDAT: no pixels.
    static func pngHeader(width: UInt32, height: UInt32, idat: Bool = false) -> [UInt8] {
        let ihdr = bigEndian(width) + bigEndian(height) + [8, 2, 0, 0, 0]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + pngChunk("IHDR", ihdr)
            + (idat ? pngChunk("IDAT", [0x78, 0x9C]) : [])
    }

    /// An RGB PNG of `width` × `height` whose pixel data is stored, not compressed (zlib's stored blocks): a large
    /// IDAT chunk.
    static func storedPNG(width: Int, height: Int) -> [UInt8] {
        var raw: [UInt8] = []
        for y in 0..<height {
            raw.append(0)  // the scanline's filter: none
            for x in 0..<width { raw += [UInt8(x & 0xFF), UInt8(y & 0xFF), UInt8((x ^ y) & 0xFF)] }
        }
        let ihdr = bigEndian(UInt32(width)) + bigEndian(UInt32(height)) + [8, 2, 0, 0, 0]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + pngChunk("IHDR", ihdr) + pngChunk("IDAT", Resizer.storedZlib(raw))
            + pngChunk("IEND", [])
    }

    /// An APP1 EXIF segment whose IFD0 holds only Orientation, in big- or little-endian TIFF order.
    static func exifSegment(orientation: UInt16, littleEndian: Bool = false) -> [UInt8] {
        func u16(_ v: UInt16) -> [UInt8] { littleEndian ? [UInt8(v & 0xFF), UInt8(v >> 8)] : [UInt8(v >> 8), UInt8(v & 0xFF)] }
        func u32(_ v: UInt32) -> [UInt8] { littleEndian ? bigEndian(v).reversed() : bigEndian(v) }
        let tiff = (littleEndian ? [0x49, 0x49] : [0x4D, 0x4D]) + u16(42) + u32(8)
            + u16(1) + u16(0x0112) + u16(3) + u32(1) + u16(orientation) + [0, 0] + u32(0)
        let body = Array("Exif\0\0".utf8) + tiff
        return [0xFF, 0xE1] + [UInt8((body.count + 2) >> 8), UInt8((body.count + 2) & 0xFF)] + body
    }

    /// An uncompressed true-colour Targa (a format with no magic number that only gdk-pixbuf's loader recognises),
    /// top row first, in one colour.
    static func tga(width: UInt16, height: UInt16, rgb: (UInt8, UInt8, UInt8)) -> [UInt8] {
        let header: [UInt8] = [0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, UInt8(width & 0xFF), UInt8(width >> 8),
                               UInt8(height & 0xFF), UInt8(height >> 8), 24, 0x20]
        return header + (0..<Int(width) * Int(height)).flatMap { _ in [rgb.2, rgb.1, rgb.0] }
    }

    /// The JPEG at `path` with an EXIF orientation segment put right after its SOI marker.
    static func withOrientation(_ jpeg: [UInt8], _ orientation: UInt16) -> [UInt8] {
        Array(jpeg[0..<2]) + exifSegment(orientation: orientation) + Array(jpeg[2...])
    }
}

/// Decodes a whole file with gdk-pixbuf, for looking at a variant's pixels.
func decodeForTest(_ path: String) throws -> Pixbuf {
    let file = try ImageFile(path)
    let format = try #require(ImageInspector.gdkFileInfo(path)?.format, "\(path) is an image gdk-pixbuf knows")
    let loader = try PixbufLoader(format: format)
    try loader.feed(file)
    try loader.close()
    return try #require(loader.pixbuf)
}

/// Whether an RGB(A) pixel is close to a pure colour, allowing for JPEG's losses.
func looks(_ pixel: [UInt8], like rgb: (Int, Int, Int), tolerance: Int = 60) -> Bool {
    abs(Int(pixel[0]) - rgb.0) <= tolerance && abs(Int(pixel[1]) - rgb.1) <= tolerance
        && abs(Int(pixel[2]) - rgb.2) <= tolerance
}

let red = (255, 0, 0)
let blue = (0, 0, 255)
let green = (0, 255, 0)
let white = (255, 255, 255)
