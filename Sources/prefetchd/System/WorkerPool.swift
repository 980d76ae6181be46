import Dispatch
import CSystem
import Glibc
import Synchronization

/// A few threads for CPU-heavy or blocking work; results come back to the loop thread through an eventfd. With one
/// thread, jobs run one at a time in the order they were given.
final class WorkerPool {
    private let queue: DispatchQueue
    private let slots: DispatchSemaphore
    private weak var loop: EventLoop?
    private let finished: Mailbox
    private var completions: [UInt64: (any Sendable) -> Void] = [:]
    private var nextJob: UInt64 = 0

    init(threads: Int, loop: EventLoop) throws(SystemError) {
        queue = DispatchQueue(label: "prefetchd.workers", attributes: threads > 1 ? .concurrent : [])
        slots = DispatchSemaphore(value: max(1, threads))
        finished = Mailbox(eventFD: try syscall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) })
        try loop.add(finished.eventFD, events: UInt32(EPOLLIN.rawValue)) { [unowned self] _ in self.drain() }
        self.loop = loop
    }

    /// Leaves the loop (see `LoopDescriptor`, which cannot own this descriptor: it must stay open while a job may
    /// post): the handler holds this pool unowned. The mailbox closes the eventfd once the last job has posted.
    deinit { loop?.remove(finished.eventFD) }

    /// Runs `work` on a worker, then `completion` with its result on the loop thread.
    func run<T: Sendable>(_ work: @escaping @Sendable () -> T, completion: @escaping (T) -> Void) {
        nextJob += 1
        let job = nextJob
        completions[job] = { completion($0 as! T) }
        let slots = self.slots
        queue.async { [finished] in
            slots.wait()
            let result = work()
            slots.signal()
            finished.post(job, result)
        }
    }

    /// Waits until every job given so far has run (their completions are not called): at shutdown.
    func waitForJobs() { queue.sync(flags: .barrier) {} }

    private func drain() {
        for (job, result) in finished.collect() { completions.removeValue(forKey: job)?(result) }
    }
}

/// Results handed from the workers to the loop thread, and the eventfd that wakes it. Each job holds the mailbox, so
/// the descriptor stays open while one may still post: a job that ends after its pool is gone signals nobody,
/// instead of writing 8 bytes into whatever descriptor took the closed one's number.
private final class Mailbox: Sendable {
    let eventFD: Int32
    private let results = Mutex<[(job: UInt64, result: any Sendable)]>([])

    init(eventFD: Int32) { self.eventFD = eventFD }

    deinit { close(eventFD) }

    /// On a worker: hands over a job's result and wakes the loop.
    func post(_ job: UInt64, _ result: any Sendable) {
        results.withLock { $0.append((job, result)) }
        var one: UInt64 = 1
        _ = write(eventFD, &one, 8)
    }

    /// On the loop thread: the results posted so far.
    func collect() -> [(job: UInt64, result: any Sendable)] {
        var counter: UInt64 = 0
        _ = read(eventFD, &counter, 8)
        return results.withLock { list in
            defer { list.removeAll() }
            return list
        }
    }
}
