import CSystem
import Glibc

/// Gives memory freed after a burst (a scroll storm, many clients or views gone) back to the system (`malloc_trim`),
/// which glibc would keep for the process: every 10 s while turns go on, as soon as the work runs out, and at the end
/// of a turn that let go of a long list.
struct MemoryTrimmer {
    /// When memory is next given back (monotonic ms); 0 for at the end of this turn.
    private var nextTrim: Int64 = 0
    private var wasIdle = true

    /// At the end of a turn, `idle` when no task is left: trims when due. Returns whether the work just ran out.
    mutating func turnEnded(idle: Bool) -> Bool {
        let ranOut = idle && !wasIdle
        if monotonicMilliseconds() >= nextTrim || ranOut {
            malloc_trim(0)
            nextTrim = monotonicMilliseconds() + 10_000
        }
        wasIdle = idle
        return ranOut
    }

    /// Gives memory back at the end of this turn.
    mutating func trimSoon() { nextTrim = 0 }
}
