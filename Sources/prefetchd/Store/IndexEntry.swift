import QueueCore

/// One row of the cache index.
struct IndexEntry: Equatable {
    var key: String
    var url: String
    /// Relative to the cache root.
    var file: String
    var bytes: Int64
    var sha256: String
    var contentType: String?
    var format: String?
    var width: Int?
    var height: Int?
    var etag: String?
    var lastModified: String?
    /// Unix milliseconds.
    var freshUntil: Int64
    var fetchedAt: Int64
    var lastAccess: Int64
    var hits: Int64
    /// `must-revalidate` (or `proxy-revalidate`, `no-cache`): never served stale.
    var mustRevalidate = false
    /// `no-store`: delivered once, never answered from the cache.
    var noStore = false

    /// Whether the copy is fresh at `now` (Unix ms): within its lifetime, and not fetched later than `now`. One
    /// fetched while the wall clock ran ahead (stepped back since, as NTP does) has no age to go by: with max-age=60
    /// it stayed fresh for as long as the step, an hour or 73 years. It is revalidated instead.
    func isFresh(at now: Int64) -> Bool {
        freshUntil > now && fetchedAt <= now.saturatingAdd(Self.clockSlack)
    }

    /// How far in the future `fetchedAt` may lie and the copy still be fresh (ms): the wall clock's small corrections.
    static let clockSlack: Int64 = 1000
}
