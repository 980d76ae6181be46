import Glibc
import PrefetchProtocol
import QueueCore

/// Lines on stderr: with a syslog priority prefix under journald (`JOURNAL_STREAM`), else timestamped.
/// A password in a URL never reaches a line: everything written to stderr goes through
/// `CanonicalURL.redactingUserinfo(in:)`.
enum Log {
    enum Level: Int, Comparable {
        case error = 3, warning = 4, info = 6, debug = 7
        static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
    }

    nonisolated(unsafe) static var threshold: Level = .info
    nonisolated(unsafe) static var journal = getenv("JOURNAL_STREAM") != nil

    static func error(_ message: String) { write(.error, message) }
    static func warning(_ message: String) { write(.warning, message) }
    static func info(_ message: String) { write(.info, message) }
    /// The message is made only when debug lines are wanted: some are on the path of every fetch.
    static func debug(_ message: @autoclosure () -> String) { if threshold >= .debug { write(.debug, message()) } }

    private static func write(_ level: Level, _ message: String) {
        guard level <= threshold else { return }
        let message = oneLine(message)
        let line: String
        if journal {
            line = "<\(level.rawValue)>\(message)\n"
        } else {
            var now = time(nil)
            var parts = tm()
            localtime_r(&now, &parts)
            var buffer = [CChar](repeating: 0, count: 32)
            strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S", &parts)
            let stamp = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            line = "\(stamp) prefetchd[\(getpid())] \(level.name): \(message)\n"
        }
        writeStandardError(line)
    }
}

extension Log {
    /// `message` with what a terminal would act on written out (`\n`, `\x1b`, `\u202e`: `actsOnTerminal`): a line
    /// holds one message, so that text from outside (a server's header, an environment variable) can neither forge
    /// a line of its own, reach a terminal as an escape sequence, nor reorder what the line shows.
    static func oneLine(_ message: String) -> String {
        guard message.mayActOnTerminal else { return message }
        var escaped = ""
        for scalar in message.unicodeScalars {
            guard scalar.actsOnTerminal else {
                escaped.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": escaped += "\\n"
            case "\r": escaped += "\\r"
            case "\t": escaped += "\\t"
            default:
                let hex = String(scalar.value, radix: 16)
                let (prefix, width) = scalar.value < 0x100 ? ("\\x", 2) : ("\\u", 4)
                escaped += prefix + String(repeating: "0", count: width - hex.count) + hex
            }
        }
        return escaped
    }
}

/// Writes `text` to stderr, unbuffered, with passwords in URLs hidden (`user:***@`).
func writeStandardError(_ text: String) {
    var bytes = CanonicalURL.redactingUserinfo(in: Array(text.utf8))
    _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
}

/// Puts `/dev/null` on descriptors 0, 1 and 2 that the launcher left closed, before anything else is opened: the
/// cache's lock or index would take their numbers, and the log would be written into them.
func openClosedStandardDescriptors() {
    for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) < 0 {
        // `open` takes the lowest free number: `fd` itself, the lower ones being open by now.
        let null = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY)
        if null >= 0, null != fd {
            dup2(null, fd)
            close(null)
        }
    }
}

private extension Log.Level {
    var name: String {
        switch self {
        case .error: return "error"
        case .warning: return "warning"
        case .info: return "info"
        case .debug: return "debug"
        }
    }
}
