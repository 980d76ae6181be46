import FoundationEssentials
import Glibc
import PrefetchProtocol

/// A connection to the daemon: send request lines, read reply lines, optionally before a deadline.
final class Client {
    private let fd: Int32
    /// Reply lines have no length limit in the protocol; this one only stops a stream gone wrong. A `list` of 100,000
    /// tasks with 2 KB URLs is about 220 MB.
    static let maximumReply = 256 << 20
    private var lines = LineBuffer(limit: Client.maximumReply)
    private var nextID: Int64 = 0
    /// `/` as is: escaped, a URL grows by a byte per slash.
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return encoder
    }()
    private let decoder = JSONDecoder()

    /// Why `connect` to `socketPath` failed with `code`, and what to do: a socket this user may not use, or a path
    /// that is no socket, is not a daemon to start.
    static func unreachable(_ socketPath: String, errno code: Int32) -> String {
        let reason = "cannot reach prefetchd at \(socketPath): \(String(cString: strerror(code)))"
        var info = stat()
        if code == EACCES || code == EPERM {
            return reason + ". The socket or a directory above it does not let this user in: a shared daemon lets in "
                + "the members of its socket's group (`socket_mode`), from their next login after being added"
        }
        if lstat(socketPath, &info) == 0, (info.st_mode & S_IFMT) != S_IFSOCK {
            return "cannot reach prefetchd at \(socketPath): it is not a socket. Point --socket / PREFETCHD_SOCKET at "
                + "the daemon's socket"
        }
        return reason + ". Is it running? (start it with `prefetchd`, or point --socket / PREFETCHD_SOCKET at it)"
    }

    /// The longest wait for the greeting (ms): a daemon that accepted the connection but does not greet is stopped
    /// (SIGSTOP), hung, or no prefetchd.
    static let greetingWait: Int64 = 5000

    /// Connects and reads the greeting, waiting at most `greetingWithin` ms for it; failures are
    /// `CLIError.unreachable`.
    init(socketPath: String, greetingWithin: Int64 = Client.greetingWait) throws(CLIError) {
        if socketPath == DefaultPaths.sharedTemporarySocket,
           let problem = DefaultPaths.untrustedDirectory(of: socketPath, rootToo: false) {
            throw .unreachable("not using \(socketPath): \(problem). Another user may have made it to read your "
                               + "requests and answer them; remove it, or set XDG_RUNTIME_DIR or --socket")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socketPath.utf8)
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw .usage("socket path too long: \(socketPath)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path)
            raw[path.count] = 0
        }
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw .unreachable("socket: \(String(cString: strerror(errno)))") }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw .unreachable(Self.unreachable(socketPath, errno: code))
        }
        guard let greeting = try readLine(deadline: monotonicNow() + greetingWithin) else {
            let seconds = greetingWithin % 1000 == 0 ? "\(greetingWithin / 1000)" : "\(Double(greetingWithin) / 1000)"
            throw .unreachable("\(socketPath) accepted the connection but sent no greeting within \(seconds) s: is "
                               + "prefetchd stopped (SIGSTOP), hung, or is something else listening there?")
        }
        if let refusal = try? decoder.decode(Reply<Ignored>.self, from: Data(greeting)), let error = refusal.error {
            throw .failed(error)
        }
        guard let hello = try? decoder.decode(Greeting.self, from: Data(greeting)), hello.hello == "prefetchd" else {
            throw .unreachable("\(socketPath) did not greet like prefetchd")
        }
        guard hello.protocol == protocolVersion else {
            throw .unreachable("prefetchd \(hello.version) at \(socketPath) speaks protocol \(hello.protocol); this "
                               + "prefetchctl (\(prefetchVersion)) speaks \(protocolVersion): use the prefetchctl that "
                               + "came with that daemon")
        }
    }

    deinit { close(fd) }

    /// The socket, to wait for it together with other descriptors.
    var descriptor: Int32 { fd }

    /// Sends a request and returns the id it was given.
    @discardableResult
    func send(_ op: Operation, url: String? = nil, urls: [String]? = nil) throws(CLIError) -> Int64 {
        try send(Request(id: nil, op: op, url: url, urls: urls))
    }

    /// Sends a request, numbering it; returns its id. A request longer than the daemon's line limit is not sent: it
    /// fails with `line_too_long` and the connection stays usable.
    @discardableResult
    func send(_ request: Request) throws(CLIError) -> Int64 {
        var request = request
        request.id = .number(nextID + 1)
        guard var bytes = try? Array(encoder.encode(request)) else { throw .usage("cannot encode the request") }
        guard bytes.count <= maximumLineLength else {
            throw .failed(WireError(.lineTooLong, "not sent: the request would be \(bytes.count) bytes, over the daemon's "
                                    + "limit of \(maximumLineLength) a line"))
        }
        nextID += 1
        bytes.append(0x0A)
        var offset = 0
        // A daemon stopped (SIGSTOP) or hung takes no more once the socket's buffer is full: at most `answerWithin`
        // without a byte taken.
        var deadline = monotonicNow() + answerWithin
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
            if count < 0 {
                if errno == EINTR { continue }
                guard errno == EAGAIN || errno == EWOULDBLOCK else {
                    throw .unreachable("the daemon closed the connection (\(String(cString: strerror(errno))))")
                }
                var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                let wait = Int32(clamping: max(0, deadline - monotonicNow()))
                guard wait > 0, poll(&poller, 1, wait) != 0 else {
                    throw .timeout("prefetchd took no more of a request for \(Units.seconds(answerWithin)): is it stopped "
                                   + "(SIGSTOP) or hung?")
                }
                continue
            }
            offset += count
            deadline = monotonicNow() + answerWithin
        }
        return nextID
    }

    /// The next reply: its id and the raw line to decode; nil when the deadline passes.
    func receive(deadline: Int64? = nil) throws(CLIError) -> (id: Int64?, line: [UInt8])? {
        guard let line = try readLine(deadline: deadline) else { return nil }
        return (try envelope(line), line)
    }

    /// The next reply that has an id, its result read as a `T` in the one parse of its line: the id and the result
    /// or error; nil when the deadline passes. Lines without an id are taken as `receive(deadline:)` takes them.
    func receive<T: Codable & Sendable>(_ type: T.Type, deadline: Int64?) throws(CLIError)
        -> (id: Int64, answer: Result<T, WireError>)? {
        while let line = try readLine(deadline: deadline) {
            guard let reply = try? decoder.decode(Reply<T>.self, from: Data(line)) else {
                guard try envelope(line) == nil else { throw .unreachable("the daemon sent a reply this prefetchctl cannot read") }
                continue
            }
            guard case .number(let id) = reply.id else {
                if let error = reply.error { throw .failed(error) }
                continue
            }
            return (id, Self.answer(reply))
        }
        return nil
    }

    /// The next raw line (a reply, or after `watch` an event, which has no id); nil when the deadline passes.
    func nextLine(deadline: Int64?) throws(CLIError) -> [UInt8]? {
        try readLine(deadline: deadline)
    }

    /// Decodes a reply line as a result of type `T`, or throws its error.
    func decode<T: Codable & Sendable>(_ type: T.Type, _ line: [UInt8]) throws(CLIError) -> T {
        guard let reply = try? decoder.decode(Reply<T>.self, from: Data(line)) else {
            throw .unreachable("the daemon sent a reply this prefetchctl cannot read")
        }
        switch Self.answer(reply) {
        case .success(let result): return result
        case .failure(let error): throw .failed(error)
        }
    }

    /// A reply line's id; an error without one (the daemon refusing the connection) is thrown.
    private func envelope(_ line: [UInt8]) throws(CLIError) -> Int64? {
        guard let envelope = try? decoder.decode(Reply<Ignored>.self, from: Data(line)) else {
            throw .unreachable("the daemon sent a line that is not a reply")
        }
        if case .number(let id) = envelope.id { return id }
        if let error = envelope.error { throw .failed(error) }
        return nil
    }

    private static func answer<T>(_ reply: Reply<T>) -> Result<T, WireError> {
        if let result = reply.result, reply.ok { return .success(result) }
        return .failure(reply.error ?? WireError(.internal, "the reply has neither result nor error"))
    }

    /// How long (ms) a request that fetches nothing (`status`, `info`, `list`…, and each part of a list) waits for its
    /// reply, and the daemon may take no byte of a request being sent: `--timeout` (but `get`'s and `queue`'s, which
    /// bound the wait for the fetches), else a minute.
    var answerWithin: Int64 = 60_000

    /// Sends one request that fetches nothing and waits for its result, at most `answerWithin`.
    func call<T: Codable & Sendable>(_ request: Request, _ type: T.Type) throws(CLIError) -> T {
        let id = try send(request)
        let deadline = monotonicNow() + answerWithin
        while true {
            guard let reply = try receive(deadline: deadline) else {
                throw .timeout("prefetchd did not answer within \(Units.seconds(answerWithin)): is it stopped "
                               + "(SIGSTOP) or hung?")
            }
            if reply.id == id { return try decode(type, reply.line) }
        }
    }

    private func readLine(deadline: Int64?) throws(CLIError) -> [UInt8]? {
        while true {
            switch lines.next() {
            case .line(let line): return line
            case .tooLong:
                throw .failed(WireError(.tooLarge, "a reply over \(Client.maximumReply >> 20) MiB without a newline (list: "
                                        + "ask for fewer with --limit)"))
            case nil: break
            }
            if let deadline {
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let wait = Int32(clamping: max(0, deadline - monotonicNow()))
                let ready = poll(&poller, 1, wait)
                if ready == 0 { return nil }
                if ready < 0 && errno == EINTR { continue }
            }
            var buffer = [UInt8](repeating: 0, count: 65536)
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw .unreachable("the daemon closed the connection") }
            lines.append(buffer[..<count])
        }
    }
}

func monotonicNow() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}
