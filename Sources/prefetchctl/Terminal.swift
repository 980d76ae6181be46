import Glibc
import Synchronization

/// The terminal prefetchctl may draw on: whether a descriptor is one, its size, colour, glyphs, whole writes.
enum Terminal {
    /// Whether `fd` is a terminal that takes escape sequences: not one whose `TERM` is `dumb` (an editor's shell
    /// buffer, where bars, colour and a full screen would print as text).
    static func isTerminal(_ fd: Int32) -> Bool {
        guard isatty(fd) == 1 else { return false }
        return getenv("TERM").map { String(cString: $0) != "dumb" } ?? true
    }

    /// Columns and rows of the terminal on `fd` (TIOCGWINSZ), read afresh on every call; nil when it is not one.
    static func size(_ fd: Int32) -> (columns: Int, rows: Int)? {
        var size = winsize()
        guard ioctl(fd, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return (Int(size.ws_col), Int(max(size.ws_row, 1)))
    }

    /// Colour on `fd` only when it is a terminal and `NO_COLOR` is unset or empty (no-color.org).
    static func usesColor(_ fd: Int32) -> Bool {
        guard isTerminal(fd) else { return false }
        if let value = getenv("NO_COLOR"), value.pointee != 0 { return false }
        return true
    }

    /// Whether the locale's character set is UTF-8 (block and braille glyphs); ASCII otherwise.
    static let isUTF8: Bool = {
        for name in ["LC_ALL", "LC_CTYPE", "LANG"] {
            guard let value = getenv(name), value.pointee != 0 else { continue }
            let text = String(cString: value).lowercased()
            return text.contains("utf-8") || text.contains("utf8")
        }
        return false
    }()

    /// Writes all of `text` to `fd` in as few calls as it takes; false when the descriptor is gone.
    @discardableResult
    static func write(_ text: String, to fd: Int32) -> Bool {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            offset += count
        }
        return true
    }
}

/// Stop requests by signal (SIGINT, SIGTERM, SIGHUP) while prefetchctl owns the terminal's state.
enum StopSignal {
    private static let received = Atomic<Int32>(0)
    /// Bit `n` set: signal `n` is ours to catch (it was not ignored when `install` ran).
    private static let caught = Atomic<UInt32>(0)
    private static let numbers = [SIGINT, SIGTERM, SIGHUP]

    /// From now on those signals only set a flag, so the caller can restore the terminal before it goes. A signal
    /// the parent set to be ignored stays ignored; the others are unblocked too (a mask inherited from the parent
    /// would otherwise hold them back for good).
    static func install() {
        var set = sigset_t()
        sigemptyset(&set)
        for number in numbers {
            let previous = signal(number) { StopSignal.received.store($0, ordering: .relaxed) }
            if let previous, unsafeBitCast(previous, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self) {
                signal(number, SIG_IGN)
                continue
            }
            caught.bitwiseOr(1 << UInt32(number), ordering: .relaxed)
            sigaddset(&set, number)
        }
        sigprocmask(SIG_UNBLOCK, &set, nil)
    }

    /// The signals act the default way again; one that arrived meanwhile is acted on now.
    static func uninstall() {
        let mask = caught.exchange(0, ordering: .relaxed)
        for number in numbers where mask & (1 << UInt32(number)) != 0 { signal(number, SIG_DFL) }
        if let number = pending { resignal(number) }
    }

    /// The signal that asked to stop, if any.
    static var pending: Int32? {
        let number = received.load(ordering: .relaxed)
        return number == 0 ? nil : number
    }

    /// Dies of `number` the default way (after the terminal was restored), so the shell sees why.
    static func resignal(_ number: Int32) -> Never {
        signal(number, SIG_DFL)
        raise(number)
        exit(128 + number)
    }
}

/// The keyboard in raw mode: keys arrive one by one, unechoed, Ctrl-C as byte 3 (ISIG off). The saved settings come
/// back at `restore()` or deinit.
final class RawKeyboard {
    private let fd: Int32
    private var saved = termios()
    private var active = false

    /// Nil when `fd` is not a terminal.
    init?(_ fd: Int32 = 0) {
        guard Terminal.isTerminal(fd), tcgetattr(fd, &saved) == 0 else { return nil }
        self.fd = fd
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG | IEXTEN)
        raw.c_iflag &= ~tcflag_t(IXON | ICRNL)
        withUnsafeMutableBytes(of: &raw.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        guard tcsetattr(fd, TCSANOW, &raw) == 0 else { return nil }
        active = true
    }

    deinit { restore() }

    func restore() {
        guard active else { return }
        active = false
        _ = tcsetattr(fd, TCSANOW, &saved)
    }

    /// The bytes typed since the last call, without waiting: empty when there are none, nil once the terminal is
    /// gone (hung up).
    func keys() -> [UInt8]? {
        guard active else { return [] }
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 0) > 0 else { return [] }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = read(fd, &buffer, buffer.count)
        if count == 0 || (count < 0 && errno != EINTR && errno != EAGAIN) { return nil }
        return count > 0 ? Array(buffer[..<count]) : []
    }
}

/// The alternate screen with the cursor hidden, redrawn in place (home, lines, clear the rest); `close()` or deinit
/// shows the cursor and the previous screen again.
final class FullScreen {
    private let fd: Int32
    private var open = true

    init(_ fd: Int32 = 1) {
        self.fd = fd
        Terminal.write("\u{1B}[?1049h\u{1B}[?25l\u{1B}[H\u{1B}[2J", to: fd)
    }

    deinit { close() }

    /// Draws `lines` (each already fitted to the width) from the top-left corner, clearing what was there; false
    /// when the terminal is gone.
    func draw(_ lines: [String]) -> Bool {
        guard open else { return false }
        let body = lines.joined(separator: "\u{1B}[K\r\n")
        return Terminal.write("\u{1B}[H" + body + "\u{1B}[K\u{1B}[J", to: fd)
    }

    func close() {
        guard open else { return }
        open = false
        Terminal.write("\u{1B}[0m\u{1B}[?25h\u{1B}[?1049l", to: fd)
    }
}

/// A piece of a line and its SGR attributes (`1` bold, `2` dim, `31` red, `32` green, …); nil is plain.
struct Styled {
    var text: String
    var style: String?

    init(_ text: String, _ style: String? = nil) {
        self.text = text.forTerminal
        self.style = style
    }
}

extension Array where Element == Styled {
    /// Columns the line takes (one per character: URLs, digits, block and braille glyphs are all one wide).
    var columns: Int { reduce(0) { $0 + $1.text.count } }

    /// The line clipped to `width` columns, with colour escapes when `color`.
    func rendered(width: Int, color: Bool) -> String {
        var left = Swift.max(0, width)
        var line = ""
        for piece in self where left > 0 {
            let text = piece.text.count > left ? String(piece.text.prefix(left)) : piece.text
            left -= text.count
            if color, let style = piece.style, !text.isEmpty {
                line += "\u{1B}[\(style)m" + text + "\u{1B}[0m"
            } else {
                line += text
            }
        }
        return line
    }
}

extension String {
    /// At most `width` characters, the middle replaced by `…` (`...` in ASCII) when it is too long: the host and
    /// the file name both stay in sight.
    func truncatedMiddle(to width: Int) -> String {
        guard count > width else { return self }
        let ellipsis = Terminal.isUTF8 ? "…" : "..."
        guard width > ellipsis.count + 1 else { return String(prefix(Swift.max(0, width))) }
        let room = width - ellipsis.count
        let head = room / 2
        return String(prefix(head)) + ellipsis + String(suffix(room - head))
    }

    /// A URL in at most `width` characters: whole when it fits, else the query cut short first (the host and the
    /// file name tell transfers apart), then the middle of the rest.
    func truncatedURL(to width: Int) -> String {
        guard count > width else { return self }
        guard let mark = firstIndex(of: "?") else { return truncatedMiddle(to: width) }
        let path = String(self[..<mark])
        let ellipsis = Terminal.isUTF8 ? "…" : "..."
        let room = width - path.count - 1 - ellipsis.count
        guard room >= 0 else { return path.truncatedMiddle(to: width) }
        return path + "?" + String(self[index(after: mark)...].prefix(room)) + ellipsis
    }

    func padded(to width: Int, right: Bool = false) -> String {
        let padding = String(repeating: " ", count: Swift.max(0, width - count))
        return right ? padding + self : self + padding
    }
}
