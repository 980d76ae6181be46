import CGio
import CSystem
import Dispatch
import Glibc
import QueueCore
import Synchronization

/// What the system's own services say about the conditions that may hold background work back. A condition
/// whose service is not running is nil, which counts as "not metered, on mains, no power saver".
struct ObservedConditions: Equatable, Sendable {
    var metered: Bool?
    var onBattery: Bool?
    var powerSaver: Bool?
    var offline: Bool?
    /// Why the system bus could not be reached, when it could not.
    var busError: String?

    /// The service that reports each condition the system knows (quiet hours come from the clock).
    static func service(_ condition: Condition) -> String? {
        switch condition {
        case .metered, .offline: "NetworkManager"
        case .onBattery: "UPower"
        case .powerSaver: "power-profiles-daemon"
        case .quietHours: nil
        }
    }

    /// What the service of `condition` says, nil when it says nothing.
    func value(_ condition: Condition) -> Bool? {
        switch condition {
        case .metered: metered
        case .onBattery: onBattery
        case .powerSaver: powerSaver
        case .quietHours: nil
        case .offline: offline
        }
    }
}

/// Watches NetworkManager's `Metered` and `State`, UPower's `OnBattery` and power-profiles-daemon's `ActiveProfile`
/// on the system D-Bus. GDBus runs on a thread of its own with its own GLib main context (the loop thread never
/// blocks on the bus); each change reaches the loop thread through an eventfd. Services that start or stop later are
/// seen; when the bus itself goes away nothing holds, and the monitor connects again every few seconds until it is
/// back.
final class ConditionMonitor {
    private let eventFD: Int32
    private let watcher: BusWatcher
    private let onChange: (ObservedConditions) -> Void
    /// The conditions as the loop thread last took them.
    private(set) var current = ObservedConditions()
    /// How long start-up waits for the first reading, so that no background work starts on a metered network
    /// before the bus has said so; a bus slower than this is followed as its answers come.
    private static let firstReadingTimeout = DispatchTimeInterval.seconds(2)

    /// `environment`'s `PREFETCHD_TEST_INTERNET_ROUTE` (`yes` or `no`) stands in for the kernel's routes, for tests.
    init(loop: EventLoop, environment: [String: String],
         onChange: @escaping (ObservedConditions) -> Void) throws(SystemError) {
        eventFD = try syscall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }
        var routeToTheInternet: @Sendable () -> Bool = InternetRoute.exists
        if let forced = environment["PREFETCHD_TEST_INTERNET_ROUTE"] {
            let routed = forced == "yes"
            routeToTheInternet = { routed }
        }
        watcher = BusWatcher(eventFD: eventFD, routeToTheInternet: routeToTheInternet)
        self.onChange = onChange
        try loop.add(eventFD, events: UInt32(EPOLLIN.rawValue)) { [unowned self] _ in self.take() }
        let watcher = self.watcher
        // The thread lives as long as the process: GDBus keeps its proxies up to date there.
        DispatchQueue(label: "prefetchd.system-bus").async { watcher.run() }
        if watcher.firstReading.wait(timeout: .now() + Self.firstReadingTimeout) == .success {
            current = watcher.latest.withLock { $0 }
        }
    }

    private func take() {
        var counter: UInt64 = 0
        _ = read(eventFD, &counter, 8)
        let latest = watcher.latest.withLock { $0 }
        guard latest != current else { return }
        current = latest
        onChange(latest)
    }
}

/// The GLib side of `ConditionMonitor`: used only on its own thread, but for `latest` and the eventfd.
private final class BusWatcher: @unchecked Sendable {
    let latest = Mutex(ObservedConditions())
    /// Signalled once, when the first reading (or the failure to reach the bus) is in `latest`.
    let firstReading = DispatchSemaphore(value: 0)
    private var published = false
    private let eventFD: Int32
    private var context: OpaquePointer?
    private var bus: OpaquePointer?
    private var network: UnsafeMutablePointer<GDBusProxy>?
    private var power: UnsafeMutablePointer<GDBusProxy>?
    private var profiles: UnsafeMutablePointer<GDBusProxy>?
    /// How long after losing the bus (or not reaching it) the next attempt comes.
    private static let retrySeconds: UInt32 = 10
    /// Whether the kernel routes to the internet (`InternetRoute`).
    private let routeToTheInternet: @Sendable () -> Bool
    /// Whether the routes are to be looked at again (NetworkManager says no connection is up).
    private var routeCheckPending = false
    private static let routeCheckSeconds: UInt32 = 5

    init(eventFD: Int32, routeToTheInternet: @escaping @Sendable () -> Bool) {
        self.eventFD = eventFD
        self.routeToTheInternet = routeToTheInternet
    }

    func run() {
        context = g_main_context_new()
        g_main_context_push_thread_default(context)
        connect()
        g_main_loop_run(g_main_loop_new(context, 0))
    }

    private var unretained: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    /// Connects to the system bus and follows the three services. Without a bus nothing holds, and it tries again.
    private func connect() {
        var error: UnsafeMutablePointer<GError>?
        guard let bus = prefetchd_system_bus_connect(&error) else {
            publish(ObservedConditions(busError: GDBusFailure(error).message))
            return retryLater()
        }
        self.bus = bus
        prefetchd_connection_on_closed(bus, { data in
            Unmanaged<BusWatcher>.fromOpaque(data!).takeUnretainedValue().lost()
        }, unretained)
        network = proxy(bus, "org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager",
                        "org.freedesktop.NetworkManager")
        power = proxy(bus, "org.freedesktop.UPower", "/org/freedesktop/UPower", "org.freedesktop.UPower")
        profiles = proxy(bus, "net.hadess.PowerProfiles", "/net/hadess/PowerProfiles", "net.hadess.PowerProfiles")
        read()
    }

    /// The bus went away (a restart of dbus): nothing holds until it is back.
    private func lost() {
        for proxy in [network, power, profiles] { if let proxy { g_object_unref(proxy) } }
        (network, power, profiles) = (nil, nil, nil)
        if let bus { g_object_unref(UnsafeMutableRawPointer(bus)) }
        bus = nil
        publish(ObservedConditions(busError: "the system bus closed the connection"))
        retryLater()
    }

    private func retryLater() {
        prefetchd_call_later(context, Self.retrySeconds, { data in
            Unmanaged<BusWatcher>.fromOpaque(data!).takeUnretainedValue().connect()
            return 0  // G_SOURCE_REMOVE
        }, unretained)
    }

    /// A proxy that follows the service's properties and presence, without starting it.
    private func proxy(_ bus: OpaquePointer, _ name: String, _ path: String,
                       _ interface: String) -> UnsafeMutablePointer<GDBusProxy>? {
        var error: UnsafeMutablePointer<GError>?
        guard let proxy = g_dbus_proxy_new_sync(bus, G_DBUS_PROXY_FLAGS_DO_NOT_AUTO_START, nil, name, path, interface,
                                                nil, &error) else {
            g_clear_error(&error)
            return nil
        }
        prefetchd_proxy_on_change(proxy, { data in
            Unmanaged<BusWatcher>.fromOpaque(data!).takeUnretainedValue().read()
        }, unretained)
        return proxy
    }

    /// Reads every condition from the proxies' caches and hands them to the loop thread.
    private func read() {
        var conditions = ObservedConditions()
        var metered: UInt32 = 0
        // NM_METERED_YES (1) and NM_METERED_GUESS_YES (3) are metered; UNKNOWN, NO and GUESS_NO are not.
        if let network, prefetchd_proxy_uint32(network, "Metered", &metered) != 0 {
            conditions.metered = metered == 1 || metered == 3
        }
        var state: UInt32 = 0
        // NM_STATE_ASLEEP (10), DISCONNECTED (20), DISCONNECTING (30) and CONNECTING (40): no connection of
        // NetworkManager's is up. UNKNOWN (0) and the CONNECTED states (50 local, 60 site, 70 global) are not offline:
        // an origin on the local network or the site may still answer. Nor is a kernel that routes to the internet,
        // through an interface NetworkManager does not manage: while NetworkManager says no connection is up, the
        // routes are looked at again every few seconds, as such an interface comes and goes unannounced.
        if let network, prefetchd_proxy_uint32(network, "State", &state) != 0 {
            let disconnected = (10...40).contains(state)
            conditions.offline = disconnected && !routeToTheInternet()
            if disconnected { checkRoutesLater() }
        }
        var onBattery: Int32 = 0
        if let power, prefetchd_proxy_boolean(power, "OnBattery", &onBattery) != 0 {
            conditions.onBattery = onBattery != 0
        }
        if let profiles, let profile = prefetchd_proxy_string(profiles, "ActiveProfile") {
            conditions.powerSaver = strcmp(profile, "power-saver") == 0
            g_free(profile)
        }
        publish(conditions)
    }

    private func checkRoutesLater() {
        guard !routeCheckPending else { return }
        routeCheckPending = true
        prefetchd_call_later(context, Self.routeCheckSeconds, { data in
            let watcher = Unmanaged<BusWatcher>.fromOpaque(data!).takeUnretainedValue()
            watcher.routeCheckPending = false
            watcher.read()
            return 0  // G_SOURCE_REMOVE
        }, unretained)
    }

    private func publish(_ conditions: ObservedConditions) {
        latest.withLock { $0 = conditions }
        if !published {
            published = true
            firstReading.signal()
        }
        var one: UInt64 = 1
        _ = write(eventFD, &one, 8)
    }
}

/// A GError's message, freeing the error.
private struct GDBusFailure {
    let message: String

    init(_ error: UnsafeMutablePointer<GError>?) {
        message = error.flatMap { $0.pointee.message.map { String(cString: $0) } } ?? "unknown error"
        var error = error
        g_clear_error(&error)
    }
}

/// Whether the kernel would route a packet to the internet, over IPv4 or IPv6: a UDP socket connected to a
/// documentation address (RFC 5737, RFC 3849) fails with ENETUNREACH without a route. Nothing is sent, and no
/// `/proc` is read (the system service cannot see `/proc/net`). Only the kernel saying "no route" on both families
/// counts: a probe that fails for another reason (too many open files) tells nothing, and nothing is paused for it.
enum InternetRoute {
    /// One family's probe.
    enum Answer: Equatable { case routed, unrouted, unknown }

    @Sendable static func exists() -> Bool {
        var v4 = sockaddr_in()
        v4.sin_family = sa_family_t(AF_INET)
        v4.sin_port = UInt16(9).bigEndian
        inet_pton(AF_INET, "198.51.100.1", &v4.sin_addr)
        var v6 = sockaddr_in6()
        v6.sin6_family = sa_family_t(AF_INET6)
        v6.sin6_port = UInt16(9).bigEndian
        inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr)
        return probe(AF_INET, &v4, socklen_t(MemoryLayout<sockaddr_in>.size)) != .unrouted
            || probe(AF_INET6, &v6, socklen_t(MemoryLayout<sockaddr_in6>.size)) != .unrouted
    }

    /// `socket` failing with `error`: a kernel without the family has no route over it; anything else (EMFILE,
    /// ENOBUFS) is about this process, not the network.
    static func answer(socketError error: Int32) -> Answer { error == EAFNOSUPPORT ? .unrouted : .unknown }

    /// `connect` failing with `error`: no route, or no address to send from; anything else (a firewall's EPERM)
    /// does not say the network is down.
    static func answer(connectError error: Int32) -> Answer {
        [ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL].contains(error) ? .unrouted : .unknown
    }

    private static func probe<Address>(_ family: Int32, _ address: inout Address, _ length: socklen_t) -> Answer {
        let fd = socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return answer(socketError: errno) }
        defer { close(fd) }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) == 0 }
        }
        return connected ? .routed : answer(connectError: errno)
    }
}
