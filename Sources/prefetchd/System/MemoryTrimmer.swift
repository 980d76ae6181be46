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

    /// Blocks of 128 KiB and more (a client's unread output, a long reply, a view's rows) are mapped on their own
    /// and given back when freed. glibc raises that threshold each time such a block is freed, after which the next
    /// ones come from the heap and stay resident: 40 clients pipelining `list`s without reading peaked at 164 MB for
    /// the 64 MiB `output_budget`.
    ///
    /// Fixing that threshold also fixes glibc's trim threshold at its 128 KiB, and a fetch's 64 KiB body buffer
    /// freed at the heap's top gave pages back that the next fetch's buffer faulted in again: free memory at the top
    /// is kept up to 8 MiB (the trims above give it back).
    static func mapLargeBlocksApart() {
        mallopt(M_MMAP_THRESHOLD, 128 * 1024)
        mallopt(M_TRIM_THRESHOLD, 8 * 1024 * 1024)
    }
}
