/// One line of a `watch` stream. Which fields are set depends on `event` (see docs/protocol.md).
public struct Event: Codable, Equatable, Sendable {
    /// `snapshot` (every half second: lanes and transfers), `started`, `finished` or `failed`.
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
    public var backlog: Int64?
    /// `snapshot`: every running transfer.
    public var transfers: [Transfer]?

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
        case event, time, url, lane, bytes, total, rate, duration, error, fast, slow, backlog, transfers
        case slowSuspended = "slow_suspended"
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
