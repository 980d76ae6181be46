import Glibc
import QueueCore

/// How a fetch ended, once its body is inspected, installed and indexed (or why not).
enum FetchEnd {
    /// A new body, in the cache and the index; `detail` describes the image for the log (", jpeg 800x600").
    case fetched(bytes: Int64, detail: String)
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
    private let workers: WorkerPool
    private let crashGuard: CrashGuard
    /// Keys whose response is being handled under the crash guard: only those end a guarded step. (A failure that
    /// interpreted no response, such as an unresolved name, never began one; a variant of the same key may run.)
    private var guarded: Set<String> = []
    /// What the image checks allow, and the freshness of a response that says nothing.
    private var images: ImagePolicy
    private var defaultTTL: Int64
    /// Called on the loop thread for every fetch that ends, also for one that could not start.
    var onEnd: (_ key: String, _ end: FetchEnd) -> Void = { _, _ in }

    init(loop: EventLoop, store: Store, workers: WorkerPool, crashGuard: CrashGuard, options: Options) throws {
        self.store = store
        fetcher = try CurlFetcher(loop: loop, settings: options.fetch)
        self.workers = workers
        self.crashGuard = crashGuard
        images = options.images
        defaultTTL = options.defaultTTL
        fetcher.onFinish = { [unowned self] result in self.finished(result) }
        fetcher.onBodyStart = { [unowned self] key, validator in self.bodyStarted(key, validator: validator) }
        fetcher.onConcluding = { [unowned self] key in
            self.guarded.insert(key)
            self.crashGuard.begin(key)
        }
        fetcher.mayConclude = { [unowned self] in self.crashGuard.isFree }
        crashGuard.onFree = { [unowned self] in self.fetcher.concludeHeld() }
    }

    // MARK: The scheduler's actions

    /// `.start`: a conditional request when revalidating a copy with validators, else a download that resumes what
    /// a partial body on disk holds. `retry` opens a connection of its own (the last one may be dead).
    func start(_ key: String, lane: Lane, revalidate: Bool, retry: Bool) {
        var request = TransferRequest(key: key, lane: lane,
                                      bodyPath: store.files.downloadPath(forName: CacheFiles.name(forKey: key)))
        request.freshConnection = retry
        do {
            if revalidate, let entry = try store.liveEntry(key), entry.etag != nil || entry.lastModified != nil {
                request.conditional = (entry.etag, entry.lastModified)
            } else {
                request.resumeValidator = store.partialValidator(key)
            }
            try fetcher.start(request)
            Log.debug("start \(lane) \(key)")
        } catch {
            onEnd(key, .failed(.local("cannot start the transfer", error)))
        }
    }

    func changeLane(_ key: String, to lane: Lane) { fetcher.changeLane(key, to: lane) }

    /// `.park`: the transfer stops, and its partial body stays on disk only when a validator was recorded to resume
    /// it with (without one the next start begins at byte 0 anyway).
    func park(_ key: String) {
        fetcher.stop(key, keepingBody: store.partialValidator(key) != nil)
    }

    func abort(_ key: String) { fetcher.stop(key, keepingBody: false) }

    func holdBackground(_ held: Bool) { fetcher.holdBackground(held) }

    /// At shutdown: stops the running transfers, keeping only the partial bodies a restart resumes (`resumable`:
    /// a recorded validator and the URL in the durable backlog); the others are deleted with their records, parked
    /// ones included, so no other temporary file is left behind.
    func stopForShutdown(_ tasks: [(key: String, running: Bool)], resumable: (String) -> Bool) {
        for task in tasks {
            let keep = store.partialValidator(task.key) != nil && resumable(task.key)
            if task.running { fetcher.stop(task.key, keepingBody: keep) }
            guard !keep else { continue }
            do { try store.removePartial(task.key) } catch { Log.error("cannot forget the download of \(task.key): \(error)") }
        }
    }

    /// Bytes received and expected for a running transfer.
    func progress(_ key: String) -> (received: Int64, expected: Int64?)? { fetcher.progress(key) }

    /// The settings a reload may change.
    func reconfigure(_ options: Options) {
        fetcher.settings = options.fetch
        images = options.images
        defaultTTL = options.defaultTTL
    }

    /// The background pool's download rate in all while a condition says slow; nil for none.
    func limitBackgroundRate(_ rate: Int64?) { fetcher.backgroundRateLimit = rate }

    // MARK: Transfers that end

    /// A body started arriving: record how to resume it should the transfer stop before the end.
    private func bodyStarted(_ key: String, validator: String?) {
        do {
            if let validator {
                try store.savePartial(key, validator: validator)
            } else {
                try store.removePartial(key, deletingBody: false)
            }
        } catch {
            Log.error("cannot record the download of \(key): \(error)")
        }
    }

    private func finished(_ result: FetchResult) {
        let key = result.key
        switch result.outcome {
        case .failure(let failure):
            endGuardedStep(key)
            do {
                // A transient failure keeps what a resume can continue from; a refused resume (416) starts over.
                let resumable = failure.isTransient && failure.httpStatus != 416 && store.partialValidator(key) != nil
                if !resumable { try store.removePartial(key) }
            } catch {
                Log.error("cannot forget the download of \(key): \(error)")
            }
            onEnd(key, .failed(failure))
        case .success(.notModified):
            let now = wallClockMilliseconds()
            do {
                try store.refresh(key, freshUntil: result.headers.freshUntil(now: now, defaultTTL: defaultTTL),
                                  etag: result.headers.etag, lastModified: result.headers.lastModified,
                                  mustRevalidate: result.headers.mustRevalidate, now: now)
            } catch {
                Log.error("cannot refresh \(key): \(error)")
            }
            endGuardedStep(key)
            onEnd(key, .revalidated)
        case .success(.downloaded(let temporary, let bytes, let sha256)):
            do { try store.removePartial(key, deletingBody: false) } catch { Log.error("\(error)") }
            let relative = CacheFiles.relativePath(forName: CacheFiles.name(forKey: key))
            let files = store.files
            let policy = images
            workers.run({ () -> Result<ImageInfo?, Failure> in
                let info: ImageInfo?
                switch ImageInspector.inspect(temporary, policy: policy) {
                case .image(let image): info = image
                case .nonImage: info = nil
                case .rejected(let failure):
                    unlink(temporary)
                    return .failure(failure)
                }
                do {
                    try files.install(temporary: temporary, as: relative)
                } catch {
                    unlink(temporary)
                    return .failure(.local("cannot install the file", error))
                }
                return .success(info)
            }, completion: { [unowned self] outcome in
                self.installed(result, relative: relative, bytes: bytes, sha256: sha256, outcome: outcome)
            })
        }
    }

    private func endGuardedStep(_ key: String) {
        if guarded.remove(key) != nil { crashGuard.end(key) }
    }

    /// The body passed its checks and is in place under `files/`: it is indexed.
    private func installed(_ result: FetchResult, relative: String, bytes: Int64, sha256: String,
                           outcome: Result<ImageInfo?, Failure>) {
        endGuardedStep(result.key)
        let info: ImageInfo?
        switch outcome {
        case .failure(let failure):
            return onEnd(result.key, .failed(failure))
        case .success(let probed):
            info = probed
        }
        let now = wallClockMilliseconds()
        let entry = IndexEntry(
            key: result.key, url: result.key, file: relative, bytes: bytes, sha256: sha256,
            contentType: result.headers.contentType, format: info?.format, width: info?.width, height: info?.height,
            etag: result.headers.etag, lastModified: result.headers.lastModified,
            freshUntil: result.headers.freshUntil(now: now, defaultTTL: defaultTTL),
            fetchedAt: now, lastAccess: now, hits: 0, mustRevalidate: result.headers.mustRevalidate,
            noStore: result.headers.noStore)
        do {
            try store.put(entry)
        } catch {
            store.files.remove(relative)
            return onEnd(result.key, .failed(.local("cannot index the file", error)))
        }
        onEnd(result.key, .fetched(bytes: bytes, detail: info.map { ", \($0.format) \($0.width)x\($0.height)" } ?? ""))
    }
}
