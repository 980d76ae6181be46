import QueueCore
import Testing
@testable import prefetchd

/// An AVIF's size as its decoder sees it: the grid descriptor and the AV1 sequence headers, not the `ispe` property.
@Suite struct AVIFCodedSizeTests {
    let scratch = Scratch()
    let policy = ImagePolicy()

    func coded(_ path: String) throws -> Result<AVIFCodedSize, AVIFCodedSize.Problem>? {
        try ImageIntegrity.avifCodedSize(ImageFile(path))
    }

    @Test("the committed AVIFs: one AV1 image, a 3×3 grid, and the three that lie in their ispe (a grid of 16×16 references to one 512×512 tile, a tile scaled up to 8192×8192, a 2000×2000 image) are sized as they decode, each AV1 image's decoder counted")
    func fixturesAreSizedAsTheyDecode() throws {
        let decoder = AVIFCodedSize.decoderPixels
        #expect(try coded(Fixtures.path("halves.avif"))
                == .success(AVIFCodedSize(width: 48, height: 32, decoded: 1_536 + decoder)))
        #expect(try coded(Fixtures.path("grid.avif"))
                == .success(AVIFCodedSize(width: 1_200, height: 900, decoded: 1_080_000 + 9 * decoder)))
        #expect(try coded(Fixtures.path("grid-bomb.avif"))
                == .success(AVIFCodedSize(width: 8_192, height: 8_192, decoded: 67_108_864 + 256 * decoder)))
        // A 512×512 tile whose ispe says 8192×8192: libavif decodes it, then scales it to that (16384 took 1.6 GB).
        #expect(try coded(Fixtures.path("tile-upscale.avif"))
                == .success(AVIFCodedSize(width: 512, height: 512, decoded: 512 * 512 + 8_192 * 8_192 + decoder)))
        #expect(try coded(Fixtures.path("lying-size.avif"))  // and scaled to 100×100
                == .success(AVIFCodedSize(width: 2_000, height: 2_000, decoded: 4_010_000 + decoder)))
        #expect(try coded(Fixtures.path("tile-swarm.avif"))
                == .success(AVIFCodedSize(width: 2_048, height: 2_048, decoded: 1_024 * (4_096 + decoder))))
    }

    @Test("a grid of many small tiles is sized by its decoders too: 32×32 tiles of 64×64 make 2048×2048 but take 460 MB to decode (127×127 of 8×8 kept as 1016×1016 took 6.4 GB and 13 s): pixel_limit; tiles smaller than 64×64 are no image (libavif refuses them after decoding them all)")
    func manyTilesCountTheirDecoders() throws {
        #expect(ImageInspector.inspect(Fixtures.path("tile-swarm.avif"), policy: policy).code == .pixelLimit)
        var large = policy
        large.maxPixels = 200_000_000
        #expect(ImageInspector.inspect(Fixtures.path("tile-swarm.avif"), policy: large)
                == .image(ImageInfo(format: "avif", width: 2_048, height: 2_048)))
        guard case .failure(.malformed(let problem))? = try coded(Fixtures.path("small-tiles.avif")) else {
            Issue.record("small tiles: \(String(describing: try coded(Fixtures.path("small-tiles.avif"))))")
            return
        }
        #expect(problem.contains("8x8: smaller than 64x64"), "\(problem)")
        #expect(ImageInspector.inspect(Fixtures.path("small-tiles.avif"), policy: policy).code == .notAnImage)
    }

    @Test("a grid libavif refuses once every tile is decoded is refused before: tiles of different sizes, tiles that do not cover the output, a last column or row wholly outside it")
    func gridsLibavifRefuses() {
        func refusal(_ tiles: [(width: Int, height: Int)], columns: Int, rows: Int, _ width: Int, _ height: Int) -> String? {
            AVIFCodedSize.gridRefusal(tile: tiles[0], of: tiles, columns: columns, rows: rows, width: width, height: height)
        }
        let tile = (width: 512, height: 512)
        #expect(refusal(Array(repeating: tile, count: 4), columns: 2, rows: 2, 1_024, 1_024) == nil)
        #expect(refusal(Array(repeating: tile, count: 4), columns: 2, rows: 2, 1_000, 600) == nil, "the output crops the last tiles")
        #expect(refusal([tile, tile, tile, (512, 256)], columns: 2, rows: 2, 1_024, 1_024)?.contains("not all 512x512") == true)
        #expect(refusal(Array(repeating: tile, count: 4), columns: 2, rows: 2, 1_025, 1_024)?.contains("does not fit") == true)
        #expect(refusal(Array(repeating: tile, count: 4), columns: 2, rows: 2, 512, 1_024)?.contains("does not fit") == true,
                "the last column wholly outside")
        #expect(refusal([(64, 63)], columns: 1, rows: 1, 64, 63)?.contains("smaller than 64x64") == true)
    }

    @Test("a grid whose ispe says 100×100 but decodes 8192×8192 is refused with pixel_limit before anything is decoded (a 44.5 KB one of 16384×16384 was cached, and each variant decoded 268 Mpx: 2 GB); one within the limit keeps its real size")
    func lyingSizesAreRefusedOrCorrected() throws {
        for bomb in ["grid-bomb.avif", "tile-upscale.avif"] {
            let verdict = ImageInspector.inspect(Fixtures.path(bomb), policy: policy)
            #expect(verdict.code == .pixelLimit, "\(bomb): \(verdict)")
        }
        #expect(ImageInspector.inspect(Fixtures.path("grid.avif"), policy: policy)
                == .image(ImageInfo(format: "avif", width: 1_200, height: 900)))
        // Under the limit, the size the index keeps (and the variants' memory budget counts) is the decoded one.
        #expect(ImageInspector.inspect(Fixtures.path("lying-size.avif"), policy: policy)
                == .image(ImageInfo(format: "avif", width: 2_000, height: 2_000)))
        var small = policy
        small.maxPixels = 1_000_000
        #expect(ImageInspector.inspect(Fixtures.path("lying-size.avif"), policy: small).code == .pixelLimit)
    }

    @Test("an AV1 image whose data starts with a frame, not a sequence header, is not an image (the decoder cannot start)")
    func frameBeforeSequenceHeader() throws {
        var avif = Bytes.read(Fixtures.path("halves.avif"))  // its AV1 data at 282: a temporal delimiter, the sequence header
        avif[284] = 6 << 3 | 2  // the sequence header OBU becomes a frame OBU
        let path = scratch.write("frame-first.avif", avif)
        #expect(try coded(path) == .failure(.malformed("the AVIF's AV1 image has no sequence header before its first frame (within 64 KiB and 64 OBUs)")))
        #expect(ImageInspector.inspect(path, policy: policy).code == .notAnImage)
    }

    /// A sequence header OBU (with its size) of `bits`, padded to whole bytes.
    func obu(_ bits: [(UInt64, Int)], type: UInt8 = 1) -> [UInt8] {
        var bytes: [UInt8] = [], current: UInt8 = 0, filled = 0
        for (value, count) in bits {
            for shift in stride(from: count - 1, through: 0, by: -1) {
                current = current << 1 | UInt8(value >> UInt64(shift) & 1)
                filled += 1
                if filled == 8 { bytes.append(current); (current, filled) = (0, 0) }
            }
        }
        if filled > 0 { bytes.append(current << (8 - filled)) }
        return [type << 3 | 2, UInt8(bytes.count)] + bytes
    }

    @Test("the largest frame the sequence headers before the first frame allow: reduced and full headers, with timing and decoder model information; the largest of two (the decoder took the second, the daemon read the first); nil when cut short, when a frame comes first, or when none follows")
    func sequenceHeaders() {
        let size: [(UInt64, Int)] = [(15, 4), (15, 4), (16_383, 16), (8_191, 16)]  // 16384×8192
        let reduced = obu([(0, 3), (1, 1), (1, 1), (0, 5)] + size)
        // A shown key frame that keeps the sequence's size: show_existing_frame 0, key, shown, cdf updates, no screen
        // content tools (the full header lets the frame say), no size override.
        let frame = obu([(0, 1), (0, 2), (1, 1), (0, 1), (0, 1), (0, 1), (0, 8)], type: 6)
        /// What a full (not reduced) sequence header has after its sizes: no frame ids, no tools, no order hint,
        /// screen content tools and integer motion vectors for each frame to say.
        let rest: [(UInt64, Int)] = [(0, 1), (0, 7), (0, 1), (1, 1), (1, 1)]
        #expect(AVIFCodedSize.largestFrame(reduced + frame)! == (16_384, 8_192))
        #expect(AVIFCodedSize.largestFrame(reduced) == nil, "no frame follows")
        let small = obu([(0, 3), (1, 1), (1, 1), (0, 5), (7, 4), (7, 4), (63, 8), (63, 8)])  // 64×64
        #expect(AVIFCodedSize.largestFrame(small + reduced + frame)! == (16_384, 8_192))
        #expect(AVIFCodedSize.largestFrame(reduced + small + frame)! == (16_384, 8_192))
        #expect(AVIFCodedSize.largestFrame(small + frame + reduced + frame)! == (64, 64), "one after the frame is the next one's")
        // Not reduced: timing info with equal intervals (4 as a uvlc: 00101), a decoder model, two operating points.
        let full = obu([(0, 3), (0, 1), (0, 1), (1, 1), (1, 32), (30, 32), (1, 1), (0b00101, 5), (1, 1),
                        (4, 5), (1, 32), (9, 5), (9, 5), (1, 1), (1, 5),
                        (0, 12), (8, 5), (0, 1), (1, 1), (7, 5), (3, 5), (0, 1), (1, 1), (2, 4),
                        (1, 12), (2, 5), (0, 1), (0, 1)] + size + rest)
        #expect(AVIFCodedSize.largestFrame(full + frame)! == (16_384, 8_192))
        // A full header allowing 64×64 (16-bit size fields), then a key frame that says it is 2304×2304 (adv52: a
        // decoder does not hold a frame to the sequence's largest): the frame's own size counts.
        let small64 = obu([(0, 3), (0, 1), (0, 1), (0, 1), (0, 1), (0, 5), (0, 12), (0, 5), (15, 4), (15, 4), (63, 16), (63, 16)]
                          + rest)
        let override = obu([(0, 1), (0, 2), (1, 1), (0, 1), (0, 1), (1, 1), (2_303, 16), (2_303, 16)], type: 6)
        #expect(AVIFCodedSize.largestFrame(small64 + frame)! == (64, 64))
        #expect(AVIFCodedSize.largestFrame(small64 + override)! == (2_304, 2_304))
        #expect(AVIFCodedSize.largestFrame(small64 + Array(override.prefix(3))) == nil, "the frame header cut: read more")
        // adv53: a decoy frame first, then the real one. A frame not shown is not the picture: the most the 16-bit
        // size fields allow counts; an OBU with layer ids (an extension header) is not read at all.
        let hidden = obu([(0, 1), (0, 2), (0, 1), (0, 8)], type: 6)
        #expect(AVIFCodedSize.largestFrame(small64 + hidden + override)! == (65_536, 65_536))
        let layered = [UInt8(6 << 3 | 4 | 2), 0x08] + Array(frame.dropFirst(2))  // the frame with a temporal layer id
        #expect(AVIFCodedSize.scanFrames(small64 + layered + override) == .layered)
        let redundant = obu([(0, 1), (0, 2), (1, 1), (0, 1), (0, 1), (1, 1), (2_303, 16), (2_303, 16)], type: 7)
        #expect(AVIFCodedSize.largestFrame(small64 + redundant + frame)! == (2_304, 2_304), "a redundant frame header first")
        #expect(AVIFCodedSize.largestFrame(Array(reduced.dropLast(2))) == nil)
        #expect(AVIFCodedSize.largestFrame(frame + reduced + frame) == nil)
        #expect(AVIFCodedSize.largestFrame(obu([], type: 2) + reduced + frame)! == (16_384, 8_192))  // a temporal delimiter first
    }

    @Test("meta boxes and item data mutated at random (bytes changed, boxes cut short, an empty infe last) never trap: the worker checking bodies is the daemon's process")
    func mutatedFilesNeverTrap() throws {
        var state: UInt64 = 0x5EED_AF1F
        func next() -> UInt64 {  // SplitMix64
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        for name in ["halves.avif", "grid.avif", "grid-bomb.avif", "tile-upscale.avif", "lying-size.avif", "small-tiles.avif"] {
            let file = Bytes.read(Fixtures.path(name))
            let meta = try #require(try ImageIntegrity.isoMetaBox(ImageFile(Fixtures.path(name))))
            for round in 0..<2_000 {
                var mutated = meta, data = file
                for _ in 0..<(1 + Int(next() % 4)) {
                    let at = 8 + Int(next() % UInt64(mutated.count - 8))
                    mutated[at] = UInt8(truncatingIfNeeded: next())
                    data[Int(next() % UInt64(data.count))] = UInt8(truncatingIfNeeded: next())
                }
                if round % 3 == 0 { mutated = Array(mutated.prefix(8 + Int(next() % UInt64(mutated.count - 8)))) }
                _ = try AVIFCodedSize.of(meta: mutated) { offset, count in
                    offset >= UInt64(data.count) ? [] : Array(data[Int(offset)..<min(Int(offset) + count, data.count)])
                }
            }
        }
        // An empty `infe` box closing the meta box: its version byte would be past the end.
        let emptyLast = box("meta", [0, 0, 0, 0] + box("pitm", [0, 0, 0, 0, 0, 1]) + box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 0])
                            + box("iinf", [0, 0, 0, 0, 0, 1] + box("infe", [])))
        #expect(try AVIFCodedSize.of(meta: emptyLast) { _, _ in [] } == nil)
    }

    func box(_ type: String, _ body: [UInt8]) -> [UInt8] { Bytes.bigEndian(UInt32(8 + body.count)) + Array(type.utf8) + body }

    @Test("an AVIF listing more than 16,384 items is not an image (libavif looks each item up through all of them: 100,000 took 7 s to decode, 1,000,000 over 10 minutes)")
    func tooManyItems() throws {
        let infe = box("infe", [2, 0, 0, 0, 0, 1, 0, 0] + Array("av01".utf8) + [0])
        let meta = box("meta", [0, 0, 0, 0] + box("pitm", [0, 0, 0, 0, 0, 1]) + box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 0])
                       + box("iinf", [0, 0, 0, 0] + Bytes.bigEndian(16_385).suffix(2) + infe))
        #expect(try AVIFCodedSize.of(meta: meta) { _, _ in [] } == .failure(.malformed("the AVIF lists more than 16384 items")))
    }

    /// halves.avif's one AV1 image (48×32, its data at 282, 126 bytes) as item 1, with `iloc` and `iprp` as given.
    func halvesMeta(iloc: [UInt8], iprp: [UInt8] = [], iref: [UInt8] = []) -> [UInt8] {
        let iinf = box("iinf", [0, 0, 0, 0, 0, 1] + box("infe", [2, 0, 0, 0, 0, 1, 0, 0] + Array("av01".utf8) + [0]))
        return box("meta", [0, 0, 0, 0] + box("pitm", [0, 0, 0, 0, 0, 1]) + iloc + iinf + iref + iprp)
    }

    func halvesData(offset: UInt64, count: Int) -> [UInt8] {
        let halves = Bytes.read(Fixtures.path("halves.avif"))
        return offset >= UInt64(halves.count) ? [] : Array(halves[Int(offset)..<min(Int(offset) + count, halves.count)])
    }

    @Test("ids named only in ipma or iref count against the 16,384 items (libavif makes an item of each, looked up through all the others: 200,000 in ipma took 28 s of a worker per variant)")
    func idsAnywhereAreItems() throws {
        let iloc = box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 1, 0, 1, 0, 0, 0, 1] + Bytes.bigEndian(282) + Bytes.bigEndian(126))
        func ipma(_ ids: Range<UInt32>) -> [UInt8] {  // version 1: 4-byte ids, each with no property
            box("iprp", box("ipco", []) + box("ipma", [1, 0, 0, 0] + Bytes.bigEndian(UInt32(ids.count))
                                                + ids.flatMap { Bytes.bigEndian($0) + [0] }))
        }
        let many = AVIFCodedSize.Problem.malformed("the AVIF lists more than 16384 items")
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc, iprp: ipma(1..<16_384)), read: halvesData) != .failure(many))
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc, iprp: ipma(1..<16_386)), read: halvesData) == .failure(many))
        let thumbnails = (2..<16_386).flatMap { Bytes.bigEndian(UInt32($0)).suffix(2) }
        let iref = box("iref", [0, 0, 0, 0] + box("thmb", [0, 1] + Bytes.bigEndian(UInt32(16_384)).suffix(2) + thumbnails))
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc, iref: iref), read: halvesData) == .failure(many))
    }

    @Test("more than 32,768 item references are not an image (libavif looks each reference's items up through all of them: 1.77 million took 39 s of a worker per variant)")
    func referencesAreBounded() throws {
        let iloc = box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 1, 0, 1, 0, 0, 0, 1] + Bytes.bigEndian(282) + Bytes.bigEndian(126))
        func iref(_ count: Int) -> [UInt8] {  // item 1 describing item 1, `count` times in boxes of at most 65,535
            let boxes = stride(from: 0, to: count, by: 65_535).map { start -> [UInt8] in
                let n = min(65_535, count - start)
                return box("cdsc", [0, 1, UInt8(n >> 8), UInt8(n & 0xFF)] + [UInt8](repeating: 0, count: n).flatMap { _ in [0, 1] })
            }
            return box("iref", [0, 0, 0, 0] + boxes.flatMap { $0 })
        }
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc, iref: iref(32_768)), read: halvesData)
                == .success(AVIFCodedSize(width: 48, height: 32, decoded: 1_536 + AVIFCodedSize.decoderPixels)))
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc, iref: iref(32_769)), read: halvesData)
                == .failure(.malformed("the AVIF has more than 32768 item references")))
    }

    @Test("an item with a layer selected (lsel, a1lx) is not an image: libavif then decodes every frame of it (1,000 frames of 4096x4096 behind a 64x64 one took 13.7 s of a worker)")
    func layerSelectionIsRefused() throws {
        let iloc = box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 1, 0, 1, 0, 0, 0, 1] + Bytes.bigEndian(282) + Bytes.bigEndian(126))
        for property in ["lsel", "a1lx"] {
            let iprp = box("iprp", box("ipco", box(property, [0, 1])) + box("ipma", [0, 0, 0, 0] + Bytes.bigEndian(1) + [0, 1, 1, 0x81]))
            guard case .failure(.malformed(let problem))? = try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc, iprp: iprp), read: halvesData) else {
                Issue.record("\(property) was not refused")
                continue
            }
            #expect(problem.contains("selects a layer"), "\(problem)")
        }
    }

    @Test("more than 16 property associations an item, all items together, is not an image (libavif copies each: 14,000 items of 255 took 307 MB)")
    func associationsAreBounded() throws {
        let iloc = box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 1, 0, 1, 0, 0, 0, 1] + Bytes.bigEndian(282) + Bytes.bigEndian(126))
        let ispe = box("ispe", [0, 0, 0, 0] + Bytes.bigEndian(48) + Bytes.bigEndian(32))
        func iprp(items: UInt32, each: Int) -> [UInt8] {
            box("iprp", box("ipco", ispe) + box("ipma", [1, 0, 0, 0] + Bytes.bigEndian(items)
                + (1...items).flatMap { Bytes.bigEndian($0) + [UInt8(each)] + [UInt8](repeating: 1, count: each) }))
        }
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc, iprp: iprp(items: 4_096, each: 64)), read: halvesData)
                == .success(AVIFCodedSize(width: 48, height: 32, decoded: 1_536 + AVIFCodedSize.decoderPixels)))
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc, iprp: iprp(items: 4_097, each: 64)), read: halvesData)
                == .failure(.malformed("the AVIF associates more than 262144 properties with its items")))
    }

    @Test("an item in several extents counts the copy libavif makes of it (tiles whose second extents shared one 1 MB blob: 1.05 MB took 1.49 GB; 1,000 Exif items overlapping in 1.06 MB, 1.07 GB); an extent of unknown length among several is not an image")
    func mergedExtentsCount() throws {
        func iloc(_ extents: [(UInt32, UInt32)]) -> [UInt8] {
            box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 1, 0, 1, 0, 0, 0, UInt8(extents.count)]
                + extents.flatMap { Bytes.bigEndian($0.0) + Bytes.bigEndian($0.1) })
        }
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc([(282, 126), (0, 4_000_000)])), read: halvesData)
                == .success(AVIFCodedSize(width: 48, height: 32,
                                          decoded: 1_536 + AVIFCodedSize.decoderPixels + 4_000_126 / 4)))
        // An Exif item (any item) in two extents of 3 MB each, over the AV1 image's bytes.
        let exif = box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 2, 0, 1, 0, 0, 0, 1] + Bytes.bigEndian(282) + Bytes.bigEndian(126)
                       + [0, 2, 0, 0, 0, 2] + Bytes.bigEndian(0) + Bytes.bigEndian(3_000_000) + Bytes.bigEndian(0)
                       + Bytes.bigEndian(3_000_000))
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: exif), read: halvesData)
                == .success(AVIFCodedSize(width: 48, height: 32, decoded: 1_536 + AVIFCodedSize.decoderPixels + 1_500_000)))
        #expect(try AVIFCodedSize.of(meta: halvesMeta(iloc: iloc([(282, 126), (0, 0)])), read: halvesData)
                == .failure(.malformed("the AVIF has an item extent of unknown length among several")))
    }

    @Test("colours libavif cannot turn into RGB are no image (its loader then kept each failed variant's picture: 130 MB a request): reserved, constant-luminance and ICtCp matrix coefficients, YCgCo in limited range, identity unless 4:4:4")
    func coloursLibavifCannotConvert() {
        func refusal(matrix: UInt16, fullRange: Bool = true, av1C third: UInt8? = nil) -> String? {
            let colr = box("colr", Array("nclx".utf8) + [0, 1, 0, 13, UInt8(matrix >> 8), UInt8(matrix & 0xFF),
                                                         fullRange ? 0x80 : 0])
            let av1C = third.map { box("av1C", [0x81, 0, $0, 0]) } ?? []
            let b = colr + av1C
            let boxes = ImageHeader.isoBoxes(b, 0, b.count)
            return AVIFCodedSize.colourRefusal(b, boxes.filter { $0.type == "colr" }, coding: boxes.filter { $0.type == "av1C" })
        }
        for matrix: UInt16 in [1, 2, 5, 6, 9, 12] { #expect(refusal(matrix: matrix) == nil, "\(matrix)") }
        for matrix: UInt16 in [3, 10, 11, 13, 14, 15, 255] { #expect(refusal(matrix: matrix) != nil, "\(matrix)") }
        #expect(refusal(matrix: 8) == nil && refusal(matrix: 8, fullRange: false) != nil)
        #expect(refusal(matrix: 0, av1C: 0) == nil, "identity in 4:4:4")
        #expect(refusal(matrix: 0, av1C: 0x0C) != nil && refusal(matrix: 0, av1C: 0x10) != nil, "4:2:0, monochrome")
        #expect(refusal(matrix: 14)?.contains("matrix coefficients 14") == true)
    }

    @Test("a sequence header's colour configuration is read (reduced and full headers; sRGB implies 4:4:4): libavif converts by it where no nclx property says otherwise, and decodes to its chroma format")
    func sequenceHeaderColours() {
        let size: [(UInt64, Int)] = [(6, 4), (6, 4), (63, 7), (63, 7)]  // 64×64
        let tools: [(UInt64, Int)] = [(0, 3), (0, 3)]  // superblocks, filters; superres, CDEF, restoration
        func colour(profile: UInt64, _ config: [(UInt64, Int)]) -> AVIFCodedSize.SequenceHeader.Colour? {
            let bytes = obu([(profile, 3), (1, 1), (1, 1), (0, 5)] + size + tools + config)
            return AVIFCodedSize.sequenceHeader(Array(bytes.dropFirst(2)))?.colour
        }
        // 8-bit, not mono, described: BT.709 primaries and transfer, ICtCp (14), limited range, chroma position.
        #expect(colour(profile: 0, [(0, 1), (0, 1), (1, 1), (1, 8), (1, 8), (14, 8), (0, 1), (0, 2)])
                == .init(matrix: 14, fullRange: false, yuv444: false))
        #expect(colour(profile: 1, [(0, 1), (1, 1), (1, 8), (13, 8), (0, 8)]) == .init(matrix: 0, fullRange: true, yuv444: true),
                "sRGB")
        #expect(colour(profile: 0, [(0, 1), (0, 1), (0, 1), (1, 1), (0, 2)]) == .init(matrix: 2, fullRange: true, yuv444: false),
                "not described: unspecified")
        #expect(colour(profile: 2, [(1, 1), (1, 1), (0, 1), (0, 1), (1, 1), (0, 1)]) == .init(matrix: 2, fullRange: true, yuv444: true),
                "12-bit 4:4:4 in the professional profile")
        #expect(colour(profile: 0, [(0, 1)]) == nil, "cut short")
        #expect(AVIFCodedSize.colourRefusal([], [], coding: [], sequence: .init(matrix: 14, fullRange: true, yuv444: false)) != nil)
        #expect(AVIFCodedSize.colourRefusal([], [], coding: [], sequence: .init(matrix: 0, fullRange: true, yuv444: false)) != nil,
                "identity decoded to 4:2:0")
        #expect(AVIFCodedSize.colourRefusal([], [], coding: [], sequence: .init(matrix: 1, fullRange: false, yuv444: false)) == nil)
        let nclx = box("colr", Array("nclx".utf8) + [0, 1, 0, 1, 0, 1, 0x80])
        #expect(AVIFCodedSize.colourRefusal(nclx, ImageHeader.isoBoxes(nclx, 0, nclx.count), coding: [],
                                            sequence: .init(matrix: 14, fullRange: true, yuv444: false)) == nil,
                "an nclx property says otherwise")
    }

    @Test("an ispe associated in a second ipma box counts (libavif reads one of each version: a tile's 16384x16384 there took 1.6 GB), the largest where several are")
    func everyAssociationCounts() throws {
        let halves = Bytes.read(Fixtures.path("halves.avif"))  // its AV1 data at 282, 126 bytes: 48×32
        func ispe(_ width: UInt32, _ height: UInt32) -> [UInt8] {
            box("ispe", [0, 0, 0, 0] + Bytes.bigEndian(width) + Bytes.bigEndian(height))
        }
        let ipco = box("ipco", ispe(48, 32) + ispe(4_096, 4_096))
        let first = box("ipma", [0, 0, 0, 0] + Bytes.bigEndian(1) + [0, 1, 1, 1])  // item 1: property 1
        let second = box("ipma", [1, 0, 0, 0] + Bytes.bigEndian(1) + [0, 0, 0, 1, 1, 2])  // item 1: property 2
        let iloc = box("iloc", [0, 0, 0, 0, 0x44, 0, 0, 1, 0, 1, 0, 0, 0, 1] + Bytes.bigEndian(282) + Bytes.bigEndian(126))
        let iinf = box("iinf", [0, 0, 0, 0, 0, 1] + box("infe", [2, 0, 0, 0, 0, 1, 0, 0] + Array("av01".utf8) + [0]))
        let meta = box("meta", [0, 0, 0, 0] + box("pitm", [0, 0, 0, 0, 0, 1]) + iloc + iinf
                       + box("iprp", ipco + first + second))
        let read = { (offset: UInt64, count: Int) in Array(halves[Int(offset)..<min(Int(offset) + count, halves.count)]) }
        #expect(try AVIFCodedSize.of(meta: meta, read: read)
                == .success(AVIFCodedSize(width: 4_096, height: 4_096,
                                          decoded: 48 * 32 + 4_096 * 4_096 + AVIFCodedSize.decoderPixels)))
        #expect(try AVIFCodedSize.of(meta: box("meta", [0, 0, 0, 0] + box("pitm", [0, 0, 0, 0, 0, 1]) + iloc + iinf
                                               + box("iprp", ipco + first)), read: read)
                == .success(AVIFCodedSize(width: 48, height: 32, decoded: 48 * 32 + AVIFCodedSize.decoderPixels)),
                "the first alone")
    }

    @Test("more than 64 OBUs before the first frame is no image (16,383 tiles of 64 KiB of tiny sequence headers took 11.6 s of CPU to check); a frame larger than what was read still ends the look")
    func obusBeforeTheFrameAreFew() {
        let delimiter: [UInt8] = [0x12, 0x00]  // a temporal delimiter OBU
        let halves = Bytes.read(Fixtures.path("halves.avif"))
        let av1 = Array(halves[282..<408])  // a delimiter, the sequence header, the frame
        #expect(AVIFCodedSize.largestFrame(av1)! == (48, 32))
        // avifenc's 4:4:4 from a PNG, full range, BT.601 coefficients (its av1C and nclx say the same).
        let colour = AVIFCodedSize.SequenceHeader.Colour(matrix: 6, fullRange: true, yuv444: true)
        #expect(AVIFCodedSize.scanFrames(Array(repeating: delimiter, count: 62).flatMap { $0 } + av1)
                == .found(width: 48, height: 32, colour: colour))
        #expect(AVIFCodedSize.scanFrames(Array(repeating: delimiter, count: 63).flatMap { $0 } + av1) == .malformed)
        #expect(AVIFCodedSize.scanFrames(Array(av1.prefix(20))) == .found(width: 48, height: 32, colour: colour), "the frame cut")
        #expect(AVIFCodedSize.scanFrames(Array(av1.prefix(8))) == .cutShort, "the sequence header cut: read more")
    }

    @Test("an AVIF with a moov box and another major brand than avif is decoded from its track (libavif 0.11), which is not sized: it is kept, and no variant of it is decoded (990 bytes scaled to 16384x16384 took 2.4 GB)")
    func trackDecodedFilesGetNoVariant() throws {
        var avif = Bytes.read(Fixtures.path("halves.avif"))
        avif.replaceSubrange(8..<12, with: Array("mif1".utf8))
        let sequence = scratch.write("track.avif", avif + Bytes.bigEndian(8) + Array("moov".utf8))
        #expect(try ImageIntegrity.avifDecodesATrack(ImageFile(sequence)))
        #expect(try !ImageIntegrity.avifDecodesATrack(ImageFile(Fixtures.path("halves.avif"))))
        #expect(ImageInspector.inspect(sequence, policy: policy) == .image(ImageInfo(format: "avif", width: 48, height: 32)))
        #expect(throws: Failure.notAnImage("no variant is made of an AVIF image sequence: libavif's loader decodes its "
                                           + "track, whose size is not checked")) {
            try Resizer.makeVariant(source: sequence, spec: try VariantSpec(size: "16x16"),
                                    destination: scratch.path + "/track-16.png")
        }
    }
}
