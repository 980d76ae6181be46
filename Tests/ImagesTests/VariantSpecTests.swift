import Testing
@testable import prefetchd

@Suite struct VariantSpecTests {
    @Test func defaultsAndCanonicalText() throws {
        let spec = try VariantSpec(size: "256x256")
        #expect(spec.width == 256 && spec.height == 256)
        #expect(spec.fit == .contain && spec.format == nil && spec.quality == 85 && !spec.upscale)
        #expect(spec.spec == "256x256-contain-auto-q85")
        #expect(try VariantSpec(size: "256x256", fit: "cover", format: "jpeg").spec == "256x256-cover-jpeg-q85")
        #expect(try VariantSpec(size: "640X480", fit: "fill", format: "jpg", quality: 70, upscale: true).spec
            == "640x480-fill-jpeg-q70-up")
    }

    @Test func pngIgnoresQualitySoEqualOutputsShareASpec() throws {
        let a = try VariantSpec(size: "10x10", format: "png", quality: 20)
        let b = try VariantSpec(size: "10x10", format: "png")
        #expect(a == b)
        #expect(a.spec == "10x10-contain-png")
    }

    @Test func specTextRoundTrips() throws {
        for text in ["256x256-contain-auto-q85", "1x10000-cover-png", "640x480-fill-jpeg-q1-up", "8x8-contain-png-up"] {
            #expect(try VariantSpec(spec: text).spec == text)
        }
        for text in ["256x256", "256x256-contain", "256x256-contain-png-q85", "256x256-contain-jpeg", "0x5-fill-png",
                     "256x256-contain-auto-q85-down", "256x256-stretch-auto-q85", "256x256-contain-auto-q085"] {
            #expect(throws: VariantSpec.Invalid.self) { try VariantSpec(spec: text) }
        }
    }

    @Test(arguments: ["", "256", "x256", "256x", "0x10", "10x0", "10001x10", "-5x5", "+5x5", "1.5x2", "256 x 256",
                      "256x256x2", "２５６x256"])
    func badSizesAreRefusedWithAClearMessage(size: String) {
        #expect(throws: VariantSpec.Invalid(message: "size must be WxH with W and H from 1 to 10000, not \"\(size)\"")) {
            try VariantSpec(size: size)
        }
    }

    @Test func badFitFormatAndQualityAreRefused() {
        #expect(throws: VariantSpec.Invalid(message: "fit must be contain, cover or fill, not \"stretch\"")) {
            try VariantSpec(size: "10x10", fit: "stretch")
        }
        #expect(throws: VariantSpec.Invalid(message: "format must be jpeg or png, not \"webp\"")) {
            try VariantSpec(size: "10x10", format: "webp")
        }
        #expect(throws: VariantSpec.Invalid(message: "quality must be from 1 to 100, not 0")) {
            try VariantSpec(size: "10x10", quality: 0)
        }
        #expect(throws: VariantSpec.Invalid(message: "quality must be from 1 to 100, not 101")) {
            try VariantSpec(size: "10x10", quality: 101)
        }
        let failure = VariantSpec.Invalid(message: "m").failure
        #expect(failure.code == .badRequest && failure.message == "m" && !failure.isTransient)
    }

    @Test func keptFormatIsJPEGForJPEGAndPNGForTheRest() throws {
        let spec = try VariantSpec(size: "10x10", quality: 60)
        #expect(spec.outputFormat(forSource: "jpeg") == .jpeg)
        for source in ["png", "gif", "webp", "avif"] { #expect(spec.outputFormat(forSource: source) == .png) }
        #expect(spec.resolved(forSource: "jpeg").spec == "10x10-contain-jpeg-q60")
        #expect(spec.resolved(forSource: "webp").spec == "10x10-contain-png")
        #expect(try VariantSpec(size: "10x10", format: "jpeg").outputFormat(forSource: "png") == .jpeg)
    }
}

@Suite struct VariantGeometryTests {
    func geometry(_ width: Int, _ height: Int, _ size: String, fit: String = "contain", upscale: Bool = false) throws
        -> VariantGeometry {
        VariantGeometry(sourceWidth: width, sourceHeight: height, spec: try VariantSpec(size: size, fit: fit, upscale: upscale))
    }

    @Test func containFitsInsideKeepingAspect() throws {
        let g = try geometry(4000, 3000, "256x256")
        #expect((g.outputWidth, g.outputHeight) == (256, 192))
        #expect(g.crop == .init(x: 0, y: 0, width: 4000, height: 3000))
        #expect(g.decodeSize(storedWidth: 4000, storedHeight: 3000)! == (256, 192))
        let tall = try geometry(3000, 4000, "256x256")
        #expect((tall.outputWidth, tall.outputHeight) == (192, 256))
    }

    @Test func coverFillsTheBoxAndCropsTheCentre() throws {
        let g = try geometry(4000, 3000, "256x256", fit: "cover")
        #expect((g.outputWidth, g.outputHeight) == (256, 256))
        #expect(g.crop == .init(x: 500, y: 0, width: 3000, height: 3000))
        #expect(g.decodeSize(storedWidth: 4000, storedHeight: 3000)! == (341, 256))
    }

    @Test func fillStretches() throws {
        let g = try geometry(4000, 3000, "300x100", fit: "fill")
        #expect((g.outputWidth, g.outputHeight) == (300, 100))
        #expect(g.crop == .init(x: 0, y: 0, width: 4000, height: 3000))
        #expect(g.decodeScale == 0.075)
    }

    @Test func smallImagesAreNotUpscaledUnlessAsked() throws {
        for fit in ["contain", "cover", "fill"] {
            let kept = try geometry(100, 100, "256x256", fit: fit)
            #expect((kept.outputWidth, kept.outputHeight) == (100, 100))
            #expect(kept.decodeScale == 1)
            #expect(kept.decodeSize(storedWidth: 100, storedHeight: 100) == nil)
            let grown = try geometry(100, 100, "256x256", fit: fit, upscale: true)
            #expect((grown.outputWidth, grown.outputHeight) == (256, 256))
        }
        // Too small to cover a wide box: the largest centred crop with the box's aspect, at full size.
        let cover = try geometry(100, 100, "256x128", fit: "cover")
        #expect((cover.outputWidth, cover.outputHeight) == (100, 50))
        #expect(cover.crop == .init(x: 0, y: 25, width: 100, height: 50))
        let fill = try geometry(100, 100, "256x128", fit: "fill")
        #expect((fill.outputWidth, fill.outputHeight) == (100, 50))
        let contain = try geometry(100, 100, "256x128")
        #expect((contain.outputWidth, contain.outputHeight) == (100, 100))
    }

    @Test func extremeAspectsNeverGiveAZeroSide() throws {
        let g = try geometry(10000, 1, "100x100")
        #expect((g.outputWidth, g.outputHeight) == (100, 1))
        #expect(g.decodeSize(storedWidth: 10000, storedHeight: 1)! == (100, 1))
    }
}
