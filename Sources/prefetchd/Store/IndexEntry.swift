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
}
