/// How a variant is made from an original: the box it must fit, how it fits, how it is encoded, and whether a
/// small original may be enlarged. `spec` is its stable text form, the key of the variant in the index.
///
/// The type depends on nothing but the standard library, so it can move to PrefetchProtocol if the CLI wants to
/// check `--size` before sending a request.
struct VariantSpec: Hashable, Sendable {
    /// How the image is fitted into the W×H box.
    enum Fit: String, CaseIterable, Sendable {
        /// Fits inside the box, keeping the aspect ratio: one side equals the box, the other is smaller.
        case contain
        /// Fills the box, keeping the aspect ratio, and crops the centre.
        case cover
        /// Stretches to the box exactly.
        case fill
    }

    /// The encoding of a variant.
    enum Format: String, CaseIterable, Sendable {
        case jpeg
        case png
    }

    /// Why a spec is not valid, in words for the person who typed it.
    struct Invalid: Error, Equatable, CustomStringConvertible, Sendable {
        let message: String
        var description: String { message }
    }

    static let sides = 1...10_000
    static let qualities = 1...100
    static let defaultQuality = 85

    let width: Int
    let height: Int
    let fit: Fit
    /// nil keeps the kind of the original: JPEG for a JPEG, PNG for everything else (which may have alpha).
    let format: Format?
    /// The JPEG quality; PNG variants ignore it and always carry the default, so equal outputs have equal specs.
    let quality: Int
    /// Whether an original smaller than the box is enlarged; without it no output side exceeds the original's.
    let upscale: Bool

    init(width: Int, height: Int, fit: Fit = .contain, format: Format? = nil, quality: Int = VariantSpec.defaultQuality,
         upscale: Bool = false) throws(Invalid) {
        guard Self.sides.contains(width), Self.sides.contains(height) else {
            throw Invalid(message: "size must be WxH with W and H from 1 to 10000, not \(width)x\(height)")
        }
        guard Self.qualities.contains(quality) else {
            throw Invalid(message: "quality must be from 1 to 100, not \(quality)")
        }
        self.width = width
        self.height = height
        self.fit = fit
        self.format = format
        self.quality = format == .png ? Self.defaultQuality : quality
        self.upscale = upscale
    }

    /// Parses the request's words: `size` like `256x256`, `fit` and `format` names (nil for the defaults).
    init(size: String, fit: String? = nil, format: String? = nil, quality: Int? = nil, upscale: Bool = false)
        throws(Invalid) {
        guard let (width, height) = Self.parseSize(size) else {
            throw Invalid(message: "size must be WxH with W and H from 1 to 10000, not \"\(size)\"")
        }
        try self.init(width: width, height: height, fit: try Self.parseFit(fit ?? "contain"),
                      format: try format.map(Self.parseFormat), quality: quality ?? Self.defaultQuality,
                      upscale: upscale)
    }

    /// Parses a canonical `spec` string back, such as `256x256-cover-jpeg-q85-up`.
    init(spec text: String) throws(Invalid) {
        let invalid = Invalid(message: "a variant spec looks like 256x256-contain-auto-q85[-up], not \"\(text)\"")
        var parts = text.split(separator: "-", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 3, let (width, height) = Self.parseSize(parts[0]), let fit = Fit(rawValue: parts[1])
        else { throw invalid }
        let format: Format?
        if parts[2] == "auto" { format = nil } else if let named = Format(rawValue: parts[2]) { format = named } else {
            throw invalid
        }
        parts.removeFirst(3)
        var quality = Self.defaultQuality
        if format != .png {
            guard let first = parts.first, first.hasPrefix("q"), let number = Int(first.dropFirst()) else { throw invalid }
            quality = number
            parts.removeFirst()
        }
        let upscale = parts == ["up"]
        guard parts.isEmpty || upscale else { throw invalid }
        try self.init(width: width, height: height, fit: fit, format: format, quality: quality, upscale: upscale)
        guard spec == text else { throw invalid }
    }

    /// The canonical text: `WxH-fit-format[-qN][-up]`, with `auto` for a kept format and no quality for PNG.
    var spec: String {
        var text = "\(width)x\(height)-\(fit.rawValue)-\(format?.rawValue ?? "auto")"
        if format != .png { text += "-q\(quality)" }
        if upscale { text += "-up" }
        return text
    }

    /// The encoding used for an original of `sourceFormat`.
    func outputFormat(forSource sourceFormat: String) -> Format {
        format ?? (["jpeg", "jpg"].contains(sourceFormat.lowercased()) ? .jpeg : .png)
    }

    /// This spec with the format settled for an original of `sourceFormat`: key variants by its `spec` once the
    /// original is known, so that `auto` and the explicit format share one file.
    func resolved(forSource sourceFormat: String) -> VariantSpec {
        // The values were validated already; only the format changes.
        try! VariantSpec(width: width, height: height, fit: fit, format: outputFormat(forSource: sourceFormat),
                         quality: quality, upscale: upscale)
    }

    private static func parseSize(_ text: String) -> (Int, Int)? {
        let sides = text.lowercased().split(separator: "x", omittingEmptySubsequences: false)
        guard sides.count == 2,
              sides.allSatisfy({ !$0.isEmpty && $0.count <= 5 && $0.allSatisfy { $0.isASCII && $0.isNumber } }),
              let width = Int(sides[0]), let height = Int(sides[1]),
              Self.sides.contains(width), Self.sides.contains(height) else { return nil }
        return (width, height)
    }

    private static func parseFit(_ text: String) throws(Invalid) -> Fit {
        guard let fit = Fit(rawValue: text.lowercased()) else {
            throw Invalid(message: "fit must be contain, cover or fill, not \"\(text)\"")
        }
        return fit
    }

    private static func parseFormat(_ text: String) throws(Invalid) -> Format {
        switch text.lowercased() {
        case "jpeg", "jpg": return .jpeg
        case "png": return .png
        default: throw Invalid(message: "format must be jpeg or png, not \"\(text)\"")
        }
    }
}
