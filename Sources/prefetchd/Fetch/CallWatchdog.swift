import CSystem
import Glibc
import Synchronization

/// Watches the event loop's calls into curl from a thread of its own, and stops a connection that keeps one busy.
///
/// curl 7.88 reads an HTTP/2 connection in one call for as long as frames come that carry nothing for the stream it
/// reads (`cf_h2_recv`: empty DATA, WINDOW_UPDATE, PRIORITY, unknown frames): a server sending them without a pause
/// held the loop, and with it every client and every other server, for as long as it wished (19 s of a 20 s flood).
/// A call that has used `longestCall` of the loop thread's CPU is stopped at its source: the polled socket that took
/// in the most bytes meanwhile gets a filter that drops every packet, so the call ends once what came is read. The
/// pool then ends that connection (`takeStopped`), and the transfers on it fail.
final class CallWatchdog: Sendable {
    /// The loop thread's CPU one call into curl may use (ms). Real calls take a few: a read loop of curl's is at most
    /// 100 reads of 16 KiB.
    static let longestCall: Int64 = 250

    private struct State {
        /// Counts the calls; odd while one runs.
        var calls: UInt64 = 0
        /// The call the watchdog saw running, and the loop's CPU time (ns) then.
        var seen: (call: UInt64, cpu: Int64)?
        /// The sockets curl polls: one of them is what a call reads.
        var sockets: Set<Int32> = []
        /// Sockets stopped, for the pool to end.
        var stopped: [Int32] = []
    }

    private let state = Mutex(State())
    /// The CPU clock of the thread that made the watchdog: the loop's.
    private let loopClock: clockid_t

    /// Made on the loop thread; starts the watchdog's thread.
    init() throws(SystemError) {
        var clock = clockid_t()
        let status = pthread_getcpuclockid(pthread_self(), &clock)
        guard status == 0 else { throw SystemError(call: "pthread_getcpuclockid", errno: status, detail: "the loop thread") }
        loopClock = clock
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let started = pthread_create(&thread, nil, { context in
            let watchdog = Unmanaged<CallWatchdog>.fromOpaque(context!).takeRetainedValue()
            _ = pthread_setname_np(pthread_self(), "pf-watchdog")
            while true {
                usleep(50_000)
                watchdog.look()
            }
        }, context)
        guard started == 0 else {
            Unmanaged<CallWatchdog>.fromOpaque(context).release()
            throw SystemError(call: "pthread_create", errno: started, detail: "pf-watchdog")
        }
        pthread_detach(thread)
    }

    /// Runs a call into curl under watch.
    func watch(_ call: () -> Void) {
        state.withLock { $0.calls &+= 1 }
        call()
        state.withLock { $0.calls &+= 1 }
    }

    /// curl polls `socket` now, or no longer.
    func polls(_ socket: Int32, _ polled: Bool) {
        state.withLock { state in
            if polled { state.sockets.insert(socket) } else { state.sockets.remove(socket) }
        }
    }

    /// The sockets stopped since the last call.
    func takeStopped() -> [Int32] {
        state.withLock { state in
            defer { state.stopped = [] }
            return state.stopped
        }
    }

    /// On the watchdog's thread: a call that has run for `longestCall` of the loop's CPU stops the socket it reads.
    private func look() {
        state.withLock { state in
            guard state.calls & 1 == 1 else { return state.seen = nil }
            let cpu = cpuNanoseconds()
            guard let seen = state.seen, seen.call == state.calls else { return state.seen = (state.calls, cpu) }
            guard cpu - seen.cpu >= Self.longestCall * 1_000_000, let busiest = Self.busiest(state.sockets) else { return }
            Self.dropInput(busiest)
            state.sockets.remove(busiest)
            state.stopped.append(busiest)
            state.seen = (state.calls, cpu)  // the next one, if this was not it, a call's length later
        }
    }

    private func cpuNanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(loopClock, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    /// Of `sockets`, the one that took in the most bytes over 20 ms, if any took in some.
    private static func busiest(_ sockets: Set<Int32>) -> Int32? {
        let before = sockets.compactMap { socket in PathWindows.info(socket).map { (socket, $0.bytes_received) } }
        usleep(20_000)
        var busiest: (socket: Int32, bytes: UInt64)?
        for (socket, bytes) in before {
            guard let now = PathWindows.info(socket)?.bytes_received, now > bytes else { continue }
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
