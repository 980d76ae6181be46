import QueueCore
import Testing
@testable import prefetchd

@Suite struct ImageInspectorTests {
    let scratch = Scratch()
    let policy = ImagePolicy()

    @Test func generatedJPEGAndPNGAreImages() throws {
        let jpeg = try scratch.image("a.jpg", width: 64, height: 48)
        let png = try scratch.image("a.png", width: 30, height: 20, type: "png", alpha: true, color: 0x00FF0080)
        #expect(ImageInspector.inspect(jpeg, policy: policy) == .image(ImageInfo(format: "jpeg", width: 64, height: 48)))
        #expect(ImageInspector.inspect(png, policy: policy) == .image(ImageInfo(format: "png", width: 30, height: 20)))
    }

    @Test(arguments: ["gif", "webp", "avif"])
    func committedFixturesAreImages(format: String) {
        let verdict = ImageInspector.inspect(Fixtures.path("halves.\(format)"), policy: policy)
        #expect(verdict == .image(ImageInfo(format: format, width: 48, height: 32)))
    }

    @Test("a JPEG whose frame header lies past the first 256 KB gets its size from a walk of its markers (gdk-pixbuf's probe saved every comment on the way: 70,000 took 5 s, 140,000 took 21 s)")
    func jpegFrameHeaderFarIn() throws {
        let jpeg = Bytes.read(try scratch.image("small.jpg", width: 64, height: 48))
        let comments = (0..<70_000).flatMap { _ in [UInt8](arrayLiteral: 0xFF, 0xFE, 0x00, 0x02) }
        let far = scratch.write("far.jpg", Array(jpeg[0..<2]) + comments + Array(jpeg[2...]))
        #expect(try ImageIntegrity.jpegFrameSize(ImageFile(far))! == (64, 48))
        #expect(ImageInspector.inspect(far, policy: policy) == .image(ImageInfo(format: "jpeg", width: 64, height: 48)))
        // No frame header before the first scan, however far the walk goes.
        let sosOnly = scratch.write("no-frame.jpg", Array(jpeg[0..<2]) + comments + [0xFF, 0xDA, 0x00, 0x02, 0xFF, 0xD9])
        #expect(try ImageIntegrity.jpegFrameSize(ImageFile(sosOnly)) == nil)
        #expect(ImageInspector.inspect(sosOnly, policy: policy).code == .notAnImage)
    }

    /// A progressive grayscale JPEG of `scans` scans, each one end-of-band run of 32,767 blocks (as the fixture
    /// scans.jpg): a decoder goes over the whole picture for each.
    func progressiveJPEG(width: Int, height: Int, scans: Int) -> [UInt8] {
        func segment(_ marker: UInt8, _ data: [UInt8]) -> [UInt8] {
            [0xFF, marker, UInt8((data.count + 2) >> 8), UInt8((data.count + 2) & 0xFF)] + data
        }
        let frame = [8, UInt8(height >> 8), UInt8(height & 0xFF), UInt8(width >> 8), UInt8(width & 0xFF), 1, 1, 0x11, 0]
        var jpeg: [UInt8] = [0xFF, 0xD8] + segment(0xDB, [0] + [UInt8](repeating: 1, count: 64)) + segment(0xC2, frame)
        jpeg += segment(0xC4, [0x10, 1] + [UInt8](repeating: 0, count: 15) + [0xE0])
        let scan = segment(0xDA, [1, 1, 0, 1, 63, 0]) + [0x7F, 0xFF, 0]
        return jpeg + (0..<scans).flatMap { _ in scan } + [0xFF, 0xD9]
    }

    @Test("a large JPEG may have fewer scans than a small one: 250 scans of 7000x7000 took 12 s of a worker per variant; now at most 42 at 50 megapixels, 256 at any size")
    func scansBoundedByPixels() throws {
        let problem = { (width: Int, height: Int, scans: Int) throws -> String? in
            try ImageIntegrity.problem(ImageFile(self.scratch.write("scans.jpg", self.progressiveJPEG(width: width, height: height, scans: scans))),
                                       format: "jpeg")
        }
        #expect(try problem(7000, 7000, 43) == nil)
        #expect(try problem(7000, 7000, 44) == "the JPEG has more than 43 scans (7000x7000): each is decoded over the whole picture, which would take too long")
        #expect(try problem(8000, 6000, 44) == nil)
        #expect(try problem(65535, 65535, 1) == nil)
        #expect(try problem(65535, 65535, 2)?.hasPrefix("the JPEG has more than 1 scans") == true)
        #expect(try problem(64, 64, 256) == nil)
        #expect(try problem(64, 64, 257)?.hasPrefix("the JPEG has more than 256 scans (64x64)") == true)
    }

    @Test func truncatedJPEGIsNotAnImage() throws {
        let whole = Bytes.read(try scratch.image("whole.jpg", width: 400, height: 300,
                                                  bands: [(0, 0, 200, 300, 0x00FF00FF)]))
        // Cut inside the scan data: gdk-pixbuf still reads the header, the structure walk finds no EOI.
        let half = scratch.write("half.jpg", Array(whole[..<(whole.count / 2)]))
        let verdict = ImageInspector.inspect(half, policy: policy)
        #expect(verdict.code == .notAnImage)
        if case .rejected(let failure) = verdict {
            #expect(failure.message.contains("truncated"))
            #expect(!failure.isTransient)
        }
        // Cut inside the header: gdk-pixbuf cannot tell the size.
        let stub = scratch.write("stub.jpg", Array(whole[..<100]))
        #expect(ImageInspector.inspect(stub, policy: policy).code == .notAnImage)
        // Non-images being allowed does not make a broken JPEG acceptable.
        #expect(ImageInspector.inspect(half, policy: ImagePolicy(allowNonImages: true)).code == .notAnImage)
    }

    @Test func hugePNGHeaderIsRefusedWithoutDecoding() {
        let bare = scratch.write("huge.png", Bytes.pngHeader(width: 100_000, height: 100_000))
        let verdict = ImageInspector.inspect(bare, policy: policy)
        #expect(verdict.code == .pixelLimit)
        if case .rejected(let failure) = verdict {
            #expect(failure.message.contains("100000x100000"))
            #expect(!failure.isTransient)
        }
        // With an IDAT gdk-pixbuf's own header probe also sees the size.
        let withData = scratch.write("huge2.png", Bytes.pngHeader(width: 100_000, height: 100_000, idat: true))
        #expect(ImageInspector.gdkFileInfo(withData) == ImageInfo(format: "png", width: 100_000, height: 100_000))
        #expect(ImageInspector.inspect(withData, policy: policy).code == .pixelLimit)
    }

    @Test func hugeAVIFIsRefusedFromItsContainer() throws {
        // gdk-pixbuf's AVIF loader decodes everything before it reports a size; the ispe property says it first.
        var avif = Bytes.read(Fixtures.path("halves.avif"))
        let ispe = try #require(avif.indices.first { Array(avif[$0..<min($0 + 4, avif.count)]) == Array("ispe".utf8) })
        avif.replaceSubrange(ispe + 8..<ispe + 16, with: Bytes.bigEndian(100_000) + Bytes.bigEndian(100_000))
        let path = scratch.write("huge.avif", avif)
        #expect(ImageInspector.inspect(path, policy: policy) == .rejected(
            .pixelLimit(width: 100_000, height: 100_000, limit: ImagePolicy.defaultMaxPixels)))
    }

    @Test("an AVIF whose meta box comes after more pixel data than the header parser reads (mdat first) is sized from its meta box, and its pixel limit holds (it was not_an_image: no size in the first 256 KiB)")
    func avifWithItsMetaLast() throws {
        var avif = Bytes.read(Fixtures.path("halves.avif"))  // ftyp 0..<32, meta 32..<274, mdat 274..<408
        // Its one item's data moves to the new mdat's start: its location (iloc at 98, the offset at 120) follows.
        avif.replaceSubrange(120..<124, with: Bytes.bigEndian(40))
        let padding = [UInt8](repeating: 0, count: ImageHeader.prefixLength)
        let mdat = Bytes.bigEndian(UInt32(134 + padding.count)) + Array(avif[278..<408]) + padding
        let metaLast = Array(avif[..<32]) + mdat + Array(avif[32..<274])
        #expect(ImageInspector.inspect(scratch.write("meta-last.avif", metaLast), policy: policy)
                == .image(ImageInfo(format: "avif", width: 48, height: 32)))
        let ispe = try #require(metaLast.indices.last { Array(metaLast[$0..<min($0 + 4, metaLast.count)]) == Array("ispe".utf8) })
        var huge = metaLast
        huge.replaceSubrange(ispe + 8..<ispe + 16, with: Bytes.bigEndian(100_000) + Bytes.bigEndian(100_000))
        #expect(ImageInspector.inspect(scratch.write("huge-meta-last.avif", huge), policy: policy) == .rejected(
            .pixelLimit(width: 100_000, height: 100_000, limit: ImagePolicy.defaultMaxPixels)))
        let cut = scratch.write("cut-meta-last.avif", Array(metaLast.dropLast(10)))  // its meta box cut: no size, not whole
        #expect(ImageInspector.inspect(cut, policy: policy).code == .notAnImage)
        // Where a cut cannot be told from the end (no Content-Length), one that leaves no size is fetched again, as
        // any cut is (it was not_an_image for good): the meta box cut, last or first.
        let cutFirst = scratch.write("cut-meta-first.avif", Array(Bytes.read(Fixtures.path("halves.avif"))[..<100]))
        for path in [cut, cutFirst] {
            #expect(ImageInspector.inspect(path, policy: policy, endKnown: false).code == .network, "\(path)")
        }
    }

    @Test("sizes whose product passes Int64 (4294967295 x 4294967295 killed the daemon) are over the limit")
    func largestDeclaredSizesAreOverTheLimit() {
        let png = scratch.write("widest.png", Bytes.pngHeader(width: 0xFFFF_FFFF, height: 0xFFFF_FFFF, idat: true))
        #expect(ImageInspector.inspect(png, policy: policy) == .rejected(
            .pixelLimit(width: 0xFFFF_FFFF, height: 0xFFFF_FFFF, limit: ImagePolicy.defaultMaxPixels)))
        #expect(Failure.pixelLimit(width: 0xFFFF_FFFF, height: 0xFFFF_FFFF, limit: 5).message
                == "4294967295x4294967295 is more pixels than can be counted, over the limit of 5")
        // An AVIF whose ispe properties are not tied to an item: the largest of them is compared, by its product.
        func box(_ type: String, _ body: [UInt8]) -> [UInt8] { Bytes.bigEndian(UInt32(8 + body.count)) + Array(type.utf8) + body }
        let ispe = { (side: UInt32) in box("ispe", [0, 0, 0, 0] + Bytes.bigEndian(side) + Bytes.bigEndian(side)) }
        let avif = box("ftyp", Array("avif".utf8) + [0, 0, 0, 0] + Array("mif1avif".utf8))
            + box("meta", [0, 0, 0, 0] + box("iprp", box("ipco", ispe(0xFFFF_FFFF) + ispe(0xFFFF_FFFE))))
        #expect(ImageInspector.inspect(scratch.write("widest.avif", avif), policy: policy) == .rejected(
            .pixelLimit(width: 0xFFFF_FFFF, height: 0xFFFF_FFFF, limit: ImagePolicy.defaultMaxPixels)))
    }

    @Test("PNGs that libpng refuses whole are not images: a damaged IHDR (its CRC), a side over 1,000,000 pixels (both were cached and reported ok, and no variant could be made)")
    func pngsLibpngRefuses() throws {
        var png = Bytes.read(try scratch.image("whole.png", width: 4, height: 4, type: "png"))
        #expect(ImageInspector.inspect(scratch.write("again.png", png), policy: policy).code == nil)
        png[32] ^= 1  // the last byte of the IHDR's CRC: signature 8, length 4, type 4, data 13, CRC 4
        let damaged = ImageInspector.inspect(scratch.write("damaged.png", png), policy: policy)
        #expect(damaged == .rejected(.notAnImage("the PNG's IHDR chunk is damaged (its CRC does not match)")))
        let wide = scratch.write("wide.png", Bytes.pngHeader(width: 1_000_001, height: 1, idat: true))
        #expect(ImageInspector.inspect(wide, policy: policy)
                == .rejected(.notAnImage("the PNG is 1000001x1: libpng reads at most 1000000 pixels a side")))
    }

    @Test("headers gdk-pixbuf's decoders refuse are not images: a PNG's IHDR with a bit depth its colour type does not allow, an unknown compression, filter or interlace method; a 12-bit, lossless or hierarchical JPEG; a WebP cut and its RIFF length made to match (each was cached as a good image, and no variant could be made)")
    func headersTheDecodersRefuse() throws {
        /// The generated 4×4 RGB PNG with IHDR bytes changed at `changes` (offsets in its data) and its CRC made again.
        func png(_ changes: [Int: UInt8]) throws -> String {
            var bytes = Bytes.read(try scratch.image("whole.png", width: 4, height: 4, type: "png"))
            for (offset, value) in changes { bytes[16 + offset] = value }
            bytes.replaceSubrange(29..<33, with: Bytes.bigEndian(Bytes.crc32(Array(bytes[12..<29]))))
            return scratch.write("changed.png", bytes)
        }
        #expect(ImageInspector.inspect(try png([8: 16]), policy: policy).code == nil, "16-bit RGB is fine")
        #expect(ImageInspector.inspect(try png([8: 1, 9: 0]), policy: policy).code == nil, "1-bit grey is fine")
        for (changes, message) in [
            ([8: 7], "the PNG's IHDR declares a bit depth of 7 with colour type 2, which libpng refuses"),
            ([8: 1], "the PNG's IHDR declares a bit depth of 1 with colour type 2, which libpng refuses"),
            ([9: 5], "the PNG's IHDR declares a bit depth of 8 with colour type 5, which libpng refuses"),
            ([10: 1], "the PNG's IHDR declares compression 1, filter 0 and interlace 0: libpng knows 0, 0 and 0 or 1"),
            ([11: 1], "the PNG's IHDR declares compression 0, filter 1 and interlace 0: libpng knows 0, 0 and 0 or 1"),
            ([12: 2], "the PNG's IHDR declares compression 0, filter 0 and interlace 2: libpng knows 0, 0 and 0 or 1"),
        ] as [([Int: UInt8], String)] {
            #expect(ImageInspector.inspect(try png(changes), policy: policy) == .rejected(.notAnImage(message)), "\(changes)")
        }

        let jpeg = Bytes.read(try scratch.image("whole.jpg", width: 8, height: 8))
        let sof = try #require((2..<jpeg.count - 1).first { jpeg[$0] == 0xFF && jpeg[$0 + 1] == 0xC0 })
        var twelveBits = jpeg, lossless = jpeg, arithmetic = jpeg
        twelveBits[sof + 4] = 12
        lossless[sof + 1] = 0xC3
        arithmetic[sof + 1] = 0xC9  // a process libjpeg decodes: refused later by the scans, if at all, not here
        #expect(ImageInspector.inspect(scratch.write("12.jpg", twelveBits), policy: policy)
                == .rejected(.notAnImage("the JPEG has samples of 12 bits: gdk-pixbuf's libjpeg decodes 8-bit samples only")))
        #expect(ImageInspector.inspect(scratch.write("sof3.jpg", lossless), policy: policy) == .rejected(
            .notAnImage("the JPEG is coded in a process libjpeg does not decode (SOF3: lossless or hierarchical)")))
        #expect(try ImageIntegrity.problem(ImageFile(scratch.write("sof9.jpg", arithmetic)), format: "jpeg") == nil)

        var webp = Bytes.read(Fixtures.path("halves.webp"))
        #expect(ImageInspector.inspect(scratch.write("whole.webp", webp), policy: policy).code == nil)
        webp.removeLast(webp.count / 2)
        webp.replaceSubrange(4..<8, with: Bytes.bigEndian(UInt32(webp.count - 8)).reversed())
        let cut = ImageInspector.inspect(scratch.write("cut.webp", webp), policy: policy)
        #expect(cut.code == .notAnImage && "\(cut)".contains("chunk runs past its end (truncated)"), "\(cut)")
    }

    @Test("a still WebP whose VP8X canvas is not its picture's size is not an image (libwebp refuses it: one of 2000x2000 on a 100x100 canvas was kept, and every variant failed); the right canvas, or an animation's, is fine")
    func webpCanvasMatchesItsPicture() throws {
        let vp8 = Array(Bytes.read(Fixtures.path("halves.webp"))[12...])  // a VP8 chunk of 48x32
        func wrapped(width: Int, height: Int, flags: UInt8 = 0) -> [UInt8] {
            let le24 = { (value: Int) in [UInt8(value & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value >> 16)] }
            let vp8x = Array("VP8X".utf8) + [10, 0, 0, 0, flags, 0, 0, 0] + le24(width - 1) + le24(height - 1)
            let body = Array("WEBP".utf8) + vp8x + vp8
            return Array("RIFF".utf8) + Bytes.bigEndian(UInt32(body.count)).reversed() + body
        }
        #expect(ImageInspector.inspect(scratch.write("canvas.webp", wrapped(width: 48, height: 32)), policy: policy)
                == .image(ImageInfo(format: "webp", width: 48, height: 32)))
        let lying = ImageInspector.inspect(scratch.write("small-canvas.webp", wrapped(width: 10, height: 10)), policy: policy)
        #expect(lying.code == .notAnImage && "\(lying)".contains("picture is 48x32, its canvas 10x10"), "\(lying)")
        // An animation's frames may be smaller than its canvas: its flags say so, and its frames are ANMF chunks.
        #expect(try ImageIntegrity.problem(ImageFile(scratch.write("animated.webp", wrapped(width: 100, height: 100, flags: 0x02))),
                                           format: "webp") == nil)
    }

    @Test("an animated WebP whose frame runs past its canvas is not an image (libwebp refuses it: one was kept, and no variant could be made)")
    func webpFramesWithinTheCanvas() throws {
        let vp8 = Array(Bytes.read(Fixtures.path("halves.webp"))[12...])  // a VP8 chunk of 48x32
        let le24 = { (value: Int) in [UInt8(value & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value >> 16)] }
        func animation(frameAt x: Int, _ y: Int) -> String {
            let vp8x = Array("VP8X".utf8) + [10, 0, 0, 0, 0x02, 0, 0, 0] + le24(99) + le24(99)
            let anim = Array("ANIM".utf8) + [6, 0, 0, 0, 0, 0, 0, 0, 0, 0]
            let frame = le24(x / 2) + le24(y / 2) + le24(47) + le24(31) + le24(100) + [0] + vp8
            let anmf = Array("ANMF".utf8) + Bytes.bigEndian(UInt32(frame.count)).reversed() + frame
            let body = Array("WEBP".utf8) + vp8x + anim + anmf
            return scratch.write("frame-\(x)-\(y).webp", Array("RIFF".utf8) + Bytes.bigEndian(UInt32(body.count)).reversed() + body)
        }
        #expect(try ImageIntegrity.problem(ImageFile(animation(frameAt: 52, 68)), format: "webp") == nil)
        let past = try ImageIntegrity.problem(ImageFile(animation(frameAt: 60, 0)), format: "webp")
        #expect(past == "the WebP's frame 1 of 48x32 at 60,0 runs past its 100x100 canvas: libwebp refuses it", "\(String(describing: past))")
        #expect(try ImageIntegrity.problem(ImageFile(animation(frameAt: 0, 70)), format: "webp") != nil)
    }

    @Test("a WebP's chunks are walked within its RIFF: slack of under 8 bytes after the last is fine (it was refused as truncated), chunk headers after the RIFF are no frames (20,000 were counted: every variant failed pixel_limit), and more than 65,536 chunks are refused (counting 6,000,000 empty ones held the loop 0.3 s per variant asked)")
    func webpChunksWithinTheRIFF() throws {
        let still = Bytes.read(Fixtures.path("halves.webp"))
        /// `still` with `bytes` inside its RIFF after its chunks (the RIFF's length made to match), then `after`.
        func webp(inside bytes: [UInt8], after: [UInt8] = []) -> String {
            var file = still + bytes
            file.replaceSubrange(4..<8, with: Bytes.bigEndian(UInt32(file.count - 8)).reversed())
            return scratch.write("made.webp", file + after)
        }
        #expect(ImageInspector.inspect(webp(inside: [0, 0, 0, 0]), policy: policy).code == nil)
        let frameHeader = Array("ANMF".utf8) + [0, 0, 0, 0]
        let trailed = webp(inside: [], after: (0..<20_000).flatMap { _ in frameHeader })
        #expect(ImageInspector.inspect(trailed, policy: policy).code == nil)
        #expect(try ImageIntegrity.webpFrames(ImageFile(trailed)) == 1)
        let junk = Array("JUNK".utf8) + [0, 0, 0, 0]
        #expect(ImageInspector.inspect(webp(inside: (0..<65_000).flatMap { _ in junk }), policy: policy).code == nil)
        let many = webp(inside: (0..<ImageIntegrity.mostWebPChunks).flatMap { _ in junk })
        #expect(ImageInspector.inspect(many, policy: policy) == .rejected(.notAnImage("the WebP has more than 65536 chunks")))
        #expect(try ImageIntegrity.webpFrames(ImageFile(many)) == ImageIntegrity.mostWebPChunks + 1, "counted as the worst")
    }

    @Test("a PNG whose pixel data's CRC (or its end chunk's) does not match was cached as good, and no variant could be made (libpng refuses it); now it is no image. A damaged CRC of an ancillary chunk stays fine: libpng only warns")
    func pngWithDamagedCRCs() throws {
        /// `png` with the last byte of the CRC of its first `type` chunk flipped: the chunk's data is intact.
        func damaged(_ png: [UInt8], _ type: String) throws -> [UInt8] {
            let at = try #require((8..<png.count - 4).first { png[$0..<$0 + 4].elementsEqual(type.utf8) })
            let length = Int(png[at - 4]) << 24 | Int(png[at - 3]) << 16 | Int(png[at - 2]) << 8 | Int(png[at - 1])
            var bytes = png
            bytes[at + 4 + length + 3] ^= 1
            return bytes
        }
        let small = Bytes.read(try scratch.image("pixels.png", width: 40, height: 30, type: "png", bands: [(0, 0, 20, 30, 0x0000FFFF)]))
        let large = Bytes.storedPNG(width: 200, height: 120)  // an IDAT of 72 KB, read in two pieces
        let largePath = scratch.write("large.png", large)
        #expect(try decodeForTest(largePath).width == 200)
        #expect(ImageInspector.inspect(largePath, policy: policy) == .image(ImageInfo(format: "png", width: 200, height: 120)))
        for (name, png, type) in [("small-idat", small, "IDAT"), ("large-idat", large, "IDAT"), ("small-iend", small, "IEND")] {
            let path = scratch.write(name + ".png", try damaged(png, type))
            #expect(throws: (any Error).self, "libpng refuses \(name)") { try decodeForTest(path) }
            #expect(ImageInspector.inspect(path, policy: policy)
                    == .rejected(.notAnImage("the PNG's \(type) chunk is damaged (its CRC does not match)")), "\(name)")
        }

        var text = Bytes.pngChunk("tEXt", Array("Comment\u{0}a damaged comment".utf8))
        text[text.count - 1] ^= 1
        let commented = scratch.write("damaged-comment.png", Array(small[..<33]) + text + Array(small[33...]))
        #expect(try decodeForTest(commented).width == 40, "libpng only warns")
        #expect(ImageInspector.inspect(commented, policy: policy) == .image(ImageInfo(format: "png", width: 40, height: 30)))
    }

    @Test("the CRC-32 eight bytes a step is the CRC bit by bit, at every length and split")
    func crcMatchesTheBitwiseOne() {
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        var generator = SystemRandomNumberGenerator()
        for count in Array(0...40) + [63, 64, 65, 1000, 65_537] {
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(CRC32.checksum(bytes) == Bytes.crc32(bytes), "\(count) bytes")
            let split = count / 3
            let pieces = bytes.withUnsafeBytes { whole in
                CRC32.update(CRC32.update(0, UnsafeRawBufferPointer(rebasing: whole[..<split])),
                             UnsafeRawBufferPointer(rebasing: whole[split...]))
            }
            #expect(pieces == Bytes.crc32(bytes), "\(count) bytes in two pieces")
        }
    }

    @Test func pixelLimitComesFromTheConfiguredMaximum() throws {
        let jpeg = try scratch.image("a.jpg", width: 64, height: 48)
        #expect(ImageInspector.inspect(jpeg, policy: ImagePolicy(maxPixels: 3072)).code == nil)
        #expect(ImageInspector.inspect(jpeg, policy: ImagePolicy(maxPixels: 3071)).code == .pixelLimit)
    }

    @Test func htmlServedAsAnImageIsNotAnImage() {
        let html = scratch.write("page.jpg", text: """
            <!DOCTYPE html>
            <html><head><title>Not found</title></head><body><svg width="10" height="10"></svg></body></html>
            """)
        let verdict = ImageInspector.inspect(html, policy: policy)
        #expect(verdict.code == .notAnImage)
        if case .rejected(let failure) = verdict { #expect(failure.message.contains("HTML")) }
        #expect(ImageInspector.inspect(html, policy: ImagePolicy(allowNonImages: true)) == .nonImage)
    }

    @Test func svgIsRefusedUnlessAllowed() {
        let svg = scratch.write("drawing.svg", text: """
            <?xml version="1.0" encoding="UTF-8"?>
            <!-- a comment -->
            <svg xmlns="http://www.w3.org/2000/svg" width="120" height="80"><rect width="120" height="80"/></svg>
            """)
        let verdict = ImageInspector.inspect(svg, policy: policy)
        #expect(verdict == .rejected(.formatNotAllowed("svg")))
        if case .rejected(let failure) = verdict { #expect(failure.message.contains("svg")) }
        #expect(ImageInspector.inspect(svg, policy: ImagePolicy(allowNonImages: true)).code == .formatNotAllowed)
        let allowing = ImagePolicy(allowedFormats: ImagePolicy.defaultAllowedFormats.union(["svg"]))
        #expect(ImageInspector.inspect(svg, policy: allowing) == .image(ImageInfo(format: "svg", width: 120, height: 80)))
    }

    @Test(arguments: [("bmp", "bmp"), ("tiff", "tiff"), ("ico", "ico")])
    func otherFormatsAreNamedWhenRefused(type: String, name: String) throws {
        let path = try scratch.image("image.\(type)", width: 32, height: 32, type: type, alpha: type == "ico")
        #expect(ImageInspector.inspect(path, policy: policy) == .rejected(.formatNotAllowed(name)))
        let allowing = ImagePolicy(allowedFormats: [name])
        #expect(ImageInspector.inspect(path, policy: allowing) == .image(ImageInfo(format: name, width: 32, height: 32)))
    }

    @Test func emptyBodyIsNotAnImage() {
        let empty = scratch.write("empty", [])
        #expect(ImageInspector.inspect(empty, policy: policy).code == .notAnImage)
        #expect(ImageInspector.inspect(empty, policy: ImagePolicy(allowNonImages: true)) == .nonImage)
    }

    @Test func garbageIsNotAnImage() {
        let garbage = scratch.write("garbage", (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7919 &+ 13) })
        #expect(ImageInspector.inspect(garbage, policy: policy).code == .notAnImage)
        let json = scratch.write("data.json", text: #"{"not": "an image"}"#)
        #expect(ImageInspector.inspect(json, policy: ImagePolicy(allowNonImages: true)) == .nonImage)
    }

    @Test func unreadableFileIsATransientInternalFailure() {
        let verdict = ImageInspector.inspect(scratch.file("missing"), policy: policy)
        guard case .rejected(let failure) = verdict else { Issue.record("expected a rejection"); return }
        #expect(failure.code == .internal)
        #expect(failure.isTransient)
        #expect(failure.message.contains("open"))
    }

    @Test func exifRotatedJPEGReportsItsUprightSize() throws {
        let stored = Bytes.read(try scratch.image("stored.jpg", width: 64, height: 48))
        let rotated = scratch.write("rotated.jpg", Bytes.withOrientation(stored, 6))
        #expect(ImageInspector.inspect(rotated, policy: policy) == .image(ImageInfo(format: "jpeg", width: 48, height: 64)))
    }

    @Test func verdictResultIsWhatTheDaemonStores() throws {
        let info = ImageInfo(format: "png", width: 1, height: 2)
        #expect(try ImageVerdict.image(info).result.get() == info)
        #expect(try ImageVerdict.nonImage.result.get() == nil)
        #expect(throws: Failure.self) { try ImageVerdict.rejected(.notAnImage("x")).result.get() }
    }
}
