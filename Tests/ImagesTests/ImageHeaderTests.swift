import Testing
@testable import prefetchd

@Suite struct ImageHeaderTests {
    func parse(_ bytes: [UInt8]) -> ImageHeader { ImageHeader.parse(bytes[...]) }
    func parse(_ text: String) -> ImageHeader { parse(Array(text.utf8)) }

    @Test("an AVIF's primary size is turned by its first irot property only, as libavif applies it (one of 180° then 90° was reported turned: 200×600 for a 600×200 picture)")
    func firstRotationCounts() {
        func box(_ type: String, _ body: [UInt8]) -> [UInt8] { Bytes.bigEndian(UInt32(8 + body.count)) + Array(type.utf8) + body }
        func meta(rotations: [UInt8]) -> [UInt8] {
            let ispe = box("ispe", [0, 0, 0, 0] + Bytes.bigEndian(UInt32(600)) + Bytes.bigEndian(UInt32(200)))
            let ipco = box("ipco", ispe + rotations.flatMap { box("irot", [$0]) })
            let indexes = (1...(1 + rotations.count)).map { UInt8($0) }
            let ipma = box("ipma", [0, 0, 0, 0] + Bytes.bigEndian(UInt32(1)) + [0, 1, UInt8(indexes.count)] + indexes)
            return box("meta", [0, 0, 0, 0] + box("pitm", [0, 0, 0, 0, 0, 1]) + box("iprp", ipco + ipma))
        }
        #expect(ImageHeader.isoPrimarySize(meta(rotations: [])).map { [$0.width, $0.height] } == [600, 200])
        #expect(ImageHeader.isoPrimarySize(meta(rotations: [1]))?.turned == true)
        #expect(ImageHeader.isoPrimarySize(meta(rotations: [2, 1]))?.turned == false)
        #expect(ImageHeader.isoPrimarySize(meta(rotations: [3, 2]))?.turned == true)
    }

    @Test func readsExifOrientationInBothByteOrders() {
        for little in [false, true] {
            let segment = Bytes.exifSegment(orientation: 8, littleEndian: little)
            #expect(ImageHeader.exifOrientation(segment[4...]) == 8)
        }
        let jpeg: [UInt8] = [0xFF, 0xD8] + Bytes.exifSegment(orientation: 6)
            + [0xFF, 0xC0, 0x00, 0x11, 0x08, 0x00, 0x30, 0x00, 0x40] + [UInt8](repeating: 0, count: 10)
        let header = parse(jpeg)
        #expect(header.kind == .image("jpeg"))
        #expect(header.orientation == 6 && header.swapsAxes)
        #expect(header.width == 64 && header.height == 48)
        // libjpeg reads every marker up to the first scan: an EXIF segment after the SOF turns the picture too (it
        // was missed, and the upright size reported was the stored one).
        let late: [UInt8] = [0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x00, 0x30, 0x00, 0x40] + [UInt8](repeating: 0, count: 10)
            + Bytes.exifSegment(orientation: 6) + [0xFF, 0xDA, 0x00, 0x02]
        let after = parse(late)
        #expect(after.orientation == 6 && after.width == 64 && after.height == 48)
    }

    @Test("the coefficients libjpeg keeps for the whole picture of a JPEG of several scans, whatever the scale: progressive, or sequential with components in scans of their own (a 7000x7000 baseline JPEG of four scans, counted as one, held 413 MB for a 64x64 variant): the variants' memory budget counts them")
    func wholeImageCoefficients() {
        /// SOI, an APP0 segment, a frame header of `marker` (200×100, `components` components), then the first scan
        /// header, of `scan` components (none: cut before it).
        func jpeg(_ marker: UInt8, components: UInt8 = 3, scan: UInt8? = 3) -> [UInt8] {
            [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x4A, 0x46, 0xFF, marker, 0x00, 0x11, 0x08, 0x00, 0x64, 0x00, 0xC8, components]
                + [UInt8](repeating: 0x11, count: 9)
                + (scan.map { [0xFF, 0xDA, 0x00, 6 + 2 * $0, $0] + [UInt8](repeating: 0, count: 2 * Int($0) + 3) } ?? [])
        }
        #expect(ImageHeader.wholeImageCoefficientBytes(jpeg(0xC2)) == Int64(200 * 100 * 3 * 2))
        #expect(ImageHeader.wholeImageCoefficientBytes(jpeg(0xCA, components: 1, scan: 1)) == Int64(200 * 100 * 2), "arithmetic")
        #expect(ImageHeader.wholeImageCoefficientBytes(jpeg(0xC0)) == 0, "baseline, one interleaved scan")
        #expect(ImageHeader.wholeImageCoefficientBytes(jpeg(0xC1)) == 0, "extended sequential")
        #expect(ImageHeader.wholeImageCoefficientBytes(jpeg(0xC0, scan: 1)) == Int64(200 * 100 * 3 * 2), "a scan per component")
        #expect(ImageHeader.wholeImageCoefficientBytes(jpeg(0xC0, scan: nil)) == Int64(200 * 100 * 3 * 2), "its scan not read")
        #expect(ImageHeader.wholeImageCoefficientBytes(Array(jpeg(0xC2).prefix(12))) == nil, "the header cut")
        #expect(ImageHeader.wholeImageCoefficientBytes([0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x08]) == nil, "a scan first")
        #expect(parse(jpeg(0xC2)).width == 200 && parse(jpeg(0xC2)).height == 100)
    }

    @Test func tellsMarkupApart() {
        #expect(parse("<svg xmlns='http://www.w3.org/2000/svg'/>").kind == .image("svg"))
        #expect(parse("\u{FEFF}  <!DOCTYPE svg PUBLIC '-//W3C//DTD SVG 1.1//EN' 'x'><svg/>").kind == .image("svg"))
        #expect(parse("<?xml version='1.0'?><svg:svg xmlns:svg='http://www.w3.org/2000/svg'/>").kind == .image("svg"))
        #expect(parse("<?xml version='1.0'?>\n<html xmlns='http://www.w3.org/1999/xhtml'><svg/></html>").kind
            == .markup("html"))
        #expect(parse("<!doctype html><svg></svg>").kind == .markup("html"))
        #expect(parse("<rss version='2.0'></rss>").kind == .markup("xml"))
        #expect(parse("BMW makes cars, and this is a text file about them").kind == .unknown)
        #expect(parse([]).kind == .empty)
    }

    @Test func readsDeclaredSizes() {
        let png = parse(Bytes.pngHeader(width: 100_000, height: 3))
        #expect(png.kind == .image("png") && png.width == 100_000 && png.height == 3)
        let gif = parse(Array("GIF89a".utf8) + [0x30, 0x00, 0x20, 0x00, 0, 0, 0])
        #expect(gif.kind == .image("gif") && gif.width == 48 && gif.height == 32)
        // WebP's extended header stores each side less one in 24 bits: 512 (0x1FF) was read as 256 (1 + 0xFF | 0x100).
        for (width, height) in [(512, 768), (7168, 7168), (1, 1 << 24)] {
            let side = { (n: Int) in [UInt8(truncatingIfNeeded: n - 1), UInt8(truncatingIfNeeded: (n - 1) >> 8), UInt8(truncatingIfNeeded: (n - 1) >> 16)] }
            let chunk = Array("VP8X".utf8) + [10, 0, 0, 0, 0x10, 0, 0, 0] + side(width) + side(height)
            let webp = parse(Array("RIFF".utf8) + [UInt8(4 + chunk.count), 0, 0, 0] + Array("WEBP".utf8) + chunk)
            #expect(webp.kind == .image("webp") && webp.width == width && webp.height == height, "\(width)x\(height)")
        }
    }

    @Test(arguments: ["gif", "webp", "avif"])
    func recognisesTheFixtures(format: String) {
        let header = ImageHeader.parse(Bytes.read(Fixtures.path("halves.\(format)"))[...])
        #expect(header.kind == .image(format))
        #expect(header.width == 48 && header.height == 32)
    }
}

@Suite struct ImageParsingRobustnessTests {
    let scratch = Scratch()

    /// Every prefix and a few thousand byte mutations of real headers parse without trapping, and the structure
    /// walk, the inspector and the resizer survive a sample of them.
    @Test func survivesEveryPrefixAndMutation() throws {
        var samples = ["gif", "webp", "avif"].map { Bytes.read(Fixtures.path("halves.\($0)")) }
        samples.append(Bytes.withOrientation(Bytes.read(try scratch.image("a.jpg", width: 16, height: 16)), 6))
        samples.append(Bytes.read(try scratch.image("a.png", width: 16, height: 16, type: "png")))
        samples.append(Bytes.read(try scratch.image("a.bmp", width: 4, height: 4, type: "bmp")))
        var random = SplitMix(seed: 5)
        for (index, sample) in samples.enumerated() {
            for length in 0...min(sample.count, 700) { _ = ImageHeader.parse(sample[..<length]) }
            for round in 0..<400 {
                var mutated = sample
                for _ in 0...(random.next() % 4) {
                    let at = Int(random.next() % UInt64(min(mutated.count, 400)))
                    mutated[at] = UInt8(truncatingIfNeeded: random.next())
                }
                let header = ImageHeader.parse(mutated[...])
                if round % 40 == 0 {
                    let path = scratch.write("m\(index)", mutated)
                    _ = try ImageIntegrity.problem(ImageFile(path), format: header.format ?? "jpeg")
                    _ = ImageInspector.inspect(path, policy: ImagePolicy())
                    // Any outcome will do, as long as it is a result or a Failure and not a crash.
                    _ = try? Resizer.makeVariant(source: path, spec: try VariantSpec(size: "8x8"),
                                                 destination: scratch.file("variant"))
                }
            }
        }
    }
}

/// A small deterministic generator, so a failing mutation can be found again.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite struct ImageIntegrityTests {
    let scratch = Scratch()

    @Test(arguments: ["gif", "webp", "avif"])
    func fixturesAreWholeAndTheirHalvesAreNot(format: String) throws {
        let bytes = Bytes.read(Fixtures.path("halves.\(format)"))
        #expect(try ImageIntegrity.problem(ImageFile(Fixtures.path("halves.\(format)")), format: format) == nil)
        let half = scratch.write("half.\(format)", Array(bytes[..<(bytes.count / 2)]))
        #expect(try ImageIntegrity.problem(ImageFile(half), format: format)?.contains("truncated") == true)
    }

    @Test func jpegWithDataAfterItsEndIsWhole() throws {
        let jpeg = Bytes.read(try scratch.image("a.jpg", width: 64, height: 48))
        let appended = scratch.write("motion.jpg", jpeg + Array("....ftypmp42 a video follows".utf8))
        #expect(try ImageIntegrity.problem(ImageFile(appended), format: "jpeg") == nil)
        let cut = scratch.write("cut.jpg", Array(jpeg.dropLast(2)))
        #expect(try ImageIntegrity.problem(ImageFile(cut), format: "jpeg") != nil)
    }

    @Test("an AVIF is whole when the data its items point to (iloc) is in the file, as libavif decodes it: bytes after that data were refused as truncated or for a box size, a cut right after the meta box, in an mdat of size 0 or in an mdat whose size lies were whole")
    func avifWholeByItsItemLocations() throws {
        let avif = Bytes.read(Fixtures.path("halves.avif"))  // ftyp 0..<32, meta 32..<274, mdat 274..<408 (data 282..<408)
        func problem(_ bytes: [UInt8]) throws -> String? {
            try ImageIntegrity.problem(ImageFile(scratch.write("test.avif", bytes)), format: "avif")
        }
        let noise = (0..<100).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        for (name, tail) in [("3 bytes", Array("abc".utf8)), ("noise", noise),
                             ("a box past the end", Bytes.bigEndian(0xFFFF_FFF0) + Array("mdat".utf8)),
                             ("a box of 64-bit size 0", Bytes.bigEndian(1) + Array("free".utf8) + [UInt8](repeating: 0, count: 8))] {
            #expect(try problem(avif + tail) == nil, "\(name)")
        }
        for length in 1..<avif.count {  // at 274 the meta box is whole and the data missing: that was whole
            #expect(try problem(Array(avif[..<length]))?.contains("(truncated)") == true, "\(length)")
        }
        // The mdat's size 0 (to the end of the file), cut inside: its data is not all there.
        let toTheEnd = Array(avif[..<274]) + Bytes.bigEndian(0) + Array(avif[278...])
        #expect(try problem(toTheEnd) == nil)
        #expect(try problem(Array(toTheEnd[..<350]))?.contains("(truncated)") == true)
        // An mdat whose size says it ends where the file does, which ends before the data.
        let shortMdat = Array(avif[..<274]) + Bytes.bigEndian(8 + 50) + Array(avif[278..<332])
        #expect(try problem(shortMdat) == "the AVIF's image data lies past its end (truncated)")
        // The last box's size as 64-bit 0: libavif decodes it, the data being in the file.
        #expect(try problem(Array(avif[..<274]) + Bytes.bigEndian(1) + Array("mdat".utf8) + [UInt8](repeating: 0, count: 8)
                            + Array(avif[282...])) == nil)
        // A meta box of size 0 (to the end of the file) libavif refuses.
        #expect(try problem(Array(avif[..<32]) + Array(avif[274...]) + Bytes.bigEndian(0) + Array(avif[36..<274]))
                == "the AVIF has a meta box without a size")
        // Data in the meta box itself (an idat, construction method 1): whole without an mdat, if the idat holds it.
        func box(_ type: String, _ body: [UInt8]) -> [UInt8] { Bytes.bigEndian(UInt32(8 + body.count)) + Array(type.utf8) + body }
        func inIdat(_ data: [UInt8]) -> [UInt8] {
            let iloc = box("iloc", [1, 0, 0, 0, 0x44, 0x00, 0, 1, 0, 1, 0, 1, 0, 0, 0, 1] + Bytes.bigEndian(0) + Bytes.bigEndian(3))
            return Array(avif[..<32]) + box("meta", [0, 0, 0, 0] + box("hdlr", [1, 2]) + iloc + box("idat", data))
        }
        #expect(try problem(inIdat([3, 4, 5])) == nil)
        #expect(try problem(inIdat([3, 4])) == "the AVIF points to data past its idat box")
        // A meta box of 2^63 - 1 bytes is cut (an overflow trap before its bound check); one whose box runs past it
        // is malformed; one without item locations cannot be decoded.
        #expect(try problem(Array(avif[..<32]) + Bytes.bigEndian(1) + Array("meta".utf8) + Bytes.bigEndian(0x7FFF_FFFF)
                            + Bytes.bigEndian(0xFFFF_FFFF) + Array(avif[40...]))?.contains("(truncated)") == true)
        #expect(try problem(Array(avif[..<32]) + box("meta", [0, 0, 0, 0] + Bytes.bigEndian(100) + Array("hdlr".utf8))
                            + avif[274...]) == "the AVIF's meta box holds a box larger than itself")
        #expect(try problem(Array(avif[..<32]) + box("meta", [0, 0, 0, 0] + box("hdlr", [1, 2])) + avif[274...])
                == "the AVIF's meta box has no item locations (iloc)")
        #expect(try problem(Array(avif[..<32]) + box("meta", [0, 0, 0, 0] + box("hdlr", [1, 2]) + Bytes.bigEndian(0)
                                                        + Array("free".utf8)) + avif[274...])
                == "the AVIF's meta box holds a box larger than itself", "a child of size 0, which libavif refuses")
        // Offsets past 2^64: no file holds them (not a cut, which would be fetched again).
        let past = [1, 0, 0, 0, 0x44, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 1]
            + Bytes.bigEndian(0xFFFF_FFFF) + Bytes.bigEndian(1)
        #expect(try problem(Array(avif[..<32]) + box("meta", [0, 0, 0, 0] + box("iloc", past)) + avif[274...])
                == "the AVIF points to data past the end of any file")
        // A data reference other than this file's: libavif reads the data from this file all the same.
        var referenced = avif
        referenced[117] = 1  // the item's data_reference_index (iloc body at 106: version and flags, sizes, count, ID)
        #expect(try problem(referenced) == nil)
        #expect(try problem(Array(referenced[..<348]))?.contains("(truncated)") == true)
        // An image sequence (brand avis): libavif reads its moov box too.
        var sequence = avif
        sequence.replaceSubrange(16..<20, with: Array("avis".utf8))  // the first compatible brand
        let movie = box("moov", box("free", [UInt8](repeating: 7, count: 100)))
        #expect(try problem(sequence + movie) == nil)
        #expect(try problem(Array((sequence + movie).dropLast(10))) == "the AVIF ends inside a box (truncated)")
        #expect(try problem(sequence) == "the AVIF's image sequence has no moov box (truncated)")
        #expect(try problem(sequence + Bytes.bigEndian(0) + movie[4...]) == "the AVIF has a moov box without a size",
                "libavif refuses it, and a cut in it could not be seen")
        // A meta box of 5 MiB (a large colour profile) is walked, not read: whole.
        let profile = box("free", [UInt8](repeating: 0, count: 5 << 20))
        #expect(try problem(Array(avif[..<32]) + box("meta", Array(avif[40..<274]) + profile) + avif[274...]) == nil)
    }

    @Test func pngMustReachIEND() throws {
        let png = Bytes.read(try scratch.image("a.png", width: 64, height: 48, type: "png"))
        #expect(try ImageIntegrity.problem(ImageFile(scratch.write("whole.png", png)), format: "png") == nil)
        #expect(try ImageIntegrity.problem(ImageFile(scratch.write("cut.png", Array(png.dropLast(12)))), format: "png") != nil)
    }
}
