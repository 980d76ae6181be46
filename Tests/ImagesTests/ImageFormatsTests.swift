import Testing
@testable import prefetchd

@Suite struct ImageFormatsTests {
    @Test func listsTheLoadersAndWhichAreAllowed() throws {
        let loaders = ImageFormats.available()
        let byName = Dictionary(loaders.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        for name in ["jpeg", "png", "gif", "webp", "avif"] {
            let loader = try #require(byName[name], "no gdk-pixbuf loader for \(name)")
            #expect(loader.isAllowed)
            #expect(loader.mimeTypes.contains("image/\(name)"))
        }
        let jpeg = try #require(byName["jpeg"])
        #expect(jpeg.extensions.contains("jpg"))
        #expect(jpeg.isWritable)
        #expect(!jpeg.description.isEmpty)
        let svg = try #require(byName["svg"])
        #expect(!svg.isAllowed)
        #expect(svg.isScalable)
        #expect(loaders.map(\.name) == loaders.map(\.name).sorted())
        #expect(ImageFormats.available(policy: ImagePolicy(allowedFormats: ["svg"])).first { $0.name == "svg" }!.isAllowed)
    }

    @Test func reportsAllowedFormatsWithoutALoader() {
        #expect(ImageFormats.unavailable(policy: ImagePolicy()) == [])
        #expect(ImageFormats.unavailable(policy: ImagePolicy(allowedFormats: ["png", "nosuch"])) == ["nosuch"])
    }

    @Test func normalisesAliases() {
        #expect(ImageFormats.normalise("JPG") == "jpeg")
        #expect(ImageFormats.normalise("image/svg+xml") == "svg")
        #expect(ImageFormats.normalise("tif") == "tiff")
        #expect(ImageFormats.normalise("PNG") == "png")
        #expect(ImagePolicy(allowedFormats: ["JPG", "Png"]).allowedFormats == ["jpeg", "png"])
    }
}
