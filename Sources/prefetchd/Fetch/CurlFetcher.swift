import CCurl
import CSystem
import Glibc
import QueueCore

/// How a transfer ended, as the daemon needs it.
struct FetchResult {
    enum Body {
        /// A complete new body in `path`, checked against what the server announced; `file` is the file it was
        /// written into (what is at `path` by the time it is judged may be something else: the cache directory is
        /// anyone's with its rights).
        case downloaded(path: String, file: FileIdentity?, bytes: Int64)
        /// The server confirmed the cached copy (304).
        case notModified
    }

    let key: String
    /// The lane the transfer ended in.
    let lane: Lane
    let headers: ResponseHeaders
    let outcome: Result<Body, Failure>
    /// The failure is a refused resume (a 416, another version's rest, an encoded whole body): the server answers,
    /// and the same fetch starts over at once without a `Range`.
    var resumeRefused = false
}

/// All transfers, in two connection pools: urgent work in one, background work in the other, so urgent work never
/// shares a connection with background work that is held back. Holding the background lane stops reading its pool
/// (no rate limit, no pause: curl is simply not called), and a transfer promoted in place keeps its connection.
final class CurlFetcher {
    /// Stops a connection that keeps a call into curl busy (`CallWatchdog`).
    private let watchdog: CallWatchdog
    private let fastPool: ConnectionPool
    private let slowPool: ConnectionPool
    /// Asks again whether a host that curl could not resolve exists at all.
    private let hostLookup: HostLookup
    /// The thread that opens body files (`BodyFile`) and deletes those of transfers stopped while being opened, in
    /// the order asked (`Fetches.bodyFiles`).
    private let bodyFiles: WorkerPool
    private var settings: FetchSettings
    /// What new connections resume TLS sessions from; a reload starts a new set, so that a session made under
    /// other trust (`ca_file`, `ca_path`) is never resumed.
    private var tlsSessions = TLSSessions()
    private var transfers: [String: Transfer] = [:]
    /// Transfers whose body file is being opened, each with its job (which also tells a stopped one from a later
    /// start of the same key).
    private var opening: [String: (request: TransferRequest, job: BodyFileJob)] = [:]
    /// Whether background work is held back because urgent work runs (or ran less than 1.5 round trips ago).
    private var backgroundHeld = false
    /// Due when a hold for urgent work ends, 1.5 round trips after the last urgent transfer (`holdBackground`), so
    /// that urgent work coming at once (a client's next get) does not meet the window the background connections
    /// open on release.
    private var releaseTimer: LoopTimer!
    /// Due the urgent work's recency (`recency(afterInterval:)`) after a hold for urgent work ended, while no other
    /// began: background connections take their full window again (`PathWindows.setUrgentRecent`).
    private var calmTimer: LoopTimer!
    /// Whether the urgent work of the hold being released made background work urgent (`holdBackground`).
    private var backgroundAwaited = false
    /// How long after urgent work background connections keep a small window (ms), at least: a person's next get in
    /// a burst, the next screen of a scrolling list, usually comes within this.
    static let urgentRecency: Int64 = 3_000
    /// How long at most: after urgent work that began `interval` ms after the urgent work before it, the next is
    /// expected within twice that (a person looking at each picture of a gallery for a few seconds), up to this.
    static let longestRecency: Int64 = 20_000
    /// When the last hold for urgent work began (monotonic ms), and how long after the hold before it.
    private var urgentStartedAt: Int64?
    private var urgentInterval: Int64?
    /// Due `longestHold` after the background pool was held, while it is: its transfers let go of their connections.
    private var letGoTimer: LoopTimer!
    /// Background transfers that let go of their connections during a hold, to start again when it ends.
    private var letGo: [String: TransferRequest] = [:]
    /// How long background transfers stay on held connections. After that they let go (bytes kept) and resume with
    /// `Range` when the hold ends, before a server's send timeout (nginx: 60 s) turns the hold into a failed attempt.
    static let longestHold: Int64 = 15_000
    /// The longest a hold outlasts urgent work (ms).
    static let longestReleaseGrace: Int64 = 1_000
    /// Called on the loop thread for every transfer that ends (not for aborted or parked ones).
    var onFinish: (FetchResult) -> Void = { _ in }
    /// Called with the keys whose answers came on an HTTP/1 connection since found with bytes nobody asked for: any
    /// of them may be another URL's (`IdleConnections`). Their transfers ended; some of them may still be concluding.
    var onDistrust: ([String]) -> Void = { _ in }
    /// Called just before finished transfers' responses are interpreted, with their keys.
    var onConcluding: ([String]) -> Void = { _ in }
    /// How many finished transfers' responses may be interpreted now; the others wait for `concludeHeld()`.
    var concludable: () -> Int = { .max }
    /// Transfers that ended and whose responses are not interpreted yet.
    private var finished: [(Transfer, CURLcode)] = []
    /// Due once transfers ended: they are concluded together after the turn's events, so that the crash guard
    /// records a turn's worth in one commit.
    private var concludeTimer: LoopTimer!
    /// Due a second after a transfer ended, and again a second after the last end it did not see (steady traffic
    /// does not put it off): the idle connections are looked at for bytes nobody asked for.
    private var sweepTimer: LoopTimer!
    /// When the last transfer ended (monotonic ms).
    private var lastEnd: Int64 = 0
    /// Keys whose transfer ended and whose `onFinish` has not been called yet (concluded after the turn's events, held
    /// by the crash guard, or a failed lookup being asked again).
    private var ending: Set<String> = []
    /// The background pool's download rate in all (bytes per second) while a condition says `slow`; nil for none.
    /// Enforced like the hold: over budget, the pool is not read until the budget is paid back (no curl rate limit,
    /// whose waits are late and stall a whole HTTP/2 connection: docs/transport.md). Urgent work is never capped: a
    /// transfer promoted in place unholds the pool and its bytes are not counted; work demoted in place stays on its
    /// urgent connection, uncapped, until it ends.
    private var backgroundRateLimit: Int64?

    /// The settings a reload may change; they apply to transfers started from now on.
    func reconfigure(_ settings: FetchSettings) {
        self.settings = settings
        tlsSessions = TLSSessions()
    }

    /// How many connections each pool keeps open: 4 × its lane's width, the room curl itself gives a lane whose
    /// transfers are all attached (4 connections per transfer; `ConnectionPool.keepConnections`).
    func keepConnections(fastWidth: Int, slowWidth: Int) {
        fastPool.keepConnections(4 * fastWidth)
        slowPool.keepConnections(4 * slowWidth)
    }

    /// Caps the background pool's download rate, or lifts the cap (nil).
    func limitBackgroundRate(_ rate: Int64?) {
        guard rate != backgroundRateLimit else { return }
        backgroundRateLimit = rate
        rateBudget = Double(rateBurst)
        rateCheckedAt = monotonicMilliseconds()
        rateTimer.cancel()
        _ = backgroundBytes.take()
        for transfer in transfers.values where transfer.pool == .slow {
            transfer.acceptSlowSpeed(rate != nil, settings: settings)
        }
        updateHold()
    }

    /// Body bytes background transfers of the slow pool received since the budget was last charged.
    private let backgroundBytes = ByteCounter()
    /// The windows of the slow pool's connections, following their paths.
    private let pathWindows = PathWindows()
    /// Bytes the background pool may still receive now; below 0 it is held until `rateTimer` is due.
    private var rateBudget: Double = 0
    private var rateCheckedAt: Int64 = 0
    private var rateTimer: LoopTimer!
    private var rateHeld: Bool { rateTimer.due != nil }
    /// What the budget may save up while little arrives: a quarter second at the rate, at least 16 KiB.
    private var rateBurst: Int64 { max(16 << 10, (backgroundRateLimit ?? 0) / 4) }
    /// Called when a transfer's 2xx body starts, with the validator that would let it resume and the file's length.
    var onBodyStart: (_ key: String, _ validator: String?, _ length: Int64?) -> Void = { _, _, _ in }
    /// Called when a resumable body grew long enough for a durable record (`Transfer.onResumeWorthRecording`).
    var onResumeWorthRecording: (_ key: String) -> Void = { _ in }
    /// Called when background work on an HTTP/2 connection reaches its tail (`Transfer.onTail`), and when a
    /// background transfer ends (its body is then checked and moved into place elsewhere), after curl returned: the
    /// next background transfer may start so that the connection does not idle.
    var onTail: (_ key: String) -> Void = { _ in }
    /// Transfers that reached their tail inside curl's callbacks, reported when curl returns.
    private var tails: [Transfer] = []
    /// Called when a transfer's 2xx response begins (`onBodyStart`), after curl returned: a lingering task must then
    /// take a place in a lane or stop (`Scheduler.responseStarted`).
    var onResponseStart: (_ key: String) -> Void = { _ in }
    /// Transfers whose response began inside curl's callbacks, reported when curl returns.
    private var responding: [Transfer] = []

    init(loop: EventLoop, settings: FetchSettings, bodyFiles: WorkerPool) throws {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
        self.settings = settings
        hostLookup = try HostLookup(loop: loop)
        self.bodyFiles = bodyFiles
        // The scheduler bounds each lane (its width, `per_host`); the pools add no connection limit of their own, so
        // on HTTP/1.1 each running transfer has a connection, as with `curl -Z --parallel-max`.
        watchdog = try CallWatchdog()
        fastPool = ConnectionPool(loop: loop, watchdog: watchdog)
        slowPool = ConnectionPool(loop: loop, watchdog: watchdog)
        fastPool.afterAction = { [unowned self] in
            self.endStoppedConnections()
            self.collectFinished(from: self.fastPool)
            self.reportResponses()
        }
        slowPool.afterRead = { [unowned self] fd in self.pathWindows.read(fd) }
        slowPool.afterAction = { [unowned self] in
            self.endStoppedConnections()
            self.chargeBackgroundRate()
            let ended = self.collectFinished(from: self.slowPool)
            self.reportResponses()
            let reached = self.tails
            self.tails = []
            for transfer in reached where self.transfers[transfer.key] === transfer { self.onTail(transfer.key) }
            // A background body that came whole holds no connection any more: the next transfer may start while it
            // is checked, moved into place and indexed (on HTTP/1.1, the connection would idle meanwhile). A failure
            // is concluded first: it may pause its host.
            for (transfer, code) in ended where code == CURLE_OK && transfer.bodyStarted && transfer.lane == .slow {
                self.onTail(transfer.key)
            }
        }
        letGoTimer = loop.makeTimer { [unowned self] in self.letGoOfConnections { $0.lane == .slow && $0.pool == .slow } }
        releaseTimer = loop.makeTimer { [unowned self] in self.releaseBackground() }
        calmTimer = loop.makeTimer { [unowned self] in
            self.pathWindows.setUrgentRecent(false, live: self.slowPool.sockets)
        }
        concludeTimer = loop.makeTimer { [unowned self] in self.concludeHeld() }
        sweepTimer = loop.makeTimer { [unowned self] in
            for pool in [self.fastPool, self.slowPool] {
                pool.idleConnections.sweep()
                self.reportDistrusted(pool)
            }
            if self.lastEnd + 1000 > monotonicMilliseconds() { self.sweepTimer.schedule(at: self.lastEnd + 1000) }
        }
        rateTimer = loop.makeTimer { [unowned self] in
            // The debt is paid: charge what arrived meanwhile, which may hold the pool again.
            self.chargeBackgroundRate()
            if !self.rateHeld { self.updateHold() }
        }
    }

    deinit {
        letGo = [:]
        for key in Array(transfers.keys) { stop(key, keepingBody: true) }
    }

    /// Whether `key`'s transfer ended and its end is still on its way to `onFinish`.
    func isEnding(_ key: String) -> Bool { ending.contains(key) }

    /// The bytes a running transfer's body file holds (0 for one not running yet).
    func bytesReceived(_ key: String) -> Int64 { transfers[key]?.received ?? 0 }

    /// The keys whose transfer ended and whose end is still on its way to `onFinish`.
    var endingKeys: Set<String> { ending }

    /// Bytes received and expected for a running transfer.
    func progress(_ key: String) -> (received: Int64, expected: Int64?)? {
        transfers[key].map { ($0.received, $0.expectedBodyBytes) }
    }

    private func pool(_ lane: Lane) -> ConnectionPool { lane == .fast ? fastPool : slowPool }

    /// Starts a transfer once its body file is open (`opened`). A failure to start ends it through `onFinish`.
    func start(_ request: TransferRequest) {
        precondition(transfers[request.key] == nil && opening[request.key] == nil, "two transfers for \(request.key)")
        let job = BodyFileJob()
        opening[request.key] = (request, job)
        let path = request.bodyPath
        let resuming = request.resumeValidator != nil
        bodyFiles.run({ job.run { Result { () throws(SystemError) in try BodyFile.open(path, resuming: resuming) } } },
                      completion: { [unowned self] body in self.opened(request.key, job: job, body) })
    }

    /// A body file is open: its transfer joins the pool of its lane now, unless it was stopped meanwhile.
    private func opened(_ key: String, job: BodyFileJob, _ body: Result<BodyFile, SystemError>?) {
        // A job no longer in `opening` was cancelled, which closed any file it opened.
        guard let pending = opening[key], pending.job === job, let body else { return }
        opening[key] = nil
        do {
            let slow = pending.request.lane == .slow
            let transfer = try Transfer(pending.request, body: body.get(), settings: settings,
                                        backgroundBytes: slow ? backgroundBytes : nil, pathWindows: slow ? pathWindows : nil,
                                        idleConnections: pool(pending.request.lane).idleConnections,
                                        tlsSessions: tlsSessions)
            transfer.onBodyStart = { [unowned self] transfer, validator, length in
                self.onBodyStart(transfer.key, validator, length)
                self.responding.append(transfer)
            }
            transfer.onResumeWorthRecording = { [unowned self] transfer in self.onResumeWorthRecording(transfer.key) }
            transfer.onTail = { [unowned self] transfer in self.tails.append(transfer) }
            if transfer.pool == .slow, backgroundRateLimit != nil { transfer.acceptSlowSpeed(true, settings: settings) }
            let added = pool(transfer.pool).add(transfer.easy)
            guard added == CURLM_OK else {
                throw DaemonError("curl_multi_add_handle: \(String(cString: curl_multi_strerror(added)))")
            }
            transfers[key] = transfer
            // A background transfer joining a pool that urgent work holds, or keeps read for a promotion, lets go.
            updateHold()
        } catch {
            onFinish(FetchResult(key: key, lane: pending.request.lane, headers: ResponseHeaders(),
                                 outcome: .failure(.local("cannot start the transfer", error))))
        }
    }

    /// Stops a transfer; its partial body is deleted, or kept on disk to resume from when `keepingBody`.
    func stop(_ key: String, keepingBody: Bool) {
        if let request = letGo.removeValue(forKey: key) {
            if !keepingBody { unlink(request.bodyPath) }
            return
        }
        if let pending = opening.removeValue(forKey: key) {
            // A job that had not begun makes no file. Otherwise the file goes after it is made (the thread runs its
            // jobs in order), as does a kept one that was to be resumed.
            let begun = pending.job.cancel()
            let path = pending.request.bodyPath
            if !keepingBody && (begun || pending.request.resumeValidator != nil) {
                bodyFiles.run({ unlink(path) }, completion: { _ in })
            }
            return
        }
        guard let transfer = transfers.removeValue(forKey: key) else { return }
        transfer.narrowWindowAfterUrgentWork(stillOnConnection: true)
        pool(transfer.pool).remove(transfer.easy)
        if keepingBody { transfer.closeFile() } else { transfer.discardBody() }
        updateHold()
    }

    /// At shutdown: transfers that ended are not concluded any more. Their bodies stay for the next start, which
    /// resumes or deletes them like any other download.
    func stopConcluding() {
        concludeTimer.cancel()
        for (transfer, _) in finished { transfer.closeFile() }
        finished.removeAll()
    }

    /// Holds background work while urgent work runs. The hold ends one and a half of the background connections'
    /// round trips after the urgent work: released, they read what they held and open a full window at once, which
    /// the servers fill within about a round trip and no later hold can recall (docs/transport.md).
    /// `backgroundAwaited` (on release): the urgent work made background work urgent, so the background lane is what
    /// someone waits for next, and its connections keep their whole window (`releaseBackground`).
    func holdBackground(_ held: Bool, backgroundAwaited: Bool = false) {
        if held {
            let now = monotonicMilliseconds()
            urgentInterval = urgentStartedAt.map { now - $0 }
            urgentStartedAt = now
            releaseTimer.cancel()
            calmTimer.cancel()
            backgroundHeld = true
            return updateHold()
        }
        guard backgroundHeld else { return updateHold() }
        self.backgroundAwaited = backgroundAwaited
        let grace = min(Self.longestReleaseGrace, slowPool.longestRoundTrip() * 3 / 2)
        guard grace > 0 else { return releaseBackground() }
        releaseTimer.schedule(at: monotonicMilliseconds() + grace)
    }

    /// Ends a hold for urgent work. Background connections get their small window for the urgent work's recency,
    /// set before the loop reads what they held so that the window they reopen is the small one; unless the urgent
    /// work made background work urgent: slowing the background lane would then slow what someone waits for next (a
    /// scrolling view's look-ahead), so the windows are whole again.
    private func releaseBackground() {
        backgroundHeld = false
        let recency = Self.recency(afterInterval: urgentInterval)
        Log.debug(backgroundAwaited ? "background released, awaited: whole windows"
                                    : "background released: small windows for \(recency) ms")
        pathWindows.setUrgentRecent(!backgroundAwaited, live: slowPool.sockets)
        calmTimer.schedule(at: backgroundAwaited ? nil : monotonicMilliseconds() + recency)
        updateHold()
    }

    /// How long background connections keep a small window after urgent work that began `interval` ms after the
    /// urgent work before it (nil: none before): twice the interval, within `urgentRecency...longestRecency`; an
    /// interval over half the longest is no rhythm, and gets the shortest.
    static func recency(afterInterval interval: Int64?) -> Int64 {
        guard let interval, interval <= longestRecency / 2 else { return urgentRecency }
        return max(urgentRecency, 2 * interval)
    }

    /// A running transfer changed lane in place. It stays on its connection; promoted, it gets a wide window there.
    func changeLane(_ key: String, to lane: Lane) {
        if opening[key] != nil { return opening[key]!.request.lane = lane }
        if var request = letGo[key] {
            guard lane == .fast else { return }
            letGo[key] = nil
            request.lane = .fast
            return start(request)
        }
        guard let transfer = transfers[key] else { return }
        transfer.move(to: lane)
        updateHold()
    }

    /// The background pool is held while urgent work runs or its rate budget is in debt, unless a transfer promoted in
    /// place still runs on it. Held for urgent work, background transfers still connecting let go of their
    /// connections at once: curl's connect timeout would run on while they are held; and while a promoted transfer
    /// keeps the pool read, every background transfer on it lets go, since it could not be held (on HTTP/2 it would
    /// share the promoted one's connection). Transfers that let go start again once urgent work no longer holds the
    /// pool. (Work demoted in place stays on its urgent connection, unheld: see docs/transport.md.)
    private func updateHold() {
        let urgentOnBackgroundConnection = transfers.values.contains { $0.pool == .slow && $0.lane == .fast }
        let held = (backgroundHeld || rateHeld) && !urgentOnBackgroundConnection
        if held != slowPool.isHeld {
            letGoTimer.schedule(at: held ? monotonicMilliseconds() + Self.longestHold : nil)
            pathWindows.holdChanged()
        }
        slowPool.hold(held)
        if backgroundHeld {
            letGoOfConnections { $0.lane == .slow && $0.pool == .slow && ($0.isConnecting || !held) }
        } else if !held {
            let restarts = letGo.values
            letGo = [:]
            for request in restarts { start(request) }
        }
    }

    /// Held background transfers that match stop, keeping what a resume can continue from, until the hold ends.
    private func letGoOfConnections(where matches: (Transfer) -> Bool) {
        for transfer in transfers.values where matches(transfer) {
            let request = transfer.continuation
            transfers[transfer.key] = nil
            pool(transfer.pool).remove(transfer.easy)
            if request.resumeValidator != nil { transfer.closeFile() } else { transfer.discardBody() }
            letGo[transfer.key] = request
            Log.debug("\(transfer.key) lets go of its connection until urgent work ends")
        }
    }

    /// Charges what background transfers received to the rate budget (refilled at the rate since the last charge);
    /// over budget, the pool is held until the debt is paid. What arrives while held is charged when the hold ends.
    private func chargeBackgroundRate() {
        guard let rate = backgroundRateLimit else {
            _ = backgroundBytes.take()
            return
        }
        guard !rateHeld else { return }
        let now = monotonicMilliseconds()
        let refilled = rateBudget + Double(now - rateCheckedAt) * Double(rate) / 1000
        rateBudget = min(Double(rateBurst), refilled) - Double(backgroundBytes.take())
        rateCheckedAt = now
        guard rateBudget < 0 else { return }
        rateTimer.schedule(at: now + Int64((-rateBudget * 1000 / Double(rate)).rounded(.up)))
        updateHold()
    }

    /// Takes the transfers that ended from curl, to be concluded in the next turn (`concludeHeld`); returns them.
    @discardableResult
    private func collectFinished(from pool: ConnectionPool) -> [(Transfer, CURLcode)] {
        var pending: Int32 = 0
        var collected: [(Transfer, CURLcode)] = []
        var ended = false
        while let message = curl_multi_info_read(pool.multi, &pending) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            var pointer: UnsafeMutableRawPointer?
            pf_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &pointer)
            let transfer = Unmanaged<Transfer>.fromOpaque(pointer!).takeUnretainedValue()
            // The body's last bytes are written now: a full disk then fails the transfer as a write in curl would.
            var code = message.pointee.data.result
            if code == CURLE_OK, !transfer.writeBody() { code = CURLE_WRITE_ERROR }
            transfer.narrowWindowAfterUrgentWork(stillOnConnection: false)
            transfers.removeValue(forKey: transfer.key)
            pool.idleConnections.transferEnded(easy, key: transfer.key)
            pool.remove(easy)
            // A lookup that failed at once is asked again (NXDOMAIN?). One that took a second or more met a resolver
            // that did not answer (glibc's shortest timeout is 1 s): transient, as curl reported it.
            let unresolvedAtOnce = code == CURLE_COULDNT_RESOLVE_HOST && transfer.stopReason == nil
                && monotonicMilliseconds() - transfer.startedAt < 1000
            ending.insert(transfer.key)
            if !(unresolvedAtOnce && askResolverAgain(transfer)) {
                finished.append((transfer, code))
                collected.append((transfer, code))
            }
            ended = true
        }
        if ended {
            updateHold()
            lastEnd = monotonicMilliseconds()
            if sweepTimer.due == nil { sweepTimer.schedule(at: lastEnd + 1000) }
        }
        if !finished.isEmpty { concludeTimer.schedule(at: 0) }
        reportDistrusted(pool)
        return collected
    }

    /// The connections the watchdog stopped end, and the transfers on them fail saying why: curl finds each closed
    /// when it next reads it.
    private func endStoppedConnections() {
        for socket in watchdog.takeStopped() {
            shutdown(socket, Int32(SHUT_RDWR))
            let stopped = transfers.values.filter { $0.socket == socket }
            let server = stopped.first?.effectiveHost.map { "\($0) " } ?? ""
            let failure = Failure(code: .network, message: "the server \(server)kept the daemon busy reading its "
                                  + "connection for over \(CallWatchdog.longestCall) ms of CPU without a break (a flood of "
                                  + "frames with nothing in them?): the connection was ended", isTransient: true)
            for transfer in stopped { transfer.connectionEnded(failure) }
            Log.warning(failure.message + " (\(stopped.count) transfers on it)")
        }
    }

    private func reportDistrusted(_ pool: ConnectionPool) {
        let distrusted = pool.idleConnections.takeDistrusted()
        if !distrusted.isEmpty { onDistrust(distrusted) }
    }

    /// Reports the responses that began in curl's last callbacks, of transfers that still run.
    private func reportResponses() {
        guard !responding.isEmpty else { return }
        let began = responding
        responding = []
        for transfer in began where transfers[transfer.key] === transfer { onResponseStart(transfer.key) }
    }

    /// Interprets the finished transfers' responses, in order, as many at a time as `concludable` allows.
    func concludeHeld() {
        while !finished.isEmpty {
            let count = min(finished.count, concludable())
            guard count > 0 else { return }
            let batch = finished.prefix(count)
            finished.removeFirst(count)
            onConcluding(batch.map { $0.0.key })
            for (transfer, code) in batch {
                ending.remove(transfer.key)
                onFinish(conclude(transfer, code: code))
            }
        }
    }

    /// A host curl could not resolve at once: `unknown_host` when the name does not exist (no retry helps), else
    /// `network` (the resolver failed; retried). False when the lookup thread is saturated: the failure is then
    /// concluded as curl reported it.
    private func askResolverAgain(_ transfer: Transfer) -> Bool {
        guard let host = transfer.effectiveHost else { return false }
        let failure = Failure(code: .network, message: transfer.errorDetail ?? "Could not resolve host: \(host)",
                              isTransient: true, unreached: true)
        let asked = hostLookup.check(host) { [unowned self] answer in
            let outcome: Failure
            switch answer {
            case .noSuchName(let reason):
                outcome = Failure(code: .unknownHost, message: "could not resolve host \(host): \(reason)",
                                  isTransient: false)
            case .transient:
                outcome = failure
            }
            ending.remove(transfer.key)
            onFinish(FetchResult(key: transfer.key, lane: transfer.lane, headers: transfer.headers,
                                 outcome: .failure(outcome)))
        }
        if asked { transfer.closeFile() }
        return asked
    }

    private func conclude(_ transfer: Transfer, code: CURLcode) -> FetchResult {
        let status = transfer.responseCode
        let headers = transfer.headers
        func failed(_ failure: Failure) -> FetchResult {
            transfer.closeFile()
            return FetchResult(key: transfer.key, lane: transfer.lane, headers: headers, outcome: .failure(failure),
                               resumeRefused: transfer.resumeRefused || status == 416)
        }
        if code != CURLE_OK, !transfer.errorPageCut {
            return failed(CurlErrors.failure(code, transfer: transfer))
        }
        guard headers.sectionEnded else {
            // curl 7.88 takes a connection closed inside the header section for the response's end, with no body:
            // a server that went down mid-response, not an empty image.
            return failed(Failure(code: .network, message: "the connection ended inside the response's headers",
                                  isTransient: true))
        }
        if status == 304 && transfer.conditional {
            transfer.discardBody()
            return FetchResult(key: transfer.key, lane: transfer.lane, headers: headers, outcome: .success(.notModified))
        }
        if status == 416 {
            transfer.discardBody()
            return failed(Failure(code: .httpStatus, message: "the server refused to resume (HTTP 416); starting over",
                                  isTransient: true, httpStatus: 416))
        }
        guard (200...299).contains(status) else {
            let retryAfter = headers.retryAfterMilliseconds(now: wallClockMilliseconds())
            return failed(Failure.httpStatus(status, retryAfter: retryAfter))
        }
        if let incomplete = transfer.incompleteBody() {
            return failed(incomplete)
        }
        let file = transfer.bodyFile
        transfer.closeFile()
        return FetchResult(key: transfer.key, lane: transfer.lane, headers: headers,
                           outcome: .success(.downloaded(path: transfer.bodyPath, file: file, bytes: transfer.received)))
    }
}
