import Dispatch
import CSystem
import Glibc
import Synchronization

/// A few threads for CPU-heavy or blocking work; results come back to the loop thread through an eventfd. With one
/// thread, jobs run one at a time in the order they were given.
final class WorkerPool {
    private let queue: DispatchQueue
    private let slots: DispatchSemaphore
    private let eventFD: Int32
    private weak var loop: EventLoop?
    private let finished = Mailbox()
    private var completions: [UInt64: (any Sendable) -> Void] = [:]
    private var nextJob: UInt64 = 0

    init(threads: Int, loop: EventLoop) throws(SystemError) {
        queue = DispatchQueue(label: "prefetchd.workers", attributes: threads > 1 ? .concurrent : [])
        slots = DispatchSemaphore(value: max(1, threads))
        eventFD = try syscall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }
        try loop.add(eventFD, events: UInt32(EPOLLIN.rawValue)) { [unowned self] _ in self.drain() }
        self.loop = loop
    }

    /// Leaves the loop before closing (see `WallClockTimer`): the handler holds this pool unowned.
    deinit {
        loop?.remove(eventFD)
        close(eventFD)
    }

    /// Runs `work` on a worker, then `completion` with its result on the loop thread.
    func run<T: Sendable>(_ work: @escaping @Sendable () -> T, completion: @escaping (T) -> Void) {
        nextJob += 1
        let job = nextJob
        completions[job] = { completion($0 as! T) }
        let fd = eventFD
        let slots = self.slots
        queue.async { [finished] in
            slots.wait()
            let result = work()
            slots.signal()
            finished.results.withLock { $0.append((job, result)) }
            var one: UInt64 = 1
            _ = write(fd, &one, 8)
        }
    }

    /// Waits until every job given so far has run (their completions are not called): at shutdown.
    func waitForJobs() { queue.sync(flags: .barrier) {} }

    private func drain() {
        var counter: UInt64 = 0
        _ = read(eventFD, &counter, 8)
        let ready = finished.results.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for (job, result) in ready { completions.removeValue(forKey: job)?(result) }
    }
}

/// Results handed from the workers to the loop thread.
private final class Mailbox: Sendable {
    let results = Mutex<[(job: UInt64, result: any Sendable)]>([])
}
