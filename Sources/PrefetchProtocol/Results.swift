import FoundationEssentials

/// A cached file, as `get` and `info` describe it.
public struct CacheEntry: Codable, Equatable, Sendable {
    public var url: String
    public var path: String
    public var bytes: Int64
    public var sha256: String
    public var contentType: String?
    public var format: String?
    public var width: Int?
    public var height: Int?
    /// Unix seconds.
    public var fetchedAt: Int64
    public var freshUntil: Int64
    /// True when `get` answered from the cache without a fetch.
    public var fromCache: Bool?
    /// The variant's spec (e.g. `256x256-cover-jpeg-q85`) when this is a resized variant, not the original.
    public var variant: String?
    /// True when the entry is past its freshness and was served anyway (`max_stale`, `offline`, or the
    /// revalidation failed with a network error).
    public var stale: Bool?

    public init(url: String, path: String, bytes: Int64, sha256: String, contentType: String?, format: String?,
                width: Int?, height: Int?, fetchedAt: Int64, freshUntil: Int64, fromCache: Bool? = nil, stale: Bool? = nil) {
        self.url = url
        self.path = path
        self.bytes = bytes
        self.sha256 = sha256
        self.contentType = contentType
        self.format = format
        self.width = width
        self.height = height
        self.fetchedAt = fetchedAt
        self.freshUntil = freshUntil
        self.fromCache = fromCache
        self.stale = stale
    }

    enum CodingKeys: String, CodingKey {
        case url, path, bytes, sha256, format, width, height, stale, variant
        case contentType = "content_type", fetchedAt = "fetched_at", freshUntil = "fresh_until", fromCache = "from_cache"
    }
}

/// What a batch operation did with one URL. Open: a newer daemon may send a status this version does not know, and
/// it decodes (with its `rawValue` as sent) instead of failing the whole reply.
public struct ItemStatus: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    public static let queued = Self(rawValue: "queued")
    public static let already = Self(rawValue: "already")
    public static let cached = Self(rawValue: "cached")
    public static let skipped = Self(rawValue: "skipped")
    public static let demoted = Self(rawValue: "demoted")
    public static let promoted = Self(rawValue: "promoted")
    public static let cancelled = Self(rawValue: "cancelled")
    public static let evicted = Self(rawValue: "evicted")
    public static let unknown = Self(rawValue: "unknown")
    /// Still answering a request or the original of a variant being made: `evict` leaves it.
    public static let inUse = Self(rawValue: "in_use")
    /// Not a URL prefetchd takes; `error` says why.
    public static let rejected = Self(rawValue: "rejected")
    /// `promote`, and `queue` with `now`: the fast lane holds as many waiting tasks as these may add to; the URL stays
    /// background work (queued, durably); `error` says so.
    public static let busy = Self(rawValue: "busy")
    /// `prefetchctl queue --wait --json` only: how the wait for a queued URL ended.
    public static let finished = Self(rawValue: "finished")
    public static let failed = Self(rawValue: "failed")
}

/// The outcome for one URL of a batch operation (`queue`, `demote`, `promote`, `cancel`, `evict`).
public struct ItemResult: Codable, Equatable, Sendable {
    /// The URL as given.
    public var url: String
    /// Its canonical form (the dedup key, and the `url` of `watch` events), when it parsed.
    public var key: String?
    public var status: ItemStatus
    public var error: WireError?

    public init(url: String, key: String? = nil, status: ItemStatus, error: WireError? = nil) {
        self.url = url
        self.key = key
        self.status = status
        self.error = error
    }
}

/// The result of a batch operation.
public struct BatchResult: Codable, Equatable, Sendable {
    /// One per URL, in order; with `summary`, only those with an error.
    public var results: [ItemResult]
    /// With `summary`: how many URLs ended in each status, all of them counted (keyed by `ItemStatus.rawValue`).
    public var counts: [String: Int]?
    /// `evict` with `all`: how many entries went.
    public var evicted: Int?

    public init(results: [ItemResult], counts: [String: Int]? = nil, evicted: Int? = nil) {
        self.results = results
        self.counts = counts
        self.evicted = evicted
    }

    /// The reply to a request that asked for a summary: the counts, and the results that carry an error.
    public static func summary(of results: [ItemResult]) -> BatchResult {
        BatchResult(results: results.filter { $0.error != nil },
                    counts: results.reduce(into: [:]) { $0[$1.status.rawValue, default: 0] += 1 })
    }
}

/// The result of `view`: the list's length, the range in force, and the URLs of this request that were refused.
public struct ViewResult: Codable, Equatable, Sendable {
    public var rows: Int
    public var first: Int?
    public var last: Int?
    public var ahead: Int?
    public var behind: Int?
    public var rejected: [RejectedRow]

    /// A row whose URL cannot be fetched: it never loads, and a `view_failed` event says so when it is visible.
    public struct RejectedRow: Codable, Equatable, Sendable {
        public var row: Int
        public var url: String
        public var error: WireError

        public init(row: Int, url: String, error: WireError) {
            self.row = row
            self.url = url
            self.error = error
        }
    }

    public init(rows: Int, first: Int? = nil, last: Int? = nil, ahead: Int? = nil, behind: Int? = nil,
                rejected: [RejectedRow] = []) {
        self.rows = rows
        self.first = first
        self.last = last
        self.ahead = ahead
        self.behind = behind
        self.rejected = rejected
    }
}

/// The result of `ping`.
public struct Pong: Codable, Equatable, Sendable {
    public var pong: Bool
    public var version: String
    public init() {
        pong = true
        version = prefetchVersion
    }
}

/// One task in the scheduler, as `list` and `info` show it.
public struct TaskSummary: Codable, Equatable, Sendable {
    /// Where a task stands. Open, as `ItemStatus` is: a state a newer daemon adds decodes as sent.
    public struct State: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let waiting = Self(rawValue: "waiting")
        public static let running = Self(rawValue: "running")
        /// Waiting for a retry.
        public static let delayed = Self(rawValue: "delayed")
        /// Durable in the queue, not yet in memory.
        public static let backlog = Self(rawValue: "backlog")
    }

    public var url: String
    /// `fast` or `slow`.
    public var lane: String
    public var state: State
    public var attempts: Int
    public var waiters: Int
    /// Bytes received so far, for running tasks.
    public var bytes: Int64?
    /// Total size when the server announced it.
    public var total: Int64?
    /// A running urgent fetch past `urgent_slice` that stepped aside: it runs on, taking no place in the fast lane.
    public var steppedAside: Bool?
    /// A running fetch demoted before its response began while the slow lane was full: in no lane until it begins.
    public var lingering: Bool?

    public init(url: String, lane: String, state: State, attempts: Int, waiters: Int, bytes: Int64? = nil, total: Int64? = nil,
                steppedAside: Bool? = nil, lingering: Bool? = nil) {
        self.url = url
        self.lane = lane
        self.state = state
        self.attempts = attempts
        self.waiters = waiters
        self.bytes = bytes
        self.total = total
        self.steppedAside = steppedAside
        self.lingering = lingering
    }

    private enum CodingKeys: String, CodingKey {
        case url, lane, state, attempts, waiters, bytes, total, lingering
        case steppedAside = "stepped_aside"
    }
}

/// The result of `list`.
public struct TaskList: Codable, Equatable, Sendable {
    /// The most tasks a list holds, whatever its `limit`: one of 65,000 tasks held the daemon's loop (every other
    /// client's requests) for half a second, a client listing in a loop made cache hits wait 0.1 to 0.5 s.
    public static let mostTasks = 10_000

    public var tasks: [TaskSummary]
    /// Queued URLs kept only in the durable backlog.
    public var backlog: Int64
    public init(tasks: [TaskSummary], backlog: Int64) {
        self.tasks = tasks
        self.backlog = backlog
    }
}

/// The result of `info`.
public struct URLInfo: Codable, Equatable, Sendable {
    public var url: String
    /// The canonical URL: the dedup key.
    public var key: String
    public var cached: CacheEntry?
    public var task: TaskSummary?
    /// A remembered permanent failure, until it expires.
    public var failure: WireError?

    public init(url: String, key: String, cached: CacheEntry?, task: TaskSummary?, failure: WireError?) {
        self.url = url
        self.key = key
        self.cached = cached
        self.task = task
        self.failure = failure
    }
}

/// The result of `status`.
public struct StatusReport: Codable, Equatable, Sendable {
    public struct Lane: Codable, Equatable, Sendable {
        public var waiting: Int
        public var running: Int
        public var width: Int
        /// The slow lane's: of `running`, the transfers whose rows scrolled away before their responses began; they
        /// take no place in the lane (at most the fast lane's width of them).
        public var lingering: Int?
        /// The fast lane's: of `running`, the transfers that held their place for `urgent_slice` and take none any
        /// more (at most `width` of them).
        public var steppedAside: Int?
        public init(waiting: Int, running: Int, width: Int, lingering: Int? = nil, steppedAside: Int? = nil) {
            self.waiting = waiting
            self.running = running
            self.width = width
            self.lingering = lingering
            self.steppedAside = steppedAside
        }

        enum CodingKeys: String, CodingKey {
            case waiting, running, width, lingering, steppedAside = "stepped_aside"
        }
    }

    public struct Cache: Codable, Equatable, Sendable {
        public var entries: Int64
        public var bytes: Int64
        public var limit: Int64
        public var hits: Int64
        public var misses: Int64
        public var directory: String
        public init(entries: Int64, bytes: Int64, limit: Int64, hits: Int64, misses: Int64, directory: String) {
            self.entries = entries
            self.bytes = bytes
            self.limit = limit
            self.hits = hits
            self.misses = misses
            self.directory = directory
        }
    }

    public var version: String
    public var pid: Int32
    public var uptime: Int64
    public var fast: Lane
    public var slow: Lane
    public var slowSuspended: Bool
    /// Tasks waiting for a retry.
    public var delayed: Int
    /// Queued URLs kept only in the durable backlog.
    public var backlog: Int64
    public var cache: Cache
    public var connections: Int
    public var fetched: Int64
    public var failed: Int64
    /// Hosts the circuit breaker paused, and until when (Unix seconds): the `StatusReport.pausedHostsShown` paused
    /// last, in host order.
    public var pausedHosts: [PausedHost]
    /// How many hosts are paused, `pausedHosts` and those beyond it; nil from a daemon older than this field.
    public var pausedHostCount: Int?
    /// Downloads stopped to resume later (demoted, a lane made narrower, a background pause, past their slice), their
    /// bytes kept when they can be; nil from a daemon older than this field.
    public var parked: Int?
    /// While the disk is full: when the slow lane tries again (Unix seconds). Queued work waits; nothing is dropped.
    public var waitingForDisk: Int64?
    /// What the background lane may do (metered network, battery, power saver, quiet hours); nil from a daemon
    /// older than this field.
    public var background: BackgroundState?

    /// At most this many paused hosts are listed: 5,000 made a 240 KB reply, refused as `too_large` under a small
    /// `output_budget`.
    public static let pausedHostsShown = 100

    public struct PausedHost: Codable, Equatable, Sendable {
        public var host: String
        public var until: Int64
        public init(host: String, until: Int64) {
            self.host = host
            self.until = until
        }
    }

    public init(version: String, pid: Int32, uptime: Int64, fast: Lane, slow: Lane, slowSuspended: Bool, delayed: Int,
                backlog: Int64, cache: Cache, connections: Int, fetched: Int64, failed: Int64, pausedHosts: [PausedHost],
                pausedHostCount: Int? = nil, parked: Int? = nil, waitingForDisk: Int64? = nil,
                background: BackgroundState? = nil) {
        self.version = version
        self.pid = pid
        self.uptime = uptime
        self.fast = fast
        self.slow = slow
        self.slowSuspended = slowSuspended
        self.delayed = delayed
        self.backlog = backlog
        self.cache = cache
        self.connections = connections
        self.fetched = fetched
        self.failed = failed
        self.pausedHosts = pausedHosts
        self.pausedHostCount = pausedHostCount
        self.parked = parked
        self.waitingForDisk = waitingForDisk
        self.background = background
    }

    enum CodingKeys: String, CodingKey {
        case version, pid, uptime, fast, slow, delayed, backlog, cache, connections, fetched, failed, background, parked
        case slowSuspended = "slow_suspended", pausedHosts = "paused_hosts", pausedHostCount = "paused_host_count"
        case waitingForDisk = "waiting_for_disk"
    }
}

/// What the background lane may do now, and why: `status`, `watch` snapshots and metrics carry it.
public struct BackgroundState: Codable, Equatable, Sendable {
    /// `run`, `slow` (its downloads capped at `rateLimit`) or `pause` (it starts nothing; queued work waits).
    public var mode: String
    /// The conditions that decide `mode` (`metered`, `on_battery`, `power_saver`, `quiet_hours`, `offline`), none for
    /// `run`.
    public var because: [String]
    /// While `slow`: the background lane's download rate in bytes per second (`slow_rate`), shared equally by its
    /// transfers.
    public var rateLimit: Int64?
    /// Every condition, whether it holds, who says so and what the configuration asks while it does.
    public var conditions: [ConditionState]

    public struct ConditionState: Codable, Equatable, Sendable {
        /// `metered`, `on_battery`, `power_saver`, `quiet_hours` or `offline`.
        public var name: String
        public var active: Bool
        /// The service that reports it (`NetworkManager` for `metered` and `offline`, `UPower`,
        /// `power-profiles-daemon`), or the configured window for `quiet_hours`; nil when nothing reports it (no such
        /// service, no bus, no window), which counts as not active.
        public var source: String?
        /// `run`, `slow` or `pause`: what the configuration asks while it holds.
        public var policy: String
        public init(name: String, active: Bool, source: String?, policy: String) {
            self.name = name
            self.active = active
            self.source = source
            self.policy = policy
        }
    }

    public init(mode: String, because: [String], rateLimit: Int64?, conditions: [ConditionState]) {
        self.mode = mode
        self.because = because
        self.rateLimit = rateLimit
        self.conditions = conditions
    }

    /// "paused: metered network (NetworkManager)", "slow (64 KiB/s): on battery (UPower)", or "run".
    public var summary: String {
        guard mode != "run" else { return "run" }
        let reasons = because.compactMap { name in conditions.first { $0.name == name } }.map { condition in
            Self.describe(condition.name) + (condition.source.map { " (\($0))" } ?? "")
        }
        let head = mode == "pause" ? "paused" : "slow" + (rateLimit.map { " (\(Self.rate($0)))" } ?? "")
        return head + (reasons.isEmpty ? "" : ": " + reasons.joined(separator: ", "))
    }

    private static func describe(_ name: String) -> String {
        switch name {
        case "metered": "metered network"
        case "on_battery": "on battery"
        case "power_saver": "power saver"
        case "quiet_hours": "quiet hours"
        case "offline": "no network"
        default: name
        }
    }

    private static func rate(_ bytes: Int64) -> String {
        bytes >= 1 << 20 && bytes % (1 << 20) == 0 ? "\(bytes >> 20) MiB/s"
            : bytes >= 1 << 10 && bytes % (1 << 10) == 0 ? "\(bytes >> 10) KiB/s" : "\(bytes) B/s"
    }

    enum CodingKeys: String, CodingKey {
        case mode, because, conditions
        case rateLimit = "rate_limit"
    }
}

/// The result of `formats`: the image loaders gdk-pixbuf has, and which the policy allows.
public struct FormatList: Codable, Equatable, Sendable {
    public struct Format: Codable, Equatable, Sendable {
        public var name: String
        public var description: String
        public var mimeTypes: [String]
        public var extensions: [String]
        public var allowed: Bool

        public init(name: String, description: String, mimeTypes: [String], extensions: [String], allowed: Bool) {
            self.name = name
            self.description = description
            self.mimeTypes = mimeTypes
            self.extensions = extensions
            self.allowed = allowed
        }

        enum CodingKeys: String, CodingKey {
            case name, description, extensions, allowed
            case mimeTypes = "mime_types"
        }
    }

    public var formats: [Format]
    /// Allowed formats no loader is installed for.
    public var missing: [String]

    public init(formats: [Format], missing: [String]) {
        self.formats = formats
        self.missing = missing
    }
}
