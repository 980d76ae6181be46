import Foundation
import Testing

/// The wall clock steps (NTP correcting a laptop's clock after boot or sleep, a person setting it); the daemon's
/// retries, host pauses and negative cache run on the time that passed, not on the wall clock.
@Suite(.serialized)
struct ClockTests {
    /// A daemon under libfaketime, whose wall clock the test steps by writing an offset in seconds (`-3600`) to
    /// `offsetFile`; its monotonic and boot-time clocks stay real. Swift reads no arguments under libfaketime, so the
    /// launcher writes the socket and cache directory into a configuration file (`CONFIGURATION_DIRECTORY`).
    struct SteppedDaemon {
        let directory: TemporaryDirectory
        let daemon: DaemonUnderTest
        var offsetFile: String { directory.path + "/offset" }

        init(_ settings: String) throws {
            directory = try TemporaryDirectory()
            try "+0\n".write(toFile: directory.path + "/offset", atomically: true, encoding: .utf8)
            try settings.write(toFile: directory.path + "/settings", atomically: true, encoding: .utf8)
            let launch = """
                d="$1"; shift
                { printf 'socket = %s\\ncache_dir = %s\\n' "$3" "$5"; cat "$d/settings"; } > "$d/prefetchd.conf"
                exec env CONFIGURATION_DIRECTORY="$d" FAKETIME_TIMESTAMP_FILE="$d/offset" FAKETIME_NO_CACHE=1 \
                    DONT_FAKE_MONOTONIC=1 LD_PRELOAD="$(echo /usr/lib/*/faketime/libfaketime.so.1)" "$1"
                """
            daemon = try DaemonUnderTest(launcher: ["/bin/sh", "-c", launch, "sh", directory.path])
        }

        func step(seconds: Int) throws {
            try "\(seconds < 0 ? "" : "+")\(seconds)\n".write(toFile: offsetFile, atomically: true, encoding: .utf8)
        }
    }

    @Test("a wall clock set back an hour while a get waited 2 s for its retry (Retry-After) stalled the get for the hour; now the retry comes on time")
    func retryAfterClockSetBack() throws {
        let origin = try Origin()
        let stepped = try SteppedDaemon("max_attempts = 3\n")
        let path = "/stepped.jpg"
        let url = origin.url(path + "?fail_first=1&retry_after=2")
        #expect(stepped.daemon.ctl("queue", url).status == 0)
        // Stepped once the retry's deadline is set (the task is delayed), not before.
        #expect(waitUntil(seconds: 10) { stepped.daemon.ctl("info", url).stdout.contains("delayed") })
        try stepped.step(seconds: -3600)
        let started = Date()
        let got = stepped.daemon.ctl("get", "--timeout", "20", url)
        #expect(got.status == 0, "\(got.stderr) \(stepped.daemon.log.suffix(400))")
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(try origin.count(path) == 2)
    }

    @Test("a host pause saved before the clock was set back an hour lasted an hour more after a restart; now at most the pause's length")
    func savedPauseAfterClockSetBack() throws {
        let port = try freePort()
        let stepped = try SteppedDaemon("max_attempts = 1\n")
        let daemon = stepped.daemon
        for n in 0..<5 { daemon.ctl("get", "http://127.0.0.1:\(port)/down-\(n).jpg") }
        #expect(try pausedUntil(daemon, port: port) != nil, "\(daemon.log.suffix(400))")
        daemon.child?.stop()
        try stepped.step(seconds: -3600)
        try daemon.start()
        let until = try #require(try pausedUntil(daemon, port: port), "\(daemon.log.suffix(400))")
        let daemonNow = Int(Date().timeIntervalSince1970) - 3600
        #expect((daemonNow...daemonNow + 61).contains(until), "paused until \(until - daemonNow) s after the daemon's now")
    }

    @Test("a failure remembered while the clock was an hour behind came back for its whole TTL at a restart after it had ended; one remembered while the clock was an hour ahead was forgotten at a restart at once. Saved on the wall clock now, neither")
    func rememberedFailureAcrossRestart() throws {
        let origin = try Origin()
        let behind = try SteppedDaemon("negative_ttl = 2\n")
        try behind.step(seconds: -3600)
        let gone = origin.url("/gone.jpg?status=404")
        #expect(behind.daemon.ctl("get", gone).status == 1)
        usleep(2_500_000)  // its 2 s are over
        behind.daemon.child?.stop()
        try behind.daemon.start()
        #expect(behind.daemon.ctl("get", gone).status == 1)
        #expect(try origin.count("/gone.jpg") == 2, "the failure had ended: asked again")

        let ahead = try SteppedDaemon("negative_ttl = 300\n")
        try ahead.step(seconds: 3600)
        let missing = origin.url("/missing.jpg?status=404")
        #expect(ahead.daemon.ctl("get", missing).status == 1)
        ahead.daemon.child?.stop()
        try ahead.daemon.start()
        #expect(ahead.daemon.ctl("get", missing).status == 1)
        #expect(try origin.count("/missing.jpg") == 1, "remembered for 300 s: not asked again")
    }

    /// When `status` says the host on `port` is paused until (Unix seconds), if it is.
    func pausedUntil(_ daemon: DaemonUnderTest, port: Int) throws -> Int? {
        let status = try #require(try JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any])
        let paused = status["paused_hosts"] as? [[String: Any]] ?? []
        return paused.first { $0["host"] as? String == "127.0.0.1:\(port)" }?["until"] as? Int
    }
}
