import CSystem
import FoundationEssentials
import Glibc
import PrefetchProtocol
import QueueCore

/// Observability: `watch` event streams and `metrics`, routed between the clients and the telemetry.
extension Daemon {
    /// Turns `connection` into an event stream; its first snapshot follows at once, to it alone (sent to every
    /// watcher, 3,000 clients subscribing one after the other cost 4.5 million snapshot sends and held every client
    /// for seconds).
    func startWatching(_ connection: Connection) {
        connection.startWatching()
        snapshotTicker.arm(intervalMilliseconds: 500)
        send(connection, snapshot())
    }

    /// Sends `event` to every watcher that keeps up (a watcher with more than `Connection.eventBacklog` unsent
    /// misses events).
    func broadcast(_ event: Event) {
        let watchers = clients.watchers
        for connection in watchers where !connection.isLagging { send(connection, event) }
        if watchers.isEmpty { snapshotTicker.disarm() }
    }

    /// Every half second while anyone watches: the lanes and transfers, to every watcher.
    func sendSnapshot() {
        guard !clients.watchers.isEmpty else { return snapshotTicker.disarm() }
        broadcast(snapshot())
    }

    private func snapshot() -> Event {
        let counts = scheduler.counts
        var event = Event(event: "snapshot", time: wallClockMilliseconds())
        (event.fast, event.slow) = lanes
        event.slowSuspended = counts.slowSuspended
        event.waitingForDisk = scheduler.waitingForDiskUntil.map { $0.wallClockMilliseconds / 1000 }
        event.background = backgroundState
        event.backlog = backlogOnly
        let running = scheduler.runningTasks
        event.transfers = telemetry.transfers(running.compactMap { task in
            fetches.progress(task.key).map { (task.key, task.lane, $0.received, $0.expected) }
        })
        return event
    }

    /// A task was created (its queue wait starts now).
    func taskCreated(_ key: String) { telemetry.taskCreated(key) }

    /// A transfer started: its queue wait is measured and the watchers are told.
    func transferStarted(_ key: String, lane: Lane) { broadcast(telemetry.transferStarted(key, lane: lane)) }

    /// A fetch ended in `lane` (the one its transfer ended in): the telemetry, then the watchers.
    func observe(_ end: FetchEnd, of key: String, in lane: Lane) {
        broadcast(telemetry.fetchEnded(key, lane: lane.rawValue, end))
    }

    func metricsText() -> String {
        let counts = scheduler.counts, lanes = self.lanes
        return telemetry.metricsText(.init(
            waiting: ["fast": counts.fastWaiting, "slow": counts.slowWaiting],
            running: ["fast": lanes.fast.running, "slow": lanes.slow.running],
            backlog: backlogOnly, slowSuspended: counts.slowSuspended,
            waitingForDisk: scheduler.waitingForDiskUntil != nil, cacheBytes: store.totalBytes,
            cacheEntries: store.entryCount, cacheLimit: options.maxCacheBytes, connections: clients.count,
            views: clients.viewCount, pausedHosts: scheduler.paused.count, background: backgroundState))
    }

    /// Writes the metrics to `metrics_textfile` atomically (a temporary file, then `rename`).
    func writeMetricsTextfile() {
        guard let path = options.metricsTextfile else { return metricsTicker.disarm() }
        // A device or a directory that took the file's place is left alone, and the temporary file is made new:
        // nothing is written through a symbolic link.
        guard Options.isReplaceable(path) else {
            return metricsProblem("not writing the metrics: \(path) is no longer a regular file")
        }
        let temporary = path + ".tmp"
        var bytes = Array(metricsText().utf8)
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return metricsProblem("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let written = bytes.withUnsafeMutableBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == bytes.count, rename(temporary, path) == 0 else {
            unlink(temporary)
            return metricsProblem("cannot write the metrics to \(path): \(String(cString: strerror(errno)))")
        }
        if metricsWarning != nil {
            metricsWarning = nil
            Log.info("writing the metrics to \(path) again")
        }
    }

    /// A failed write of the metrics file, logged when it is not the same as the last one (not every 5 s).
    private func metricsProblem(_ message: String) {
        guard message != metricsWarning else { return }
        metricsWarning = message
        Log.warning(message)
    }
}
