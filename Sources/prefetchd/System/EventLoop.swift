import CSystem
import Glibc

/// An action the loop runs once its time has come (monotonic ms). Whoever made it owns it: it moves it, cancels it,
/// and it stops with its owner. Confined to the loop's thread.
final class LoopTimer {
    fileprivate(set) var due: Int64?
    fileprivate let action: () -> Void

    fileprivate init(_ action: @escaping () -> Void) { self.action = action }

    /// Runs the action at `time`, or at the next turn if it passed; nil cancels.
    func schedule(at time: Int64?) { due = time }

    func cancel() { due = nil }
}

/// Runs `handler` every interval while armed (a `watch` stream's snapshots, the metrics file).
final class Ticker {
    private var timer: LoopTimer!
    private var interval: Int64 = 0

    init(loop: EventLoop, handler: @escaping () -> Void) {
        timer = loop.makeTimer { [unowned self] in
            timer.schedule(at: monotonicMilliseconds() + interval)  // first: the handler may disarm it
            handler()
        }
    }

    func arm(intervalMilliseconds: Int) {
        guard timer.due == nil else { return }
        interval = Int64(intervalMilliseconds)
        timer.schedule(at: monotonicMilliseconds() + interval)
    }

    func disarm() { timer.cancel() }
}

/// An epoll loop: file descriptors with handlers, timers, and work done at the end of every turn.
/// Confined to the thread that calls `run()`.
final class EventLoop {
    typealias Handler = (_ events: UInt32) -> Void

    private let epollFD: Int32
    private var handlers: [Int32: Handler] = [:]
    /// Every timer made, held weakly: a timer lives as long as its owner keeps it. A handful, so a scan is enough.
    private var timers: [Weak] = []
    private var stopped = false
    /// Called after each batch of events and timers, before waiting again (commit, flush replies).
    var endOfTurn: () -> Void = {}

    private struct Weak { weak var timer: LoopTimer? }

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

    /// A timer that runs `action` on this loop once scheduled.
    func makeTimer(_ action: @escaping () -> Void) -> LoopTimer {
        let timer = LoopTimer(action)
        timers.removeAll { $0.timer == nil }
        timers.append(Weak(timer: timer))
        return timer
    }

    /// The earliest time a timer is due (monotonic ms).
    private var nextDue: Int64? { timers.compactMap { $0.timer?.due }.min() }

    /// Runs the timers that are due, each once: one that schedules itself again for now waits for the next turn.
    private func fireDueTimers() {
        let now = monotonicMilliseconds()
        let due = timers.compactMap(\.timer).filter { ($0.due ?? .max) <= now }
        for timer in due where (timer.due ?? .max) <= now {  // an earlier action may have moved it
            timer.due = nil
            timer.action()
        }
    }

    func stop() { stopped = true }

    func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while !stopped {
            var timeout: Int32 = -1
            if let due = nextDue {
                timeout = Int32(clamping: max(0, due - monotonicMilliseconds()))
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
            fireDueTimers()
            endOfTurn()
        }
    }
}

/// A descriptor the loop watches for reading, owned: released, it leaves the loop, then closes. The loop keys its
/// handlers by number, which the kernel hands out again once closed, so a registration left behind would give the
/// next descriptor with that number (a connection's socket) to the old handler.
final class LoopDescriptor {
    let fd: Int32
    private weak var loop: EventLoop?

    /// Takes `fd`, closed on release (also when registering it fails).
    init(_ fd: Int32, on loop: EventLoop, handler: @escaping EventLoop.Handler) throws(SystemError) {
        self.fd = fd
        try loop.add(fd, events: UInt32(EPOLLIN.rawValue), handler: handler)
        self.loop = loop
    }

    deinit {
        loop?.remove(fd)
        close(fd)
    }
}
