import Glibc
import QueueCore

/// Wall-clock time in milliseconds since the Unix epoch: what HTTP dates, freshness and access times are in.
func wallClockMilliseconds() -> Int64 { milliseconds(CLOCK_REALTIME) }

/// Monotonic time in milliseconds: the event loop's timers.
func monotonicMilliseconds() -> Int64 { milliseconds(CLOCK_MONOTONIC) }

/// Monotonic time in microseconds: the clients' shares of a turn.
func monotonicMicroseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
}

/// The scheduler's clock in milliseconds: the wall clock at the daemon's start, advanced since by the time that
/// passed (`CLOCK_BOOTTIME`, which counts a suspended machine's sleep), never by a step of the wall clock. Retries,
/// host pauses, the negative cache and the start rate run on it: a clock set back an hour stalled them for the hour,
/// and one set forward ended them early.
func schedulerMilliseconds() -> Int64 { schedulerClockStart.wall + milliseconds(CLOCK_BOOTTIME) - schedulerClockStart.boot }

private let schedulerClockStart = (wall: wallClockMilliseconds(), boot: milliseconds(CLOCK_BOOTTIME))

private func milliseconds(_ clock: clockid_t) -> Int64 {
    var now = timespec()
    clock_gettime(clock, &now)
    return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
}

extension Moment {
    /// Now on the scheduler's clock.
    static var now: Moment { Moment(milliseconds: schedulerMilliseconds()) }

    /// This moment on the wall clock, for people and clients (a pause's end in `status`).
    var wallClockMilliseconds: Int64 {
        milliseconds.saturatingSubtract(schedulerMilliseconds()).saturatingAdd(prefetchd.wallClockMilliseconds())
    }
}
