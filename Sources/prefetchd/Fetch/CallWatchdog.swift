import CSystem
import Dispatch
import Glibc
import Synchronization

/// Watches the event loop's calls into curl from a thread of its own, and stops a connection that keeps one busy.
///
/// curl 7.88 reads an HTTP/2 connection in one call for as long as frames come that carry nothing for the stream it
/// reads (`cf_h2_recv`: empty DATA, WINDOW_UPDATE, PRIORITY, unknown frames): a server sending them without a pause
/// held the loop, and with it every client and every other server, for as long as it wished (19 s of a 20 s flood).
/// A call that has used `longestCall` of the loop thread's CPU is stopped at its source: the socket it was made for,
/// if that one is taking in bytes, else (curl's timer, which may read any) the polled socket that takes in the most,
/// gets a filter that drops every packet, so the call ends once what came is read. The pool then ends that
/// connection (`takeStopped`), and the transfers on it fail. While curl polls no socket, the
/// watchdog sleeps until it does: an idle daemon is not woken 20 times a second.
final class CallWatchdog: Sendable {
    /// The loop thread's CPU one call into curl may use (ms). Real calls take a few: a read loop of curl's is at most
    /// 100 reads of 16 KiB.
    static let longestCall: Int64 = 250

    private struct State {
        /// Counts the calls; odd while one runs.
        var calls: UInt64 = 0
        /// The socket the running call was made for; -1 for curl's timer.
        var socket: Int32 = -1
        /// The call the watchdog saw running, and the loop's CPU time (ns) then.
        var seen: (call: UInt64, cpu: Int64)?
        /// The sockets curl polls: one of them is what a call reads.
        var sockets: Set<Int32> = []
        /// Sockets stopped, for the pool to end. curl closing one (it stops polling it first) takes it out: its
        /// number may name a new connection by the time the pool looks.
        var stopped: Set<Int32> = []
    }

    private let state = Mutex(State())
    /// Signalled when curl starts polling a socket while it polled none.
    private let polling = DispatchSemaphore(value: 0)
    /// The CPU clock of the thread that made the watchdog: the loop's.
    private let loopClock: clockid_t

    /// Made on the loop thread; starts the watchdog's thread.
    init() throws(SystemError) {
        var clock = clockid_t()
        let status = pthread_getcpuclockid(pthread_self(), &clock)
        guard status == 0 else { throw SystemError(call: "pthread_getcpuclockid", errno: status, detail: "the loop thread") }
        loopClock = clock
        try startDetachedThread(named: "pf-watchdog") { [self] in
            while true {
                if state.withLock({ $0.sockets.isEmpty }) { polling.wait() } else { usleep(50_000) }
                look()
            }
        }
    }

    /// Runs a call into curl made for `socket` (-1: curl's timer) under watch.
    func watch(_ socket: Int32, _ call: () -> Void) {
        state.withLock { state in
            state.calls &+= 1
            state.socket = socket
        }
        call()
        state.withLock { $0.calls &+= 1 }
    }

    /// curl polls `socket` now, or no longer.
    func polls(_ socket: Int32, _ polled: Bool) {
        let first = state.withLock { state in
            state.stopped.remove(socket)
            guard polled else {
                state.sockets.remove(socket)
                return false
            }
            return state.sockets.insert(socket).inserted && state.sockets.count == 1
        }
        if first { polling.signal() }
    }

    /// The sockets stopped since the last call.
    func takeStopped() -> Set<Int32> {
        state.withLock { state in
            defer { state.stopped = [] }
            return state.stopped
        }
    }

    /// On the watchdog's thread: a call that has run for `longestCall` of the loop's CPU stops the socket it reads.
    /// The lock is held throughout, sleep included: curl closes no polled socket meanwhile (it stops polling it
    /// first), so the number the filter goes on names the connection that was measured.
    private func look() {
        state.withLock { state in
            guard state.calls & 1 == 1 else { return state.seen = nil }
            let cpu = cpuNanoseconds()
            guard let seen = state.seen, seen.call == state.calls else { return state.seen = (state.calls, cpu) }
            guard cpu - seen.cpu >= Self.longestCall * 1_000_000,
                  let source = Self.source(state.sockets, preferring: state.socket) else { return }
            Self.dropInput(source)
            state.sockets.remove(source)
            state.stopped.insert(source)
            state.seen = (state.calls, cpu)  // the next one, if this was not it, a call's length later
        }
    }

    private func cpuNanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(loopClock, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    /// Of `sockets`, `preferred` if it took in bytes over 20 ms, else the one that took in the most, if any did.
    private static func source(_ sockets: Set<Int32>, preferring preferred: Int32) -> Int32? {
        let before = sockets.compactMap { socket in PathWindows.info(socket).map { (socket, $0.bytes_received) } }
        usleep(20_000)
        var busiest: (socket: Int32, bytes: UInt64)?
        for (socket, bytes) in before {
            guard let now = PathWindows.info(socket)?.bytes_received, now > bytes else { continue }
            if socket == preferred { return socket }
            if now - bytes > busiest?.bytes ?? 0 { busiest = (socket, now - bytes) }
        }
        return busiest?.socket
    }

    /// A socket filter of one instruction, `ret #0`: every packet that arrives on `socket` is dropped.
    private static func dropInput(_ socket: Int32) {
        var drop = pf_sock_filter(code: 0x06, jt: 0, jf: 0, k: 0)  // BPF_RET | BPF_K
        withUnsafeMutablePointer(to: &drop) { instruction in
            var program = pf_sock_fprog(len: 1, filter: instruction)
            _ = setsockopt(socket, SOL_SOCKET, SO_ATTACH_FILTER, &program, socklen_t(MemoryLayout<pf_sock_fprog>.size))
        }
    }
}
