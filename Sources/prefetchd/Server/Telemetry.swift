import PrefetchProtocol
import QueueCore

/// What the daemon tells about itself, fed by what happens (a task created, a transfer started, a fetch ended, a
/// cache hit): the `Metrics`, the events `watch` streams carry, and the log lines about fetches (each failure, and an
/// activity summary for the rest).
final class Telemetry {
    private var metrics = Metrics()
    /// The fetches since the last activity line in the log (`summarizeActivity`).
    private var activity = Activity(since: monotonicMilliseconds())
    /// Monotonic ms: when each task was created, each transfer started.
    private var taskCreatedAt: [String: Int64] = [:]
    private var transferStartedAt: [String: Int64] = [:]
    /// Per running transfer: bytes and time at the last snapshot, for rates.
    private var rateSamples: [String: (bytes: Int64, time: Int64)] = [:]
    private let startedAt = monotonicMilliseconds()

    /// Seconds since the daemon started.
    var uptime: Int64 { (monotonicMilliseconds() - startedAt) / 1000 }

    // MARK: Tasks and transfers

    /// A task was created (its queue wait starts now).
    func taskCreated(_ key: String) {
        if taskCreatedAt[key] == nil { taskCreatedAt[key] = monotonicMilliseconds() }
    }

    /// The scheduler forgot a task.
    func taskForgotten(_ key: String) {
        taskCreatedAt.removeValue(forKey: key)
        transferStartedAt.removeValue(forKey: key)
    }

    /// A transfer started: its queue wait is measured; returns the event for the watchers.
    func transferStarted(_ key: String, lane: Lane) -> Event {
        let now = monotonicMilliseconds()
        if let created = taskCreatedAt.removeValue(forKey: key) {
            metrics.transferStarted(lane: lane.rawValue, queuedFor: Double(now - created) / 1000)
        }
        transferStartedAt[key] = now
        var event = Event(event: "started", time: wallClockMilliseconds())
        event.url = key
        event.lane = lane.rawValue
        return event
    }

    /// A fetch ended in `lane`: the metrics, a log line (at debug level when it succeeded: `summarizeActivity` says
    /// it at info) and the activity summary; returns the event for the watchers.
    func fetchEnded(_ key: String, lane: String, _ end: FetchEnd) -> Event {
        let duration = transferStartedAt.removeValue(forKey: key).map { monotonicMilliseconds() - $0 }
        metrics.fetchEnded(lane: lane, end, seconds: duration.map { Double($0) / 1000 })
        var event = Event(event: "finished", time: wallClockMilliseconds())
        event.url = key
        event.lane = lane
        event.duration = duration
        if activity.isEmpty { activity = Activity(since: monotonicMilliseconds()) }
        switch end {
        case .fetched(let entry, let detail):
            let bytes = entry.bytes
            event.bytes = bytes
            activity.fetched += 1
            activity.bytes += bytes
            Log.debug("fetched \(key) (\(lane) lane, \(bytes) bytes\(detail))")
        case .revalidated:
            event.bytes = 0
            activity.revalidated += 1
            Log.debug("revalidated \(key) (\(lane) lane)")
        case .failed(let failure):
            event.event = "failed"
            event.error = WireError(failure)
            activity.failed += 1
            Log.info("failed \(key) (\(lane) lane): \(failure.code.rawValue): \(failure.message)")
        }
        return event
    }

    /// The running transfers for a snapshot, each with its rate since the last snapshot.
    func transfers(_ running: [(key: String, lane: Lane, received: Int64, expected: Int64?)]) -> [Event.Transfer] {
        let now = monotonicMilliseconds()
        var samples: [String: (bytes: Int64, time: Int64)] = [:]
        let transfers = running.map { transfer in
            samples[transfer.key] = (transfer.received, now)
            var rate: Int64 = 0
            if let last = rateSamples[transfer.key], now > last.time {
                rate = max(0, (transfer.received - last.bytes) * 1000 / (now - last.time))
            }
            return Event.Transfer(url: transfer.key, lane: transfer.lane.rawValue, bytes: transfer.received,
                                  total: transfer.expected, rate: rate)
        }
        rateSamples = samples
        return transfers
    }

    /// One info line for the fetches since the last one: when the work runs out, and every minute while it goes on.
    /// `queued`: the URLs waiting in the background lane and the durable backlog.
    func summarizeActivity(workRanOut: Bool, queued: Int) {
        let now = monotonicMilliseconds()
        guard !activity.isEmpty, workRanOut || now >= activity.nextAt else { return }
        let seconds = max(1, (now - activity.since + 500) / 1000)
        Log.info("in \(seconds) s: fetched \(activity.fetched) (\(activity.bytes) bytes), revalidated \(activity.revalidated), "
                 + "failed \(activity.failed); \(queued) queued")
        activity = Activity(since: now)
    }

    // MARK: Counts

    func cacheHit() { metrics.cacheHit() }

    func cacheMiss() { metrics.cacheMiss() }

    /// A get was answered from the cache, at once.
    func getAnsweredAtOnce() { metrics.getAnswered(after: 0) }

    /// A get (or a visible row) waiting since `start` (monotonic ms) was answered.
    func getAnswered(waitingSince start: Int64) {
        metrics.getAnswered(after: Double(monotonicMilliseconds() - start) / 1000)
    }

    func evicted(_ count: Int) { metrics.evicted(count) }

    func queued(_ count: Int) { metrics.queued(count) }

    func variantMade() { metrics.variantMade() }

    func variantHit() { metrics.variantHit() }

    func viewEventSent(_ event: String) { metrics.viewEventSent(event) }

    var cacheLookups: (hits: Int64, misses: Int64) { metrics.cacheLookups }

    var fetchTotals: (ok: Int64, failed: Int64) { metrics.fetchTotals }

    /// The metrics as Prometheus text, with the gauges read now.
    func metricsText(_ gauges: Metrics.Gauges) -> String { metrics.render(gauges) }

    /// The fetches since the last activity line in the log, counted from the first of them.
    private struct Activity {
        var since: Int64
        var fetched = 0
        var bytes: Int64 = 0
        var revalidated = 0
        var failed = 0
        /// When the next line is due while the work goes on.
        var nextAt: Int64 { since + 60_000 }
        var isEmpty: Bool { fetched + revalidated + failed == 0 }

        init(since: Int64) { self.since = since }
    }
}
