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
/// connection died. Bytes that come after the next request went out are taken as its answer: the shift then lasts
/// until the connection is found with bytes waiting (docs/transport.md).
final class IdleConnections {
    /// A connection as the pre-request callback names it.
    struct Endpoint: Hashable {
        var localPort: Int
        var remoteAddress: String
        var remotePort: Int
    }

    private struct Connection {
        var socket: Int32
        var overTLS: Bool
    }

    /// The connections that served a whole HTTP/1 response, until curl closes them.
    private var served: [Endpoint: Connection] = [:]

    /// After `easy` ended, before it leaves its multi handle: notes its connection when curl keeps it and it spoke
    /// HTTP/1, or shuts it down when bytes nobody asked for already wait there.
    func transferEnded(_ easy: UnsafeMutableRawPointer) {
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
        let connection = Connection(socket: socket, overTLS: overTLS)
        served[endpoint] = connection
        guard let waiting = unasked(connection) else { return }
        end(endpoint)
        Log.warning("\(Self.server(endpoint)) sent \(waiting) bytes nobody asked for after a response; that connection "
                    + "is not used again")
    }

    /// Before a request goes out on `connection`: when it served a response and bytes arrived on it since, it is
    /// shut down, and so are the other connections to that server with bytes waiting (curl would try them next).
    func beforeRequest(on connection: Endpoint) {
        guard let known = served[connection] else { return }
        if let waiting = unasked(known) {
            var more = 0
            for (other, idle) in served where other != connection && other.remoteAddress == connection.remoteAddress
                && other.remotePort == connection.remotePort && unasked(idle) != nil {
                end(other)
                more += 1
            }
            end(connection)
            Log.warning("\(Self.server(connection)) sent \(waiting) bytes nobody asked for on an idle connection"
                        + (more > 0 ? " (and on \(more) more)" : "") + "; the request goes out on another one")
        } else if waiting(known.socket) > 0 {
            // The server closed it (a TLS alert, a 408, then the end), or ended a body with an empty line more.
            end(connection)
            Log.debug("\(Self.server(connection)) closed an idle connection, or sent an empty line on it; the request "
                      + "goes out on another one")
        }
    }

    /// The bytes waiting on `connection` when they may be a response: nil when none wait, when the server sent its
    /// end after them, when they are empty lines (some servers end a body with one more CRLF), or on TLS when they fit
    /// in an alert record (31 bytes at most; a response takes more).
    private func unasked(_ connection: Connection) -> Int? {
        let count = waiting(connection.socket)
        guard count > (connection.overTLS ? 31 : 0), !peerClosed(connection.socket) else { return nil }
        guard !connection.overTLS, count <= 16 else { return count }
        var head = [UInt8](repeating: 0, count: count)
        let emptyLines = recv(connection.socket, &head, count, Int32(MSG_PEEK)) == count
            && head.allSatisfy { $0 == 0x0D || $0 == 0x0A }
        return emptyLines ? nil : count
    }

    private func waiting(_ socket: Int32) -> Int {
        var count: Int32 = 0
        return ioctl(socket, UInt(FIONREAD), &count) == 0 ? Int(count) : 0
    }

    /// Whether the peer ended its side (the connection is in CLOSE_WAIT).
    private func peerClosed(_ socket: Int32) -> Bool {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        let closeWait: UInt8 = 8  // TCP_CLOSE_WAIT
        return getsockopt(socket, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 && info.tcpi_state == closeWait
    }

    /// Shuts the connection down and reads away what waits on it: curl then finds it closed when it looks for a
    /// connection to use (a socket with bytes to read would pass for alive). No read blocks: after the shutdown an
    /// empty socket reads as its end.
    private func end(_ endpoint: Endpoint) {
        guard let connection = served.removeValue(forKey: endpoint) else { return }
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
    fileprivate func close(_ socket: Int32) {
        if let endpoint = served.first(where: { $0.value.socket == socket })?.key { served.removeValue(forKey: endpoint) }
        Glibc.close(socket)
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
    Unmanaged<IdleConnections>.fromOpaque(userdata!).takeUnretainedValue().close(socket)
    return 0
}
