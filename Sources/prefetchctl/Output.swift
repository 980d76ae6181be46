import FoundationEssentials
import Glibc

/// Data on stdout, messages on stderr.
enum Output {
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    static func line(_ text: String) {
        print(text)
    }

    static func json<T: Encodable>(_ value: T) {
        guard let data = try? encoder.encode(value) else { return }
        print(String(decoding: data, as: UTF8.self))
    }

    static func message(_ text: String) {
        stderr("prefetchctl: \(text)\n")
    }

    /// `text` on stderr as it is.
    static func stderr(_ text: String) {
        var bytes = Array(text.utf8)
        _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
    }
}
