import PrefetchProtocol

/// Cuts a list of URLs into the parts sent one request each, by size: a part's URLs take at most `budget` bytes as
/// JSON (half the daemon's line limit, so the rest of the request always fits) and number at most
/// `Request.maximumBatch`. Any number of URLs of any length can be sent; a URL over the budget goes alone.
struct URLParts {
    private let source: () throws(CLIError) -> String?
    /// The URL that did not fit the last part.
    private var held: String?

    init(_ source: @escaping () throws(CLIError) -> String?) { self.source = source }

    mutating func next() throws(CLIError) -> [String]? {
        var part: [String] = []
        var bytes = 0
        while part.count < Request.maximumBatch {
            let url: String
            if let held {
                url = held
                self.held = nil
            } else if let next = try source() {
                url = next
            } else {
                break
            }
            let size = RequestSize.encoded(url) + 1
            guard part.isEmpty || bytes + size <= RequestSize.budget else {
                held = url
                break
            }
            part.append(url)
            bytes += size
        }
        return part.isEmpty ? nil : part
    }
}

enum RequestSize {
    /// Bytes of URLs, as JSON, in one request.
    static let budget = maximumLineLength / 2

    /// The bytes `text` takes as a JSON string, at most: quotes, two-byte escapes for `"` and `\`, six for a control
    /// character, UTF-8 otherwise (`/` is not escaped).
    static func encoded(_ text: String) -> Int {
        var size = 2
        for byte in text.utf8 {
            switch byte {
            case 0x22, 0x5C: size += 2
            case ..<0x20: size += 6
            default: size += 1
            }
        }
        return size
    }
}
