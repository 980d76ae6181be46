import CCurl
import Glibc

/// The HTTP/1 connections the pools keep after a whole response, watched for bytes nobody asked for.
///
/// HTTP/1 tells which request a response answers by order alone. Bytes a server sends on an idle connection (a
/// response nobody asked for, a body longer than it said in a later packet) are read as the answer to the next
/// request sent on it, and each later answer as the one after: every URL of that server would get the image of the
/// one before. curl 7.88 reuses such a connection. So before a request goes out on a connection that served a
/// response, bytes already waiting there end it: it is shut down, the request fails to go out, and curl sends it
/// again on a new connection (as it does when a reused connection died).
final class IdleConnections {
    /// A connection as the pre-request callback names it.
    struct Endpoint: Hashable {
        var localPort: Int
        var remoteAddress: String
        var remotePort: Int
    }

    /// The sockets of connections that served a whole HTTP/1 response, until curl closes them.
    private var served: [Endpoint: Int32] = [:]

    /// After `easy` ended, before it leaves its multi handle: its connection, when curl keeps it and it spoke HTTP/1.
    func transferEnded(_ easy: UnsafeMutableRawPointer) {
        var version = 0
        var socket: curl_socket_t = -1
        guard pf_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version) == CURLE_OK,
              version == Int(CURL_HTTP_VERSION_1_0) || version == Int(CURL_HTTP_VERSION_1_1),
              pf_easy_getinfo_socket(easy, CURLINFO_ACTIVESOCKET, &socket) == CURLE_OK, socket >= 0 else { return }
        var localPort = 0
        var remotePort = 0
        var remote: UnsafeMutablePointer<CChar>?
        pf_easy_getinfo_long(easy, CURLINFO_LOCAL_PORT, &localPort)
        pf_easy_getinfo_long(easy, CURLINFO_PRIMARY_PORT, &remotePort)
        pf_easy_getinfo_string(easy, CURLINFO_PRIMARY_IP, &remote)
        guard let remote else { return }
        served[Endpoint(localPort: localPort, remoteAddress: String(cString: remote), remotePort: remotePort)] = socket
    }

    /// Before a request goes out on `connection`: when it served a response and bytes arrived on it since, it is
    /// shut down and the server named in the log.
    func beforeRequest(on connection: Endpoint) {
        guard let socket = served[connection] else { return }
        var waiting: Int32 = 0
        guard ioctl(socket, UInt(FIONREAD), &waiting) == 0, waiting > 0 else { return }
        served.removeValue(forKey: connection)
        shutdown(socket, Int32(SHUT_RDWR))
        Log.warning("\(connection.remoteAddress) port \(connection.remotePort) sent \(waiting) bytes nobody asked for on "
                    + "an idle connection; the request goes out on a new one")
    }

    /// curl closes one of its sockets.
    fileprivate func close(_ socket: Int32) {
        if let connection = served.first(where: { $0.value == socket })?.key { served.removeValue(forKey: connection) }
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
