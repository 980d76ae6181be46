import FoundationEssentials
import CSystem
import Glibc
import PrefetchProtocol
import QueueCore

/// The daemon: routes requests and events between its components (the clients, the scheduler, the fetch side, the
/// variants, the store, the telemetry), all on one thread. What it keeps itself is only for routing: the components,
/// the turn's `queue` batch, its timers, whether it is shutting down.
final class Daemon {
    var options: Options
    /// The listening socket systemd passed, taken before the daemon opened a descriptor of its own.
    let passedSocket: SocketActivation?
    private let loop: EventLoop
    let store: Store
    /// Carries out the scheduler's transfers and reports how each fetch ended.
    var fetches: Fetches!
    /// Makes resized variants, once each however many ask, and reports how each job ended.
    var variants: Variants!
    /// What the background lane may do: a metered network, battery, power saver, quiet hours, no network.
    var conditions: BackgroundConditions!
    /// Records the risky steps of handling a URL, so that one that kills the daemon twice is quarantined.
    private var crashGuard: CrashGuard!
    /// The entry a fetch just indexed, while the scheduler's answers to that fetch are carried out: its waiters get
    /// it as it is, not from a SELECT and a `stat` of the file that was just moved into place.
    private var justIndexed: IndexEntry?
    var scheduler: Scheduler
    private var signals: SignalWatcher?
    let notifier: SystemdNotifier
    /// The listening socket and every connection.
    let clients: Clients
    /// The metrics, the events for watchers, the log lines about fetches.
    let telemetry = Telemetry()
    /// The keys of all views' rows, each held once.
    let viewKeys = ViewKeys()
    /// Which of the durable queue's URLs the scheduler holds.
    var backlog = BacklogWindow()
    /// Hosts whose pause was logged, with the end of that pause (Unix ms).
    private var pausesLogged: [String: Int64] = [:]
    /// The last failure to write `metrics_textfile` that was logged, while it lasts.
    var metricsWarning: String?
    /// Gives freed memory back to the system after a burst.
    var memory = MemoryTrimmer()
    /// Whether the end of this turn looks for a deleted write-ahead log (`replaceDeletedWriteAheadLog`).
    private var writeAheadLogCheckDue = false
    /// `queue` requests of this turn, committed together at its end.
    private var queueBatch: [(connection: Connection, id: RequestID?, urls: [String], now: Bool, summary: Bool)] = []
    /// The URLs of this turn's `promote`, `cancel`, `demote` and `evict` requests (each does work per URL).
    var changedURLsThisTurn = 0
    /// Every 5 s: writes the access times `Store.touch` collected, and checks that the index and the lock are where
    /// they were (`stopForLostCache`).
    private var accessFlushTimer: LoopTimer!
    /// Runs the scheduler's retries and expiries when the earliest is due.
    private var retryTimer: LoopTimer!
    /// Runs the start-up sweep (`Store.sweepStep`) a slice per turn once the daemon serves, after a start that did
    /// not follow a clean stop; `sweepStarted` is when it began (monotonic ms).
    private var sweepTimer: LoopTimer!
    /// Reads on in the durable queue past the rows of held hosts (paused, or passed over after a slice), a read a turn.
    private var backlogTimer: LoopTimer!
    /// `slowWaitingOnHeldHosts`, and until when (monotonic ms) it stands.
    private var blockedCount = (count: 0, until: Int64(0))
    private var sweepStarted: Int64 = 0
    /// `evict --all` requests being carried out, a slice a turn (`evictSlice`), in the order they came.
    var evictions: [Eviction] = []
    var evictTimer: LoopTimer!
    /// `watch` snapshots every 500 ms while someone watches; `metrics_textfile` every 5 s when set.
    var snapshotTicker: Ticker!
    var metricsTicker: Ticker!
    /// After SIGTERM or SIGINT: requests but `ping` and `status` are refused.
    var shuttingDown = false
    /// Why the daemon stopped itself, if it did: `run` throws it (exit status 1).
    private var fatal: String?
    /// The damage a call found in the index while serving, once the daemon stopped for it: `run` returns it, and the
    /// program starts again with it (`StartAgain`).
    private var damageFound: DatabaseError?
    /// When a full disk last made the cache evict (monotonic ms): `makeRoomOnFullDisk`.
    var diskFullEvictionAt: Int64?
    /// URLs queued again after their answer was evicted as untrusted, with when (monotonic ms): `evictDistrusted`.
    var requeuedAfterDistrust: [String: Int64] = [:]

    static let decoder = JSONDecoder()

    /// `damage`: what the run before this start found damaged in the index (`StartAgain`); the index is set aside.
    init(options: Options, passedSocket: SocketActivation?, damage: DatabaseError? = nil) throws {
        self.options = options
        self.passedSocket = passedSocket
        Log.threshold = options.logLevel
        loop = try EventLoop()
        clients = Clients(loop: loop, options: options)
        notifier = SystemdNotifier(environment: options.environment, loop: loop)
        // Refused before the cache directory is made, so that a second daemon on a live socket leaves nothing behind.
        if passedSocket == nil { try UnixSocket.refuseIfServed(options.socketPath) }
        store = try Store(directory: options.cacheDirectory, damage: damage)
        let seed = UInt64.random(in: .min ... .max)
        scheduler = Scheduler(configuration: options.schedulerConfiguration, seed: seed)
        // Saved with their end on the wall clock: a clock set back since makes what is left at most as long as a pause
        // or a remembered failure lasts.
        let wallNow = wallClockMilliseconds()
        let now = Moment.now
        for pause in try store.pausedHosts(now: wallNow) {
            let left = min(pause.until.saturatingSubtract(wallNow), options.schedulerConfiguration.hostPause)
            scheduler.pause(host: pause.host, until: now + left)
        }
        for failure in try store.failures(now: wallNow) {
            let left = min(failure.until.saturatingSubtract(wallNow), options.retry.negativeTTL)
            scheduler.remember(failure.key, failure.failure, until: now + left)
        }
        crashGuard = try CrashGuard(store: store, mark: FatalSignalMark(directory: options.cacheDirectory),
                                    crashOn: options.environment["PREFETCHD_TEST_DIE_ON"],
                                    killedOn: options.environment["PREFETCHD_TEST_KILLED_ON"])
        try quarantine(crashGuard.quarantine)
        let temporaries = try store.beginRecovery()
        if temporaries > 0 { Log.info("recovery: removed \(temporaries) temporary files") }
        fetches = try Fetches(loop: loop, store: store, crashGuard: crashGuard, options: options)
        fetches.onEnd = { [unowned self] key, lane, end in self.fetchEnded(key, lane, end) }
        fetches.onDistrust = { [unowned self] keys in self.evictDistrusted(keys) }
        fetches.onTail = { [unowned self] key in
            self.apply(self.scheduler.tailReached(key, now: .now))
        }
        fetches.onResponseStart = { [unowned self] key in
            self.apply(self.scheduler.responseStarted(key, now: .now))
        }
        variants = Variants(store: store, workers: try WorkerPool(threads: options.workerThreads, name: "pf-resize", loop: loop),
                            costs: try WorkerPool(threads: 1, name: "pf-varcost", loop: loop), crashGuard: crashGuard,
                            options: options)
        variants.onEnd = { [unowned self] job, outcome in self.variantEnded(job, outcome) }
        snapshotTicker = Ticker(loop: loop) { [unowned self] in self.sendSnapshot() }
        metricsTicker = Ticker(loop: loop) { [unowned self] in self.writeMetricsTextfile() }
        if options.metricsTextfile != nil { metricsTicker.arm(intervalMilliseconds: 5000) }
        for warning in ImageFormats.unavailableWarnings(policy: options.images) { Log.warning(warning) }
        signals = try SignalWatcher(loop: loop) { [unowned self] signal in self.received(signal) }
        conditions = try BackgroundConditions(loop: loop, policy: options.background, environment: options.environment) {
            [unowned self] in self.backgroundConditionsChanged()
        }
        // Started inside quiet hours, on a metered network or with none: nothing of the backlog starts before it is
        // held.
        if conditions.mode != .run { backgroundConditionsChanged() }
        loop.endOfTurn = { [unowned self] in self.endOfTurn() }
        // A full disk can fail a commit after a fetch ended: its URL, back in the durable queue, is read again.
        store.onRollback = { [unowned self] in self.backlog.rewind() }
        accessFlushTimer = loop.makeTimer { [unowned self] in
            if let gone = store.removedBehindOurBack() { return stopForLostCache(gone) }
            writeAheadLogCheckDue = true
            do { try store.checkpointWhenQuiet() } catch { Log.error("cannot checkpoint the index: \(error)") }
            do { try store.flushAccesses() } catch { Log.error("cannot record access times: \(error)") }
            accessFlushTimer.schedule(at: monotonicMilliseconds() + 5000)
        }
        accessFlushTimer.schedule(at: 0)
        retryTimer = loop.makeTimer { [unowned self] in
            apply(scheduler.advance(to: .now))
        }
        sweepTimer = loop.makeTimer { [unowned self] in self.sweepSlice() }
        backlogTimer = loop.makeTimer { [unowned self] in self.refillBacklog() }
        evictTimer = loop.makeTimer { [unowned self] in self.evictSlice() }
        clients.onLine = { [unowned self] line, connection in self.handle(line, from: connection) }
        clients.onClose = { [unowned self] connection in self.clientClosed(connection) }
        clients.settleRequests = { [unowned self] in self.commitQueueBatch(now: wallClockMilliseconds()) }
        clients.urlsThisTurn = { [unowned self] in
            self.queueBatch.reduce(self.changedURLsThisTurn) { $0 + $1.urls.count }
        }
    }

    /// Binds the socket and serves until SIGTERM or SIGINT, or until a call finds the index damaged: then it returns
    /// that damage, to start again with (`StartAgain`).
    func run() throws -> DatabaseError? {
        let descriptorLimit = Self.raiseDescriptorLimit()
        if let tooFew = Self.descriptorShortage(limit: descriptorLimit, options: options) { Log.warning(tooFew) }
        let (fd, path, activation) = try openListeningSocket()
        clients.budgetDescriptors(limit: descriptorLimit, work: workDescriptors)
        try clients.listen(on: fd, path: path, activation: activation, options: options)
        refillBacklog()
        do { try enforceCacheLimit() } catch { Log.error("cannot evict to stay under max_cache_bytes: \(error)") }
        try store.commit()
        Log.info("prefetchd \(prefetchVersion) serving \(path)\(activation == nil ? "" : " (from systemd)"), "
                 + "cache \(options.cacheDirectory) (\(store.entryCount) entries, \(store.backlogCount) queued)")
        notifier.status = { [unowned self] in self.serviceStatus() }
        notifier.ready()
        if store.sweeping {
            sweepStarted = monotonicMilliseconds()
            sweepTimer.schedule(at: 0)
        }
        loop.run()
        Log.info("stopped")
        if let fatal { throw DaemonError(fatal) }
        if damageFound != nil { store.handOverLock() }
        return damageFound
    }

    /// About 2 ms of the start-up sweep, then the turn goes on: the daemon serves while a large cache is compared
    /// with its index (100,000 entries: 0.7-1.4 s warm, 1.7 s from a cold disk). What it has not reached yet is
    /// checked when asked for (`Store.liveEntry`); the cache's size limit is kept once it ends.
    private func sweepSlice() {
        let deadline = monotonicMilliseconds() + 2
        do {
            repeat {
                if let swept = try store.sweepStep(limit: 16) {
                    let took = monotonicMilliseconds() - sweepStarted
                    Log.info("recovery: compared the index with the files in \(took) ms: removed \(swept.badRows) rows "
                             + "without their file, \(swept.orphans) orphan files")
                    do { try enforceCacheLimit() } catch { Log.error("cannot evict to stay under max_cache_bytes: \(error)") }
                    return
                }
            } while monotonicMilliseconds() < deadline
            sweepTimer.schedule(at: 0)
        } catch {
            Log.error("recovery: cannot compare the index with the files: \(error); trying again in 5 s")
            sweepTimer.schedule(at: monotonicMilliseconds() + 5000)
        }
    }

    /// The fewest descriptors the daemon starts with: its own files, event loop, timers and worker pools take about
    /// 28. Below it each start failed its own way: a bare "Too many open files", GLib aborting the process, the index
    /// said to be unwritable.
    static let fewestDescriptors = 32

    /// Raises the soft descriptor limit (`raiseDescriptorLimit`); below `fewestDescriptors` the start is refused, with
    /// how to raise it. Called before the daemon opens anything.
    static func checkDescriptorLimit() throws {
        let limit = raiseDescriptorLimit()
        guard limit >= fewestDescriptors else {
            throw DaemonError("RLIMIT_NOFILE is \(limit): prefetchd needs at least \(fewestDescriptors) file descriptors "
                              + "to start (its index, lock, event loop, timers and workers), and more for its clients and "
                              + "transfers; raise the limit (LimitNOFILE= under systemd, ulimit -n)")
        }
    }

    /// Hundreds of clients and thousands of transfers need descriptors: the soft limit goes up to the hard one.
    /// Returns the limit in force.
    private static func raiseDescriptorLimit() -> Int {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            let raised = rlimit(rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max)
            if setrlimit(resource, [raised]) == 0 { limit = raised } else {
                Log.warning("setrlimit(RLIMIT_NOFILE): \(String(cString: strerror(errno)))")
            }
        }
        return Int(min(limit.rlim_cur, rlim_t(Int32.max)))
    }

    /// Descriptors each transfer may hold (its socket, its body file, the resolver's pair), each resizing worker (an
    /// image and its variant) and each checking worker (the body it reads), kept free of clients so that running out
    /// of them is never blamed on a server.
    private static let descriptorsPerTransfer = 4
    private static let descriptorsPerResize = 3
    private static let descriptorsPerCheck = 1

    /// The descriptors kept from the clients for every transfer the lanes may run and the workers of both pools.
    var workDescriptors: Int { Self.workDescriptors(options) }

    static func workDescriptors(_ options: Options) -> Int {
        (options.fastWidth + options.slowWidth) * descriptorsPerTransfer
            + options.workerThreads * (descriptorsPerResize + descriptorsPerCheck)
    }

    /// Why `limit` (RLIMIT_NOFILE) is too low for `options`, if it is: the lanes' transfers and the workers alone
    /// would need more descriptors than it allows. Said at start and at a reload: the daemon serves as it can (its
    /// transfers that find no descriptor fail as `internal`, never blamed on a host, and few clients fit), but
    /// nothing said why.
    static func descriptorShortage(limit: Int, options: Options) -> String? {
        let work = workDescriptors(options)
        guard work >= limit else { return nil }
        return "RLIMIT_NOFILE is \(limit): fast_width \(options.fastWidth) and slow_width \(options.slowWidth) need \(work) "
            + "descriptors for their transfers and the workers, more than it allows: transfers that find none fail as "
            + "internal, and few clients fit; raise the limit (LimitNOFILE= under systemd, ulimit -n) or narrow the lanes"
    }

    // MARK: Loop hooks

    private func endOfTurn() {
        let now = wallClockMilliseconds()
        commitQueueBatch(now: now)
        changedURLsThisTurn = 0
        refillBacklog()
        do {
            try store.commit()
            replaceDeletedWriteAheadLog()
        } catch {
            Log.error("cannot commit the index: \(error)")
        }
        if let damage = store.damage, !shuttingDown { stopForDamagedIndex(damage) }
        clients.flush()
        let workRanOut = memory.turnEnded(idle: scheduler.counts.tasks == 0)
        telemetry.summarizeActivity(workRanOut: workRanOut, queued: scheduler.counts.slowWaiting + Int(backlogOnly))
        // The loop's clock is monotonic and stops in a suspend, the scheduler's counts the sleep: the timer is aimed
        // again at every turn, at least every 5 s (`accessFlushTimer`).
        retryTimer.schedule(at: scheduler.nextDeadline.map {
            monotonicMilliseconds() + max(0, $0.milliseconds - schedulerMilliseconds())
        })
        notifier.turnEnded()
    }

    private func received(_ signal: Int32) {
        switch signal {
        case SIGHUP:
            reload()
        default:
            shutdown(reason: signal == SIGTERM ? "SIGTERM" : "SIGINT")
        }
    }

    /// Stops admitting, answers every waiter `shutting_down`, stops the transfers keeping only the partial bodies the
    /// next start resumes (queued URLs with a validator; acknowledged queue entries stay in the index), records that
    /// nothing was being handled (`CrashGuard`) and, with no file on its way into place, that the index and the files
    /// agree (`Store.markStoppedCleanly`), commits and leaves the loop.
    private func shutdown(reason: String) {
        guard !shuttingDown else { return }
        shuttingDown = true
        Log.info("\(reason): shutting down")
        if damageFound != nil {
            notifier.reloading(status: "starting again: \(reason)")
        } else {
            notifier.stopping(reason: reason)
        }
        clients.stopListening()
        stopTransfersForShutdown()
        let error = WireError(.shuttingDown, "the daemon is shutting down")
        for connection in clients.all {
            for recipient in connection.takeAllWaits().map(\.recipient) + connection.takeAllVariantWaits() {
                if case .request(let id) = recipient { send(connection, Reply<Ignored>(id: id, error: error)) }
            }
        }
        commitQueueBatch(now: wallClockMilliseconds())
        try? store.flushAccesses()
        try? store.stopWorking()
        if fetches.endingKeys.isEmpty, variants.originalsInUse.isEmpty { try? store.markStoppedCleanly() }
        try? store.commit()
        clients.flushAllOnce()
        loop.stop()
    }

    /// At the end of a turn whose writes were committed, when asked (every 5 s and when a queue was acknowledged): a
    /// write-ahead log deleted behind the daemon's back would lose what it holds at a crash, so it is replaced before
    /// the turn's replies go out.
    private func replaceDeletedWriteAheadLog() {
        guard writeAheadLogCheckDue else { return }
        writeAheadLogCheckDue = false
        guard store.writeAheadLogWasDeleted else { return }
        do {
            try store.replaceWriteAheadLog()
            Log.warning("the index's write-ahead log was deleted while prefetchd ran: what it held was written into the "
                        + "index, and a new log was started")
        } catch {
            writeAheadLogCheckDue = true
            Log.error("the index's write-ahead log was deleted while prefetchd ran, and cannot be replaced yet: \(error)")
        }
    }

    /// Part of the cache directory was deleted (`Store.removedBehindOurBack`): the daemon stops, exit status 1, so
    /// that a restart makes a new index and lock; nothing more is acknowledged into the old ones.
    private func stopForLostCache(_ gone: String) {
        fatal = "\(gone) was deleted or replaced while prefetchd ran (was the cache directory cleared?); "
            + "stopped, so that a restart makes a new one"
        Log.error(fatal!)
        shutdown(reason: "\(gone) was deleted")
    }

    /// A call found the index damaged while serving: each query that meets the damage fails (a backlog stuck at a
    /// damaged page of the queue failed every turn) until the index is set aside. The daemon stops as on SIGTERM,
    /// marking no clean stop, and the program starts again (`StartAgain`): the new start sets the index aside, keeping
    /// what of the queue can be read, and serves on the same socket.
    private func stopForDamagedIndex(_ damage: DatabaseError) {
        damageFound = damage
        Log.error("the index \(options.cacheDirectory)/\(CacheFiles.indexName) was found damaged while serving "
                  + "(\(damage.message)): starting again, setting it aside and keeping what of the queue can be read")
        shutdown(reason: "the index is damaged")
    }

    // MARK: Clients

    /// A client closed: its view's rows go on as background work, its waits go, the scheduler forgets its waiters.
    /// The urgent fetches nobody else waits for wait behind those someone waits for; those only its `get`s asked for
    /// go on while at most `backlogWindow` (1,024) urgent tasks wait, and the rest are let go (what the durable queue
    /// holds for them stays).
    private func clientClosed(_ connection: Connection) {
        closeView(of: connection)
        _ = connection.takeAllWaits()
        apply(scheduler.disconnect(client: connection.id, urgentKept: options.backlogWindow, now: .now))
    }

    func send<T: Encodable>(_ connection: Connection, _ message: T) { clients.send(connection, message) }

    func reply<T: Codable & Sendable>(_ connection: Connection, _ id: RequestID?, _ result: T) {
        send(connection, Reply(id: id, result: result))
    }

    func fail(_ connection: Connection, _ id: RequestID?, _ error: WireError) {
        send(connection, Reply<Ignored>(id: id, error: error))
    }

    /// Answers with the cached `entry`, or with its `variant` (made when it does not exist yet).
    func deliver(_ entry: IndexEntry, variant: VariantSpec?, fromCache: Bool, stale: Bool = false, on connection: Connection,
                 to recipient: Recipient) {
        if let variant { return deliverVariant(of: entry, variant, on: connection, to: recipient) }
        deliver(.success(wire(entry, fromCache: fromCache, stale: stale)), to: recipient, on: connection)
    }

    /// Sends an answer: as the reply to a request, or as a view's event for a row.
    func deliver(_ outcome: Result<CacheEntry, WireError>, to recipient: Recipient, on connection: Connection) {
        // Index rows use the key as their URL.
        if case .success(let entry) = outcome { connection.handOut(entry.url) }
        switch (recipient, outcome) {
        case (.request(let id), .success(let entry)): reply(connection, id, entry)
        case (.request(let id), .failure(let error)): fail(connection, id, error)
        case (.row(let row, let url), _): send(connection, viewEvent(row: row, url: url, outcome))
        }
    }

    // MARK: Requests

    /// Every request line: decoded into a command (a bad one is answered with its error), then routed.
    func handle(_ line: [UInt8], from connection: Connection) {
        let decoded = Result { () throws(RefusedLine) in try parse(line) }
        // Requests take effect in the order they came: the queues before this line are committed first (a queue joins
        // them), so that a `cancel` or `info` right behind a `queue` (pipelined, or another client's in the same turn)
        // sees its URLs, and no reply comes before the queue's.
        let now = wallClockMilliseconds()
        if (try? decoded.get())?.command.isQueue != true { commitQueueBatch(now: now) }
        let id: RequestID?, command: Command
        switch decoded {
        case .failure(let refused): return fail(connection, refused.id, refused.error)
        case .success(let decoded): (id, command) = decoded
        }
        // What a departed client left unread is served only where it outlives the client (`Clients.abandon`).
        if connection.isAbandoned, !command.outlivesClient { return }
        switch command {
        case .ping: reply(connection, id, Pong())
        case .get(let text, let variant, let offline, let staleAllowance):
            get(text, variant: variant, offline: offline, staleAllowance: staleAllowance, id: id, connection: connection,
                now: now)
        case .queue(let urls, let urgent, let summary): queueBatch.append((connection, id, urls, urgent, summary))
        case .evictAll: evictAll(id, connection)
        case .view(let change): view(change, id: id, connection: connection, now: now)
        case .change(let op, let urls, let summary): change(op, urls, summary: summary, id, connection, now: now)
        case .info(let text): info(text, id, connection)
        case .status: reply(connection, id, status())
        case .watch:
            reply(connection, id, Watching())
            startWatching(connection)
        case .metrics: reply(connection, id, MetricsText(text: metricsText()))
        case .formats: formats(id, connection)
        case .list(let limit): list(limit, id, connection)
        }
    }

    /// A request line that is not carried out, and the reply's id and error.
    private struct RefusedLine: Error {
        let id: RequestID?
        let error: WireError
    }

    /// The command a request line asks for, or why it is refused.
    private func parse(_ line: [UInt8]) throws(RefusedLine) -> (id: RequestID?, command: Command) {
        let reading = JSONSyntax.read(line, wholeNumbersIn: Request.wholeNumberMembers)
        if let problem = reading.problem {
            throw RefusedLine(id: nil, error: WireError(.badRequest, "the line is not strict JSON: \(problem)"))
        }
        let request: Request
        do {
            request = try Self.decoder.decode(Request.self, from: Data(line))
        } catch {
            // A line that is JSON with an id gets its id back, so that a client waiting for that reply gets it.
            let id = (try? Self.decoder.decode(LineID.self, from: Data(line)))?.id
            throw RefusedLine(id: id, error: WireError(.badRequest, "the line is not a JSON request object: \(Self.describe(error))"))
        }
        if let member = reading.notWhole {  // the decoder read it as the whole number next to it
            let said = member == "id" ? RequestID.expected : "not a whole number from \(Int64.min) to \(Int64.max)"
            throw RefusedLine(id: member == "id" ? nil : request.id,
                              error: WireError(.badRequest, "the line is not a JSON request object: \(member): \(said)"))
        }
        if case .text(let text) = request.id, RequestID.writtenLength(text) > RequestID.longestText {
            throw RefusedLine(id: nil, error: WireError(.badRequest, "id: a string of \(RequestID.writtenLength(text)) "
                                                        + "bytes as JSON writes it, over the \(RequestID.longestText) an id "
                                                        + "may have"))
        }
        guard let op = Operation(rawValue: request.op) else {
            let known = Operation.allCases.map(\.rawValue).joined(separator: ", ")
            throw RefusedLine(id: request.id, error: WireError(.unknownOp, "unknown op '\(request.op)' (known: \(known))"))
        }
        if shuttingDown, op != .ping, op != .status {
            throw RefusedLine(id: request.id, error: WireError(.shuttingDown, "the daemon is shutting down"))
        }
        do throws(WireError) {
            return (request.id, try Command(request, op: op))
        } catch {
            throw RefusedLine(id: request.id, error: error)
        }
    }

    /// `get`: from the cache when it may, else a `Wait` on the connection and the scheduler's decision.
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
            telemetry.cacheHit()
            store.touch(url.key, now: now)
            if variant == nil { telemetry.getAnsweredAtOnce() }
            deliver(entry, variant: variant, fromCache: true, stale: stale, on: connection, to: .request(id))
        }
        let state = cacheState(entry, now: now)
        if state == .fresh, let entry, !scheduler.hasTask(url.key) {
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
            let moment = Moment.now
            return apply(scheduler.batch(now: moment) { scheduler in
                let loaded = loadIfQueued(url, cache: .stale, into: &scheduler, now: moment)
                let (outcome, actions) = scheduler.queue(url, cache: .stale, now: moment)
                if outcome == .queued { taskCreated(url.key) }
                return loaded + actions
            })
        }
        if let full = connection.waitsFull { return fail(connection, id, full) }
        telemetry.cacheMiss()
        let waiter = connection.addWait(for: url.key, variant: variant, recipient: .request(id))
        let moment = Moment.now
        let actions = scheduler.batch(now: moment) { scheduler in
            let loaded = loadIfQueued(url, cache: state, into: &scheduler, now: moment)
            return loaded + getting(url, waiter: waiter, cache: state, into: &scheduler, now: moment)
        }
        apply(actions)
    }

    /// `Scheduler.get`, and the queue wait of a task it creates starts now (one answered at once makes none).
    func getting(_ url: CanonicalURL, waiter: Waiter, cache: CacheState, tentative: Bool = false,
                 into scheduler: inout Scheduler, now: Moment) -> [Action] {
        let existed = scheduler.hasTask(url.key)
        let actions = scheduler.get(url, waiter: waiter, cache: cache, now: now, tentative: tentative)
        if !existed, scheduler.hasTask(url.key) { taskCreated(url.key) }
        return actions
    }

    // MARK: Scheduler actions

    /// Runs `body`, whose scheduler events apply their actions as they come, as one event: what they make startable
    /// starts at its end (`Scheduler.deferAdmission`).
    func asOneEvent<T>(_ body: () throws -> T) rethrows -> T {
        scheduler.deferAdmission()
        defer { apply(scheduler.admitDeferred(now: .now)) }
        return try body()
    }

    func apply(_ actions: [Action]) {
        for action in actions {
            switch action {
            case .start(let key, let lane, let revalidate):
                transferStarted(key, lane: lane)
                fetches.start(key, lane: lane, revalidate: revalidate, retry: (scheduler.task(key)?.tries ?? 1) > 1)
            case .changeLane(let key, let lane):
                fetches.changeLane(key, to: lane)
            case .park(let key):
                if !fetches.park(key) { scheduler.parkedWithoutBytes(key) }
            case .pauseHost(let host, let until):
                // The transfers that ran when a host was paused fail one after another and make the pause longer:
                // said once per pause.
                let now = schedulerMilliseconds()
                if (pausesLogged[host] ?? .min) <= now {
                    pausesLogged = pausesLogged.filter { $0.value > now }
                    let seconds = max(0, until.milliseconds - now) / 1000
                    Log.warning("pausing \(host) for \(seconds) s: it failed too often in a row")
                }
                pausesLogged[host] = until.milliseconds
                do {
                    try store.savePause(host: host, until: until.wallClockMilliseconds)
                } catch {
                    Log.error("cannot persist the pause of \(host): \(error)")
                }
            case .abort(let key):
                fetches.abort(key)
            case .answer(let waiter, let answer):
                answerWaiter(waiter, answer)
            case .holdBackground(let held):
                fetches.holdBackground(held, promotions: scheduler.promotions)
            case .forget(let key), .letGo(let key):
                backlog.forget(key)
                telemetry.taskForgotten(key)
                do {
                    if case .forget = action {
                        try store.dequeue(key)
                        try fetches.forget(key)
                    } else if store.partialValidator(key) != nil, try !store.isQueued(key) {
                        try fetches.forget(key)  // a URL the durable queue holds keeps its partial, to resume in its turn
                    }
                } catch {
                    Log.error("cannot forget \(key): \(error)")
                }
            case .toBacklog(let key):
                // Read again in its turn: the next reads start over from the queue's first row.
                backlog.forget(key)
                backlog.rewind()
                do {
                    _ = try store.enqueue(key: key, now: wallClockMilliseconds())
                } catch {
                    Log.error("cannot keep \(key) in the durable queue: \(error)")
                }
            case .remember(let key, let failure, let until):
                do {
                    try store.saveFailure(key, failure, until: until.wallClockMilliseconds, now: wallClockMilliseconds())
                } catch {
                    Log.error("cannot remember the failure of \(key): \(error)")
                }
            }
        }
    }

    /// A fetch ended in `lane` (`Fetches.onEnd`): telemetry first (before the scheduler forgets when the transfer
    /// started), then the cache limit after a new file, then the scheduler, which answers the waiters and starts what
    /// comes next.
    func fetchEnded(_ key: String, _ lane: Lane, _ end: FetchEnd) {
        observe(end, of: key, in: lane)
        if case .fetched(let entry, _) = end {
            // The entry is indexed with its file: an eviction that fails leaves the cache over its limit for now.
            do { try enforceCacheLimit(sparing: key) } catch { Log.error("cannot evict to stay under max_cache_bytes: \(error)") }
            justIndexed = entry
        }
        // Someone waits: the cache makes room for what is asked now. Background work waits for space instead; making
        // room for itself, a backlog larger than the disk would evict what it had just fetched.
        if case .failed(let failure) = end, failure.code == .diskFull, scheduler.task(key)?.waiters.isEmpty == false {
            makeRoomOnFullDisk()
        }
        apply(scheduler.finish(key, end.outcome, now: .now))
        justIndexed = nil
    }

    private func answerWaiter(_ waiter: Waiter, _ answer: Answer) {
        guard let connection = clients.connection(waiter.client), let pending = connection.takeWait(waiter) else { return }
        telemetry.getAnswered(waitingSince: pending.since)
        if case .row(let row, _) = pending.recipient { connection.view?.rowAnswered(row, waiter: waiter) }
        let key = pending.key, recipient = pending.recipient
        switch answer {
        case .ready:
            do {
                let indexed = justIndexed?.key == key ? justIndexed : nil
                guard let entry = try indexed ?? store.liveEntry(key) else {
                    return deliver(.failure(WireError(.internal, "the entry for \(key) vanished from the cache")),
                                   to: recipient, on: connection)
                }
                store.touch(key, now: wallClockMilliseconds())
                deliver(entry, variant: pending.variant, fromCache: false, on: connection, to: recipient)
            } catch {
                deliver(.failure(WireError(.internal, "cannot read the index: \(error)")), to: recipient, on: connection)
            }
        case .failed(let failure):
            if Self.allowsStaleIfError(failure), let entry = try? store.liveEntry(key), !entry.mustRevalidate, !entry.noStore {
                Log.info("serving \(key) stale: revalidation failed with \(failure.code.rawValue)")
                return deliver(entry, variant: pending.variant, fromCache: true, stale: true, on: connection, to: recipient)
            }
            deliver(.failure(WireError(failure)), to: recipient, on: connection)
        case .cancelled:
            deliver(.failure(WireError(.cancelled, "the fetch was cancelled")), to: recipient, on: connection)
        }
    }

    /// Keys whose files are in use: waited for, or the originals of variants being made. Not even `evict` removes
    /// them.
    var keysInUse: Set<String> { clients.waitedKeys.union(variants.originalsInUse) }

    /// Keys the size limit spares: those in use, and those named in replies not yet written to their clients.
    var protectedKeys: Set<String> { keysInUse.union(clients.keysHandedOut) }

    func wire(_ entry: IndexEntry, fromCache: Bool, stale: Bool = false) -> CacheEntry {
        CacheEntry(url: entry.url, path: store.files.absolute(entry.file), bytes: entry.bytes, sha256: entry.sha256,
                   contentType: entry.contentType, format: entry.format, width: entry.width, height: entry.height,
                   fetchedAt: entry.fetchedAt / 1000, freshUntil: entry.freshUntil / 1000, fromCache: fromCache,
                   stale: stale ? true : nil)
    }

    /// What the scheduler needs to know of a cached entry; a `no-store` entry is never reused.
    func cacheState(_ entry: IndexEntry?, now: Int64) -> CacheState {
        guard let entry, !entry.noStore else { return .missing }
        return entry.isFresh(at: now) ? .fresh : .stale
    }

    /// Failures that let a stale copy be served instead (stale-if-error): the origin could not be reached or failed.
    static func allowsStaleIfError(_ failure: Failure) -> Bool {
        switch failure.code {
        case .network, .timeout, .hostPaused, .unknownHost: return true
        case .httpStatus: return (500...599).contains(failure.httpStatus ?? 0)
        default: return false
        }
    }

    // MARK: Durable backlog

    /// Commits the `queue` requests that came since the last commit (this turn's, up to a request of another kind) in
    /// one transaction, then replies to each.
    private func commitQueueBatch(now: Int64) {
        guard !queueBatch.isEmpty else { return }
        let batch = queueBatch
        queueBatch.removeAll()
        // An acknowledgment written into an index no path names any more would be lost at the next start.
        if let gone = store.removedBehindOurBack() {
            for request in batch {
                fail(request.connection, request.id, WireError(.internal, "nothing was queued: \(gone) was deleted "
                                                                 + "while prefetchd ran; it is stopping"))
            }
            return stopForLostCache(gone)
        }
        writeAheadLogCheckDue = true
        var replies: [(Connection, RequestID?, [ItemResult])] = []
        do {
            try asOneEvent {
                for request in batch {
                    var results: [ItemResult] = []
                    for text in request.urls { results.append(try enqueue(text, now: now)) }
                    replies.append((request.connection, request.id, results))
                }
            }
            try store.commit()
            let queued = replies.reduce(0) { $0 + $1.2.count { $0.status == .queued } }
            asOneEvent {
                for (index, request) in batch.enumerated() where request.now {
                    replies[index].2 = replies[index].2.map { fetchNow($0, now: now) }
                }
            }
            telemetry.queued(queued)
            if queued > 0 { backlog.queued() }
            for (index, (connection, id, results)) in replies.enumerated() {
                reply(connection, id, Self.batchResult(results, summary: batch[index].summary))
            }
        } catch {
            store.rollback()
            let full = (error as? DatabaseError)?.isDiskFull == true
            Log.error("cannot commit queued URLs: \(error)")
            if full { makeRoomOnFullDisk() }
            for request in batch {
                fail(request.connection, request.id, WireError(full ? .diskFull : .internal,
                                                               "nothing was queued: the index could not be written (\(error))"))
            }
        }
    }

    /// `queue --now`: a URL that is queued (or was already) becomes urgent work, which nothing holds back. It is
    /// durably queued whatever happens here: a failure to promote it leaves it queued, and says so in the log.
    private func fetchNow(_ result: ItemResult, now: Int64) -> ItemResult {
        guard result.status == .queued || result.status == .already, let key = result.key,
              let url = try? CanonicalURL(key) else { return result }
        var promoted = result
        do {
            (promoted.status, promoted.error) = try change(.promote, url, inUse: [], now: now)
        } catch {
            Log.error("queue --now: \(key) stays queued as background work: \(error)")
        }
        return promoted
    }

    private func enqueue(_ text: String, now: Int64) throws -> ItemResult {
        let url: CanonicalURL
        do {
            url = try CanonicalURL(text)
        } catch {
            return ItemResult(url: text, status: .rejected, error: Self.wireError(error))
        }
        if scheduler.hasTask(url.key) {
            // A task exists (an urgent get's, a view's look-ahead): the acknowledged queue entry is still made durable,
            // and a view's tentative task is adopted, so that scrolling away no longer drops it.
            if try store.enqueue(key: url.key, now: now) { backlog.hold(url.key) }
            _ = scheduler.queue(url, cache: .missing, now: .now)
            return ItemResult(url: text, key: url.key, status: .already)
        }
        if let failure = scheduler.rememberedFailure(url.key, now: .now) {
            return ItemResult(url: text, key: url.key, status: .skipped,
                              error: WireError(failure))
        }
        if cacheState(try store.liveEntry(url.key), now: now) == .fresh { return ItemResult(url: text, key: url.key, status: .cached) }
        let inserted = try store.enqueue(key: url.key, now: now)
        return ItemResult(url: text, key: url.key, status: inserted ? .queued : .already)
    }

    /// Keeps up to `backlogWindow` slow tasks in memory, loading the oldest queued URLs from the index. URLs of a
    /// host the circuit breaker paused, or whose fetch ran past its slice, stay in the index, and are read again once
    /// it is not held.
    private func refillBacklog() {
        guard !shuttingDown else { return }
        let moment = Moment.now
        // Not a closure capturing the scheduler: that copy would make the first `queue` below copy every task.
        func held(_ host: String) -> Bool { scheduler.isPaused(host, at: moment) || scheduler.isPassedOver(host) }
        let resumed = backlog.hostsPassedOver.keys.filter { !held($0) }
        if !resumed.isEmpty { backlog.resumeHosts(resumed) }
        let slowWaiting = scheduler.counts.slowWaiting
        let blocked = slowWaiting < options.backlogWindow / 2 ? 0 : slowWaitingOnHeldHosts(at: moment)
        guard let wanted = backlog.rowsWanted(slowWaiting: slowWaiting, blocked: blocked, window: options.backlogWindow)
        else { return }
        do {
            // A window's rows at least: rows passed over do not count, and a few at a time would crawl past them.
            let limit = max(wanted, options.backlogWindow)
            let rows = try store.backlog(after: backlog.readsAfter, limit: limit)
            let now = wallClockMilliseconds()
            var taken = 0, passedOver = false
            defer {
                if taken < wanted {
                    backlog.read(rows.count, of: limit)
                    // Rows passed over start nothing that would bring another turn: the next read comes in the next one.
                    if passedOver, rows.count == limit { backlogTimer.schedule(at: 0) }
                }
            }
            for row in rows {
                guard taken < wanted else { break }
                guard let url = try? CanonicalURL(row.key) else {
                    backlog.passed(row.seq)
                    try store.dequeue(row.key)
                    continue
                }
                if held(url.authority), !scheduler.hasTask(url.key) {
                    backlog.passedOver(row.seq, host: url.authority)
                    passedOver = true
                    continue
                }
                backlog.passed(row.seq)
                taken += 1
                let (outcome, actions) = scheduler.queue(url, cache: cacheState(try store.liveEntry(url.key), now: now),
                                                         now: .now)
                try loadedFromQueue(row.key, outcome)
                apply(actions)
            }
        } catch {
            Log.error("cannot load the backlog: \(error)")
        }
    }

    /// A queued URL was offered to the scheduler as background work: a task holds it now, or the cache or a
    /// remembered failure answered it and its queue entry goes.
    func loadedFromQueue(_ key: String, _ outcome: QueueOutcome) throws(DatabaseError) {
        switch outcome {
        case .cached, .skipped: try store.dequeue(key)
        case .queued:
            backlog.hold(key)
            taskCreated(key)
        case .already:
            backlog.hold(key)
        }
    }

    /// Loads `url` from the durable queue ahead of the backlog's reads when the queue holds it and no task does, so
    /// that an urgent request for it (a get, a view's visible row) attaches to the queue's task, which outlives the
    /// request. The request's own task would have been the only one: a row's, scrolled far away before it ran, was
    /// forgotten with the acknowledged queue entry; a get's spent the URL's attempts as a get's. Returns the actions.
    func loadIfQueued(_ url: CanonicalURL, cache: CacheState, into scheduler: inout Scheduler, now: Moment) -> [Action] {
        // With nothing queued (the index counts its rows), an uncached get costs no lookup. A paused host's URL is
        // answered `host_paused` and stays in the queue only (140,000 gets of them held all in memory, 148 MB).
        guard store.backlogCount > 0, !scheduler.hasTask(url.key),
              scheduler.pauseFailure(of: url.authority, at: now) == nil else { return [] }
        do {
            guard try store.isQueued(url.key) else { return [] }
            let (outcome, actions) = scheduler.queue(url, cache: cache, now: now)
            try loadedFromQueue(url.key, outcome)
            return actions
        } catch {
            Log.error("cannot look \(url.key) up in the durable queue: \(error)")
            return []
        }
    }

    /// Background tasks waiting for a paused or passed-over host (`Scheduler.slowWaitingOnHeldHosts`), counted again at
    /// most every quarter of a second: the count looks at every task, and the backlog asks at the end of every turn.
    func slowWaitingOnHeldHosts(at moment: Moment) -> Int {
        let now = monotonicMilliseconds()
        if now >= blockedCount.until {
            blockedCount = (scheduler.slowWaitingOnHeldHosts(at: moment), now + 250)
        }
        return blockedCount.count
    }

    static func wireError(_ error: any Error) -> WireError {
        switch error {
        case CanonicalURL.ParseError.schemeNotAllowed:
            return WireError(.schemeNotAllowed, (error as! CanonicalURL.ParseError).message)
        case let error as CanonicalURL.ParseError:
            return WireError(.invalidURL, error.message)
        default:
            return WireError(.internal, "\(error)")
        }
    }
}

/// The id of a line that is JSON but not a request the daemon can read.
private struct LineID: Decodable {
    var id: RequestID?
}
