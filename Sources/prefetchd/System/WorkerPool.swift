import Dispatch
import CSystem
import Glibc
import Synchronization

/// A few threads of its own for CPU-heavy or blocking work; results come back to the loop thread through an eventfd.
/// Jobs start in the order they were given; with one thread, they run one at a time in that order.
///
/// The threads are the pool's, not libdispatch's: its concurrent queues share one thread per core between them, so
/// two variants being decoded held up the body checks of every fetch, whatever pool they were given to.
final class WorkerPool {
    private let work: WorkList
    private let threads: Int
    private weak var loop: EventLoop?
    private let finished: Mailbox
    private var completions: [UInt64: (any Sendable) -> Void] = [:]
    private var nextJob: UInt64 = 0

    /// `name` names the threads (`top -H`, `/proc/PID/task/*/comm`), at most 15 bytes.
    init(threads: Int, name: String, loop: EventLoop) throws(SystemError) {
        finished = Mailbox(eventFD: try syscall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) })
        work = WorkList()
        self.threads = max(1, threads)
        for _ in 0..<self.threads { try work.startThread(named: name) }
        try loop.add(finished.eventFD, events: UInt32(EPOLLIN.rawValue)) { [unowned self] _ in self.drain() }
        self.loop = loop
    }

    /// Leaves the loop (see `LoopDescriptor`, which cannot own this descriptor: it must stay open while a job may
    /// post): the handler holds this pool unowned. The mailbox closes the eventfd once the last job has posted; the
    /// threads end after the jobs given before.
    deinit {
        loop?.remove(finished.eventFD)
        for _ in 0..<threads { work.add(nil) }
    }

    /// Runs `work` on a worker, then `completion` with its result on the loop thread.
    func run<T: Sendable>(_ work: @escaping @Sendable () -> T, completion: @escaping (T) -> Void) {
        nextJob += 1
        let job = nextJob
        completions[job] = { completion($0 as! T) }
        self.work.add { [finished] in finished.post(job, work()) }
    }

    /// Waits until every job given so far has run (their completions are not called): at shutdown. Each thread takes
    /// one of `threads` barrier jobs, and takes it only once it is done with the jobs it took before.
    func waitForJobs() {
        let arrived = DispatchSemaphore(value: 0), proceed = DispatchSemaphore(value: 0)
        for _ in 0..<threads { work.add { arrived.signal(); proceed.wait() } }
        for _ in 0..<threads { arrived.wait() }
        for _ in 0..<threads { proceed.signal() }
    }

    private func drain() {
        for (job, result) in finished.collect() { completions.removeValue(forKey: job)?(result) }
    }
}

/// The jobs given to a pool, taken in order by its threads; a nil job ends the thread that takes it.
private final class WorkList: Sendable {
    private let jobs = Mutex<[(@Sendable () -> Void)?]>([])
    private let pending = DispatchSemaphore(value: 0)

    func add(_ job: (@Sendable () -> Void)?) {
        jobs.withLock { $0.append(job) }
        pending.signal()
    }

    /// Starts a detached thread that runs jobs as they come; it holds this list until it ends.
    func startThread(named name: String) throws(SystemError) {
        try startDetachedThread(named: name) { self.serve() }
    }

    private func serve() {
        while true {
            pending.wait()
            guard let job = jobs.withLock({ $0.removeFirst() }) else { return }
            job()
        }
    }
}

/// Starts a detached thread named `name` (`top -H`, `/proc/PID/task/*/comm`: at most 15 bytes) that runs `body`.
func startDetachedThread(named name: String, _ body: @escaping @Sendable () -> Void) throws(SystemError) {
    let context = Unmanaged.passRetained(ThreadStart(name: name, body: body)).toOpaque()
    var thread = pthread_t()
    let status = pthread_create(&thread, nil, { context in
        let start = Unmanaged<ThreadStart>.fromOpaque(context!).takeRetainedValue()
        _ = pthread_setname_np(pthread_self(), start.name)
        let signalStack = pf_signal_stack_begin()  // a stack overflow on it is marked as a crash (FatalSignalMark)
        start.body()
        pf_signal_stack_end(signalStack)
        return nil
    }, context)
    guard status == 0 else {
        Unmanaged<ThreadStart>.fromOpaque(context).release()
        throw SystemError(call: "pthread_create", errno: status, detail: name)
    }
    pthread_detach(thread)
}

/// What a new thread is given.
private final class ThreadStart {
    let name: String
    let body: @Sendable () -> Void
    init(name: String, body: @escaping @Sendable () -> Void) {
        (self.name, self.body) = (String(decoding: name.utf8.prefix(15), as: UTF8.self), body)
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

    /// On a worker: hands over a job's result and wakes the loop, unless results wait already: the loop takes them
    /// all after it reads the eventfd, so only the first since it took them needs to wake it.
    func post(_ job: UInt64, _ result: any Sendable) {
        let first = results.withLock { list in
            list.append((job, result))
            return list.count == 1
        }
        guard first else { return }
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
