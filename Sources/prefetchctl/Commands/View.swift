import FoundationEssentials
import Glibc
import PrefetchProtocol

/// `view FILE|-`: hands a list to the daemon, then reads visible ranges (`FIRST LAST`, rows from 0) from stdin and
/// prints `ROW PATH` as visible rows become ready, until stdin ends and the rows of the last range are answered.
enum ViewCommand {
    static func run(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let source = arguments.operands[0]
        var input = Input(fd: 0)
        let urls = try list(source, stdin: &input)
        var session = Session(client: client, json: arguments.json)
        var template = Request(id: nil, op: .view, size: arguments.size, fit: arguments.fit, format: arguments.format,
                               quality: arguments.quality, upscale: arguments.upscale ? true : nil)
        try session.sendList(urls, template: template)
        template.size = nil
        template.fit = nil
        template.format = nil
        template.quality = nil
        template.upscale = nil
        template.ahead = arguments.ahead
        template.behind = arguments.behind
        return try session.serve(&input, template: template)
    }

    /// The URLs of FILE, or of stdin up to its first empty line; `#` comments and surrounding blanks are dropped.
    private static func list(_ source: String, stdin input: inout Input) throws(CLIError) -> [String] {
        var urls: [String] = []
        if source == "-" {
            var number = 0
            while let line = input.nextLine(blocking: true) {
                number += 1
                let text = try ListFile.text(line, line: number, of: "stdin")
                if text.isEmpty { break }
                if !text.hasPrefix("#") { urls.append(text) }
            }
            return urls
        }
        guard let file = fopen(source, "r") else {
            throw .usage("cannot read the list \(source): \(String(cString: strerror(errno)))")
        }
        defer { fclose(file) }
        let list = ListFile(file, name: source)
        while let text = try list.nextLine() {
            if !text.isEmpty && !text.hasPrefix("#") { urls.append(text) }
        }
        return urls
    }

    /// The conversation with the daemon: which rows are visible, which of those were answered, what failed.
    private struct Session {
        let client: Client
        let json: Bool
        let decoder = JSONDecoder()
        var rows = 0
        /// The visible rows (clamped to the list) and those of them answered since they became visible.
        var visible: ClosedRange<Int>?
        var answered: Set<Int> = []
        var failed = false
        /// The daemon's refusal of a range read from stdin (already reported); the exit code says so.
        var refusedRange: WireError?
        /// Rows whose URL the daemon refused up front (already reported).
        var rejected: Set<Int> = []
        /// Range requests sent and not answered yet: a reply may narrow `visible`.
        var pendingRanges: [Int64: ClosedRange<Int>] = [:]

        init(client: Client, json: Bool) {
            self.client = client
            self.json = json
        }

        /// Sends the list in parts sized by bytes (`URLParts`), waiting for each reply; the daemon counts the 100,000
        /// rows a view may hold over all of them.
        mutating func sendList(_ urls: [String], template: Request) throws(CLIError) {
            var remaining = urls.makeIterator()
            var parts = URLParts { remaining.next() }
            // An empty list is sent too: it replaces the view's list with no rows.
            var next: [String]? = try parts.next() ?? []
            var first = true
            while let part = next {
                var request = template
                request.urls = part
                request.append = first ? nil : true
                let result: ViewResult
                do throws(CLIError) {
                    result = try client.call(request, ViewResult.self)
                } catch {
                    // A URL too long for a request line goes alone and is refused before sending: name its row.
                    guard case .failed(let refusal) = error, refusal.knownCode == .lineTooLong else { throw error }
                    throw .failed(WireError(code: refusal.code, message: "row \(rows): \(refusal.message)"))
                }
                for row in result.rejected {
                    Output.message("row \(row.row) (\(Output.shown(row.url))): \(row.error.code): \(row.error.message)")
                    rejected.insert(row.row)
                }
                rows = result.rows
                first = false
                next = try parts.next()
            }
        }

        /// Reads ranges from stdin and events from the daemon until stdin ends and the visible rows are answered.
        mutating func serve(_ input: inout Input, template: Request) throws(CLIError) -> Int32 {
            while true {
                // Everything already readable first, then wait for more from either side.
                while let line = try client.nextLine(deadline: monotonicNow()) { try received(line) }
                if !input.ended {
                    while let line = input.nextLine(blocking: false) {
                        try rangeLine(String(decoding: line, as: UTF8.self), template: template)
                    }
                }
                if input.ended && allAnswered { return refusedRange.map { ExitCode.of($0) } ?? (failed ? ExitCode.failed : ExitCode.ok) }
                var fds = [pollfd(fd: client.descriptor, events: Int16(POLLIN), revents: 0)]
                if !input.ended { fds.append(pollfd(fd: input.fd, events: Int16(POLLIN), revents: 0)) }
                if poll(&fds, nfds_t(fds.count), -1) < 0 && errno != EINTR {
                    throw .unreachable("poll: \(String(cString: strerror(errno)))")
                }
            }
        }

        private var allAnswered: Bool {
            pendingRanges.isEmpty && (visible.map { $0.allSatisfy { answered.contains($0) } } ?? true)
        }

        private mutating func rangeLine(_ line: String, template: Request) throws(CLIError) {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "," })
            guard !fields.isEmpty else { return }
            guard fields.count == 2, let first = Int(fields[0]), let last = Int(fields[1]), first >= 0, last >= first else {
                Output.message("ignored '\(line)': a range is two row numbers, FIRST LAST (from 0, FIRST <= LAST)")
                return
            }
            var request = template
            request.first = first
            request.last = last
            pendingRanges[try client.send(request)] = first...last
        }

        private mutating func received(_ line: [UInt8]) throws(CLIError) {
            if let event = try? decoder.decode(Event.self, from: Data(line)), let row = event.row {
                if visible?.contains(row) == true { answered.insert(row) }
                if json {
                    write(String(decoding: line, as: UTF8.self).forTerminal)
                } else if let path = event.path {
                    write("\(row) \(path)")
                }
                if let error = event.error {
                    failed = true
                    guard !rejected.contains(row) else { return }
                    Output.message("row \(row) (\(event.url ?? "?")): \(error.code): \(error.message)")
                }
                return
            }
            guard let reply = try? decoder.decode(Reply<ViewResult>.self, from: Data(line)),
                  case .number(let id)? = reply.id, let range = pendingRanges.removeValue(forKey: id) else { return }
            guard let result = reply.result, reply.ok else {
                let error = reply.error ?? WireError(.internal, "no result")
                Output.message("range \(range.lowerBound) \(range.upperBound): \(error.code): \(error.message)")
                refusedRange = error
                return
            }
            // Rows past the end of the list never get an answer.
            let last = min(range.upperBound, result.rows - 1)
            visible = range.lowerBound <= last ? range.lowerBound...last : nil
            answered = answered.filter { visible?.contains($0) == true }
        }

        private func write(_ text: String) {
            if !Terminal.write(text + "\n", to: 1) { exit(ExitCode.ok) }
        }
    }
}

/// Lines of a descriptor read without stdio buffering, so `poll` sees what is still unread.
struct Input {
    let fd: Int32
    private var buffer = LineBuffer(limit: maximumLineLength)
    private(set) var ended = false

    init(fd: Int32) { self.fd = fd }

    /// The next line; without `blocking`, nil when none is complete yet.
    mutating func nextLine(blocking: Bool) -> [UInt8]? {
        while true {
            switch buffer.next() {
            case .line(let bytes): return bytes
            case .tooLong:
                Output.message("stdin: a line of over \(maximumLineLength) bytes; reading no more")
                ended = true
                buffer = LineBuffer()
                return nil
            case nil: break
            }
            guard !ended else { return nil }
            if !blocking {
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 0) > 0 else { return nil }
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let count = read(fd, &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                // The end: a last line without its newline still counts.
                ended = true
                if buffer.pending > 0 { buffer.append([0x0A]) }
                continue
            }
            buffer.append(chunk[..<count])
        }
    }
}
