import FoundationEssentials
import Glibc
import PrefetchProtocol

/// A progress bar or a spinner as text: block glyphs on a UTF-8 terminal, ASCII elsewhere.
struct ProgressBar {
    var unicode = Terminal.isUTF8

    /// A bar `width` columns wide (brackets included in ASCII) filled to `fraction`.
    func bar(_ fraction: Double, width: Int) -> [Styled] {
        let inner = unicode ? width : width - 2
        guard inner > 0 else { return [] }
        let filled = Int((max(0, min(1, fraction)) * Double(inner)).rounded(.down))
        let cells = [Styled(String(repeating: unicode ? "█" : "#", count: filled), "32"),
                     Styled(String(repeating: unicode ? "░" : "-", count: inner - filled), "2")]
        return unicode ? cells : [Styled("[")] + cells + [Styled("]")]
    }

    /// One frame of a spinner, advancing ten times a second.
    func spinner(at milliseconds: Int64) -> String {
        let frames = unicode ? ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"] : ["|", "/", "-", "\\"]
        return frames[Int((milliseconds / 100) % Int64(frames.count))]
    }

    /// A running transfer: bar and percentage (a spinner when the size is unknown), bytes, rate, lane and URL —
    /// one line from 72 columns up, two (URL above) when narrower.
    func transfer(_ transfer: Event.Transfer, width: Int, now: Int64) -> [[Styled]] {
        let lane = Styled(transfer.lane.padded(to: 4), transfer.lane == "fast" ? "33" : "36")
        let wide = width >= 72
        let gap = wide ? "  " : " "
        let bytes = Units.bytes(transfer.bytes) + (transfer.total.map { (wide ? " / " : "/") + Units.bytes($0) } ?? "")
        let numbers = [Styled(gap + bytes.padded(to: wide ? 19 : 13, right: true)),
                       Styled(gap + Units.rate(transfer.rate).padded(to: 10, right: true), "2")]
        let lead = wide ? [lane, Styled(" ")] : [Styled("  ")]
        let urlWidth = wide ? max(30, (width - 46) / 2) : 0
        let barWidth = max(6, min(40, width - 1 - lead.columns - 5 - numbers.columns - (wide ? 2 + urlWidth : 0)))
        var progress: [Styled]
        if let total = transfer.total, total > 0 {
            let fraction = Double(transfer.bytes) / Double(total)
            progress = bar(fraction, width: barWidth)
                + [Styled(" " + "\(Units.percent(fraction))%".padded(to: 4, right: true))]
        } else {
            progress = [Styled(spinner(at: now), "36"), Styled(String(repeating: " ", count: barWidth + 4))]
        }
        let line = lead + progress + numbers
        if wide {
            return [line + [Styled("  " + transfer.url.truncatedURL(to: width - 3 - line.columns))]]
        }
        return [[lane, Styled(" " + transfer.url.truncatedURL(to: width - 6))], line]
    }
}

/// Human units: decimal byte sizes, rates, short durations, local clock time.
enum Units {
    /// `60 s`, `0.5 s`: milliseconds as seconds, without a fraction that is zero.
    static func seconds(_ milliseconds: Int64) -> String {
        milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(Double(milliseconds) / 1000) s"
    }

    /// `1 URL`, `2 URLs`, `0 entries`: the count and the noun that agrees with it.
    static func count(_ count: some BinaryInteger, _ singular: String, _ plural: String? = nil) -> String {
        "\(count) " + (count == 1 ? singular : plural ?? singular + "s")
    }

    /// `999 B`, `1.2 kB`, `34.5 MB`, `123 MB`, `1.2 GB`.
    static func bytes(_ count: Int64) -> String {
        guard count >= 1000 else { return "\(count) B" }
        let units = ["kB", "MB", "GB", "TB", "PB", "EB"]
        var value = Double(count) / 1000
        var index = 0
        while value >= 999.95, index < units.count - 1 {
            value /= 1000
            index += 1
        }
        return decimal(value, places: value < 99.95 ? 1 : 0) + " " + units[index]
    }

    static func rate(_ bytesPerSecond: Int64) -> String { bytes(bytesPerSecond) + "/s" }

    /// `value` with exactly `places` decimals (0 to 3), rounded half up.
    static func decimal(_ value: Double, places: Int) -> String {
        let scale: Int64 = [1, 10, 100, 1000][max(0, min(3, places))]
        let scaled = Int64((max(0, value) * Double(scale)).rounded())
        guard places > 0 else { return "\(scaled)" }
        let fraction = String(scaled % scale)
        return "\(scaled / scale)." + String(repeating: "0", count: places - fraction.count) + fraction
    }

    /// `42s`, `3m04s`, `1h02m`.
    static func duration(_ seconds: Int64) -> String {
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        if seconds < 60 { return "\(max(0, seconds))s" }
        if seconds < 3600 { return "\(seconds / 60)m\(two(seconds % 60))s" }
        return "\(seconds / 3600)h\(two(seconds / 60 % 60))m"
    }

    /// `duration(_:)` of a computed number of seconds, rounded up and clamped (the numbers come from the daemon).
    static func duration(seconds: Double) -> String {
        duration(Int64(max(0, min(360_000_000, seconds.rounded(.up)))))
    }

    /// A fraction as a whole percentage from 0 to 100.
    static func percent(_ fraction: Double) -> Int { Int(max(0, min(1, fraction)) * 100) }

    /// `HH:MM:SS` in local time.
    static func clock(_ unixMilliseconds: Int64) -> String {
        var seconds = time_t(unixMilliseconds / 1000)
        var parts = tm()
        localtime_r(&seconds, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }

    static func wallClock() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}

/// One line on stderr rewritten in place (carriage return, text, clear to the end) and cleared when done. Drawn only
/// when stderr is a terminal; at most ten times a second.
final class StatusLine {
    private let fd: Int32 = 2
    private let color = Terminal.usesColor(2)
    private var shown = false
    private var drawnAt: Int64 = 0

    static var isAvailable: Bool { Terminal.isTerminal(2) }

    /// The columns to use, read afresh: three short of the terminal's width, so that the `^C` the terminal echoes
    /// does not wrap, and clearing the line clears it too.
    var width: Int { (Terminal.size(fd)?.columns ?? 80) - 2 }

    func show(_ line: [Styled], force: Bool = false) {
        let now = monotonicNow()
        guard force || now - drawnAt >= 100 else { return }
        drawnAt = now
        shown = true
        Terminal.write("\r" + line.rendered(width: width - 1, color: color) + "\u{1B}[K", to: fd)
    }

    func clear() {
        guard shown else { return }
        shown = false
        Terminal.write("\r\u{1B}[K", to: fd)
    }

    /// Clears the line and dies of the signal that asked to stop, if one did.
    func stopIfAsked() {
        guard let number = StopSignal.pending else { return }
        clear()
        StopSignal.resignal(number)
    }
}

/// `get` of one URL with stderr on a terminal: after half a second without an answer, a second connection watches the
/// daemon and one bar follows that URL's transfer until the answer comes.
final class GetProgress {
    static let delay: Int64 = 500

    private let url: String
    private let socketPath: String
    private let started = monotonicNow()
    private let line = StatusLine()
    private let glyphs = ProgressBar()
    private var stream: EventStream?
    private var key: String?
    private var gaveUp = false
    private var transfer: Event.Transfer?

    /// Nil unless exactly one URL is asked for and stderr is a terminal.
    init?(urls: [String], arguments: Arguments) {
        guard urls.count == 1, StatusLine.isAvailable else { return nil }
        url = urls[0]
        socketPath = arguments.socketPath
    }

    /// Like `client.receive(_:deadline:)`, drawing the bar meanwhile; the line is cleared before this returns.
    func receive<T: Codable & Sendable>(_ type: T.Type, from client: Client, deadline: Int64?) throws(CLIError)
        -> (id: Int64, answer: Result<T, WireError>)? {
        StopSignal.install()
        defer {
            line.clear()
            StopSignal.uninstall()
        }
        while true {
            line.stopIfAsked()
            let now = monotonicNow()
            if let deadline, now >= deadline { return nil }
            if gaveUp { return try client.receive(type, deadline: deadline) }
            let wake = stream == nil ? started + Self.delay : now + 100
            if let reply = try client.receive(type, deadline: deadline.map { min($0, wake) } ?? wake) { return reply }
            if stream == nil, monotonicNow() >= started + Self.delay { open() }
            follow()
        }
    }

    /// The watching connection; any trouble only means no bar.
    private func open() {
        do throws(CLIError) {
            let client = try Client(socketPath: socketPath)
            key = try client.call(Request(id: nil, op: .info, url: url), URLInfo.self).key
            stream = try EventStream(client)
        } catch {
            gaveUp = true
        }
    }

    private func follow() {
        guard let stream, let key else { return }
        do throws(CLIError) {
            while let next = try stream.next(deadline: monotonicNow()) {
                guard let event = next.event else { continue }
                switch event.event {
                case "snapshot": transfer = event.transfers?.first { $0.url == key }
                case "started" where event.url == key:
                    transfer = .init(url: key, lane: event.lane ?? "fast", bytes: 0, total: nil, rate: 0)
                default: break
                }
            }
        } catch {
            self.stream = nil
            gaveUp = true
            return
        }
        draw()
    }

    private func draw() {
        let now = monotonicNow()
        guard let transfer else {
            let waiting = [Styled(glyphs.spinner(at: now), "36"), Styled(" waiting for a fetch slot  ")]
            return line.show(waiting + [Styled(url.truncatedURL(to: max(12, line.width - 1 - waiting.columns)), "2")])
        }
        var pieces: [Styled]
        if let total = transfer.total, total > 0 {
            let fraction = Double(transfer.bytes) / Double(total)
            pieces = glyphs.bar(fraction, width: max(10, min(30, line.width - 60)))
                + [Styled(" \(Units.percent(fraction))%  \(Units.bytes(transfer.bytes)) / \(Units.bytes(total))")]
            let eta = transfer.rate > 0 ? "  ETA " + Units.duration(seconds: (Double(total) - Double(transfer.bytes)) / Double(transfer.rate)) : ""
            pieces.append(Styled("  " + Units.rate(transfer.rate) + eta, "2"))
        } else {
            pieces = [Styled(glyphs.spinner(at: now), "36"), Styled(" " + Units.bytes(transfer.bytes)),
                      Styled("  " + Units.rate(transfer.rate), "2")]
        }
        line.show(pieces + [Styled("  " + url.truncatedURL(to: max(12, line.width - 3 - pieces.columns)))])
    }
}
