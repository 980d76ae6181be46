/// What decoding an AVIF's primary image takes, read from what the decoder reads: a grid's descriptor and, for each
/// AV1 image (the primary one, or each tile of a grid), the largest frame its sequence header allows. libavif's
/// loader decodes all of it before it reports a size, and never looks at the `ispe` properties `ImageHeader` reads: a
/// grid whose `ispe` said 100×100, of 32×32 tiles of one 189-byte 512×512 AV1 frame (a 44.5 KB file), decoded
/// 16384×16384, 2 GB.
struct AVIFCodedSize: Equatable {
    /// The primary image's size: a grid's output, or an AV1 image's largest frame.
    let width: Int
    let height: Int
    /// The pixels decoded to make it: a grid's tiles, or the AV1 image's largest frame.
    let decoded: Int64

    /// Why the coded size cannot be read where the decoder would need it.
    enum Problem: Error, Equatable {
        /// The data of an item it decodes is not where its location says (past the file's end, or no location):
        /// the structure check tells the rest.
        case unreadable
        /// An AV1 image without a sequence header before its first frame, or a grid descriptor that cannot be read.
        case malformed(String)
    }

    /// The coded size of the primary image of the `meta` box `meta` (whole, header included); nil when the primary
    /// item is neither an AV1 image nor a grid of them. `read` gives up to `count` bytes of the file at `offset`
    /// (fewer at its end).
    static func of(meta: [UInt8], read: (_ offset: UInt64, _ count: Int) throws(SystemError) -> [UInt8])
        throws(SystemError) -> Result<AVIFCodedSize, Problem>? {
        guard let box = ImageHeader.isoBoxes(meta, 0, meta.count).first, box.type == "meta", box.body + 4 <= box.end,
              case let children = ImageHeader.isoBoxes(meta, box.body + 4, box.end),
              let primary = ImageHeader.isoPrimaryItem(meta, children),
              let iinf = children.first(where: { $0.type == "iinf" }),
              let iloc = children.first(where: { $0.type == "iloc" }) else { return nil }
        let types = itemTypes(meta, iinf)
        guard let type = types[primary], type == "av01" || type == "grid" else { return nil }
        guard let locations = ISOItemLocations(iloc: meta[iloc.body..<iloc.end]) else { return .failure(.unreadable) }
        let idat = children.first { $0.type == "idat" }
        /// The first `count` bytes of an item's data (fewer where it is shorter, or the file ends).
        func data(_ item: UInt32, _ count: Int) throws(SystemError) -> [UInt8]? {
            guard let start = locations.starts[item] else { return nil }
            let wanted = start.length == 0 ? count : Int(min(UInt64(count), start.length))
            guard start.inIdat else { return try read(start.offset, wanted) }
            guard let idat, start.offset <= UInt64(idat.end - idat.body) else { return nil }
            let from = idat.body + Int(start.offset)
            return Array(meta[from..<min(from + wanted, idat.end)])
        }
        /// The largest frame of the AV1 image `item`.
        func frame(_ item: UInt32) throws(SystemError) -> Result<(width: Int, height: Int), Problem> {
            guard let bytes = try data(item, sequenceHeaderReach), !bytes.isEmpty else { return .failure(.unreadable) }
            guard let size = largestFrame(bytes) else {
                return .failure(.malformed("the AVIF's AV1 image has no sequence header before its first frame"))
            }
            return .success(size)
        }
        if type == "av01" {
            return try frame(primary).map { AVIFCodedSize(width: $0.width, height: $0.height,
                                                         decoded: ImageInfo.pixels($0.width, $0.height)) }
        }
        guard let descriptor = try data(primary, 12), descriptor.count >= 8 else { return .failure(.unreadable) }
        let wide = descriptor[1] & 1 == 1
        guard descriptor[0] == 0, !wide || descriptor.count >= 12 else {
            return .failure(.malformed("the AVIF's grid descriptor cannot be read"))
        }
        let width = wide ? Int(descriptor.bigEndian32(at: 4)) : Int(descriptor.bigEndian16(at: 4))
        let height = wide ? Int(descriptor.bigEndian32(at: 8)) : Int(descriptor.bigEndian16(at: 6))
        let tiles = tileItems(meta, children.first { $0.type == "iref" }, of: primary)
        guard tiles.count == (Int(descriptor[2]) + 1) * (Int(descriptor[3]) + 1) else {
            return .failure(.malformed("the AVIF's grid has \(tiles.count) tiles, not the \(Int(descriptor[2]) + 1)×"
                                       + "\(Int(descriptor[3]) + 1) its descriptor says"))
        }
        var decoded: Int64 = 0
        var sizes: [UInt32: (width: Int, height: Int)] = [:]  // a tile repeated is decoded again, read once
        for tile in tiles {
            if sizes[tile] == nil {
                guard types[tile] == "av01" else {
                    return .failure(.malformed("the AVIF's grid has a tile that is not AV1"))
                }
                switch try frame(tile) {
                case .success(let size): sizes[tile] = size
                case .failure(let problem): return .failure(problem)
                }
            }
            decoded = decoded.saturatingAdd(ImageInfo.pixels(sizes[tile]!.width, sizes[tile]!.height))
        }
        return .success(AVIFCodedSize(width: width, height: height, decoded: decoded))
    }

    /// How far into an AV1 image's data its sequence header is looked for: the OBUs before it (metadata) are small.
    static let sequenceHeaderReach = 4096

    /// Each item's type, by id, from the `iinf` box (item info entries of version 2 and 3).
    private static func itemTypes(_ b: [UInt8], _ iinf: (type: String, body: Int, end: Int)) -> [UInt32: String] {
        guard iinf.body + 6 <= iinf.end else { return [:] }
        let start = iinf.body + (b[iinf.body] == 0 ? 6 : 8)
        var types: [UInt32: String] = [:]
        for entry in ImageHeader.isoBoxes(b, min(start, iinf.end), iinf.end) where entry.type == "infe" {
            guard entry.body < entry.end else { continue }  // an empty box last: no version byte
            let version = b[entry.body]
            guard version >= 2, entry.body + (version == 2 ? 12 : 14) <= entry.end else { continue }
            let id = version == 2 ? UInt32(b.bigEndian16(at: entry.body + 4)) : b.bigEndian32(at: entry.body + 4)
            let type = entry.body + (version == 2 ? 8 : 10)
            types[id] = String(decoding: b[type..<type + 4], as: UTF8.self)
            if types.count > ISOItemLocations.mostStarts { break }
        }
        return types
    }

    /// The items a grid is made of, in order: its `dimg` references in the `iref` box.
    private static func tileItems(_ b: [UInt8], _ iref: (type: String, body: Int, end: Int)?,
                                  of grid: UInt32) -> [UInt32] {
        guard let iref, iref.body + 4 <= iref.end else { return [] }
        let wide = b[iref.body] != 0
        let idLength = wide ? 4 : 2
        func id(at offset: Int) -> UInt32 { wide ? b.bigEndian32(at: offset) : UInt32(b.bigEndian16(at: offset)) }
        for reference in ImageHeader.isoBoxes(b, iref.body + 4, iref.end) where reference.type == "dimg" {
            guard reference.body + idLength + 2 <= reference.end, id(at: reference.body) == grid else { continue }
            let count = Int(b.bigEndian16(at: reference.body + idLength))
            let first = reference.body + idLength + 2
            guard first + count * idLength <= reference.end else { return [] }
            return (0..<count).map { id(at: first + $0 * idLength) }
        }
        return []
    }

    /// The largest frame the first sequence header OBU among `obus` allows (AV1, section 5.5:
    /// `max_frame_width_minus_1`, `max_frame_height_minus_1`); nil when a frame (or the data's end) comes first.
    static func largestFrame(_ obus: [UInt8]) -> (width: Int, height: Int)? {
        var at = 0
        while at < obus.count {
            let header = obus[at]
            let type = header >> 3 & 15, hasExtension = header & 4 != 0, hasSize = header & 2 != 0
            at += hasExtension ? 2 : 1
            var size = obus.count - at
            if hasSize {
                guard let (value, length) = leb128(obus, at) else { return nil }
                at += length
                size = Int(clamping: min(value, UInt64(obus.count - min(at, obus.count))))
            }
            guard at <= obus.count else { return nil }
            if type == 1 { return sequenceHeader(Array(obus[at..<at + size])) }
            if [3, 4, 6].contains(type) { return nil }  // a frame header, tile group or frame came first
            at += size
        }
        return nil
    }

    /// An unsigned LEB128 number at `at` and its length in bytes (at most 8).
    private static func leb128(_ b: [UInt8], _ at: Int) -> (UInt64, Int)? {
        var value: UInt64 = 0
        for index in 0..<8 where at + index < b.count {
            value |= UInt64(b[at + index] & 0x7F) << (7 * UInt64(index))
            if b[at + index] & 0x80 == 0 { return (value, index + 1) }
        }
        return nil
    }

    /// The largest frame a sequence header OBU's payload allows.
    private static func sequenceHeader(_ payload: [UInt8]) -> (width: Int, height: Int)? {
        var bits = BitReader(payload)
        guard bits.skip(4), let reduced = bits.read(1) else { return nil }  // seq_profile, still_picture
        if reduced == 1 {
            guard bits.skip(5) else { return nil }  // seq_level_idx[0]
        } else {
            guard let timing = bits.read(1) else { return nil }
            var decoderModel: UInt64 = 0, bufferDelayLength = 0
            if timing == 1 {
                guard bits.skip(64), let equalIntervals = bits.read(1) else { return nil }
                if equalIntervals == 1 {
                    guard bits.skipUVLC() else { return nil }  // num_ticks_per_picture_minus_1
                }
                guard let model = bits.read(1) else { return nil }
                decoderModel = model
                if model == 1 {
                    guard let delay = bits.read(5), bits.skip(32 + 5 + 5) else { return nil }
                    bufferDelayLength = Int(delay) + 1
                }
            }
            guard let initialDelay = bits.read(1), let points = bits.read(5) else { return nil }
            for _ in 0...points {
                guard bits.skip(12), let level = bits.read(5) else { return nil }
                if level > 7 { guard bits.skip(1) else { return nil } }  // seq_tier
                if decoderModel == 1 {
                    guard let present = bits.read(1) else { return nil }
                    if present == 1 { guard bits.skip(2 * bufferDelayLength + 1) else { return nil } }
                }
                if initialDelay == 1 {
                    guard let present = bits.read(1) else { return nil }
                    if present == 1 { guard bits.skip(4) else { return nil } }
                }
            }
        }
        guard let widthBits = bits.read(4), let heightBits = bits.read(4),
              let width = bits.read(Int(widthBits) + 1), let height = bits.read(Int(heightBits) + 1) else { return nil }
        return (Int(width) + 1, Int(height) + 1)
    }
}

/// Reads bits most significant first, as the AV1 specification's `f(n)`.
private struct BitReader {
    private let bytes: [UInt8]
    private var position = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The next `count` bits (at most 64) as a number; nil past the end.
    mutating func read(_ count: Int) -> UInt64? {
        guard count <= 64, position + count <= bytes.count * 8 else { return nil }
        var value: UInt64 = 0
        for _ in 0..<count {
            value = value << 1 | UInt64(bytes[position >> 3] >> (7 - position & 7) & 1)
            position += 1
        }
        return value
    }

    /// Skips `count` bits; false past the end.
    mutating func skip(_ count: Int) -> Bool {
        guard position + count <= bytes.count * 8 else { return false }
        position += count
        return true
    }

    /// Skips a `uvlc()` number; false past the end.
    mutating func skipUVLC() -> Bool {
        var zeros = 0
        while true {
            guard let bit = read(1) else { return false }
            if bit == 1 { break }
            zeros += 1
        }
        return zeros >= 32 || skip(zeros)
    }
}
