import PrefetchProtocol
import QueueCore

/// A request line decoded into what it asks: each operation with its own fields, checked once, before anything
/// acts on them. A missing or meaningless field is a `bad_request` naming it.
enum Command {
    case ping, status, watch, metrics, formats
    /// `get`: one URL, the variant to make of it, and how stale an answer may be.
    case get(url: String, variant: VariantSpec?, offline: Bool, staleAllowance: Int64?)
    /// `queue`: for the background lane, or urgent at once with `now`; `summary`: the reply counts (`BatchResult`).
    case queue(urls: [String], now: Bool, summary: Bool)
    /// `demote`, `promote`, `cancel` or `evict` of some URLs.
    case change(Operation, urls: [String], summary: Bool)
    /// `evict` with `all`.
    case evictAll
    case info(url: String)
    case list(limit: Int)
    case view(ViewChange)

    /// What a `view` request changes: the list (replaced, or appended to), the visible rows, the variant.
    struct ViewChange {
        var urls: [String]?
        var append: Bool
        var range: Viewport.Range?
        var variant: VariantSpec?
    }

    /// Whether carrying it out still matters once its client has gone: it changes what is fetched or kept (a `get`'s
    /// fetch goes on). The others only answer, or change the client's own view, which goes with the client.
    var outlivesClient: Bool {
        switch self {
        case .get, .queue, .change, .evictAll: true
        case .ping, .status, .watch, .metrics, .formats, .info, .list, .view: false
        }
    }

    /// A `queue` joins its turn's batch, committed in one transaction at the end of the turn, or before the next
    /// request of another kind is carried out.
    var isQueue: Bool {
        if case .queue = self { true } else { false }
    }

    static let maximumViewRows = 100_000
    static let maximumVisibleRows = 1_000
    static let maximumLookAround = 1_000

    init(_ request: Request, op: Operation) throws(WireError) {
        switch op {
        case .ping: self = .ping
        case .status: self = .status
        case .watch: self = .watch
        case .metrics: self = .metrics
        case .formats: self = .formats
        case .get:
            let url = try Self.one(request, op)
            let staleAllowance = try request.staleAllowance()
            self = .get(url: url, variant: try Self.variantSpec(request), offline: request.offline == true,
                        staleAllowance: staleAllowance)
        case .queue:
            self = .queue(urls: try Self.batch(request, op), now: request.now == true, summary: request.summary == true)
        case .evict where request.all == true:
            // A client that meant some URLs must not empty the cache.
            guard request.url == nil, request.urls == nil else {
                throw WireError(.badRequest, "evict takes all or url(s), not both")
            }
            self = .evictAll
        case .demote, .promote, .cancel, .evict:
            self = .change(op, urls: try Self.batch(request, op), summary: request.summary == true)
        case .info:
            self = .info(url: try Self.one(request, op))
        case .list:
            let limit = request.limit ?? 1000
            guard limit >= 0 else { throw WireError(.badRequest, "limit must be 0 or more, not \(limit)") }
            self = .list(limit: limit)
        case .view:
            guard request.url == nil else { throw WireError(.badRequest, "view takes urls, not url") }
            let range = try request.viewRange(maximumRows: Self.maximumViewRows, maximumVisible: Self.maximumVisibleRows,
                                              maximumLookAround: Self.maximumLookAround)
            let variant = try Self.variantSpec(request)
            guard request.urls != nil || range != nil || variant != nil else {
                throw WireError(.badRequest, "view needs urls, first and last, or size")
            }
            guard (request.urls?.count ?? 0) <= Request.maximumBatch else {
                throw WireError(.badRequest, "at most \(Request.maximumBatch) URLs per request; "
                                + "send a longer list in parts with \"append\": true")
            }
            self = .view(ViewChange(urls: request.urls, append: request.append == true, range: range, variant: variant))
        }
    }

    /// The variant `get` or `view` asks for, if any.
    private static func variantSpec(_ request: Request) throws(WireError) -> VariantSpec? {
        guard let size = request.size else {
            if request.fit != nil || request.format != nil || request.quality != nil || request.upscale != nil {
                throw WireError(.badRequest, "fit, format, quality and upscale need size")
            }
            return nil
        }
        do {
            return try VariantSpec(size: size, fit: request.fit, format: request.format, quality: request.quality,
                                   upscale: request.upscale ?? false)
        } catch {
            throw WireError(.badRequest, error.message)
        }
    }

    /// `urls` (or the one `url`), at most `Request.maximumBatch` of them.
    private static func batch(_ request: Request, _ op: Operation) throws(WireError) -> [String] {
        guard request.url == nil || request.urls == nil else {
            throw WireError(.badRequest, "\(op.rawValue) takes url or urls, not both")
        }
        let urls = try required(request.urls ?? request.url.map { [$0] }, "urls", op)
        guard urls.count <= Request.maximumBatch else {
            throw WireError(.badRequest, "at most \(Request.maximumBatch) URLs per request")
        }
        return urls
    }

    /// The one URL of `get` and `info`: a `urls` beside it would be left unread.
    private static func one(_ request: Request, _ op: Operation) throws(WireError) -> String {
        guard request.urls == nil else {
            throw WireError(.badRequest, "\(op.rawValue) takes one url, not urls: send one request per URL")
        }
        return try required(request.url, "url", op)
    }

    private static func required<T>(_ value: T?, _ field: String, _ op: Operation) throws(WireError) -> T {
        guard let value else { throw WireError(.badRequest, "\(op.rawValue) needs the field \"\(field)\"") }
        return value
    }
}
