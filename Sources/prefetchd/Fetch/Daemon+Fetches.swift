import QueueCore

/// The fetch side's edges: what the crash guard set aside at start-up, the transfers at shutdown, the cache limit and
/// a full disk.
extension Daemon {
    /// Sets aside, at start-up, the URLs whose handling the daemon died in too often in a row (`CrashGuard`):
    /// remembered as a `quarantined` failure for the negative TTL, out of the durable queue and the cache.
    func quarantine(_ keys: [String]) throws {
        for key in keys {
            let seconds = options.retry.negativeTTL / 1000
            let failure = Failure(code: .quarantined, message: "set aside for \(seconds) s: the daemon died while handling "
                                  + "this URL's response \(Self.tooOften)", isTransient: false)
            let until = Moment.now + options.retry.negativeTTL
            scheduler.remember(key, failure, until: until)
            try store.saveFailure(key, failure, until: until.wallClockMilliseconds, now: wallClockMilliseconds())
            try store.dequeue(key)
            try store.removePartial(key)
            try store.remove(key)
            Log.error("quarantined \(key): the daemon died while handling it \(Self.tooOften); not fetched again for \(seconds) s")
        }
    }

    private static let tooOften = "too often in a row (it crashed twice, or was killed from outside four times)"

    /// Cached answers that may be other URLs' (their connection was found with bytes nobody asked for) are evicted
    /// and queued again, so that what was asked for, queued work included, is fetched anew; those a waiting request
    /// or a variant being made needs, which `evict` spares, are made stale instead, so that the next request fetches
    /// them anew. A URL evicted so twice within `requeuedAfterDistrustFor` is not queued again: a server that sends
    /// bytes nobody asked for after every response would be fetched for ever.
    func evictDistrusted(_ keys: Set<String>) {
        let inUse = keysInUse
        let now = monotonicMilliseconds(), wallClock = wallClockMilliseconds()
        requeuedAfterDistrust = requeuedAfterDistrust.filter { now - $0.value < Self.requeuedAfterDistrustFor }
        var evicted: [String] = [], requeued: [String] = []
        do {
            for key in keys.sorted() {
                if inUse.contains(key) {
                    try store.distrust(key)
                } else if try store.remove(key) {
                    evicted.append(key)
                    guard requeuedAfterDistrust[key] == nil, try store.enqueue(key: key, now: wallClock) else { continue }
                    requeuedAfterDistrust[key] = now
                    requeued.append(key)
                }
            }
        } catch {
            Log.error("cannot evict answers that may be other URLs': \(error)")
        }
        if !requeued.isEmpty {
            backlog.queued()
            telemetry.queued(requeued.count)
        }
        fetches.fetchAlone(evicted)  // also those queued already
        guard !evicted.isEmpty else { return }
        telemetry.evicted(evicted.count)
        Log.info("evicted \(evicted.count) cached answers of that connection (any may be another URL's), "
                 + "\(requeued.count) queued again, each to be fetched on a connection of its own: "
                 + evicted.prefix(8).joined(separator: " ") + (evicted.count > 8 ? " …" : ""))
    }

    /// How long a URL queued again after its answer was evicted as untrusted is not queued so again (ms).
    static let requeuedAfterDistrustFor: Int64 = 600_000

    /// At shutdown: the running transfers stop, keeping only the partial bodies of URLs in the durable backlog.
    func stopTransfersForShutdown() {
        fetches.stopForShutdown(scheduler.allTasks.map { ($0.key, $0.state == .running) }) { key in
            (try? self.store.isQueued(key)) == true
        }
    }

    /// The disk is full for a `get` or a `queue` (`disk_full`): the least recently used tenth of the cache goes,
    /// whatever `max_cache_bytes` allows, so that what is asked next has room; at most once every 5 s, however many
    /// transfers hit the full disk at once. A disk that something else keeps filling shrinks the cache each time:
    /// the cache gives way.
    func makeRoomOnFullDisk() {
        let now = monotonicMilliseconds()
        guard store.entryCount > 0, diskFullEvictionAt.map({ now - $0 >= 5000 }) ?? true else { return }
        diskFullEvictionAt = now
        do {
            let evicted = try store.evict(downTo: store.totalBytes / 10 * 9, protecting: protectedKeys)
            telemetry.evicted(evicted)
            Log.warning("the disk is full: evicted the \(evicted) least recently used entries, "
                        + "\(store.totalBytes) bytes left in the cache")
        } catch {
            Log.error("the disk is full, and evicting to make room failed: \(error)")
        }
    }

    /// Keeps the cache under `max_cache_bytes` at write time, at start and when a reload lowers it: LRU down to 90 %,
    /// sparing what is waited for or being processed, and `key`.
    func enforceCacheLimit(sparing key: String? = nil) throws(DatabaseError) {
        // Until the start-up sweep has dropped the rows whose file is gone and measured the files again, the total
        // may be far off either way: the limit is kept once it ends.
        guard !store.sweeping, store.totalBytes > options.maxCacheBytes else { return }
        let evicted = try store.evict(downTo: options.maxCacheBytes / 10 * 9,
                                      protecting: key.map { protectedKeys.union([$0]) } ?? protectedKeys)
        telemetry.evicted(evicted)
        guard evicted > 0 else {
            // Every entry is in use (or just fetched): said at each fetch, so not at info level.
            return Log.debug("the cache stays over \(options.maxCacheBytes) bytes: every entry is in use")
        }
        Log.info("evicted \(evicted) entries to stay under \(options.maxCacheBytes) bytes")
    }
}
