import CGdkPixbuf
import Dispatch
import Glibc
import QueueCore
import Synchronization
import Testing
@testable import prefetchd

@Suite struct ResizerTests {
    let scratch = Scratch()

    /// A 4000×3000 JPEG: red, with 500-pixel green bands down the left and right edges.
    func photo() throws -> String {
        try scratch.image("photo.jpg", width: 4000, height: 3000,
                          bands: [(0, 0, 500, 3000, 0x00FF00FF), (3500, 0, 500, 3000, 0x00FF00FF)])
    }

    @Test func containOfA4000x3000JPEGIs256x192() throws {
        let output = scratch.file("contain.jpg")
        let info = try Resizer.makeVariant(source: try photo(), spec: try VariantSpec(size: "256x256"), destination: output)
        #expect(info == ImageInfo(format: "jpeg", width: 256, height: 192))
        #expect(ImageInspector.inspect(output, policy: ImagePolicy()) == .image(info))
        let pixels = try decodeForTest(output)
        #expect(looks(pixels.pixel(x: 2, y: 96), like: green))
        #expect(looks(pixels.pixel(x: 128, y: 96), like: red))
    }

    @Test func coverOfA4000x3000JPEGIs256x256CroppedFromTheCentre() throws {
        let output = scratch.file("cover.jpg")
        let info = try Resizer.makeVariant(source: try photo(), spec: try VariantSpec(size: "256x256", fit: "cover"),
                                           destination: output)
        #expect(info == ImageInfo(format: "jpeg", width: 256, height: 256))
        let pixels = try decodeForTest(output)
        #expect((pixels.width, pixels.height) == (256, 256))
        // The centre 3000×3000 is all red: the green bands were cropped away.
        #expect(looks(pixels.pixel(x: 1, y: 128), like: red))
        #expect(looks(pixels.pixel(x: 254, y: 128), like: red))
        #expect(looks(pixels.pixel(x: 128, y: 1), like: red))
    }

    @Test func fillStretchesToTheBox() throws {
        let output = scratch.file("fill.png")
        let info = try Resizer.makeVariant(source: try photo(),
                                           spec: try VariantSpec(size: "100x200", fit: "fill", format: "png"),
                                           destination: output)
        #expect(info == ImageInfo(format: "png", width: 100, height: 200))
        let pixels = try decodeForTest(output)
        #expect(looks(pixels.pixel(x: 2, y: 100), like: green))
        #expect(looks(pixels.pixel(x: 50, y: 100), like: red))
    }

    @Test func exifRotatedPhotoComesOutUpright() throws {
        // Stored 64×48, left half red and right half blue; orientation 6 shows it turned 90° clockwise, so the
        // viewer sees 48×64 with red on top.
        let stored = Bytes.read(try scratch.image("stored.jpg", width: 64, height: 48, bands: [(32, 0, 32, 48, 0x0000FFFF)]))
        let rotated = scratch.write("rotated.jpg", Bytes.withOrientation(stored, 6))
        let whole = scratch.file("upright.jpg")
        let info = try Resizer.makeVariant(source: rotated, spec: try VariantSpec(size: "1000x1000"), destination: whole)
        #expect(info == ImageInfo(format: "jpeg", width: 48, height: 64))
        let pixels = try decodeForTest(whole)
        #expect((pixels.width, pixels.height) == (48, 64))
        #expect(pixels.orientation == 1)
        #expect(looks(pixels.pixel(x: 24, y: 4), like: red))
        #expect(looks(pixels.pixel(x: 24, y: 60), like: blue))
        // The box applies to the upright picture: 24×32 fits 32×32, 32×43 would not.
        let small = scratch.file("small.jpg")
        #expect(try Resizer.makeVariant(source: rotated, spec: try VariantSpec(size: "32x32"), destination: small)
            == ImageInfo(format: "jpeg", width: 24, height: 32))
    }

    @Test func smallImageIsNotUpscaledWithoutUpscale() throws {
        let source = try scratch.image("small.png", width: 100, height: 100, type: "png")
        let kept = try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "256x256"),
                                           destination: scratch.file("kept.png"))
        #expect(kept == ImageInfo(format: "png", width: 100, height: 100))
        let grown = try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "256x256", upscale: true),
                                            destination: scratch.file("grown.png"))
        #expect(grown == ImageInfo(format: "png", width: 256, height: 256))
        #expect(ImageInspector.inspect(scratch.file("grown.png"), policy: ImagePolicy())
            == .image(ImageInfo(format: "png", width: 256, height: 256)))
    }

    @Test(arguments: ["gif", "webp", "avif"])
    func fixturesOfEveryAllowedFormatResize(format: String) throws {
        let output = scratch.file("out-\(format)")
        let info = try Resizer.makeVariant(source: Fixtures.path("halves.\(format)"),
                                           spec: try VariantSpec(size: "24x24"), destination: output)
        #expect(info == ImageInfo(format: "png", width: 24, height: 16))
        let pixels = try decodeForTest(output)
        #expect(looks(pixels.pixel(x: 2, y: 8), like: red))
        #expect(looks(pixels.pixel(x: 21, y: 8), like: blue))
    }

    @Test("a GIF's variant is made of its first frame: the frames after it are not decoded")
    func gifVariantDecodesTheFirstFrameOnly() throws {
        // halves.gif (48×32, red and blue halves) and a second frame whose LZW code size is 13 (at most 12 exist):
        // whole as a container, but gdk-pixbuf's loader fails on it ("incorrect LZW compression") when it reads it.
        let still = Bytes.read(Fixtures.path("halves.gif"))
        let imageStart = try #require(still.firstIndex(of: 0x2C))
        try #require(still[imageStart + 5] == 48 && still[imageStart + 7] == 32, "the image descriptor")
        let broken = Array(still[imageStart..<(imageStart + 10)]) + [13] + still[(imageStart + 11)..<(still.count - 1)]
        let animation = scratch.write("broken-second-frame.gif", Array(still.dropLast()) + broken + [0x3B])
        #expect(ImageInspector.inspect(animation, policy: ImagePolicy()) == .image(ImageInfo(format: "gif", width: 48, height: 32)))
        let info = try Resizer.makeVariant(source: animation, spec: try VariantSpec(size: "24x24"),
                                           destination: scratch.file("first-frame"))
        #expect(info == ImageInfo(format: "png", width: 24, height: 16))
        let pixels = try decodeForTest(scratch.file("first-frame"))
        #expect(looks(pixels.pixel(x: 2, y: 8), like: red))
        #expect(looks(pixels.pixel(x: 21, y: 8), like: blue))
    }

    @Test("a GIF's variant keeps the first frame's transparency and leaves out a short graphic control extension")
    func gifVariantKeepsTheLastWholeControlExtension() throws {
        // halves.gif: header and a two-colour table (red 0, blue 1), its own control extension, an application
        // extension, the image. Rebuilt as: a control extension without transparency, one making red transparent (the
        // last whole one, which applies), one with a block of length 0 (browsers show such a GIF; gdk-pixbuf failed on
        // it: "GIF image was truncated"), a comment, the image.
        let still = Bytes.read(Fixtures.path("halves.gif"))
        let imageStart = try #require(still.firstIndex(of: 0x2C))
        try #require(Array(still[10..<19]) == [0xF0, 0, 0, 0xFF, 0, 0, 0, 0, 0xFF], "the screen and colour table")
        let opaque: [UInt8] = [0x21, 0xF9, 0x04, 0x00, 0, 0, 0x00, 0x00]
        let transparentRed: [UInt8] = [0x21, 0xF9, 0x04, 0x01, 0, 0, 0x00, 0x00]
        let shortControl: [UInt8] = [0x21, 0xF9, 0x00]
        let comment: [UInt8] = [0x21, 0xFE, 0x03] + Array("abc".utf8) + [0x00]
        let gif = scratch.write("short-control.gif", Array(still[..<19]) + opaque + transparentRed + shortControl + comment
            + Array(still[imageStart...]))
        #expect(ImageInspector.inspect(gif, policy: ImagePolicy()) == .image(ImageInfo(format: "gif", width: 48, height: 32)))
        let info = try Resizer.makeVariant(source: gif, spec: try VariantSpec(size: "24x24"), destination: scratch.file("v"))
        #expect(info == ImageInfo(format: "png", width: 24, height: 16))
        let pixels = try decodeForTest(scratch.file("v"))
        #expect(pixels.pixel(x: 2, y: 8)[3] == 0, "the red half is transparent")
        #expect(looks(pixels.pixel(x: 21, y: 8), like: blue) && pixels.pixel(x: 21, y: 8)[3] == 255)
    }

    @Test func svgRendersAtTheVariantSizeWhenAllowed() throws {
        let svg = scratch.write("drawing.svg", text: """
            <svg xmlns="http://www.w3.org/2000/svg" width="120" height="80"><rect width="120" height="80" fill="#00f"/></svg>
            """)
        let info = try Resizer.makeVariant(source: svg, spec: try VariantSpec(size: "60x60"), destination: scratch.file("v"))
        #expect(info == ImageInfo(format: "png", width: 60, height: 40))
        #expect(looks(try decodeForTest(scratch.file("v")).pixel(x: 30, y: 20), like: blue))
    }

    @Test func formatOnlyGdkPixbufRecognisesIsResizedWhenAllowed() throws {
        let tga = scratch.write("image.tga", Bytes.tga(width: 40, height: 20, rgb: (0, 255, 0)))
        #expect(ImageInspector.inspect(tga, policy: ImagePolicy()).code == .notAnImage)
        #expect(ImageInspector.inspect(tga, policy: ImagePolicy(allowedFormats: ["tga"]))
            == .image(ImageInfo(format: "tga", width: 40, height: 20)))
        let info = try Resizer.makeVariant(source: tga, spec: try VariantSpec(size: "20x20"), destination: scratch.file("v"))
        #expect(info == ImageInfo(format: "png", width: 20, height: 10))
        #expect(looks(try decodeForTest(scratch.file("v")).pixel(x: 10, y: 5), like: green))
    }

    @Test("a variant is decoded by the loader of the format the header named: `<!DOCTYPE svg` in a PNG's first row or a JPEG's Exif text made gdk-pixbuf pick its SVG loader by the bytes (librsvg ran while SVG was refused, and every variant failed with an XML parse error)")
    func variantDecodedByTheCheckedFormatsLoader() throws {
        let doctype = Array("<!DOCTYPE svg>".utf8)
        // A 16×4 grey PNG whose first row spells it (zlib's stored blocks keep the bytes as they are).
        var raw: [UInt8] = []
        for y in 0..<4 {
            raw.append(0)
            raw += (0..<48).map { y == 0 && $0 < doctype.count ? doctype[$0] : 0x80 }
        }
        let ihdr = Bytes.bigEndian(16) + Bytes.bigEndian(4) + [8, 2, 0, 0, 0]
        let png = scratch.write("doctype.png", [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Bytes.pngChunk("IHDR", ihdr)
            + Bytes.pngChunk("IDAT", Resizer.storedZlib(raw)) + Bytes.pngChunk("IEND", []))
        // A 64×48 JPEG with an Exif segment of no entries, followed by it.
        let stored = Bytes.read(try scratch.image("stored.jpg", width: 64, height: 48))
        let tiff: [UInt8] = [0x4D, 0x4D, 0x00, 0x2A, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0] + doctype
        let app1: [UInt8] = [0xFF, 0xE1, 0, UInt8(tiff.count + 8)] + Array("Exif".utf8) + [0, 0] + tiff
        let jpeg = scratch.write("doctype.jpg", Array(stored[0..<2]) + app1 + Array(stored[2...]))
        for (source, variant) in [(png, ImageInfo(format: "png", width: 8, height: 2)),
                                  (jpeg, ImageInfo(format: "jpeg", width: 8, height: 6))] {
            #expect(ImageInspector.gdkFileInfo(source) == nil, "gdk-pixbuf's own guess (its SVG loader) cannot read \(source)")
            #expect(try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "8x8"), destination: scratch.file("v"))
                    == variant)
        }
    }

    @Test func transparentPNGBecomesJPEGOverWhite() throws {
        let source = try scratch.image("clear.png", width: 40, height: 40, type: "png", alpha: true, color: 0x00000000)
        let output = scratch.file("clear.jpg")
        let info = try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "20x20", format: "jpeg"),
                                           destination: output)
        #expect(info == ImageInfo(format: "jpeg", width: 20, height: 20))
        #expect(looks(try decodeForTest(output).pixel(x: 10, y: 10), like: white, tolerance: 8))
    }

    @Test func truncatedOrBrokenOriginalsThrowNotAnImageAndLeaveNoFile() throws {
        let whole = Bytes.read(try scratch.image("whole.jpg", width: 400, height: 300))
        // A real PNG with one byte of its pixel data changed: the chunk's CRC no longer matches.
        var flippedPNG = Bytes.read(try scratch.image("real.png", width: 64, height: 64, type: "png"))
        flippedPNG[flippedPNG.count - 20] ^= 0x55
        let sources = [
            scratch.write("half.jpg", Array(whole[..<(whole.count / 2)])),
            scratch.write("stub.jpg", Array(whole[..<100])),
            scratch.write("page.html", text: "<!doctype html><title>x</title>"),
            scratch.write("empty", []),
            // Whole chunks with correct CRCs, but garbage where the compressed pixels should be: libpng only warns.
            scratch.write("bad.png", Bytes.pngHeader(width: 10, height: 10) + Bytes.pngChunk("IDAT", [1, 2, 3, 4])
                + Bytes.pngChunk("IEND", [])),
            scratch.write("flipped.png", flippedPNG),
        ]
        let before = scratch.names()
        for source in sources {
            #expect(throws: Failure.self) {
                do {
                    _ = try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "64x64"),
                                                destination: scratch.file("variant"))
                } catch let failure as Failure {
                    #expect(failure.code == .notAnImage, "\(source): \(failure)")
                    #expect(!failure.isTransient)
                    throw failure
                }
            }
        }
        #expect(scratch.names() == before)
    }

    @Test("a variant that does not fit on a full disk fails disk_full, leaving nothing (the encoders report a failed write in their own words: it was internal)",
          arguments: ["jpeg", "png"])
    func fullDiskIsDiskFull(format: String) throws {
        try #require(getuid() == 0, "mounting a tmpfs needs root")
        let disk = scratch.file("disk")
        try #require(mkdir(disk, 0o700) == 0 && mount("tmpfs", disk, "tmpfs", 0, "size=1m,mode=0700") == 0)
        defer {
            umount2(disk, Int32(MNT_DETACH))
            rmdir(disk)
        }
        let ballast = open(disk + "/ballast", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        let chunk = [UInt8](repeating: 1, count: 4096)
        while write(ballast, chunk, chunk.count) > 0 {}
        close(ballast)
        let source = try photo()
        #expect(throws: Failure.self) {
            do {
                _ = try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "1000x1000", format: format),
                                            destination: disk + "/variant")
            } catch let failure as Failure {
                #expect(failure.code == .diskFull && failure.isTransient, "\(failure)")
                throw failure
            }
        }
        #expect(scratch.names(in: "disk") == ["ballast"])
    }

    @Test func pixelLimitIsCheckedBeforeDecoding() throws {
        let huge = scratch.write("huge.png", Bytes.pngHeader(width: 100_000, height: 100_000, idat: true))
        #expect(throws: Failure.pixelLimit(width: 100_000, height: 100_000, limit: ImagePolicy.defaultMaxPixels)) {
            try Resizer.makeVariant(source: huge, spec: try VariantSpec(size: "64x64"), destination: scratch.file("v"))
        }
        let source = try scratch.image("a.jpg", width: 64, height: 48)
        #expect(throws: Failure.pixelLimit(width: 64, height: 48, limit: 1000)) {
            try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "8x8"), destination: scratch.file("v"),
                                    maxPixels: 1000)
        }
    }

    @Test("a JPEG's variant is decoded without its comments and later metadata: its first Exif segment turns it, as the header said (with two, gdk-pixbuf took the last; 140,000 comments took a worker 21 s)")
    func jpegVariantLeavesMetadataOut() throws {
        // Stored 64×48, left half red and right half blue; the first Exif segment says 6 (turned: 48×64, red on
        // top), a second one 1; then comments and an XMP segment.
        let stored = Bytes.read(try scratch.image("stored.jpg", width: 64, height: 48, bands: [(32, 0, 32, 48, 0x0000FFFF)]))
        let comments = (0..<1000).flatMap { _ in [UInt8](arrayLiteral: 0xFF, 0xFE, 0x00, 0x03, 0x2A) }
        let xmp = [0xFF, 0xE1, 0x00, 0x0A] + Array("http:/".utf8) + [0x2F, 0x2F]
        let jpeg = scratch.write("two-exif.jpg", Array(stored[0..<2]) + Bytes.exifSegment(orientation: 6)
            + Bytes.exifSegment(orientation: 1) + comments + xmp + Array(stored[2...]))
        #expect(ImageInspector.inspect(jpeg, policy: ImagePolicy()) == .image(ImageInfo(format: "jpeg", width: 48, height: 64)))
        let pieces = try #require(try ImageIntegrity.variantPieces(ImageFile(jpeg), format: "jpeg"))
        let fed = fedBytes(jpeg, pieces)
        #expect(fed == Array(stored[0..<2]) + Bytes.exifSegment(orientation: 6) + Array(stored[2...]),
                "what the loader is fed: \(fed.count) bytes of \(Bytes.read(jpeg).count)")
        let info = try Resizer.makeVariant(source: jpeg, spec: try VariantSpec(size: "1000x1000"), destination: scratch.file("v"))
        #expect(info == ImageInfo(format: "jpeg", width: 48, height: 64))
        let pixels = try decodeForTest(scratch.file("v"))
        #expect(looks(pixels.pixel(x: 24, y: 4), like: red) && looks(pixels.pixel(x: 24, y: 60), like: blue))
    }

    @Test("a JPEG whose picture is split into more than 10,000 pieces by comments is refused a variant (2,000,000 took a worker 2.8 s and 80 MB); 9,000 pieces are fine")
    func jpegSplitIntoTooManyPieces() throws {
        let stored = Bytes.read(try scratch.image("stored.jpg", width: 64, height: 48))
        // A restart interval (kept) and an empty comment (dropped), again and again: each comment splits what is fed.
        let pair: [UInt8] = [0xFF, 0xDD, 0x00, 0x04, 0x00, 0x00, 0xFF, 0xFE, 0x00, 0x02]
        for (count, refused) in [(9_000, false), (ImageIntegrity.mostVariantPieces, true)] {
            let jpeg = scratch.write("split-\(count).jpg", Array(stored[0..<2]) + Array(repeating: pair, count: count).flatMap { $0 }
                + Array(stored[2...]))
            #expect(ImageInspector.inspect(jpeg, policy: ImagePolicy()) == .image(ImageInfo(format: "jpeg", width: 64, height: 48)))
            let spec = try VariantSpec(size: "32x32")
            if refused {
                #expect(throws: Failure.notAnImage("the jpeg original's picture is split by metadata into more than 10000 "
                                                   + "pieces (a decoding bomb): no variant is made of it")) {
                    try Resizer.makeVariant(source: jpeg, spec: spec, destination: scratch.file("v"))
                }
            } else {
                #expect(try Resizer.makeVariant(source: jpeg, spec: spec, destination: scratch.file("v"))
                        == ImageInfo(format: "jpeg", width: 32, height: 24))
                #expect(try #require(try ImageIntegrity.variantPieces(ImageFile(jpeg), format: "jpeg")).count > 9_000)
            }
        }
    }

    @Test("a dropped JPEG segment goes with its fill bytes and the junk after it (a kept fill byte made a marker of the junk: extra scans the walk never counted)")
    func jpegStrippingLeavesNoMarkerBehind() throws {
        let stored = Bytes.read(try scratch.image("stored.jpg", width: 64, height: 48))
        try #require(stored.suffix(2) == [0xFF, 0xD9])
        // A fill byte, an empty comment and two junk bytes (decoders skip them): once after SOI, once between the
        // scan's entropy data and EOI, where kept junk would be decoded as entropy data.
        let smuggled: [UInt8] = [0xFF, 0xFF, 0xFE, 0x00, 0x02, 0xDA, 0x2A]
        let jpeg = scratch.write("smuggled.jpg", Array(stored[0..<2]) + smuggled + Array(stored[2..<(stored.count - 2)])
            + smuggled + [0xFF, 0xD9])
        #expect(ImageInspector.inspect(jpeg, policy: ImagePolicy()) == .image(ImageInfo(format: "jpeg", width: 64, height: 48)))
        let pieces = try #require(try ImageIntegrity.variantPieces(ImageFile(jpeg), format: "jpeg"))
        #expect(fedBytes(jpeg, pieces) == stored)
    }

    @Test("the first Exif segment decides the orientation even when it has none usable: the header took a later one, the variant's decoder is fed the first", arguments: [
        Bytes.exifSegment(orientation: 1), Bytes.exifSegment(orientation: 0), [0xFF, 0xE1, 0x00, 0x08] + Array("Exif\0\0".utf8)])
    func firstExifDecides(first: [UInt8]) throws {
        let stored = Bytes.read(try scratch.image("stored.jpg", width: 64, height: 48, bands: [(32, 0, 32, 48, 0x0000FFFF)]))
        let jpeg = scratch.write("first-exif.jpg", Array(stored[0..<2]) + first + Bytes.exifSegment(orientation: 6)
            + Array(stored[2...]))
        #expect(ImageInspector.inspect(jpeg, policy: ImagePolicy()) == .image(ImageInfo(format: "jpeg", width: 64, height: 48)))
        let info = try Resizer.makeVariant(source: jpeg, spec: try VariantSpec(size: "1000x1000"), destination: scratch.file("v"))
        #expect(info == ImageInfo(format: "jpeg", width: 64, height: 48))
    }

    @Test("a PNG's variant is fed IHDR, PLTE, tRNS, IDAT and IEND only (libpng inflated each zTXt chunk: 900 of 7.9 MB took 79 s and 13.9 GB)")
    func pngVariantLeavesTextChunksOut() throws {
        let png = Bytes.read(try scratch.image("plain.png", width: 40, height: 20, type: "png",
                                               bands: [(20, 0, 20, 20, 0x0000FFFF)]))
        let afterHeader = 33
        let text = Bytes.pngChunk("tEXt", Array("Comment\0hello".utf8)) + Bytes.pngChunk("zTXt", Array("Big\0\0".utf8) + [0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01])
            + Bytes.pngChunk("gAMA", [0, 0, 0xB1, 0x8F])
        let withText = scratch.write("text.png", Array(png[..<afterHeader]) + text + Array(png[afterHeader...]))
        let pieces = try #require(try ImageIntegrity.variantPieces(ImageFile(withText), format: "png"))
        let kept = fedBytes(withText, pieces)
        #expect(kept.count < png.count && kept.firstRange(of: Array("tEXt".utf8)) == nil && kept.firstRange(of: Array("zTXt".utf8)) == nil,
                "\(kept.count) of \(png.count) bytes")
        let info = try Resizer.makeVariant(source: withText, spec: try VariantSpec(size: "20x20"), destination: scratch.file("v"))
        #expect(info == ImageInfo(format: "png", width: 20, height: 10))
        let pixels = try decodeForTest(scratch.file("v"))
        #expect(looks(pixels.pixel(x: 2, y: 5), like: red) && looks(pixels.pixel(x: 17, y: 5), like: blue))
    }

    /// A colour profile of `size` bytes (at least 132) for data in `space` ("RGB ", "CMYK", "GRAY"): a header with
    /// no tags, then bytes that do not compress.
    static func profile(space: String, size: Int = 132) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: size)
        bytes.replaceSubrange(0..<4, with: Bytes.bigEndian(UInt32(size)))
        bytes.replaceSubrange(12..<20, with: Array("mntr\(space)".utf8))
        bytes.replaceSubrange(20..<24, with: Array("XYZ ".utf8))
        bytes.replaceSubrange(36..<40, with: Array("acsp".utf8))
        var state: UInt64 = 1
        for index in min(132, size)..<size {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            bytes[index] = UInt8(state >> 56)
        }
        return bytes
    }

    /// A 64×48 red original with `profile`: a JPEG with it in APP2 segments of at most 65,519 bytes after the start
    /// of the image, a PNG with an iCCP chunk after its header (gdk-pixbuf's savers cannot write either: the JPEG
    /// one garbles a profile that needs two segments, the PNG one refuses RGB profiles).
    func original(_ format: String, profile: [UInt8]) throws -> String {
        let plain = Bytes.read(try scratch.image("plain.\(format)", width: 64, height: 48, type: format))
        guard format == "jpeg" else {
            return scratch.write("p.png", Array(plain[..<33]) + Resizer.pngProfileChunk(profile) + Array(plain[33...]))
        }
        let chunks = stride(from: 0, to: profile.count, by: 65_519).map { profile[$0..<min($0 + 65_519, profile.count)] }
        var segments: [UInt8] = []
        for (number, chunk) in chunks.enumerated() {
            let length = 2 + 14 + chunk.count
            segments += [0xFF, 0xE2, UInt8(length >> 8), UInt8(length & 0xFF)] + Array("ICC_PROFILE\0".utf8)
                + [UInt8(number + 1), UInt8(chunks.count)] + chunk
        }
        return scratch.write("p.jpg", Array(plain[..<2]) + segments + Array(plain[2...]))
    }

    func profile(of path: String) throws -> [UInt8]? {
        guard let text = try decodeForTest(path).option("icc-profile") else { return nil }
        var length: gsize = 0
        let bytes = g_base64_decode(text, &length)!
        defer { g_free(bytes) }
        return Array(UnsafeBufferPointer(start: bytes, count: Int(length)))
    }

    @Test("a variant carries the original's RGB colour profile (JPEG and PNG, either way): it was dropped, so the thumbnail of a wide-gamut photo or screenshot (Display P3) looked washed out", arguments: [
        ("jpeg", "jpeg"), ("jpeg", "png"), ("png", "png"), ("png", "jpeg"),
    ])
    func variantKeepsTheColourProfile(original: String, output: String) throws {
        let profile = Self.profile(space: "RGB ", size: 3_000)
        let source = try self.original(original, profile: profile)
        #expect(try self.profile(of: source) == profile, "the original has it")
        let variant = scratch.file("v.\(output)")
        let info = try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "32x32", format: output), destination: variant)
        #expect(info == ImageInfo(format: output, width: 32, height: 24))
        #expect(try self.profile(of: variant) == profile)
        #expect(looks(try decodeForTest(variant).pixel(x: 16, y: 12), like: red))
    }

    @Test("a variant leaves out a profile that is not RGB (its pixels are), one of 65,519 bytes or more (gdk-pixbuf's JPEG saver splits and garbles it, and a thumbnail would carry it), and one under 128 bytes (that saver refuses it: every JPEG variant failed)", arguments: [
        ("jpeg", "CMYK", 132), ("jpeg", "GRAY", 132), ("jpeg", "RGB ", 65_520), ("png", "RGB ", 65_520),
        ("jpeg", "RGB ", 65_519), ("png", "RGB ", 65_519), ("jpeg", "RGB ", 100),
    ])
    func variantLeavesOutOtherProfiles(original: String, space: String, size: Int) throws {
        let source = try self.original(original, profile: Self.profile(space: space, size: size))
        // gdk-pixbuf reads no JPEG profile in two segments back: its bytes are there, and not fed to the decoder.
        #expect(try profile(of: source) != nil || (original == "jpeg" && size > 65_519), "the original has one")
        if original == "jpeg" {
            let fed = fedBytes(source, try #require(try ImageIntegrity.variantPieces(ImageFile(source), format: "jpeg")))
            #expect((fed.firstRange(of: Array("ICC_PROFILE".utf8)) != nil) == (size <= 65_519), "one segment holds it")
        }
        for output in ["jpeg", "png"] {
            let variant = scratch.file("v.\(output)")
            _ = try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "32x32", format: output), destination: variant)
            #expect(try profile(of: variant) == nil, "\(output)")
            #expect(looks(try decodeForTest(variant).pixel(x: 16, y: 12), like: red))
        }
    }

    @Test("a GIF whose first frame is larger than its logical screen is held to the pixel limit by the frame's size (a 16x16 screen with a 23170x23170 frame took 15 s and 540 MB)")
    func gifFrameLargerThanItsScreen() throws {
        // halves.gif (48×32) with its image descriptor saying 8000×8000.
        var gif = Bytes.read(Fixtures.path("halves.gif"))
        let imageStart = try #require(gif.firstIndex(of: 0x2C))
        gif.replaceSubrange((imageStart + 5)..<(imageStart + 9), with: [0x40, 0x1F, 0x40, 0x1F])
        let source = scratch.write("big-frame.gif", gif)
        #expect(throws: Failure.pixelLimit(width: 8000, height: 8000, limit: ImagePolicy.defaultMaxPixels)) {
            try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "24x24"), destination: scratch.file("v"))
        }
    }

    @Test("an animated WebP's frames count at least 64x64 pixels each (80,000 frames of 1x1 took 26 s: the loader's time grows with the square of their number)")
    func webpFramesCountAtLeastATile() throws {
        func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
            let n = UInt32(data.count)
            return Array(type.utf8) + [UInt8(n & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n >> 16 & 0xFF), UInt8(n >> 24)] + data
        }
        // A 1×1 canvas, animated, and 13,000 frames: 53 million pixels at 4,096 each.
        let body = Array("WEBP".utf8) + chunk("VP8X", [0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0]) + chunk("ANIM", [UInt8](repeating: 0, count: 6))
            + (0..<13_000).flatMap { _ in chunk("ANMF", [UInt8](repeating: 0, count: 16)) }
        let size = UInt32(body.count)
        let webp = scratch.write("frames.webp", Array("RIFF".utf8) + [UInt8(size & 0xFF), UInt8(size >> 8 & 0xFF),
                                                                     UInt8(size >> 16 & 0xFF), UInt8(size >> 24)] + body)
        #expect(throws: Failure.pixelLimit(frames: 13_000, width: 1, height: 1, limit: ImagePolicy.defaultMaxPixels)) {
            try Resizer.makeVariant(source: webp, spec: try VariantSpec(size: "24x24"), destination: scratch.file("v"))
        }
    }

    /// The bytes a loader is fed from `path` as `pieces`.
    private func fedBytes(_ path: String, _ pieces: [PixbufLoader.Piece]) -> [UInt8] {
        let file = Bytes.read(path)
        return pieces.flatMap { piece -> [UInt8] in
            switch piece {
            case .file(let range): Array(file[Int(range.lowerBound)..<min(Int(range.upperBound), file.count)])
            case .bytes(let bytes): bytes
            }
        }
    }

    @Test func unwritableDestinationIsATransientFailure() throws {
        let source = try scratch.image("a.jpg", width: 64, height: 48)
        do {
            _ = try Resizer.makeVariant(source: source, spec: try VariantSpec(size: "8x8"),
                                        destination: scratch.file("missing-directory/v.jpg"))
            Issue.record("expected a failure")
        } catch let error as Failure {
            #expect(error.code == .internal)
            #expect(error.isTransient)
            #expect(error.message.contains("mkstemp"))
        }
    }

    @Test func concurrentResizesOnWorkerThreadsAgree() throws {
        let source = try scratch.image("a.png", width: 300, height: 200, type: "png", bands: [(0, 0, 150, 200, 0x0000FFFF)])
        let directory = scratch.path
        let results = Mutex<[ImageInfo]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { index in
            let spec = try! VariantSpec(size: "64x64", fit: index % 2 == 0 ? "contain" : "cover")
            let info = try? Resizer.makeVariant(source: source, spec: spec, destination: "\(directory)/v\(index).png")
            results.withLock { $0.append(info ?? ImageInfo(format: "failed", width: 0, height: 0)) }
        }
        let infos = results.withLock { $0 }
        #expect(infos.filter { $0 == ImageInfo(format: "png", width: 64, height: 43) }.count == 4)
        #expect(infos.filter { $0 == ImageInfo(format: "png", width: 64, height: 64) }.count == 4)
    }

    @Test func loaderDecodesAJPEGAtTheRequestedScale() throws {
        let loader = try PixbufLoader(format: "jpeg") { _, _ in (500, 375) }
        try loader.feed(try ImageFile(try photo()))
        try loader.close()
        #expect(loader.storedSize! == (4000, 3000))
        let pixbuf = try #require(loader.pixbuf)
        #expect((pixbuf.width, pixbuf.height) == (500, 375))
    }
}
