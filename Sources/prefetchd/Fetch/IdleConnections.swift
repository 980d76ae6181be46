import CCurl
import Glibc

/// The HTTP/1 connections the pools keep after a whole response, watched for bytes nobody asked for.
///
/// HTTP/1 tells which request a response answers by order alone. Bytes a server sends after a response (a second
/// response nobody asked for, a body longer than it said in a later packet) are read as the answer to the next
/// request sent on it, and each later answer as the one after: every URL of that server would get the image of the
/// one before. curl 7.88 reuses such a connection. So bytes waiting on a connection when a response on it has ended
/// (`transferEnded`), or when a request is about to go out on it (`beforeRequest`), end it: it is shut down, and a
/// request about to go out fails to, so that curl sends it again on another connection, as it does when a reused
/// connection died. A connection a request went out on is in use until its response ends: what comes in then is
/// never looked at. Bytes that come after the next request went out are taken as its answer: the shift then lasts
/// until the connection is found with bytes waiting (also by a `sweep` a second after a response), so the answers a
/// connection carried (the last `mostCarried`) are distrusted when it is: the fetcher takes their keys
/// (`takeDistrusted`) and does not keep those answers (docs/transport.md).
final class IdleConnections {
    /// A connection as the pre-request callback names it.
    struct Endpoint: Hashable {
        var localPort: Int
        var remoteAddress: String
        var remotePort: Int
    }

    struct Connection {
        var socket: Int32
        var overTLS: Bool
    }

    /// What waits on a connection between a response and the next request.
    enum Waiting: Equatable {
        case nothing
        /// Bytes that may be a response.
        case unasked(Int)
        /// The server's end of the connection (a 408 or a TLS alert before it), or over TLS a record too short to be
        /// a response (31 bytes at most: an alert).
        case closing
        /// Only CR and LF: some servers end a body with one empty line more.
        case emptyLines(Int)
    }

    /// The connections between a whole HTTP/1 response and the next request on them; one in use is not here.
    private var idle: [Endpoint: Connection] = [:]
    /// The transfer (easy handle) whose request went out last on each connection in use. curl may give a connection
    /// to the next transfer in the same call that ended the one before, whose end then finds it taken.
    private var users: [Endpoint: UnsafeMutableRawPointer] = [:]
    /// The keys whose whole responses each open connection carried, oldest first.
    private var carried: [Endpoint: (socket: Int32, keys: [String])] = [:]
    /// The most keys kept per connection: a shift goes back no further than the connection's last turn of keeping up
    /// with its requests, and a burst of hundreds on one connection without a pause is rare.
    static let mostCarried = 256
    /// Keys whose answers came on a connection since found with bytes nobody asked for.
    private var distrusted: [String] = []

    /// After `easy`, fetching `key`, ended, before it leaves its multi handle: its connection, when curl keeps it, it
    /// spoke HTTP/1 and no other transfer took it since.
    func transferEnded(_ easy: UnsafeMutableRawPointer, key: String) {
        defer {  // the connections of its redirects too, without a new dictionary at every end
            for (endpoint, user) in users where user == easy { users.removeValue(forKey: endpoint) }
        }
        var version = 0
        var socket: curl_socket_t = -1
        guard pf_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version) == CURLE_OK,
              version == Int(CURL_HTTP_VERSION_1_0) || version == Int(CURL_HTTP_VERSION_1_1),
              pf_easy_getinfo_socket(easy, CURLINFO_ACTIVESOCKET, &socket) == CURLE_OK, socket >= 0 else { return }
        var localPort = 0
        var remotePort = 0
        var remote: UnsafeMutablePointer<CChar>?
        var scheme: UnsafeMutablePointer<CChar>?
        pf_easy_getinfo_long(easy, CURLINFO_LOCAL_PORT, &localPort)
        pf_easy_getinfo_long(easy, CURLINFO_PRIMARY_PORT, &remotePort)
        pf_easy_getinfo_string(easy, CURLINFO_PRIMARY_IP, &remote)
        pf_easy_getinfo_string(easy, CURLINFO_SCHEME, &scheme)
        guard let remote else { return }
        let endpoint = Endpoint(localPort: localPort, remoteAddress: String(cString: remote), remotePort: remotePort)
        let overTLS = scheme.map { String(cString: $0).lowercased() == "https" } ?? false
        responseEnded(by: easy, key: key, on: endpoint, Connection(socket: socket, overTLS: overTLS))
    }

    /// `easy`'s whole response for `key` ended on `connection`: it is idle now, or ended; unless a request of another
    /// transfer went out on it since.
    func responseEnded(by easy: UnsafeMutableRawPointer, key: String, on endpoint: Endpoint, _ connection: Connection) {
        if carried[endpoint]?.socket != connection.socket { carried[endpoint] = (connection.socket, []) }
        carried[endpoint]!.keys.append(key)
        if carried[endpoint]!.keys.count > Self.mostCarried { carried[endpoint]!.keys.removeFirst() }
        guard users[endpoint] == easy else { return }
        users.removeValue(forKey: endpoint)
        switch waiting(on: connection) {
        case .nothing, .emptyLines:
            idle[endpoint] = connection
        case .closing:
            end(connection, at: endpoint)
        case .unasked(let count):
            let answers = endStray(connection, at: endpoint)
            Log.warning("\(Self.server(endpoint)) sent \(count) bytes nobody asked for after a response; that "
                        + "connection is not used again, and the \(answers) answers it carried are not kept")
        }
    }

    /// Before `easy`'s request goes out on the connection at `endpoint`, which is in use from now on: when it was
    /// idle and bytes that may be a response arrived on it since, it is ended, and so are the server's other idle
    /// connections with such bytes (curl would try them next).
    func beforeRequest(on endpoint: Endpoint, by easy: UnsafeMutableRawPointer) {
        users[endpoint] = easy
        guard let connection = idle.removeValue(forKey: endpoint) else { return }
        switch waiting(on: connection) {
        case .nothing:
            break
        case .emptyLines(let count):
            var lines = [UInt8](repeating: 0, count: count)
            _ = recv(connection.socket, &lines, count, 0)
        case .closing:
            end(connection, at: endpoint)
            Log.debug("\(Self.server(endpoint)) closed an idle connection; the request goes out on another one")
        case .unasked(let count):
            let others = idle.filter { other, idle in
                other.remoteAddress == endpoint.remoteAddress && other.remotePort == endpoint.remotePort
                    && waiting(on: idle) != .nothing
            }
            var answers = endStray(connection, at: endpoint)
            for (other, connection) in others {
                idle.removeValue(forKey: other)
                answers += endStray(connection, at: other)
            }
            Log.warning("\(Self.server(endpoint)) sent \(count) bytes nobody asked for on an idle connection"
                        + (others.isEmpty ? "" : " (and on \(others.count) more)") + "; the request goes out on another "
                        + "one, and the \(answers) answers \(others.isEmpty ? "it" : "they") carried are not kept")
        }
    }

    /// Ends the idle connections found with bytes nobody asked for without a request going out on them: a burst
    /// whose answers were shifted leaves the last real one waiting, with no request after it to find it.
    func sweep() {
        for (endpoint, connection) in idle {
            guard case .unasked(let count) = waiting(on: connection) else { continue }
            idle.removeValue(forKey: endpoint)
            let answers = endStray(connection, at: endpoint)
            Log.warning("\(Self.server(endpoint)) sent \(count) bytes nobody asked for on an idle connection; that "
                        + "connection is not used again, and the \(answers) answers it carried are not kept")
        }
    }

    /// Ends a connection found with bytes nobody asked for: each answer it carried may be another URL's, and their
    /// keys are distrusted. Returns how many.
    private func endStray(_ connection: Connection, at endpoint: Endpoint) -> Int {
        let keys = carried[endpoint]?.keys ?? []
        distrusted += keys
        end(connection, at: endpoint)
        return keys.count
    }

    /// The keys distrusted since the last call.
    func takeDistrusted() -> [String] {
        defer { distrusted = [] }
        return distrusted
    }

    private func waiting(on connection: Connection) -> Waiting {
        var count: Int32 = 0
        guard ioctl(connection.socket, UInt(FIONREAD), &count) == 0, count > 0 else { return .nothing }
        if PathWindows.info(connection.socket)?.state == UInt8(TCP_CLOSE_WAIT) { return .closing }
        if connection.overTLS { return count <= 31 ? .closing : .unasked(Int(count)) }
        guard count <= 16 else { return .unasked(Int(count)) }
        var head = [UInt8](repeating: 0, count: Int(count))
        let emptyLines = recv(connection.socket, &head, head.count, Int32(MSG_PEEK)) == head.count
            && head.allSatisfy { $0 == 0x0D || $0 == 0x0A }
        return emptyLines ? .emptyLines(Int(count)) : .unasked(Int(count))
    }

    /// Shuts the connection down and reads away what waits on it: curl then finds it closed when it looks for a
    /// connection to use (a socket with bytes to read would pass for alive). No read blocks: after the shutdown an
    /// empty socket reads as its end.
    private func end(_ connection: Connection, at endpoint: Endpoint) {
        carried.removeValue(forKey: endpoint)
        shutdown(connection.socket, Int32(SHUT_RDWR))
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var drained = 0
        while drained < 1 << 20 {
            let count = recv(connection.socket, &buffer, buffer.count, 0)
            guard count > 0 else { break }
            drained += count
        }
    }

    private static func server(_ endpoint: Endpoint) -> String { "\(endpoint.remoteAddress) port \(endpoint.remotePort)" }

    /// curl closes one of its sockets.
    fileprivate func curlClosed(_ socket: Int32) {
        if let endpoint = idle.first(where: { $0.value.socket == socket })?.key { idle.removeValue(forKey: endpoint) }
        if let endpoint = carried.first(where: { $0.value.socket == socket })?.key { carried.removeValue(forKey: endpoint) }
        close(socket)
    }

    /// Makes curl tell this about the sockets it closes, for connections `easy` opens.
    func watchClosing(_ easy: UnsafeMutableRawPointer) {
        pf_easy_setopt_closesocket_callback(easy, idleConnectionsClose)
        pf_easy_setopt_pointer(easy, CURLOPT_CLOSESOCKETDATA, Unmanaged.passUnretained(self).toOpaque())
    }
}

/// A connection keeps the close callback of the transfer that opened it, which may have ended long before: the data
/// is `IdleConnections`, which lives as long as the pools.
private let idleConnectionsClose: curl_closesocket_callback = { userdata, socket in
    Unmanaged<IdleConnections>.fromOpaque(userdata!).takeUnretainedValue().curlClosed(socket)
    return 0
}
