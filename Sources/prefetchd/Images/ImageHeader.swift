import Glibc

/// What the first bytes of a file say, read without gdk-pixbuf: the format by its magic number, the size some
/// formats declare at a fixed place, and a JPEG's EXIF orientation.
///
/// The inspector trusts this to refuse formats outside the allow-list before any loader sees them, and to apply the
/// pixel limit even where gdk-pixbuf's header probe needs more bytes (a PNG with an IHDR but no IDAT).
struct ImageHeader: Equatable, Sendable {
    /// What the bytes look like.
    enum Kind: Equatable, Sendable {
        /// An empty file.
        case empty
        /// An image format, by its normalised gdk-pixbuf name.
        case image(String)
        /// Text markup that is not an image: `html` or `xml`.
        case markup(String)
        /// Nothing recognised.
        case unknown
    }

    /// How many bytes `read` looks at: enough for a JPEG's EXIF segment and the SOF after it in nearly every file.
    static let prefixLength = 256 * 1024

    /// The formats `parse` can recognise; others are left to gdk-pixbuf.
    static let recognisedFormats: Set<String> = [
        "jpeg", "png", "gif", "webp", "avif", "heif", "jxl", "svg", "bmp", "tiff", "ico", "ani", "icns", "pnm",
        "xpm", "xbm", "qtif", "psd", "jpeg2000",
    ]

    var kind: Kind
    /// The size, when the header declares it where `parse` looks: stored for PNG, GIF, WebP, JPEG and BMP; for
    /// AVIF and HEIF after the container's `irot` turn, as their decoders apply it.
    var width: Int?
    var height: Int?
    /// The EXIF orientation (1…8) of a JPEG; 1 for everything else.
    var orientation: Int = 1

    var format: String? {
        if case .image(let format) = kind { return format }
        return nil
    }

    /// Whether the orientation turns the picture by 90° or 270°, so that width and height trade places.
    var swapsAxes: Bool { (5...8).contains(orientation) }

    /// Parses the first `prefixLength` bytes of `file`.
    static func read(_ file: ImageFile) -> ImageHeader { parse(Array(file.prefix)[...]) }

    /// Parses the first bytes of a file (fewer than the whole file is fine).
    static func parse(_ bytes: ArraySlice<UInt8>) -> ImageHeader {
        let b = Array(bytes)
        if b.isEmpty { return ImageHeader(kind: .empty) }
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            b.count >= offset + prefix.count && Array(b[offset..<offset + prefix.count]) == prefix
        }
        func ascii(_ text: String, at offset: Int = 0) -> Bool { starts(Array(text.utf8), at: offset) }

        if starts([0xFF, 0xD8, 0xFF]) { return jpeg(b) }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            var header = ImageHeader(kind: .image("png"))
            if ascii("IHDR", at: 12), b.count >= 24 {
                header.width = Int(b.bigEndian32(at: 16))
                header.height = Int(b.bigEndian32(at: 20))
            }
            return header
        }
        if ascii("GIF87a") || ascii("GIF89a") {
            var header = ImageHeader(kind: .image("gif"))
            if b.count >= 10 { header.width = Int(b.littleEndian16(at: 6)); header.height = Int(b.littleEndian16(at: 8)) }
            return header
        }
        if ascii("RIFF"), ascii("WEBP", at: 8) { return webp(b) }
        if ascii("RIFF"), ascii("ACON", at: 8) { return ImageHeader(kind: .image("ani")) }
        if ascii("ftyp", at: 4), let brand = isoBrand(b) {
            var header = ImageHeader(kind: .image(brand))
            if let size = isoPrimarySize(b) {
                (header.width, header.height) = size.turned ? (size.height, size.width) : (size.width, size.height)
            }
            return header
        }
        if starts([0xFF, 0x0A]) || starts([0, 0, 0, 0x0C, 0x4A, 0x58, 0x4C, 0x20]) { return ImageHeader(kind: .image("jxl")) }
        if starts([0, 0, 0, 0x0C, 0x6A, 0x50, 0x20, 0x20]) || starts([0xFF, 0x4F, 0xFF, 0x51]) {
            return ImageHeader(kind: .image("jpeg2000"))
        }
        if ascii("BM"), b.count >= 26, [12, 40, 52, 56, 64, 108, 124].contains(b.littleEndian32(at: 14)) {
            var header = ImageHeader(kind: .image("bmp"))
            if b.littleEndian32(at: 14) == 12 {
                header.width = Int(b.littleEndian16(at: 18)); header.height = Int(b.littleEndian16(at: 20))
            } else {
                header.width = Int(Int32(bitPattern: b.littleEndian32(at: 18)).magnitude)
                header.height = Int(Int32(bitPattern: b.littleEndian32(at: 22)).magnitude)
            }
            return header
        }
        if starts([0x49, 0x49, 0x2A, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2A]) { return ImageHeader(kind: .image("tiff")) }
        if (starts([0, 0, 1, 0]) || starts([0, 0, 2, 0])), b.count >= 6, b.littleEndian16(at: 4) > 0 {
            return ImageHeader(kind: .image("ico"))
        }
        if ascii("icns") { return ImageHeader(kind: .image("icns")) }
        if ascii("8BPS") { return ImageHeader(kind: .image("psd")) }
        if b.count >= 3, b[0] == UInt8(ascii: "P"), (UInt8(ascii: "1")...UInt8(ascii: "7")).contains(b[1]),
           [0x20, 0x09, 0x0A, 0x0D].contains(b[2]) {
            return ImageHeader(kind: .image("pnm"))
        }
        if ascii("/* XPM */") { return ImageHeader(kind: .image("xpm")) }
        if ascii("#define ") { return ImageHeader(kind: .image("xbm")) }
        if ascii("idsc", at: 4) || ascii("iicc", at: 4) { return ImageHeader(kind: .image("qtif")) }
        if let markup = markup(b) { return markup }
        return ImageHeader(kind: .unknown)
    }

    // MARK: - Formats

    /// JPEG: walks the markers up to the first scan, as libjpeg does: the size from the first SOF, the orientation
    /// from the first EXIF APP1 segment, before or after it (the one a variant's decoder is fed: `variantPieces`),
    /// even when that one has no usable orientation.
    private static func jpeg(_ b: [UInt8]) -> ImageHeader {
        var header = ImageHeader(kind: .image("jpeg"))
        var sawExif = false
        walkJPEG(b) { marker, body, end in
            if isStartOfFrame(marker), header.width == nil, body + 5 <= b.count {
                header.height = Int(b.bigEndian16(at: body + 1))
                header.width = Int(b.bigEndian16(at: body + 3))
            }
            if marker == 0xE1, !sawExif, body < end, b[body..<end].starts(with: "Exif\0\0".utf8) {
                sawExif = true
                header.orientation = exifOrientation(b[body..<end]) ?? 1
            }
            return true
        }
        return header
    }

    /// The bytes of DCT coefficients libjpeg holds for the whole picture while it decodes a JPEG of several scans, at
    /// any scale (2 bytes a coefficient, one per pixel and component): a progressive one, or a sequential one whose
    /// first scan lacks some of the components (libjpeg's `has_multiple_scans`; a 7000×7000 one of four scans held
    /// 413 MB for a 64×64 variant), or whose first scan is not among `bytes`; 0 for one scan of all the components;
    /// nil when the first frame header is not among `bytes` (the first bytes of a JPEG).
    static func wholeImageCoefficientBytes(_ bytes: [UInt8]) -> Int64? {
        var frame: (coefficients: Int64, components: Int, progressive: Bool)?
        var scanComponents: Int?
        walkJPEG(bytes) { marker, body, end in
            if marker == 0xDA {
                if body < end { scanComponents = Int(bytes[body]) }
                return false
            }
            guard isStartOfFrame(marker) else { return true }
            guard body + 6 <= bytes.count else { return false }
            let height = Int64(bytes.bigEndian16(at: body + 1)), width = Int64(bytes.bigEndian16(at: body + 3))
            let components = Int(bytes[body + 5])
            frame = (width * height * Int64(components) * 2, components, [0xC2, 0xC6, 0xCA, 0xCE].contains(marker))
            return true
        }
        guard let frame else { return nil }
        let severalScans = frame.progressive || (scanComponents.map { $0 < frame.components } ?? true)
        return severalScans ? frame.coefficients : 0
    }

    /// Walks a JPEG's marker segments up to its first scan, as libjpeg does: `visit` gets each segment's marker, the
    /// start of its body and its end (within `b`), the first scan header's last, and says whether to go on.
    private static func walkJPEG(_ b: [UInt8], _ visit: (_ marker: UInt8, _ body: Int, _ end: Int) -> Bool) {
        var offset = 2
        while offset + 4 <= b.count {
            guard b[offset] == 0xFF else { break }
            let marker = b[offset + 1]
            if marker == 0xFF { offset += 1; continue }
            if marker == 0xD8 || marker == 0x01 || (0xD0...0xD7).contains(marker) { offset += 2; continue }
            if marker == 0xD9 { break }
            let length = Int(b.bigEndian16(at: offset + 2))
            guard length >= 2 else { break }
            guard visit(marker, offset + 4, min(offset + 2 + length, b.count)), marker != 0xDA else { return }
            offset += 2 + length
        }
    }

    /// Whether a JPEG marker starts a frame header (SOF0–SOF15, which share C4 DHT, C8 JPG and CC DAC's range).
    static func isStartOfFrame(_ marker: UInt8) -> Bool {
        (0xC0...0xCF).contains(marker) && ![0xC4, 0xC8, 0xCC].contains(marker)
    }

    /// The Orientation tag (0x0112) of IFD0 in an APP1 segment's body, when it is an EXIF segment that has one.
    static func exifOrientation(_ segment: ArraySlice<UInt8>) -> Int? {
        let s = Array(segment)
        guard s.count >= 14, Array(s[0..<6]) == Array("Exif\0\0".utf8) else { return nil }
        let tiff = Array(s[6...])
        let little: Bool
        switch (tiff[0], tiff[1]) {
        case (0x49, 0x49): little = true
        case (0x4D, 0x4D): little = false
        default: return nil
        }
        func u16(_ at: Int) -> Int? {
            guard at >= 0, at + 2 <= tiff.count else { return nil }
            return Int(little ? tiff.littleEndian16(at: at) : tiff.bigEndian16(at: at))
        }
        func u32(_ at: Int) -> Int? {
            guard at >= 0, at + 4 <= tiff.count else { return nil }
            return Int(little ? tiff.littleEndian32(at: at) : tiff.bigEndian32(at: at))
        }
        guard u16(2) == 42, let ifd = u32(4), let count = u16(ifd) else { return nil }
        for index in 0..<count {
            let entry = ifd + 2 + index * 12
            guard let tag = u16(entry) else { return nil }
            // SHORT (3), count 1 (gdk-pixbuf takes no other): the value sits in the first two bytes of the value field.
            if tag == 0x0112, u16(entry + 2) == 3, u32(entry + 4) == 1, let value = u16(entry + 8) {
                return (1...8).contains(value) ? value : nil
            }
        }
        return nil
    }

    /// WebP: the canvas size of a VP8X, lossless VP8L or lossy VP8 first chunk.
    private static func webp(_ b: [UInt8]) -> ImageHeader {
        var header = ImageHeader(kind: .image("webp"))
        guard b.count >= 30 else { return header }
        switch String(decoding: b[12..<16], as: UTF8.self) {
        case "VP8X":
            header.width = 1 + (Int(b[24]) | Int(b[25]) << 8 | Int(b[26]) << 16)
            header.height = 1 + (Int(b[27]) | Int(b[28]) << 8 | Int(b[29]) << 16)
        case "VP8L" where b[20] == 0x2F:
            let bits = b.littleEndian32(at: 21)
            header.width = Int(bits & 0x3FFF) + 1
            header.height = Int((bits >> 14) & 0x3FFF) + 1
        case "VP8 " where b[23] == 0x9D && b[24] == 0x01 && b[25] == 0x2A:
            header.width = Int(b.littleEndian16(at: 26) & 0x3FFF)
            header.height = Int(b.littleEndian16(at: 28) & 0x3FFF)
        default:
            break
        }
        return header
    }

    /// ISO base media: `avif` for AVIF brands, `heif` for other HEIF brands, nil for video and the rest.
    private static func isoBrand(_ b: [UInt8]) -> String? {
        guard b.count >= 12 else { return nil }
        let size = Int(b.bigEndian32(at: 0))
        guard size >= 16 else { return nil }
        var brands = [String(decoding: b[8..<12], as: UTF8.self)]
        var offset = 16
        while offset + 4 <= min(size, b.count) {
            brands.append(String(decoding: b[offset..<offset + 4], as: UTF8.self))
            offset += 4
        }
        if brands.contains(where: { $0 == "avif" || $0 == "avis" }) { return "avif" }
        if brands.contains(where: { ["heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1"].contains($0) }) {
            return "heif"
        }
        return nil
    }

    /// HEIF and AVIF: the size of the primary item from its `ispe` property (after an `irot` turn by 90° or 270°,
    /// reported in `turned`), found through `meta` → `pitm`, `iprp` → `ipco`/`ipma`. When the associations cannot
    /// be followed, the largest `ispe` of any item stands in (an upper bound, enough for the pixel limit).
    /// gdk-pixbuf's AVIF loader decodes the whole image before it reports a size, so this is the header probe.
    static func isoPrimarySize(_ b: [UInt8]) -> (width: Int, height: Int, turned: Bool)? {
        func boxes(_ start: Int, _ end: Int) -> [(type: String, body: Int, end: Int)] { isoBoxes(b, start, end) }
        guard let meta = boxes(0, b.count).first(where: { $0.type == "meta" }), meta.body + 4 <= meta.end else {
            return nil
        }
        let children = boxes(meta.body + 4, meta.end)
        let primary = isoPrimaryItem(b, children)
        guard let iprp = children.first(where: { $0.type == "iprp" }) else { return nil }
        let properties = boxes(iprp.body, iprp.end)
        guard let ipco = properties.first(where: { $0.type == "ipco" }) else { return nil }
        let listed = boxes(ipco.body, ipco.end)
        let extent = { isoExtent(b, $0) }
        let associated = primary.map { isoAssociations(b, properties, only: $0)[$0] ?? [] } ?? []
        let own = associated.compactMap { $0 >= 1 && $0 <= listed.count ? listed[$0 - 1] : nil }
        // libavif applies the first `irot` it finds (a 600×200 picture with irot 180° then 90° decodes 600×200).
        let turned = own.first { $0.type == "irot" }.map { $0.body < $0.end && b[$0.body] & 1 == 1 } ?? false
        if let size = own.lazy.compactMap(extent).first { return (size.0, size.1, turned) }
        let all = listed.compactMap(extent)
        guard let largest = all.max(by: { ImageInfo.pixels($0.0, $0.1) < ImageInfo.pixels($1.0, $1.1) }) else { return nil }
        return (largest.0, largest.1, false)
    }

    /// The size an `ispe` property box declares.
    static func isoExtent(_ b: [UInt8], _ box: (type: String, body: Int, end: Int)) -> (width: Int, height: Int)? {
        guard box.type == "ispe", box.body + 12 <= box.end else { return nil }
        return (Int(b.bigEndian32(at: box.body + 4)), Int(b.bigEndian32(at: box.body + 8)))
    }

    /// The properties (1-based indexes into `ipco`) associated with each item (or with `only` that one), from every
    /// `ipma` box among an `iprp` box's `properties` (libavif reads one of each version and flags: a tile's `ispe`
    /// in a second one went unseen); an item listed with none has an empty list.
    static func isoAssociations(_ b: [UInt8], _ properties: [(type: String, body: Int, end: Int)],
                                only: UInt32? = nil) -> [UInt32: [Int]] {
        var associated: [UInt32: [Int]] = [:]
        for ipma in properties where ipma.type == "ipma" && ipma.body + 8 <= ipma.end {
            let version = b[ipma.body]
            let wide = b[ipma.body + 3] & 1 == 1
            var offset = ipma.body + 8
            entries: for _ in 0..<Int(b.bigEndian32(at: ipma.body + 4)) {
                let idLength = version < 1 ? 2 : 4
                guard offset + idLength + 1 <= ipma.end else { break }
                let item = idLength == 2 ? UInt32(b.bigEndian16(at: offset)) : b.bigEndian32(at: offset)
                let count = Int(b[offset + idLength])
                offset += idLength + 1
                if only == nil || item == only { associated[item, default: []].reserveCapacity(count) }
                for _ in 0..<count {
                    guard offset + (wide ? 2 : 1) <= ipma.end else { break entries }
                    let index = wide ? Int(b.bigEndian16(at: offset) & 0x7FFF) : Int(b[offset] & 0x7F)
                    offset += wide ? 2 : 1
                    if only == nil || item == only { associated[item, default: []].append(index) }
                }
            }
        }
        return associated
    }

    /// The ISO base media boxes in b[start..<end]: (type, body start, box end); a box running past `end` ends there.
    static func isoBoxes(_ b: [UInt8], _ start: Int, _ end: Int) -> [(type: String, body: Int, end: Int)] {
        var result: [(String, Int, Int)] = []
        var offset = start
        while offset + 8 <= end {
            var size = Int(b.bigEndian32(at: offset))
            var header = 8
            if size == 1 {
                guard offset + 16 <= end else { break }
                size = Int(b.bigEndian32(at: offset + 8)) << 32 | Int(b.bigEndian32(at: offset + 12))
                header = 16
            } else if size == 0 {
                size = end - offset
            }
            guard size >= header, offset + header <= end else { break }
            let boxEnd = size > end - offset ? end : offset + size
            result.append((String(decoding: b[offset + 4..<offset + 8], as: UTF8.self), offset + header, boxEnd))
            offset = boxEnd
        }
        return result
    }

    /// The primary item's id, from the `pitm` box among a `meta` box's `children`.
    static func isoPrimaryItem(_ b: [UInt8], _ children: [(type: String, body: Int, end: Int)]) -> UInt32? {
        guard let pitm = children.first(where: { $0.type == "pitm" }), pitm.body + 6 <= pitm.end else { return nil }
        if b[pitm.body] == 0 { return UInt32(b.bigEndian16(at: pitm.body + 4)) }
        return pitm.body + 8 <= pitm.end ? b.bigEndian32(at: pitm.body + 4) : nil
    }

    /// SVG, HTML or other XML, judged by the first element after the XML prolog (declaration, comments, doctype).
    private static func markup(_ b: [UInt8]) -> ImageHeader? {
        var text = Substring(String(decoding: b.prefix(4096), as: UTF8.self))
        if text.hasPrefix("\u{FEFF}") { text = text.dropFirst() }
        func skipSpace() { text = text.drop(while: { $0.isWhitespace }) }
        skipSpace()
        guard text.hasPrefix("<") else { return nil }
        while true {
            skipSpace()
            let lower = text.prefix(16).lowercased()
            if lower.hasPrefix("<?") {
                guard let end = text.firstRange(of: "?>") else { return ImageHeader(kind: .markup("xml")) }
                text = text[end.upperBound...]
            } else if lower.hasPrefix("<!--") {
                guard let end = text.firstRange(of: "-->") else { return ImageHeader(kind: .markup("xml")) }
                text = text[end.upperBound...]
            } else if lower.hasPrefix("<!doctype") {
                let name = lower.dropFirst(9).drop(while: { $0.isWhitespace })
                if name.hasPrefix("svg") { return ImageHeader(kind: .image("svg")) }
                if name.hasPrefix("html") { return ImageHeader(kind: .markup("html")) }
                guard let end = text.firstIndex(of: ">") else { return ImageHeader(kind: .markup("xml")) }
                text = text[text.index(after: end)...]
            } else if lower.hasPrefix("<") {
                let name = lower.dropFirst().prefix(while: { $0.isLetter || $0.isNumber || $0 == ":" || $0 == "-" })
                if name == "svg" || name.hasSuffix(":svg") { return ImageHeader(kind: .image("svg")) }
                let html: Set<Substring> = ["html", "head", "body", "meta", "title", "script", "link", "div", "p", "a"]
                return ImageHeader(kind: .markup(html.contains(name) ? "html" : "xml"))
            } else {
                return ImageHeader(kind: .markup("xml"))
            }
        }
    }
}

extension Array where Element == UInt8 {
    func bigEndian16(at offset: Int) -> UInt16 { UInt16(self[offset]) << 8 | UInt16(self[offset + 1]) }
    func littleEndian16(at offset: Int) -> UInt16 { UInt16(self[offset + 1]) << 8 | UInt16(self[offset]) }
    func bigEndian32(at offset: Int) -> UInt32 {
        UInt32(self[offset]) << 24 | UInt32(self[offset + 1]) << 16 | UInt32(self[offset + 2]) << 8 | UInt32(self[offset + 3])
    }
    func littleEndian24(at offset: Int) -> UInt32 {
        UInt32(self[offset + 2]) << 16 | UInt32(self[offset + 1]) << 8 | UInt32(self[offset])
    }
    func littleEndian32(at offset: Int) -> UInt32 {
        UInt32(self[offset + 3]) << 24 | UInt32(self[offset + 2]) << 16 | UInt32(self[offset + 1]) << 8 | UInt32(self[offset])
    }
}
