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
        let now = wallClockMilliseconds()
        switch op {
        case .ping:
            reply(connection, request.id, Pong())
        case .get:
            guard let text = request.url else { return missing("url", op, connection, request.id) }
            get(text, id: request.id, connection: connection, now: now)
        case .queue:
            guard let urls = batch(request, op, connection) else { return }
            queueBatch.append((connection, request.id, urls))
        case .demote, .promote, .cancel, .evict:
            guard let urls = batch(request, op, connection) else { return }
            let results = urls.map { text -> ItemResult in
                do {
                    let url = try CanonicalURL(text)
                    return ItemResult(url: text, status: try change(op, url, now: now))
                } catch {
                    return ItemResult(url: text, status: "rejected", error: Self.wireError(error))
                }
            }
            reply(connection, request.id, BatchResult(results: results))
        case .info:
            guard let text = request.url else { return missing("url", op, connection, request.id) }
            do {
                let url = try CanonicalURL(text)
                let failure = scheduler.rememberedFailure(url.key, now: Moment(milliseconds: now)).map {
                    WireError(code: $0.code, message: $0.message, status: $0.httpStatus)
                }
                var task = scheduler.task(url.key).map(summary)
                if task == nil, try store.isQueued(url.key) {
                    task = TaskSummary(url: url.key, lane: "slow", state: "backlog", attempts: 0, waiters: 0)
                }
                reply(connection, request.id, URLInfo(url: text, key: url.key,
                                                      cached: try store.entry(url.key).map { wire($0, fromCache: true) },
                                                      task: task, failure: failure))
            } catch {
                fail(connection, request.id, Self.wireError(error))
            }
        case .status:
            reply(connection, request.id, status())
        case .list:
            let limit = max(0, request.limit ?? 1000)
            let tasks = scheduler.allTasks.sorted { ($0.state == .running ? 0 : 1, $0.key) < ($1.state == .running ? 0 : 1, $1.key) }
            let inMemorySlow = Int64(scheduler.counts.slowWaiting + scheduler.counts.slowRunning)
            reply(connection, request.id, TaskList(tasks: tasks.prefix(limit).map(summary),
                                                   backlog: max(0, store.backlogCount - inMemorySlow)))
        }
    }

    private func get(_ text: String, id: RequestID?, connection: Connection, now: Int64) {
        let url: CanonicalURL
        let entry: IndexEntry?
        do {
            url = try CanonicalURL(text)
            entry = try store.entry(url.key)
        } catch {
            return fail(connection, id, Self.wireError(error))
        }
        let state = cacheState(entry, now: now)
        if state == .fresh, let entry, scheduler.task(url.key) == nil {
            counters.hits += 1
            store.touch(url.key, now: now)
            return reply(connection, id, wire(entry, fromCache: true))
        }
        counters.misses += 1
        let waiter = newWaiter(for: connection, id: id)
        pendingGets[waiter] = url.key
        apply(scheduler.get(url, waiter: waiter, cache: state, now: Moment(milliseconds: now)))
    }

    /// `demote`, `promote`, `cancel` or `evict` for one URL; returns the item status.
    private func change(_ op: Operation, _ url: CanonicalURL, now: Int64) throws -> String {
        let moment = Moment(milliseconds: now)
        let task = scheduler.task(url.key)
        switch op {
        case .demote:
            guard let task else { return "unknown" }
            guard task.lane == .fast else { return "already" }
            apply(scheduler.demote(url.key, now: moment))
            return "demoted"
        case .promote:
            if let task {
                guard task.lane == .slow else { return "already" }
            } else {
                guard try store.isQueued(url.key) else { return "unknown" }
                let (_, actions) = scheduler.queue(url, cache: cacheState(try store.entry(url.key), now: now), now: moment)
                apply(actions)
            }
            apply(scheduler.promote(url.key, now: moment))
            return "promoted"
        case .cancel:
            let queued = try store.isQueued(url.key)
            guard task != nil || queued else { return "unknown" }
            apply(scheduler.cancel(url.key, now: moment))
            try store.dequeue(url.key)
            return "cancelled"
        case .evict:
            return try store.remove(url.key) ? "evicted" : "unknown"
        default:
            preconditionFailure("\(op) is not a per-URL change")
        }
    }

    private func batch(_ request: Request, _ op: Operation, _ connection: Connection) -> [String]? {
        guard let urls = request.urls ?? request.url.map({ [$0] }) else {
            missing("urls", op, connection, request.id)
            return nil
        }
        guard urls.count <= Request.maximumBatch else {
            fail(connection, request.id, WireError(.badRequest, "at most \(Request.maximumBatch) URLs per request"))
            return nil
        }
        return urls
    }

    private func missing(_ field: String, _ op: Operation, _ connection: Connection, _ id: RequestID?) {
        fail(connection, id, WireError(.badRequest, "\(op.rawValue) needs the field \"\(field)\""))
    }

    func summary(_ task: TaskInfo) -> TaskSummary {
        let progress = fetcher.progress(task.key)
        let state: String
        switch task.state {
        case .waiting: state = "waiting"
        case .running: state = "running"
        case .delayed: state = "delayed"
        }
        return TaskSummary(url: task.key, lane: task.lane.rawValue, state: state, attempts: task.attempts,
                           waiters: task.waiters.count, bytes: progress?.received, total: progress?.expected)
    }

    private func status() -> StatusReport {
        let counts = scheduler.counts
        let inMemorySlow = Int64(counts.slowWaiting + counts.slowRunning)
        return StatusReport(
            version: prefetchVersion, pid: getpid(), uptime: (monotonicMilliseconds() - startedAt) / 1000,
            fast: .init(waiting: counts.fastWaiting, running: counts.fastRunning, width: scheduler.configuration.fastWidth),
            slow: .init(waiting: counts.slowWaiting, running: counts.slowRunning, width: scheduler.configuration.slowWidth),
            slowSuspended: counts.slowSuspended, delayed: counts.delayed,
            backlog: max(0, store.backlogCount - inMemorySlow),
            cache: .init(entries: store.entryCount, bytes: store.totalBytes, limit: options.maxCacheBytes,
                         hits: counters.hits, misses: counters.misses, directory: options.cacheDirectory),
            connections: connections.count, fetched: counters.fetched, failed: counters.failed)
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
