import PrefetchProtocol

/// `queue`, `demote`, `promote`, `cancel`, `evict`: URLs streamed in parts sized by bytes (`URLParts`), one result
/// per URL, in the order given.
enum BatchCommand {
    /// Requests in flight at once.
    static let inFlight = 8

    /// A part of the list: sent and awaiting its reply, or with its results (and, for a summary, its counts).
    private struct Part {
        var id: Int64?
        /// The URLs sent, as given: results show them with any password hidden.
        var urls: [String] = []
        var results: [ItemResult]?
        var counts: [String: Int]?
        /// The daemon's error for the whole part (`queue`: a full disk, an index it cannot write): none of it queued.
        var refusal: WireError?
    }

    static func run(_ op: Operation, _ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        if op == .evict, arguments.all {
            let result = try client.call(Request(id: nil, op: .evict, all: true), BatchResult.self)
            guard (result.evicted ?? 0) >= 0 else { throw .unreachable("the daemon said it evicted \(result.evicted!) entries") }
            if arguments.json {
                Output.json(result)
            } else {
                Output.message("evicted " + Units.count(result.evicted ?? 0, "entry", "entries"))
            }
            return ExitCode.ok
        }
        // Watching starts before the first `queue` request, so no event about these URLs can be missed.
        let waiter = arguments.wait ? try QueueWait(arguments) : nil
        // A plain `queue` shows counts and errors only: the daemon sends just those (`summary`), not a result per URL.
        let summary = op == .queue && !arguments.json && waiter == nil
        var parts = URLParts(arguments.urls())
        var pending: [Part] = []
        var tally: [ItemStatus: Int] = [:]
        var exitCode = ExitCode.ok
        var unknownHidingPassword = false
        var exhausted = false
        var total = 0
        var answered = 0
        var unanswered = false
        /// URLs of `queue` parts the daemon refused whole, and its last such error: no more parts are sent after one.
        var refused = 0
        var refusal: WireError?
        func take(_ part: Part, _ results: [ItemResult]) {
            if let error = part.refusal {
                refused += part.urls.count
                refusal = error
                return
            }
            answered += part.urls.count
            // A daemon that does not know `summary` sends every result, and no counts. Counts were checked to add up
            // to the part's URLs, so the sums cannot overflow.
            for (status, count) in part.counts ?? [:] { tally[ItemStatus(rawValue: status), default: 0] += count }
            for (index, item) in results.enumerated() {
                if part.counts == nil { tally[item.status, default: 0] += 1 }
                let sent = index < part.urls.count ? part.urls[index] : item.url
                waiter?.track(item, sent: sent)
                if item.status == .unknown, Output.hidesPassword(sent) { unknownHidingPassword = true }
                if let error = item.error, item.status == .rejected || item.status == .busy {
                    exitCode = max(exitCode, item.status == .busy ? ExitCode.unreachable : ExitCode.rejected)
                    if !arguments.json { Output.message("\(item.url): \(error.code): \(error.message)") }
                }
                if arguments.json {
                    Output.json(item)
                } else if op != .queue {
                    Output.line("\(item.url) \(item.status.rawValue)")
                }
            }
        }
        func summarise() {
            guard op == .queue, !arguments.json, !tally.isEmpty else { return }
            // A status a newer daemon added follows the known ones.
            let known: [ItemStatus] = [.queued, .promoted, .busy, .already, .cached, .skipped, .rejected]
            let order = known + tally.keys.filter { !known.contains($0) }.sorted { $0.rawValue < $1.rawValue }
            Output.message(order.compactMap { status in tally[status].map { "\($0) \(status.rawValue)" } }.joined(separator: ", ")
                           + (waiter?.summary ?? ""))
        }
        func receive(deadline: Int64) throws(CLIError) -> (id: Int64?, line: [UInt8])? {
            if let waiter { try waiter.receive(client, deadline: deadline) } else { try client.receive(deadline: deadline) }
        }
        /// Takes the reply to a part; false when it answers none.
        func accept(_ reply: (id: Int64?, line: [UInt8])) throws(CLIError) -> Bool {
            guard let id = reply.id, let index = pending.firstIndex(where: { $0.id == id }) else { return false }
            let result: BatchResult
            do throws(CLIError) {
                result = try client.decode(BatchResult.self, reply.line)
            } catch .failed(let error) where op == .queue {
                // The parts before it and those taken after it are queued: they are counted, and this one said.
                pending[index].refusal = error
                pending[index].results = []
                return true
            }
            // A result per URL sent, or (asked for) counts of them all: a reply that leaves some out would drop them
            // unsaid. A daemon that does not know `summary` sends the results.
            let sent = pending[index].urls.count
            let counts = summary ? result.counts : nil
            let counted = counts.map { $0.values.allSatisfy { (0...Request.maximumBatch).contains($0) } ? $0.values.reduce(0, +) : -1 }
            guard (counted ?? result.results.count) == sent, result.results.count <= sent else {
                throw .unreachable("the daemon answered a request of \(Units.count(sent, "URL")) with "
                                   + Units.count(result.results.count, "result") + (counted.map { " and counts of \($0)" } ?? "")
                                   + ": not a reply this prefetchctl can trust")
            }
            pending[index].results = result.results
            pending[index].counts = counts
            return true
        }
        // A daemon stopped (SIGSTOP) or hung would be waited for for ever: it must take the requests and answer one
        // at least every `answerWithin` (a minute, or --timeout; queue's bounds the wait for the fetches instead).
        var deadline = monotonicNow() + client.answerWithin
        do throws(CLIError) {
            exchange: while true {
                while !exhausted, refusal == nil, pending.count < inFlight {
                    guard let urls = try parts.next() else {
                        exhausted = true
                        break
                    }
                    total += urls.count
                    do throws(CLIError) {
                        pending.append(Part(id: try client.send(Request(id: nil, op: op, urls: urls, now: arguments.now ? true : nil,
                                                                        summary: summary ? true : nil)), urls: urls))
                    } catch {
                        switch error {
                        case .failed(let refusal):
                            // Only a URL too long for any request line is refused before sending; it went alone.
                            pending.append(Part(urls: urls, results: urls.map {
                                ItemResult(url: Output.shown($0), status: .rejected, error: refusal)
                            }))
                        case .timeout:
                            unanswered = true
                            break exchange
                        default:
                            throw error
                        }
                    }
                }
                while let part = pending.first, let results = part.results {
                    pending.removeFirst()
                    take(part, results)
                }
                guard !pending.isEmpty else { break }
                guard let reply = try receive(deadline: deadline) else {
                    unanswered = true
                    break
                }
                if try accept(reply) { deadline = monotonicNow() + client.answerWithin }
            }
        } catch .unreachable(let why) where op == .queue && total > 0 {
            // What was acknowledged is queued durably: the replies the daemon wrote before it went are still to be
            // read, and said before the loss is.
            while let reply = try? receive(deadline: monotonicNow() + 1_000), (try? accept(reply)) != nil {}
            for part in pending { if let results = part.results { take(part, results) } }
            summarise()
            throw .unreachable(why + "; answers came for \(Units.count(answered, "URL")) of the \(total) sent (queued as said, "
                               + "durably); whether the daemon took the others is not known: run the same command again "
                               + "(those queued already are reported `already`)")
        }
        if unanswered {
            // Parts answered after the one that was not: their results too.
            for part in pending { if let results = part.results { take(part, results) } }
        }
        guard total > 0 || unanswered else { throw arguments.noURLs(op.rawValue) }
        if unknownHidingPassword { Output.message(Output.hiddenPasswordHint) }
        if let refusal {
            summarise()  // what was queued
            let said = arguments.json ? "their results above" : "the summary above"
            let rest = exhausted ? "" : ", and the rest of the list was not sent"
            throw .failed(WireError(code: refusal.code, message: "\(refused) of the \(total) URLs sent were not queued (the others "
                                    + "were, durably: \(said))\(rest); the daemon said: \(refusal.message)"))
        }
        if unanswered {
            summarise()  // what was acknowledged
            throw .timeout("prefetchd did not answer within \(Units.seconds(client.answerWithin)): is it stopped (SIGSTOP) "
                           + "or hung? Answers came for \(Units.count(answered, "URL")) of the \(total) sent; whether the "
                           + "daemon took the others is not known")
        }
        if let waiter {
            do {
                exitCode = max(exitCode, try waiter.wait(client))
            } catch {
                summarise()  // what was queued, before the timeout says what is still to come
                throw error
            }
        }
        summarise()
        return exitCode
    }
}

/// `queue --wait`: a `watch` connection, opened before the first `queue` request, follows every queued URL until it
/// finished or failed; one bar on stderr when that is a terminal. `failed` events are checked with `info` (a task that
/// is still there will retry), and so is everything still awaited when the daemon looks idle or nothing moved for
/// ten seconds (a watcher that falls behind misses events).
///
/// URLs are awaited by key, as events name them. A key that hides a password (`user:***@`) may stand for several
/// URLs that differ only in it: each URL sent is then awaited on its own, and an event for that key is checked with
/// `info` for each, by the URL as sent.
final class QueueWait {
    private enum Ending {
        case finished
        case failed
    }

    private let stream: EventStream
    private let json: Bool
    private let timeout: Double?
    private let deadline: Int64?
    private let line: StatusLine?
    private let glyphs = ProgressBar()
    private let started = monotonicNow()

    /// What is still awaited (a key, or for a key that hides a password a key and a URL as sent) → the URLs as
    /// shown (a password hidden).
    private var awaited: [String: [String]] = [:]
    /// What is awaited → a URL as it was sent, for `info`: the daemon does not know a key whose password is hidden.
    private var sent: [String: String] = [:]
    /// Keys that hide a password → what is awaited under them (`key NUL url`, see `hiddenKey(of:)`).
    private var hidden: [String: Set<String>] = [:]
    /// Endings seen for keys whose `queue` reply had not come yet.
    private var early: [String: Ending] = [:]
    private var lastError: [String: WireError] = [:]
    private var failures: [(url: String, error: WireError)] = []
    private var total = 0
    /// Finished and failed fetches seen while waiting.
    private var finished = 0
    private var failed = 0
    /// Answered at once by the queue reply: `cached`, or `skipped` (failed recently).
    private var cached = 0
    private var skipped = 0
    private var rate: Int64 = 0
    private var idle = false
    private var movedAt = monotonicNow()
    private var checkedAt: Int64 = 0
    private var toCheck: [String] = []
    private var listed: Set<String> = []
    private var checking: [Int64: String] = [:]

    init(_ arguments: Arguments) throws(CLIError) {
        stream = try EventStream(Client(socketPath: arguments.socketPath))
        json = arguments.json
        timeout = arguments.timeout
        deadline = arguments.timeout.map { monotonicNow() + Int64($0 * 1000) }
        line = StatusLine.isAvailable ? StatusLine() : nil
        if line != nil { StopSignal.install() }
    }

    /// Also when the wait ends in an error: the message that follows starts on a clean line.
    deinit { line?.clear() }

    /// `; 3 finished, 1 failed` for the summary line.
    var summary: String { "; \(finished) finished, \(failed) failed" }

    /// A `queue` result, and the URL sent for it: what to wait for.
    func track(_ item: ItemResult, sent url: String) {
        guard let key = item.key else { return }
        switch item.status {
        case .queued, .promoted, .busy, .already:  // busy: queued, as background work
            total += 1
            let awaiting = key.contains("***@") ? key + "\u{0}" + url : key
            awaited[awaiting, default: []].append(item.url)
            sent[awaiting] = sent[awaiting] ?? url
            if awaiting == key {
                if early.removeValue(forKey: key) != nil { check(key) }
            } else {
                hidden[key, default: []].insert(awaiting)
                // An ending seen early may be another URL's of the key: it stays for them.
                if early[key] != nil { check(awaiting) }
            }
        case .cached:
            total += 1
            cached += 1
        case .skipped:
            total += 1
            skipped += 1
            failures.append((item.url, item.error ?? WireError(.internal, "skipped: it failed recently")))
        default:
            break
        }
    }

    /// The next reply on `client` that is not one of ours, following the events meanwhile; nil when `deadline`
    /// passes first. The timeout waits for the list to be sent: it counts what is still to come of URLs the daemon
    /// acknowledged.
    func receive(_ client: Client, deadline: Int64) throws(CLIError) -> (id: Int64?, line: [UInt8])? {
        while monotonicNow() < deadline {
            try follow(client, timing: false)
            guard let reply = try client.receive(deadline: min(deadline, monotonicNow() + 100)) else { continue }
            if let id = reply.id, let key = checking.removeValue(forKey: id) {
                checked(key, reply.line, client)
                continue
            }
            return reply
        }
        return nil
    }

    /// Waits until nothing is awaited; names the failures; exit 1 when there were any.
    func wait(_ client: Client) throws(CLIError) -> Int32 {
        while !awaited.isEmpty {
            try follow(client, timing: true)
            guard let reply = try client.receive(deadline: monotonicNow() + 100) else { continue }
            if let id = reply.id, let key = checking.removeValue(forKey: id) { checked(key, reply.line, client) }
        }
        line?.clear()
        if line != nil { StopSignal.uninstall() }
        if !json {
            for failure in failures { Output.message("\(failure.url): \(failure.error.code): \(failure.error.message)") }
        }
        return failed + skipped > 0 ? ExitCode.failed : ExitCode.ok
    }

    private func follow(_ client: Client, timing: Bool) throws(CLIError) {
        line?.stopIfAsked()
        if timing, let deadline, monotonicNow() >= deadline {
            line?.clear()
            let left = awaited.values.reduce(0) { $0 + $1.count }
            throw .timeout("\(Units.count(left, "URL")) still not fetched after \(timeout!) s; \(left == 1 ? "it stays" : "they stay") queued")
        }
        while let next = try stream.next(deadline: monotonicNow()) {
            if let event = next.event { handle(event) }
        }
        let now = monotonicNow()
        if !awaited.isEmpty, toCheck.isEmpty, checking.isEmpty,
           (idle && now - checkedAt >= 1000) || now - movedAt >= 10_000 {
            checkedAt = now
            movedAt = now
            for key in awaited.keys { check(key) }
        }
        while checking.count < 32, let key = toCheck.popLast() {
            listed.remove(key)
            guard awaited[key] != nil, let url = sent[key] else { continue }
            checking[try client.send(Request(id: nil, op: .info, url: url))] = key
        }
        draw()
    }

    private func handle(_ event: Event) {
        switch event.event {
        case "snapshot":
            let ours = (event.transfers ?? []).filter { awaited[$0.url] != nil || hidden[$0.url] != nil }
            rate = ours.reduce(0) { $0 + $1.rate }
            if !ours.isEmpty { movedAt = monotonicNow() }
            idle = (event.fast.map { $0.running + $0.waiting } ?? 1) == 0 && (event.slow.map { $0.running + $0.waiting } ?? 1) == 0
                && event.backlog == 0
        case "started":
            if let url = event.url, awaited[url] != nil || hidden[url] != nil { movedAt = monotonicNow() }
        case "finished":
            guard let url = event.url else { return }
            lastError[url] = nil
            if let ambiguous = hidden[url] {
                ambiguous.forEach(check)
            } else if awaited[url] != nil {
                end(url, nil)
            } else {
                early[url] = .finished
            }
        case "failed":
            guard let url = event.url else { return }
            lastError[url] = event.error ?? WireError(.internal, "failed")
            if let ambiguous = hidden[url] {
                ambiguous.forEach(check)
            } else if awaited[url] != nil {
                check(url)
            } else {
                early[url] = .failed
            }
        default:
            break
        }
    }

    /// Asks `info` about `key`: a task means it is still to come.
    private func check(_ key: String) {
        guard !listed.contains(key) else { return }
        listed.insert(key)
        toCheck.append(key)
    }

    private func checked(_ key: String, _ reply: [UInt8], _ client: Client) {
        guard awaited[key] != nil, let info = try? client.decode(URLInfo.self, reply), info.task == nil else { return }
        if let shownKey = Self.hiddenKey(of: key) {
            // The events of a key that hides a password may be another URL's: only what info says counts, and the
            // last failure of the key when neither names one.
            let error = info.cached != nil ? nil : info.failure ?? lastError[shownKey] ?? WireError(.cancelled,
                "no longer queued and not cached (cancelled?)")
            return end(key, error)
        }
        if let error = info.failure ?? lastError[key] {
            end(key, error)
        } else if info.cached != nil {
            end(key, nil)
        } else {
            end(key, WireError(.cancelled, "no longer queued and not cached (cancelled?)"))
        }
    }

    /// The key an entry awaited once per URL sent stands under (`key NUL url`); nil for a plain key.
    private static func hiddenKey(of entry: String) -> String? {
        entry.firstIndex(of: "\u{0}").map { String(entry[..<$0]) }
    }

    private func end(_ key: String, _ error: WireError?) {
        guard let urls = awaited.removeValue(forKey: key) else { return }
        sent[key] = nil
        let shownKey = Self.hiddenKey(of: key) ?? key
        hidden[shownKey]?.remove(key)
        if hidden[shownKey]?.isEmpty == true { hidden[shownKey] = nil }
        movedAt = monotonicNow()
        lastError[key] = nil
        for url in urls {
            if let error {
                failed += 1
                failures.append((url, error))
            } else {
                finished += 1
            }
            if json { Output.json(ItemResult(url: url, key: shownKey, status: error == nil ? .finished : .failed, error: error)) }
        }
    }

    private func draw() {
        guard let line else { return }
        let now = monotonicNow()
        guard now - started >= GetProgress.delay else { return }
        let done = finished + cached
        let bad = failed + skipped
        let ended = done + bad
        let eta = ended > 0 && ended < total ? Units.duration((now - started) * Int64(total - ended) / Int64(ended) / 1000) : "--"
        let width = max(10, min(30, line.width - 50))
        line.show(glyphs.bar(total > 0 ? Double(ended) / Double(total) : 0, width: width)
                  + [Styled("  \(done)/\(total) done"), Styled(bad > 0 ? ", \(bad) failed" : "", "31"),
                     Styled("  " + Units.rate(rate) + "  ETA " + eta, "2")])
    }
}
