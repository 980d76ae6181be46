import Glibc
import QueueCore

/// Whether an image file is whole, judged from its structure alone: no pixel is decoded.
///
/// gdk-pixbuf decodes a JPEG cut short without an error (libjpeg only warns and paints the rest grey), so a
/// truncated body would otherwise be cached and served as if it were whole. Each check walks the container the way
/// a decoder would skip through it — JPEG markers to the end-of-image marker, PNG chunks to IEND, GIF blocks,
/// the RIFF length of WebP, the item locations of AVIF — reading the file once and seeking over what it can.
/// Data after the end (a JPEG's appended motion-photo video, bytes after an AVIF's image data) is ignored.
/// Other formats are not checked.
enum ImageIntegrity {
    /// Why `file` is not a whole image of `format`, or nil when it is whole (or `format` is not checked).
    static func problem(_ file: ImageFile, format: String) throws(SystemError) -> String? {
        let reader = FileByteReader(file)
        switch format {
        case "jpeg": return try jpeg(reader)
        case "png": return try png(reader)
        case "gif": return try gif(reader)
        case "webp": return try webp(reader)
        case "avif": return try isoBoxes(reader, format: "AVIF")
        default: return nil
        }
    }

    /// Whether `problem` says the file ends before the image does (its message ends in "(truncated)"): a body cut
    /// short on the way looks the same.
    static func endsEarly(_ problem: String) -> Bool { problem.hasSuffix("(truncated)") }

    /// The most scans a JPEG may have. libjpeg decodes every scan of a progressive JPEG over the whole picture, even
    /// at 1/8 scale: a 300 KB file of 4,000 empty scans kept both image workers busy for a minute and a half. Real
    /// encoders write about 10 (mozjpeg up to 20 or so); 256 is the bound libjpeg-turbo's fuzzing and other decoders
    /// use.
    static let maximumJPEGScans = 256
    /// The pixels all of a JPEG's scans may cover together: a large picture may have fewer scans. At about 10^9 pixels
    /// a second, 250 scans of 7000x7000 took a worker 12 s for each variant; this allows 42 at 50 megapixels and 178
    /// at 12 (about 2 s), and every scan of a small picture.
    static let jpegScanPixels: Int64 = 1 << 31

    /// The frame headers of the processes libjpeg decodes: baseline, extended and progressive, with Huffman or
    /// arithmetic coding (SOF0, 1, 2, 9 and 10); not lossless or hierarchical ones.
    private static let decodedProcesses: Set<UInt8> = [0xC0, 0xC1, 0xC2, 0xC9, 0xCA]

    private static func jpeg(_ reader: FileByteReader, stripping: JPEGStripping? = nil) throws(SystemError) -> String? {
        let truncated = "the JPEG ends before its end-of-image marker (truncated)"
        guard try reader.bytes(2) == [0xFF, 0xD8] else { return "the JPEG has no start-of-image marker" }
        var pending: UInt8?
        var scans = 0
        var frame: (width: Int, height: Int)?
        while true {
            let marker: UInt8
            if let next = pending {
                marker = next
                pending = nil
            } else {
                guard let next = try reader.nextMarker() else { return truncated }
                marker = next
            }
            switch marker {
            case 0xD9:
                stripping?.reached(reader.markerStart)
                stripping?.end = reader.offset
                return nil
            case 0x00, 0x01, 0xD0...0xD8:
                continue
            default:
                let segmentStart = reader.markerStart
                stripping?.reached(segmentStart)
                guard let length = try reader.bytes(2).map({ Int($0.bigEndian16(at: 0)) }) else { return truncated }
                guard length >= 2 else { return "the JPEG has a segment of length \(length)" }
                if let stripping, marker == 0xFE || (0xE0...0xEF).contains(marker) {
                    guard let head = try reader.bytes(min(14, length - 2)),
                          try reader.skip(Int64(length - 2 - head.count)) else { return truncated }
                    stripping.saw(marker, head: head, segmentStart..<reader.offset)
                    continue
                }
                var read = 2
                if ImageHeader.isStartOfFrame(marker), frame == nil, length >= 7 {
                    guard let head = try reader.bytes(5) else { return truncated }
                    guard decodedProcesses.contains(marker) else {
                        return "the JPEG is coded in a process libjpeg does not decode (SOF\(marker - 0xC0): lossless or "
                            + "hierarchical)"
                    }
                    guard head[0] == 8 else {
                        return "the JPEG has samples of \(head[0]) bits: gdk-pixbuf's libjpeg decodes 8-bit samples only"
                    }
                    frame = frameSize(head)
                    read = 7
                }
                guard try reader.skip(Int64(length - read)) else { return truncated }
                if marker == 0xDA {
                    scans += 1
                    let pixels = frame.map { Int64(max(1, $0.width * $0.height)) } ?? 1
                    let allowed = Int(min(Int64(maximumJPEGScans), max(1, jpegScanPixels / pixels)))
                    guard scans <= allowed else {
                        let size = frame.map { " (\($0.width)x\($0.height))" } ?? ""
                        return "the JPEG has more than \(allowed) scans\(size): each is decoded over the whole picture, "
                            + "which would take too long"
                    }
                    // Entropy-coded data runs to the next marker; FF 00 is a stuffed byte, FF D0…D7 a restart.
                    while true {
                        guard let next = try reader.nextMarker() else { return truncated }
                        if next == 0x00 || (0xD0...0xD7).contains(next) { continue }
                        pending = next
                        break
                    }
                }
            }
        }
    }

    /// The size in the first frame header (SOF) of the JPEG `file`, wherever it lies, or nil when there is none
    /// before the first scan: `ImageHeader` reads only the first 256 KB, and gdk-pixbuf's probe saves every comment
    /// on the way to the frame header, in time that grows with the square of their number (140,000: 21 s).
    static func jpegFrameSize(_ file: ImageFile) throws(SystemError) -> (width: Int, height: Int)? {
        let reader = FileByteReader(file)
        guard try reader.bytes(2) == [0xFF, 0xD8] else { return nil }
        while let marker = try reader.nextMarker() {
            switch marker {
            case 0x00, 0x01, 0xD0...0xD8:
                continue
            case 0xD9, 0xDA:
                return nil
            default:
                guard let length = try reader.bytes(2).map({ Int($0.bigEndian16(at: 0)) }), length >= 2 else { return nil }
                if ImageHeader.isStartOfFrame(marker) {
                    guard length >= 7, let head = try reader.bytes(5) else { return nil }
                    return frameSize(head)
                }
                guard try reader.skip(Int64(length - 2)) else { return nil }
            }
        }
        return nil
    }

    /// The size in the first five bytes of a frame header (SOF): precision, height, width.
    private static func frameSize(_ head: [UInt8]) -> (width: Int, height: Int) {
        (Int(head.bigEndian16(at: 3)), Int(head.bigEndian16(at: 1)))
    }

    /// libpng, gdk-pixbuf's PNG reader, refuses the whole image when its header chunk is damaged or a side is over
    /// 1,000,000 pixels (its default limit), however small the pixel count.
    private static func png(_ reader: FileByteReader, criticalChunks: PieceList? = nil) throws(SystemError) -> String? {
        let truncated = "the PNG ends before its IEND chunk (truncated)"
        guard try reader.skip(8), let ihdr = try reader.bytes(25) else { return truncated }
        guard ihdr.bigEndian32(at: 0) == 13, ihdr[4...7].elementsEqual("IHDR".utf8) else {
            return "the PNG does not start with its IHDR chunk"
        }
        guard CRC32.checksum(ihdr[4..<21]) == ihdr.bigEndian32(at: 21) else {
            return "the PNG's IHDR chunk is damaged (its CRC does not match)"
        }
        let width = ihdr.bigEndian32(at: 8), height = ihdr.bigEndian32(at: 12)
        guard max(width, height) <= 1_000_000 else {
            return "the PNG is \(width)x\(height): libpng reads at most 1000000 pixels a side"
        }
        let depth = ihdr[16], colourType = ihdr[17]
        guard pngDepths[colourType]?.contains(depth) == true else {
            return "the PNG's IHDR declares a bit depth of \(depth) with colour type \(colourType), which libpng refuses"
        }
        guard ihdr[18] == 0, ihdr[19] == 0, ihdr[20] <= 1 else {
            return "the PNG's IHDR declares compression \(ihdr[18]), filter \(ihdr[19]) and interlace \(ihdr[20]): "
                + "libpng knows 0, 0 and 0 or 1"
        }
        criticalChunks?.keep(0..<reader.offset)
        var profileKept = false
        while true {
            let chunkStart = reader.offset
            guard let header = try reader.bytes(8) else { return truncated }
            let length = header.bigEndian32(at: 0)
            guard length <= 0x7FFF_FFFF else { return "the PNG has a chunk of length \(length)" }
            let type = header[4...7]
            if criticalChunks == nil, let name = ["IDAT", "PLTE", "IEND"].first(where: { type.elementsEqual($0.utf8) }) {
                // libpng refuses the image when the CRC of a critical chunk does not match (of other chunks it only
                // warns); the check reads them, where the walk otherwise seeks. (Not again for a variant's pieces:
                // `problem` has just checked the file.)
                var crc = CRC32.checksum(type)
                guard try reader.skip(Int64(length), crc: &crc), let stored = try reader.bytes(4) else { return truncated }
                guard crc == stored.bigEndian32(at: 0) else { return "the PNG's \(name) chunk is damaged (its CRC does not match)" }
            } else {
                guard try reader.skip(Int64(length) + 4) else { return truncated }
            }
            if ["IDAT", "PLTE", "tRNS", "IEND"].contains(where: { type.elementsEqual($0.utf8) })
                || (type.elementsEqual("iCCP".utf8) && Int(length) <= mostProfileBytes && !profileKept) {
                criticalChunks?.keep(chunkStart..<reader.offset)
                profileKept = profileKept || type.elementsEqual("iCCP".utf8)
            }
            if type.elementsEqual("IEND".utf8) { return nil }
        }
    }

    /// The bit depths PNG allows with each colour type (grey, RGB, palette, grey and alpha, RGBA).
    private static let pngDepths: [UInt8: Set<UInt8>] = [0: [1, 2, 4, 8, 16], 2: [8, 16], 3: [1, 2, 4, 8], 4: [8, 16], 6: [8, 16]]

    /// What a loader is fed to decode the JPEG or PNG `file` for a variant, or nil when it is not whole (or of
    /// another format): the picture without the metadata a loader would keep. libjpeg saves each comment and APPn
    /// segment by walking the list of those it saved, so 140,000 empty comments (560 KB) took a worker 21 s; libpng
    /// inflates every zTXt chunk into an option of the picture, so 900 of them (6.9 MB) took 79 s and 13.9 GB.
    /// A JPEG keeps its first JFIF, Exif and Adobe segments (the Exif one is where the header's orientation came
    /// from, the Adobe one says how its colours are coded) and the chunks of its colour profile; a PNG keeps IHDR,
    /// PLTE, tRNS, IDAT and IEND, and its colour profile (iCCP). A variant carries the profile on; one of more than
    /// `mostProfileBytes` (in several JPEG segments, or an iCCP chunk larger than that) is left out.
    /// Picture data split by more metadata than this is refused: real files need a handful of pieces, and each costs
    /// the loader a read and a write (2,000,000 comments between restart intervals, 20 MB: 2.8 s and 80 MB a variant).
    static let mostVariantPieces = 10_000
    /// The largest colour profile a variant carries on: less than one JPEG APP2 segment holds (gdk-pixbuf's JPEG
    /// saver writes one of 65,519 bytes or more in several, and garbles it; a thumbnail of a few kilobytes should not
    /// carry more; display profiles are under 4 KB).
    static let mostProfileBytes = 65_518

    static func variantPieces(_ file: ImageFile, format: String) throws(Failure) -> [PixbufLoader.Piece]? {
        guard format == "jpeg" || format == "png" else { return nil }
        let kept: PieceList
        do throws(SystemError) {
            let reader = FileByteReader(file)
            switch format {
            case "jpeg":
                let stripping = JPEGStripping()
                guard try jpeg(reader, stripping: stripping) == nil else { return nil }
                kept = stripping.kept
            default:
                kept = PieceList()
                guard try png(reader, criticalChunks: kept) == nil else { return nil }
            }
        } catch {
            throw .imageIO(error)
        }
        guard let pieces = kept.pieces else {
            throw .notAnImage("the \(format) original's picture is split by metadata into more than "
                              + "\(mostVariantPieces) pieces (a decoding bomb): no variant is made of it")
        }
        return pieces
    }

    /// File ranges to feed, in order; a range that continues the last one extends it. Past `mostVariantPieces`
    /// ranges it keeps no more and has no pieces.
    private final class PieceList {
        private var ranges: [Range<Int64>] = []
        private var tooMany = false
        var pieces: [PixbufLoader.Piece]? { tooMany ? nil : ranges.map { .file($0) } }

        func keep(_ range: Range<Int64>) {
            guard !range.isEmpty, !tooMany else { return }
            if let last = ranges.last, last.upperBound == range.lowerBound {
                ranges[ranges.count - 1] = last.lowerBound..<range.upperBound
            } else if ranges.count < ImageIntegrity.mostVariantPieces {
                ranges.append(range)
            } else {
                tooMany = true
                ranges = []
            }
        }
    }

    /// What a JPEG's walk keeps for a variant: every byte to the end-of-image marker but comments and APPn segments,
    /// of which the first JFIF, Exif and Adobe ones stay, and the first colour profile that one segment holds. A segment goes with the fill bytes before it and what lies
    /// between it and the next marker: such bytes, which decoders skip, would otherwise make a marker with a kept
    /// fill byte (an empty comment hid each extra scan of a scan bomb from the walk), or be decoded as entropy data.
    private final class JPEGStripping {
        let kept = PieceList()
        /// Where the walk is: what lies between the last segment seen and it is kept.
        private var keptTo: Int64 = 0
        /// The last segment seen was dropped: what follows it up to the next marker goes too.
        private var afterDropped = false
        private var seen: Set<String> = []
        var end: Int64 = 0 {
            didSet { kept.keep(keptTo..<end) }
        }

        /// The walk reached a marker whose fill bytes start at `markerStart`.
        func reached(_ markerStart: Int64) {
            if afterDropped { keptTo = markerStart }
            afterDropped = false
        }

        /// A comment or APPn segment, from its first fill byte, and the first bytes of its body.
        func saw(_ marker: UInt8, head: [UInt8], _ segment: Range<Int64>) {
            let kind: String? = switch marker {
            case 0xE0 where head.starts(with: "JFIF".utf8): "JFIF"
            case 0xE1 where head.starts(with: "Exif\0\0".utf8): "Exif"
            case 0xEE where head.starts(with: "Adobe".utf8): "Adobe"
            // A colour profile in one segment: chunk 1 of 1 (the number and the count follow the name).
            case 0xE2 where head.count == 14 && head.starts(with: "ICC_PROFILE\0".utf8) && head[12] == 1 && head[13] == 1:
                "ICC"
            default: nil
            }
            kept.keep(keptTo..<segment.lowerBound)
            if let kind, seen.insert(kind).inserted {
                kept.keep(segment)
            } else {
                afterDropped = true
            }
            keptTo = segment.upperBound
        }
    }

    /// What a loader is fed to decode the first frame of the GIF `file`, or nil when it has no whole image: the
    /// header and global colour table, the last graphic control extension before the first image (rebuilt, so one
    /// with a short block is left out as browsers do), the image and a trailer. gdk-pixbuf's GIF loader keeps every
    /// frame it is given, in time that grows with the square of their number (100,000 frames of 8×8, 2.3 MB: 14 s
    /// of a worker), and every extension before the first image would be parsed too.
    /// The frame's own size comes too: gdk-pixbuf decodes a frame larger than the logical screen at its size (a
    /// 23170×23170 frame on a 16×16 screen: 540 MB).
    static func gifFirstFrame(_ file: ImageFile) throws(SystemError)
        -> (pieces: [PixbufLoader.Piece], width: Int, height: Int)? {
        let reader = FileByteReader(file)
        let frame = GIFFirstFrame()
        guard try gif(reader, firstFrame: frame) == nil, let image = frame.image else { return nil }
        let pieces: [PixbufLoader.Piece] = [.file(0..<frame.screenEnd)]
            + (frame.control.map { [.bytes([0x21, 0xF9, 0x04] + $0 + [0x00])] } ?? [])
            + [.file(image), .bytes([0x3B])]
        return (pieces, frame.width, frame.height)
    }

    /// Where a GIF's first frame lies, as the walk finds it.
    private final class GIFFirstFrame {
        var screenEnd: Int64 = 0
        /// The four bytes of the last graphic control extension seen before the first image.
        var control: [UInt8]?
        var image: Range<Int64>?
        var width = 0, height = 0
    }

    /// Lenient where browsers are: a GIF that stops between blocks after an image, without the trailer, is whole.
    /// Given `firstFrame`, the walk records it and ends after the first image.
    private static func gif(_ reader: FileByteReader, firstFrame: GIFFirstFrame? = nil)
        throws(SystemError) -> String? {
        let truncated = "the GIF ends inside a block (truncated)"
        guard let screen = try reader.bytes(13) else { return truncated }
        if screen[10] & 0x80 != 0 { guard try reader.skip(3 << (Int64(screen[10] & 7) + 1)) else { return truncated } }
        firstFrame?.screenEnd = reader.offset
        var images = 0
        func subBlocks() throws(SystemError) -> Bool {
            while true {
                guard let size = try reader.byte() else { return false }
                if size == 0 { return true }
                guard try reader.skip(Int64(size)) else { return false }
            }
        }
        while true {
            let blockStart = reader.offset
            guard let block = try reader.byte() else { return images > 0 ? nil : "the GIF has no image (truncated)" }
            switch block {
            case 0x3B:
                return images > 0 ? nil : "the GIF has no image"
            case 0x21:
                guard let label = try reader.byte() else { return truncated }
                if label == 0xF9, let firstFrame {
                    guard let size = try reader.byte() else { return truncated }
                    if size >= 4 {
                        guard let fields = try reader.bytes(4), try reader.skip(Int64(size) - 4) else { return truncated }
                        firstFrame.control = fields
                    } else {
                        guard try reader.skip(Int64(size)) else { return truncated }
                    }
                    if size == 0 { continue }
                }
                guard try subBlocks() else { return truncated }
            case 0x2C:
                guard let descriptor = try reader.bytes(9) else { return truncated }
                if descriptor[8] & 0x80 != 0 {
                    guard try reader.skip(3 << (Int64(descriptor[8] & 7) + 1)) else { return truncated }
                }
                guard try reader.byte() != nil, try subBlocks() else { return truncated }
                images += 1
                if let firstFrame {
                    firstFrame.image = blockStart..<reader.offset
                    firstFrame.width = Int(descriptor[4]) | Int(descriptor[5]) << 8
                    firstFrame.height = Int(descriptor[6]) | Int(descriptor[7]) << 8
                    return nil
                }
            default:
                return images > 0 ? nil : "the GIF has an unknown block 0x\(String(block, radix: 16))"
            }
        }
    }

    /// A WebP's RIFF holds all its bytes, its chunks fit in it (a file cut and its RIFF length made to match leaves
    /// the picture's chunk running past the end), one of them is a picture, and there are at most `mostWebPChunks`
    /// (`webpFrames` counts them for each variant). Fewer than 8 bytes after the last chunk are slack, as libwebp
    /// takes them. A still picture is the size of the canvas its VP8X chunk declares, and an animation's frames lie
    /// within it, as libwebp demands (one of 2000×2000 on a 100×100 canvas was kept, and every variant of it failed).
    private static func webp(_ reader: FileByteReader) throws(SystemError) -> String? {
        guard let header = try reader.bytes(12) else { return "the WebP ends inside its header (truncated)" }
        let declared = Int64(header.littleEndian32(at: 4)) + 8
        guard reader.size >= declared else { return "the WebP has \(reader.size) of its \(declared) bytes (truncated)" }
        var pictures = 0, chunks = 0
        var canvas: (width: Int, height: Int)?  // of a still picture
        var animationCanvas: (width: Int, height: Int)?
        while reader.offset + 8 <= declared, let chunk = try reader.bytes(8) {
            chunks += 1
            guard chunks <= mostWebPChunks else { return "the WebP has more than \(mostWebPChunks) chunks" }
            let length = Int64(chunk.littleEndian32(at: 4))
            let type = String(decoding: chunk[0...3], as: UTF8.self)
            guard reader.offset + length <= declared else { return "the WebP's \(type) chunk runs past its end (truncated)" }
            if ["VP8 ", "VP8L", "ANMF"].contains(type) { pictures += 1 }
            var read: Int64 = 0
            if let animationCanvas, type == "ANMF", length >= 16, let frame = try reader.bytes(16) {
                read = 16
                let (x, y) = (2 * Int(frame.littleEndian24(at: 0)), 2 * Int(frame.littleEndian24(at: 3)))
                let (width, height) = (1 + Int(frame.littleEndian24(at: 6)), 1 + Int(frame.littleEndian24(at: 9)))
                if x + width > animationCanvas.width || y + height > animationCanvas.height {
                    return "the WebP's frame \(pictures) of \(width)x\(height) at \(x),\(y) runs past its "
                        + "\(animationCanvas.width)x\(animationCanvas.height) canvas: libwebp refuses it"
                }
            } else if length >= 10, chunks == 1 && type == "VP8X" || canvas != nil && (type == "VP8 " || type == "VP8L"),
               let body = try reader.bytes(10) {
                read = 10
                if type == "VP8X" {
                    let (width, height) = (1 + Int(body.littleEndian24(at: 4)), 1 + Int(body.littleEndian24(at: 7)))
                    if body[0] & 0x02 == 0 { canvas = (width, height) } else { animationCanvas = (width, height) }
                } else if let canvas, let size = webpPictureSize(type, body), size != canvas {
                    return "the WebP's picture is \(size.width)x\(size.height), its canvas \(canvas.width)x\(canvas.height): "
                        + "libwebp refuses a still picture of another size than its canvas"
                }
            }
            _ = try reader.skip(min(length + length % 2 - read, declared - reader.offset))
        }
        return pictures > 0 ? nil : "the WebP has no picture chunk (VP8, VP8L or ANMF)"
    }

    /// The size a VP8 or VP8L chunk's bitstream declares, from its first 10 bytes; nil when they are not its header.
    private static func webpPictureSize(_ type: String, _ body: [UInt8]) -> (width: Int, height: Int)? {
        if type == "VP8L" {
            guard body[0] == 0x2F else { return nil }
            let bits = body.littleEndian32(at: 1)
            return (Int(bits & 0x3FFF) + 1, Int(bits >> 14 & 0x3FFF) + 1)
        }
        guard body[3] == 0x9D, body[4] == 0x01, body[5] == 0x2A else { return nil }
        return (Int(body.littleEndian16(at: 6) & 0x3FFF), Int(body.littleEndian16(at: 8) & 0x3FFF))
    }

    /// The most chunks a WebP may have: an animation has one a frame, and more frames than this (at 64×64 each, the
    /// least a frame costs) are far over any pixel limit; counting 6,000,000 empty ones took 0.3 s.
    static let mostWebPChunks = 65_536

    /// How many frames the WebP `file` has: its `ANMF` chunks within its RIFF, 1 for a still picture; one with more
    /// than `mostWebPChunks` chunks (cached before they were refused) counts as having one frame more than that, and
    /// the walk stops there. gdk-pixbuf's WebP loader decodes every frame of an animation onto a canvas of its own
    /// before the first one is shown.
    static func webpFrames(_ file: ImageFile) throws(SystemError) -> Int {
        let reader = FileByteReader(file)
        guard let header = try reader.bytes(12) else { return 1 }
        let end = min(reader.size, Int64(header.littleEndian32(at: 4)) + 8)
        var frames = 0, chunks = 0
        while reader.offset + 8 <= end, let chunk = try reader.bytes(8) {
            chunks += 1
            guard chunks <= mostWebPChunks else { return mostWebPChunks + 1 }
            if chunk[0...3].elementsEqual("ANMF".utf8) { frames += 1 }
            let length = Int64(chunk.littleEndian32(at: 4))
            guard try reader.skip(min(length + length % 2, end - reader.offset)) else { break }
        }
        return max(frames, 1)
    }

    /// ISO base media (AVIF, HEIF): the top-level boxes up to the `meta` box fit in the file, the data its items
    /// point to (`iloc`) lies within the file, and so does the `moov` box of an image sequence (brand `avis`), as
    /// libavif demands; what comes after is not looked at, boxes that run past the end and trailing bytes included,
    /// as libavif does not.
    private static func isoBoxes(_ reader: FileByteReader, format: String) throws(SystemError) -> String? {
        let truncated = "the \(format) ends inside a box (truncated)"
        /// Once the meta box was read: whether the data its items point to is all in the file.
        var dataInFile: Bool?
        var sequence = false
        var sawMovie = false
        while reader.offset < reader.size {
            // Past what libavif reads, a box cut short or of no possible size is trailing bytes.
            let done = dataInFile == true && (!sequence || sawMovie)
            guard let box = try reader.isoBox() else { return done ? nil : truncated }
            guard box.length >= 0 else { return done ? nil : "the \(format) has a box of an impossible size" }
            guard box.length <= reader.size - reader.offset else { return done ? nil : truncated }
            switch String(decoding: box.type, as: UTF8.self) {
            case "ftyp" where box.length <= 4096:
                // The major brand, the minor version, then the compatible brands.
                guard let body = try reader.bytes(Int(box.length)) else { return truncated }
                sequence = ([0] + stride(from: 8, through: body.count - 4, by: 4)).contains {
                    $0 + 4 <= body.count && body[$0..<$0 + 4].elementsEqual("avis".utf8)
                }
            case "meta" where dataInFile == nil:
                switch try itemDataInFile(reader, meta: box) {
                case .success(let inFile): dataInFile = inFile
                case .failure(let problem): return "the \(format)\(problem.rawValue)"
                }
            case "moov" where sequence:
                guard !box.toTheEnd else { return "the \(format) has a moov box without a size" }  // libavif refuses it
                _ = try reader.skip(box.length)
                sawMovie = true
            default:
                _ = try reader.skip(box.length)
            }
        }
        guard let dataInFile else { return "the \(format) has no meta box (truncated)" }
        guard dataInFile else { return "the \(format)'s image data lies past its end (truncated)" }
        return !sequence || sawMovie ? nil : "the \(format)'s image sequence has no moov box (truncated)"
    }

    /// What makes a `meta` box unreadable, or its items' data impossible.
    private enum MetaProblem: String, Error {
        case sizeless = " has a meta box without a size"  // libavif refuses it
        case overrun = "'s meta box holds a box larger than itself"
        case noLocations = "'s meta box has no item locations (iloc)"
        case malformedLocations = "'s item locations (iloc) cannot be read"
        case hugeLocations = "'s item locations (iloc) take more than 4 MiB"
        case pastIdat = " points to data past its idat box"
        case pastAnyFile = " points to data past the end of any file"
    }

    /// Whether the data the items of the `meta` box whose header `reader` just read point to lies in the file; the
    /// reader is left after the box. Only its `iloc` box is read into memory.
    private static func itemDataInFile(_ reader: FileByteReader, meta: (type: [UInt8], length: Int64, toTheEnd: Bool))
        throws(SystemError) -> Result<Bool, MetaProblem> {
        guard !meta.toTheEnd else { return .failure(.sizeless) }
        guard meta.length >= 4 else { return .failure(.overrun) }
        let end = reader.offset + meta.length  // the box fits in the file
        _ = try reader.skip(4)  // version and flags
        var locations: ISOItemLocations?
        var idatLength: Int64 = 0
        while reader.offset < end {
            guard let child = try reader.isoBox(), !child.toTheEnd, child.length >= 0, child.length <= end - reader.offset else {
                return .failure(.overrun)
            }
            if child.type.elementsEqual("iloc".utf8), locations == nil {
                guard child.length <= maximumMetaBox else { return .failure(.hugeLocations) }
                guard let body = try reader.bytes(Int(child.length)), let read = ISOItemLocations(iloc: body[...]) else {
                    return .failure(.malformedLocations)
                }
                locations = read
                continue
            }
            if child.type.elementsEqual("idat".utf8), idatLength == 0 { idatLength = child.length }
            _ = try reader.skip(child.length)
        }
        guard let locations else { return .failure(.noLocations) }
        guard locations.idatReach <= UInt64(idatLength) else { return .failure(.pastIdat) }
        guard locations.fileReach < .max else { return .failure(.pastAnyFile) }
        return .success(locations.fileReach <= UInt64(reader.size))
    }

    /// The largest `meta` box read whole to size a file whose `meta` lies past the prefix (the properties, a colour
    /// profile the largest of them), and the largest `iloc` box read.
    static let maximumMetaBox: Int64 = 4 << 20

    /// The top-level `meta` box of an ISO base media file (AVIF, HEIF), whole, for a file whose `meta` lies past the
    /// prefix the header parser reads (an encoder that writes the pixel data first); nil when there is none, or it
    /// is larger than `maximumMetaBox`.
    static func isoMetaBox(_ file: ImageFile) throws(SystemError) -> [UInt8]? {
        let reader = FileByteReader(file)
        while reader.offset < reader.size, let box = try reader.isoBox(), box.length >= 0 {
            guard box.type.elementsEqual("meta".utf8) else {
                guard try reader.skip(box.length) else { return nil }
                continue
            }
            guard box.length <= maximumMetaBox, let body = try reader.bytes(Int(box.length)) else { return nil }
            let size = UInt32(8 + body.count)
            return [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: size >> $0) } + box.type + body
        }
        return nil
    }
}

extension ImageIntegrity {
    /// Whether libavif decodes the AVIF `file` from a track rather than from its items: it has a `moov` box, and its
    /// major brand is not `avif` (libavif 0.11 then scales the track's first frame to the track's size, which a
    /// 990-byte file set to 16384×16384: 2.4 GB).
    static func avifDecodesATrack(_ file: ImageFile) throws(SystemError) -> Bool {
        let reader = FileByteReader(file)
        var major: [UInt8] = []
        while reader.offset < reader.size, let box = try reader.isoBox(), box.length >= 0 {
            if box.type.elementsEqual("moov".utf8) { return !major.elementsEqual("avif".utf8) }
            if box.type.elementsEqual("ftyp".utf8), major.isEmpty, box.length >= 4, let brand = try reader.bytes(4) {
                major = brand
                guard try reader.skip(box.length - 4) else { return false }
            } else {
                guard try reader.skip(box.length) else { return false }
            }
        }
        return false
    }

    /// The coded size of an AVIF's primary image (`AVIFCodedSize`), from its `meta` box and its items' data
    /// (`unreadable` when it has no `meta` box that can be read whole); nil when its primary item is neither an AV1
    /// image nor a grid.
    static func avifCodedSize(_ file: ImageFile) throws(SystemError) -> Result<AVIFCodedSize, AVIFCodedSize.Problem>? {
        guard let meta = try isoMetaBox(file) else { return .failure(.unreadable) }
        return try AVIFCodedSize.of(meta: meta) { offset, count throws(SystemError) in
            guard offset < UInt64(file.size), count > 0 else { return [] }
            var bytes = [UInt8](repeating: 0, count: count)
            let read = bytes.withUnsafeMutableBytes { pread(file.descriptor, $0.baseAddress!, count, off_t(offset)) }
            guard read >= 0 else { throw SystemError(call: "pread", errno: errno, detail: file.path) }
            return Array(bytes.prefix(read))
        }
    }
}

/// A file read front to back from its prefix (`ImageFile`), then through a 64 KiB buffer at explicit offsets,
/// seeking over what is skipped: walks of one file share its descriptor and its prefix.
private final class FileByteReader {
    let path: String
    let size: Int64
    private let file: ImageFile
    /// The bytes at hand: the file's prefix, or `buffer` after a read past it.
    private var window: UnsafeRawBufferPointer
    private let buffer: UnsafeMutableRawBufferPointer
    private var start = 0
    private var end = 0
    /// The file offset of `window[end]`.
    private var bufferEndOffset: Int64 = 0

    init(_ file: ImageFile) {
        self.file = file
        path = file.path
        size = file.size
        window = file.prefix
        end = window.count
        bufferEndOffset = Int64(end)
        buffer = .allocate(byteCount: 64 * 1024, alignment: 1)
    }

    deinit { buffer.deallocate() }

    /// The file offset of the next byte.
    var offset: Int64 { bufferEndOffset - Int64(end - start) }

    /// Refills an empty window (reading only moves forward: past the prefix, never back into it); false at the end
    /// of the file.
    private func fill() throws(SystemError) -> Bool {
        if start < end { return true }
        let count = try syscall("pread", path) { pread(file.descriptor, buffer.baseAddress!, buffer.count, off_t(bufferEndOffset)) }
        window = UnsafeRawBufferPointer(buffer)
        start = 0
        end = count
        bufferEndOffset += Int64(count)
        return count > 0
    }

    func byte() throws(SystemError) -> UInt8? {
        guard try fill() else { return nil }
        defer { start += 1 }
        return window[start]
    }

    /// Exactly `count` bytes, or nil when the file ends first.
    func bytes(_ count: Int) throws(SystemError) -> [UInt8]? {
        var result: [UInt8] = []
        result.reserveCapacity(count)
        while result.count < count {
            guard try fill() else { return nil }
            let take = min(count - result.count, end - start)
            result.append(contentsOf: window[start..<start + take])
            start += take
        }
        return result
    }

    /// The next ISO base media box's type and the length of its body (to the end of the file for size 0,
    /// `toTheEnd`); nil when the file ends first, a negative length for a size smaller than the box's header.
    func isoBox() throws(SystemError) -> (type: [UInt8], length: Int64, toTheEnd: Bool)? {
        guard let header = try bytes(8) else { return nil }
        var size = Int64(header.bigEndian32(at: 0))
        var headerLength: Int64 = 8
        if size == 1 {
            guard let large = try bytes(8) else { return nil }
            size = Int64(bitPattern: UInt64(large.bigEndian32(at: 0)) << 32 | UInt64(large.bigEndian32(at: 4)))
            headerLength = 16
        } else if size == 0 {
            return (Array(header[4...7]), self.size - offset, true)
        }
        return (Array(header[4...7]), size < headerLength ? -1 : size - headerLength, false)
    }

    /// Moves `count` bytes on; false when that is past the end of the file.
    func skip(_ count: Int64) throws(SystemError) -> Bool {
        guard count >= 0, count <= size - offset else { return false }
        let target = offset + count
        if count <= Int64(end - start) {
            start += Int(count)
            return true
        }
        start = 0
        end = 0
        bufferEndOffset = target
        return true
    }

    /// Moves `count` bytes on, reading them into `crc` (`CRC32.update`); false when the file ends first.
    func skip(_ count: Int64, crc: inout UInt32) throws(SystemError) -> Bool {
        guard count >= 0, count <= size - offset else { return false }
        var left = count
        while left > 0 {
            guard try fill() else { return false }
            let take = Int(min(left, Int64(end - start)))
            crc = CRC32.update(crc, UnsafeRawBufferPointer(rebasing: window[start..<start + take]))
            start += take
            left -= Int64(take)
        }
        return true
    }

    /// The file offset of the first 0xFF before the marker `nextMarker` returned last.
    private(set) var markerStart: Int64 = 0

    /// Reads up to and past the next 0xFF and any fill bytes after it, returning the byte that follows them; nil at
    /// the end of the file.
    func nextMarker() throws(SystemError) -> UInt8? {
        while true {
            guard try fill() else { return nil }
            let found = memchr(window.baseAddress! + start, 0xFF, end - start)
                .map { window.baseAddress!.distance(to: UnsafeRawPointer($0)) }
            if let index = found {
                start = index + 1
                markerStart = offset - 1
                break
            }
            start = end
        }
        while let next = try byte() {
            if next != 0xFF { return next }
        }
        return nil
    }
}
