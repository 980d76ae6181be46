import PrefetchProtocol

/// `info`, `status`, `list`, `ping`.
enum InspectCommand {
    static func info(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let url = arguments.operands[0]
        let info: URLInfo
        do {
            info = try client.call(Request(id: nil, op: .info, url: url), URLInfo.self)
        } catch .failed(let error) where !arguments.json {
            // Named as `get` names a URL it could not fetch.
            Output.message("\(Output.shown(url)): \(error.code): \(error.message)")
            return ExitCode.of(error, sent: url)
        }
        if info.cached == nil, info.task == nil, info.failure == nil, Output.hidesPassword(url) {
            Output.message(Output.hiddenPasswordHint)
        }
        if arguments.json { Output.json(info); return ExitCode.ok }
        Output.line("key: \(info.key)")
        if let entry = info.cached {
            Output.line("cached: \(entry.path)")
            Output.line("  bytes: \(entry.bytes)  sha256: \(entry.sha256)")
            if let format = entry.format { Output.line("  image: \(format) \(entry.width ?? 0)x\(entry.height ?? 0)") }
            if let type = entry.contentType { Output.line("  content-type: \(type)") }
            let now = HumanTime.now()
            Output.line("  fetched: \(HumanTime.instant(entry.fetchedAt, now: now)), "
                        + HumanTime.freshness(fetched: entry.fetchedAt, until: entry.freshUntil, now: now))
        } else {
            Output.line("cached: no")
        }
        if let task = info.task {
            Output.line("task: \(task.lane) lane, \(task.state), attempt \(task.attempts), \(task.waiters) waiting")
        }
        if let failure = info.failure { Output.line("failed: \(failure.code): \(failure.message)") }
        return ExitCode.ok
    }

    static func status(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let status = try client.call(Request(id: nil, op: .status), StatusReport.self)
        if arguments.json { Output.json(status); return ExitCode.ok }
        let cache = status.cache
        let lookups = Double(cache.hits) + Double(cache.misses)
        let ratio = lookups > 0 ? Double(cache.hits) / lookups * 100 : 0
        let now = HumanTime.now()
        Output.line("prefetchd \(status.version), pid \(status.pid), up \(HumanTime.span(status.uptime)), "
                    + Units.count(status.connections, "connection"))
        let steppedAside = status.fast.steppedAside ?? 0
        Output.line("fast lane: \(status.fast.running)/\(status.fast.width) running"
                    + (steppedAside > 0 ? " (\(steppedAside) of them past urgent_slice, taking no place)" : "")
                    + ", \(status.fast.waiting) waiting")
        let lingering = status.slow.lingering ?? 0
        Output.line("slow lane: \(status.slow.running)/\(status.slow.width) running"
                    + (lingering > 0 ? " (\(lingering) of them lingering: scrolled away before their responses)" : "")
                    + ", \(status.slow.waiting) waiting, "
                    + "\(status.backlog) more queued\(status.slowSuspended ? " (suspended: urgent work first)" : "")")
        if let background = status.background, background.mode != "run" {
            Output.line("slow lane \(background.summary)" + (background.mode == "pause"
                ? " (queued URLs are kept; prefetchctl queue --now fetches some anyway)" : ""))
        }
        if status.delayed > 0 { Output.line("retrying later: \(status.delayed)") }
        if let parked = status.parked, parked > 0 {
            Output.line("parked: \(parked) (stopped to resume later: demoted, a narrower lane, a background pause, "
                        + "or past background_slice)")
        }
        if let until = status.waitingForDisk {
            Output.line("slow lane waits for the cache to be writable (a full disk or a write error: see the log); "
                        + "trying again at " + HumanTime.instant(until, now: now, dateWhenToday: false)
                        + "; queued URLs are kept")
        }
        Output.line("cache: \(Units.count(cache.entries, "entry", "entries")), \(Units.bytes(cache.bytes)) of "
                    + "\(Units.bytes(cache.limit)), hit ratio \(Int(ratio.rounded()))% "
                    + "(\(Units.count(cache.hits, "hit")), \(Units.count(cache.misses, "miss", "misses"))), \(cache.directory)")
        Output.line("fetched \(status.fetched), failed \(status.failed)")
        for paused in status.pausedHosts {
            Output.line("paused host: \(paused.host) until \(HumanTime.instant(paused.until, now: now, dateWhenToday: false)): "
                        + "failed too often in a row")
        }
        if let count = status.pausedHostCount, count > status.pausedHosts.count {
            Output.line("paused hosts: \(count - status.pausedHosts.count) more (those paused last are listed)")
        }
        return ExitCode.ok
    }

    static func list(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let list = try client.call(Request(id: nil, op: .list, limit: arguments.limit), TaskList.self)
        if arguments.json { Output.json(list); return ExitCode.ok }
        for task in list.tasks {
            let progress = task.bytes.map { bytes in " \(bytes)" + (task.total.map { "/\($0)" } ?? "") + " bytes" } ?? ""
            let place = task.steppedAside == true ? " (past urgent_slice, taking no place)"
                : task.lingering == true ? " (lingering: demoted before its response began, taking no place)" : ""
            Output.line("\(task.lane) \(task.state) \(task.url)\(progress)\(place)")
        }
        if list.backlog > 0 { Output.line("… and \(list.backlog) more queued") }
        return ExitCode.ok
    }

    static func formats(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let list = try client.call(Request(id: nil, op: .formats), FormatList.self)
        if arguments.json { Output.json(list); return ExitCode.ok }
        for format in list.formats {
            Output.line("\(format.allowed ? "allowed" : "refused") \(format.name): \(format.description) "
                        + "(\(format.mimeTypes.joined(separator: ", ")))")
        }
        for name in list.missing { Output.line("missing \(name): allowed, but no gdk-pixbuf loader is installed") }
        return ExitCode.ok
    }

    static func ping(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let pong = try client.call(Request(id: nil, op: .ping), Pong.self)
        if arguments.json { Output.json(pong) } else { Output.line("prefetchd \(pong.version)") }
        return ExitCode.ok
    }
}
