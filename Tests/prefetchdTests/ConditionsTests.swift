import Foundation
import PrefetchProtocol
import Testing

/// A private D-Bus bus standing in for the system bus, with python3-dbusmock's NetworkManager, UPower and
/// power-profiles-daemon on it; the daemon under test finds it through `DBUS_SYSTEM_BUS_ADDRESS`.
final class MockSystemBus {
    private let directory: TemporaryDirectory
    private var bus: ChildProcess!
    private var mocks: [ChildProcess] = []
    let address: String
    private var socket: String { directory.path + "/system_bus_socket" }

    init() throws {
        directory = try TemporaryDirectory()
        address = "unix:path=\(directory.path)/system_bus_socket"
        try startBus()
    }

    private func startBus() throws {
        bus = try ChildProcess("/usr/bin/dbus-daemon", ["--session", "--nofork", "--address", address],
                               stderrPath: directory.path + "/dbus-daemon.err")
        guard waitUntil(seconds: 5, { FileManager.default.fileExists(atPath: socket) }) else {
            throw HarnessError("dbus-daemon did not start: \(bus.stderrText)")
        }
    }

    /// The bus and every service on it go away, as when dbus restarts.
    func stop() {
        for mock in mocks { mock.stop() }
        mocks = []
        bus.stop()
        try? FileManager.default.removeItem(atPath: socket)
    }

    /// A new bus at the same address, without services.
    func restart() throws { try startBus() }

    /// The environment of a process that should take this bus for the system bus.
    var environment: [String: String] {
        ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": address]) { $1 }
    }

    /// Starts one of dbusmock's templates (`networkmanager`, `upower`, `power_profiles_daemon`) and waits for its name.
    func start(_ template: String, name: String, parameters: String? = nil) throws {
        // Debian's python3-dbusmock is in the system's Python, which another python3 on PATH may not see.
        // Its log goes to a file: printed to the output pipe, a call failed once with BrokenPipeError in a parallel run.
        let mock = try ChildProcess("/usr/bin/python3", ["-m", "dbusmock", "--template", template,
                                                         "--logfile", directory.path + "/\(template).log"]
                                        + (parameters.map { ["--parameters", $0] } ?? []),
                                    stderrPath: directory.path + "/\(template).err", environment: environment)
        mocks.append(mock)
        let owned = waitUntil(seconds: 10) {
            send(["--dest=org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner",
                  "string:" + name]).contains("boolean true")
        }
        guard owned else { throw HarnessError("\(template) did not appear on the bus: \(mock.stderrText)") }
    }

    /// NetworkManager's template has no `Metered`: adds it (before the daemon starts, which reads it once then).
    func addMetered(_ value: UInt32) throws {
        try call(["--dest=org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager",
                  "org.freedesktop.DBus.Mock.AddProperty", "string:org.freedesktop.NetworkManager", "string:Metered",
                  "variant:uint32:\(value)"])
    }

    /// Sets a property the way the service would, with the PropertiesChanged signal.
    func set(_ service: String, _ path: String, _ interface: String, _ property: String, _ value: String) throws {
        try call(["--dest=" + service, path, "org.freedesktop.DBus.Properties.Set", "string:" + interface,
                  "string:" + property, "variant:" + value])
    }

    func setMetered(_ value: UInt32) throws {
        try set("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", "org.freedesktop.NetworkManager",
                "Metered", "uint32:\(value)")
    }

    /// NetworkManager's global state (NMState): 10 asleep, 20 disconnected, 50 local, 70 global.
    func setNetworkState(_ state: UInt32) throws {
        try set("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", "org.freedesktop.NetworkManager",
                "State", "uint32:\(state)")
    }

    func setOnBattery(_ value: Bool) throws {
        try set("org.freedesktop.UPower", "/org/freedesktop/UPower", "org.freedesktop.UPower", "OnBattery",
                "boolean:\(value)")
    }

    func setProfile(_ profile: String) throws {
        try set("net.hadess.PowerProfiles", "/net/hadess/PowerProfiles", "net.hadess.PowerProfiles", "ActiveProfile",
                "string:" + profile)
    }

    private func call(_ arguments: [String]) throws {
        let result = run("/usr/bin/env", ["DBUS_SYSTEM_BUS_ADDRESS=" + address, "dbus-send", "--system", "--print-reply"]
                         + arguments)
        guard result.status == 0 else { throw HarnessError("dbus-send \(arguments): \(result.stderr)") }
    }

    private func send(_ arguments: [String]) -> String {
        run("/usr/bin/env", ["DBUS_SYSTEM_BUS_ADDRESS=" + address, "dbus-send", "--system", "--print-reply"] + arguments).stdout
    }

    deinit { stop() }
}

extension DaemonUnderTest {
    func status() throws -> StatusReport {
        let result = ctl("status", "--json")
        guard result.status == 0 else { throw HarnessError("status failed: \(result.stderr)") }
        return try JSONDecoder().decode(StatusReport.self, from: result.stdoutData)
    }

    func condition(_ name: String) throws -> BackgroundState.ConditionState? {
        try status().background?.conditions.first { $0.name == name }
    }
}

/// Requests the origin got for paths under `prefix`.
private func requests(_ origin: Origin, under prefix: String) throws -> Int {
    try origin.stats().counts.filter { $0.key.hasPrefix(prefix) }.values.reduce(0, +)
}

@Suite("Conditions: metered network, battery, power saver, quiet hours, no network", .serialized)
struct ConditionsTests {
    @Test("a metered network pauses background starts at once, urgent gets and queue --now still run, and the backlog drains when it clears")
    func meteredPausesTheBackground() throws {
        let bus = try MockSystemBus()
        try bus.start("networkmanager", name: "org.freedesktop.NetworkManager")
        try bus.addMetered(2)  // NM_METERED_NO
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--slow-width", "2"], environment: bus.environment)
        #expect(waitUntil(seconds: 10) { (try? daemon.condition("metered"))??.source == "NetworkManager" },
                "the daemon sees NetworkManager: \(daemon.log)")
        #expect(try daemon.status().background?.mode == "run")

        let backlog = (0..<500).map { origin.url("/bg/\($0).jpg?delay=0.02") }
        #expect(daemon.ctl("queue", "-", stdin: backlog.joined(separator: "\n")).status == 0)
        #expect(waitUntil(seconds: 10) { (try? requests(origin, under: "/bg/")) ?? 0 >= 20 })

        try bus.setMetered(1)  // NM_METERED_YES
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "pause" }, "\(daemon.log)")
        let status = try daemon.status()
        #expect(status.background?.because == ["metered"] && status.slow.running == 0, "\(status)")
        usleep(200_000)
        let atPause = try requests(origin, under: "/bg/")
        #expect(atPause < 500)
        #expect(daemon.ctl("status").stdout.contains("slow lane paused: metered network (NetworkManager)"))

        // Urgent work is never held back, nor is what a person asks to fetch now.
        let get = daemon.ctl("get", origin.url("/urgent.jpg"))
        #expect(get.status == 0 && FileManager.default.fileExists(atPath: get.stdout.trimmingCharacters(in: .whitespacesAndNewlines)),
                "\(get.stderr)")
        let now = daemon.ctl("queue", "--now", "--json", origin.url("/now.jpg"))
        #expect(now.status == 0 && now.stdout.contains("\"status\":\"promoted\""), "\(now.stdout) \(now.stderr)")
        #expect(waitUntil(seconds: 5) { (try? origin.count("/now.jpg")) == 1 })
        usleep(800_000)
        #expect(try requests(origin, under: "/bg/") == atPause, "no background request while metered")

        // A watcher's snapshots say it too.
        let watcher = try RawConnection(socket: daemon.socket)
        watcher.send("{\"op\":\"watch\"}\n")
        var snapshot: [String: Any]?
        for _ in 0..<10 {
            guard let line = watcher.receive() else { break }
            if line["event"] as? String == "snapshot" { snapshot = line; break }
        }
        let watched = try #require(snapshot?["background"] as? [String: Any], "\(String(describing: snapshot))")
        #expect(watched["mode"] as? String == "pause" && watched["because"] as? [String] == ["metered"])
        let metered = (watched["conditions"] as? [[String: Any]])?.first { $0["name"] as? String == "metered" }
        #expect(metered?["active"] as? Bool == true && metered?["source"] as? String == "NetworkManager"
                && metered?["policy"] as? String == "pause", "\(watched)")

        let metrics = daemon.ctl("metrics").stdout
        #expect(metrics.contains("prefetchd_background_mode{mode=\"pause\"} 1"), "\(metrics)")
        #expect(metrics.contains("prefetchd_condition{condition=\"metered\",policy=\"pause\"} 1"))

        // GUESS_YES is metered too; GUESS_NO is not: the backlog drains.
        try bus.setMetered(3)
        usleep(300_000)
        #expect(try daemon.status().background?.mode == "pause")
        try bus.setMetered(4)
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "run" })
        #expect(waitUntil(seconds: 60) { (try? daemon.status().cache.entries) == 502 }, "\(String(describing: try? daemon.status()))")
        #expect(try requests(origin, under: "/bg/") >= 500)
        #expect(daemon.log.contains("background lane: paused: metered network (NetworkManager)"))
        #expect(daemon.log.contains("background lane: run"))
    }

    @Test("no network (NetworkManager asleep or disconnected) pauses the background lane: queued URLs are not tried, urgent gets still run, and the backlog drains once a connection is up, a local one too")
    func offlinePausesTheBackground() throws {
        let bus = try MockSystemBus()
        try bus.start("networkmanager", name: "org.freedesktop.NetworkManager")  // State: CONNECTED_GLOBAL
        let origin = try Origin()
        // As on a laptop off its network: no route to the internet either (this test machine may have one).
        let daemon = try DaemonUnderTest([], environment: bus.environment.merging(["PREFETCHD_TEST_INTERNET_ROUTE": "no"]) { $1 })
        #expect(waitUntil(seconds: 10) { (try? daemon.condition("offline"))??.source == "NetworkManager" },
                "the daemon sees NetworkManager's state: \(daemon.log)")
        #expect(try daemon.status().background?.mode == "run")

        try bus.setNetworkState(20)  // NM_STATE_DISCONNECTED
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "pause" }, "\(daemon.log)")
        #expect(try daemon.status().background?.because == ["offline"])
        #expect(daemon.ctl("status").stdout.contains("slow lane paused: no network (NetworkManager)"))
        let backlog = (0..<20).map { origin.url("/off/\($0).jpg") }
        #expect(daemon.ctl("queue", "-", stdin: backlog.joined(separator: "\n")).status == 0)
        let get = daemon.ctl("get", origin.url("/urgent.jpg"))
        #expect(get.status == 0, "urgent work is never held back: \(get.stderr)")
        usleep(500_000)
        #expect(try requests(origin, under: "/off/") == 0, "no queued URL tried while there is no network")
        let metrics = daemon.ctl("metrics").stdout
        #expect(metrics.contains("prefetchd_condition{condition=\"offline\",policy=\"pause\"} 1"), "\(metrics)")

        // Asleep is no network either; a local connection is a network: the backlog drains.
        try bus.setNetworkState(10)  // NM_STATE_ASLEEP
        usleep(300_000)
        #expect(try daemon.status().background?.mode == "pause")
        try bus.setNetworkState(50)  // NM_STATE_CONNECTED_LOCAL
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "run" })
        #expect(waitUntil(seconds: 30) { (try? daemon.status().cache.entries) == 21 }, "\(String(describing: try? daemon.status()))")
        #expect(try requests(origin, under: "/off/") == 20)
        #expect(daemon.log.contains("background lane: paused: no network (NetworkManager)"))
    }

    @Test("NetworkManager saying no connection is up is not enough: with a route to the internet (an interface it does not manage) the lane runs, in a network namespace without one it pauses, and a route that appears later is seen")
    func offlineNeedsNoRoute() throws {
        let bus = try MockSystemBus()
        try bus.start("networkmanager", name: "org.freedesktop.NetworkManager")
        try bus.setNetworkState(20)  // NM_STATE_DISCONNECTED
        // The kernel's own answer, in network namespaces of their own (unshare exec's the daemon, so its pid is the
        // daemon's): with only a loopback default route, and with no route at all.
        let routed = try DaemonUnderTest([], environment: bus.environment, launcher: [
            "/usr/bin/unshare", "--net", "/bin/sh", "-c", "ip link set lo up && ip route add default dev lo && exec \"$@\"", "sh"])
        let unrouted = try DaemonUnderTest([], environment: bus.environment, launcher: ["/usr/bin/unshare", "--net"])
        for daemon in [routed, unrouted] {
            #expect(waitUntil(seconds: 10) { (try? daemon.condition("offline"))??.source == "NetworkManager" }, "\(daemon.log)")
        }
        #expect(try routed.status().background?.mode == "run", "a route to the internet: not offline")
        #expect(try routed.condition("offline")?.active == false)
        #expect(waitUntil(seconds: 5) { (try? unrouted.status().background?.because) == ["offline"] }, "\(unrouted.log)")

        // The routes are looked at again while NetworkManager says no connection is up: one that appears is seen
        // within a few seconds, with no word from NetworkManager.
        let pid = try #require(unrouted.child?.process.processIdentifier)
        let added = run("/usr/bin/nsenter", ["--net=/proc/\(pid)/ns/net", "/bin/sh", "-c",
                                             "ip link set lo up && ip route add default dev lo"])
        #expect(added.status == 0, "\(added.stderr)")
        #expect(waitUntil(seconds: 10) { (try? unrouted.status().background?.mode) == "run" }, "\(unrouted.log)")
    }

    @Test("a route check that cannot open a socket (the daemon at its open-files limit) tells nothing about the network: NetworkManager saying no connection is up does not pause the lane for it")
    func routeCheckWithoutDescriptors() throws {
        let bus = try MockSystemBus()
        try bus.start("networkmanager", name: "org.freedesktop.NetworkManager")
        try bus.setNetworkState(20)  // NM_STATE_DISCONNECTED: the routes are looked at every 5 s
        let daemon = try DaemonUnderTest([], environment: bus.environment, launcher: [
            "/usr/bin/unshare", "--net", "/bin/sh", "-c", "ip link set lo up && ip route add default dev lo && exec \"$@\"", "sh"])
        #expect(waitUntil(seconds: 10) { (try? daemon.condition("offline"))??.source == "NetworkManager" }, "\(daemon.log)")
        #expect(try daemon.status().background?.mode == "run")

        // No descriptor left for the daemon while a route check runs, then its limit back.
        let pid = try #require(daemon.child?.process.processIdentifier)
        let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
        let soft = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }?
            .split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first)
        // The limit is on descriptor numbers: at the lowest free one, the next socket fails with EMFILE.
        let open = Set(try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").compactMap { Int($0) })
        let lowestFree = (0...).first { !open.contains($0) }!
        #expect(run("/usr/bin/prlimit", ["--pid", "\(pid)", "--nofile=\(lowestFree):"]).status == 0)
        usleep(6_000_000)
        #expect(run("/usr/bin/prlimit", ["--pid", "\(pid)", "--nofile=\(soft):"]).status == 0)
        #expect(try daemon.status().background?.mode == "run", "\(daemon.log)")
        #expect(!daemon.log.contains("no network"), "\(daemon.log)")
    }

    @Test("on battery and in power saver the background lane downloads at slow_rate in all; urgent work is not capped")
    func batteryAndPowerSaverSlowTheBackground() throws {
        let bus = try MockSystemBus()
        try bus.start("upower", name: "org.freedesktop.UPower")
        try bus.start("power_profiles_daemon", name: "net.hadess.PowerProfiles")
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--slow-rate", "128K", "--slow-width", "2"], environment: bus.environment)
        #expect(waitUntil(seconds: 10) {
            (try? daemon.condition("on_battery"))??.source == "UPower"
                && (try? daemon.condition("power_saver"))??.source == "power-profiles-daemon"
        }, "\(daemon.log)")

        try bus.setOnBattery(true)
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "slow" })
        var background = try #require(try daemon.status().background)
        #expect(background.because == ["on_battery"] && background.rateLimit == 128 << 10, "\(background)")
        #expect(daemon.ctl("status").stdout.contains("slow lane slow (128 KiB/s): on battery (UPower)"))

        // 6 × 300 KB at 128 KiB/s in all. What the two connections' kernel buffers hold (up to about 2 × 256 KB with
        // background_window 128K) is read at once when the lane may read, the debt paid by waiting afterwards; the
        // last bytes' debt is never waited for. So the last file cannot end before about (1,800 - 2 × 256 - 32) KB /
        // 128 KiB/s ≈ 9.8 s (4 files, 1.2 MB, once ended in 4.45 s: too few to hold the bound); on 127.0.0.1 without
        // the cap all six take milliseconds.
        let started = Date()
        let files = (0..<6).map { origin.url("/battery/\($0).jpg?size=300000") }
        #expect(daemon.ctl(arguments: ["queue"] + files).status == 0)
        // Urgent work meanwhile is not capped: 2 MB at once.
        let urgentStarted = Date()
        let urgent = daemon.ctl("get", "--timeout", "10", origin.url("/urgent-big.jpg?size=2000000"))
        #expect(urgent.status == 0 && Date().timeIntervalSince(urgentStarted) < 5, "\(urgent.stderr)")
        #expect(waitUntil(seconds: 40) { (try? daemon.status().cache.entries) == 7 }, "\(daemon.log)")
        let took = Date().timeIntervalSince(started)
        #expect(took > 6, "1.8 MB of background work in \(took) s with slow_rate 128K")
        #expect(!daemon.log.contains("timeout"), "a capped transfer waits its turn; it is not too slow")

        try bus.setOnBattery(false)
        try bus.setProfile("power-saver")
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.because) == ["power_saver"] })
        background = try #require(try daemon.status().background)
        #expect(background.mode == "slow" && background.rateLimit == 128 << 10)
        // 4 × 300 KB: with what the kernel buffers hold read at once (see above), the budget holds back about
        // 650 KB, 5 s. Two files left it about 60 KB, and ended once in 1.85 s.
        let saverStarted = Date()
        let saverFiles = (0..<4).map { origin.url("/saver/\($0).jpg?size=300000") }
        #expect(daemon.ctl(arguments: ["queue"] + saverFiles).status == 0)
        #expect(waitUntil(seconds: 30) { (try? daemon.status().cache.entries) == 11 })
        #expect(Date().timeIntervalSince(saverStarted) > 2, "the last files waited for the budget")

        try bus.setProfile("balanced")
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "run" })
        // 3 MB: capped, about (3,000 - 2 × 256 - 32) KB / 128 KiB/s ≈ 19 s (300 KB files took 2.7 s, under the bound).
        let freeStarted = Date()
        #expect(daemon.ctl("queue", "--wait", "--timeout", "30", origin.url("/free/0.jpg?size=1000000"),
                           origin.url("/free/1.jpg?size=1000000"), origin.url("/free/2.jpg?size=1000000")).status == 0)
        #expect(Date().timeIntervalSince(freeStarted) < 8, "the cap is lifted")
    }

    @Test("the system bus going away ended the daemon (GIO's shared connection exits on close): it runs on, nothing holds, and it follows the bus when it is back")
    func busGoesAway() throws {
        let bus = try MockSystemBus()
        try bus.start("networkmanager", name: "org.freedesktop.NetworkManager")
        try bus.addMetered(1)
        let daemon = try DaemonUnderTest(environment: bus.environment)
        #expect(waitUntil(seconds: 10) { (try? daemon.status().background?.mode) == "pause" }, "\(daemon.log)")
        bus.stop()
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "run" }, "\(daemon.log)")
        #expect(daemon.child?.process.isRunning == true && daemon.ctl("ping").status == 0)
        try bus.restart()
        try bus.start("networkmanager", name: "org.freedesktop.NetworkManager")
        try bus.addMetered(2)
        try bus.setMetered(1)
        // The daemon connects again within 10 s and reads Metered then, or sees the change if it was back sooner.
        #expect(waitUntil(seconds: 15) { (try? daemon.status().background?.mode) == "pause" }, "\(daemon.log)")

        // Restarted on the metered network with work queued: the first reading comes before the backlog starts.
        let origin = try Origin()
        #expect(daemon.ctl("queue", origin.url("/metered.jpg")).status == 0)
        daemon.kill9()
        try daemon.start()
        #expect(try daemon.status().background?.mode == "pause")
        usleep(500_000)
        #expect(try origin.count("/metered.jpg") == 0, "\(daemon.log)")
    }

    @Test("no system bus at all: nothing holds the background lane back")
    func noBusIsRun() throws {
        let origin = try Origin()
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/prefetchd-test-bus"
        let daemon = try DaemonUnderTest(["--log-level", "debug"], environment: environment)
        let background = try #require(try daemon.status().background)
        #expect(background.mode == "run" && background.because.isEmpty)
        #expect(background.conditions.map(\.name) == ["metered", "on_battery", "power_saver", "quiet_hours", "offline"])
        #expect(background.conditions.allSatisfy { !$0.active && $0.source == nil }, "\(background)")
        #expect(daemon.ctl("queue", "--wait", origin.url("/a.jpg")).status == 0)
        #expect(waitUntil(seconds: 5) { daemon.log.contains("no system bus") }, "\(daemon.log)")
    }

    /// The local minute of the day now, and the seconds into it.
    private func localNow() -> (minute: Int, second: Int) {
        var now = time(nil)
        var local = tm()
        localtime_r(&now, &local)
        return (Int(local.tm_hour) * 60 + Int(local.tm_min), Int(local.tm_sec))
    }

    private func clockText(_ minute: Int) -> String { String(format: "%02d:%02d", minute / 60, minute % 60) }

    @Test("quiet hours pause the background lane when the local clock enters them (clock moved, not waited for); SIGHUP lifts them")
    func quietHours() throws {
        let origin = try Origin()
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        // The daemon's clock is moved so that a window starting 30 minutes from now opens 5 s after it starts.
        let now = localNow()
        let window = clockText((now.minute + 30) % 1440) + "-" + clockText((now.minute + 90) % 1440)
        try "quiet_hours = \(window)\n".write(toFile: config, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["PREFETCHD_TEST_CLOCK_OFFSET"] = String(30 * 60 - now.second - 5)
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/prefetchd-test-bus"
        let daemon = try DaemonUnderTest(["--config", config], environment: environment)
        #expect(try daemon.status().background?.mode == "run", "\(window) has not begun")
        let backlog = (0..<300).map { origin.url("/q/\($0).jpg?delay=0.05") }
        #expect(daemon.ctl("queue", "-", stdin: backlog.joined(separator: "\n")).status == 0)

        #expect(waitUntil(seconds: 12) { (try? daemon.status().background?.mode) == "pause" }, "\(daemon.log)")
        let status = try daemon.status()
        #expect(status.background?.because == ["quiet_hours"], "\(String(describing: status.background))")
        #expect(try daemon.condition("quiet_hours")?.source == window)
        #expect(daemon.ctl("status").stdout.contains("slow lane paused: quiet hours (\(window))"))
        usleep(300_000)
        let atPause = try requests(origin, under: "/q/")
        #expect(atPause > 0 && atPause < 300)
        #expect(daemon.ctl("get", "--timeout", "10", origin.url("/urgent.jpg")).status == 0, "urgent work runs in quiet hours")
        usleep(700_000)
        #expect(try requests(origin, under: "/q/") == atPause)

        try "quiet_hours =\n".write(toFile: config, atomically: true, encoding: .utf8)
        kill(daemon.child!.pid, SIGHUP)
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "run" })
        #expect(waitUntil(seconds: 5) { (try? requests(origin, under: "/q/")) ?? 0 > atPause })
    }

    @Test("a daemon started inside quiet hours crashed at start-up: it starts with the background lane paused, and its queue waits")
    func startsInsideQuietHours() throws {
        let origin = try Origin()
        let now = localNow()
        let window = clockText((now.minute + 1439) % 1440) + "-" + clockText((now.minute + 60) % 1440)
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/prefetchd-test-bus"
        let daemon = try DaemonUnderTest(["--quiet-hours", window], environment: environment)
        #expect(try daemon.status().background?.because == ["quiet_hours"], "\(daemon.log)")
        #expect(daemon.ctl("queue", origin.url("/later.jpg")).status == 0)
        usleep(500_000)
        #expect(try origin.count("/later.jpg") == 0)
        daemon.kill9()
        // Restarted inside the window with the URL in its backlog: nothing starts before the lane is held.
        try daemon.start()
        #expect(try daemon.status().background?.mode == "pause")
        usleep(500_000)
        #expect(try origin.count("/later.jpg") == 0, "\(daemon.log)")
        let queued = try daemon.status()
        #expect(queued.slow.waiting + Int(queued.backlog) == 1, "\(queued)")
    }
}
