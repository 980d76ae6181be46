import FoundationEssentials
import Glibc
import PrefetchProtocol

/// `watch`: the daemon's event stream as a live view on a terminal, plain lines in a pipe, or raw JSON lines.
enum WatchCommand {
    static func run(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let stream = try EventStream(client)
        do throws(CLIError) {
            if arguments.json { return try raw(stream) }
            return Terminal.isTerminal(1) ? try live(stream) : try plain(stream)
        } catch {
            guard case .unreachable(let reason) = error else { throw error }
            throw .unreachable("prefetchd went away (\(reason)); stopped watching")
        }
    }

    /// `--json`: every line after the `watch` reply as it came (a control character, never valid raw in JSON, escaped).
    private static func raw(_ stream: EventStream) throws(CLIError) -> Int32 {
        while let next = try stream.next(deadline: nil) {
            guard Terminal.write(String(decoding: next.line, as: UTF8.self).forTerminal + "\n", to: 1) else { return ExitCode.ok }
        }
        return ExitCode.ok
    }

    /// Not a terminal: one line per start and end, and a lanes line when the counts change.
    private static func plain(_ stream: EventStream) throws(CLIError) -> Int32 {
        var lanes: String?
        while let next = try stream.next(deadline: nil) {
            guard let event = next.event, let text = line(event, lanes: &lanes) else { continue }
            guard Terminal.write(text.forTerminal + "\n", to: 1) else { return ExitCode.ok }
        }
        return ExitCode.ok
    }

    /// The plain line for `event`, if it deserves one; `lanes` remembers the last lanes line.
    static func line(_ event: Event, lanes: inout String?) -> String? {
        let clock = Units.clock(event.time)
        let url = event.url ?? "?"
        switch event.event {
        case "started":
            return "\(clock) started \(event.lane ?? "?") \(url)"
        case "finished":
            let took = event.duration.map { " in " + Units.decimal(Double($0) / 1000, places: 2) + " s" } ?? ""
            return "\(clock) finished \(event.lane ?? "?") \(url) \(event.bytes ?? 0) bytes\(took)"
        case "failed":
            return "\(clock) failed \(url) \(event.error?.code ?? "error"): \(event.error?.message ?? "")"
        case "snapshot":
            guard let fast = event.fast, let slow = event.slow else { return nil }
            let text = "lanes fast \(fast.running)/\(fast.width) running \(fast.waiting) waiting, slow \(slow.running)/"
                + "\(slow.width) running \(slow.waiting) waiting\(event.slowSuspended == true ? " suspended" : ""), "
                + "backlog \(event.backlog ?? 0)"
                + (event.background.map { $0.mode == "run" ? "" : ", background \($0.summary)" } ?? "")
            guard text != lanes else { return nil }
            lanes = text
            return "\(clock) \(text)"
        default:
            return nil
        }
    }

    /// A terminal: the live view, redrawn in place until `q`, Ctrl-C, a stop signal, or the daemon goes away.
    private static func live(_ stream: EventStream) throws(CLIError) -> Int32 {
        StopSignal.install()
        let keyboard = RawKeyboard(0)
        let screen = FullScreen(1)
        func restore() {
            screen.close()
            keyboard?.restore()
        }
        defer { restore() }
        let color = Terminal.usesColor(1)
        let glyphs = ProgressBar()
        var view = WatchScreen()
        var drawnAt: Int64 = 0
        var changed = true
        while true {
            if let number = StopSignal.pending {
                restore()
                StopSignal.resignal(number)
            }
            let keys = keyboard.map { $0.keys() } ?? []
            guard let keys, !keys.contains(where: { $0 == UInt8(ascii: "q") || $0 == UInt8(ascii: "Q") || $0 == 3 }) else {
                return ExitCode.ok  // q, Ctrl-C, or the terminal hung up
            }
            let now = monotonicNow()
            if (changed && now - drawnAt >= 50) || now - drawnAt >= 250 {
                let size = Terminal.size(1) ?? (80, 24)
                guard screen.draw(view.render(width: size.columns, height: size.rows, color: color, now: now, glyphs: glyphs)) else {
                    return ExitCode.ok
                }
                drawnAt = now
                changed = false
            }
            if let event = try stream.next(deadline: now + 100)?.event {
                view.apply(event)
                changed = true
            }
        }
    }
}

/// The live view's state (the last snapshot, transfers started since, the latest endings) and its drawing.
struct WatchScreen {
    struct Ending {
        var time: Int64
        var url: String
        var lane: String
        var failed: Bool
        var detail: String
    }

    static let logLength = 8

    private(set) var fast: StatusReport.Lane?
    private(set) var slow: StatusReport.Lane?
    private(set) var slowSuspended = false
    private(set) var background: BackgroundState?
    private(set) var backlog: Int64 = 0
    private(set) var transfers: [Event.Transfer] = []
    private(set) var endings: [Ending] = []
    private(set) var time: Int64 = 0

    mutating func apply(_ event: Event) {
        time = max(time, event.time)
        switch event.event {
        case "snapshot":
            fast = event.fast
            slow = event.slow
            slowSuspended = event.slowSuspended ?? false
            background = event.background
            backlog = event.backlog ?? 0
            transfers = event.transfers ?? []
        case "started":
            guard let url = event.url, !transfers.contains(where: { $0.url == url }) else { return }
            transfers.append(.init(url: url, lane: event.lane ?? "?", bytes: 0, total: nil, rate: 0))
        case "finished", "failed":
            guard let url = event.url else { return }
            transfers.removeAll { $0.url == url }
            let failed = event.event == "failed"
            let detail = failed
                ? "\(event.error?.code ?? "error"): \(event.error?.message ?? "")"
                : Units.bytes(event.bytes ?? 0) + (event.duration.map { " in " + Units.decimal(Double($0) / 1000, places: 1) + " s" } ?? "")
            endings.append(Ending(time: event.time, url: url, lane: event.lane ?? "?", failed: failed, detail: detail))
            if endings.count > Self.logLength { endings.removeFirst(endings.count - Self.logLength) }
        default:
            break
        }
    }

    /// The screen's lines, each fitted to `width` columns, at most `height` of them.
    func render(width: Int, height: Int, color: Bool, now: Int64, glyphs: ProgressBar) -> [String] {
        var head: [[Styled]] = [[Styled("prefetchd watch", "1"), Styled("  " + (time > 0 ? Units.clock(time) : "--:--:--")),
                                 Styled("  q quits", "2")]]
        if let fast, let slow {
            head.append(lane("fast", fast, "33"))
            head.append(lane("slow", slow, "36") + (slowSuspended ? [Styled("  suspended", "33")] : [])
                        + (background.map { $0.mode == "run" ? [] : [Styled("  " + $0.summary, "35")] } ?? []))
            head.append([Styled("backlog \(backlog) queued")])
        } else {
            head.append([Styled("waiting for the first snapshot", "2")])
        }
        head.append([])

        var body: [[Styled]] = []
        if transfers.isEmpty { body.append([Styled("no transfers running", "2")]) }
        var room = height - head.count
        for (index, transfer) in transfers.enumerated() {
            let lines = glyphs.transfer(transfer, width: width, now: now)
            let rest = transfers.count - index
            if body.count + lines.count > room - (rest > 1 ? 1 : 0) {
                body.append([Styled("… and \(rest) more", "2")])
                break
            }
            body += lines
        }
        room -= body.count

        var log: [[Styled]] = []
        let shown = min(endings.count, room - 2)
        if shown > 0 {
            log = [[], [Styled("recent", "1")]] + endings.suffix(shown).map { ending($0, width: width) }
        }
        return (head + body + log).prefix(max(1, height)).map { $0.rendered(width: width - 1, color: color) }
    }

    private func lane(_ name: String, _ lane: StatusReport.Lane, _ style: String) -> [Styled] {
        [Styled(name, style), Styled("  \(lane.running)/\(lane.width) running  \(lane.waiting) waiting")]
    }

    private func ending(_ ending: Ending, width: Int) -> [Styled] {
        let prefix = Units.clock(ending.time) + " "
        let word = Styled((ending.failed ? "failed" : "done").padded(to: 7), ending.failed ? "31" : "32")
        let used = prefix.count + 7 + 5 + 2 + ending.detail.count
        let url = ending.url.truncatedURL(to: max(16, width - 1 - used))
        return [Styled(prefix, "2"), word, Styled(ending.lane.padded(to: 5)), Styled(url), Styled("  " + ending.detail, "2")]
    }
}

/// A connection turned into a `watch` event stream (docs/protocol.md, "watch events").
final class EventStream {
    let client: Client
    private let decoder = JSONDecoder()

    /// Sends `watch` on `client` and waits for the daemon to agree; events follow.
    init(_ client: Client) throws(CLIError) {
        self.client = client
        let id = try client.send(Request(id: nil, op: .watch))
        let deadline = monotonicNow() + 10_000
        while true {
            guard let line = try client.nextLine(deadline: deadline) else { throw .timeout("the daemon did not answer `watch`") }
            guard let reply = try? decoder.decode(Reply<Watching>.self, from: Data(line)), reply.id == .number(id) else { continue }
            guard reply.ok else { throw .failed(reply.error ?? WireError(.internal, "watch was refused")) }
            return
        }
    }

    /// The next line as it came and, when it is one, the event it carries; nil when the deadline passes first.
    func next(deadline: Int64?) throws(CLIError) -> (line: [UInt8], event: Event?)? {
        guard let line = try client.nextLine(deadline: deadline) else { return nil }
        return (line, try? decoder.decode(Event.self, from: Data(line)))
    }
}
