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
        let mock = try ChildProcess("/usr/bin/python3", ["-m", "dbusmock", "--template", template]
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

@Suite("Conditions: metered network, battery, power saver, quiet hours", .serialized)
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

    @Test("on battery and in power saver the background lane downloads at slow_rate; urgent work does not")
    func batteryAndPowerSaverSlowTheBackground() throws {
        let bus = try MockSystemBus()
        try bus.start("upower", name: "org.freedesktop.UPower")
        try bus.start("power_profiles_daemon", name: "net.hadess.PowerProfiles")
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--slow-rate", "64K"], environment: bus.environment)
        #expect(waitUntil(seconds: 10) {
            (try? daemon.condition("on_battery"))??.source == "UPower"
                && (try? daemon.condition("power_saver"))??.source == "power-profiles-daemon"
        }, "\(daemon.log)")

        try bus.setOnBattery(true)
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "slow" })
        var background = try #require(try daemon.status().background)
        #expect(background.because == ["on_battery"] && background.rateLimit == 65536, "\(background)")
        #expect(daemon.ctl("status").stdout.contains("slow lane slow (64 KiB/s): on battery (UPower)"))

        // 2 MB at 64 KiB/s takes half a minute; on 127.0.0.1 it would take milliseconds.
        let big = origin.url("/big.jpg?size=2000000")
        #expect(daemon.ctl("queue", big).status == 0)
        func received() throws -> Int64 {
            let list = try JSONDecoder().decode(TaskList.self, from: daemon.ctl("list", "--json").stdoutData)
            return list.tasks.first?.bytes ?? 0
        }
        #expect(waitUntil(seconds: 5) { (try? received()) ?? 0 > 0 }, "the 2 MB download runs, and at 64 KiB/s it cannot have ended")
        let start = try received(), startTime = Date()
        usleep(2_000_000)
        let rate = Double(try received() - start) / Date().timeIntervalSince(startTime)
        #expect(rate < 64 * 1024 * 1.5, "background at \(Int(rate)) B/s with slow_rate 64K")

        // An urgent get on the same origin is not capped.
        let urgent = daemon.ctl("get", origin.url("/urgent-big.jpg?size=2000000"))
        #expect(urgent.status == 0, "\(urgent.stderr)")

        try bus.setOnBattery(false)
        try bus.setProfile("power-saver")
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.because) == ["power_saver"] })
        background = try #require(try daemon.status().background)
        #expect(background.mode == "slow" && background.rateLimit == 65536)

        try bus.setProfile("balanced")
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "run" })
        #expect(waitUntil(seconds: 10) { (try? daemon.status().cache.entries) == 2 }, "the cap is lifted: \(daemon.log)")
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
        try bus.addMetered(1)
        // AddProperty sends no signal: the daemon reads Metered when it connects again (every 10 s).
        #expect(waitUntil(seconds: 15) { (try? daemon.status().background?.mode) == "pause" }, "\(daemon.log)")
    }

    @Test("no system bus at all: nothing holds the background lane back")
    func noBusIsRun() throws {
        let origin = try Origin()
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/prefetchd-test-bus"
        let daemon = try DaemonUnderTest(["--log-level", "debug"], environment: environment)
        let background = try #require(try daemon.status().background)
        #expect(background.mode == "run" && background.because.isEmpty)
        #expect(background.conditions.map(\.name) == ["metered", "on_battery", "power_saver", "quiet_hours"])
        #expect(background.conditions.allSatisfy { !$0.active && $0.source == nil }, "\(background)")
        #expect(daemon.ctl("queue", "--wait", origin.url("/a.jpg")).status == 0)
        #expect(waitUntil(seconds: 5) { daemon.log.contains("no system bus") }, "\(daemon.log)")
    }

    @Test("quiet hours pause the background lane when the local clock enters them (clock moved, not waited for); SIGHUP lifts them")
    func quietHours() throws {
        let origin = try Origin()
        // The daemon's clock is moved so that a window starting 30 minutes from now opens 2 s after it starts.
        var now = time(nil)
        var local = tm()
        localtime_r(&now, &local)
        let minute = Int(local.tm_hour) * 60 + Int(local.tm_min)
        let start = (minute + 30) % 1440, end = (minute + 90) % 1440
        let offset = 30 * 60 - Int(local.tm_sec) - 2
        func text(_ minute: Int) -> String { String(format: "%02d:%02d", minute / 60, minute % 60) }
        let window = "\(text(start))-\(text(end))"
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try "quiet_hours = \(window)\n".write(toFile: config, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["PREFETCHD_TEST_CLOCK_OFFSET"] = String(offset)
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/prefetchd-test-bus"
        let daemon = try DaemonUnderTest(["--config", config], environment: environment)
        #expect(try daemon.status().background?.mode == "run", "\(window) has not begun")
        let backlog = (0..<200).map { origin.url("/q/\($0).jpg?delay=0.05") }
        #expect(daemon.ctl("queue", "-", stdin: backlog.joined(separator: "\n")).status == 0)

        #expect(waitUntil(seconds: 8) { (try? daemon.status().background?.mode) == "pause" }, "\(daemon.log)")
        let status = try daemon.status()
        #expect(status.background?.because == ["quiet_hours"], "\(String(describing: status.background))")
        #expect(try daemon.condition("quiet_hours")?.source == window)
        #expect(daemon.ctl("status").stdout.contains("slow lane paused: quiet hours (\(window))"))
        usleep(300_000)
        let atPause = try requests(origin, under: "/q/")
        #expect(atPause < 200)
        #expect(daemon.ctl("get", origin.url("/urgent.jpg")).status == 0, "urgent work runs in quiet hours")
        usleep(700_000)
        #expect(try requests(origin, under: "/q/") == atPause)

        try "quiet_hours =\n".write(toFile: config, atomically: true, encoding: .utf8)
        kill(daemon.child!.pid, SIGHUP)
        #expect(waitUntil(seconds: 5) { (try? daemon.status().background?.mode) == "run" })
        #expect(waitUntil(seconds: 5) { (try? requests(origin, under: "/q/")) ?? 0 > atPause })
    }
}
