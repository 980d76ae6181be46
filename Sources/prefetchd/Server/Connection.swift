import Glibc
import PrefetchProtocol

/// The bytes of replies and events buffered for all clients and not yet written, kept by the connections.
final class OutputLedger {
    var unsent = 0
}

/// Who an answer goes to: the reply to a request, or a view's event about one of its rows.
enum Recipient {
    case request(RequestID?)
    case row(Int, url: String)
}

/// A `get` or a visible view row waiting for its URL: the key, the variant to make of it, who gets the answer, and
/// since when (monotonic ms, for the latency histogram).
struct Wait {
    let key: String
    let variant: VariantSpec?
    let recipient: Recipient
    let since: Int64
}

/// One client: its socket, a line reader and a write buffer, and all the daemon keeps for it (what it waits for,
/// its view, whether it watches), so that closing it lets go of everything at once.
final class Connection {
    let id: UInt64
    let fd: Int32
    var input = LineBuffer()
    private var output: [UInt8] = []
    private var written = 0
    /// Close once the output is flushed (after a framing error).
    var closeAfterFlush = false
    /// The client sent end of stream (a half-close): no more reading; close once its answers are flushed.
    var readClosed = false
    /// What this client waits for, by our request number (its `Waiter.request`).
    var waits: [UInt64: Wait] = [:]
    /// Its list and what it looks at, once it sent `view`.
    var view: View?
    /// Whether it asked for `watch` events.
    var isWatching = false
    /// Keys whose paths are in replies not yet written: the size limit does not evict their files until then.
    var handedOut: Set<String> = []
    /// Stop reading while this much output is unsent (a client that does not read its replies).
    static let outputHighWater = 4 * 1024 * 1024

    /// A watcher with more than this unsent misses events until it catches up: a slow reader gets fresh snapshots,
    /// not a queue of old ones.
    static let eventBacklog = 8 * 1024
    private let ledger: OutputLedger

    init(id: UInt64, fd: Int32, ledger: OutputLedger) {
        self.id = id
        self.fd = fd
        self.ledger = ledger
    }

    deinit { ledger.unsent -= unsent }

    /// Whether a request of this client still waits for its reply (view rows aside).
    var awaitsReplies: Bool {
        waits.values.contains { if case .request = $0.recipient { true } else { false } }
    }

    var unsent: Int { output.count - written }
    var hasPendingOutput: Bool { written < output.count }
    var isBackedUp: Bool { unsent > Self.outputHighWater }
    var isLagging: Bool { unsent > Self.eventBacklog }

    func send(_ line: [UInt8]) {
        guard !discarding else { return }
        output.append(contentsOf: line)
        output.append(0x0A)
        ledger.unsent += line.count + 1
    }

    /// Drops unsent output and whatever is sent from now on: the peer is gone.
    func discardOutput() {
        ledger.unsent -= unsent
        handedOut.removeAll()
        output.removeAll()
        written = 0
        discarding = true
    }

    private var discarding = false

    /// Reads what is available; nil at end of stream or on error.
    func read() -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = Glibc.read(fd, &buffer, buffer.count)
            if count > 0 { return Array(buffer[..<count]) }
            if count == 0 { return nil }
            if errno == EINTR { continue }
            return errno == EAGAIN ? [] : nil
        }
    }

    /// Writes as much buffered output as the socket takes; false when the peer is gone.
    func flush() -> Bool {
        defer { compact() }
        while written < output.count {
            let count = output.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + written, output.count - written, Int32(MSG_NOSIGNAL))
            }
            if count > 0 {
                written += count
                ledger.unsent -= count
                continue
            }
            if count < 0 && errno == EINTR { continue }
            return count < 0 && errno == EAGAIN
        }
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
}
