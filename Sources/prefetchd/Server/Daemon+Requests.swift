import FoundationEssentials
import Glibc
import PrefetchProtocol
import QueueCore

/// The one dispatch switch: every protocol operation.
extension Daemon {
    func handle(_ line: [UInt8], from connection: Connection) {
        let request: Request
        do {
            request = try Self.decoder.decode(Request.self, from: Data(line))
        } catch {
            return fail(connection, nil, WireError(.badRequest, "the line is not a JSON request object: \(Self.describe(error))"))
        }
        guard let op = Operation(rawValue: request.op) else {
            let known = Operation.allCases.map(\.rawValue).joined(separator: ", ")
            return fail(connection, request.id, WireError(.unknownOp, "unknown op '\(request.op)' (known: \(known))"))
        }
        if shuttingDown, op != .ping, op != .status {
            return fail(connection, request.id, WireError(.shuttingDown, "the daemon is shutting down"))
        }
        let command: Command
        do {
            command = try Command(request, op: op)
        } catch {
            return fail(connection, request.id, error)
        }
        let id = request.id
        let now = wallClockMilliseconds()
        switch command {
        case .ping:
            reply(connection, id, Pong())
        case .get(let text, let variant, let offline, let staleAllowance):
            get(text, variant: variant, offline: offline, staleAllowance: staleAllowance, id: id, connection: connection,
                now: now)
        case .queue(let urls, let urgent):
            queueBatch.append((connection, id, urls, urgent))
        case .evictAll:
            do {
                let evicted = try store.removeAll(protecting: keysInUse)
                metrics.evictions += Int64(evicted)
                reply(connection, id, BatchResult(results: [], evicted: evicted))
            } catch {
                fail(connection, id, Self.wireError(error))
            }
        case .view(let change):
            view(change, id: id, connection: connection, now: now)
        case .change(let op, let urls):
            let inUse = op == .evict ? keysInUse : []
            let results = urls.map { text -> ItemResult in
                do {
                    let url = try CanonicalURL(text)
                    return ItemResult(url: text, key: url.key, status: try change(op, url, inUse: inUse, now: now))
                } catch {
                    return ItemResult(url: text, status: .rejected, error: Self.wireError(error))
                }
            }
            reply(connection, id, BatchResult(results: results))
        case .info(let text):
            do {
                let url = try CanonicalURL(text)
                let failure = scheduler.rememberedFailure(url.key, now: Moment(milliseconds: now)).map(WireError.init)
                var task = scheduler.task(url.key).map(summary)
                if task == nil, try store.isQueued(url.key) {
                    task = TaskSummary(url: url.key, lane: Lane.slow.rawValue, state: .backlog, attempts: 0, waiters: 0)
                }
                reply(connection, id, URLInfo(url: text, key: url.key,
                                                      cached: try store.liveEntry(url.key).map { wire($0, fromCache: true) },
                                                      task: task, failure: failure))
            } catch {
                fail(connection, id, Self.wireError(error))
            }
        case .status:
            reply(connection, id, status())
        case .watch:
            reply(connection, id, Watching())
            startWatching(connection)
        case .metrics:
            reply(connection, id, MetricsText(text: metricsText()))
        case .formats:
            let formats = ImageFormats.available(policy: options.images).map {
                FormatList.Format(name: $0.name, description: $0.description, mimeTypes: $0.mimeTypes,
                                  extensions: $0.extensions, allowed: $0.isAllowed)
            }
            reply(connection, id, FormatList(formats: formats, missing: ImageFormats.unavailable(policy: options.images)))
        case .list(let limit):
            let tasks = scheduler.allTasks.sorted { ($0.state == .running ? 0 : 1, $0.key) < ($1.state == .running ? 0 : 1, $1.key) }
            reply(connection, id, TaskList(tasks: tasks.prefix(limit).map(summary), backlog: backlogOnly))
        }
    }

    private func get(_ text: String, variant: VariantSpec?, offline: Bool, staleAllowance: Int64?, id: RequestID?,
                     connection: Connection, now: Int64) {
        let url: CanonicalURL
        let entry: IndexEntry?
        do {
            url = try CanonicalURL(text)
            entry = try store.liveEntry(url.key)
        } catch {
            return fail(connection, id, Self.wireError(error))
        }
        /// Answers from the cached entry: the original, or its variant.
        func answer(_ entry: IndexEntry, stale: Bool) {
            metrics.cacheHits += 1
            store.touch(url.key, now: now)
            if variant == nil { metrics.getLatency.observe(0) }
            deliver(entry, variant: variant, fromCache: true, stale: stale, on: connection, to: .request(id))
        }
        let state = cacheState(entry, now: now)
        if state == .fresh, let entry, scheduler.task(url.key) == nil {
            return answer(entry, stale: false)
        }
        if offline {
            guard state != .missing, let entry else {
                return fail(connection, id, WireError(.notCached, "\(url.key) is not in the cache (offline: no fetch)"))
            }
            return answer(entry, stale: state == .stale)
        }
        if state == .stale, let entry, !entry.mustRevalidate, let staleAllowance,
           now.saturatingSubtract(entry.freshUntil) <= staleAllowance {
            answer(entry, stale: true)
            taskCreated(url.key)
            let (_, actions) = scheduler.queue(url, cache: .stale, now: Moment(milliseconds: now))
            return apply(actions)
        }
        metrics.cacheMisses += 1
        let waiter = newWait(on: connection, for: url.key, variant: variant, recipient: .request(id))
        if scheduler.task(url.key) == nil { taskCreated(url.key) }
        apply(scheduler.get(url, waiter: waiter, cache: state, now: Moment(milliseconds: now)))
    }

    /// `demote`, `promote`, `cancel` or `evict` for one URL; returns the item status.
    func change(_ op: Operation, _ url: CanonicalURL, inUse: Set<String>, now: Int64) throws -> ItemStatus {
        let moment = Moment(milliseconds: now)
        let task = scheduler.task(url.key)
        switch op {
        case .demote:
            guard let task else { return .unknown }
            guard task.lane == .fast else { return .already }
            apply(scheduler.demote(url.key, now: moment))
            return .demoted
        case .promote:
            if let task {
                guard task.lane == .slow else { return .already }
            } else {
                guard try store.isQueued(url.key) else { return .unknown }
                let (outcome, actions) = scheduler.queue(url, cache: cacheState(try store.liveEntry(url.key), now: now), now: moment)
                apply(actions)
                switch outcome {
                case .cached:
                    try store.dequeue(url.key)
                    return .cached
                case .skipped:
                    try store.dequeue(url.key)
                    return .skipped
                case .queued, .already:
                    loadedFromBacklog.insert(url.key)
                }
            }
            apply(scheduler.promote(url.key, now: moment))
            return .promoted
        case .cancel:
            let queued = try store.isQueued(url.key)
            guard task != nil || queued else { return .unknown }
            apply(scheduler.cancel(url.key, now: moment))
            try store.dequeue(url.key)
            return .cancelled
        case .evict:
            // What a waiting request or a variant being made needs stays (like `evict --all`).
            guard !inUse.contains(url.key) else { return .inUse }
            guard try store.remove(url.key) else { return .unknown }
            metrics.evictions += 1
            return .evicted
        default:
            preconditionFailure("\(op) is not a per-URL change")
        }
    }

    /// Queued URLs that only the durable backlog holds.
    var backlogOnly: Int64 { max(0, store.backlogCount - Int64(loadedFromBacklog.count)) }

    func summary(_ task: TaskInfo) -> TaskSummary {
        let progress = fetches.progress(task.key)
        let state: TaskSummary.State
        switch task.state {
        case .waiting: state = .waiting
        case .running: state = .running
        case .delayed: state = .delayed
        }
        return TaskSummary(url: task.key, lane: task.lane.rawValue, state: state, attempts: task.attempts,
                           waiters: task.waiters.count, bytes: progress?.received, total: progress?.expected)
    }

    private func status() -> StatusReport {
        let counts = scheduler.counts
        return StatusReport(
            version: prefetchVersion, pid: getpid(), uptime: (monotonicMilliseconds() - startedAt) / 1000,
            fast: .init(waiting: counts.fastWaiting, running: counts.fastRunning, width: scheduler.configuration.fastWidth),
            slow: .init(waiting: counts.slowWaiting, running: counts.slowRunning, width: scheduler.configuration.slowWidth),
            slowSuspended: counts.slowSuspended, delayed: counts.delayed,
            backlog: backlogOnly,
            cache: .init(entries: store.entryCount, bytes: store.totalBytes, limit: options.maxCacheBytes,
                         hits: metrics.cacheHits, misses: metrics.cacheMisses, directory: options.cacheDirectory),
            connections: connections.count, fetched: fetchTotals.ok, failed: fetchTotals.failed,
            pausedHosts: scheduler.paused.map { .init(host: $0.host, until: $0.until.milliseconds / 1000) },
            waitingForDisk: scheduler.waitingForDiskUntil.map { $0.milliseconds / 1000 }, background: backgroundState)
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context),
             DecodingError.keyNotFound(_, let context), DecodingError.dataCorrupted(let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
        default:
            return "\(error)"
        }
    }
}
