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
    private var connections: [UInt64: Connection] = [:]
    /// What all connections hold unsent (`outputBudget` bounds it).
    private let output = Tally()
    /// What all connections hold of request lines not finished yet (`inputBudget` bounds it).
    private let input = Tally()
    /// Requests and visible rows all connections have waiting (`Connection.maximumWaitsInAll` bounds it).
    private let waits = Tally()
    /// Unfinished request lines all clients may hold: past it, the clients that have held theirs longest are closed
    /// (4,000 clients each sending half of a 64 KiB line held 258 MB).
    static let inputBudget = 16 << 20
    private var access: AccessPolicy
    /// The most unsent output all clients may hold; the ones holding the most are closed beyond it.
    private var outputBudget: Int
    /// RLIMIT_NOFILE.
    private(set) var descriptorLimit = 1024
    /// Descriptors open when the daemon started listening (its own files), and descriptors kept for the work
    /// (transfers, workers): neither is for clients.
    private var baseDescriptors = 0
    private var workDescriptors = 0
    /// A request line from a client.
    var onLine: (_ line: [UInt8], _ connection: Connection) -> Void = { _, _ in }
    /// A client is closed: what the daemon keeps for it goes.
    var onClose: (Connection) -> Void = { _ in }
    /// The requests read so far are to take effect and be answered now (the `queue`s waiting for the turn's commit):
    /// a client that left without reading had its last requests carried out, or a reply that ends the connection
    /// follows them.
    var settleRequests: () -> Void = {}
    /// The URLs the requests taken this turn name: past `urlsPerTurn` the turn is full, and the clients keep their
    /// lines for the next turns, as when their time runs out (`serveInput`).
    var urlsThisTurn: () -> Int = { 0 }

    private var listenFD: Int32 = -1
    /// The group of a socket systemd passed, admitted like `allowed_groups`.
    private var socketGroup: gid_t?
    /// The socket file the daemon bound itself, removed when it stops listening if the path still names it (not one
    /// another daemon bound after it was deleted); nil for one systemd passed.
    private var bound: (path: String, file: FileIdentity?)?
    private var nextClientID: UInt64 = 0
    /// Request lines handled so far (`Connection.lastServed`).
    private var linesHandled: UInt64 = 0
    /// Connections with output to write at the end of the turn.
    private var dirty: Set<UInt64> = []
    /// Connections with request lines read but not handled yet: their time ran out or the turn was full (see
    /// `serveInput`); served on the next turn, those served longest ago first.
    private var pendingInput: Set<UInt64> = [] {
        didSet { if !pendingInput.isEmpty { inputTimer.schedule(at: 0) } }
    }
    private var inputTimer: LoopTimer!
    /// Departed clients whose last requests are still being carried out, with how many more bytes may be read of each
    /// (`abandon`).
    private var abandoned: [UInt64: Int] = [:]
    /// Watches the listener again after running out of descriptors.
    private var acceptTimer: LoopTimer!
    private var refusals: ThrottledWarning!
    private var inputSheds: ThrottledWarning!
    /// How long one connection's requests may keep the loop per turn (µs), so that transfers and other clients
    /// are served in between however many requests a client sends at once.
    private static let inputTimePerTurn: Int64 = 5_000
    /// How long the connections whose time ran out may keep the next turn together (µs): each gets its share of it
    /// (a line at least), so that a turn stays short however many clients are busy, and a new request waits a turn,
    /// not a slice per busy client (100 clients pipelining pings held another client's ping 1.3 s).
    private static let pendingInputTimePerTurn: Int64 = 20_000
    /// A turn is full once its requests name this many URLs (`queue`s: about 5 ms of work to commit), so that
    /// another client's request waits a short turn: 200 pipelined lines of 2,400 URLs held a cache hit 113 ms, eight
    /// clients pipelining `promote`s of 2,000 held one 87 ms.
    static let urlsPerTurn = 1_024
    /// A request line this long or shorter (a `get`, a `ping`, a `status`) is taken as a client's first of a turn even
    /// when the turn is full, until it names four times `urlsPerTurn` (short `queue` lines of 220 URLs each, from 100
    /// clients, held a ping 243 ms); longer ones carry more work (a `queue` of a hundred URLs).
    private static let shortLine = 4_096

    private var turnIsFull: Bool { urlsThisTurn() >= Self.urlsPerTurn }
    /// At most this much of what a departed client left unread is still served.
    private static let abandonedInputLimit = 1 << 20

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    init(loop: EventLoop, options: Options) {
        self.loop = loop
        access = AccessPolicy(options: options)
        outputBudget = options.outputBudget
        inputTimer = loop.makeTimer { [unowned self] in
            // Taken at once, so the timer is scheduled again only by a connection whose turn runs out again.
            let ready = pendingInput.compactMap { connections[$0] }.sorted { $0.lastServed < $1.lastServed }
            pendingInput = []
            let share = min(Self.inputTimePerTurn, Self.pendingInputTimePerTurn / Int64(max(1, ready.count)))
            for connection in ready where connections[connection.id] != nil { serveInput(connection, for: share) }
        }
        refusals = ThrottledWarning(loop: loop) {
            "refused \($0) more connections in the last second, for the same reasons or others"
        }
        inputSheds = ThrottledWarning(loop: loop) { "closed \($0) more clients in the last second for unfinished request lines" }
        acceptTimer = loop.makeTimer { [unowned self] in
            if listenFD >= 0 { loop.modify(listenFD, events: UInt32(EPOLLIN.rawValue)) }
        }
    }

    /// The settings a reload may change: who is admitted, and the output budget.
    func reconfigure(_ options: Options) {
        access = AccessPolicy(options: options, socketGroup: socketGroup)
        outputBudget = options.outputBudget
    }

    /// The descriptors clients may use: what `limit` (RLIMIT_NOFILE) leaves beyond those open now (the daemon's own
    /// files, counted once, at start-up) and `work` (what the transfers and workers may open).
    func budgetDescriptors(limit: Int, work: Int) {
        descriptorLimit = limit
        baseDescriptors = openDescriptorCount()
        workDescriptors = work
    }

    /// The descriptors kept for the work changed (a reload changed the lane widths).
    func reserveDescriptors(forWork work: Int) { workDescriptors = work }

    /// How many clients may be connected at once: what the descriptor limit leaves beyond the daemon's own files and
    /// its work.
    private var clientLimit: Int { max(1, descriptorLimit - baseDescriptors - workDescriptors) }

    /// Starts admitting clients on `fd`: one systemd passed (`activation`: its group is admitted too), or one bound
    /// at `path`, removed again by `stopListening`.
    func listen(on fd: Int32, path: String, activation: SocketActivation?, options: Options) throws(SystemError) {
        listenFD = fd
        socketGroup = activation?.group
        bound = activation == nil ? (path, FileIdentity(path: path)) : nil
        reconfigure(options)
        try loop.add(fd, events: UInt32(EPOLLIN.rawValue)) { [unowned self] _ in self.acceptClients() }
    }

    /// Admits no one from now on. A socket the daemon bound is closed and removed; one systemd passed stays open
    /// (systemd holds it too), for the program started again in this process (`StartAgain`).
    func stopListening() {
        guard listenFD >= 0 else { return }
        loop.remove(listenFD)
        if let bound {
            Glibc.close(listenFD)
            if bound.file?.isNamed(by: bound.path) == true { unlink(bound.path) }
        }
        listenFD = -1
    }

    // MARK: The connections

    /// The open connection `id`, if it is still open.
    func connection(_ id: UInt64) -> Connection? { connections[id] }

    /// Every open connection.
    var all: Dictionary<UInt64, Connection>.Values { connections.values }

    var count: Int { connections.count }

    /// Connections that asked for `watch` events.
    var watchers: [Connection] { connections.values.filter(\.isWatching) }

    /// How many connections have a view.
    var viewCount: Int { connections.values.count { $0.view != nil } }

    /// Keys any client waits for, and keys named in replies not yet written.
    var waitedKeys: Set<String> { connections.values.reduce(into: []) { $0.formUnion($1.waitedKeys) } }
    var keysHandedOut: Set<String> { connections.values.reduce(into: []) { $0.formUnion($1.keysHandedOut) } }

    // MARK: Sending

    /// Every line to a client goes out here, passwords in URLs hidden (`user:***@`): replies, events, errors. It is
    /// written at the end of the turn (`flush`).
    func send<T: Encodable>(_ connection: Connection, _ message: T) {
        do {
            var json = try (message as? any DirectJSON)?.json ?? Array(Self.encoder.encode(message))
            if json.count > outputBudget, let reply = message as? any AnyReply {
                // It could never be read whole: the client would be cut off in the middle of the line.
                json = try Array(Self.encoder.encode(Reply<Ignored>(id: reply.id, error: WireError(.tooLarge,
                    "the reply is \(json.count) bytes, more than all clients together may hold unread (output_budget, "
                    + "\(outputBudget) bytes); the request itself was carried out: ask for less output (a summary, a "
                    + "lower limit), or raise output_budget"))))
            }
            connection.send(CanonicalURL.redactingUserinfo(in: json))
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
        if output.total > outputBudget { shedOutput() }
    }

    /// At shutdown: what can be written at once, is.
    func flushAllOnce() {
        for connection in connections.values { _ = connection.flush() }
    }

    // MARK: Accepting

    private func acceptClients() {
        while true {
            let fd = accept4(listenFD, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
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
            do {
                let peer = try AccessPolicy.peer(of: fd)
                guard access.admits(peer, on: fd) else {
                    let reason = access.refusal(peer) + "; ask the administrator to add you to allowed_users or allowed_groups"
                    refusals.log(AccessPolicy.refuse(fd: fd, peer: peer, error: WireError(.unauthorized, reason)))
                    Glibc.close(fd)
                    continue
                }
                guard connections.count < clientLimit else {
                    refusals.log(AccessPolicy.refuse(fd: fd, peer: peer, error: WireError(.tooManyClients,
                        "\(connections.count) clients are connected, as many as the descriptor limit leaves room for "
                        + "(RLIMIT_NOFILE \(descriptorLimit), kept for the transfers and the daemon's own files); try again later")))
                    Glibc.close(fd)
                    continue
                }
            } catch {
                refusals.log(AccessPolicy.refuse(fd: fd, peer: nil, error: WireError(.unauthorized, "cannot check the peer: \(error)")))
                Glibc.close(fd)
                continue
            }
            nextClientID += 1
            let connection = Connection(id: nextClientID, fd: fd, output: output, input: input, waits: waits)
            connection.lastServed = linesHandled  // waiting, it goes after those waiting since before it came
            do {
                try connection.register(on: loop) { [unowned self] events in self.connectionReady(connection, events) }
            } catch {
                Log.warning("\(error)")
                connection.close(on: loop)
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
              !connection.closesAfterFlush, abandoned[connection.id] == nil else { return }
        if connection.hasInputEnded && !connection.hasBufferedInput {
            // Only a hang-up or an error gets here (reading stopped): the client is gone both ways.
            return close(connection)
        }
        guard !pendingInput.contains(connection.id) else { return }
        serveInput(connection, behind: !pendingInput.isEmpty)
    }

    /// Handles the connection's request lines, reading more when none is buffered, for at most `microseconds` (a line
    /// at least); what is left waits for the next turn. Once the turn is full, or while other clients' lines wait and
    /// this one just became readable (`behind`), its lines wait as well, but for a first short one (a `get`, a `ping`):
    /// ten clients pipelining `queue` lines held another's request ten lines' commit, and clients connecting for one
    /// long line each took every turn while a waiting client's ping waited 7 s. A client that does not read its
    /// replies is not served until it does (`flushConnection` picks it up again).
    private func serveInput(_ connection: Connection, for microseconds: Int64 = inputTimePerTurn, behind: Bool = false) {
        if abandoned[connection.id] != nil { return serveAbandoned(connection, for: microseconds) }
        let until = monotonicMicroseconds() + microseconds
        var handled = false
        while !handled || monotonicMicroseconds() < until {
            guard !connection.isBackedUp else { return }
            switch connection.nextLine() {
            case .line(let text)?:
                if waits(text, of: connection, handled: handled, behind: behind) { return }
                served(connection)
                onLine(text, connection)
                handled = true
                if connection.closesAfterFlush || connections[connection.id] == nil { return }
                continue
            case .tooLong?:
                settleRequests()  // the replies to the lines before it come first
                send(connection, Reply<Ignored>(id: nil, error: WireError(
                    .lineTooLong, "a request line exceeded \(maximumLineLength) bytes without a newline; closing")))
                connection.closeAfterFlush()
                return
            case nil:
                break
            }
            guard let count = connection.readInput() else {
                // End of stream: the requests already read still get their answers (`printf … | nc -U -N`), a last
                // one without its newline included, then the connection closes (flushConnection). A reset or a full
                // close fails the flush and closes.
                if case .line(let text)? = connection.nextLine() {
                    // Held like any other (a client sending one long line without its newline, then half-closing,
                    // went ahead of every waiting client); the connection is kept until it is served, not read.
                    if waits(text, of: connection, handled: handled, behind: behind) {
                        return connection.watch(0, on: loop)
                    }
                    served(connection)
                    onLine(text, connection)
                }
                if connections[connection.id] != nil { dirty.insert(connection.id) }
                return
            }
            if count == 0 { return }
            if input.total > Self.inputBudget {
                shedInput()
                if connections[connection.id] == nil { return }
            }
        }
        pendingInput.insert(connection.id)
    }

    /// Whether `text`, just taken, waits for a later turn (kept on its connection, which waits with the others): once
    /// the turn is full or while others wait (`behind`), all but a client's first short line, and past four times a
    /// full turn that too.
    private func waits(_ text: [UInt8], of connection: Connection, handled: Bool, behind: Bool) -> Bool {
        let urls = urlsThisTurn()
        guard behind || urls >= Self.urlsPerTurn,
              handled || text.count > Self.shortLine || urls >= 4 * Self.urlsPerTurn else { return false }
        connection.hold(text)
        pendingInput.insert(connection.id)
        return true
    }

    private func served(_ connection: Connection) {
        linesHandled += 1
        connection.lastServed = linesHandled
    }

    /// Over the input budget: the clients that have held an unfinished request line longest are closed until it fits
    /// again (a client streaming lines finishes one every few milliseconds; one that stopped half-way does not).
    private func shedInput() {
        let now = monotonicMilliseconds()
        let stalest = connections.values.filter { $0.unfinishedInput > 0 }
            .sorted { ($0.unfinishedSince ?? now) < ($1.unfinishedSince ?? now) }
        for connection in stalest {
            guard input.total > Self.inputBudget else { break }
            inputSheds.log("closing client \(connection.id): it has held \(connection.unfinishedInput) bytes of an unfinished "
                           + "request line for \(now - (connection.unfinishedSince ?? now)) ms, and the unfinished lines of all "
                           + "clients passed \(Self.inputBudget / (1 << 20)) MiB")
            close(connection)
        }
    }

    /// The client went away without reading its replies: the requests it sent before it left that outlive it are
    /// still carried out (a `queue` is acknowledged work, a `get`'s fetch goes on; `Command.outlivesClient`), their
    /// replies dropped, in turns as a live client's (`serveAbandoned`); then the connection closes.
    private func abandon(_ connection: Connection) {
        connection.discardOutput()
        connection.watch(0, on: loop)  // what it left is read in its turns, not when the socket is ready
        abandoned[connection.id] = Self.abandonedInputLimit
        serveAbandoned(connection)
    }

    /// Carries out what a departed client left as `serveInput` serves a live client (for at most `microseconds`, and
    /// while the turn is not full), up to `abandonedInputLimit` bytes read; then closes it. (It was carried out at
    /// once: thirty clients that each wrote 1.9 MB of `queue` lines and left held every other client's request 6.4 s.)
    private func serveAbandoned(_ connection: Connection, for microseconds: Int64 = inputTimePerTurn) {
        guard var budget = abandoned[connection.id] else { return }
        let until = monotonicMicroseconds() + microseconds
        var handled = false
        while !turnIsFull && (!handled || monotonicMicroseconds() < until) {
            guard budget > 0, !connection.closesAfterFlush, connections[connection.id] != nil else { break }
            switch connection.nextLine() {
            case .line(let text)?:
                served(connection)
                onLine(text, connection)
                handled = true
                continue
            case .tooLong?:
                budget = 0
                continue
            case nil:
                break
            }
            guard let count = connection.readInput(), count > 0 else { budget = 0; break }
            budget -= count
        }
        guard budget <= 0 || connection.closesAfterFlush || connections[connection.id] == nil else {
            abandoned[connection.id] = budget
            pendingInput.insert(connection.id)
            return
        }
        close(connection)
        settleRequests()
    }

    // MARK: Writing and closing

    /// Over the output budget: the clients holding the most unread output are disconnected until it fits again.
    private func shedOutput() {
        let share = outputBudget / max(1, connections.count)
        for connection in connections.values.sorted(by: { $0.unsent > $1.unsent }) {
            guard output.total > outputBudget else { break }
            Log.warning("closing client \(connection.id): \(connection.unsent) bytes of replies and events unread, over its "
                        + "share (\(share) bytes) of output_budget (\(outputBudget) bytes, \(output.total) unsent in all)")
            close(connection)
        }
    }

    func close(_ connection: Connection) {
        guard connections.removeValue(forKey: connection.id) != nil else { return }
        abandoned[connection.id] = nil
        connection.discardOutput()
        connection.close(on: loop)
        onClose(connection)
    }

    private func flushConnection(_ id: UInt64) {
        guard let connection = connections[id], abandoned[id] == nil else { return }
        guard connection.flush() else { return abandon(connection) }
        if connection.closesAfterFlush && !connection.hasPendingOutput && !connection.awaitsReplies {
            return close(connection)
        }
        if connection.hasInputEnded && !connection.hasPendingOutput && !connection.awaitsReplies
            && !connection.hasBufferedInput {
            return close(connection)
        }
        var events: UInt32 = connection.closesAfterFlush || connection.hasInputEnded || connection.isBackedUp
            ? 0 : UInt32(EPOLLIN.rawValue)
        if events != 0, connection.hasBufferedInput { pendingInput.insert(id) }
        if connection.hasPendingOutput { events |= UInt32(EPOLLOUT.rawValue) }
        connection.watch(events, on: loop)
    }
}
