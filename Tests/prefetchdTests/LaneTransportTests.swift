import Foundation
import Testing

/// The lane transport (docs/transport.md) on the loopback origin: what a hold does to a background download.
/// Connections per lane and promotion in place over HTTP/2 are tested on the network lab (lab/lab_tests.py).
@Suite(.serialized)
struct LaneTransportTests {
    @Test("a background download held past 15 s by a long urgent get lets go of its connection and resumes with Range")
    func longHoldResumes() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        // 2 MB at 200 KB/s with a strong ETag: running, and resumable, when the urgent get starts.
        let background = "/held.jpg?size=2000000&drip=200000"
        #expect(daemon.ctl("queue", origin.url(background)).status == 0)
        #expect(try waitUntil(seconds: 10) { try origin.stats().log.contains { $0.path == "/held.jpg" } })
        usleep(1_000_000)

        // Urgent work for 17 s: the background lane is held all that time.
        let urgent = daemon.ctl("get", "--timeout", "40", origin.url("/urgent.jpg?delay=17"))
        #expect(urgent.status == 0, "\(urgent.stderr)")

        #expect(waitUntil(seconds: 60) { daemon.ctl("get", "--offline", origin.url(background)).status == 0 },
                "the held download did not finish after the urgent work")
        let requests = try origin.stats().log.filter { $0.path == "/held.jpg" }
        #expect(requests.count == 2, "\(requests.count) requests")
        if requests.count == 2 {
            let range = requests[1].range ?? ""
            #expect(range.hasPrefix("bytes=") && !range.hasPrefix("bytes=0-"), "the second request asked for \(range)")
        }
        let entry = daemon.ctl("get", "--json", "--offline", origin.url(background))
        let object = try #require(try JSONSerialization.jsonObject(with: entry.stdoutData) as? [String: Any], "\(entry.stderr)")
        let file = try #require(object["path"] as? String)
        #expect(FileManager.default.contents(atPath: file) == (try origin.body(background)))
    }

    @Test("a get that promotes a background download in place leaves the pool read: the other background download lets go until urgent work ends, then resumes with Range")
    func promotionLetsOtherBackgroundGo() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--slow-width", "2"])
        // Both running in the background pool, resumable (strong ETags): A about 4 s, B about 8 s.
        let a = "/promo-a.jpg?size=1000000&drip=250000", b = "/promo-b.jpg?size=2000000&drip=250000"
        #expect(daemon.ctl("queue", origin.url(a), origin.url(b)).status == 0)
        #expect(try waitUntil(seconds: 10) { try Set(origin.stats().log.map(\.path)).isSuperset(of: ["/promo-a.jpg", "/promo-b.jpg"]) })
        usleep(500_000)

        // A becomes urgent in place, on its background connection, which must now be read: B could not be held there.
        let urgent = daemon.ctl("get", "--timeout", "30", origin.url(a))
        #expect(urgent.status == 0, "\(urgent.stderr)")
        #expect(waitUntil(seconds: 40) { daemon.ctl("get", "--offline", origin.url(b)).status == 0 })
        let log = try origin.stats().log
        let urgentEnd = try #require(log.last { $0.path == "/promo-a.jpg" }?.end)
        #expect(log.filter { $0.path == "/promo-a.jpg" }.count == 1, "the promotion restarted A")
        let requests = log.filter { $0.path == "/promo-b.jpg" }
        #expect(requests.count == 2, "B ran on beside the urgent transfer: \(requests.count) request(s)")
        if requests.count == 2 {
            #expect((requests[0].end ?? .infinity) < urgentEnd, "B's first request went on while A was urgent")
            #expect(requests[1].start >= urgentEnd - 0.2, "B started again before the urgent work ended")
            let range = requests[1].range ?? ""
            #expect(range.hasPrefix("bytes=") && !range.hasPrefix("bytes=0-"), "B's second request asked for \(range)")
        }
        let entry = daemon.ctl("get", "--json", "--offline", origin.url(b))
        let object = try #require(try JSONSerialization.jsonObject(with: entry.stdoutData) as? [String: Any], "\(entry.stderr)")
        #expect(FileManager.default.contents(atPath: try #require(object["path"] as? String)) == (try origin.body(b)))
    }

    @Test("slow_width 1: the next background download starts when the last one's transfer ends, before that body is checked, moved into place and reported; the origin still serves one at a time")
    func nextStartsWhenTransferEnds() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let output = try daemon.watchJSON()
        let urls = (1...4).map { origin.url("/serial-\($0).jpg?size=150000") }
        #expect(daemon.ctl(arguments: ["queue"] + urls).status == 0)
        let lines = try output.wait("four finished") { $0.filter { $0.contains("\"finished\"") }.count == 4 }
        let events = try lines.map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        }
        func position(_ kind: String, _ url: String) throws -> Int {
            try #require(events.firstIndex { $0["event"] as? String == kind && $0["url"] as? String == url }, "\(kind) \(url)")
        }
        for (last, next) in zip(urls, urls.dropFirst()) {
            #expect(try position("started", next) < position("finished", last), "\(next) waited for \(last)'s end")
        }
        let requests = try origin.stats().log.filter { $0.path.hasPrefix("/serial-") }.sorted { $0.start < $1.start }
        #expect(requests.count == 4)
        for (last, next) in zip(requests, requests.dropFirst()) {
            #expect(next.start >= (last.end ?? .infinity) - 0.005, "\(next.path) was asked for while \(last.path) was sent")
        }
    }

    @Test("per_host 1: an urgent get waiting for the host of a running background download does not hold it back, and is served after it")
    func urgentWaitingForTheHostHoldsNothing() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--per-host", "1"])
        // 600 KB at 300 KB/s: about 2 s.
        let background = "/host-bg.jpg?size=600000&drip=300000"
        #expect(daemon.ctl("queue", origin.url(background)).status == 0)
        #expect(try waitUntil(seconds: 10) { try origin.stats().log.contains { $0.path == "/host-bg.jpg" } })

        let urgent = daemon.ctl("get", "--timeout", "20", origin.url("/host-urgent.jpg"))
        #expect(urgent.status == 0, "\(urgent.stderr)")
        let log = try origin.stats().log
        let backgroundEnd = try #require(log.first { $0.path == "/host-bg.jpg" }?.end, "the background download did not end")
        let urgentStart = try #require(log.first { $0.path == "/host-urgent.jpg" }?.start)
        // The origin logs a dripped body's end after its last pause between chunks (up to 0.1 s late).
        #expect(urgentStart >= backgroundEnd - 0.2, "the host's limit let both run at once")
        #expect(log.filter { $0.path == "/host-bg.jpg" }.count == 1, "the background download was held and started over")
    }

    @Test("bursts of urgent gets over HTTP/1.1 reuse the connections of the burst before")
    func burstsReuseConnections() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        // 8 gets at once (the fast lane's width), all running before the first ends (0.2 s), then ending 30 ms apart:
        // curl's own limit (4 × the transfers still attached) closed a warm connection at each burst's end.
        func burst(_ name: String) -> CommandResult {
            let urls = (0..<8).map { origin.url("/\(name)-\($0).jpg?delay=0.\(20 + 3 * $0)") }
            return daemon.ctl("get", "-", stdin: urls.joined(separator: "\n") + "\n")
        }
        for name in ["first", "second", "third"] {
            let result = burst(name)
            #expect(result.status == 0, "\(result.stderr)")
        }
        let log = try origin.stats().log
        #expect(log.count == 24)
        let first = Set(log.filter { $0.path.hasPrefix("/first-") }.map(\.client))
        let later = Set(log.filter { !$0.path.hasPrefix("/first-") }.map(\.client))
        #expect(first.count == 8, "\(first.count) connections for the first burst")
        #expect(later.subtracting(first).isEmpty, "later bursts opened \(later.subtracting(first).count) new connections")
    }
}
