/// Where a variant's pixels come from and how big it is, worked out from the upright size of the original and a
/// spec alone (pure arithmetic, tested without images).
struct VariantGeometry: Equatable, Sendable {
    /// A rectangle of the upright original, in its pixels.
    struct Rect: Equatable, Sendable {
        var x: Double
        var y: Double
        var width: Double
        var height: Double
    }

    let outputWidth: Int
    let outputHeight: Int
    /// The part of the original that becomes the output: all of it, except for `cover`, which crops the centre.
    let crop: Rect
    /// The uniform scale to decode at (at most 1) so that no axis of the crop has fewer pixels than the output.
    let decodeScale: Double

    init(sourceWidth: Int, sourceHeight: Int, spec: VariantSpec) {
        precondition(sourceWidth > 0 && sourceHeight > 0)
        let sw = Double(sourceWidth)
        let sh = Double(sourceHeight)
        let boxW = Double(spec.width)
        let boxH = Double(spec.height)
        let full = Rect(x: 0, y: 0, width: sw, height: sh)
        func side(_ value: Double) -> Int { max(1, Int(value.rounded())) }

        switch spec.fit {
        case .contain:
            var scale = min(boxW / sw, boxH / sh)
            if !spec.upscale { scale = min(scale, 1) }
            outputWidth = min(side(sw * scale), spec.width)
            outputHeight = min(side(sh * scale), spec.height)
            crop = full
            decodeScale = min(scale, 1)
        case .cover:
            let scale = max(boxW / sw, boxH / sh)
            if scale <= 1 || spec.upscale {
                outputWidth = spec.width
                outputHeight = spec.height
                let cropW = min(sw, boxW / scale)
                let cropH = min(sh, boxH / scale)
                crop = Rect(x: (sw - cropW) / 2, y: (sh - cropH) / 2, width: cropW, height: cropH)
                decodeScale = min(scale, 1)
            } else {
                // Too small to cover the box: the largest centred crop with the box's aspect, at full size.
                let shrink = min(sw / boxW, sh / boxH)
                outputWidth = min(side(boxW * shrink), sourceWidth)
                outputHeight = min(side(boxH * shrink), sourceHeight)
                let cropW = Double(outputWidth)
                let cropH = Double(outputHeight)
                crop = Rect(x: (sw - cropW) / 2, y: (sh - cropH) / 2, width: cropW, height: cropH)
                decodeScale = 1
            }
        case .fill:
            if spec.upscale || (boxW <= sw && boxH <= sh) {
                outputWidth = spec.width
                outputHeight = spec.height
            } else {
                // Keeps the box's aspect but lets no side exceed the original's.
                let shrink = min(1, sw / boxW, sh / boxH)
                outputWidth = min(side(boxW * shrink), sourceWidth)
                outputHeight = min(side(boxH * shrink), sourceHeight)
            }
            crop = full
            decodeScale = min(1, max(Double(outputWidth) / sw, Double(outputHeight) / sh))
        }
    }

    /// The size to ask the loader for, given the stored (not upright) size, or nil to decode at full size.
    func decodeSize(storedWidth: Int, storedHeight: Int) -> (width: Int, height: Int)? {
        guard decodeScale < 1 else { return nil }
        let width = max(1, Int((Double(storedWidth) * decodeScale).rounded()))
        let height = max(1, Int((Double(storedHeight) * decodeScale).rounded()))
        return width < storedWidth || height < storedHeight ? (width, height) : nil
    }
}
