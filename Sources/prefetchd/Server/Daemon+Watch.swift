import CSystem
import FoundationEssentials
import Glibc
import PrefetchProtocol
import QueueCore

/// Observability: `watch` event streams, `metrics`, and the bookkeeping behind them.
extension Daemon {
    /// Turns `connection` into an event stream; the first snapshot follows at once.
    func startWatching(_ connection: Connection) {
        connection.isWatching = true
        snapshotTicker.arm(intervalMilliseconds: 500)
        sendSnapshot()
    }

    /// Sends `event` to every watcher that keeps up (a watcher with more than `Connection.eventBacklog` unsent
    /// misses events).
    func broadcast(_ event: Event) {
        var watched = false
        for connection in clients.connections.values where connection.isWatching {
            watched = true
            if !connection.isLagging { send(connection, event) }
        }
        if !watched { snapshotTicker.disarm() }
    }

    func sendSnapshot() {
        guard clients.connections.values.contains(where: \.isWatching) else { return snapshotTicker.disarm() }
        let now = monotonicMilliseconds()
        let counts = scheduler.counts
        var event = Event(event: "snapshot", time: wallClockMilliseconds())
        event.fast = .init(waiting: counts.fastWaiting, running: counts.fastRunning, width: scheduler.configuration.fastWidth)
        event.slow = .init(waiting: counts.slowWaiting, running: counts.slowRunning, width: scheduler.configuration.slowWidth)
        event.slowSuspended = counts.slowSuspended
        event.waitingForDisk = scheduler.waitingForDiskUntil.map { $0.milliseconds / 1000 }
        event.background = backgroundState
        event.backlog = backlogOnly
        var samples: [String: (bytes: Int64, time: Int64)] = [:]
        event.transfers = scheduler.allTasks.filter { $0.state == .running }.sorted { $0.key < $1.key }.compactMap { task in
            guard let progress = fetches.progress(task.key) else { return nil }
            samples[task.key] = (progress.received, now)
            var rate: Int64 = 0
            if let last = rateSamples[task.key], now > last.time {
                rate = max(0, (progress.received - last.bytes) * 1000 / (now - last.time))
            }
            return .init(url: task.key, lane: task.lane.rawValue, bytes: progress.received, total: progress.expected, rate: rate)
        }
        rateSamples = samples
        broadcast(event)
    }

    /// A task was created (its queue wait starts now).
    func taskCreated(_ key: String) {
        if taskCreatedAt[key] == nil { taskCreatedAt[key] = monotonicMilliseconds() }
    }

    /// A transfer started: note its queue wait and tell the watchers.
    func transferStarted(_ key: String, lane: Lane) {
        let now = monotonicMilliseconds()
        if let created = taskCreatedAt.removeValue(forKey: key) {
            metrics.queueWait[lane.rawValue, default: Metrics.Histogram()].observe(Double(now - created) / 1000)
        }
        transferStartedAt[key] = now
        var event = Event(event: "started", time: wallClockMilliseconds())
        event.url = key
        event.lane = lane.rawValue
        broadcast(event)
    }

    /// A fetch ended: the metrics, an event, a log line (at debug level when it succeeded: `summarizeActivity` says it
    /// at info), and the activity summary.
    func observe(_ end: FetchEnd, of key: String) {
        let lane = scheduler.task(key)?.lane.rawValue ?? "fast"
        let duration = transferStartedAt.removeValue(forKey: key).map { monotonicMilliseconds() - $0 }
        metrics.fetchEnded(lane: lane, end, seconds: duration.map { Double($0) / 1000 })
        var event = Event(event: "finished", time: wallClockMilliseconds())
        event.url = key
        event.lane = lane
        event.duration = duration
        if activity.isEmpty { activity = ActivitySummary(since: monotonicMilliseconds()) }
        switch end {
        case .fetched(let bytes, let detail):
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
            Log.info("failed \(key) (\(lane) lane): \(failure.code): \(failure.message)")
        }
        broadcast(event)
    }

    /// One info line for the fetches since the last one: when the work runs out, and every minute while it goes on.
    func summarizeActivity(workRanOut: Bool) {
        let now = monotonicMilliseconds()
        guard !activity.isEmpty, workRanOut || now >= activity.nextAt else { return }
        let seconds = max(1, (now - activity.since + 500) / 1000)
        Log.info("in \(seconds) s: fetched \(activity.fetched) (\(activity.bytes) bytes), revalidated \(activity.revalidated), "
                 + "failed \(activity.failed); \(scheduler.counts.slowWaiting + Int(backlogOnly)) queued")
        activity = ActivitySummary(since: now)
    }

    func metricsText() -> String {
        let counts = scheduler.counts
        return metrics.render(.init(
            waiting: ["fast": counts.fastWaiting, "slow": counts.slowWaiting],
            running: ["fast": counts.fastRunning, "slow": counts.slowRunning],
            backlog: backlogOnly, slowSuspended: counts.slowSuspended,
            waitingForDisk: scheduler.waitingForDiskUntil != nil, cacheBytes: store.totalBytes,
            cacheEntries: store.entryCount, cacheLimit: options.maxCacheBytes, connections: clients.connections.count,
            views: clients.connections.values.count { $0.view != nil }, pausedHosts: scheduler.paused.count, background: backgroundState))
    }

    /// Writes the metrics to `metrics_textfile` atomically (a temporary file, then `rename`).
    func writeMetricsTextfile() {
        guard let path = options.metricsTextfile else { return metricsTicker.disarm() }
        let temporary = path + ".tmp"
        var bytes = Array(metricsText().utf8)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return Log.warning("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let written = bytes.withUnsafeMutableBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == bytes.count, rename(temporary, path) == 0 else {
            unlink(temporary)
            return Log.warning("cannot write the metrics to \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Fetches that ended well and badly, for `status`.
    var fetchTotals: (ok: Int64, failed: Int64) {
        metrics.fetches.reduce(into: (Int64(0), Int64(0))) { totals, item in
            if item.key.hasSuffix(",error") { totals.1 += item.value } else { totals.0 += item.value }
        }
    }
}

/// The fetches since the last activity line in the log, counted from the first of them.
struct ActivitySummary {
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
