import Glibc
import PrefetchProtocol
import QueueCore

/// How a fetch ended, as telemetry (metrics, `watch` events, the log) tells it.
enum FetchEnd {
    /// A new body, installed; `detail` describes the image for the log (", jpeg 800x600").
    case fetched(bytes: Int64, detail: String)
    /// The server confirmed the cached copy (304).
    case revalidated
    case failed(Failure)
}

/// What happens when a transfer ends: inspect and install the body, index it, answer the waiters.
extension Daemon {
    /// A body started arriving: record how to resume it should the transfer stop before the end.
    func bodyStarted(_ key: String, validator: String?) {
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

    /// Sets aside, at start-up, the URLs that were being handled when the daemon died twice in a row (`CrashGuard`):
    /// remembered as a `quarantined` failure for the negative TTL, out of the durable queue and the cache.
    func quarantine(_ keys: [String], now: Int64) throws {
        for key in keys {
            let seconds = options.retry.negativeTTL / 1000
            let failure = Failure(code: .quarantined, message: "set aside for \(seconds) s: the daemon died twice in a row "
                                  + "while handling this URL's response", isTransient: false)
            let until = now + options.retry.negativeTTL
            scheduler.remember(key, failure, until: Moment(milliseconds: until))
            try store.saveFailure(key, failure, until: until)
            try store.dequeue(key)
            try store.removePartial(key)
            try store.remove(key)
            Log.error("quarantined \(key): the daemon died twice in a row while handling it; not fetched again for \(seconds) s")
        }
    }

    /// Carries out the scheduler's `.park`: the transfer stops, and its partial body stays on disk only when a
    /// validator was recorded to resume it with (without one the next start begins at byte 0 anyway).
    func parkTransfer(_ key: String) {
        let resumable = store.partialValidator(key) != nil
        fetcher.stop(key, keepingBody: resumable)
    }

    /// At shutdown: stops every transfer, keeping only the partial bodies a restart resumes (a recorded validator,
    /// and the URL in the durable backlog); the others, parked ones included, are deleted with their records, so no
    /// other temporary file is left behind.
    func stopTransfersForShutdown() {
        for task in scheduler.allTasks {
            let resumable = store.partialValidator(task.key) != nil && (try? store.isQueued(task.key)) == true
            if task.state == .running { fetcher.stop(task.key, keepingBody: resumable) }
            guard !resumable else { continue }
            do { try store.removePartial(task.key) } catch { Log.error("cannot forget the download of \(task.key): \(error)") }
        }
    }

    func fetchFinished(_ result: FetchResult) {
        let now = wallClockMilliseconds()
        switch result.outcome {
        case .failure(let failure):
            fetchEnded(result.key, .failed(failure))
            crashGuard.end(result.key)
            do {
                let hasValidator = store.partialValidator(result.key) != nil
                if !(failure.isTransient && failure.httpStatus != 416 && hasValidator) { try store.removePartial(result.key) }
            } catch {
                Log.error("cannot forget the download of \(result.key): \(error)")
            }
            apply(scheduler.finish(result.key, .failure(failure), now: Moment(milliseconds: now)))
        case .success(.notModified):
            let freshUntil = result.headers.freshUntil(now: now, defaultTTL: options.defaultTTL)
            do {
                try store.refresh(result.key, freshUntil: freshUntil, etag: result.headers.etag,
                                  lastModified: result.headers.lastModified, mustRevalidate: result.headers.mustRevalidate,
                                  now: now)
            } catch {
                Log.error("cannot refresh \(result.key): \(error)")
            }
            fetchEnded(result.key, .revalidated)
            crashGuard.end(result.key)
            apply(scheduler.finish(result.key, .success, now: Moment(milliseconds: now)))
        case .success(.downloaded(let temporary, let bytes, let sha256)):
            do { try store.removePartial(result.key, deletingBody: false) } catch { Log.error("\(error)") }
            let name = CacheFiles.name(forKey: result.key)
            let relative = CacheFiles.relativePath(forName: name)
            let files = store.files
            let policy = options.images
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

    private func installed(_ result: FetchResult, relative: String, bytes: Int64, sha256: String,
                           outcome: Result<ImageInfo?, Failure>) {
        let now = wallClockMilliseconds()
        let moment = Moment(milliseconds: now)
        crashGuard.end(result.key)
        let info: ImageInfo?
        switch outcome {
        case .failure(let failure):
            fetchEnded(result.key, .failed(failure))
            return apply(scheduler.finish(result.key, .failure(failure), now: moment))
        case .success(let probed):
            info = probed
        }
        let entry = IndexEntry(
            key: result.key, url: result.key, file: relative, bytes: bytes, sha256: sha256,
            contentType: result.headers.contentType, format: info?.format, width: info?.width, height: info?.height,
            etag: result.headers.etag, lastModified: result.headers.lastModified,
            freshUntil: result.headers.freshUntil(now: now, defaultTTL: options.defaultTTL),
            fetchedAt: now, lastAccess: now, hits: 0, mustRevalidate: result.headers.mustRevalidate,
            noStore: result.headers.noStore)
        do {
            try store.put(entry)
        } catch {
            store.files.remove(relative)
            let failure = Failure.local("cannot index the file", error)
            fetchEnded(result.key, .failed(failure))
            return apply(scheduler.finish(result.key, .failure(failure), now: moment))
        }
        // The entry is indexed with its file: an eviction that fails leaves the cache over its limit for now, not
        // this fetch failed with its file gone.
        do { try enforceCacheLimit(sparing: result.key) } catch { Log.error("cannot evict to stay under max_cache_bytes: \(error)") }
        fetchEnded(result.key, .fetched(bytes: bytes, detail: info.map { ", \($0.format) \($0.width)x\($0.height)" } ?? ""))
        apply(scheduler.finish(result.key, .success, now: moment))
    }

    /// Keeps the cache under `max_cache_bytes` at write time: LRU down to 90 %, sparing what is waited for or being
    /// processed, and `key`.
    func enforceCacheLimit(sparing key: String) throws(DatabaseError) {
        guard store.totalBytes > options.maxCacheBytes else { return }
        let evicted = try store.evict(downTo: options.maxCacheBytes / 10 * 9, protecting: protectedKeys.union([key]))
        metrics.evictions += Int64(evicted)
        Log.info("evicted \(evicted) entries to stay under \(options.maxCacheBytes) bytes")
    }
}
