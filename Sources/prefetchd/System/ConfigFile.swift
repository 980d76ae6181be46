import Glibc

/// A configuration file of `key = value` lines; `#` starts a comment, blank lines are skipped. A UTF-8 byte order
/// mark at the start (as some Windows editors write) is skipped.
///
/// A value may be wrapped in double quotes (to keep a ` #` in it); a `#` after whitespace ends the value otherwise.
/// Keys are not checked here: `Options.parse` checks them against its table of settings.
struct ConfigFile {
    struct Entry: Equatable {
        let line: Int
        let key: String
        let value: String
    }

    let path: String
    let entries: [Entry]

    /// Reads and splits `path`; a missing file, a line without `=` or a key given twice throws naming the line.
    init(path: String) throws {
        self.path = path
        entries = try Self.parse(try Self.read(path), path: path)
    }

    static func parse(_ text: String, path: String) throws -> [Entry] {
        var entries: [Entry] = []
        var seen: [String: Int] = [:]
        let text = text.hasPrefix(byteOrderMark) ? text.dropFirst() : Substring(text)
        // Lines end at LF (or CR LF) only, as editors and `wc -l` count them: another line break (VT, FF, NEL,
        // U+2028, a lone CR) is a control character in the line.
        let lines = text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
        for (index, raw) in lines.enumerated() {
            let number = index + 1
            let line = trimmed(raw)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let equals = line.firstIndex(of: "=") else {
                let shown = visible(String(line.prefix(80))) + (line.count > 80 ? "…" : "")
                throw DaemonError("\(path):\(number): expected `key = value`, found '\(shown)'")
            }
            let key = trimmed(line[..<equals])
            guard !key.isEmpty, key.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) else {
                throw DaemonError("\(path):\(number): '\(visible(key))' is not a key (letters, digits and _)")
            }
            let value = try Self.value(line[line.index(after: equals)...], at: "\(path):\(number)")
            if Self.hasControlCharacter(value) {
                throw DaemonError("\(path):\(number): \(key): a control character in '\(visible(value))'")
            }
            if let first = seen[key] {
                throw DaemonError("\(path):\(number): \(key) is already set on line \(first)")
            }
            seen[key] = number
            entries.append(Entry(line: number, key: key, value: value))
        }
        return entries
    }

    private static let byteOrderMark = "\u{FEFF}"

    /// Whether `value` holds a control character (a newline, a NUL), which would cut it or its line short: refused in
    /// a line and in a flag alike.
    static func hasControlCharacter(_ value: String) -> Bool {
        value.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// `text` with the characters no one can see (controls, format characters such as a byte order mark or a
    /// zero-width space, odd spaces) shown as `<U+FEFF>`, so an error about them can be acted on.
    static func visible(_ text: String) -> String {
        var shown = ""
        for scalar in text.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .control, .format, .spaceSeparator, .lineSeparator, .paragraphSeparator, .privateUse, .unassigned,
                 .surrogate:
                guard scalar != " " else { shown += " "; continue }
                let hex = String(scalar.value, radix: 16, uppercase: true)
                shown += "<U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex + ">"
            default:
                shown.unicodeScalars.append(scalar)
            }
        }
        return shown
    }

    /// Whether `value` must be quoted to read back as it is: the reader ends a bare value at a # after whitespace (any
    /// whitespace, a no-break space too) and trims whitespace at its ends, and a quote first opens a quoted one.
    static func needsQuotes(_ value: String) -> Bool {
        let scalars = value.unicodeScalars
        guard let first = scalars.first, let last = scalars.last else { return false }
        if first.properties.isWhitespace || last.properties.isWhitespace || first == "\"" { return true }
        return commentStart(in: scalars[...]) != nil
    }

    /// The text after `=`: quoted, or up to a comment. Read by code point, not by character: a combining mark first
    /// would join the space before it (and go with it), a prepended mark last the closing quote after it.
    private static func value(_ text: Substring, at location: String) throws -> String {
        let text = trimmed(text.unicodeScalars)
        if text.first == "\"" {
            let body = text.dropFirst()
            guard let close = body.firstIndex(of: "\"") else { throw DaemonError("\(location): the quote is not closed") }
            let after = trimmed(body[body.index(after: close)...])
            guard after.isEmpty || after.first == "#" else {
                throw DaemonError("\(location): unexpected '\(String(after))' after the quoted value")
            }
            return String(body[..<close])
        }
        return String(trimmed(text[..<(commentStart(in: text) ?? text.endIndex)]))
    }

    /// Where a comment starts in a bare value: at a # first or after whitespace.
    private static func commentStart(in scalars: Substring.UnicodeScalarView) -> Substring.UnicodeScalarView.Index? {
        var previous: Unicode.Scalar?
        for index in scalars.indices {
            if scalars[index] == "#", previous?.properties.isWhitespace ?? true { return index }
            previous = scalars[index]
        }
        return nil
    }

    private static func trimmed(_ text: Substring.UnicodeScalarView) -> Substring.UnicodeScalarView {
        var slice = text
        while let first = slice.first, first.properties.isWhitespace { slice.removeFirst() }
        while let last = slice.last, last.properties.isWhitespace { slice.removeLast() }
        return slice
    }

    private static func trimmed<S: StringProtocol>(_ text: S) -> String {
        String(trimmed(Substring(text).unicodeScalars))
    }

    /// The whole file as UTF-8 text. Only a regular file, or `/dev/null` for none: SIGHUP reads it again, and a pipe
    /// would then be empty (every setting back to its default) and a FIFO would block the daemon until someone wrote
    /// to it. Opened without waiting, so that a FIFO is refused rather than waited for.
    private static func read(_ path: String) throws -> String {
        let fd = try syscall("open", path) { open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) }
        defer { close(fd) }
        var info = stat(), null = stat()
        _ = try syscall("fstat", path) { fstat(fd, &info) }
        let isNull = info.st_mode & S_IFMT == S_IFCHR && stat("/dev/null", &null) == 0 && info.st_rdev == null.st_rdev
        guard info.st_mode & S_IFMT == S_IFREG || isNull else {
            throw DaemonError("\(path): not a regular file (a pipe, a device or a directory): a configuration file is read "
                              + "again on SIGHUP; write the settings to a file")
        }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = try syscall("read", path) { Glibc.read(fd, &buffer, buffer.count) }
            if count == 0 { break }
            bytes += buffer[..<count]
            guard bytes.count <= 1 << 20 else { throw DaemonError("\(path): larger than 1 MiB; not a configuration file") }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw DaemonError("\(path): not UTF-8 text")
        }
        return text
    }
}
