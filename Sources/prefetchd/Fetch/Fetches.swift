import Glibc
import QueueCore

/// How a fetch ended, once its body is inspected, installed and indexed (or why not).
enum FetchEnd {
    /// A new body, in the cache and the index as `entry`; `detail` describes the image for the log (", jpeg 800x600").
    case fetched(IndexEntry, detail: String)
    /// The server confirmed the cached copy (304); its freshness is renewed.
    case revalidated
    case failed(Failure)

    /// What the scheduler is told.
    var outcome: FetchOutcome {
        if case .failed(let failure) = self { return .failure(failure) }
        return .success
    }
}

/// The fetch side, shaped like QueueCore: it carries out the scheduler's transfer actions (start, change lane, park,
/// abort, hold the background) and reports each fetch's end once, through `onEnd`, after the body was inspected on a
/// worker, installed under `files/` and indexed. It keeps the records a resume needs (partial downloads) and runs
/// the risky part of handling a response under the crash guard.
final class Fetches {
    private let store: Store
    private let fetcher: CurlFetcher
    /// The threads that judge finished bodies and move them into place, one job each: their own, so that no
    /// variant being decoded (seconds, for a large AVIF) holds up the end of a fetch.
    private let checks: WorkerPool
    /// One thread that makes and deletes the body files of transfers under `tmp/` (`BodyFile`), in the order asked.
    /// Making an inode can take a millisecond (on a busy ext4): the loop thread does not wait for it.
    private let bodyFiles: WorkerPool
    private let crashGuard: CrashGuard
    /// Keys whose response is being handled under the crash guard: only those end a guarded step. (A failure that
    /// interpreted no response, such as an unresolved name, never began one; a variant of the same key may run.)
    private var guarded: Set<String> = []
    /// Keys whose body is being inspected and moved into place: their end is on its way to `onEnd`.
    private var ending: Set<String> = []
    /// Keys whose ending transfer's answer may be another URL's (`CurlFetcher.onDistrust`): that end is a failure.
    private var distrusted: Set<String> = []
    /// What the scheduler did with a key while its transfer was ending in curl (found nothing to stop or start): a
    /// fetch that starts over from its end (`startAgain`) follows the last of these, not the lane it ended in.
    private enum Meanwhile { case stopped, started(Lane) }
    private var meanwhile: [String: Meanwhile] = [:]
    /// Keys fetched on a connection of their own (`TransferRequest.ownConnection`) until their fetch ends, but for a
    /// retry: their last answer was evicted as untrusted (`fetchAlone`).
    private var alone: Set<String> = []
    /// The SHA-256 of each key's last body that ended inside its image with nothing to tell a cut from the end
    /// (`Failure.endedInsideImage`): the same bytes again are the server's file, not a cut. At most `cutBodiesKept`.
    private var cutBodies: [String: String] = [:]
    private static let cutBodiesKept = 1024
    /// What the image checks allow, and the freshness of a response that says nothing.
    private var images: ImagePolicy
    private var defaultTTL: Int64
    /// The bytes parked downloads keep on disk to resume from, per key, and at most how many in all (a quarter of
    /// `max_cache_bytes`): a park beyond drops its bytes. Every slow server can have a download parked after its
    /// slice, and these bytes are not the cache's files, which eviction bounds.
    private var parkedBytes: [String: Int64] = [:]
    private var parkedBytesTotal: Int64 = 0
    private var parkedBytesBudget: Int64
    /// Called on the loop thread for every fetch that ends, also for one that could not start, with the lane its
    /// transfer ended in (a task cancelled while its body was checked has no lane in the scheduler any more).
    var onEnd: (_ key: String, _ lane: Lane, _ end: FetchEnd) -> Void = { _, _, _ in }
    /// Called with cached keys whose answers may be other URLs' (`CurlFetcher.onDistrust`), to be evicted.
    var onDistrust: (_ keys: Set<String>) -> Void = { _ in }
    /// Called when a transfer's response begins (`CurlFetcher.onResponseStart`).
    var onResponseStart: (_ key: String) -> Void {
        get { fetcher.onResponseStart }
        set { fetcher.onResponseStart = newValue }
    }
    /// Called when a background fetch reaches its tail (`CurlFetcher.onTail`).
    var onTail: (_ key: String) -> Void {
        get { fetcher.onTail }
        set { fetcher.onTail = newValue }
    }

    init(loop: EventLoop, store: Store, crashGuard: CrashGuard, options: Options) throws {
        self.store = store
        checks = try WorkerPool(threads: options.workerThreads, name: "pf-check", loop: loop)
        bodyFiles = try WorkerPool(threads: 1, name: "pf-bodyfiles", loop: loop)
        fetcher = try CurlFetcher(loop: loop, settings: options.fetch, bodyFiles: bodyFiles)
        fetcher.keepConnections(fastWidth: options.fastWidth, slowWidth: options.slowWidth)
        self.crashGuard = crashGuard
        images = options.images
        defaultTTL = options.defaultTTL
        parkedBytesBudget = options.maxCacheBytes / 4
        keepStoppedBodiesWithinBudget()
        fetcher.onFinish = { [unowned self] result in self.finished(result) }
        fetcher.onDistrust = { [unowned self] keys in self.distrust(keys) }
        fetcher.onBodyStart = { [unowned self] key, validator, length in
            self.bodyStarted(key, validator: validator, length: length)
        }
        fetcher.onResumeWorthRecording = { [unowned self] key in self.recordPartial(key) }
        fetcher.onConcluding = { [unowned self] keys in
            self.guarded.formUnion(keys)
            self.crashGuard.begin(keys)
        }
        fetcher.concludable = { [unowned self] in self.crashGuard.room }
        crashGuard.onFree = { [unowned self] in self.fetcher.concludeHeld() }
    }

    // MARK: The scheduler's actions

    /// `.start`: a conditional request when revalidating a copy with validators, else a download that resumes what
    /// a partial body on disk holds. `retry` opens a connection of its own (the last one may be dead). A key whose
    /// last transfer ended and whose end has not been reported yet (a park or a lane change meanwhile found nothing
    /// to stop) does not start again: that end is on its way, and the scheduler takes it as this start's. A second
    /// transfer would write into the body file the first one's is being moved out of.
    func start(_ key: String, lane: Lane, revalidate: Bool, retry: Bool) {
        unpark(key)
        guard !isEnding(key) else {
            if fetcher.isEnding(key) { meanwhile[key] = .started(lane) }
            return Log.debug("\(key) is ending: not started again")
        }
        var request = TransferRequest(key: key, lane: lane,
                                      bodyPath: store.files.downloadPath(forName: CacheFiles.name(forKey: key)))
        request.freshConnection = retry
        request.ownConnection = alone.contains(key)
        do {
            if revalidate, let entry = try store.liveEntry(key), entry.etag != nil || entry.lastModified != nil {
                request.conditional = (entry.etag, entry.lastModified)
            } else {
                request.resumeValidator = store.partialValidator(key)
                request.resumeLength = store.partialLength(key)
            }
            fetcher.start(request)
            Log.debug("start \(lane) \(key)")
        } catch {
            onEnd(key, lane, .failed(.local("cannot start the transfer", error)))
        }
    }

    func changeLane(_ key: String, to lane: Lane) {
        if fetcher.isEnding(key) { meanwhile[key] = .started(lane) }
        fetcher.changeLane(key, to: lane)
    }

    /// `.park`: the transfer stops, and its partial body stays on disk, recorded, only when there is a validator to
    /// resume it with (without one the next start begins at byte 0 anyway) and it fits in `parkedBytesBudget`.
    /// Returns whether it did.
    @discardableResult
    func park(_ key: String) -> Bool {
        let bytes = fetcher.bytesReceived(key), resumable = store.partialValidator(key) != nil
        let keep = resumable && countParked(key, bytes: bytes)
        if keep {
            recordPartial(key)
        } else if resumable {
            Log.debug("\(key) parked without its \(bytes) bytes: parked downloads keep \(parkedBytesTotal) already")
            do { try store.removePartial(key, deletingBody: false) } catch {
                Log.error("cannot forget the download of \(key): \(error)")
            }
        }
        if fetcher.isEnding(key) { meanwhile[key] = .stopped }
        fetcher.stop(key, keepingBody: keep)
        return keep
    }

    func abort(_ key: String) {
        if fetcher.isEnding(key) { meanwhile[key] = .stopped }
        fetcher.stop(key, keepingBody: false)
    }

    /// `.forget`: the task is over; a body kept to resume it goes with its record. (Without a record no body is
    /// left: a transfer that ends or stops without one deletes its body, and a finished one was moved into place.)
    func forget(_ key: String) throws(DatabaseError) {
        alone.remove(key)
        unpark(key)
        guard store.partialValidator(key) != nil else { return }
        // A body whose transfer ended belongs to its end, which checks it and moves it into place or deletes it.
        try store.removePartial(key, deletingBody: !isEnding(key))
    }

    /// The scheduler's `promotions` when the last hold was released.
    private var promotionsAtRelease: UInt64 = 0

    /// `.holdBackground`. `promotions` is the scheduler's count: when the urgent work since the last release made
    /// background work urgent, the background lane is what someone waits for, and the release keeps its windows whole.
    func holdBackground(_ held: Bool, promotions: UInt64) {
        guard !held else { return fetcher.holdBackground(true) }
        let promoted = promotions != promotionsAtRelease
        promotionsAtRelease = promotions
        fetcher.holdBackground(false, backgroundAwaited: promoted)
    }

    /// At shutdown: stops the running transfers, keeping only the partial bodies a restart resumes (`resumable`:
    /// a recorded validator and the URL in the durable backlog); the others are deleted with their records, parked
    /// ones included, so no other temporary file is left behind. A body whose transfer ended but was not concluded
    /// yet is whole: resumed, it would ask for bytes past its end (a 416), so it goes too.
    func stopForShutdown(_ tasks: [(key: String, running: Bool)], resumable: (String) -> Bool) {
        // Nothing begins a risky step after the crash guard's records are closed (`CrashGuard`).
        fetcher.stopConcluding()
        for task in tasks {
            let keep = !fetcher.isEnding(task.key) && store.partialValidator(task.key) != nil && resumable(task.key)
            if task.running { fetcher.stop(task.key, keepingBody: keep) }
            if keep { recordPartial(task.key) } else { forgetPartial(task.key) }
        }
        // Body files being made or deleted: none is left half done. (A body an image worker is moving into place may
        // land in files/ without its index row; the next start's recovery deletes it.)
        bodyFiles.waitForJobs()
    }

    /// The keys whose transfer ended and whose end is on its way to `onEnd` (the body is being checked and moved
    /// into place): their tasks still run, but hold no connection.
    var endingKeys: Set<String> { ending.union(fetcher.endingKeys) }

    /// Whether `key`'s transfer ended and its end is on its way (one of `endingKeys`), without building the set.
    func isEnding(_ key: String) -> Bool { ending.contains(key) || fetcher.isEnding(key) }

    /// Bytes received and expected for a running transfer.
    func progress(_ key: String) -> (received: Int64, expected: Int64?)? { fetcher.progress(key) }

    /// The settings a reload may change.
    func reconfigure(_ options: Options) {
        fetcher.reconfigure(options.fetch)
        fetcher.keepConnections(fastWidth: options.fastWidth, slowWidth: options.slowWidth)
        images = options.images
        defaultTTL = options.defaultTTL
        parkedBytesBudget = options.maxCacheBytes / 4
    }

    /// The background pool's download rate in all while a condition says slow; nil for none.
    func limitBackgroundRate(_ rate: Int64?) { fetcher.limitBackgroundRate(rate) }

    // MARK: Transfers that end

    /// A body started arriving: note how to resume it should the transfer stop before the end. The note becomes a
    /// record once the body is worth resuming after a crash, or when the transfer stops keeping it.
    private func bodyStarted(_ key: String, validator: String?, length: Int64?) {
        do {
            if let validator {
                try store.notePartial(key, validator: validator, length: length)
            } else {
                try store.removePartial(key, deletingBody: false)
            }
        } catch {
            Log.error("cannot record the download of \(key): \(error)")
        }
    }

    /// At a start, the bodies the last stop kept to resume count as parked ones until they start again or go; past
    /// the budget, the largest are dropped (those downloads start over).
    private func keepStoppedBodiesWithinBudget() {
        var dropped = 0, droppedBytes: Int64 = 0
        for (key, bytes) in store.recordedPartialBodies().sorted(by: { ($0.bytes, $0.key) < ($1.bytes, $1.key) }) {
            if !countParked(key, bytes: bytes) {
                forgetPartial(key)
                dropped += 1
                droppedBytes += bytes
            }
        }
        guard dropped > 0 else { return }
        Log.info("dropped \(dropped) partial downloads kept at the last stop (\(droppedBytes / 1024) KiB): the bytes parked "
                 + "downloads keep stay within a quarter of max_cache_bytes (\(parkedBytesBudget / 1024) KiB); they start over")
    }

    /// A parked download starts again, or goes: its bytes are no longer counted as kept by a park.
    private func unpark(_ key: String) {
        guard let bytes = parkedBytes.removeValue(forKey: key) else { return }
        parkedBytesTotal -= bytes
    }

    /// Keeps the body of a transfer that failed and will be tried again, for its retry to resume from, when it fits in
    /// `parkedBytesBudget` with the parked ones: it counts as parked until it starts again or goes. Else it goes, and
    /// the retry starts over. (The bodies of downloads cut short, waiting for their retries, filled 28 MB of a 1 MB
    /// cache.)
    private func keepForRetry(_ key: String) {
        let bytes = store.partialBodyBytes(key) ?? 0
        unpark(key)
        guard countParked(key, bytes: bytes) else {
            Log.debug("\(key) waits for its retry without its \(bytes) bytes: parked downloads keep \(parkedBytesTotal) already")
            return forgetPartial(key)
        }
        recordPartial(key)
    }

    /// Counts `bytes` of `key`'s body as kept by a park, when they fit in `parkedBytesBudget` with the others'.
    /// Returns whether they did.
    private func countParked(_ key: String, bytes: Int64) -> Bool {
        guard parkedBytesTotal.saturatingAdd(bytes) <= parkedBytesBudget else { return false }
        parkedBytes[key] = bytes
        parkedBytesTotal += bytes
        return true
    }

    private func recordPartial(_ key: String) {
        do { try store.recordPartial(key) } catch { Log.error("cannot record the download of \(key): \(error)") }
    }

    private func forgetPartial(_ key: String) {
        do { try store.removePartial(key) } catch { Log.error("cannot forget the download of \(key): \(error)") }
    }

    /// Answers that may be other URLs': an end on its way fails (and the fetch goes again), a cached copy goes.
    private func distrust(_ keys: [String]) {
        var cached: Set<String> = []
        for key in keys {
            if isEnding(key) { distrusted.insert(key) } else { cached.insert(key) }
        }
        if !cached.isEmpty { onDistrust(cached) }
    }

    /// Why a body whose file was replaced behind the daemon's back is not kept.
    static let replacedBody = Failure(code: .internal, message: "the downloaded body's file in tmp/ was deleted or "
                                      + "replaced behind the daemon's back before it was moved into place: not kept",
                                      isTransient: true)

    /// Why a distrusted answer is not kept.
    static let shiftedAnswer = Failure(code: .network, message: "the server sent a response nobody asked for on the "
                                       + "connection this answer came on, so it may be another URL's",
                                       isTransient: true)

    /// The same fetch starts again at once, without `Range` or a condition (a refused resume, a `304` that cannot
    /// be taken), costing no attempt: in the lane the scheduler has it in now. Not when the scheduler stopped it
    /// (a park, a cancel) while it was ending: it starts it again itself, if ever, and a second transfer would trap.
    private func startAgain(_ key: String, lane: Lane, _ meanwhile: Meanwhile?) {
        switch meanwhile {
        case .stopped?: Log.debug("\(key) was stopped while it ended: not started again")
        case .started(let lane)?: start(key, lane: lane, revalidate: false, retry: false)
        case nil: start(key, lane: lane, revalidate: false, retry: false)
        }
    }

    /// `keys`, whose answers were evicted as untrusted, are fetched next on connections of their own: another stray
    /// of the same server could shift their answers again.
    func fetchAlone(_ keys: some Sequence<String>) { alone.formUnion(keys) }

    private func finished(_ result: FetchResult) {
        let key = result.key
        let meanwhile = self.meanwhile.removeValue(forKey: key)
        switch result.outcome {
        case .success(.downloaded): alone.remove(key)
        case .failure(let failure) where !failure.isTransient: alone.remove(key)
        default: break  // a retry, or a fetch started again from its end, keeps a connection of its own
        }
        if distrusted.remove(key) != nil, case .success = result.outcome {
            forgetPartial(key)  // and the body with it
            endGuardedStep(key)
            alone.insert(key)  // its retry: the same server's next stray could shift it again
            return onEnd(key, result.lane, .failed(Self.shiftedAnswer))
        }
        switch result.outcome {
        case .failure(let failure):
            endGuardedStep(key)
            // A refused resume (a 416: the kept body may even be whole, kept by a crash before its end was recorded;
            // the rest of another version; the whole body encoded) starts over at once, as the same fetch, and costs
            // no attempt: the server answered. Its record goes first, so the new request carries no `Range` and
            // cannot be refused so again.
            if result.resumeRefused, store.partialValidator(key) != nil {
                forgetPartial(key)
                Log.info("\(key): \(failure.message)")
                return startAgain(key, lane: result.lane, meanwhile)
            }
            // A transient failure keeps what a resume can continue from, but on a full disk, which it would keep full.
            let resumable = failure.isTransient && failure.code != .diskFull && store.partialValidator(key) != nil
            if resumable { keepForRetry(key) } else { forgetPartial(key) }
            onEnd(key, result.lane, .failed(failure))
        case .success(.notModified):
            // The 304 confirms a file that went away meanwhile (deleted, or cut short; the look-up drops its
            // entry): the same fetch asks again unconditionally, in the same lane, and costs no attempt.
            guard let stored = try? store.liveEntry(key) else {
                endGuardedStep(key)
                Log.info("\(key): the cached file went away while it was revalidated; fetching it again in full")
                return startAgain(key, lane: result.lane, meanwhile)
            }
            let now = wallClockMilliseconds(), headers = result.headers
            // A 304 naming another version than the one kept updates nothing (RFC 9111 section 4.3.4): the same
            // fetch asks again unconditionally.
            if let other = Self.otherVersion(confirmedBy: headers, kept: stored) {
                endGuardedStep(key)
                Log.info("\(key): the server confirmed \(other); fetching it again in full")
                return startAgain(key, lane: result.lane, meanwhile)
            }
            // RFC 9111 section 4.3.4: the 304's fields replace the stored ones, and those it lacks are kept. One
            // without Cache-Control keeps the stored lifetime and must-revalidate (the stored max-age, if any, would
            // still win over an Expires it brings; the stored headers themselves are not kept).
            let replacesFreshness = !headers.cacheDirectives.isEmpty
            let freshUntil = replacesFreshness ? headers.freshUntil(now: now, defaultTTL: defaultTTL)
                : now.saturatingAdd(max(0, stored.freshUntil.saturatingSubtract(stored.fetchedAt)))
            do {
                try store.refresh(key, freshUntil: freshUntil, etag: headers.etag, lastModified: headers.lastModified,
                                  mustRevalidate: replacesFreshness ? headers.mustRevalidate : stored.mustRevalidate,
                                  now: now)
            } catch {
                Log.error("cannot refresh \(key): \(error)")
            }
            endGuardedStep(key)
            onEnd(key, result.lane, .revalidated)
        case .success(.downloaded(let temporary, let file, let bytes)):
            do { try store.removePartial(key, deletingBody: false) } catch { Log.error("\(error)") }
            ending.insert(key)
            let (files, policy) = (store.files, images)
            let (endUnsure, lastCut) = (result.headers.endUnsure, cutBodies.removeValue(forKey: key))
            checks.run({ Self.judge(temporary, file: file, bytes: bytes, key: key, files: files, policy: policy,
                                    endUnsure: endUnsure, lastCut: lastCut) },
                        completion: { [unowned self] judged in
                self.ending.remove(key)
                self.endGuardedStep(key)
                if self.distrusted.remove(key) != nil {
                    // The file is named by the body: a cached copy of the same bytes has it too.
                    if case .success(let body) = judged.outcome, (try? self.store.entry(key))??.file != body.relative {
                        self.store.files.remove(body.relative)
                    }
                    self.alone.insert(key)
                    return self.onEnd(key, result.lane, .failed(Self.shiftedAnswer))
                }
                switch judged.outcome {
                case .success(let body):
                    self.installed(result, body, bytes: bytes)
                case .failure(let failure):
                    if failure.endedInsideImage, let sha256 = judged.sha256 { self.rememberCut(key, sha256: sha256) }
                    self.onEnd(key, result.lane, .failed(failure))
                }
            })
        }
    }

    /// On a worker, in one job: the body is hashed and judged, then moved into place under `files/` if it passed, or
    /// deleted. Where it went, the space it takes and what it is, if an image, come back to be indexed. Only the file
    /// the body was written into (`file`) is judged and kept: one put at its path meanwhile (another file, a link, a
    /// FIFO) is not. It is opened once for all of this. A body that ended inside its image where a cut cannot be told
    /// from the end (`endUnsure`) is the server's file when it has the bytes of the last such body (`lastCut`).
    private static func judge(_ temporary: String, file: FileIdentity?, bytes: Int64, key: String, files: CacheFiles,
                              policy: ImagePolicy, endUnsure: Bool, lastCut: String?) -> Judgement {
        let body: ImageFile
        do throws(SystemError) {
            body = try ImageFile(temporary)
        } catch {
            // Gone, or something other than a regular file in its place (a link, a FIFO, a directory).
            let replaced = [ENOENT, ELOOP, EINVAL, ENOTDIR, ENXIO].contains(error.errno)
            if replaced { deleteEntry(temporary) } else { unlink(temporary) }
            return Judgement(sha256: nil, outcome: .failure(replaced ? replacedBody : .local("cannot open the body", error)))
        }
        guard let file, body.identity == file else {
            deleteEntry(temporary)
            return Judgement(sha256: nil, outcome: .failure(replacedBody))
        }
        guard body.size == bytes else {
            unlink(temporary)
            return Judgement(sha256: nil, outcome: .failure(Failure(
                code: .internal, message: "the downloaded body's file in tmp/ has \(body.size) bytes, not the \(bytes) "
                + "received: it was changed behind the daemon's back before it was moved into place; not kept",
                isTransient: true)))
        }
        do throws(SystemError) {
            // Hashed first only when the verdict depends on it: bytes the last cut body had too.
            let early = endUnsure ? try body.sha256() : nil
            let info: ImageInfo?
            switch ImageInspector.inspect(body, policy: policy, endKnown: !endUnsure || lastCut == early) {
            case .image(let image): info = image
            case .nonImage: info = nil
            case .rejected(let failure):
                unlink(temporary)
                return Judgement(sha256: early, outcome: .failure(failure))
            }
            let sha256: String
            if let early { sha256 = early } else { sha256 = try body.sha256() }
            return install(temporary, file: file, sha256: sha256, allocated: body.allocated, info: info, key: key,
                           files: files)
        } catch {
            unlink(temporary)
            return Judgement(sha256: nil, outcome: .failure(.local("cannot read the body", error)))
        }
    }

    /// The judged body goes into place under `files/`, named by its key and its bytes.
    /// Which other version a 304 confirms than the one `kept`, if it names one: an ETag that does not match the kept
    /// one even by weak comparison (`W/"a"` matches `"a"`), or, without an ETag, a Last-Modified other than the kept
    /// one. A 304 without either, or naming what the entry does not keep, confirms the entry.
    static func otherVersion(confirmedBy headers: ResponseHeaders, kept: IndexEntry) -> String? {
        let opaque = { (tag: String) in tag.hasPrefix("W/") ? tag.dropFirst(2) : Substring(tag) }
        if let etag = headers.etag {
            guard let keptTag = kept.etag, opaque(etag) != opaque(keptTag) else { return nil }
            return "ETag \(etag.prefix(60)), not the \(keptTag.prefix(60)) kept"
        }
        guard let modified = headers.lastModified, let keptDate = kept.lastModified else { return nil }
        if let confirmed = ResponseHeaders.parseDate(modified), let stored = ResponseHeaders.parseDate(keptDate) {
            if confirmed == stored { return nil }
        } else if modified == keptDate {
            return nil
        }
        return "Last-Modified \(modified.prefix(40)), not the \(keptDate.prefix(40)) kept"
    }

    private static func install(_ temporary: String, file: FileIdentity, sha256: String, allocated: Int64,
                                info: ImageInfo?, key: String, files: CacheFiles) -> Judgement {
        let relative = CacheFiles.relativePath(forName: CacheFiles.name(forKey: key, body: sha256))
        do {
            try files.install(temporary: temporary, as: relative)
            guard file.isEntry(files.absolute(relative)) else {
                files.remove(relative)
                return Judgement(sha256: sha256, outcome: .failure(replacedBody))
            }
            return Judgement(sha256: sha256, outcome: .success(Placed(relative: relative, sha256: sha256,
                                                                      allocated: allocated, info: info)))
        } catch {
            unlink(temporary)
            return Judgement(sha256: sha256, outcome: .failure(.local("cannot install the file", error)))
        }
    }

    /// What a worker found of a finished body: its SHA-256 (nil when it could not be read), and where it went or why
    /// it was not kept.
    private struct Judgement {
        let sha256: String?
        let outcome: Result<Placed, Failure>
    }

    /// A body that passed its checks and is in place: where, its SHA-256, the disk space it takes, what image it is.
    private struct Placed {
        let relative: String
        let sha256: String
        let allocated: Int64
        let info: ImageInfo?
    }

    private func rememberCut(_ key: String, sha256: String) {
        if cutBodies.count >= Self.cutBodiesKept { cutBodies.removeAll() }  // at worst, one fetch more each
        cutBodies[key] = sha256
    }

    private func endGuardedStep(_ key: String) {
        if guarded.remove(key) != nil { crashGuard.end(key) }
    }

    /// The body passed its checks and is in place under `files/`: it is indexed.
    private func installed(_ result: FetchResult, _ body: Placed, bytes: Int64) {
        let now = wallClockMilliseconds(), info = body.info
        let entry = IndexEntry(
            key: result.key, url: result.key, file: body.relative, bytes: bytes, sha256: body.sha256,
            contentType: result.headers.contentType, format: info?.format, width: info?.width, height: info?.height,
            etag: result.headers.etag, lastModified: result.headers.lastModified,
            freshUntil: result.headers.freshUntil(now: now, defaultTTL: defaultTTL),
            fetchedAt: now, lastAccess: now, hits: 0, mustRevalidate: result.headers.mustRevalidate,
            noStore: result.headers.noStore)
        do {
            try store.put(entry, allocated: body.allocated)
        } catch {
            store.files.remove(body.relative)
            return onEnd(result.key, result.lane, .failed(.local("cannot index the file", error)))
        }
        onEnd(result.key, result.lane, .fetched(entry, detail: info.map { ", \($0.format) \($0.width)x\($0.height)" } ?? ""))
    }
}
