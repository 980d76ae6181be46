/// One line of a `watch` stream, or a `view`'s news of a row. Which fields are set depends on `event` (see
/// docs/protocol.md).
public struct Event: Codable, Equatable, Sendable {
    /// `snapshot` (every half second: lanes and transfers), `started`, `finished` or `failed`; for a view,
    /// `view_ready` or `view_failed`.
    public var event: String
    /// Unix milliseconds.
    public var time: Int64
    public var url: String?
    public var lane: String?
    public var bytes: Int64?
    /// The size the server announced.
    public var total: Int64?
    /// Bytes per second over the last interval.
    public var rate: Int64?
    /// `finished`: how long the fetch took, in milliseconds.
    public var duration: Int64?
    /// `failed`: the error.
    public var error: WireError?
    /// `snapshot`: the lanes.
    public var fast: StatusReport.Lane?
    public var slow: StatusReport.Lane?
    public var slowSuspended: Bool?
    /// `snapshot`, while the disk is full: when the slow lane tries again (Unix seconds).
    public var waitingForDisk: Int64?
    public var backlog: Int64?
    /// `snapshot`: what the background lane may do, and why.
    public var background: BackgroundState?
    /// `snapshot`: every running transfer.
    public var transfers: [Transfer]?
    /// `view_ready`, `view_failed`: the row (from 0) of the view's list.
    public var row: Int?
    /// `view_ready`: the cached file (the variant, when the view asked for a size) and what it is.
    public var path: String?
    public var width: Int?
    public var height: Int?
    public var format: String?
    public var variant: String?
    /// `view_ready`: true when the file is past its freshness (served while its revalidation failed).
    public var stale: Bool?

    /// A running transfer in a snapshot.
    public struct Transfer: Codable, Equatable, Sendable {
        public var url: String
        public var lane: String
        public var bytes: Int64
        public var total: Int64?
        public var rate: Int64
        public init(url: String, lane: String, bytes: Int64, total: Int64?, rate: Int64) {
            self.url = url
            self.lane = lane
            self.bytes = bytes
            self.total = total
            self.rate = rate
        }
    }

    public init(event: String, time: Int64) {
        self.event = event
        self.time = time
    }

    enum CodingKeys: String, CodingKey {
        case event, time, url, lane, bytes, total, rate, duration, error, fast, slow, backlog, background, transfers
        case row, path, width, height, format, variant, stale
        case slowSuspended = "slow_suspended", waitingForDisk = "waiting_for_disk"
    }
}

/// The result of `watch`: the connection now carries events.
public struct Watching: Codable, Equatable, Sendable {
    public var watching: Bool
    public init() { watching = true }
}

/// The result of `metrics`: Prometheus text exposition (format 0.0.4).
public struct MetricsText: Codable, Equatable, Sendable {
    public var text: String
    public init(text: String) { self.text = text }
}
