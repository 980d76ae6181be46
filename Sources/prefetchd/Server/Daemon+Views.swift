import PrefetchProtocol
import QueueCore

/// `view`: a connection hands over its ordered list once, then says which rows are visible; the daemon derives the
/// work (visible rows urgent, the window around them prefetched, rows far away dropped) and pushes an event for each
/// visible row as it becomes ready.
extension Daemon {
    func view(_ change: Command.ViewChange, id: RequestID?, connection: Connection, now: Int64) {
        if change.range != nil, let full = connection.allWaitsFull { return fail(connection, id, full) }
        let existing = connection.view
        let urls = change.urls ?? []
        let keepsRows = change.urls == nil || change.append
        guard (keepsRows ? existing?.rowCount ?? 0 : 0) + urls.count <= Command.maximumViewRows else {
            return fail(connection, id, WireError(.badRequest, "a view holds at most \(Command.maximumViewRows) rows"))
        }
        // Read first, so that the bytes a view holds are counted as it holds them (a key may be three times the text).
        let rows = urls.map { text in Result { try CanonicalURL(text) }.mapError(Self.wireError) }
        let adding = zip(urls, rows).reduce(0) { total, row in
            switch row.1 {
            case .success(let url): total + url.key.utf8.count
            case .failure(let error): total + ViewRows.heldBytes(row.0, error)
            }
        }
        guard urls.isEmpty || (keepsRows ? existing?.urlBytes ?? 0 : 0) + adding <= View.maximumURLBytes else {
            return fail(connection, id, WireError(.badRequest, "a view lists at most \(View.maximumURLBytes >> 20) MiB of URLs"))
        }

        let view: View
        if let existing, keepsRows {
            view = existing
        } else {
            // A new list: the old one's work goes on as ordinary background work, as when the connection closes.
            closeView(of: connection)
            view = View(keys: viewKeys)
            connection.open(view)
        }
        guard urls.isEmpty || viewKeys.bytes <= ViewKeys.budget else {
            return fail(connection, id, WireError(.badRequest, "the views of all clients hold \(ViewKeys.budget >> 20) MiB of "
                                                  + "URLs and rows, the most they may: close a view, or list fewer rows"))
        }
        if let variant = change.variant { view.answerRows(with: variant) }
        var rejected: [ViewResult.RejectedRow] = []
        for (text, row) in zip(urls, rows) {
            switch row {
            case .success(let url): view.append(url)
            case .failure(let error):
                rejected.append(.init(row: view.rowCount, url: text, error: error))
                view.reject(text, error)
            }
        }
        let plans = [view.listGrew(by: urls.count), change.range.map { view.show($0) } ?? Viewport.Plan()]
        let shown = view.shown
        reply(connection, id, ViewResult(rows: view.rowCount, first: shown?.first, last: shown?.last,
                                         ahead: shown?.ahead, behind: shown?.behind, rejected: rejected))
        for plan in plans { apply(plan, to: view, of: connection, now: now) }
    }

    /// The connection closed (or replaced its list): visible rows stop being urgent, the rest goes on as background.
    func closeView(of connection: Connection) {
        guard let view = connection.closeView() else { return }
        var plan = view.close()
        // Its rows go on as background work as far as the slow lane's room in memory goes (`backlog_window`), the
        // nearest first; the rest is let go of: closed views kept theirs without bound (100 views of an unreachable
        // host: 102,000 tasks, RSS 25 to 120 MB).
        let demoted = plan.hide.count  // visible rows still being fetched become background work too
        let waiting = scheduler.counts.slowWaiting - slowWaitingOnHeldHosts(at: .now)  // those take no room
        let excess = min(plan.release.count, max(0, waiting + demoted - options.backlogWindow))
        plan.drop += plan.release.suffix(excess)
        plan.release.removeLast(excess)
        apply(plan, to: view, of: connection, now: wallClockMilliseconds())
        // A long list's memory goes back at the end of the turn.
        if view.rowCount >= 10_000 || view.urlBytes >= 8 << 20 { memory.trimSoon() }
    }

    func viewEvent(row: Int, url: String, _ outcome: Result<CacheEntry, WireError>) -> Event {
        var event = Event(event: "view_ready", time: wallClockMilliseconds())
        event.row = row
        event.url = url
        switch outcome {
        case .success(let entry):
            event.path = entry.path
            event.width = entry.width
            event.height = entry.height
            event.format = entry.format
            event.variant = entry.variant
            event.stale = entry.stale
        case .failure(let error):
            event.event = "view_failed"
            event.error = error
        }
        telemetry.viewEventSent(event.event)
        return event
    }

    // MARK: Deriving the work

    /// Applies a plan as one scheduler batch, in its order: release hidden rows, let go of far ones, hold new ones,
    /// queue the window from the farthest row to the nearest (each goes to the front of the slow lane), then make the
    /// visible rows urgent. Rows the cache answers are answered once the batch is over (nothing reads the scheduler
    /// while the batch changes it); only then does anything start.
    private func apply(_ plan: Viewport.Plan, to view: View, of connection: Connection, now: Int64) {
        guard !plan.isEmpty else { return }
        let moment = Moment.now
        var cached: [(row: Int, entry: IndexEntry)] = []
        let actions = scheduler.batch(now: moment) { scheduler in
            let hidden = plan.hide.compactMap { view.rowHidden($0) }
            for waiter in hidden { connection.takeWait(waiter) }
            var actions = scheduler.release(hidden, now: moment)
            for row in plan.drop { if let key = view.key(row) { actions += scheduler.unhold(key, dropping: true, now: moment) } }
            for row in plan.release { if let key = view.key(row) { actions += scheduler.unhold(key, dropping: false, now: moment) } }
            var entering: Set<Int> = []
            for row in plan.hold {
                guard let key = view.key(row) else { continue }
                scheduler.hold(key)
                entering.insert(row)
            }
            for row in plan.prefetch.reversed() {
                guard case .url(let url) = view[row] else { continue }
                let exists = scheduler.hasTask(url.key)
                guard exists || entering.contains(row) else { continue }
                do {
                    let cache = exists ? .missing : cacheState(try store.liveEntry(url.key), now: now)
                    // A URL the durable queue holds (not loaded yet) is its task, not the view's: let go of, a view's
                    // task is forgotten, and the queue's entry with it (scrolling past such rows dropped them).
                    actions += loadIfQueued(url, cache: cache, into: &scheduler, now: moment)
                    let (outcome, queued) = scheduler.queue(url, cache: cache, now: moment, tentative: true, atFront: true)
                    if outcome == .queued { taskCreated(url.key) }
                    actions += queued
                } catch {
                    Log.error("cannot look up \(url.key) for a view: \(error)")
                }
            }
            for row in plan.show {
                actions += show(row, of: view, on: connection, scheduler: &scheduler, now: now, moment: moment, cached: &cached)
            }
            return actions
        }
        for (row, entry) in cached {
            deliver(entry, variant: view.variant, fromCache: true, on: connection, to: .row(row, url: entry.url))
        }
        apply(actions)
    }

    /// A row became visible: answered from the cache (`cached`, once the batch is over), or made urgent work with a
    /// waiter.
    private func show(_ row: Int, of view: View, on connection: Connection, scheduler: inout Scheduler, now: Int64,
                      moment: Moment, cached: inout [(row: Int, entry: IndexEntry)]) -> [Action] {
        switch view[row] {
        case .rejected(let text, let error):
            send(connection, viewEvent(row: row, url: text, .failure(error)))
            return []
        case .url(let url):
            let recipient = Recipient.row(row, url: url.key)
            let entry: IndexEntry?
            do {
                entry = try store.liveEntry(url.key)
            } catch {
                deliver(.failure(Self.wireError(error)), to: recipient, on: connection)
                return []
            }
            let state = cacheState(entry, now: now)
            if state == .fresh, let entry, !scheduler.hasTask(url.key) {
                telemetry.cacheHit()
                store.touch(url.key, now: now)
                cached.append((row, entry))
                return []
            }
            telemetry.cacheMiss()
            let waiter = connection.addWait(for: url.key, variant: view.variant, recipient: recipient)
            view.rowWaits(row, as: waiter)
            let loaded = loadIfQueued(url, cache: state, into: &scheduler, now: moment)
            return loaded + getting(url, waiter: waiter, cache: state, tentative: true, into: &scheduler, now: moment)
        }
    }
}
