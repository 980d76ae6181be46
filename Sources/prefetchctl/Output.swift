import FoundationEssentials
import Glibc
import QueueCore

/// Data on stdout, messages on stderr.
enum Output {
    /// A URL as prefetchctl shows it: a password in it hidden as the daemon hides it (`user:***@`).
    static func shown(_ url: String) -> String { CanonicalURL.redactingUserinfo(in: url) }

    /// Whether `url` shows a password hidden in its authority (`user:***@`), as one pasted from `list` or `info`
    /// does: the daemon knows no URL by that form, and says `unknown`.
    static func hidesPassword(_ url: String) -> Bool {
        guard let start = url.firstRange(of: "://")?.upperBound else { return false }
        return url[start...].prefix { !"/?#".contains($0) }.contains("***@")
    }

    /// Said once when a URL that `hidesPassword` was unknown to the daemon.
    static let hiddenPasswordHint = "list and info show a password as ***: give the URL with its password"

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    static func line(_ text: String) {
        print(text.forTerminal)
    }

    /// A cached file's path as the daemon made it (from its cache directory and a hash), byte for byte: it is
    /// data for scripts, and nothing in it comes from a server.
    static func path(_ path: String) {
        print(path)
    }

    static func json<T: Encodable>(_ value: T) {
        guard let data = try? encoder.encode(value) else { return }
        print(String(decoding: data, as: UTF8.self))
    }

    static func message(_ text: String) {
        stderr("prefetchctl: \(text.forTerminal)\n")
    }

    /// `text` on stderr as it is.
    static func stderr(_ text: String) {
        var bytes = Array(text.utf8)
        _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
    }
}

extension String {
    /// The text with what a terminal would act on (`actsOnTerminal`) written out as `\uXXXX`: text from the daemon
    /// carries what servers sent (a content type, an error's detail). `keepingNewlines` leaves `\n` alone (multi-line
    /// text such as metrics).
    func forTerminal(keepingNewlines: Bool) -> String {
        guard mayActOnTerminal else { return self }
        var result = ""
        for scalar in unicodeScalars {
            if scalar.actsOnTerminal && !(keepingNewlines && scalar == "\n") {
                let hex = String(scalar.value, radix: 16)
                result += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// `forTerminal(keepingNewlines: false)`: one line.
    var forTerminal: String { forTerminal(keepingNewlines: false) }
}
