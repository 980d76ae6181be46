import CSystem
import FoundationEssentials
import Glibc
import PrefetchProtocol
import QueueCore

/// The clients: the listening socket and every connection, and the work of serving them. It admits a peer (the
/// access policy, the descriptor budget), reads request lines within a time budget per client and turn, writes the
/// replies at the end of a turn, and closes clients that left or do not read. What a request asks is the Daemon's
/// (`onLine`); what a client holds is let go of through `onClose`.
final class Clients {
    private let loop: EventLoop
    private(set) var connections: [UInt64: Connection] = [:]
    /// What all connections hold unsent (`outputBudget` bounds it).
    private let output = OutputLedger()
    var access: AccessPolicy
    /// The most unsent output all clients may hold; the ones holding the most are closed beyond it.
    var outputBudget: Int
    /// Descriptors kept for everything but clients (the daemon's files, transfers, workers).
    var reservedDescriptors = 0
    /// RLIMIT_NOFILE.
    var descriptorLimit = 1024
    /// A request line from a client.
    var onLine: (_ line: [UInt8], _ connection: Connection) -> Void = { _, _ in }
    /// A client is closed: what the daemon keeps for it goes.
    var onClose: (Connection) -> Void = { _ in }
    /// A client that left without reading had its last requests carried out (its `queue`s are to be made durable).
    var onAbandoned: () -> Void = {}

    private var listenFD: Int32 = -1
    private var nextClientID: UInt64 = 0
    /// Connections with output to write at the end of the turn.
    private var dirty: Set<UInt64> = []
    /// Connections with request lines read but not handled yet: their turn ran out (see `serveInput`); served on the
    /// next turn.
    private var pendingInput: Set<UInt64> = [] {
        didSet { if !pendingInput.isEmpty { inputTimer.schedule(at: 0) } }
    }
    private var inputTimer: LoopTimer!
    /// Watches the listener again after running out of descriptors.
    private var acceptTimer: LoopTimer!
    /// How long one connection's requests may keep the loop per turn (ms), so that transfers and other clients
    /// are served in between however many requests a client sends at once.
    private static let inputTimePerTurn: Int64 = 5
    /// At most this much of what a departed client left unread is still served.
    private static let abandonedInputLimit = 1 << 20

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    init(loop: EventLoop, access: AccessPolicy, outputBudget: Int) {
        self.loop = loop
        self.access = access
        self.outputBudget = outputBudget
        inputTimer = loop.makeTimer { [unowned self] in
            for id in pendingInput {
                pendingInput.remove(id)
                if let connection = connections[id] { serveInput(connection) }
            }
        }
        acceptTimer = loop.makeTimer { [unowned self] in
            if listenFD >= 0 { loop.modify(listenFD, events: UInt32(EPOLLIN.rawValue)) }
        }
    }

    /// How many clients may be connected at once: what the descriptor limit leaves beyond `reservedDescriptors`.
    var clientLimit: Int { max(1, descriptorLimit - reservedDescriptors) }

    func listen(on fd: Int32) throws(SystemError) {
        listenFD = fd
        try loop.add(fd, events: UInt32(EPOLLIN.rawValue)) { [unowned self] _ in self.acceptClients() }
    }

    /// Admits no one from now on; the socket is closed.
    func stopListening() {
        guard listenFD >= 0 else { return }
        loop.remove(listenFD)
        Glibc.close(listenFD)
        listenFD = -1
    }

    // MARK: Sending

    /// Every line to a client goes out here, passwords in URLs hidden (`user:***@`): replies, events, errors. It is
    /// written at the end of the turn (`flush`).
    func send<T: Encodable>(_ connection: Connection, _ message: T) {
        do {
            connection.send(CanonicalURL.redactingUserinfo(in: Array(try Self.encoder.encode(message))))
        } catch {
            Log.error("cannot encode a reply: \(error)")
        }
        dirty.insert(connection.id)
    }

    /// At the end of a turn: writes what the turn's replies and events left for each client, then closes the clients
    /// over the output budget.
    func flush() {
        // Flushing may make more connections dirty (a departed client's requests answer others): until none is.
        while !dirty.isEmpty {
            let flushing = dirty
            dirty.removeAll()
            for id in flushing { flushConnection(id) }
        }
        if output.unsent > outputBudget { shedOutput() }
    }

    /// At shutdown: what can be written at once, is.
    func flushAllOnce() {
        for connection in connections.values { _ = connection.flush() }
    }

    // MARK: Accepting

    private func acceptClients() {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                if errno == EMFILE || errno == ENFILE {
                    // Out of descriptors: stop watching the listener for a moment instead of spinning on it.
                    Log.warning("accept: \(String(cString: strerror(errno))); refusing new clients for 100 ms "
                                + "(\(connections.count) connected)")
                    loop.modify(listenFD, events: 0)
                    acceptTimer.schedule(at: monotonicMilliseconds() + 100)
                } else if errno != EAGAIN {
                    Log.warning("accept: \(String(cString: strerror(errno)))")
                }
                return
            }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            do {
                let peer = try AccessPolicy.peer(of: fd)
                guard access.admits(peer, on: fd) else {
                    let reason = access.refusal(peer) + "; ask the administrator to add you to allowed_users or allowed_groups"
                    AccessPolicy.refuse(fd: fd, peer: peer, error: WireError(.unauthorized, reason))
                    Glibc.close(fd)
                    continue
                }
                guard connections.count < clientLimit else {
                    AccessPolicy.refuse(fd: fd, peer: peer, error: WireError(.tooManyClients,
                        "\(connections.count) clients are connected, as many as the descriptor limit leaves room for "
                        + "(RLIMIT_NOFILE \(descriptorLimit), kept for the transfers and the daemon's own files); try again later"))
                    Glibc.close(fd)
                    continue
                }
            } catch {
                AccessPolicy.refuse(fd: fd, peer: nil, error: WireError(.unauthorized, "cannot check the peer: \(error)"))
                Glibc.close(fd)
                continue
            }
            nextClientID += 1
            let connection = Connection(id: nextClientID, fd: fd, ledger: output)
            do {
                try loop.add(fd, events: UInt32(EPOLLIN.rawValue)) { [unowned self] events in
                    self.connectionReady(connection, events)
                }
            } catch {
                Log.warning("\(error)")
                Glibc.close(fd)
                continue
            }
            connections[connection.id] = connection
            send(connection, Greeting())
        }
    }

    // MARK: Reading

    private func connectionReady(_ connection: Connection, _ events: UInt32) {
        if events & UInt32(EPOLLOUT.rawValue) != 0 { dirty.insert(connection.id) }
        guard events & UInt32(EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0,
              !connection.closeAfterFlush else { return }
        if connection.readClosed {
            // Only a hang-up or an error gets here (reading stopped): the client is gone both ways.
            return close(connection)
        }
        guard !pendingInput.contains(connection.id) else { return }
        serveInput(connection)
    }

    /// Handles the connection's request lines, reading more when none is buffered, for at most `inputTimePerTurn`;
    /// what is left waits for the next turn. A client that does not read its replies is not served until it does
    /// (`flushConnection` picks it up again).
    private func serveInput(_ connection: Connection) {
        let until = monotonicMilliseconds() + Self.inputTimePerTurn
        while monotonicMilliseconds() <= until {
            guard !connection.isBackedUp else { return }
            switch connection.input.next() {
            case .line(let text)?:
                onLine(text, connection)
                if connection.closeAfterFlush || connections[connection.id] == nil { return }
                continue
            case .tooLong?:
                send(connection, Reply<Ignored>(id: nil, error: WireError(
                    .lineTooLong, "a request line exceeded \(maximumLineLength) bytes without a newline; closing")))
                connection.closeAfterFlush = true
                return
            case nil:
                break
            }
            guard let bytes = connection.read() else {
                // End of stream: the requests already read still get their answers (`printf … | nc -U -N`), then
                // the connection closes (flushConnection). A reset or a full close fails the flush and closes.
                connection.readClosed = true
                dirty.insert(connection.id)
                return
            }
            if bytes.isEmpty { return }
            connection.input.append(bytes)
        }
        pendingInput.insert(connection.id)
    }

    /// The client went away without reading its replies: the requests it sent before it left are still carried out
    /// (a `queue` is acknowledged work, a `get`'s fetch goes on), their replies dropped; then the connection closes.
    private func abandon(_ connection: Connection) {
        connection.discardOutput()
        var budget = Self.abandonedInputLimit
        while budget > 0, !connection.closeAfterFlush, connections[connection.id] != nil {
            switch connection.input.next() {
            case .line(let text)?:
                onLine(text, connection)
                continue
            case .tooLong?:
                budget = 0
                continue
            case nil:
                break
            }
            guard let bytes = connection.read(), !bytes.isEmpty else { break }
            budget -= bytes.count
            connection.input.append(bytes)
        }
        close(connection)
        onAbandoned()
    }

    // MARK: Writing and closing

    /// Over the output budget: the clients holding the most unread output are disconnected until it fits again.
    private func shedOutput() {
        let share = outputBudget / max(1, connections.count)
        for connection in connections.values.sorted(by: { $0.unsent > $1.unsent }) {
            guard output.unsent > outputBudget else { break }
            Log.warning("closing client \(connection.id): \(connection.unsent) bytes of replies and events unread, over its "
                        + "share (\(share) bytes) of output_budget (\(outputBudget) bytes, \(output.unsent) unsent in all)")
            close(connection)
        }
    }

    func close(_ connection: Connection) {
        guard connections.removeValue(forKey: connection.id) != nil else { return }
        connection.discardOutput()
        loop.remove(connection.fd)
        Glibc.close(connection.fd)
        onClose(connection)
    }

    private func flushConnection(_ id: UInt64) {
        guard let connection = connections[id] else { return }
        guard connection.flush() else { return abandon(connection) }
        if !connection.hasPendingOutput { connection.handedOut.removeAll() }
        if connection.closeAfterFlush && !connection.hasPendingOutput { return close(connection) }
        if connection.readClosed && !connection.hasPendingOutput && !connection.awaitsReplies {
            return close(connection)
        }
        var events: UInt32 = connection.closeAfterFlush || connection.readClosed || connection.isBackedUp
            ? 0 : UInt32(EPOLLIN.rawValue)
        if events != 0, connection.input.pending > 0 { pendingInput.insert(id) }
        if connection.hasPendingOutput { events |= UInt32(EPOLLOUT.rawValue) }
        loop.modify(connection.fd, events: events)
    }
}
