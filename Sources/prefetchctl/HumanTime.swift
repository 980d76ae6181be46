import Glibc

/// Instants and spans of time as a person reads them: local time with how long ago or ahead it is, never epoch
/// seconds. Every number comes from the daemon, so each is clamped to years 1970 to 9999 first.
enum HumanTime {
    /// The latest instant shown: 9999-12-31 23:59:59 UTC.
    private static let latest: Int64 = 253_402_300_799

    /// Now, in Unix seconds.
    static func now() -> Int64 { Int64(time(nil)) }

    /// `2026-12-01 12:43 (5 min ago)`; `13:05 (in 40 s)` when `dateWhenToday` is false and the instant is on the
    /// same local day as `now`.
    static func instant(_ seconds: Int64, now: Int64, dateWhenToday: Bool = true) -> String {
        let at = clamped(seconds), now = clamped(now)
        let timeOnly = !dateWhenToday && sameLocalDay(at, now)
        let shown = format(at, timeOnly ? "%H:%M" : "%Y-%m-%d %H:%M")
        return shown + " (" + (at > now ? "in " + span(at - now) : span(now - at) + " ago") + ")"
    }

    /// `fresh for 23 h` while `now` is before `until`, else `stale since 2 h`.
    /// A copy fetched later than `now` (by more than the second the daemon allows) is stale whatever its lifetime,
    /// as the daemon judges it: the clock was set back since.
    static func freshness(fetched: Int64, until: Int64, now: Int64) -> String {
        let fetched = clamped(fetched), until = clamped(until), now = clamped(now)
        if fetched > now + 1 {
            return "stale: fetched later than now (the clock was set back since); revalidated when asked for"
        }
        return until > now ? "fresh for " + span(until - now) : "stale since " + span(now - until)
    }

    /// `0 s`, `40 s`, `5 min 20 s`, `12 min`, `1 h 5 min`, `23 h`, `2 d 3 h`, `45 d`: the largest unit, and the next
    /// one while the first is below 10; rounded down.
    static func span(_ seconds: Int64) -> String {
        let seconds = clamped(seconds)
        let units: [(size: Int64, name: String)] = [(86_400, "d"), (3_600, "h"), (60, "min"), (1, "s")]
        guard let index = units.firstIndex(where: { seconds >= $0.size }) else { return "0 s" }
        let (size, name) = units[index]
        let whole = seconds / size
        var text = "\(whole) \(name)"
        if whole < 10, index + 1 < units.count {
            let next = units[index + 1]
            let part = seconds % size / next.size
            if part > 0 { text += " \(part) \(next.name)" }
        }
        return text
    }

    private static func clamped(_ seconds: Int64) -> Int64 { max(0, min(latest, seconds)) }

    private static func localTime(_ seconds: Int64) -> tm {
        var value = time_t(seconds)
        var parts = tm()
        localtime_r(&value, &parts)
        return parts
    }

    private static func sameLocalDay(_ one: Int64, _ other: Int64) -> Bool {
        let one = localTime(one), other = localTime(other)
        return one.tm_year == other.tm_year && one.tm_yday == other.tm_yday
    }

    private static func format(_ seconds: Int64, _ pattern: String) -> String {
        var parts = localTime(seconds)
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, pattern, &parts)
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
