import Foundation
import Glibc
import Testing

/// A `view` connection that goes away is forgotten at once: its view and its connection leave the gauges without any
/// other client coming by (issue 15). Observed through the metrics textfile only, since a new connection would wake
/// the daemon and hide a connection it failed to notice.
@Suite(.serialized)
struct ViewCloseTests {
    /// `prefetchd_views` and `prefetchd_connections` from the metrics textfile, once it exists.
    static func gauges(_ path: String) -> (views: Int, connections: Int)? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        var values: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let value = Int(parts[1]) { values[String(parts[0])] = value }
        }
        guard let views = values["prefetchd_views"], let connections = values["prefetchd_connections"] else { return nil }
        return (views, connections)
    }

    /// Sends `lines` until the daemon stops taking them (a send waits over 2 s); returns whether it did.
    static func sendUntilRefused(_ connection: RawConnection, _ lines: [String]) -> Bool {
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(connection.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        for line in lines {
            var bytes = Array(line.utf8)
            var offset = 0
            while offset < bytes.count {
                let sent = bytes.withUnsafeMutableBytes {
                    Glibc.send(connection.fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
                }
                if sent <= 0 { return true }
                offset += sent
            }
        }
        return false
    }

    static func json(_ object: [String: Any]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self) + "\n"
    }

    @Test("two view clients leave without reading (a 20,000-row list sent in parts; events backed up past 4 MiB): prefetchd_views and prefetchd_connections drop to 0 with no other client connecting")
    func viewClientsLeave() throws {
        let origin = try Origin()
        let directory = try TemporaryDirectory()
        let metrics = directory.path + "/metrics.prom"
        let daemon = try DaemonUnderTest(["--metrics-textfile", metrics])

        // A long list in parts; its visible rows wait on a slow origin. It never reads.
        var listClient: RawConnection? = try RawConnection(socket: daemon.socket)
        let urls = (0..<20_000).map { origin.url("/close/\($0).jpg?delay=30") }
        for start in stride(from: 0, to: urls.count, by: 500) {
            var request: [String: Any] = ["id": start + 1, "op": "view", "urls": Array(urls[start..<start + 500])]
            if start == 0 { request.merge(["first": 0, "last": 99], uniquingKeysWith: { $1 }) } else { request["append"] = true }
            listClient!.send(try Self.json(request))
        }

        // Rows that fail at once (an unfetchable scheme), scrolled a screen of 1,000 at a time: an event per row, never
        // read, until the daemon holds more than 4 MiB for it and stops reading its requests.
        var floodClient: RawConnection? = try RawConnection(socket: daemon.socket)
        let rejected = (0..<2_000).map { "ftp://example.invalid/\($0).jpg" }
        var lines: [String] = []
        for start in stride(from: 0, to: rejected.count, by: 500) {
            let request: [String: Any] = ["id": start + 1, "op": "view", "urls": Array(rejected[start..<start + 500]), "append": start > 0]
            lines.append(try Self.json(request))
        }
        for n in 0..<2_000 {
            let first = n % 2 * 1_000
            let request: [String: Any] = ["id": 10_000 + n, "op": "view", "first": first, "last": first + 999, "ahead": 0, "behind": 0]
            lines.append(try Self.json(request))
        }
        #expect(Self.sendUntilRefused(floodClient!, lines), "the daemon kept reading from a client with its events unread")

        let bothOpen = waitUntil(seconds: 15) { Self.gauges(metrics).map { $0.views == 2 && $0.connections == 2 } ?? false }
        try #require(bothOpen, "while both are connected: \(String(describing: Self.gauges(metrics)))")

        listClient = nil  // closes the socket
        floodClient = nil
        let forgotten = waitUntil(seconds: 60) { Self.gauges(metrics).map { $0.views == 0 && $0.connections == 0 } ?? false }
        #expect(forgotten, "after both left: \(String(describing: Self.gauges(metrics))); log: \(daemon.log.suffix(2000))")
    }

    @Test("a view client that leaves with requests unread (its events backed up past 4 MiB) has its queue carried out, not its view requests: the rows of a view it asked for last are never fetched")
    func departedViewRequestsAreNotServed() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        var client: RawConnection? = try RawConnection(socket: daemon.socket)
        // Rows that fail at once, scrolled 500 at a time: 500 events per scroll, never read, until the daemon holds
        // more than 4 MiB for the client and leaves the rest of its requests unread.
        var lines = [try Self.json(["id": 1, "op": "view", "urls": (0..<1_000).map { "ftp://example.invalid/\($0).jpg" }])]
        for n in 0..<300 {
            let first = n % 2 * 500
            lines.append(try Self.json(["id": 10 + n, "op": "view", "first": first, "last": first + 499, "ahead": 0, "behind": 0]))
        }
        lines.append(try Self.json(["id": 1_000, "op": "queue", "urls": [origin.url("/departed/queued.jpg")]]))
        lines.append(try Self.json(["id": 1_001, "op": "view", "urls": (0..<10).map { origin.url("/departed/row\($0).jpg") },
                                    "first": 0, "last": 9]))
        client!.send(lines.joined())
        client = nil  // leaves without reading

        let queued = waitUntil(seconds: 30) { ((try? origin.count("/departed/queued.jpg")) ?? 0) > 0 }
        #expect(queued, "the queue request the client left was not carried out; log: \(daemon.log.suffix(2000))")
        usleep(1_000_000)
        let rows = try origin.stats().log.filter { $0.path.hasPrefix("/departed/row") }.map(\.path)
        #expect(rows.isEmpty, "the departed client's view was served: \(rows)")
    }
}

