import CSystem
import Glibc
import PrefetchProtocol
import QueueCore

/// Decides what the background lane may do: the strictest policy among the conditions that hold, a metered network,
/// no network, battery and the power-saver profile from the system bus (`ConditionMonitor`), quiet hours from the
/// local clock. Tells its owner when the decision changes; urgent work is never its business.
final class BackgroundConditions {
    private(set) var policy: BackgroundPolicy
    private(set) var mode: BackgroundMode = .run
    /// The conditions that ask for `mode`, none while it is `run`.
    private(set) var because: [Condition] = []
    private var monitor: ConditionMonitor!
    private var quietHoursTimer: WallClockTimer!
    /// Seconds added to the wall clock when reading the time of day (`PREFETCHD_TEST_CLOCK_OFFSET`), so that tests
    /// can be at any time of day without waiting for it.
    private let clockOffset: Int64
    /// Services already logged as absent.
    private var absentLogged: Set<String> = []
    private let onChange: () -> Void

    init(loop: EventLoop, policy: BackgroundPolicy, environment: [String: String],
         onChange: @escaping () -> Void) throws(SystemError) {
        self.policy = policy
        self.onChange = onChange
        clockOffset = environment["PREFETCHD_TEST_CLOCK_OFFSET"].flatMap { Int64($0) }
            .map { max(-366 * 86_400, min($0, 366 * 86_400)) } ?? 0
        quietHoursTimer = try WallClockTimer(loop: loop) { [unowned self] in self.evaluate() }
        monitor = try ConditionMonitor(loop: loop, environment: environment) { [unowned self] observed in
            self.logAbsentServices(observed)
            self.evaluate()
        }
        logAbsentServices(monitor.current)
        evaluate(notifying: false)
    }

    /// New policies (SIGHUP).
    func update(policy: BackgroundPolicy) {
        self.policy = policy
        evaluate()
    }

    /// Whether `condition` holds now, and who says so (nil: nothing reports it, which counts as not holding).
    func reading(_ condition: Condition) -> (active: Bool, source: String?) {
        if condition == .quietHours {
            guard let window = policy.quietHours else { return (false, nil) }
            return (window.contains(minute: localTime().minute), window.description)
        }
        guard let value = monitor.current.value(condition) else { return (false, nil) }
        return (value, ObservedConditions.service(condition))
    }

    /// The state as `status`, `watch` and metrics show it; `rateLimit` is the cap in force while `slow`.
    func state(rateLimit: Int64?) -> BackgroundState {
        BackgroundState(
            mode: mode.rawValue, because: because.map(\.rawValue), rateLimit: mode == .slow ? rateLimit : nil,
            conditions: Condition.allCases.map { condition in
                let reading = reading(condition)
                return .init(name: condition.rawValue, active: reading.active, source: reading.source,
                             policy: policy.mode(for: condition).rawValue)
            })
    }

    /// Decides again; tells the owner when the decision changed (not the first one, made while it is being built).
    private func evaluate(notifying: Bool = true) {
        let active = Set(Condition.allCases.filter { reading($0).active })
        let decision = policy.decide(active)
        scheduleQuietHoursChange()
        guard decision.mode != mode || decision.because != because else { return }
        mode = decision.mode
        because = decision.because
        if notifying { onChange() }
    }

    /// Wakes up when the quiet hours next open or close, and at every quarter hour besides: daylight saving time
    /// starts and ends on a quarter hour, and moves the local time without moving the wall clock. (The timer also
    /// fires when the clock is set; a new system time zone takes effect when the daemon restarts, as glibc reads it
    /// once.)
    private func scheduleQuietHoursChange() {
        guard let window = policy.quietHours else { return quietHoursTimer.cancel() }
        let now = localTime()
        let change = now.unixMilliseconds + Int64(window.minutesUntilChange(from: now.minute)) * 60_000
            - now.millisecondsIntoMinute
        let quarterHour: Int64 = 15 * 60_000
        let nextQuarter = (now.unixMilliseconds / quarterHour + 1) * quarterHour
        quietHoursTimer.fire(atUnixMilliseconds: min(change, nextQuarter) - clockOffset * 1000)
    }

    /// The local time of day (with the test offset), and the Unix time it was read at.
    private func localTime() -> (minute: Int, millisecondsIntoMinute: Int64, unixMilliseconds: Int64) {
        let unix = wallClockMilliseconds() + clockOffset * 1000
        var seconds = time_t(unix / 1000)
        var parts = tm()
        localtime_r(&seconds, &parts)
        return (Int(parts.tm_hour) * 60 + Int(parts.tm_min),
                Int64(min(parts.tm_sec, 59)) * 1000 + unix % 1000, unix)
    }

    /// Says once, at debug level, which services are absent: their conditions count as not holding.
    private func logAbsentServices(_ observed: ObservedConditions) {
        if let error = observed.busError {
            guard absentLogged.insert("bus").inserted else { return }
            return Log.debug("no system bus (\(error)): the network counts as up and not metered, the machine as on mains")
        }
        for condition in Condition.allCases {
            guard let service = ObservedConditions.service(condition), observed.value(condition) == nil,
                  absentLogged.insert(service).inserted else { continue }
            Log.debug("\(service) does not answer on the system bus: \(condition.description) counts as not holding")
        }
    }
}

/// A one-shot timer at a wall-clock time (timerfd on CLOCK_REALTIME, absolute): after a suspend it fires when the
/// clock says so, not after the time that elapsed, and it fires at once when the clock is set (the owner then
/// decides again and sets the next time).
final class WallClockTimer {
    private let timer: LoopDescriptor
    private var fd: Int32 { timer.fd }

    init(loop: EventLoop, handler: @escaping () -> Void) throws(SystemError) {
        let fd = try syscall("timerfd_create") { timerfd_create(CLOCK_REALTIME, Int32(TFD_NONBLOCK | TFD_CLOEXEC)) }
        timer = try LoopDescriptor(fd, on: loop) { _ in
            var expirations: UInt64 = 0
            _ = read(fd, &expirations, 8)  // ECANCELED when the clock was set: the handler decides again all the same
            handler()
        }
    }

    func fire(atUnixMilliseconds milliseconds: Int64) {
        let at = max(1, milliseconds)
        var spec = itimerspec(it_interval: timespec(),
                              it_value: timespec(tv_sec: Int(at / 1000), tv_nsec: Int(at % 1000) * 1_000_000))
        timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME) | Int32(TFD_TIMER_CANCEL_ON_SET), &spec, nil)
    }

    func cancel() {
        var spec = itimerspec()
        timerfd_settime(fd, 0, &spec, nil)
    }
}
