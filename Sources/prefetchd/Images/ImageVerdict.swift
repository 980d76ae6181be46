import QueueCore

/// What `ImageInspector` decided about a body: keep it as an image, keep it as a plain file, or refuse it.
enum ImageVerdict: Equatable, Sendable {
    /// An image of an allowed format within the pixel limit.
    case image(ImageInfo)
    /// Not an image, and the policy allows non-images.
    case nonImage
    /// Refused: `not_an_image`, `format_not_allowed` or `pixel_limit` (permanent), or `internal` when the file
    /// could not be read (transient: the body was not judged).
    case rejected(Failure)

    /// The verdict as the daemon stores it: the image's description (nil for a kept non-image) or the failure.
    var result: Result<ImageInfo?, Failure> {
        switch self {
        case .image(let info): return .success(info)
        case .nonImage: return .success(nil)
        case .rejected(let failure): return .failure(failure)
        }
    }

    /// The failure's code for a rejection, nil otherwise.
    var code: ErrorCode? {
        if case .rejected(let failure) = self { return failure.code }
        return nil
    }
}
