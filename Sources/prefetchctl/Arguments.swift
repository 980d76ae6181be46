import Glibc

/// The parsed command line: a verb, its operands, and flags.
struct Arguments {
    var verb: String?
    var operands: [String] = []
    /// The options given, by their long names (`-o` counts as `--output`), to check them against the verb.
    var given: [String] = []
    var socket: String?
    var json = false
    var help = false
    var version = false
    var timeout: Double?
    var output: String?
    var limit: Int?
    var maxStale: Int64?
    var offline = false
    var all = false
    /// `get --size WxH` and its companions: a resized variant.
    var size: String?
    var fit: String?
    var format: String?
    var quality: Int?
    var upscale = false
    /// `queue --wait`: wait until every queued URL finished or failed.
    var wait = false
    /// `queue --now`: fetch them now as urgent work, even while background work is paused or slowed.
    var now = false
    /// `view`: rows after and before the visible ones to prefetch.
    var ahead: Int?
    var behind: Int?

    /// Reads the words; a bad option value is a usage error here, before anything is sent.
    static func parse(_ arguments: [String]) throws(CLIError) -> Arguments {
        var parsed = Arguments()
        var rest = arguments[...]
        var onlyOperands = false
        while let argument = rest.popFirst() {
            if onlyOperands || argument == "-" || !argument.hasPrefix("-") {
                if parsed.verb == nil { parsed.verb = argument } else { parsed.operands.append(argument) }
                continue
            }
            var flag = argument
            var inline: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                flag = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            func value() throws(CLIError) -> String {
                if let inline { return inline }
                guard let next = rest.popFirst() else { throw .usage("\(flag) needs a value") }
                return next
            }
            let long = ["-h": "--help", "-o": "--output"][flag] ?? flag
            if long != "--" { parsed.given.append(long) }
            switch long {
            case "--": onlyOperands = true
            case "--help": parsed.help = true
            case "--version": parsed.version = true
            case "--json": parsed.json = true
            case "--socket": parsed.socket = try value()
            case "--output": parsed.output = try value()
            case "--timeout":
                let text = try value()
                guard let seconds = Double(text), seconds > 0, seconds <= 31_536_000 else {
                    throw .usage("--timeout: '\(text)' is not a number of seconds above 0 (at most a year)")
                }
                parsed.timeout = seconds
            case "--offline": parsed.offline = true
            case "--all": parsed.all = true
            case "--size":
                let text = try value()
                guard VariantWords.isSize(text) else { throw .usage("--size: '\(text)' is not WxH with W and H from 1 to 10000") }
                parsed.size = text
            case "--fit":
                let text = try value()
                guard VariantWords.fits.contains(text.lowercased()) else { throw .usage("--fit: '\(text)' is not contain, cover or fill") }
                parsed.fit = text
            case "--format":
                let text = try value()
                guard VariantWords.formats.contains(text.lowercased()) else { throw .usage("--format: '\(text)' is not jpeg or png") }
                parsed.format = text
            case "--upscale": parsed.upscale = true
            case "--quality":
                let text = try value()
                guard let quality = Int(text), (1...100).contains(quality) else {
                    throw .usage("--quality: '\(text)' is not a number from 1 to 100")
                }
                parsed.quality = quality
            case "--wait": parsed.wait = true
            case "--now": parsed.now = true
            case "--max-stale":
                let text = try value()
                guard let seconds = Int64(text), seconds >= 0 else { throw .usage("--max-stale: '\(text)' is not a number of seconds") }
                parsed.maxStale = seconds
            case "--ahead", "--behind":
                let text = try value()
                guard let rows = Int(text), (0...1000).contains(rows) else {
                    throw .usage("\(flag): '\(text)' is not a number of rows from 0 to 1000")
                }
                if flag == "--ahead" { parsed.ahead = rows } else { parsed.behind = rows }
            case "--limit":
                let text = try value()
                guard let limit = Int(text), limit >= 0 else { throw .usage("--limit: '\(text)' is not a count") }
                parsed.limit = limit
            default:
                throw .usage("unknown option '\(argument)' (see prefetchctl --help)")
            }
        }
        return parsed
    }

    /// The operands, or lines of stdin when the only operand is `-`.
    func urls() -> AnySequence<String> {
        guard operands == ["-"] else { return AnySequence(operands) }
        return AnySequence(AnyIterator {
            while let line = readLine() {
                let trimmed = line.trimmingWhitespace()
                if !trimmed.isEmpty && !trimmed.hasPrefix("#") { return trimmed }
            }
            return nil
        })
    }
}

/// The words of a resized variant as the daemon reads them (docs/protocol.md, "variants"), checked here so that a
/// mistyped option is a usage error like any other.
enum VariantWords {
    static let fits: Set<String> = ["contain", "cover", "fill"]
    static let formats: Set<String> = ["jpeg", "jpg", "png"]

    /// `WxH` (or `WXH`), each side 1 to 10000.
    static func isSize(_ text: String) -> Bool {
        let sides = text.lowercased().split(separator: "x", omittingEmptySubsequences: false)
        return sides.count == 2 && sides.allSatisfy { side in
            !side.isEmpty && side.count <= 5 && side.allSatisfy { $0.isASCII && $0.isNumber }
                && (1...10_000).contains(Int(side) ?? 0)
        }
    }
}

extension String {
    func trimmingWhitespace() -> String {
        var slice = Substring(self)
        while let first = slice.first, first.isWhitespace { slice.removeFirst() }
        while let last = slice.last, last.isWhitespace { slice.removeLast() }
        return String(slice)
    }
}
