import FoundationEssentials
import Glibc
import PrefetchProtocol

/// Every option prefetchctl knows, by its long name. Which verb takes which is declared once, in `Verb.all`.
enum Option: String, CaseIterable, Sendable {
    case socket = "--socket", json = "--json", help = "--help", version = "--version"
    case timeout = "--timeout", maxStale = "--max-stale", offline = "--offline", output = "--output"
    case size = "--size", fit = "--fit", format = "--format", quality = "--quality", upscale = "--upscale"
    case wait = "--wait", now = "--now", all = "--all", limit = "--limit", ahead = "--ahead", behind = "--behind"

    /// The option a word names: a long name, or `-h` and `-o`.
    init?(word: String) {
        switch word {
        case "-h": self = .help
        case "-o": self = .output
        default: self.init(rawValue: word)
        }
    }

    /// Whether a value follows, as the next word or after `=`.
    var takesValue: Bool {
        switch self {
        case .socket, .timeout, .maxStale, .output, .size, .fit, .format, .quality, .limit, .ahead, .behind: true
        case .json, .help, .version, .offline, .upscale, .wait, .now, .all: false
        }
    }
}

/// The parsed command line: a verb, its operands, and flags.
struct Arguments {
    /// An option as it was given: spelled `-o` or `--output`, and its value.
    struct Given {
        var option: Option
        var spelled: String
        var value: String?
    }

    /// Nil when the command line names no verb (or only asks for the version).
    var verb: Verb?
    var operands: [String] = []
    /// The options in the order given.
    var given: [Given] = []
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
    /// The standard descriptors prefetchctl was started without (`<&-`, `>&-`, `2>&-`), filled since.
    var closedStreams: Set<Int32> = []
    /// Whether prefetchctl was started with stdin closed: `-` then has no list to read (a usage error).
    var stdinClosed: Bool { closedStreams.contains(0) }

    /// Reads the words; anything wrong is a usage error here, before anything is sent. The words are sorted into
    /// verb, operands and options first, so that an option the verb does not take is named as such, whatever its
    /// value and wherever it stands; then the values are read and the verb checks what it got.
    static func parse(_ words: [String], closedStreams: Set<Int32>) throws(CLIError) -> Arguments {
        var parsed = Arguments(closedStreams: closedStreams)
        var verbName: String?
        var rest = words[...]
        var onlyOperands = false
        while let word = rest.popFirst() {
            if onlyOperands || word == "-" || !word.hasPrefix("-") {
                if verbName == nil { verbName = word } else { parsed.operands.append(word) }
                continue
            }
            if word == "--" {
                onlyOperands = true
                continue
            }
            var name = word
            var inline: String?
            if let equals = word.firstIndex(of: "="), word.hasPrefix("--") {
                name = String(word[..<equals])
                inline = String(word[word.index(after: equals)...])
            }
            guard let option = Option(word: name) else {
                throw .usage("unknown option '\(word)'\(didYouMean(name, Option.allCases.map(\.rawValue))) (see prefetchctl --help)")
            }
            guard option.takesValue || inline == nil else { throw .usage("\(name) takes no value") }
            parsed.given.append(Given(option: option, spelled: name, value: option.takesValue ? inline ?? rest.popFirst() : nil))
        }
        parsed.version = parsed.given.contains { $0.option == .version }
        parsed.help = parsed.given.contains { $0.option == .help }
        guard !parsed.version, let verbName else { return parsed }
        guard let verb = Verb.named(verbName) else {
            throw .usage("unknown verb '\(verbName)'\(didYouMean(verbName, Verb.all.map(\.name))) (see prefetchctl --help)")
        }
        parsed.verb = verb
        if parsed.help { return parsed }
        try verb.refuseOptions(parsed.given)
        for given in parsed.given { try parsed.read(given) }
        try verb.check(parsed)
        return parsed
    }

    /// Checks the value of an option given and keeps it.
    private mutating func read(_ given: Given) throws(CLIError) {
        func value() throws(CLIError) -> String {
            guard let value = given.value else { throw .usage("\(given.spelled) needs a value") }
            return value
        }
        switch given.option {
        case .help, .version: break  // answered before any value is read
        case .json: json = true
        case .socket:
            let path = try value()
            guard !path.isEmpty else { throw .usage("--socket needs a path (it was empty)") }
            socket = path
        case .output:
            let destination = try value()
            if destination != "-" { try Self.checkDestination(destination, closedStreams: closedStreams) }
            output = destination
        case .timeout:
            let text = try value()
            // Decimal digits and one point: Double() also reads 0x10, 1e3 and inf. Deadlines count milliseconds: less
            // than one would be no time at all.
            let decimal = text.utf8.allSatisfy { (48...57).contains($0) || $0 == 46 } && text.utf8.count(where: { $0 == 46 }) <= 1
            guard decimal, let seconds = Double(text), seconds >= 0.001, seconds <= 31_536_000 else {
                throw .usage("--timeout: '\(text)' is not a number of seconds from 0.001 to a year")
            }
            timeout = seconds
        case .offline: offline = true
        case .all: all = true
        case .size:
            let text = try value()
            guard VariantWords.isSize(text) else { throw .usage("--size: '\(text)' is not WxH with W and H from 1 to 10000") }
            size = text
        case .fit:
            let text = try value()
            guard VariantWords.fits.contains(text.lowercased()) else { throw .usage("--fit: '\(text)' is not contain, cover or fill") }
            fit = text
        case .format:
            let text = try value()
            guard VariantWords.formats.contains(text.lowercased()) else { throw .usage("--format: '\(text)' is not jpeg or png") }
            format = text
        case .upscale: upscale = true
        case .quality:
            let text = try value()
            guard let number = Int(text), (1...100).contains(number) else {
                throw .usage("--quality: '\(text)' is not a number from 1 to 100")
            }
            quality = number
        case .wait: wait = true
        case .now: now = true
        case .maxStale:
            let text = try value()
            guard let seconds = Int64(text), seconds >= 0 else { throw .usage("--max-stale: '\(text)' is not a number of seconds") }
            maxStale = seconds
        case .ahead, .behind:
            let text = try value()
            guard let rows = Int(text), (0...1000).contains(rows) else {
                throw .usage("\(given.spelled): '\(text)' is not a number of rows from 0 to 1000")
            }
            if given.option == .ahead { ahead = rows } else { behind = rows }
        case .limit:
            let text = try value()
            guard let count = Int(text), count >= 0 else { throw .usage("--limit: '\(text)' is not a count") }
            limit = count
        }
    }

    /// A destination that cannot be a file (a directory, or in a directory that does not exist) or that this user
    /// cannot write (its permissions or its directory's, a read-only file system) is a usage error, found before
    /// prefetchctl connects: nothing is fetched for a copy that would fail.
    private static func checkDestination(_ destination: String, closedStreams: Set<Int32>) throws(CLIError) {
        guard !destination.isEmpty else { throw .usage("-o needs a file name (or - for stdout)") }
        if GetCommand.ownStreamEntry(destination) != nil {
            // Checked before prefetchctl opens anything: a number not open now may later be its socket to the daemon.
            guard let descriptor = GetCommand.ownDescriptor(named: destination) else {
                throw .usage("-o \(destination) names no descriptor (a number as /dev/fd lists it)")
            }
            let flags = fcntl(descriptor, F_GETFL)
            guard flags >= 0, !closedStreams.contains(descriptor) else {
                throw .usage("-o \(destination): descriptor \(descriptor) is not open")
            }
            guard flags & O_ACCMODE != O_RDONLY else {
                throw .usage("-o \(destination): descriptor \(descriptor) is open for reading only")
            }
        }
        var info = stat()
        let exists = stat(destination, &info) == 0
        if !exists, lstat(destination, &info) == 0 {
            throw .usage("-o \(destination) is a link to nothing: give -o the file itself")  // it may point into the cache
        }
        if exists, info.st_mode & S_IFMT == S_IFDIR {
            throw .usage("-o \(destination) is a directory: give the file to write")
        }
        let directory = destination.contains("/") ? String(destination[..<destination.lastIndex(of: "/")!]) : "."
        let parent = directory.isEmpty ? "/" : directory
        if stat(parent, &info) != 0 {
            throw .usage("-o \(destination): \(directory) does not exist")
        }
        if info.st_mode & S_IFMT != S_IFDIR {
            throw .usage("-o \(destination): \(directory) is not a directory")
        }
        // As the effective user and group, as open will be.
        if faccessat(AT_FDCWD, exists ? destination : parent, exists ? W_OK : W_OK | X_OK, AT_EACCESS) != 0 {
            let cause = String(cString: strerror(errno))
            throw .usage("-o \(destination) cannot be written: \(exists ? "" : "in \(parent): ")\(cause)")
        }
    }

    /// Why a verb that takes URLs got none: operands are checked before anything is sent, so the list read from stdin
    /// (`-`) was empty.
    func noURLs(_ verb: String) -> CLIError {
        .usage("\(verb) -: stdin held no URL (empty lines and lines that start with # are skipped)")
    }

    /// The daemon's socket: `--socket`, else as docs/cli.md says (also for commands that open a second connection).
    var socketPath: String {
        DefaultPaths.clientSocket(flag: socket, environment: ProcessInfo.processInfo.environment)
    }

    /// The operands, or lines of stdin when the only operand is `-`: one at a time, through `next`.
    func urls() -> () throws(CLIError) -> String? {
        guard operands == ["-"] else {
            var operands = operands.makeIterator()
            return { operands.next() }
        }
        let stdin = fdopen(0, "r").map { ListFile($0, name: "stdin") }
        return {
            while let text = try stdin?.nextLine() {
                if !text.isEmpty && !text.hasPrefix("#") { return text }
            }
            return nil
        }
    }
}

/// A list of URLs read line by line, each without its surrounding blanks. A line that is not UTF-8 text is refused
/// with its number: repaired (U+FFFD in place of the bytes) it would name another URL.
final class ListFile {
    private let file: UnsafeMutablePointer<FILE>
    private let name: String
    /// Lines of at most 1 MiB (/dev/zero has no newline). One longer than a request may be is still read: its URL
    /// is refused by name (`line_too_long`) and the URLs around it are sent.
    private var lines = LineBuffer(limit: 1 << 20)
    private var chunk = [UInt8](repeating: 0, count: 65536)
    private var ended = false
    private var number = 0

    init(_ file: UnsafeMutablePointer<FILE>, name: String) {
        self.file = file
        self.name = name
    }

    /// The next line's text; nil at the end. A line too long to send, or a read that fails (a directory), is a
    /// usage error, not the end of the list.
    func nextLine() throws(CLIError) -> String? {
        while true {
            switch ended ? lines.finish() : lines.next() {
            case .line(let bytes)?:
                number += 1
                return try Self.text(bytes, line: number, of: name)
            case .tooLong?:
                throw .usage("\(name), line \(number + 1): longer than \(lines.limit) bytes; a URL can never be sent "
                             + "if over \(maximumLineLength)")
            case nil:
                guard !ended else { return nil }
                let count = fread(&chunk, 1, chunk.count, file)
                if count > 0 {
                    lines.append(chunk[..<count])
                } else if ferror(file) != 0 {
                    throw .usage("\(name): cannot read: \(String(cString: strerror(errno)))")
                } else {
                    ended = true
                }
            }
        }
    }

    /// The text of line `number` of `name`, trimmed.
    static func text(_ bytes: some Collection<UInt8>, line number: Int, of name: String) throws(CLIError) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .usage("\(name), line \(number): not UTF-8 text; percent-encode the bytes of a URL (%FF)")
        }
        return text.trimmingWhitespace()
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
