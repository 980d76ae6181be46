import Glibc
import Testing
@testable import prefetchd

/// `IdleConnections` on real TCP connections over 127.0.0.1, the test playing both curl's side and the server's.
@Suite(.serialized)
struct IdleConnectionsTests {
    /// A listening socket and connections to it: the client side as the pools see it, and the server side.
    final class Server {
        let listener: Int32
        let port: Int
        private var sockets: [Int32] = []

        init() {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
            }
            listen(fd, 8)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            listener = fd
            port = Int(UInt16(bigEndian: address.sin_port))
            sockets.append(fd)
        }

        /// A new connection: its endpoint as the pre-request callback names it, the client's socket and the server's.
        func connect() -> (endpoint: IdleConnections.Endpoint, client: Int32, server: Int32) {
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = UInt16(port).bigEndian
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(client, $0, length) }
            }
            let server = accept(listener, nil, nil)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(client, $0, &length) }
            }
            sockets += [client, server]
            let endpoint = IdleConnections.Endpoint(localPort: Int(UInt16(bigEndian: address.sin_port)),
                                                    remoteAddress: "127.0.0.1", remotePort: port)
            return (endpoint, client, server)
        }

        deinit { for socket in sockets { close(socket) } }
    }

    /// Stands for a transfer's easy handle: only compared, never used.
    func transfer(_ n: Int) -> UnsafeMutableRawPointer { UnsafeMutableRawPointer(bitPattern: n)! }

    func send(_ text: String, on socket: Int32) -> Int {
        Array(text.utf8).withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Waits (up to 1 s) until `count` bytes can be read from `socket`.
    func waitForBytes(_ socket: Int32, count: Int) {
        for _ in 0..<100 {
            var waiting: Int32 = 0
            if ioctl(socket, UInt(FIONREAD), &waiting) == 0, waiting >= count { return }
            usleep(10_000)
        }
    }

    @Test("bytes nobody asked for on an idle connection end it and the server's other idle ones with bytes waiting; a connection a response is coming in on is in use, not idle, and is left alone")
    func connectionsInUseAreLeftAlone() {
        let server = Server()
        let connections = IdleConnections()
        let (stray, inUse, quiet) = (server.connect(), server.connect(), server.connect())
        for (n, connection) in [stray, inUse, quiet].enumerated() {
            connections.beforeRequest(on: connection.endpoint, by: transfer(n + 1))
            connections.responseEnded(by: transfer(n + 1), key: "k\(n + 1)", on: connection.endpoint, .init(socket: connection.client, overTLS: false))
        }
        connections.beforeRequest(on: inUse.endpoint, by: transfer(4))  // its response starts coming in
        let response = "HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n"
        #expect(send(response, on: inUse.server) == response.utf8.count)
        let unasked = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
        #expect(send(unasked, on: stray.server) == unasked.utf8.count)
        waitForBytes(inUse.client, count: response.utf8.count)
        waitForBytes(stray.client, count: unasked.utf8.count)

        connections.beforeRequest(on: stray.endpoint, by: transfer(5))

        #expect(send("GET / HTTP/1.1\r\n\r\n", on: stray.client) == -1 && errno == EPIPE, "the stray's connection is shut")
        var byte: UInt8 = 0
        #expect(recv(stray.client, &byte, 1, Int32(MSG_DONTWAIT)) == 0, "and what waited on it was read away")
        var head = [UInt8](repeating: 0, count: response.utf8.count)
        #expect(recv(inUse.client, &head, head.count, 0) == head.count, "the response coming in is still there")
        #expect(String(decoding: head, as: UTF8.self) == response)
        #expect(send("more", on: inUse.client) == 4)
        #expect(send("GET / HTTP/1.1\r\n\r\n", on: quiet.client) > 0, "an idle connection without bytes stays")
    }

    @Test("a shift goes unseen until bytes wait on the connection: then every answer it carried (the last 256) is distrusted, once, and no other connection's")
    func answersCarriedAreDistrusted() {
        let server = Server()
        let connections = IdleConnections()
        let (shifted, other) = (server.connect(), server.connect())
        for n in 1...300 {
            connections.beforeRequest(on: shifted.endpoint, by: transfer(n))
            connections.responseEnded(by: transfer(n), key: "k\(n)", on: shifted.endpoint, .init(socket: shifted.client, overTLS: false))
        }
        connections.beforeRequest(on: other.endpoint, by: transfer(1000))
        connections.responseEnded(by: transfer(1000), key: "elsewhere", on: other.endpoint, .init(socket: other.client, overTLS: false))
        #expect(connections.takeDistrusted().isEmpty, "nothing waits yet: nothing is distrusted")
        let late = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"  // the answer to the last request, come late
        _ = send(late, on: shifted.server)
        waitForBytes(shifted.client, count: late.utf8.count)

        connections.beforeRequest(on: shifted.endpoint, by: transfer(301))

        #expect(connections.takeDistrusted() == (45...300).map { "k\($0)" })
        #expect(connections.takeDistrusted().isEmpty, "taken once")
        connections.beforeRequest(on: other.endpoint, by: transfer(1001))
        #expect(connections.takeDistrusted().isEmpty, "the other connection had nothing waiting")
    }

    @Test("bytes waiting when a response ends distrust that answer too, and the ones before it on the connection")
    func bytesAfterAResponseDistrustIt() {
        let server = Server()
        let connections = IdleConnections()
        let connection = server.connect()
        connections.beforeRequest(on: connection.endpoint, by: transfer(1))
        connections.responseEnded(by: transfer(1), key: "first", on: connection.endpoint, .init(socket: connection.client, overTLS: false))
        connections.beforeRequest(on: connection.endpoint, by: transfer(2))
        let more = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
        _ = send(more, on: connection.server)
        waitForBytes(connection.client, count: more.utf8.count)

        connections.responseEnded(by: transfer(2), key: "second", on: connection.endpoint, .init(socket: connection.client, overTLS: false))

        #expect(connections.takeDistrusted() == ["first", "second"])
        #expect(send("GET / HTTP/1.1\r\n\r\n", on: connection.client) == -1, "and the connection is ended")
    }

    @Test("curl may give a connection to the next transfer in the call that ended the one before: the next one's response coming in was taken for bytes nobody asked for after a response, and the connection ended under it")
    func connectionTakenBeforeTheEndWasSeen() {
        let server = Server()
        let connections = IdleConnections()
        let taken = server.connect()
        connections.beforeRequest(on: taken.endpoint, by: transfer(1))
        connections.beforeRequest(on: taken.endpoint, by: transfer(2))  // before the end of transfer 1 is seen
        let response = "HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n"
        _ = send(response, on: taken.server)
        waitForBytes(taken.client, count: response.utf8.count)

        connections.responseEnded(by: transfer(1), key: "k1", on: taken.endpoint, .init(socket: taken.client, overTLS: false))

        var head = [UInt8](repeating: 0, count: response.utf8.count)
        #expect(recv(taken.client, &head, head.count, 0) == head.count, "transfer 2's response is still there")
        #expect(send("more", on: taken.client) == 4)
    }

    @Test("a server closing an idle connection (a 408, then its end), or over TLS 31 bytes (an alert), ends it before a request goes out on it; an empty line after a body is read away and the connection used")
    func closesAndEmptyLines() {
        let server = Server()
        let connections = IdleConnections()
        let (closed, alert, crlf) = (server.connect(), server.connect(), server.connect())
        for (n, (connection, overTLS)) in [(closed, false), (alert, true), (crlf, false)].enumerated() {
            connections.beforeRequest(on: connection.endpoint, by: transfer(n + 1))
            connections.responseEnded(by: transfer(n + 1), key: "k\(n + 1)", on: connection.endpoint, .init(socket: connection.client, overTLS: overTLS))
        }
        _ = send("HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n", on: closed.server)
        shutdown(closed.server, Int32(SHUT_WR))
        _ = send(String(repeating: "x", count: 31), on: alert.server)
        _ = send("\r\n", on: crlf.server)
        waitForBytes(closed.client, count: 40)
        waitForBytes(alert.client, count: 31)
        waitForBytes(crlf.client, count: 2)

        for (n, connection) in [closed, alert, crlf].enumerated() {
            connections.beforeRequest(on: connection.endpoint, by: transfer(n + 4))
        }

        #expect(send("GET / HTTP/1.1\r\n\r\n", on: closed.client) == -1, "ended, so that curl does not use it")
        #expect(send("GET / HTTP/1.1\r\n\r\n", on: alert.client) == -1)
        var byte: UInt8 = 0
        #expect(recv(crlf.client, &byte, 1, Int32(MSG_DONTWAIT)) == -1 && errno == EAGAIN, "the empty line was read away")
        #expect(send("GET / HTTP/1.1\r\n\r\n", on: crlf.client) > 0, "and the connection is used")
    }
}
