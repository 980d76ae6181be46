import Glibc

/// The parsed command line: a verb, its operands, and flags.
struct Arguments {
    var verb: String?
    var operands: [String] = []
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
    /// `view`: rows after and before the visible ones to prefetch.
    var ahead: Int?
    var behind: Int?

    /// Flags that take a value; all others are switches.
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
            switch flag {
            case "--": onlyOperands = true
            case "-h", "--help": parsed.help = true
            case "--version": parsed.version = true
            case "--json": parsed.json = true
            case "--socket": parsed.socket = try value()
            case "-o", "--output": parsed.output = try value()
            case "--timeout":
                let text = try value()
                guard let seconds = Double(text), seconds > 0 else { throw .usage("--timeout: '\(text)' is not a positive number of seconds") }
                parsed.timeout = seconds
            case "--offline": parsed.offline = true
            case "--all": parsed.all = true
            case "--size": parsed.size = try value()
            case "--fit": parsed.fit = try value()
            case "--format": parsed.format = try value()
            case "--upscale": parsed.upscale = true
            case "--quality":
                let text = try value()
                guard let quality = Int(text), (1...100).contains(quality) else {
                    throw .usage("--quality: '\(text)' is not a number from 1 to 100")
                }
                parsed.quality = quality
            case "--wait": parsed.wait = true
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

extension String {
    func trimmingWhitespace() -> String {
        var slice = Substring(self)
        while let first = slice.first, first.isWhitespace { slice.removeFirst() }
        while let last = slice.last, last.isWhitespace { slice.removeLast() }
        return String(slice)
    }
}
