import Glibc
import QueueCore

/// The failures the image code reports, with the stable codes of docs/protocol.md.
extension Failure {
    // Images/ judges bodies permanently (`not_an_image`, `format_not_allowed`, `pixel_limit`); `disk_full` and
    // `internal` are environment failures worth retrying; `bad_request` is a bad variant spec.

    static func notAnImage(_ message: String) -> Failure {
        Failure(code: .notAnImage, message: message, isTransient: false)
    }

    static func formatNotAllowed(_ format: String) -> Failure {
        Failure(code: .formatNotAllowed, message: "\(format) images are not allowed", isTransient: false)
    }

    static func pixelLimit(width: Int, height: Int, limit: Int64) -> Failure {
        let pixels = ImageInfo.pixels(width, height)
        let count = pixels == .max ? "more pixels than can be counted" : "\(pixels) pixels"
        return Failure(code: .pixelLimit,
                       message: "\(width)x\(height) is \(count), over the limit of \(limit)", isTransient: false)
    }

    /// An AVIF whose coded data decode more than `limit` pixels, whatever size its `ispe` property `declared`.
    static func pixelLimit(_ coded: AVIFCodedSize, declared: ImageInfo, limit: Int64) -> Failure {
        Failure(code: .pixelLimit, message: "the AVIF decodes to \(coded.width)x\(coded.height) (\(coded.decoded) pixels of "
                + "AV1 frames, with \(AVIFCodedSize.decoderPixels) for each one's decoder and one for every 4 bytes of data "
                + "copied), whatever its header's "
                + "\(declared.width)x\(declared.height) says: over the limit of \(limit)", isTransient: false)
    }

    /// An animation whose frames, each decoded onto a whole canvas of at least `Resizer.smallestFrameCost` pixels,
    /// come to more than `limit` pixels.
    static func pixelLimit(frames: Int, width: Int, height: Int, limit: Int64) -> Failure {
        Failure(code: .pixelLimit, message: "the animation has \(frames) frames of \(width)x\(height), decoded "
                + "one canvas each (counted as at least \(Resizer.smallestFrameCost) pixels): over the limit of "
                + "\(limit) pixels", isTransient: false)
    }

    /// An I/O failure while reading a source or writing a variant: `disk_full` for ENOSPC/EDQUOT, else `internal`.
    static func imageIO(_ message: String, noSpace: Bool = false) -> Failure {
        Failure(code: noSpace ? .diskFull : .internal, message: message, isTransient: true)
    }

    /// A failed system call while reading a source or writing a variant.
    static func imageIO(_ error: SystemError) -> Failure {
        imageIO(error.description, noSpace: error.errno == ENOSPC || error.errno == EDQUOT)
    }
}

extension VariantSpec.Invalid {
    /// The `bad_request` failure to answer a request whose spec is invalid.
    var failure: Failure { Failure(code: .badRequest, message: message, isTransient: false) }
}
