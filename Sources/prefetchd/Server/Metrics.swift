import PrefetchProtocol
/// The daemon's counters and histograms, rendered as Prometheus text. Labels are lanes, results and error codes:
/// never a URL or a host.
struct Metrics {
    /// A cumulative histogram with fixed buckets (seconds).
    struct Histogram {
        static let bounds: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
        private(set) var counts = [Int64](repeating: 0, count: bounds.count)
        private(set) var sum = 0.0
        private(set) var count: Int64 = 0

        mutating func observe(_ seconds: Double) {
            for (index, bound) in Self.bounds.enumerated() where seconds <= bound { counts[index] += 1 }
            sum += seconds
            count += 1
        }
    }

    private var fetches: [String: Int64] = [:]  // "lane,result"
    private var errors: [ErrorCode: Int64] = [:]
    private var downloadedBytes: Int64 = 0
    private var cacheHits: Int64 = 0
    private var cacheMisses: Int64 = 0
    private var evictions: Int64 = 0
    private var queued: Int64 = 0
    /// Variants decoded and resized (one per distinct variant, however many asked), and variants served as made.
    private var variantDecodes: Int64 = 0
    private var variantHits: Int64 = 0
    /// `view_ready` and `view_failed` events sent.
    private var viewEvents: [String: Int64] = [:]
    private var fetchDuration: [String: Histogram] = [:]  // lane
    private var queueWait: [String: Histogram] = [:]  // lane
    private var getLatency = Histogram()

    /// Counts a fetch that ended: by lane and result (`ok`, `not_modified`, `error`), errors also by code.
    mutating func fetchEnded(lane: String, _ end: FetchEnd, seconds: Double?) {
        let result: String
        switch end {
        case .fetched(let entry, _):
            result = "ok"
            downloadedBytes += entry.bytes
        case .revalidated:
            result = "not_modified"
        case .failed(let failure):
            result = "error"
            errors[failure.code, default: 0] += 1
        }
        fetches["\(lane),\(result)", default: 0] += 1
        if let seconds { fetchDuration[lane, default: Histogram()].observe(seconds) }
    }

    /// A get (or a visible view row) answered from the cache without a fetch.
    mutating func cacheHit() { cacheHits += 1 }

    /// A get (or a visible view row) that needed a fetch.
    mutating func cacheMiss() { cacheMisses += 1 }

    /// A get answered, `seconds` after it was asked.
    mutating func getAnswered(after seconds: Double) { getLatency.observe(seconds) }

    /// A transfer started in `lane`, `seconds` after its task was created.
    mutating func transferStarted(lane: String, queuedFor seconds: Double) {
        queueWait[lane, default: Histogram()].observe(seconds)
    }

    mutating func evicted(_ count: Int) { evictions += Int64(count) }

    /// URLs accepted into the durable queue.
    mutating func queued(_ count: Int) { queued += Int64(count) }

    /// A variant was decoded and resized (whether or not that went well).
    mutating func variantMade() { variantDecodes += 1 }

    /// A variant request answered with a variant made before.
    mutating func variantHit() { variantHits += 1 }

    /// A `view_ready` or `view_failed` event went out.
    mutating func viewEventSent(_ event: String) { viewEvents[event, default: 0] += 1 }

    /// Gets answered from the cache and gets that needed a fetch, for `status`.
    var cacheLookups: (hits: Int64, misses: Int64) { (cacheHits, cacheMisses) }

    /// Fetches that ended well and badly, for `status`.
    var fetchTotals: (ok: Int64, failed: Int64) {
        fetches.reduce(into: (Int64(0), Int64(0))) { totals, item in
            if item.key.hasSuffix(",error") { totals.1 += item.value } else { totals.0 += item.value }
        }
    }

    /// Gauges are read from the daemon at render time.
    struct Gauges {
        var waiting: [String: Int]
        var running: [String: Int]
        var backlog: Int64
        var slowSuspended: Bool
        var waitingForDisk: Bool
        var cacheBytes: Int64
        var cacheEntries: Int64
        var cacheLimit: Int64
        var connections: Int
        var views: Int
        var pausedHosts: Int
        var background: BackgroundState
    }

    func render(_ gauges: Gauges) -> String {
        var text = ""
        func family(_ name: String, _ type: String, _ help: String) {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        }
        func sample(_ name: String, _ labels: [(String, String)] = [], _ value: String) {
            let rendered = labels.isEmpty ? "" : "{" + labels.map { "\($0.0)=\"\($0.1)\"" }.joined(separator: ",") + "}"
            text += "\(name)\(rendered) \(value)\n"
        }
        func single(_ name: String, _ type: String, _ help: String, _ value: String) {
            family(name, type, help)
            sample(name, [], value)
        }
        func histogram(_ name: String, _ help: String, _ series: [(labels: [(String, String)], Histogram)]) {
            family(name, "histogram", help)
            for (labels, histogram) in series {
                for (index, bound) in Histogram.bounds.enumerated() {
                    sample(name + "_bucket", labels + [("le", "\(bound)")], "\(histogram.counts[index])")
                }
                sample(name + "_bucket", labels + [("le", "+Inf")], "\(histogram.count)")
                sample(name + "_sum", labels, "\(histogram.sum)")
                sample(name + "_count", labels, "\(histogram.count)")
            }
        }
        let lanes = ["fast", "slow"]

        family("prefetchd_fetches_total", "counter", "Fetches that ended, by lane and result (ok, not_modified, error).")
        for lane in lanes {
            for result in ["ok", "not_modified", "error"] {
                sample("prefetchd_fetches_total", [("lane", lane), ("result", result)], "\(fetches["\(lane),\(result)", default: 0])")
            }
        }
        family("prefetchd_fetch_errors_total", "counter", "Failed fetches by error code.")
        for (code, count) in errors.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            sample("prefetchd_fetch_errors_total", [("code", code.rawValue)], "\(count)")
        }
        single("prefetchd_downloaded_bytes_total", "counter", "Body bytes downloaded into the cache.", "\(downloadedBytes)")
        single("prefetchd_cache_hits_total", "counter", "Gets answered from the cache without a fetch.", "\(cacheHits)")
        single("prefetchd_cache_misses_total", "counter", "Gets that needed a fetch.", "\(cacheMisses)")
        single("prefetchd_evictions_total", "counter", "Cache entries evicted, by the size limit or by evict requests.", "\(evictions)")
        single("prefetchd_queued_total", "counter", "URLs accepted into the durable background queue.", "\(queued)")

        single("prefetchd_variant_decodes_total", "counter", "Variants decoded and resized (once per variant).", "\(variantDecodes)")
        single("prefetchd_variant_hits_total", "counter", "Variant requests answered with a variant made before.", "\(variantHits)")
        family("prefetchd_view_events_total", "counter", "Visible view rows answered, by event (view_ready, view_failed).")
        for event in ["view_ready", "view_failed"] {
            sample("prefetchd_view_events_total", [("event", event)], "\(viewEvents[event, default: 0])")
        }

        family("prefetchd_lane_waiting", "gauge", "Tasks waiting in each lane (in memory).")
        for lane in lanes { sample("prefetchd_lane_waiting", [("lane", lane)], "\(gauges.waiting[lane, default: 0])") }
        family("prefetchd_lane_running", "gauge", "Running transfers in each lane.")
        for lane in lanes { sample("prefetchd_lane_running", [("lane", lane)], "\(gauges.running[lane, default: 0])") }
        single("prefetchd_backlog", "gauge", "Queued URLs held only in the durable backlog.", "\(gauges.backlog)")
        single("prefetchd_slow_lane_suspended", "gauge", "1 while urgent work holds the slow lane.", gauges.slowSuspended ? "1" : "0")
        single("prefetchd_waiting_for_disk", "gauge", "1 while the disk is full and background work waits for space.",
               gauges.waitingForDisk ? "1" : "0")
        family("prefetchd_background_mode", "gauge",
               "1 for what the background lane may do now: run, slow (rate-capped) or pause (metered network, battery, power saver, quiet hours, no network).")
        for mode in ["run", "slow", "pause"] {
            sample("prefetchd_background_mode", [("mode", mode)], gauges.background.mode == mode ? "1" : "0")
        }
        family("prefetchd_condition", "gauge",
               "1 while a condition holds (metered, on_battery, power_saver, quiet_hours, offline), with what the configuration asks then.")
        for condition in gauges.background.conditions {
            sample("prefetchd_condition", [("condition", condition.name), ("policy", condition.policy)], condition.active ? "1" : "0")
        }
        single("prefetchd_cache_bytes", "gauge", "Bytes of cached files.", "\(gauges.cacheBytes)")
        single("prefetchd_cache_entries", "gauge", "Cached entries.", "\(gauges.cacheEntries)")
        single("prefetchd_cache_limit_bytes", "gauge", "The cache size limit.", "\(gauges.cacheLimit)")
        single("prefetchd_connections", "gauge", "Open client connections.", "\(gauges.connections)")
        single("prefetchd_views", "gauge", "Connections with a view (a list being scrolled).", "\(gauges.views)")
        single("prefetchd_paused_hosts", "gauge", "Hosts paused by the circuit breaker.", "\(gauges.pausedHosts)")

        histogram("prefetchd_fetch_duration_seconds", "Time from a transfer's start to its end, by lane.",
                  lanes.map { ([("lane", $0)], fetchDuration[$0] ?? Histogram()) })
        histogram("prefetchd_queue_wait_seconds", "Time from a task's creation to its first start, by lane.",
                  lanes.map { ([("lane", $0)], queueWait[$0] ?? Histogram()) })
        histogram("prefetchd_get_latency_seconds", "Time from a get request to its answer.", [([], getLatency)])
        return text
    }
}
