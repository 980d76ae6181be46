import Glibc
import PrefetchProtocol
import QueueCore

/// What happens when a transfer ends: probe and install the body, index it, answer the waiters.
extension Daemon {
    func fetchFinished(_ result: FetchResult) {
        let now = wallClockMilliseconds()
        switch result.outcome {
        case .failure(let failure):
            counters.failed += 1
            Log.info("failed \(result.key): \(failure.code): \(failure.message)")
            apply(scheduler.finish(result.key, .failure(failure), now: Moment(milliseconds: now)))
        case .success(.notModified):
            let freshUntil = result.headers.freshUntil(now: now, defaultTTL: options.defaultTTL)
            do {
                try store.refresh(result.key, freshUntil: freshUntil, etag: result.headers.etag,
                                  lastModified: result.headers.lastModified, now: now)
            } catch {
                Log.error("cannot refresh \(result.key): \(error)")
            }
            Log.info("revalidated \(result.key)")
            apply(scheduler.finish(result.key, .success, now: Moment(milliseconds: now)))
        case .success(.downloaded(let temporary, let bytes, let sha256)):
            let name = CacheFiles.name(forKey: result.key)
            let relative = CacheFiles.relativePath(forName: name)
            let files = store.files
            workers.run({ () -> Result<ImageInfo?, Failure> in
                let info = ImageProbe.probe(temporary)
                do {
                    try files.install(temporary: temporary, as: relative)
                } catch {
                    unlink(temporary)
                    return .failure(Failure(code: (error as? SystemError)?.errno == ENOSPC ? "disk_full" : "internal",
                                            message: "cannot install the file: \(error)", isTransient: true))
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
        let info: ImageInfo?
        switch outcome {
        case .failure(let failure):
            counters.failed += 1
            Log.error("\(result.key): \(failure.message)")
            return apply(scheduler.finish(result.key, .failure(failure), now: moment))
        case .success(let probed):
            info = probed
        }
        let entry = IndexEntry(
            key: result.key, url: result.key, file: relative, bytes: bytes, sha256: sha256,
            contentType: result.headers.contentType, format: info?.format, width: info?.width, height: info?.height,
            etag: result.headers.etag, lastModified: result.headers.lastModified,
            freshUntil: result.headers.freshUntil(now: now, defaultTTL: options.defaultTTL),
            fetchedAt: now, lastAccess: now, hits: 0)
        do {
            try store.put(entry)
            if store.totalBytes > options.maxCacheBytes {
                let protected = Set(pendingGets.values).union([result.key])
                let evicted = try store.evict(downTo: options.maxCacheBytes / 10 * 9, protecting: protected)
                Log.info("evicted \(evicted) entries to stay under \(options.maxCacheBytes) bytes")
            }
        } catch {
            store.files.remove(relative)
            counters.failed += 1
            let full = error.isDiskFull
            let failure = Failure(code: full ? "disk_full" : "internal", message: "cannot index the file: \(error)",
                                  isTransient: true)
            return apply(scheduler.finish(result.key, .failure(failure), now: moment))
        }
        counters.fetched += 1
        let shape = info.map { " \($0.format) \($0.width)x\($0.height)" } ?? ""
        Log.info("fetched \(result.key) (\(bytes) bytes\(shape))")
        apply(scheduler.finish(result.key, .success, now: moment))
    }
}
