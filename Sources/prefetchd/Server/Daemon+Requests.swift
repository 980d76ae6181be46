import FoundationEssentials
import Glibc
import PrefetchProtocol
import QueueCore

/// The operations besides `get` and `view`: batch changes, info, list, status, formats.
extension Daemon {
    /// An `evict --all` under way: the entries cached when it came (rows up to `last`) go a slice a turn.
    struct Eviction {
        let connection: Connection
        let id: RequestID?
        let last: Int64
        var after: Int64 = 0
        var evicted = 0
    }

    /// `evict --all`: every entry cached when it came but those in use, evicted about 2 ms a turn so that the other
    /// clients are served meanwhile (in one call, 30,000 entries held every client 0.6 s); answered when done.
    func evictAll(_ id: RequestID?, _ connection: Connection) {
        if let full = connection.waitsFull { return fail(connection, id, full) }
        do {
            evictions.append(Eviction(connection: connection, id: id, last: try store.lastEntryRow()))
            connection.evictions += 1
            evictTimer.schedule(at: 0)
        } catch {
            fail(connection, id, Self.wireError(error))
        }
    }

    func evictSlice() {
        guard var eviction = evictions.first else { return }
        let deadline = monotonicMilliseconds() + 2
        do {
            while let page = try store.entryKeys(after: eviction.after, through: eviction.last, limit: 64) {
                eviction.after = page.last
                let inUse = keysInUse
                for key in page.keys where !inUse.contains(key) {
                    if try store.remove(key) { eviction.evicted += 1 }
                }
                guard monotonicMilliseconds() < deadline else {
                    evictions[0] = eviction
                    return evictTimer.schedule(at: 0)
                }
            }
            telemetry.evicted(eviction.evicted)
            reply(eviction.connection, eviction.id, BatchResult(results: [], evicted: eviction.evicted))
        } catch {
            fail(eviction.connection, eviction.id, Self.wireError(error))
        }
        eviction.connection.evictions -= 1
        evictions.removeFirst()
        if !evictions.isEmpty { evictTimer.schedule(at: 0) }
    }

    /// A batch's reply: every result, or the summary the client asked for.
    static func batchResult(_ results: [ItemResult], summary: Bool) -> BatchResult {
        summary ? .summary(of: results) : BatchResult(results: results)
    }

    func change(_ op: Operation, _ urls: [String], summary: Bool, _ id: RequestID?, _ connection: Connection, now: Int64) {
        changedURLsThisTurn += urls.count
        guard op != .demote else { return demote(urls, summary: summary, id, connection) }
        let inUse = op == .evict ? keysInUse : []
        let results = asOneEvent { urls.map { text -> ItemResult in
            do {
                let url = try CanonicalURL(text)
                let (status, error) = try change(op, url, inUse: inUse, now: now)
                return ItemResult(url: text, key: url.key, status: status, error: error)
            } catch {
                return ItemResult(url: text, status: .rejected, error: Self.wireError(error))
            }
        } }
        reply(connection, id, Self.batchResult(results, summary: summary))
    }

    func info(_ text: String, _ id: RequestID?, _ connection: Connection) {
        do {
            let url = try CanonicalURL(text)
            let failure = scheduler.rememberedFailure(url.key, now: .now).map(WireError.init)
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
    }

    func formats(_ id: RequestID?, _ connection: Connection) {
        let formats = ImageFormats.available(policy: options.images).map {
            FormatList.Format(name: $0.name, description: $0.description, mimeTypes: $0.mimeTypes,
                              extensions: $0.extensions, allowed: $0.isAllowed)
        }
        reply(connection, id, FormatList(formats: formats, missing: ImageFormats.unavailable(policy: options.images)))
    }

    func list(_ limit: Int, _ id: RequestID?, _ connection: Connection) {
        reply(connection, id, TaskList(tasks: scheduler.firstTasks(min(limit, TaskList.mostTasks)).map(summary),
                                       backlog: backlogOnly))
    }

    /// Urgent work nobody waits for (`promote`, `queue --now`) is not taken past this many tasks waiting in the fast
    /// lane: each holds about a kilobyte (half a million URLs promoted held 556 MB).
    static let mostWaitingUrgent = Connection.maximumWaitsInAll

    /// Why a `promote` left a URL background work (`busy`).
    var urgentLaneFull: WireError {
        WireError(.busy, "\(scheduler.counts.fastWaiting) tasks wait in the fast lane, the most promote and queue --now add "
                  + "to: the URL stays background work (queued); promote it again once some are done")
    }

    /// `demote` of a list, as one event: nothing starts until every URL is demoted (one at a time, each demote freed
    /// a fast place that the next URL of the list took, only to be parked: `demote` of 4,200 started and parked them
    /// all).
    func demote(_ urls: [String], summary: Bool, _ id: RequestID?, _ connection: Connection) {
        var results: [ItemResult] = []
        let actions = scheduler.batch(now: .now) { scheduler in
            var actions: [Action] = []
            for text in urls {
                do {
                    let url = try CanonicalURL(text)
                    // A promotion waiting for room in the fast lane runs in the slow lane until then: withdrawn, it
                    // stays there.
                    let task = scheduler.task(url.key)
                    let demotes = task.map { $0.lane == .fast || $0.promotionPending } ?? false
                    if demotes { actions += scheduler.demote(url.key, now: .now) }
                    results.append(ItemResult(url: text, key: url.key,
                                              status: task == nil ? .unknown : demotes ? .demoted : .already))
                } catch {
                    results.append(ItemResult(url: text, status: .rejected, error: Self.wireError(error)))
                }
            }
            return actions
        }
        apply(actions)
        reply(connection, id, Self.batchResult(results, summary: summary))
    }

    /// `promote`, `cancel` or `evict` for one URL; returns the item status.
    /// One URL's `promote`, `cancel` or `evict`: its status, and for `busy` why.
    func change(_ op: Operation, _ url: CanonicalURL, inUse: Set<String>, now: Int64) throws -> (ItemStatus, WireError?) {
        let moment = Moment.now
        let task = scheduler.task(url.key)
        switch op {
        case .promote:
            if task?.lane != .fast, scheduler.counts.fastWaiting >= Self.mostWaitingUrgent { return (.busy, urgentLaneFull) }
            if task?.state != .running, let paused = scheduler.pauseFailure(of: url.authority, at: moment) {
                // Its host's pause makes urgent work background work (`Scheduler.failFast`): made urgent now, 1,100
                // of them held back every other host's urgent work until the pause ended.
                return (.busy, WireError(paused))
            }
            if task == nil {
                guard try store.isQueued(url.key) else { return (.unknown, nil) }
                let (outcome, actions) = scheduler.queue(url, cache: cacheState(try store.liveEntry(url.key), now: now), now: moment)
                try loadedFromQueue(url.key, outcome)  // first: the actions may start it, and its queue wait ends there
                apply(actions)
                switch outcome {
                case .cached: return (.cached, nil)
                case .skipped: return (.skipped, nil)
                case .queued, .already: break
                }
            }
            apply(scheduler.promote(url.key, now: moment))  // a fast one too: taken back if a client abandoned it
            return (task?.lane == .fast ? .already : .promoted, nil)
        case .cancel:
            let queued = try store.isQueued(url.key)
            guard task != nil || queued else { return (.unknown, nil) }
            apply(scheduler.cancel(url.key, now: moment))
            try store.dequeue(url.key)
            return (.cancelled, nil)
        case .evict:
            // What a waiting request or a variant being made needs stays (like `evict --all`).
            guard !inUse.contains(url.key) else { return (.inUse, nil) }
            guard try store.remove(url.key) else { return (.unknown, nil) }
            telemetry.evicted(1)
            return (.evicted, nil)
        default:
            preconditionFailure("\(op) is not a per-URL change")
        }
    }

    /// Queued URLs that only the durable backlog holds.
    var backlogOnly: Int64 { backlog.onlyQueued(of: store.backlogCount) }

    func summary(_ task: TaskInfo) -> TaskSummary {
        let progress = fetches.progress(task.key)
        let state: TaskSummary.State
        switch task.state {
        case .waiting: state = .waiting
        case .running: state = .running
        case .delayed: state = .delayed
        }
        return TaskSummary(url: task.key, lane: task.lane.rawValue, state: state, attempts: task.tries,
                           waiters: task.waiters.count, bytes: progress?.received, total: progress?.expected,
                           steppedAside: scheduler.hasSteppedAside(task.key) ? true : nil,
                           lingering: task.lingering ? true : nil)
    }

    /// The lanes as `status`, `watch` and the metrics show them. `running` counts transfers: the running tasks (the
    /// slow lane's with the lingering ones) but those whose transfer ended, whose bodies are being checked and moved
    /// into place.
    var lanes: (fast: StatusReport.Lane, slow: StatusReport.Lane) {
        let counts = scheduler.counts
        var fast = counts.fastRunning, slow = counts.slowRunning + counts.lingering
        for key in fetches.endingKeys {
            guard let task = scheduler.task(key), task.state == .running else { continue }
            if task.lane == .fast { fast -= 1 } else { slow -= 1 }
        }
        return (.init(waiting: counts.fastWaiting, running: fast, width: scheduler.configuration.fastWidth,
                      steppedAside: counts.fastSteppedAside > 0 ? counts.fastSteppedAside : nil),
                .init(waiting: counts.slowWaiting, running: slow, width: scheduler.configuration.slowWidth,
                      lingering: counts.lingering > 0 ? counts.lingering : nil))
    }

    /// The hosts `status` lists: those paused last, in host order.
    private var pausedHostsShown: [(host: String, until: Moment)] {
        let paused = scheduler.paused, shown = StatusReport.pausedHostsShown
        guard paused.count > shown else { return paused }
        return paused.sorted { ($0.until, $1.host) > ($1.until, $0.host) }.prefix(shown).sorted { $0.host < $1.host }
    }

    func status() -> StatusReport {
        let counts = scheduler.counts, lanes = self.lanes
        let lookups = telemetry.cacheLookups, fetched = telemetry.fetchTotals
        return StatusReport(
            version: prefetchVersion, pid: getpid(), uptime: telemetry.uptime,
            fast: lanes.fast,
            slow: lanes.slow,
            slowSuspended: counts.slowSuspended, delayed: counts.delayed,
            backlog: backlogOnly,
            cache: .init(entries: store.entryCount, bytes: store.totalBytes, limit: options.maxCacheBytes,
                         hits: lookups.hits, misses: lookups.misses, directory: options.cacheDirectory),
            connections: clients.count, fetched: fetched.ok, failed: fetched.failed,
            pausedHosts: pausedHostsShown.map { .init(host: $0.host, until: $0.until.wallClockMilliseconds / 1000) },
            pausedHostCount: scheduler.paused.count, parked: scheduler.parkedCount,
            waitingForDisk: scheduler.waitingForDiskUntil.map { $0.wallClockMilliseconds / 1000 }, background: backgroundState)
    }

    /// A request line that did not decode, in words: which field (`urls[2]`), and what was wrong with it.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        func field(_ path: [any CodingKey]) -> String {
            path.enumerated().map { position, key in
                key.intValue.map { "[\($0)]" } ?? (position == 0 ? key.stringValue : "." + key.stringValue)
            }.joined()
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "missing field \"\(field(context.codingPath + [key]))\""
        case .valueNotFound(_, let context):
            return "\(field(context.codingPath)): null where a value is needed"
        case .typeMismatch(let type, let context):
            // Foundation says "Expected to decode String but found number instead." (or "a string", "an array").
            let words = context.debugDescription.split(separator: " ").map(String.init)
            var what = ""
            if let found = words.lastIndex(of: "found"), let end = words.lastIndex(of: "instead."), found + 1 < end {
                what = ", found " + foundKinds[words[end - 1], default: words[end - 1]]
            }
            return "\(field(context.codingPath)): expected \(kind(type))\(what)"
        case .dataCorrupted(let context):
            let path = field(context.codingPath)
            return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    /// The JSON values Foundation names in a type mismatch, in the words `kind` uses.
    private static let foundKinds = ["number": "a number", "string": "a string", "array": "a list",
                                     "dictionary": "an object", "bool": "true or false"]

    /// What a request field of `type` holds, in JSON's words.
    private static func kind(_ type: Any.Type) -> String {
        let name = String(describing: type)
        if name == "String" { return "a string" }
        if name == "Bool" { return "true or false" }
        if name.hasPrefix("Int") || name.hasPrefix("UInt") { return "a whole number" }
        if name == "Double" || name == "Float" { return "a number" }
        if name.hasPrefix("Array") { return "a list" }
        if name.hasPrefix("Dictionary") { return "an object" }
        return name
    }
}
