import CSystem
import Glibc
import PrefetchProtocol
import QueueCore

/// What all clients hold together: bytes of replies and events not yet written, bytes of request lines not yet
/// finished, or requests waiting for their answers.
final class Tally {
    private(set) var total = 0

    func add(_ count: Int) { total += count }

    /// Written, handled or answered, or dropped with a connection that is gone.
    func release(_ count: Int) { total -= count }
}

/// Who an answer goes to: the reply to a request, or a view's event about one of its rows.
enum Recipient {
    case request(RequestID?)
    case row(Int, url: String)

    var isRequest: Bool { if case .request = self { true } else { false } }
}

/// A `get` or a visible view row waiting for its URL: the key, the variant to make of it, who gets the answer, and
/// since when (monotonic ms, for the latency histogram).
struct Wait {
    let key: String
    let variant: VariantSpec?
    let recipient: Recipient
    let since: Int64

    /// What waiting for `key` counts against the bounds on waiting requests: one, and one more for each KiB of a long
    /// URL, which the daemon holds meanwhile (65,536 waits of 8 KB URLs held 607 MB when each counted one).
    static func weight(of key: String) -> Int { 1 + key.utf8.count / 1024 }
}

/// One client: its socket, a line reader and a write buffer, and all the daemon keeps for it (what it waits for,
/// its view, whether it watches), so that closing it lets go of everything at once.
final class Connection {
    let id: UInt64
    private let fd: Int32
    private var input = LineBuffer()
    private var output: [UInt8] = []
    private var written = 0
    /// The peer is gone: what is sent from now on is dropped.
    private var discarding = false
    /// Close once the output is flushed (after a framing error).
    private var closing = false
    /// The client sent end of stream (a half-close): no more reading; close once its answers are flushed.
    private var inputEnded = false
    /// What this client waits for, by our request number (its `Waiter.request`).
    private var waits: [UInt64: Wait] = [:]
    private var lastRequest: UInt64 = 0
    /// Variants being made for this client, and who gets each (a reply or a view row), in the order asked.
    private var variantWaits: [Variants.Job: [Recipient]] = [:]
    /// Its list and what it looks at, once it sent `view`.
    private var openView: View?
    /// Whether it asked for `watch` events.
    private var watching = false
    /// Keys whose paths are in replies not yet written: the size limit does not evict their files until then.
    private var handedOut: Set<String> = []
    /// Stop reading while this much output is unsent (a client that does not read its replies).
    static let outputHighWater = 4 * 1024 * 1024

    /// A watcher with more than this unsent misses events until it catches up: a slow reader gets fresh snapshots,
    /// not a queue of old ones.
    static let eventBacklog = 8 * 1024
    private let outputLedger: Tally
    private let inputLedger: Tally
    /// Requests and visible rows waiting, of all clients.
    private let waitLedger: Tally
    /// A request line taken and left for a later turn.
    private var heldLine: [UInt8]?
    /// When the client's requests were last served (`Clients`' count of lines handled): clients whose lines wait for
    /// the next turn are served longest-waiting first.
    var lastServed: UInt64 = 0
    /// Since when (monotonic ms) the client holds an unfinished request line: since that line's first bytes came,
    /// or the bytes that finished the line before it.
    private(set) var unfinishedSince: Int64?

    init(id: UInt64, fd: Int32, output: Tally, input: Tally, waits: Tally) {
        self.id = id
        self.fd = fd
        outputLedger = output
        inputLedger = input
        waitLedger = waits
    }

    deinit {
        outputLedger.release(unsent)
        inputLedger.release(input.unfinished)
        waitLedger.release(waitCount)
    }

    // MARK: What it waits for

    /// Registers what the client now waits for: `key`, and the `variant` to make of it; the scheduler answers the
    /// waiter returned.
    func addWait(for key: String, variant: VariantSpec?, recipient: Recipient) -> Waiter {
        lastRequest += 1
        waits[lastRequest] = Wait(key: key, variant: variant, recipient: recipient, since: monotonicMilliseconds())
        weigh(Wait.weight(of: key))
        return Waiter(client: id, request: lastRequest)
    }

    /// Takes the wait `waiter` stands for; nil when it went (a hidden view row).
    @discardableResult
    func takeWait(_ waiter: Waiter) -> Wait? {
        guard let wait = waits.removeValue(forKey: waiter.request) else { return nil }
        weigh(-Wait.weight(of: wait.key))
        return wait
    }

    /// Takes every wait: the client closed, or the daemon is shutting down.
    func takeAllWaits() -> [Wait] {
        defer {
            weigh(-waits.values.reduce(0) { $0 + Wait.weight(of: $1.key) })
            waits.removeAll()
        }
        return Array(waits.values)
    }

    /// The keys it waits for: their files stay in the cache until then.
    var waitedKeys: [String] { waits.values.map(\.key) }

    /// Whether a request of this client still waits for its reply (view rows aside): for a URL, for a variant, or
    /// for an `evict --all` to end.
    var awaitsReplies: Bool {
        evictions > 0 || waits.values.contains { $0.recipient.isRequest }
            || variantWaits.values.contains { $0.contains { $0.isRequest } }
    }

    /// Its `evict --all` requests under way (they count as waiting requests).
    var evictions = 0 {
        didSet { weigh(evictions - oldValue) }
    }

    /// The most requests and visible rows one client may have waiting, by weight (`Wait.weight`): a million
    /// pipelined gets of one slow URL held 330 MB, then 407 MB of replies built in one turn.
    static let maximumWaits = 8_192
    /// The most all clients together may have waiting, by weight: 100 clients of 8,192 gets each would hold 800,000
    /// tasks, and 700 views of 1,000 visible rows 700,000.
    static let maximumWaitsInAll = 65_536

    /// Its requests and visible rows waiting for a URL or a variant, and its `evict --all` requests under way, each
    /// by its weight (`Wait.weight`).
    private var waitCount = 0

    /// Adds `weight` to this client's waits and to all clients' (a negative one takes it back).
    private func weigh(_ weight: Int) {
        waitCount += weight
        waitLedger.add(weight)
    }

    /// Why it may not have one more request waiting, if it may not.
    var waitsFull: WireError? {
        guard waitCount < Self.maximumWaits else {
            return WireError(.badRequest, "\(waitCount) requests of this client wait for their answers already (one more for "
                             + "each KiB of a long URL), the most one client may have waiting: read those first")
        }
        return allWaitsFull
    }

    /// Why no client may have more waiting now, if none may (a view's scroll included).
    var allWaitsFull: WireError? {
        guard waitLedger.total >= Self.maximumWaitsInAll else { return nil }
        return WireError(.busy, "\(waitLedger.total) requests and view rows of all clients wait for their answers "
                         + "already (one more for each KiB of a long URL), the most the daemon lets wait: ask again once "
                         + "some are answered")
    }

    /// `recipient` gets the variant `job` makes.
    func waitForVariant(_ job: Variants.Job, recipient: Recipient) {
        variantWaits[job, default: []].append(recipient)
        weigh(Wait.weight(of: job.key))
    }

    /// Takes who waits for `job`'s variant, in the order they asked.
    func takeVariantWaits(_ job: Variants.Job) -> [Recipient] {
        let recipients = variantWaits.removeValue(forKey: job) ?? []
        weigh(-recipients.count * Wait.weight(of: job.key))
        return recipients
    }

    /// Takes who waits for any variant: the daemon is shutting down.
    func takeAllVariantWaits() -> [Recipient] {
        defer {
            weigh(-variantWaits.reduce(0) { $0 + $1.value.count * Wait.weight(of: $1.key.key) })
            variantWaits.removeAll()
        }
        return variantWaits.values.flatMap { $0 }
    }

    /// Notes that a reply names `key`'s file: the size limit keeps it until the reply is written.
    func handOut(_ key: String) { handedOut.insert(key) }

    /// The keys named in replies not written yet.
    var keysHandedOut: Set<String> { handedOut }

    // MARK: Its view and its watch

    /// Its list and what it looks at, once it sent `view`.
    var view: View? { openView }

    func open(_ view: View) { openView = view }

    /// Takes its view away: the client closed, or replaced its list.
    func closeView() -> View? {
        defer { openView = nil }
        return openView
    }

    var isWatching: Bool { watching }

    func startWatching() { watching = true }

    // MARK: Reading and writing

    var unsent: Int { output.count - written }
    var hasPendingOutput: Bool { written < output.count }
    var isBackedUp: Bool { unsent > Self.outputHighWater }
    var isLagging: Bool { unsent > Self.eventBacklog }

    /// Whether the client will be closed once its output is written (after a framing error); nothing more is read.
    var closesAfterFlush: Bool { closing }

    func closeAfterFlush() { closing = true }

    /// Whether the client sent end of stream (or reading failed): nothing more is read.
    var hasInputEnded: Bool { inputEnded }

    /// Whether request lines are read but not handled yet.
    var hasBufferedInput: Bool { heldLine != nil || input.pending > 0 }

    /// Keeps a request line taken for a later turn (`Clients.serveInput`): the next one `nextLine` gives.
    func hold(_ line: [UInt8]) { heldLine = line }

    /// The next request line read, if a whole one is buffered; once the input ended, also a last one that came
    /// without its newline.
    func nextLine() -> LineBuffer.Line? {
        if let line = heldLine {
            heldLine = nil
            return .line(line)
        }
        if let line = input.next() { return line }
        guard inputEnded else { return nil }
        inputLedger.release(input.unfinished)
        unfinishedSince = nil
        return input.finish()
    }

    /// Bytes received after the last newline: a request line not finished yet.
    var unfinishedInput: Int { input.unfinished }

    func send(_ line: [UInt8]) {
        guard !discarding else { return }
        output.append(contentsOf: line)
        output.append(0x0A)
        outputLedger.add(line.count + 1)
    }

    /// Whether the peer is gone: its output is dropped, and only the requests it left that outlive it are served.
    var isAbandoned: Bool { discarding }

    /// Drops unsent output and whatever is sent from now on: the peer is gone.
    func discardOutput() {
        outputLedger.release(unsent)
        handedOut.removeAll()
        output.removeAll()
        written = 0
        discarding = true
    }

    /// Reads what is available into the line reader: the number of bytes, 0 when none is there yet, nil at end of
    /// stream or on error (then the input has ended).
    func readInput() -> Int? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = Glibc.read(fd, &buffer, buffer.count)
            if count > 0 {
                let unfinished = input.unfinished
                let endsALine = input.append(buffer[..<count])
                inputLedger.add(input.unfinished - unfinished)  // fewer when they finish a line
                if input.unfinished == 0 {
                    unfinishedSince = nil
                } else if endsALine || unfinishedSince == nil {
                    unfinishedSince = monotonicMilliseconds()
                }
                return count
            }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && errno == EAGAIN { return 0 }
            inputEnded = true
            return nil
        }
    }

    /// Writes as much buffered output as the socket takes; false when the peer is gone. Once all is written, the
    /// keys handed out are free again.
    func flush() -> Bool {
        defer { compact() }
        while written < output.count {
            let count = output.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + written, output.count - written, Int32(MSG_NOSIGNAL))
            }
            if count > 0 {
                written += count
                outputLedger.release(count)
                continue
            }
            if count < 0 && errno == EINTR { continue }
            return count < 0 && errno == EAGAIN
        }
        handedOut.removeAll()
        return true
    }

    /// Drops what was written: all of it, or, while a client keeps the socket full, the written part once it is
    /// the larger one (else the buffer of a steady stream of replies would only ever grow).
    private func compact() {
        if written == output.count {
            output.removeAll(keepingCapacity: output.count < 65536)
            written = 0
        } else if written >= 65536, written * 2 >= output.count {
            output.removeFirst(written)
            written = 0
        }
    }

    // MARK: The socket

    /// Watches the socket on `loop` for input.
    func register(on loop: EventLoop, handler: @escaping EventLoop.Handler) throws(SystemError) {
        try loop.add(fd, events: UInt32(EPOLLIN.rawValue), handler: handler)
    }

    /// What the loop watches the socket for from now on.
    func watch(_ events: UInt32, on loop: EventLoop) { loop.modify(fd, events: events) }

    /// Closes the socket, unwatched first.
    func close(on loop: EventLoop) {
        loop.remove(fd)
        Glibc.close(fd)
        inputLedger.release(input.unfinished)
        input = LineBuffer()
    }
}
