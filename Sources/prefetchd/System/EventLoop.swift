import CSystem
import Glibc

/// An epoll loop: file descriptors with handlers, one deadline, and work done at the end of every turn.
/// Confined to the thread that calls `run()`.
final class EventLoop {
    typealias Handler = (_ events: UInt32) -> Void

    private let epollFD: Int32
    private var handlers: [Int32: Handler] = [:]
    private var stopped = false
    /// Called after each batch of events, before waiting again (commit, flush replies).
    var endOfTurn: () -> Void = {}
    /// When the loop must wake at the latest (monotonic ms), recomputed every turn.
    var nextDeadline: () -> Int64? = { nil }
    /// Called when a deadline passes.
    var onDeadline: () -> Void = {}

    init() throws(SystemError) {
        epollFD = try syscall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
    }

    deinit { close(epollFD) }

    func add(_ fd: Int32, events: UInt32, handler: @escaping Handler) throws(SystemError) {
        var event = epoll_event(events: events, data: epoll_data_t(fd: fd))
        try syscall("epoll_ctl(ADD)", "fd \(fd)") { epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) }
        handlers[fd] = handler
    }

    func modify(_ fd: Int32, events: UInt32) {
        var event = epoll_event(events: events, data: epoll_data_t(fd: fd))
        do {
            try syscall("epoll_ctl(MOD)", "fd \(fd)") { epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event) }
        } catch {
            Log.warning("\(error)")
        }
    }

    /// Forgets `fd`; call before closing it.
    func remove(_ fd: Int32) {
        guard handlers.removeValue(forKey: fd) != nil else { return }
        epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
    }

    func isRegistered(_ fd: Int32) -> Bool { handlers[fd] != nil }

    func stop() { stopped = true }

    func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while !stopped {
            var timeout: Int32 = -1
            if let deadline = nextDeadline() {
                timeout = Int32(clamping: max(0, deadline - monotonicMilliseconds()))
            }
            let count = epoll_wait(epollFD, &events, Int32(events.count), timeout)
            if count < 0 {
                precondition(errno == EINTR, "epoll_wait: \(String(cString: strerror(errno)))")
                continue
            }
            for index in 0..<Int(count) {
                let fd = events[index].data.fd
                handlers[fd]?(events[index].events)
            }
            if let deadline = nextDeadline(), deadline <= monotonicMilliseconds() { onDeadline() }
            endOfTurn()
        }
    }
}
