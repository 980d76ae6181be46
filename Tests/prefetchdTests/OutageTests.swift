import Foundation
import Testing

/// A host that does not answer (it is down, or the network is) costs a queued URL one attempt, not all of them: the
/// circuit breaker paces the tries, and the URLs stay in the durable queue until the host answers again.
@Suite(.serialized)
struct OutageTests {
    static func json(_ daemon: DaemonUnderTest, _ arguments: String...) throws -> [String: Any] {
        let result = daemon.ctl(arguments: arguments + ["--json"])
        return try #require(try JSONSerialization.jsonObject(with: result.stdoutData) as? [String: Any], "\(result.stderr)")
    }

    /// The queued tasks, URL to fetch attempts started.
    static func queued(_ daemon: DaemonUnderTest) throws -> [String: Int] {
        let tasks = try json(daemon, "list")["tasks"] as? [[String: Any]] ?? []
        return Dictionary(tasks.map { ($0["url"] as? String ?? "?", $0["attempts"] as? Int ?? -1) }, uniquingKeysWith: +)
    }

    @Test("a host paused while eight of its transfers ran is logged as paused once (each later failure logged it again)")
    func pauseLoggedOnce() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "1"])
        let urls = (0..<16).map { origin.url("/down-\($0).jpg?status=503&delay=0.5") }
        #expect(daemon.ctl(arguments: ["get"] + urls).status == 1)
        let pauses = daemon.log.split(separator: "\n").filter { $0.contains("pausing 127.0.0.1:\(origin.port)") }
        #expect(pauses.count == 1, "\(pauses)")
    }

    @Test("status lists the 100 hosts paused last, in host order, and counts them all (5,000 paused hosts made a 240 KB reply, too_large under a small output_budget)")
    func manyPausedHosts() throws {
        // Ports bound but not listening: a connect to one is refused at once.
        let refusing = (0..<105).map { _ -> (fd: Int32, port: Int) in
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0,
                                      sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = bind(fd, $0, length); _ = getsockname(fd, $0, &length) }
            }
            return (fd, Int(UInt16(bigEndian: address.sin_port)))
        }
        defer { for port in refusing { close(port.fd) } }
        let daemon = try DaemonUnderTest(["--max-attempts", "1"])
        // Five failures in a row pause a host.
        let urls = refusing.flatMap { port in (0..<5).map { "http://127.0.0.1:\(port.port)/\($0).jpg" } }
        #expect(daemon.ctl("get", "-", stdin: urls.joined(separator: "\n") + "\n").status == 1)
        let status = try Self.json(daemon, "status")
        let listed = (status["paused_hosts"] as? [[String: Any]] ?? []).compactMap { $0["host"] as? String }
        #expect(status["paused_host_count"] as? Int == 105, "\(status)")
        #expect(listed.count == 100 && listed == listed.sorted(), "\(listed)")
        let printed = daemon.ctl("status")
        #expect(printed.stdout.split(separator: "\n").count { $0.hasPrefix("paused host: ") } == 100)
        #expect(printed.stdout.contains("paused hosts: 5 more (those paused last are listed)"), "\(printed.stdout)")
    }

    @Test("the queued URLs of a paused host held the 1,024 places in memory, and the URLs of every other host queued behind them waited for hours (one try a minute at the dead host); now they are loaded and fetched while it is paused, also behind 5,000 of its URLs (more than memory holds), and nothing of the paused host is lost")
    func pausedHostDoesNotHoldTheBacklog() throws {
        let dead = try Origin(), good = try Origin()
        let daemon = try DaemonUnderTest()
        let deadURLs = (0..<5000).map { dead.url("/down-\($0).jpg?status=503") }
        let goodURLs = (0..<50).map { good.url("/up-\($0).jpg") }
        #expect(daemon.ctl("queue", "-", stdin: (deadURLs + goodURLs).joined(separator: "\n") + "\n").status == 0)
        let fetched = try waitUntil(seconds: 30) { try good.stats().counts.values.reduce(0, +) == 50 }
        let status = try Self.json(daemon, "status")
        #expect(fetched, "\(status)")
        #expect((status["paused_hosts"] as? [[String: Any]])?.first?["host"] as? String == "127.0.0.1:\(dead.port)")
        let slow = status["slow"] as? [String: Any] ?? [:]
        let queued = (status["backlog"] as? Int ?? 0) + (slow["waiting"] as? Int ?? 0) + (slow["running"] as? Int ?? 0)
            + (status["delayed"] as? Int ?? 0)
        #expect(queued >= 4990, "the paused host's URLs are all still queued, but the few tried: \(status)")
    }

    @Test("a get of a host that never answers fails after one connect timeout, its retry background work (each of 3 tries held an urgent slot for the whole timeout: gets of other hosts waited 19 s behind 16 dead ones)")
    func deadHostIsNotRetriedForAWaiter() throws {
        let hole = try Blackhole()
        let daemon = try DaemonUnderTest(["--connect-timeout", "6"])
        let result = daemon.ctl("get", "--json", "--timeout", "15", "http://127.0.0.1:\(hole.port)/dead.jpg")
        #expect(result.status == 1 && errorCode(result.stdout) == "timeout", "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("; tried again in ") && result.stdout.contains(" s, in the background"), "\(result.stdout)")
    }

    @Test("queued URLs of a host that refuses every connection outlast max_attempts and stay queued across a restart")
    func queuedWorkOutlastsAnOutage() throws {
        let port = try freePort()
        let host = "127.0.0.1:\(port)"
        let urls = (0..<3).map { "http://\(host)/o\($0).jpg" }
        let daemon = try DaemonUnderTest(["--max-attempts", "2"])
        #expect(daemon.ctl(arguments: ["queue"] + urls).status == 0)
        // Five failures in a row pause the host. Before that, each URL failed at least once and one of them at
        // least twice: with max_attempts 2, counting each failure would have dropped it.
        #expect(waitUntil(seconds: 20) {
            let paused = (try? Self.json(daemon, "status"))?["paused_hosts"] as? [[String: Any]] ?? []
            return paused.contains { $0["host"] as? String == host }
        }, "\(daemon.log)")
        let status = try Self.json(daemon, "status")
        #expect((status["failed"] as? Int ?? 0) >= 5, "\(status)")
        let before = try Self.queued(daemon)
        #expect(before.keys.sorted() == urls, "\(before)")
        #expect(before.values.reduce(0, +) == 5 && before.values.allSatisfy { $0 >= 1 }, "every URL tried: \(before)")

        daemon.child?.stop(SIGTERM)
        try daemon.start()
        // The host is still paused: its URLs wait in the durable queue, not in memory (`list`), until the pause ends.
        for url in urls {
            let task = try Self.json(daemon, "info", url)["task"] as? [String: Any]
            #expect(task?["state"] as? String == "backlog", "\(url) still queued after a restart: \(task ?? [:])")
        }
    }

    @Test("a server that takes the request and hangs up was reached: each try counts, and the URL is dropped after max_attempts")
    func reachedFailuresCount() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "2"])
        let url = origin.url("/hangup.jpg?hangup=1")
        #expect(daemon.ctl("queue", url).status == 0)
        #expect(waitUntil(seconds: 10) { (try? Self.queued(daemon))?.isEmpty == true }, "\(daemon.log)")
        #expect(try origin.stats().log.filter { $0.path == "/hangup.jpg" }.count == 2)
    }
}

/// A listening socket on 127.0.0.1 whose only place in its accept queue is taken, and nothing is ever accepted: a
/// connection to it gets no answer, as one to a host that is down.
final class Blackhole {
    let port: Int
    private let listener: Int32
    private let filler: Int32

    init() throws {
        let listening = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0), filling = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let made = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listening, $0, length) == 0 && listen(listening, 0) == 0 && getsockname(listening, $0, &length) == 0
                    && connect(filling, $0, length) == 0
            }
        }
        (listener, filler, port) = (listening, filling, Int(UInt16(bigEndian: address.sin_port)))
        guard made else { throw HarnessError("cannot make a blackhole: \(String(cString: strerror(errno)))") }
    }

    deinit {
        close(filler)
        close(listener)
    }
}
