/// What decoding an AVIF's primary image takes, read from what the decoder reads: a grid's descriptor and, for each
/// AV1 image (the primary one, each tile of a grid, an alpha plane), the largest frame its sequence headers allow and
/// the size its `ispe` says. libavif's
/// loader decodes all of it before it reports a size, and never looks at the `ispe` properties `ImageHeader` reads: a
/// grid whose `ispe` said 100×100, of 32×32 tiles of one 189-byte 512×512 AV1 frame (a 44.5 KB file), decoded
/// 16384×16384, 2 GB.
struct AVIFCodedSize: Equatable {
    /// The primary image's size: a grid's output, or an AV1 image's largest frame.
    let width: Int
    let height: Int
    /// The pixels of the pictures decoded to make it (and its auxiliary images: an alpha plane): each AV1 image's
    /// largest frame, and the size its `ispe` says where that differs (libavif scales the frame to it), and
    /// `decoderPixels` for its decoder; a grid's tiles so. `max_pixels` bounds this as it bounds the size, and a
    /// variant's job counts it.
    let decoded: Int64

    /// Why the coded size cannot be read where the decoder would need it.
    enum Problem: Error, Equatable {
        /// The data of an item it decodes is not where its location says (past the file's end, or no location), or
        /// the `meta` box cannot be read whole.
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
        guard let types = itemTypes(meta, iinf) else { return .failure(.malformed(tooManyItems)) }
        guard let type = types[primary], type == "av01" || type == "grid" else { return nil }
        guard let locations = ISOItemLocations(iloc: meta[iloc.body..<iloc.end]) else { return .failure(.unreadable) }
        guard locations.itemCount <= UInt64(mostItems) else { return .failure(.malformed(tooManyItems)) }
        let idat = children.first { $0.type == "idat" }
        var unread = mostHeaderBytes  // what may still be read of the AV1 images, all together
        var colours: [UInt32: SequenceHeader.Colour] = [:]  // of the AV1 images read
        let references = itemReferences(meta, children.first { $0.type == "iref" })
        let (listed, associations) = itemProperties(meta, children.first { $0.type == "iprp" })
        // libavif makes an item of every id its boxes name, looking each up through all the others.
        var ids = Set(types.keys).union(locations.items).union(associations.keys)
        for (from, kinds) in references {
            ids.insert(from)
            for items in kinds.values { ids.formUnion(items) }
        }
        guard ids.count <= mostItems else { return .failure(.malformed(tooManyItems)) }
        // ... and looks each reference's items up so (1.77 million references to 16,384 items: 39 s of a worker).
        let referenceCount = references.values.reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.count } }
        guard referenceCount <= mostReferences else {
            return .failure(.malformed("the AVIF has more than \(mostReferences) item references"))
        }
        // An item in several extents is copied whole into a buffer of its own: an AV1 image, a grid's descriptor, the
        // Exif and XMP items libavif reads besides (1,000 Exif items of 1 MB each, their extents overlapping, in a
        // 1.06 MB file: 1.07 GB). Counted in pixels of 4 bytes.
        var merged: UInt64 = 0
        for parts in locations.extents.values where parts.count > 1 {
            guard parts.allSatisfy({ $0.length > 0 }) else {
                return .failure(.malformed("the AVIF has an item extent of unknown length among several"))
            }
            for part in parts {
                merged = merged.addingReportingOverflow(part.length).overflow ? .max : merged + part.length
            }
        }
        guard associations.values.reduce(0, { $0 + $1.count }) <= mostAssociations else {
            return .failure(.malformed("the AVIF associates more than \(mostAssociations) properties with its items"))
        }
        func properties(_ item: UInt32) -> [(type: String, body: Int, end: Int)] {
            (associations[item] ?? []).compactMap { $0 >= 1 && $0 <= listed.count ? listed[$0 - 1] : nil }
        }
        // A layer chosen (`lsel`) makes libavif decode every frame of the item (1,000 frames of 4096×4096 behind a
        // 64×64 one: 13.7 s of a worker); layered images are refused already (`scanFrames`).
        let layerSelections: Set = ["lsel", "a1lx"]
        if let layered = associations.keys.first(where: { properties($0).contains { layerSelections.contains($0.type) } }) {
            return .failure(.malformed("the AVIF's item \(layered) selects a layer (lsel, a1lx): libavif then decodes "
                                       + "every frame of it"))
        }
        /// The size each item's `ispe` property declares (the largest, where several are).
        let extents = associations.keys.reduce(into: [UInt32: (width: Int, height: Int)]()) { sizes, item in
            sizes[item] = properties(item).compactMap { ImageHeader.isoExtent(meta, $0) }
                .max { ImageInfo.pixels($0.width, $0.height) < ImageInfo.pixels($1.width, $1.height) }
        }

        /// The first `count` bytes of an item's data, through its extents in order (fewer where it is shorter, or the
        /// file ends); nil when it has no extent in the file or the `idat` box.
        func data(_ item: UInt32, _ count: Int) throws(SystemError) -> [UInt8]? {
            guard let parts = locations.extents[item] else { return nil }
            var bytes: [UInt8] = []
            for part in parts where bytes.count < count {
                let wanted = part.length == 0 ? count - bytes.count : Int(min(UInt64(count - bytes.count), part.length))
                if part.inIdat {
                    guard let idat, part.offset <= UInt64(idat.end - idat.body) else { return nil }
                    let from = idat.body + Int(part.offset)
                    bytes += meta[from..<min(from + wanted, idat.end)]
                } else {
                    bytes += try read(part.offset, wanted)
                }
                if part.length == 0 { break }
            }
            return bytes
        }
        /// What decoding the AV1 image `item` takes: its largest frame, and the size its `ispe` says besides where
        /// they differ (libavif scales the frame to it: a 64×64 tile whose `ispe` said 16384×16384 took 1.6 GB).
        func av1(_ item: UInt32) throws(SystemError) -> Result<(size: (width: Int, height: Int), decoded: Int64), Problem> {
            guard types[item] == "av01" else { return .failure(.malformed("the AVIF's image is not AV1")) }
            var reach = 256, frame: (width: Int, height: Int)?
            while frame == nil {
                guard let bytes = try data(item, reach), !bytes.isEmpty else { return .failure(.unreadable) }
                unread -= bytes.count
                guard unread >= 0 else {
                    return .failure(.malformed("the AVIF's AV1 images take more than \(mostHeaderBytes >> 20) MiB to read "
                                               + "up to their first frames"))
                }
                switch scanFrames(bytes) {
                case .found(let width, let height, let colour):
                    frame = (width, height)
                    colours[item] = colour
                case .cutShort where bytes.count == reach && reach < obuReach: reach = min(reach * 4, obuReach)
                case .layered:
                    return .failure(.malformed("the AVIF's AV1 image has layers (OBU extension headers): which frame a "
                                               + "decoder takes is not read"))
                default:
                    return .failure(.malformed("the AVIF's AV1 image has no sequence header before its first frame "
                                               + "(within \(obuReach / 1024) KiB and \(mostOBUs) OBUs)"))
                }
            }
            guard let frame else { return .failure(.unreadable) }
            let framePixels = ImageInfo.pixels(frame.width, frame.height).saturatingAdd(decoderPixels)
            guard let declared = extents[item], declared != frame else { return .success((frame, framePixels)) }
            let declaredPixels = ImageInfo.pixels(declared.width, declared.height)
            return .success((declaredPixels > ImageInfo.pixels(frame.width, frame.height) ? declared : frame,
                             framePixels.saturatingAdd(declaredPixels)))
        }
        /// What decoding the image `item` (AV1, or a grid of AV1 tiles) takes: its size and the pixels decoded.
        func image(_ item: UInt32) throws(SystemError) -> Result<AVIFCodedSize, Problem> {
            guard types[item] == "grid" else {
                return try av1(item).map { AVIFCodedSize(width: $0.size.width, height: $0.size.height, decoded: $0.decoded) }
            }
            guard let descriptor = try data(item, 12), descriptor.count >= 8 else { return .failure(.unreadable) }
            let wide = descriptor[1] & 1 == 1
            guard descriptor[0] == 0, !wide || descriptor.count >= 12 else {
                return .failure(.malformed("the AVIF's grid descriptor cannot be read"))
            }
            let width = wide ? Int(descriptor.bigEndian32(at: 4)) : Int(descriptor.bigEndian16(at: 4))
            let height = wide ? Int(descriptor.bigEndian32(at: 8)) : Int(descriptor.bigEndian16(at: 6))
            let tiles = references[item]?["dimg"] ?? []
            guard tiles.count == (Int(descriptor[2]) + 1) * (Int(descriptor[3]) + 1) else {
                return .failure(.malformed("the AVIF's grid has \(tiles.count) tiles, not the \(Int(descriptor[2]) + 1)×"
                                           + "\(Int(descriptor[3]) + 1) its descriptor says"))
            }
            var decoded: Int64 = 0
            // A tile repeated is decoded again, read once.
            var costs: [UInt32: (size: (width: Int, height: Int), decoded: Int64)] = [:]
            for tile in tiles {
                if costs[tile] == nil {
                    switch try av1(tile) {
                    case .success(let tileCost): costs[tile] = tileCost
                    case .failure(let problem): return .failure(problem)
                    }
                }
                decoded = decoded.saturatingAdd(costs[tile]!.decoded)
            }
            let columns = Int(descriptor[3]) + 1, rows = Int(descriptor[2]) + 1
            if let tile = tiles.first.flatMap({ costs[$0]?.size }),
               let refusal = Self.gridRefusal(tile: tile, of: tiles.map { costs[$0]!.size }, columns: columns,
                                              rows: rows, width: width, height: height) {
                return .failure(.malformed(refusal))
            }
            return .success(AVIFCodedSize(width: width, height: height, decoded: decoded))
        }

        var coded: AVIFCodedSize
        switch try image(primary) {
        case .success(let size): coded = size
        case .failure(let problem): return .failure(problem)
        }
        // Its auxiliary images (an alpha plane) are decoded with it.
        for (item, kinds) in references where kinds["auxl"]?.contains(primary) == true && types[item] != nil {
            switch try image(item) {
            case .success(let auxiliary):
                coded = AVIFCodedSize(width: coded.width, height: coded.height,
                                      decoded: coded.decoded.saturatingAdd(auxiliary.decoded))
            case .failure(let problem):
                return .failure(problem)
            }
        }
        let codingItem = types[primary] == "grid" ? references[primary]?["dimg"]?.first : primary
        if let refusal = colourRefusal(meta, properties(primary), coding: codingItem.map(properties) ?? [],
                                       sequence: codingItem.flatMap { colours[$0] }) {
            return .failure(.malformed(refusal))
        }
        return .success(AVIFCodedSize(width: coded.width, height: coded.height,
                                      decoded: coded.decoded.saturatingAdd(Int64(clamping: merged / 4))))
    }

    /// What an AV1 image's decoder counts for besides its pictures: libavif gives each image it decodes (each tile of a
    /// grid, each time it is referenced) a dav1d decoder of its own, all alive until the grid is put together, of
    /// about 400 KB (a 1.4 MB grid of 127×127 tiles of 8×8, kept as 1016×1016, took 6.4 GB and 13 s): counted as
    /// 100,000 pixels, 4 bytes each.
    static let decoderPixels: Int64 = 100_000

    /// Why libavif refuses a grid once it has decoded every tile (MIAF, ISO/IEC 23000-22, 7.3.11.4.2; HEIF, ISO/IEC
    /// 23008-12, 6.6.2.3.1): tiles smaller than 64×64, of different sizes, not covering the output, or a last column
    /// or row wholly outside it. Refused before anything is decoded, it is no image; nil for a grid it puts together.
    static func gridRefusal(tile: (width: Int, height: Int), of tiles: [(width: Int, height: Int)], columns: Int,
                            rows: Int, width: Int, height: Int) -> String? {
        if tile.width < 64 || tile.height < 64 {
            return "the AVIF's grid tiles are \(tile.width)x\(tile.height): smaller than 64x64, which libavif refuses "
                + "(MIAF) after decoding them all"
        }
        if tiles.contains(where: { $0 != tile }) {
            return "the AVIF's grid tiles are not all \(tile.width)x\(tile.height), which libavif refuses after "
                + "decoding them all"
        }
        if tile.width * columns < width || tile.height * rows < height || tile.width * (columns - 1) >= width
            || tile.height * (rows - 1) >= height {
            return "the AVIF's \(columns)x\(rows) grid of \(tile.width)x\(tile.height) tiles does not fit its "
                + "\(width)x\(height) output, which libavif refuses after decoding every tile"
        }
        return nil
    }

    /// How far into an AV1 image's data its sequence headers are looked for, up to its first frame, and through how
    /// many OBUs: those before it (a temporal delimiter, metadata) are few and small.
    static let obuReach = 64 * 1024
    static let mostOBUs = 64
    /// The most bytes read of all AV1 images together, up to their first frames: 16,383 tiles of 64 KiB of tiny
    /// sequence headers each took 11.6 s of CPU (a legitimate grid takes well under 256 bytes a tile).
    static let mostHeaderBytes = 8 << 20
    /// The most items an AVIF may list (libavif looks items up one by one through all of them: 100,000 items took
    /// 7 s to decode, 1,000,000 more than 10 minutes); a grid's tiles, 256 × 256 at most, are items.
    static let mostItems = 16_384
    /// The most property associations of all items together (libavif copies each property into each item it is
    /// associated with: 14,000 items of 255 each took 307 MB), 16 an item.
    static let mostAssociations = 16 * mostItems
    /// The most item references (`iref`) of all items together: two an item (a grid's tile, its alpha plane's).
    static let mostReferences = 2 * mostItems
    private static let tooManyItems = "the AVIF lists more than \(mostItems) items"

    /// Each item's type, by id, from the `iinf` box (item info entries of version 2 and 3); nil when it lists more
    /// than `mostItems`.
    private static func itemTypes(_ b: [UInt8], _ iinf: (type: String, body: Int, end: Int)) -> [UInt32: String]? {
        guard iinf.body + 6 <= iinf.end else { return [:] }
        let count = b[iinf.body] == 0 ? Int(b.bigEndian16(at: iinf.body + 4))
            : iinf.body + 8 <= iinf.end ? Int(b.bigEndian32(at: iinf.body + 4)) : 0
        guard count <= mostItems else { return nil }
        let start = iinf.body + (b[iinf.body] == 0 ? 6 : 8)
        var types: [UInt32: String] = [:]
        for entry in ImageHeader.isoBoxes(b, min(start, iinf.end), iinf.end) where entry.type == "infe" {
            guard entry.body < entry.end else { continue }  // an empty box last: no version byte
            let version = b[entry.body]
            guard version >= 2, entry.body + (version == 2 ? 12 : 14) <= entry.end else { continue }
            let id = version == 2 ? UInt32(b.bigEndian16(at: entry.body + 4)) : b.bigEndian32(at: entry.body + 4)
            let type = entry.body + (version == 2 ? 8 : 10)
            types[id] = String(decoding: b[type..<type + 4], as: UTF8.self)
            guard types.count <= mostItems else { return nil }
        }
        return types
    }

    /// The references of the `iref` box: for each item, by kind (`dimg`, `auxl`, …), the items it refers to, in
    /// order, all of its boxes of a kind together (libavif's way).
    private static func itemReferences(_ b: [UInt8], _ iref: (type: String, body: Int, end: Int)?)
        -> [UInt32: [String: [UInt32]]] {
        guard let iref, iref.body + 4 <= iref.end else { return [:] }
        let wide = b[iref.body] != 0
        let idLength = wide ? 4 : 2
        func id(at offset: Int) -> UInt32 { wide ? b.bigEndian32(at: offset) : UInt32(b.bigEndian16(at: offset)) }
        var references: [UInt32: [String: [UInt32]]] = [:]
        for reference in ImageHeader.isoBoxes(b, iref.body + 4, iref.end) {
            guard reference.body + idLength + 2 <= reference.end else { continue }
            let count = Int(b.bigEndian16(at: reference.body + idLength))
            let first = reference.body + idLength + 2
            guard first + count * idLength <= reference.end else { continue }
            references[id(at: reference.body), default: [:]][reference.type, default: []]
                += (0..<count).map { id(at: first + $0 * idLength) }
        }
        return references
    }

    /// The properties the `ipco` box lists, and the indexes of those associated with each item (every `ipma` box).
    private static func itemProperties(_ b: [UInt8], _ iprp: (type: String, body: Int, end: Int)?)
        -> (listed: [(type: String, body: Int, end: Int)], associations: [UInt32: [Int]]) {
        guard let iprp else { return ([], [:]) }
        let properties = ImageHeader.isoBoxes(b, iprp.body, iprp.end)
        guard let ipco = properties.first(where: { $0.type == "ipco" }) else { return ([], [:]) }
        return (ImageHeader.isoBoxes(b, ipco.body, ipco.end), ImageHeader.isoAssociations(b, properties))
    }

    /// Why libavif cannot turn the primary image's colours into RGB: matrix coefficients it does not support
    /// (reserved, BT.2020 constant luminance, SMPTE 2085, chroma-derived constant luminance, ICtCp and later; YCgCo in
    /// limited range; identity unless 4:4:4). They come from its `nclx` colour properties (`primary`), else from the
    /// sequence header of the AV1 image it is coded in (`sequence`), which also gives the chroma format libavif
    /// decodes to, else its `av1C` (`coding`). Its loader then fails every variant and keeps the picture it decoded
    /// (130 MB a request); nil when it can.
    static func colourRefusal(_ b: [UInt8], _ primary: [(type: String, body: Int, end: Int)],
                              coding: [(type: String, body: Int, end: Int)],
                              sequence: SequenceHeader.Colour? = nil) -> String? {
        let yuv444 = sequence?.yuv444
            ?? coding.first { $0.type == "av1C" && $0.body + 3 <= $0.end }.map { b[$0.body + 2] & 0x1C == 0 }
        var given = primary.filter { colr in
            colr.type == "colr" && colr.body + 11 <= colr.end
                && String(decoding: b[colr.body..<colr.body + 4], as: UTF8.self) == "nclx"
        }.map { (matrix: Int(b.bigEndian16(at: $0.body + 8)), fullRange: b[$0.body + 10] & 0x80 != 0) }
        if given.isEmpty, let sequence { given = [(sequence.matrix, sequence.fullRange)] }
        for (matrix, fullRange) in given where [3, 10, 11, 13].contains(matrix) || matrix >= 14
            || (matrix == 8 && !fullRange) || (matrix == 0 && yuv444 != true) {
            return "the AVIF's colours (matrix coefficients \(matrix)\(fullRange ? "" : ", limited range")) cannot be "
                + "turned into RGB by libavif"
        }
        return nil
    }

    /// The largest frame the sequence header OBUs before the first frame among `obus` allow (AV1, section 5.5:
    /// `max_frame_width_minus_1`, `max_frame_height_minus_1`; a decoder takes the last before its frame, so the
    /// largest of them counts); nil when there is none, or no frame follows within `obus`.
    static func largestFrame(_ obus: [UInt8]) -> (width: Int, height: Int)? {
        if case .found(let width, let height, _) = scanFrames(obus) { return (width, height) }
        return nil
    }

    /// What the OBUs before the first frame say: the largest frame their sequence headers allow, or that the bytes
    /// ended before a frame (`cutShort`: more may tell), or that they cannot be read (`malformed`: a sequence header
    /// cut short or unreadable, more than `mostOBUs` OBUs, a frame with no sequence header before it).
    enum FrameScan: Equatable {
        /// The frame's size, and the colour configuration of the sequence header it is decoded under.
        case found(width: Int, height: Int, colour: SequenceHeader.Colour?)
        case cutShort
        case malformed
        /// An OBU with an extension header (temporal and spatial layer ids): a decoder drops the OBUs of layers its
        /// operating point does not take, so the frame it decodes may not be the first one read here.
        case layered
    }

    static func scanFrames(_ obus: [UInt8]) -> FrameScan {
        var at = 0, count = 0
        var largest: (width: Int, height: Int)?, last: SequenceHeader?
        while at < obus.count {
            let header = obus[at]
            let type = header >> 3 & 15, hasSize = header & 2 != 0
            guard header & 4 == 0 else { return .layered }
            at += 1
            var size = obus.count - at, cut = false
            if hasSize {
                guard let (value, length) = leb128(obus, at) else { return .cutShort }
                at += length
                let left = UInt64(obus.count - min(at, obus.count))
                (size, cut) = (Int(clamping: min(value, left)), value > left)
            }
            guard at <= obus.count else { return .cutShort }
            if [3, 6, 7].contains(type) {  // a frame header (or a redundant one), or a frame: its header says its size
                guard let last, let sized = largest else { return .malformed }
                guard let frame = frameSize(Array(obus[at..<at + size]), under: last) else { return .cutShort }
                let bigger = ImageInfo.pixels(frame.width, frame.height) > ImageInfo.pixels(sized.width, sized.height)
                let found = bigger ? frame : sized
                return .found(width: found.width, height: found.height, colour: last.colour)
            }
            if type == 4 { return .malformed }  // a tile group before any frame header
            count += 1
            guard count <= mostOBUs else { return .malformed }
            guard !cut else { return .cutShort }
            if type == 1 {
                guard let sequence = sequenceHeader(Array(obus[at..<at + size])) else { return .malformed }
                last = sequence
                let frame = sequence.largest
                if largest.map({ ImageInfo.pixels($0.width, $0.height) < ImageInfo.pixels(frame.width, frame.height) }) ?? true {
                    largest = frame
                }
            }
            at += size
        }
        return .cutShort
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

    /// What a sequence header OBU says that sizes a frame: the largest frame it allows, and what the frame header's
    /// fields up to its own size depend on (AV1, sections 5.5 and 5.9).
    struct SequenceHeader {
        var largest: (width: Int, height: Int) = (0, 0)
        var reduced = false
        var widthBits = 0, heightBits = 0
        var decoderModel = false, equalIntervals = false, presentationTimeBits = 0
        var frameIDBits: Int?
        /// 0, 1, or 2 for "the frame says".
        var screenContentTools = 2, integerMV = 2
        var orderHintBits = 0
        /// Its colour configuration, when the payload reaches it: what libavif converts by where no `nclx` colour
        /// property says otherwise, and the chroma format it decodes to whatever the `av1C` says.
        var colour: Colour?

        struct Colour: Equatable {
            var matrix: Int
            var fullRange: Bool
            var yuv444: Bool
        }

        /// The largest frame any frame under this header can have, whatever its own fields say.
        var widest: (width: Int, height: Int) { (1 << widthBits, 1 << heightBits) }
    }

    /// A sequence header OBU's payload.
    static func sequenceHeader(_ payload: [UInt8]) -> SequenceHeader? {
        var bits = BitReader(payload)
        var header = SequenceHeader()
        guard let profile = bits.read(3), bits.skip(1), let reduced = bits.read(1) else { return nil }  // still_picture
        header.reduced = reduced == 1
        if header.reduced {
            guard bits.skip(5) else { return nil }  // seq_level_idx[0]
        } else {
            guard let timing = bits.read(1) else { return nil }
            var bufferDelayLength = 0
            if timing == 1 {
                guard bits.skip(64), let equalIntervals = bits.read(1) else { return nil }
                header.equalIntervals = equalIntervals == 1
                if header.equalIntervals {
                    guard bits.skipUVLC() else { return nil }  // num_ticks_per_picture_minus_1
                }
                guard let model = bits.read(1) else { return nil }
                header.decoderModel = model == 1
                if header.decoderModel {
                    guard let delay = bits.read(5), bits.skip(32 + 5), let presentation = bits.read(5) else { return nil }
                    bufferDelayLength = Int(delay) + 1
                    header.presentationTimeBits = Int(presentation) + 1
                }
            }
            guard let initialDelay = bits.read(1), let points = bits.read(5) else { return nil }
            for _ in 0...points {
                guard bits.skip(12), let level = bits.read(5) else { return nil }
                if level > 7 { guard bits.skip(1) else { return nil } }  // seq_tier
                if header.decoderModel {
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
        (header.widthBits, header.heightBits) = (Int(widthBits) + 1, Int(heightBits) + 1)
        header.largest = (Int(width) + 1, Int(height) + 1)
        guard !header.reduced else {
            // 128×128 superblocks, filter intra, intra edge filter; superres, CDEF, loop restoration.
            if bits.skip(6) { header.colour = colourConfig(&bits, profile: Int(profile)) }
            return header
        }
        guard let frameIDs = bits.read(1) else { return nil }
        if frameIDs == 1 {
            guard let delta = bits.read(4), let additional = bits.read(3) else { return nil }
            header.frameIDBits = Int(additional) + Int(delta) + 3
        }
        // 128×128 superblocks, filter intra, intra edge filter, interintra and masked compound, warped motion,
        // dual filter.
        guard bits.skip(7), let orderHint = bits.read(1) else { return nil }
        if orderHint == 1 { guard bits.skip(2) else { return nil } }  // jnt_comp, ref_frame_mvs
        guard let chooseTools = bits.read(1) else { return nil }
        if chooseTools == 0 {
            guard let tools = bits.read(1) else { return nil }
            header.screenContentTools = Int(tools)
        }
        if header.screenContentTools > 0 {
            guard let chooseMV = bits.read(1) else { return nil }
            if chooseMV == 0 {
                guard let mv = bits.read(1) else { return nil }
                header.integerMV = Int(mv)
            }
        }
        if orderHint == 1 {
            guard let hintBits = bits.read(3) else { return nil }
            header.orderHintBits = Int(hintBits) + 1
        }
        if bits.skip(3) { header.colour = colourConfig(&bits, profile: Int(profile)) }  // superres, CDEF, restoration
        return header
    }

    /// `color_config()` (AV1, section 5.5.2): the matrix coefficients (2, unspecified, when not given), the range,
    /// and whether the chroma is 4:4:4; nil when the payload ends first.
    private static func colourConfig(_ bits: inout BitReader, profile: Int) -> SequenceHeader.Colour? {
        guard let high = bits.read(1) else { return nil }
        var twelveBit = false
        if profile == 2, high == 1 {
            guard let twelve = bits.read(1) else { return nil }
            twelveBit = twelve == 1
        }
        var monochrome = false
        if profile != 1 {
            guard let mono = bits.read(1) else { return nil }
            monochrome = mono == 1
        }
        guard let described = bits.read(1) else { return nil }
        var (primaries, transfer, matrix): (UInt64, UInt64, UInt64) = (2, 2, 2)
        if described == 1 {
            guard let p = bits.read(8), let t = bits.read(8), let m = bits.read(8) else { return nil }
            (primaries, transfer, matrix) = (p, t, m)
        }
        if primaries == 1, transfer == 13, matrix == 0, !monochrome {  // sRGB: full range, 4:4:4
            return .init(matrix: 0, fullRange: true, yuv444: true)
        }
        guard let range = bits.read(1) else { return nil }
        var yuv444 = profile == 1
        if profile == 2, twelveBit, !monochrome {
            guard let subsamplingX = bits.read(1) else { return nil }
            yuv444 = subsamplingX == 0  // then subsampling_y is 0 too
        }
        return .init(matrix: Int(matrix), fullRange: range == 1, yuv444: yuv444 && !monochrome)
    }

    /// The size a frame header gives its frame (AV1, section 5.9.2, up to `frame_size()`), under `sequence`: its
    /// own when it overrides the sequence's (a decoder does not hold it to the sequence's largest), else the
    /// sequence's. Only a shown key frame is read: for another (an existing frame shown again, a frame not shown,
    /// which another follows) and where buffer removal times come first, the most the size fields allow. nil when
    /// the header ends first.
    static func frameSize(_ header: [UInt8], under sequence: SequenceHeader) -> (width: Int, height: Int)? {
        guard !sequence.reduced else { return sequence.largest }  // a still picture's: no override
        var bits = BitReader(header)
        guard let showExisting = bits.read(1), let type = bits.read(2), let show = bits.read(1) else { return nil }
        guard showExisting == 0, type == 0, show == 1 else { return sequence.widest }
        if sequence.decoderModel, !sequence.equalIntervals {
            guard bits.skip(sequence.presentationTimeBits) else { return nil }  // temporal_point_info
        }
        // error_resilient_mode is 1 for a shown key frame; disable_cdf_update.
        guard bits.skip(1) else { return nil }
        var screenContentTools = UInt64(sequence.screenContentTools)
        if sequence.screenContentTools == 2 {
            guard let tools = bits.read(1) else { return nil }
            screenContentTools = tools
        }
        if screenContentTools == 1, sequence.integerMV == 2 { guard bits.skip(1) else { return nil } }  // force_integer_mv
        if let idBits = sequence.frameIDBits { guard bits.skip(idBits) else { return nil } }
        guard let override = bits.read(1) else { return nil }
        guard override == 1 else { return sequence.largest }
        guard !sequence.decoderModel else { return sequence.widest }  // buffer removal times come first
        // order_hint; then no primary_ref_frame (intra), and refresh_frame_flags is all for a shown key frame.
        guard bits.skip(sequence.orderHintBits), let width = bits.read(sequence.widthBits),
              let height = bits.read(sequence.heightBits) else { return nil }
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
