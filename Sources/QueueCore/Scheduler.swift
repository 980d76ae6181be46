/// The pure two-lane scheduler: dedup, promote, demote, cancel, retries, the negative cache and per-host limits.
///
/// Events go in as method calls with the current time; what the owner must do comes back as `Action`s.
/// Rules: the fast lane runs up to `fastWidth` tasks (twice that with those past their slice, below); the slow lane
/// admits nothing while the fast lane has tasks waiting or running, and runs up to `slowWidth` otherwise; one task per
/// key; every waiter gets one answer.
/// The fast lane's work waits in *turns*, one per client (and one for what a `promote` made urgent), the one served
/// least recently first: one client's thousand gets do not hold another's one.
///
/// The widths bound the running transfers at every moment, whatever the order of events: a running task changes
/// lane in place only into a lane with room. Otherwise a demoted (or released) one is parked, stopped with its bytes
/// kept, first in line in the slow lane; a promoted one goes on as background work and changes lane in place when its
/// turn in the fast lane comes; a lane made narrower parks its most recent starts.
///
/// A demoted task whose response has not begun takes no bandwidth yet, and parking it would cost its request: a row
/// shown again soon after (a view flicked between two screens faster than the server answers) would ask again, and
/// never load. Such a task *lingers* instead, in no lane, up to `fastWidth` of them: its request stays out, a
/// promotion takes it back in place, and when its response begins (`responseStarted`) it takes a place in the slow
/// lane or is parked then.
///
/// A slow task near its end (its transfer reports its *tail*, or ended while its body is checked and moved into
/// place) leaves its place in the lane to the next one, whose request then reaches the server before this response
/// runs out, or at once, so that the connection never idles between files:
/// up to `slowWidth` such tasks run beyond the width. A background pause parks them too; a narrower lane parks them
/// last. A slow task that ran longer than `backgroundSlice` (a server that trickles, a huge file) steps aside the
/// same way, and while it runs the slow lane passes over its host's other work: one slow server does not hold the
/// background lane from every other. Up to `slowWidth` tasks step aside so; one more that runs out its slice keeps
/// its place but yields it (*preemptible*, its host passed over): it is parked at the back of the slow lane as soon
/// as another slow task could start there, and steps aside without a stop once fewer than `slowWidth` have. Tasks so
/// parked start again, each with a slice of its own, only into a place nothing else could take: two slow servers do
/// not hold the lane, and with nothing else to do it never idles while they wait. One whose park lost its bytes
/// (`parkedWithoutBytes`: it starts over) gets a slice twice as long as its last, so that it still ends while other
/// work keeps coming.
///
/// Views (lists a client scrolls) create *tentative* tasks and *hold* keys: a tentative task that no view holds any
/// more, nobody waits for and that has not started is dropped when a view lets go of it (`unhold(_:dropping:now:)`),
/// and so is a parked one while more than `fastWidth` are parked.
/// An ordinary `get` or `queue` of the key adopts such a task: it is never dropped after that.
///
/// A fast task that has held its place for `urgentSlice` (a server that trickles, a huge file) steps aside the same
/// way: it runs on, but takes no place in the fast lane, so that slow servers do not hold every urgent place from the
/// others (a get of a healthy server waited hours behind eight that trickled). Up to `fastWidth` do so: the fast lane
/// runs at most twice `fastWidth` transfers. One more past its slice keeps its place but yields it (*preemptible*) to
/// urgent work that has not begun: it is parked, first in line in its turns, and steps aside once fewer than
/// `fastWidth` have (sixteen trickles held the lane again).
///
/// A client that leaves *abandons* the fast tasks nobody else waits for: they wait behind the urgent work someone
/// waits for, and one running is parked for it (`disconnect(client:urgentKept:now:)`), until a `get` or `promote`
/// asks for them again. One that has run for `backgroundSlice` is demoted: it suspends the slow lane no longer.
public struct Scheduler: Sendable {
    public struct Configuration: Equatable, Sendable {
        public var fastWidth: Int
        public var slowWidth: Int
        /// At most this many running tasks per host (`host:port`), when set.
        public var perHostLimit: Int?
        public var retry: RetryPolicy
        /// Consecutive transient failures on one host that pause it (circuit breaker); nil never pauses.
        public var hostFailureThreshold: Int?
        /// How long a paused host gets no new work (ms).
        public var hostPause: Int64
        /// At most this many starts per second per host, with bursts (a token bucket per host), when set.
        public var hostStartRate: StartRate?
        /// How long (ms) a slow task runs before it steps aside (takes no place in the lane, its host passed over
        /// while it runs); nil never.
        public var backgroundSlice: Int64?
        /// How long (ms) a fast task holds its place before it steps aside (runs on, taking none; up to `fastWidth`
        /// such); nil never.
        public var urgentSlice: Int64?
        /// At most this many background tasks wait in memory after a `demote`: past it, a demoted waiting task nobody
        /// waits for goes to the durable queue instead (`toBacklog`); nil keeps them all.
        public var slowWaitingKept: Int?

        public init(fastWidth: Int = 8, slowWidth: Int = 1, perHostLimit: Int? = nil, retry: RetryPolicy = RetryPolicy(),
                    hostFailureThreshold: Int? = 5, hostPause: Int64 = 60_000, hostStartRate: StartRate? = nil,
                    backgroundSlice: Int64? = 30_000, urgentSlice: Int64? = 5_000, slowWaitingKept: Int? = nil) {
            self.fastWidth = max(1, fastWidth)
            self.slowWidth = max(1, slowWidth)
            self.perHostLimit = perHostLimit.map { max(1, $0) }
            self.retry = retry
            self.hostFailureThreshold = hostFailureThreshold.map { max(1, $0) }
            self.hostPause = max(0, hostPause)
            self.hostStartRate = hostStartRate
            self.backgroundSlice = backgroundSlice.map { max(1, $0) }
            self.urgentSlice = urgentSlice.map { max(1, $0) }
            self.slowWaitingKept = slowWaitingKept.map { max(0, $0) }
        }
    }

    /// A token bucket's settings: `perSecond` tokens flow in, up to `burst`; every start takes one.
    public struct StartRate: Equatable, Sendable {
        public var perSecond: Double
        public var burst: Int

        public init(perSecond: Double, burst: Int) {
            self.perSecond = perSecond > 0 ? perSecond : 1
            self.burst = max(1, burst)
        }
    }

    struct Task: Sendable {
        var key: String
        var host: String
        var lane: Lane
        var state: TaskState
        var waiters: [Waiter] = []
        var attempts = 0
        var tries = 0
        var revalidate: Bool
        /// Stopped with its bytes kept (`park`): its next start resumes the same attempt.
        var parked = false
        /// Running in the slow lane, promoted while the fast lane was full: it has an entry in the fast queue and
        /// changes lane in place when that entry's turn comes.
        var promotionPending = false
        /// Its start's place in the order of all starts: a narrower lane parks the most recent ones first.
        var startOrder: UInt64 = 0
        /// Created for a view and not adopted by a `get` or `queue`: dropped when no view holds it any more.
        var tentative = false
        /// An ordinary `queue` asked for it (the durable queue may hold it): a client leaving never lets it go.
        var queued = false
        /// In the fast lane, and nobody waits for it since its client left: whenever it waits there (a retry, a
        /// park), it waits behind the urgent work someone waits for (`abandonedQueue`).
        var abandoned = false
        /// A `promote` made it urgent, until a `demote`: a client leaving neither abandons it nor withdraws that.
        var promoted = false
        /// The turns it waits in, in the fast lane: the client whose `get` made it urgent (or `promotedTurn`), and up to
        /// `turnsPerTask` in all of the other clients that asked for it meanwhile: it starts in whichever comes first.
        var turns: [UInt64] = []
        /// The turn whose queue it last started from (or took its promotion in from).
        var servedInTurn: UInt64?
        /// Matches the task's live entry in its lane queue.
        var ticket: UInt64 = 0
        /// Running in the slow lane near its end (its tail), or past its slice: it takes no place in the lane.
        /// Meaningful only while it runs (a start clears it).
        var inTail = false
        /// Stepped aside after running longer than `backgroundSlice` (its `inTail` is set too): the slow lane passes
        /// over its host while it runs there.
        var overran = false
        /// How many times it was parked after its slice without its bytes (`parkedWithoutBytes`): each doubles its
        /// next slice.
        var restarts = 0
        /// Its transfer's response has begun (`responseStarted`); a start clears it.
        var responded = false
        /// Running in no lane: demoted while it waited for its response, with the slow lane full.
        var lingering = false
        /// While delayed: the failure whose retry nobody waits for (`longestWaitedRetry`); a `get` meanwhile is
        /// answered with it at once.
        var notWaitedFor: Failure?
        /// When it last started.
        var startedAt = Moment(milliseconds: 0)
    }

    /// Live entries the slow lane passes over at most to find one it may start: its queue in memory holds a few
    /// backlog windows (1,024 each) of tasks whose hosts are held (paused, or passed over after a slice), and
    /// another host's work may wait behind all of them.
    static let slowPassLimit = 8_192

    /// Live entries a turn of the fast lane passes over at most to find one it may start; past four times this for
    /// all turns together, each further turn's first only.
    static let fastPassLimit = 1_024

    /// The turn in the fast lane of the work a `promote` (or `queue --now`) made urgent, shared by every client: work
    /// nobody waits for takes its turn as one client would.
    static let promotedTurn: UInt64 = .max

    /// At most this many turns hold one task (two viewers of one image, an image a `queue --now` made urgent that a
    /// client then asks for: each waits in its own turn, not behind the first one's backlog).
    static let turnsPerTask = 8

    /// The longest backoff someone waits out (milliseconds): past it (a `Retry-After` of minutes), the waiters get
    /// the failure at once, a `get` that comes meanwhile too, and the retry is background work. So it is after a try
    /// that reached nothing for longer than this (a connect timeout to a dead host): another would hold an urgent
    /// slot as long, while the person waits.
    public static let longestWaitedRetry: Int64 = 5_000

    /// What a waiter is told when the retry of `failure` comes only after `delay`.
    static func retriedLater(_ failure: Failure, in delay: Int64) -> Failure {
        var told = failure
        told.message += "; tried again in \((delay + 999) / 1000) s, in the background"
        told.retryAfter = delay
        return told
    }

    public private(set) var configuration: Configuration
    public private(set) var counts = LaneCounts()
    /// How many times background work (waiting, running or delayed in the slow lane) was made urgent, by a `get` or
    /// `promote`: a sign that what the background lane does is what someone waits for next.
    public private(set) var promotions: UInt64 = 0
    private var tasks: [String: Task] = [:]
    /// Tasks parked (stopped with their bytes kept) and waiting to resume.
    public private(set) var parkedCount = 0
    /// The fast lane's queues, one per turn: the client whose `get` made the work urgent, or `promotedTurn` for what
    /// a `promote` did. They take turns, the one served least recently first, so that one client's thousand gets (or
    /// a `queue --now` of thousands) do not hold another client's one for as long as they take.
    private var fastTurns: [UInt64: LaneQueue] = [:]
    /// The turns with a queue, the one whose last start is oldest (or that never started) first.
    private var turnOrder: [UInt64] = []
    /// Per turn, when it last started fast work (a count of those starts): where it goes back in the order after its
    /// queue emptied. Forgotten when its client has left, once its queue is empty (`leftTurns` until then).
    private var lastServed: [UInt64: UInt64] = [:]
    private var leftTurns: Set<UInt64> = []
    private var turnsServed: UInt64 = 0
    /// The turn the last look at the fast lane took its task from (none: the abandoned queue's, or nothing).
    private var poppedTurn: UInt64?
    private var slowQueue = LaneQueue()
    /// Abandoned fast tasks waiting (`disconnect`): they start once no task someone waits for can.
    private var abandonedQueue = LaneQueue()
    private var delayedKeys: Set<String> = []
    private var runningPerHost: [String: Int] = [:]
    private var waitersByClient: [UInt64: [Waiter: String]] = [:]
    private var negative = NegativeCache(capacity: Scheduler.failuresRemembered)
    /// Per host: transient failures in a row, when the last one came, and the connection whose end it came with.
    private var hostFailures: [String: (count: Int, last: Moment, connection: String?)] = [:]
    private var pausedHosts: [String: Moment] = [:]
    private var nextTicket: UInt64 = 0
    private var startsSoFar: UInt64 = 0
    /// Background work is paused (a metered network, quiet hours): the slow lane starts nothing and parks what runs.
    public private(set) var backgroundPaused = false
    /// The disk is full (or the cache cannot be written): no background work starts before this, and how many such
    /// failures came in a row.
    public private(set) var waitingForDiskUntil: Moment?
    private var diskFailures = 0
    /// Tasks delayed by a failure of this machine (`waitForDisk`): they try again as soon as a fetch succeeds or
    /// someone asks for them, not at the end of their backoff.
    private var diskDelayedKeys: Set<String> = []
    private var reportedHold = false
    /// The running slow tasks that take a place in the lane (not in their tail, not lingering), with when each took
    /// it (started, demoted in place, or a lingering one settled): each steps aside once it has held it for
    /// `backgroundSlice`.
    private var sliceStarts: [String: Moment] = [:]
    /// Per host, its running slow tasks that stepped aside after their slice: its other slow work waits for them.
    private var overrunHosts: [String: Int] = [:]
    /// How many running slow tasks stepped aside after their slice (the sum of `overrunHosts`).
    private var overrunCount = 0
    /// Running slow tasks past their slice that keep their place while `slowWidth` others have stepped aside: each
    /// yields it to any other slow task that could start (it is then parked), and steps aside once there is room.
    private var preemptible: Set<String> = []
    /// Tasks parked at the back of the slow lane after their slice, for another's start, with the ticket of that
    /// entry: an entry whose task started, changed lane or went since (another ticket) is stale.
    private var sliced: [String: UInt64] = [:]
    /// The lingering tasks (at most `fastWidth`): what `settleLingering` looks at, without a scan of every task.
    private var lingeringKeys: Set<String> = []
    /// The tasks running in the fast lane (lingering ones aside): where an abandoned one that gives its place to work
    /// someone waits for is looked for.
    private var fastRunningKeys: Set<String> = []
    /// The running fast tasks that take a place in the lane (not stepped aside), with when each took it (started, or
    /// promoted in place): each steps aside once it has held it for `urgentSlice`.
    private var fastSliceStarts: [String: Moment] = [:]
    /// The running fast tasks that stepped aside after their slice (at most `fastWidth`): they take no place.
    private var fastSteppedAside: Set<String> = []
    /// Running fast tasks past their slice while `fastWidth` others have stepped aside: each keeps its place but yields
    /// it to urgent work that has not begun (it is parked), and steps aside once there is room.
    private var fastPreemptible: Set<String> = []
    /// How many view rows hold each key.
    private var holds: [String: Int] = [:]
    /// Per host: tokens left and when they were counted (only with `hostStartRate`).
    private var buckets: [String: (tokens: Double, at: Moment)] = [:]
    /// When a host that has waiting work gets its next token, if admission waits for one.
    private var nextToken: Moment?
    /// The hosts whose waiting urgent work the last look at the fast lane passed over for `perHostLimit` alone.
    private var fastHostsAtLimit: Set<String> = []
    /// Inside `batch`, or between `deferAdmission` and `admitDeferred` (as many deep as they nest): nothing starts
    /// until the outermost ends.
    private var admissionDeferrals = 0
    private var random: SplitMix64

    public init(configuration: Configuration = Configuration(), seed: UInt64) {
        self.configuration = configuration
        self.random = SplitMix64(seed: seed)
    }

    // MARK: Queries

    /// Whether `key` has a task: what `task(key) != nil` says, without building its summary.
    public func hasTask(_ key: String) -> Bool { tasks[key] != nil }

    public func task(_ key: String) -> TaskInfo? {
        tasks[key].map {
            TaskInfo(key: $0.key, host: $0.host, lane: $0.lane, state: $0.state, waiters: $0.waiters,
                     attempts: $0.attempts, tries: $0.tries, revalidate: $0.revalidate, tentative: $0.tentative,
                     promotionPending: $0.promotionPending, lingering: $0.lingering, servedInTurn: $0.servedInTurn)
        }
    }

    /// Every task, in no particular order.
    public var allTasks: [TaskInfo] { tasks.keys.compactMap(task) }

    /// The running tasks, in key order.
    public var runningTasks: [TaskInfo] {
        tasks.values.filter { $0.state == .running }.map(\.key).sorted().compactMap(task)
    }

    /// Up to `limit` tasks, the running ones first, each part in key order (what `list` shows). Only what is shown
    /// is summarised and sorted: over 300,000 tasks, sorting them all took 370 ms a request.
    /// Whether `key` is a running urgent fetch that stepped aside after its slice (it takes no place in the lane).
    public func hasSteppedAside(_ key: String) -> Bool { fastSteppedAside.contains(key) }

    public func firstTasks(_ limit: Int) -> [TaskInfo] {
        guard limit > 0 else { return [] }
        var running: [String] = [], others = SmallestKeys(capacity: limit)
        for (key, task) in tasks {
            if task.state == .running { running.append(key) } else { others.offer(key) }
        }
        return (running.sorted() + others.sorted).prefix(limit).compactMap(task)
    }

    /// The remembered permanent failure for `key`, if it has not expired at `now`.
    public func rememberedFailure(_ key: String, now: Moment) -> Failure? {
        negative.failure(key, at: now)
    }

    /// Hosts the circuit breaker paused, with the end of each pause (expired pauses go in `advance(to:)`).
    public var paused: [(host: String, until: Moment)] {
        pausedHosts.map { ($0.key, $0.value) }.sorted { $0.host < $1.host }
    }

    /// What urgent work for `host` is told while the circuit breaker has it paused at `now` (`host_paused`), else nil.
    public func pauseFailure(of host: String, at now: Moment) -> Failure? {
        guard let until = pausedHosts[host], until > now else { return nil }
        return Self.hostPaused(host, until: until, now: now)
    }

    /// Whether the circuit breaker has `host` paused at `now`.
    public func isPaused(_ host: String, at now: Moment) -> Bool { pausedHosts[host].map { $0 > now } ?? false }

    /// Whether a background fetch of `host` ran past its slice (and runs, or was parked for another and waits): the
    /// slow lane passes over its host's other work until it ends.
    public func isPassedOver(_ host: String) -> Bool {
        overrunHosts[host] != nil || preemptible.contains { tasks[$0]!.host == host } || slicedTask(of: host) != nil
    }

    /// A task of `host` parked at the back of the slow lane after its slice, still waiting there.
    private func slicedTask(of host: String) -> String? {
        sliced.first { isSliced($0.key) && tasks[$0.key]!.host == host }?.key
    }

    /// Whether `key` waits at the back of the slow lane, where its slice parked it.
    private func isSliced(_ key: String) -> Bool {
        guard let ticket = sliced[key], let task = tasks[key] else { return false }
        return task.ticket == ticket && task.state == .waiting && task.lane == .slow
    }

    /// Background tasks waiting for a host that is paused at `now` or passed over: nothing of theirs can start until
    /// the pause, or the fetch past its slice, ends.
    public func slowWaitingOnHeldHosts(at now: Moment) -> Int {
        guard !overrunHosts.isEmpty || !preemptible.isEmpty || !sliced.isEmpty
                || pausedHosts.values.contains(where: { $0 > now }) else {
            return 0
        }
        return tasks.values.count {
            $0.state == .waiting && $0.lane == .slow && (isPaused($0.host, at: now) || isPassedOver($0.host))
        }
    }

    /// When `advance(to:)` next has something to do (a retry becoming due, a host pause ending, a slow task's slice
    /// running out), if ever.
    public var nextDeadline: Moment? {
        let retries = delayedKeys.lazy.compactMap { key -> Moment? in
            if case .delayed(let until) = self.tasks[key]?.state { return until }
            return nil
        }
        let sliceEnd = sliceStarts.lazy.compactMap { self.sliceEnd(of: $0.key, startedAt: $0.value) }.min()
        let abandonedSliceEnd = configuration.backgroundSlice.flatMap { slice in
            fastRunningKeys.lazy.filter { self.tasks[$0]!.abandoned }.map { self.tasks[$0]!.startedAt + slice }.min()
        }
        let urgentSliceEnd = urgentSliceEnds.map(\.end).min()
        return [retries.min(), pausedHosts.values.min(), nextToken, waitingForDiskUntil, sliceEnd, abandonedSliceEnd,
                urgentSliceEnd].compactMap { $0 }.min()
    }

    /// How many view rows hold `key`.
    public func holdCount(_ key: String) -> Int { holds[key, default: 0] }

    // MARK: Events

    /// An urgent request: answer from the cache, attach to (and promote) the existing task, or start a fast one.
    /// A `tentative` request (a view's visible row) creates a tentative task; an ordinary one adopts the task.
    public mutating func get(_ url: CanonicalURL, waiter: Waiter, cache: CacheState, now: Moment,
                             tentative: Bool = false) -> [Action] {
        precondition(waitersByClient[waiter.client]?[waiter] == nil, "waiter \(waiter) registered twice")
        let key = url.key
        if cache == .fresh, tasks[key] == nil { return [.answer(waiter, .ready)] }
        if tasks[key] == nil, let failure = rememberedFailure(key, now: now) { return [.answer(waiter, .failed(failure))] }
        if tasks[key]?.state != .running, let paused = pauseFailure(of: url.authority, at: now) {
            return [.answer(waiter, .failed(paused))]
        }
        if cache != .fresh, case .delayed(let until)? = tasks[key]?.state, let failure = tasks[key]!.notWaitedFor {
            if !tentative { tasks[key]!.tentative = false }  // asked for, as by a get that waits
            return [.answer(waiter, .failed(Self.retriedLater(failure, in: max(0, until.milliseconds - now.milliseconds))))]
        }
        var actions: [Action] = []
        if tasks[key] == nil {
            insert(Task(key: key, host: url.authority, lane: .fast, state: .waiting, revalidate: cache == .stale,
                        tentative: tentative, turns: [waiter.client]), atFront: false)
        } else {
            if !tentative { tasks[key]!.tentative = false }
            takeBack(key, turn: waiter.client)
            promote(key, turn: waiter.client, now: now, into: &actions)
            join(key, turn: waiter.client)
        }
        tasks[key]!.waiters.append(waiter)
        leftTurns.remove(waiter.client)  // a client back (the daemon never reuses an id; a caller may)
        waitersByClient[waiter.client, default: [:]][waiter] = key
        counts.waiters += 1
        admit(now: now, into: &actions)
        return actions
    }

    /// A background request: a new slow task unless the key is cached, known, or failed recently. `atFront` puts
    /// the task first in the slow lane (also when it waits there already); a `tentative` request (a view's look-ahead)
    /// creates a tentative task, an ordinary one adopts an existing task.
    public mutating func queue(_ url: CanonicalURL, cache: CacheState, now: Moment, tentative: Bool = false,
                               atFront: Bool = false) -> (QueueOutcome, [Action]) {
        let key = url.key
        if var task = tasks[key] {
            if !tentative {
                task.tentative = false
                task.queued = true
            }
            if atFront, task.lane == .slow, task.state == .waiting {
                let wasSliced = isSliced(key)
                task.ticket = takeTicket()
                slowQueue.pushFront(.init(key: key, ticket: task.ticket))
                if wasSliced { sliced[key] = task.ticket }  // first in line, still one whose slice ran out
            }
            tasks[key] = task
            return (.already, [])
        }
        if cache == .fresh { return (.cached, []) }
        if let failure = rememberedFailure(key, now: now) { return (.skipped(failure), []) }
        insert(Task(key: key, host: url.authority, lane: .slow, state: .waiting, revalidate: cache == .stale,
                    tentative: tentative, queued: !tentative), atFront: atFront)
        var actions: [Action] = []
        admit(now: now, into: &actions)
        return (.queued, actions)
    }

    /// Makes `key` urgent: a waiting slow task moves to the fast lane; a running one changes lane in place, or, when
    /// the fast lane is full, goes on as background work until its turn in the fast lane comes.
    public mutating func promote(_ key: String, now: Moment) -> [Action] {
        var actions: [Action] = []
        takeBack(key, turn: Self.promotedTurn)
        tasks[key]?.promoted = true
        promote(key, turn: Self.promotedTurn, now: now, into: &actions)
        admit(now: now, into: &actions)
        return actions
    }

    /// Makes `key` background work: a waiting fast task goes to the front of the slow lane (or, nobody waiting for it
    /// with `slowWaitingKept` tasks waiting there, to the durable queue: `toBacklog`); a running one changes
    /// lane in place (into a preemptible task's place if need be), or, when the slow lane is full, lingers while its
    /// response has not begun (up to `fastWidth` such) and is parked otherwise (stopped with its bytes kept) at the
    /// front of the slow lane to resume from where it stopped. Its waiters stay attached. A running slow task waiting
    /// for its promotion stays background work.
    public mutating func demote(_ key: String, now: Moment) -> [Action] {
        var actions: [Action] = []
        guard demote(key, now: now, into: &actions) else { return [] }
        admit(now: now, into: &actions)
        return actions
    }

    /// `demote(_:now:)` without the admission that follows; returns whether anything changed.
    @discardableResult
    private mutating func demote(_ key: String, now: Moment, into actions: inout [Action]) -> Bool {
        guard tasks[key] != nil else { return false }
        tasks[key]!.abandoned = false  // background work from now on
        tasks[key]!.promoted = false
        var task = tasks[key]!
        if task.promotionPending { return withdrawPromotion(key, into: &actions) }
        guard task.lane == .fast else { return false }
        switch task.state {
        case .waiting where leavesMemory(task):
            // `queue --now` then `demote` of 200,000 URLs held them all in memory (240 MB).
            remove(key, answering: .cancelled, into: &actions, as: Action.toBacklog)
        case .waiting:
            counts.fastWaiting -= 1
            counts.slowWaiting += 1
            task.lane = .slow
            task.ticket = takeTicket()
            slowQueue.pushFront(.init(key: key, ticket: task.ticket))
            tasks[key] = task
        case .running where hasSlowPlace:
            takeSlowPlace(into: &actions)
            moveRunning(key, to: .slow, now: now, into: &actions)
        case .running where !task.responded && !backgroundPaused && counts.lingering < configuration.fastWidth:
            leaveFastLane(key)
            counts.lingering += 1
            lingeringKeys.insert(key)
            tasks[key]!.lane = .slow
            tasks[key]!.lingering = true
            actions.append(.changeLane(key: key, lane: .slow))
        case .running:
            park(key, waitingIn: .slow, into: &actions)
        case .delayed:
            tasks[key]!.lane = .slow
        }
        return true
    }

    /// Whether a waiting fast task that becomes background work leaves memory for the durable queue (`toBacklog`):
    /// nobody waits for it, it is not parked, tentative or held, and `slowWaitingKept` tasks wait in the slow lane.
    private func leavesMemory(_ task: Task) -> Bool {
        configuration.slowWaitingKept.map { counts.slowWaiting >= $0 } == true
            && task.waiters.isEmpty && !task.parked && !task.tentative && holds[task.key] == nil
    }

    /// A running task's response began. One that lingers (the slow lane is full, or it would have taken a place
    /// there) is parked, first in line in the lane it waits for: its bytes would take the link from the lanes.
    public mutating func responseStarted(_ key: String, now: Moment) -> [Action] {
        guard let task = tasks[key], task.state == .running, !task.responded else { return [] }
        tasks[key]!.responded = true
        guard task.lingering else { return [] }
        var actions: [Action] = []
        park(key, waitingIn: task.promotionPending ? .fast : .slow, into: &actions)
        admit(now: now, into: &actions)
        return actions
    }

    /// A running slow task is near its end (its tail): the next task may start now, so that its request reaches the
    /// server before this response runs out. Ignored for any other task.
    public mutating func tailReached(_ key: String, now: Moment) -> [Action] {
        guard let task = tasks[key], task.state == .running, task.lane == .slow, !task.inTail, !task.lingering else {
            return []
        }
        tasks[key]!.inTail = true
        counts.slowInTail += 1
        sliceStarts.removeValue(forKey: key)
        preemptible.remove(key)
        var actions: [Action] = []
        admit(now: now, into: &actions)
        return actions
    }

    /// Drops `key`'s task: its waiters are answered `cancelled`, a running fetch is aborted.
    public mutating func cancel(_ key: String, now: Moment) -> [Action] {
        guard let task = tasks[key] else { return [] }
        var actions: [Action] = []
        if task.state == .running { actions.append(.abort(key: key)) }
        remove(key, answering: .cancelled, into: &actions)
        admit(now: now, into: &actions)
        return actions
    }

    /// Runs several events as one: nothing starts until all are in, so that a view's scroll (releases, drops, queues
    /// at the front, gets) starts the work the new state calls for, not what each step alone would have started.
    /// Returns the events' actions, then those of the admission.
    public mutating func batch(now: Moment, _ events: (inout Scheduler) -> [Action]) -> [Action] {
        deferAdmission()
        let actions = events(&self)
        return actions + admitDeferred(now: now)
    }

    /// Runs the events until `admitDeferred` as one, as `batch` does, for a caller that applies each event's actions
    /// as it comes: work to start is looked for once, at the end, not after each event (a `queue --now` of 1,800 URLs
    /// of a paused host went through every waiting task after each promotion: 845 ms).
    public mutating func deferAdmission() { admissionDeferrals += 1 }

    /// Ends a `deferAdmission`; at the outermost, returns what may start now.
    public mutating func admitDeferred(now: Moment) -> [Action] {
        precondition(admissionDeferrals > 0, "admitDeferred without deferAdmission")
        admissionDeferrals -= 1
        var actions: [Action] = []
        admit(now: now, into: &actions)
        return actions
    }

    /// Pauses background work or lets it go on. Paused, the slow lane has no room: what runs in it is parked (stopped
    /// with its bytes kept, to resume from there), nothing starts in it, and demoted work waits in it; urgent work is
    /// not affected, and a promotion takes background work out of the pause.
    public mutating func pauseBackground(_ paused: Bool, now: Moment) -> [Action] {
        guard paused != backgroundPaused else { return [] }
        backgroundPaused = paused
        var actions: [Action] = []
        admit(now: now, into: &actions)
        return actions
    }

    /// Restores a host pause from before a restart.
    public mutating func pause(host: String, until: Moment) {
        pausedHosts[host] = until
        // It failed too often in a row when it was paused: after the pause, one more failure pauses it again.
        if let threshold = configuration.hostFailureThreshold {
            let pausedAt = Moment(milliseconds: until.milliseconds.saturatingSubtract(configuration.hostPause))
            hostFailures[host] = (threshold, pausedAt, nil)
        }
    }

    /// Restores a permanent failure remembered before a restart.
    public mutating func remember(_ key: String, _ failure: Failure, until: Moment) {
        negative.remember(key, failure, until: until)
    }

    /// At most this many permanent failures are remembered; past it, the one remembered first is forgotten first.
    public static let failuresRemembered = 10_000

    /// A client went away: its waiters leave without an answer; their fetches go on. Each task's waiters are
    /// filtered once, however many of them were the client's (one at a time, 100,000 gets of one URL cost seconds).
    ///
    /// The fast tasks nobody waits for any more are *abandoned*: waiting (now, or after a retry or a park), they
    /// start once no task someone waits for can (a client that asked for 1,000 URLs and left delayed every `get` after
    /// it); running, each gives its place to work someone waits for when the lane is full (`fillFastLane`). A
    /// promotion only its waiters asked for is withdrawn: the transfer goes on as background work. A task a `promote`
    /// made urgent is neither.
    ///
    /// While more than `urgentKept` tasks wait in the fast lane, the urgent tasks that only this client's `get`s
    /// asked for, that nobody waits for any more and that have not started are let go (`letGo`), its most recent
    /// requests first, until `urgentKept` wait; then, still past it, the abandoned downloads of clients gone before
    /// that were parked for work someone waits for (not queued, not a view's), with their bytes. A client that asked
    /// for thousands of URLs and left, again and again, kept them all in memory, and the background lane suspended
    /// behind work nobody waited for.
    public mutating func disconnect(client: UInt64, urgentKept: Int = .max, now: Moment) -> [Action] {
        if fastTurns[client] == nil { lastServed.removeValue(forKey: client) } else { leftTurns.insert(client) }
        guard let waiters = waitersByClient.removeValue(forKey: client) else { return [] }
        for key in Set(waiters.values) where tasks[key] != nil {
            tasks[key]!.waiters.removeAll { $0.client == client }
            leaveTurn(of: client, key)
        }
        counts.waiters -= waiters.count
        let oldestFirst = waiters.sorted { $0.key.request < $1.key.request }.map(\.value)
        var actions: [Action] = []
        for key in oldestFirst.reversed() where counts.fastWaiting > urgentKept {
            guard let task = tasks[key], task.lane == .fast, task.state == .waiting, task.waiters.isEmpty, !task.queued,
                  !task.tentative, !task.parked, holds[key] == nil else { continue }
            remove(key, answering: .cancelled, into: &actions, as: Action.letGo)
        }
        if counts.fastWaiting > urgentKept {
            // Still past it: the downloads of clients gone before, parked for work someone waited for (each client
            // that left with transfers running could add `fastWidth` of them), in key order.
            let parkedAbandoned = tasks.values.filter {
                $0.abandoned && $0.parked && $0.state == .waiting && $0.lane == .fast && $0.waiters.isEmpty && !$0.queued
                    && !$0.tentative && holds[$0.key] == nil
            }.map(\.key).sorted()
            for key in parkedAbandoned where counts.fastWaiting > urgentKept {
                remove(key, answering: .cancelled, into: &actions, as: Action.letGo)
            }
        }
        var placesChanged = false  // parked, or an abandoned task runs: work someone waits for may take its place
        for key in oldestFirst {
            guard let task = tasks[key], task.waiters.isEmpty, !task.promoted else { continue }
            if task.promotionPending {
                // Urgent only for those who left.
                placesChanged = withdrawPromotion(key, into: &actions) || placesChanged
            } else if task.lane == .fast, !task.abandoned {
                abandon(key)
                placesChanged = placesChanged || task.state == .running
            }
        }
        if placesChanged { demoteAbandonedAfterSlice(now: now, into: &actions) }
        if !actions.isEmpty || placesChanged { admit(now: now, into: &actions) }
        return actions
    }

    /// Waiters stop waiting (a view's rows scrolled out of sight); each fetch goes on, as background work when
    /// nobody else waits for it (`demote`): a running one goes on in place while the slow lane has room and is parked
    /// otherwise, so the slow lane's width holds however fast a view scrolls. Each task's waiters are filtered once,
    /// however many of them leave; tasks are demoted in the order their last waiter left, as one at a time would.
    public mutating func release(_ waiters: [Waiter], now: Moment) -> [Action] {
        var leaving: [String: Set<Waiter>] = [:]
        var lastLeft: [String: Int] = [:]  // where in `waiters` each task's last leaving waiter is
        for (position, waiter) in waiters.enumerated() {
            guard let key = unregister(waiter) else { continue }
            leaving[key, default: []].insert(waiter)
            lastLeft[key] = position
        }
        for (key, gone) in leaving { tasks[key]?.waiters.removeAll { gone.contains($0) } }
        var actions: [Action] = []
        for key in lastLeft.keys.sorted(by: { lastLeft[$0]! < lastLeft[$1]! }) where tasks[key]?.waiters.isEmpty == true {
            actions += demote(key, now: now)
        }
        return actions
    }

    /// A view row holds `key`: a tentative task for it is not dropped while any row holds it.
    public mutating func hold(_ key: String) {
        holds[key, default: 0] += 1
    }

    /// A view row lets go of `key`. With `dropping`, when no row holds it any more, a tentative task for it that
    /// nobody waits for and that is not running goes: its `forget` is returned. A parked one goes with the bytes it
    /// kept only while more than `fastWidth` tasks are parked: the downloads a screen had begun are kept for a
    /// scroll back, but a list flicked through does not leave every screen it passed to the slow lane.
    public mutating func unhold(_ key: String, dropping: Bool, now: Moment) -> [Action] {
        guard let count = holds[key] else { return [] }
        if count > 1 {
            holds[key] = count - 1
            return []
        }
        holds.removeValue(forKey: key)
        holds.shrinkIfSparse()
        guard dropping, let task = tasks[key], task.tentative, task.waiters.isEmpty, task.state != .running,
              !task.parked || parkedCount > configuration.fastWidth else { return [] }
        var actions: [Action] = []
        remove(key, answering: .cancelled, into: &actions)
        admit(now: now, into: &actions)
        return actions
    }

    /// A running fetch ended. Success answers every waiter; a transient failure is retried after a backoff until
    /// the attempts run out; a permanent failure is answered and remembered for the negative TTL.
    ///
    /// A failure of queued work nobody waits for that did not reach its host, while that host was failing already,
    /// costs the URL no attempt: a network down or a dead host would otherwise drop the whole queue, a few URLs per
    /// host pause. The circuit breaker paces those tries instead, so without one nothing is given back. (A `get`'s
    /// task, whose waiters left or were answered, counts each: it would otherwise be tried for ever.)
    public mutating func finish(_ key: String, _ outcome: FetchOutcome, now: Moment) -> [Action] {
        guard var task = tasks[key], task.state == .running else { return [] }
        var actions: [Action] = []
        let hostWasFailing = failuresInARow(task.host, now: now) > 0
        let pausedUntil = noteHostOutcome(task.host, outcome, now: now, into: &actions)
        if case .failure(let failure) = outcome, failure.isTransient, failure.unreached, hostWasFailing,
           task.waiters.isEmpty, task.queued, !Self.localFailureCodes.contains(failure.code),
           configuration.hostFailureThreshold != nil, configuration.hostPause > 0 {
            task.attempts -= 1
            tasks[key]!.attempts = task.attempts
        }
        switch outcome {
        case .success:
            diskFailures = 0
            waitingForDiskUntil = nil
            remove(key, answering: .ready, into: &actions)
            // A file was written: what waited for this machine tries again now, in the order it would have.
            let waking = diskDelayedKeys.compactMap { key -> (Moment, String)? in
                guard case .delayed(let until)? = tasks[key]?.state else { return nil }
                return (until, key)
            }.sorted { $0 < $1 }
            for (_, key) in waking { wake(key) }
            diskDelayedKeys = []
        case .failure(let failure) where Self.localFailureCodes.contains(failure.code):
            waitForDisk(key, failure, now: now, into: &actions)
        case .failure(let failure) where failure.isTransient && task.attempts < configuration.retry.maxAttempts:
            let delay = configuration.retry.delay(after: max(task.attempts, 1), retryAfter: failure.retryAfter,
                                                  random: &random)
            leaveRunning(task)
            tasks[key]!.state = .delayed(until: now + delay)
            tasks[key]!.lingering = false
            if task.promotionPending {
                // Urgent waiters wait for it: the retry runs in the fast lane.
                tasks[key]!.lane = .fast
                tasks[key]!.promotionPending = false
            }
            let triedLong = failure.unreached && now.milliseconds - task.startedAt.milliseconds > Self.longestWaitedRetry
            let notWaitedFor = (delay > Self.longestWaitedRetry || triedLong) && pausedUntil == nil  // else below
            tasks[key]!.notWaitedFor = notWaitedFor ? failure : nil
            if notWaitedFor, !task.waiters.isEmpty {
                for waiter in task.waiters {
                    unregister(waiter)
                    actions.append(.answer(waiter, .failed(Self.retriedLater(failure, in: delay))))
                }
                tasks[key]!.waiters = []
                if !task.promoted {
                    tasks[key]!.lane = .slow
                    tasks[key]!.abandoned = false
                }
            }
            counts.delayed += 1
            delayedKeys.insert(key)
        case .failure(let failure):
            if !failure.isTransient {
                let until = now + configuration.retry.negativeTTL
                negative.expire(at: now)
                negative.remember(key, failure, until: until)
                actions.append(.remember(key: key, failure, until: until))
            }
            remove(key, answering: .failed(failure), into: &actions)
        }
        if pausedUntil != nil, case .failure(let failure) = outcome, let waiters = tasks[key]?.waiters {
            // This task's own failure paused the host: its waiters learn what happened to their URL, not only that
            // the host is paused.
            for waiter in waiters {
                unregister(waiter)
                actions.append(.answer(waiter, .failed(failure)))
            }
            tasks[key]!.waiters = []
        }
        if let pausedUntil { failFast(onHost: task.host, until: pausedUntil, now: now, into: &actions) }
        admit(now: now, into: &actions)
        return actions
    }

    /// The disk is full, or another failure of this machine (`internal`: the cache not writable, out of descriptors),
    /// not of the URL: the waiters get the failure at once; the task keeps its attempts and waits, as background
    /// work, for a retry after a backoff that grows while such failures go on; meanwhile no background work starts.
    /// Nothing acknowledged is dropped for a fault of this machine.
    private mutating func waitForDisk(_ key: String, _ failure: Failure, now: Moment, into actions: inout [Action]) {
        diskFailures += 1
        let until = now + configuration.retry.delay(after: diskFailures, retryAfter: nil, random: &random)
        waitingForDiskUntil = max(waitingForDiskUntil ?? until, until)
        var task = tasks[key]!
        leaveRunning(task)
        task.lingering = false
        for waiter in task.waiters {
            unregister(waiter)
            actions.append(.answer(waiter, .failed(failure)))
        }
        task.waiters = []
        task.lane = .slow
        task.promotionPending = false
        task.attempts -= 1  // not the URL's fault: the attempt is given back
        task.state = .delayed(until: waitingForDiskUntil!)
        task.notWaitedFor = nil
        tasks[key] = task
        counts.delayed += 1
        delayedKeys.insert(key)
        diskDelayedKeys.insert(key)
    }

    /// A delayed task waits in its lane again now.
    private mutating func wake(_ key: String) {
        delayedKeys.remove(key)
        diskDelayedKeys.remove(key)
        counts.delayed -= 1
        tasks[key]!.state = .waiting
        enqueue(key, lane: tasks[key]!.lane, atFront: false)
    }

    /// Time passed: due retries rejoin their lanes, expired negative entries go, slow tasks past their slice step
    /// aside.
    public mutating func advance(to now: Moment) -> [Action] {
        // Earliest deadline first (then by key): a Set's order changes from run to run, the actions must not.
        let due = delayedKeys.compactMap { key -> (Moment, String)? in
            guard case .delayed(let until)? = tasks[key]?.state, until <= now else { return nil }
            return (until, key)
        }.sorted { $0 < $1 }
        for (_, key) in due { wake(key) }
        negative.expire(at: now)
        let paused = pausedHosts.count
        pausedHosts = pausedHosts.filter { $0.value > now }
        if pausedHosts.count < paused {  // a pause ended: failure counts gone stale go too
            hostFailures = hostFailures.filter { failuresInARow($0.key, now: now) > 0 }
        }
        if let rate = configuration.hostStartRate {
            buckets = buckets.filter { Self.tokens($0.value, rate: rate, now: now) < Double(rate.burst) }
        }
        stepAsideAfterSlice(now: now)
        stepAsideAfterUrgentSlice(now: now)
        var actions: [Action] = []
        // Lingering tasks take the places freed or made preemptible past a slice before the abandoned tasks demoted
        // now: they were demoted first.
        settleLingering(now: now, into: &actions)
        demoteAbandonedAfterSlice(now: now, into: &actions)
        admit(now: now, into: &actions)
        return actions
    }

    /// The owner parked `key` without its bytes (the server gave no validator to resume with, or parked downloads keep
    /// too much already): it will start over. When its slice parked it, its next slices are twice as long, so that
    /// it still ends while other work keeps coming; otherwise nothing changes.
    public mutating func parkedWithoutBytes(_ key: String) {
        guard isSliced(key) else { return }
        tasks[key]!.restarts += 1
    }

    /// Applies new lane widths and limits; more work may start at once, and a narrower lane parks the transfers
    /// that ran beyond its new width.
    public mutating func reconfigure(_ configuration: Configuration, now: Moment) -> [Action] {
        self.configuration = configuration
        stepAsidePreemptible()
        // A narrower fast lane: those that stepped aside last beyond its width take a place again, preemptible.
        while fastSteppedAside.count > configuration.fastWidth,
              let key = fastSteppedAside.max(by: startedBefore) {
            fastSteppedAside.remove(key)
            counts.fastSteppedAside -= 1
            fastPreemptible.insert(key)
        }
        stepAsideAfterUrgentSlice(now: now)
        var actions: [Action] = []
        admit(now: now, into: &actions)
        return actions
    }

    // MARK: Internals

    /// Slow tasks that have run for `backgroundSlice` step aside: as in their tail, they take no place in the lane,
    /// and the slow lane passes over their hosts' other work while they run. Up to `slowWidth` of them: one more keeps
    /// its place, preemptible, until another slow task could start there or there is room to step aside.
    private mutating func stepAsideAfterSlice(now: Moment) {
        sliced = sliced.filter { isSliced($0.key) }
        guard configuration.backgroundSlice != nil else { return }
        for key in sliceStarts.filter({ sliceEnd(of: $0.key, startedAt: $0.value)! <= now }).keys.sorted() {
            sliceStarts.removeValue(forKey: key)
            if overrunCount < configuration.slowWidth { stepAside(key) } else { preemptible.insert(key) }
        }
    }

    /// Fast tasks that have held their place for `urgentSlice` are preemptible, and step aside while fewer than
    /// `fastWidth` have: they run on, taking no place. An abandoned one does not: it is demoted after its
    /// `backgroundSlice` instead.
    private mutating func stepAsideAfterUrgentSlice(now: Moment) {
        for (key, end) in urgentSliceEnds where end <= now {
            fastSliceStarts.removeValue(forKey: key)
            fastPreemptible.insert(key)
        }
        stepAsideUrgentPreemptible()
    }

    /// Room past a slice goes at once to the preemptible fast tasks, the oldest start first: they step aside.
    private mutating func stepAsideUrgentPreemptible() {
        while fastSteppedAside.count < configuration.fastWidth, let key = oldestFastPreemptible {
            fastPreemptible.remove(key)
            fastSteppedAside.insert(key)
            counts.fastSteppedAside += 1
        }
    }

    /// The preemptible fast task that started first: the first to step aside, or to yield its place.
    private var oldestFastPreemptible: String? {
        fastPreemptible.min(by: startedBefore)
    }

    /// When the urgent slice of each fast task that takes a place ends (none for an abandoned one, nor without
    /// `urgentSlice`).
    private var urgentSliceEnds: [(key: String, end: Moment)] {
        guard let slice = configuration.urgentSlice else { return [] }
        return fastSliceStarts.filter { !tasks[$0.key]!.abandoned }.map { ($0.key, $0.value + slice) }
    }

    /// A task starts running in the fast lane (or changes lane into it): it takes a place, its slice begins `now`.
    private mutating func enterFastLane(_ key: String, now: Moment) {
        counts.fastRunning += 1
        fastRunningKeys.insert(key)
        fastSliceStarts[key] = now
    }

    /// A running task leaves the fast lane (it ends, is parked, lingers or changes lane); one that stepped aside leaves
    /// room to the preemptible ones.
    private mutating func leaveFastLane(_ key: String) {
        counts.fastRunning -= 1
        fastRunningKeys.remove(key)
        fastSliceStarts.removeValue(forKey: key)
        fastPreemptible.remove(key)
        if fastSteppedAside.remove(key) != nil {
            counts.fastSteppedAside -= 1
            stepAsideUrgentPreemptible()
        }
    }

    /// The places running fast tasks take: one each, but none for those that stepped aside after their slice.
    private var fastOccupied: Int { counts.fastRunning - counts.fastSteppedAside }

    /// An abandoned task that has run for `backgroundSlice` since its start is background work from then on, as a
    /// `demote` makes it (the oldest start first): work nobody waits for suspends the slow lane for a slice at most (a
    /// `get --timeout` given up on a server that trickles suspended every background fetch for hours).
    private mutating func demoteAbandonedAfterSlice(now: Moment, into actions: inout [Action]) {
        guard let slice = configuration.backgroundSlice else { return }
        let due = fastRunningKeys.filter { tasks[$0]!.abandoned && tasks[$0]!.startedAt + slice <= now }
        for key in due.sorted(by: startedBefore) {
            demote(key, now: now, into: &actions)
        }
    }

    /// When the slice of `key`, begun at `start`, ends: `backgroundSlice`, doubled for each restart (up to 64 times
    /// as long).
    private func sliceEnd(of key: String, startedAt start: Moment) -> Moment? {
        configuration.backgroundSlice.map { start + ($0 << min(tasks[key]!.restarts, 6)) }
    }

    /// A running slow task past its slice takes no place in the lane any more, and its host is passed over.
    private mutating func stepAside(_ key: String) {
        tasks[key]!.inTail = true
        tasks[key]!.overran = true
        counts.slowInTail += 1
        overrunHosts[tasks[key]!.host, default: 0] += 1
        overrunCount += 1
    }

    /// The preemptible task that ran longest: the first to step aside, or to yield its place.
    private var oldestPreemptible: String? { preemptible.min(by: startedBefore) }

    /// Whether task `a` started before task `b`.
    private func startedBefore(_ a: String, _ b: String) -> Bool { tasks[a]!.startOrder < tasks[b]!.startOrder }

    /// The preemptible task that ran longest gives its place up: it is parked at the back of the slow lane.
    private mutating func yieldPlace(into actions: inout [Action]) {
        let key = oldestPreemptible!
        park(key, waitingIn: .slow, into: &actions, atBack: true)
        sliced[key] = tasks[key]!.ticket
    }

    /// Whether a task already running may take a place in the slow lane: a free one, or a preemptible task's.
    private var hasSlowPlace: Bool { slowOccupied < slowCapacity || slowCapacity > 0 && !preemptible.isEmpty }

    /// Makes room for a running task to take a place (`hasSlowPlace`): when none is free, the preemptible task that
    /// ran longest yields its own. Returns whether that parked it.
    @discardableResult
    private mutating func takeSlowPlace(into actions: inout [Action]) -> Bool {
        guard slowOccupied >= slowCapacity else { return false }
        yieldPlace(into: &actions)
        return true
    }

    /// Room past a slice goes at once to the tasks already past theirs, without a stop.
    private mutating func stepAsidePreemptible() {
        while overrunCount < configuration.slowWidth, let key = oldestPreemptible {
            preemptible.remove(key)
            stepAside(key)
        }
    }

    /// How many tasks the slow lane may run: its width, none while background work is paused.
    private var slowCapacity: Int { backgroundPaused ? 0 : configuration.slowWidth }

    /// The places running slow tasks take in the lane: one each, but up to `slowWidth` of those in their tail take
    /// none while background work goes on.
    private var slowOccupied: Int {
        backgroundPaused ? counts.slowRunning : counts.slowRunning - min(counts.slowInTail, configuration.slowWidth)
    }

    private mutating func takeTicket() -> UInt64 {
        nextTicket += 1
        return nextTicket
    }

    private mutating func insert(_ task: Task, atFront: Bool) {
        tasks[task.key] = task
        enqueue(task.key, lane: task.lane, atFront: atFront)
    }

    private mutating func enqueue(_ key: String, lane: Lane, atFront: Bool) {
        let ticket = takeTicket()
        tasks[key]!.ticket = ticket
        let entry = LaneQueue.Entry(key: key, ticket: ticket)
        switch (lane, atFront) {
        case (.fast, _) where tasks[key]!.abandoned: abandonedQueue.pushBack(entry); counts.fastWaiting += 1
        case (.fast, _): pushFast(entry, turns: tasks[key]!.turns); counts.fastWaiting += 1
        case (.slow, false): slowQueue.pushBack(entry); counts.slowWaiting += 1
        case (.slow, true): slowQueue.pushFront(entry); counts.slowWaiting += 1
        }
    }

    /// A fast task nobody waits for any more: if it waits, it goes behind the urgent work someone waits for (its
    /// entry in the fast queue is left stale); if it runs, so does its retry or its resumption.
    private mutating func abandon(_ key: String) {
        tasks[key]!.abandoned = true
        guard tasks[key]!.state == .waiting else { return }
        let ticket = takeTicket()
        tasks[key]!.ticket = ticket
        abandonedQueue.pushBack(.init(key: key, ticket: ticket))
    }

    /// An abandoned task is asked for again (`get`, `promote`): if it waits, it takes its place in the fast lane in
    /// `turn`, at the end.
    private mutating func takeBack(_ key: String, turn: UInt64) {
        guard tasks[key]?.abandoned == true else { return }
        tasks[key]!.abandoned = false
        tasks[key]!.turns = [turn]
        guard tasks[key]!.state == .waiting, tasks[key]!.lane == .fast else { return }
        let ticket = takeTicket()
        tasks[key]!.ticket = ticket
        pushFast(.init(key: key, ticket: ticket), turns: [turn])
    }

    /// A client left: a task it waited in a turn for that others wait for, or a `promote` asked for, leaves its turn;
    /// one that only its turn held waits in a remaining waiter's turn (or the promoted turn) instead, with an entry
    /// there. (One nobody asked for otherwise is abandoned: its turn no longer matters.)
    private mutating func leaveTurn(of client: UInt64, _ key: String) {
        let task = tasks[key]!
        guard task.turns.contains(client), task.turns.count > 1 || !task.waiters.isEmpty || task.promoted else { return }
        tasks[key]!.turns.removeAll { $0 == client }
        guard tasks[key]!.turns.isEmpty else { return }
        let turn = task.waiters.first?.client ?? Self.promotedTurn
        tasks[key]!.turns = [turn]
        if task.state == .waiting && task.lane == .fast || task.promotionPending {
            pushFast(.init(key: key, ticket: task.ticket), turns: [turn])
        }
    }

    /// Another client asks for urgent work: its task waits in that client's turn too (up to `turnsPerTask` turns), the
    /// same entry in each, so that it starts in whichever turn comes first.
    private mutating func join(_ key: String, turn: UInt64) {
        let task = tasks[key]!
        guard !task.abandoned, !task.turns.contains(turn), task.turns.count < Self.turnsPerTask,
              task.lane == .fast || task.promotionPending else { return }
        tasks[key]!.turns.append(turn)
        if task.state == .waiting || task.promotionPending {
            pushFast(.init(key: key, ticket: task.ticket), turns: [turn])
        }
    }

    /// Puts `entry` in the fast queues of `turns`; a turn new to the order takes its place there by when it last
    /// started.
    private mutating func pushFast(_ entry: LaneQueue.Entry, turns: [UInt64], atFront: Bool = false) {
        for turn in turns {
            if fastTurns[turn] == nil {
                let served = lastServed[turn, default: 0]
                let place = turnOrder.firstIndex { lastServed[$0, default: 0] > served } ?? turnOrder.endIndex
                turnOrder.insert(turn, at: place)
            }
            if atFront {
                fastTurns[turn, default: LaneQueue()].pushFront(entry)
            } else {
                fastTurns[turn, default: LaneQueue()].pushBack(entry)
            }
        }
    }

    /// Takes turns whose queues emptied out of the order.
    private mutating func drop(emptyTurns: Set<UInt64>) {
        guard !emptyTurns.isEmpty else { return }
        for turn in emptyTurns {
            fastTurns.removeValue(forKey: turn)
            if leftTurns.remove(turn) != nil { lastServed.removeValue(forKey: turn) }
        }
        turnOrder.removeAll { emptyTurns.contains($0) }
    }

    /// A running slow task waiting for its promotion stays background work; returns whether it was parked (while
    /// background work is paused, only the promotion kept a lingering request out).
    private mutating func withdrawPromotion(_ key: String, into actions: inout [Action]) -> Bool {
        tasks[key]!.promotionPending = false
        guard tasks[key]!.lingering, backgroundPaused else { return false }
        park(key, waitingIn: .slow, into: &actions)
        return true
    }

    private mutating func promote(_ key: String, turn: UInt64, now: Moment, into actions: inout [Action]) {
        guard tasks[key]?.lane == .slow, tasks[key]?.promotionPending == false else { return }
        promotions &+= 1
        tasks[key]!.turns = [turn]
        var task = tasks[key]!
        switch task.state {
        case .waiting:
            counts.slowWaiting -= 1
            task.lane = .fast
            tasks[key] = task
            enqueue(key, lane: .fast, atFront: false)
        case .running where fastOccupied < configuration.fastWidth:
            moveRunning(key, to: .fast, now: now, into: &actions)
        case .running:
            // The fast lane is full: the transfer goes on as background work and takes a fast slot in its turn.
            task.promotionPending = true
            task.ticket = takeTicket()
            pushFast(.init(key: key, ticket: task.ticket), turns: [turn])
            tasks[key] = task
        case .delayed:
            task.lane = .fast
            tasks[key] = task
            // Waiting for this machine (a full disk, an unwritable cache): asked for, it tries again now, and its
            // waiters learn at once whether the machine is still at fault.
            if diskDelayedKeys.contains(key) { wake(key) }
        }
    }

    /// A running task changes lane without stopping (the caller made sure the lane has room); in the slow lane its
    /// slice begins `now`.
    private mutating func moveRunning(_ key: String, to lane: Lane, now: Moment, into actions: inout [Action]) {
        if lane == .fast {
            preemptible.remove(key)
            leaveTail(key)
            sliceStarts.removeValue(forKey: key)
            if tasks[key]!.lingering {
                tasks[key]!.lingering = false
                counts.lingering -= 1
                lingeringKeys.remove(key)
            } else {
                counts.slowRunning -= 1
            }
            enterFastLane(key, now: now)
        } else {
            leaveFastLane(key)
            counts.slowRunning += 1
            sliceStarts[key] = now
        }
        tasks[key]!.lane = lane
        tasks[key]!.promotionPending = false
        actions.append(.changeLane(key: key, lane: lane))
    }

    /// Stops a running task with its bytes kept: it waits first in `lane` (last, `atBack`), and its next start resumes
    /// the same attempt.
    private mutating func park(_ key: String, waitingIn lane: Lane, into actions: inout [Action],
                               atBack: Bool = false) {
        var task = tasks[key]!
        leaveRunning(task)
        task.lane = lane
        task.state = .waiting
        task.parked = true
        parkedCount += 1
        task.promotionPending = false
        task.lingering = false
        task.ticket = takeTicket()
        let entry = LaneQueue.Entry(key: key, ticket: task.ticket)
        if lane == .fast {
            if task.abandoned {
                abandonedQueue.pushFront(entry)
            } else {
                pushFast(entry, turns: task.turns, atFront: true)
            }
            counts.fastWaiting += 1
        } else {
            if atBack { slowQueue.pushBack(entry) } else { slowQueue.pushFront(entry) }
            counts.slowWaiting += 1
        }
        tasks[key] = task
        actions.append(.park(key: key))
    }

    /// A lane made narrower: its transfers beyond the width are parked, abandoned ones first, then the most recent
    /// starts (so the oldest resumes first), those in their tail and those waiting for a promotion last (they go to
    /// the fast lane, whose waiters they serve). A task in its tail is parked only when that frees a place. Returns
    /// whether it parked any.
    @discardableResult
    private mutating func parkBeyondWidth(_ lane: Lane, into actions: inout [Action]) -> Bool {
        let excess = { (scheduler: Scheduler) in
            lane == .fast ? scheduler.fastOccupied - scheduler.configuration.fastWidth
                : scheduler.slowOccupied - scheduler.slowCapacity
        }
        guard excess(self) > 0 else { return false }
        // Up to slowWidth tasks in their tail take no place, so parking one of those frees none; nor does parking a
        // fast task that stepped aside.
        let freesPlace = { (scheduler: Scheduler, task: Task) in
            lane == .fast ? !scheduler.fastSteppedAside.contains(task.key)
                : !task.inTail || scheduler.backgroundPaused || scheduler.counts.slowInTail > scheduler.configuration.slowWidth
        }
        let rank = { (task: Task) in
            (task.abandoned ? 1 : 0, task.promotionPending ? 0 : 1, task.inTail ? 0 : 1, task.startOrder)
        }
        let newestFirst = tasks.values.filter { $0.state == .running && $0.lane == lane && !$0.lingering }
            .sorted { rank($0) > rank($1) }
        for task in newestFirst where excess(self) > 0 && freesPlace(self, task) {
            park(task.key, waitingIn: task.promotionPending ? .fast : lane, into: &actions)
        }
        return true
    }

    /// Lingering tasks take the slow lane's free places (they run already: nothing starts), and those of preemptible
    /// tasks, which are parked; pending promotions and then the earliest starts first; then those beyond `fastWidth`
    /// (made narrower) are parked, the most recent start first, and while background work is paused every one that no
    /// urgent waiter wants. A pending promotion is parked last, and then waits in the fast lane. Returns whether it
    /// parked any.
    @discardableResult
    private mutating func settleLingering(now: Moment, into actions: inout [Action]) -> Bool {
        guard !lingeringKeys.isEmpty else { return false }
        let rank = { (task: Task) in (task.promotionPending ? 0 : 1, task.startOrder) }
        var oldestFirst = lingeringKeys.map { tasks[$0]! }.sorted { rank($0) < rank($1) }
        var parked = false
        while !oldestFirst.isEmpty, hasSlowPlace {
            if takeSlowPlace(into: &actions) { parked = true }
            let key = oldestFirst.removeFirst().key
            tasks[key]!.lingering = false
            counts.lingering -= 1
            lingeringKeys.remove(key)
            counts.slowRunning += 1
            sliceStarts[key] = now
        }
        for task in oldestFirst.reversed() {
            let beyondWidth = counts.lingering > configuration.fastWidth
            guard beyondWidth || backgroundPaused && !task.promotionPending else { continue }
            park(task.key, waitingIn: task.promotionPending ? .fast : .slow, into: &actions)
            parked = true
        }
        return parked
    }

    /// Urgent work waits with room in the fast lane, passed over only because its host is at `per_host`, while a
    /// lingering task keeps a place on that host: the newest such lingering task (no byte of it came) is parked, and
    /// the urgent work may start. Returns whether it parked one. Lingering tasks on other hosts keep their requests.
    private mutating func yieldHostToUrgentWork(into actions: inout [Action]) -> Bool {
        guard !lingeringKeys.isEmpty, !fastHostsAtLimit.isEmpty, fastOccupied < configuration.fastWidth,
              let key = newestLingering(onHosts: fastHostsAtLimit) else { return false }
        park(key, waitingIn: .slow, into: &actions)
        return true
    }

    /// Work someone waits for is passed over only because its host is at `per_host`, while a running task nobody waits
    /// for any more (abandoned) keeps a place on that host: the newest such is parked, as in a full lane, when the
    /// work can then start (it held a place in the lane, or the lane has room). Returns whether it parked one.
    private mutating func yieldHostOfAbandoned(into actions: inout [Action]) -> Bool {
        guard !fastHostsAtLimit.isEmpty, let key = newestAbandonedRunning(onHosts: fastHostsAtLimit),
              fastOccupied < configuration.fastWidth || !fastSteppedAside.contains(key) else { return false }
        park(key, waitingIn: .fast, into: &actions)
        return true
    }

    /// The most recent start among the abandoned tasks running in the fast lane, on `hosts`, or, when nil, of those
    /// that take a place there.
    private func newestAbandonedRunning(onHosts hosts: Set<String>?) -> String? {
        fastRunningKeys.compactMap { tasks[$0] }
            .filter { $0.abandoned && (hosts?.contains($0.host) ?? !fastSteppedAside.contains($0.key)) }
            .max { $0.startOrder < $1.startOrder }?.key
    }

    /// The most recent start among the lingering tasks on `hosts` that no urgent waiter wants back.
    private func newestLingering(onHosts hosts: Set<String>) -> String? {
        lingeringKeys.map { tasks[$0]! }
            .filter { !$0.promotionPending && hosts.contains($0.host) }
            .max { $0.startOrder < $1.startOrder }?.key
    }

    /// Removes a task in any state, answering its waiters; `ending` says what the owner does with the key: forget it,
    /// or (its fetch never done) let it go or keep it in the durable queue.
    private mutating func remove(_ key: String, answering answer: Answer, into actions: inout [Action],
                                 as ending: (String) -> Action = Action.forget) {
        guard let task = tasks.removeValue(forKey: key) else { return }
        if task.parked { parkedCount -= 1 }
        switch task.state {
        case .waiting:
            if task.lane == .fast { counts.fastWaiting -= 1 } else { counts.slowWaiting -= 1 }
        case .running:
            leaveRunning(task)
        case .delayed:
            counts.delayed -= 1
            delayedKeys.remove(key)
            diskDelayedKeys.remove(key)
        }
        for waiter in task.waiters {
            unregister(waiter)
            actions.append(.answer(waiter, answer))
        }
        actions.append(ending(key))
    }

    /// A host's failures in a row are counted up to this; more change nothing.
    static let failuresCounted = 1_000_000

    /// A host's transient failures in a row, forgotten once it went without one for twice the longer of a pause and
    /// a retry's longest backoff: a host paused yesterday is not one failure away from its next pause today.
    private func failuresInARow(_ host: String, now: Moment) -> Int {
        guard let failures = hostFailures[host] else { return 0 }
        let forgetAfter = max(configuration.hostPause, configuration.retry.maxDelay).saturatingMultiply(2)
        return now.milliseconds < failures.last.milliseconds.saturatingAdd(forgetAfter) ? failures.count : 0
    }

    /// Failures of this machine rather than of the host (a full disk, a local error): they never pause a host.
    static let localFailureCodes: Set<ErrorCode> = [.diskFull, .internal]

    /// The failure a waiter for a paused host gets.
    static func hostPaused(_ host: String, until: Moment, now: Moment) -> Failure {
        let seconds = (until.milliseconds - now.milliseconds + 999) / 1000
        return Failure(code: .hostPaused, message: "\(host) failed too often in a row; paused for \(seconds) s more",
                       isTransient: true, retryAfter: until.milliseconds - now.milliseconds)
    }

    /// When a host is paused, nobody waits out the pause: the waiters of its tasks that are not running get
    /// `host_paused`, and its urgent tasks become background work, first in the slow lane (or, past
    /// `slowWaitingKept`, in the durable queue, as a `demote` would), so they do not hold the fast lane.
    private mutating func failFast(onHost host: String, until: Moment, now: Moment, into actions: inout [Action]) {
        let failure = Self.hostPaused(host, until: until, now: now)
        for key in tasks.keys.sorted() {
            guard var task = tasks[key], task.host == host, task.state != .running else { continue }
            for waiter in task.waiters {
                unregister(waiter)
                actions.append(.answer(waiter, .failed(failure)))
            }
            task.waiters = []
            task.abandoned = false
            if task.lane == .fast, task.state == .waiting, leavesMemory(task) {
                // 99,500 URLs of `queue --now` lines on a host that paused again and again all stayed (158 MB).
                tasks[key] = task
                remove(key, answering: .cancelled, into: &actions, as: Action.toBacklog)
                continue
            }
            if task.lane == .fast, task.state == .waiting {
                counts.fastWaiting -= 1
                counts.slowWaiting += 1
                task.ticket = takeTicket()
                slowQueue.pushFront(.init(key: key, ticket: task.ticket))
            }
            task.lane = .slow
            tasks[key] = task
        }
    }

    /// Counts consecutive transient failures per host; at the threshold the host is paused, and the end of the
    /// pause is returned. The count lasts until a success, so after a pause one more failure pauses it again.
    private mutating func noteHostOutcome(_ host: String, _ outcome: FetchOutcome, now: Moment,
                                          into actions: inout [Action]) -> Moment? {
        switch outcome {
        case .success:
            hostFailures.removeValue(forKey: host)
            return nil
        case .failure(let failure) where failure.isTransient && !failure.endedInsideImage
                                         && !Self.localFailureCodes.contains(failure.code):
            // The transfers that one dropped connection ends fail together: that is one failure of the host.
            let previous = failuresInARow(host, now: now)
            if previous > 0, let connection = failure.connection, hostFailures[host]?.connection == connection {
                return nil
            }
            let failures = min(previous, Self.failuresCounted) + 1
            hostFailures[host] = (failures, now, failure.connection)
            guard let threshold = configuration.hostFailureThreshold, failures >= threshold else { return nil }
            let until = now + configuration.hostPause
            pausedHosts[host] = until
            actions.append(.pauseHost(host: host, until: until))
            return until
        case .failure:
            break
        }
        return nil
    }

    /// Forgets a waiter's registration (the caller removes it from its task); returns the key it waited for.
    @discardableResult
    private mutating func unregister(_ waiter: Waiter) -> String? {
        guard let key = waitersByClient[waiter.client]?.removeValue(forKey: waiter) else { return nil }
        if waitersByClient[waiter.client]?.isEmpty == true { waitersByClient.removeValue(forKey: waiter.client) }
        counts.waiters -= 1
        return key
    }

    /// A running task leaves its tail (it changes lane): it counts in its lane again.
    private mutating func leaveTail(_ key: String) {
        guard tasks[key]!.inTail else { return }
        tasks[key]!.inTail = false
        counts.slowInTail -= 1
        if tasks[key]!.overran {
            tasks[key]!.overran = false
            passOverNoLonger(tasks[key]!.host)
        }
    }

    private mutating func passOverNoLonger(_ host: String) {
        overrunCount -= 1
        overrunHosts[host, default: 1] -= 1
        if overrunHosts[host] == 0 { overrunHosts.removeValue(forKey: host) }
        stepAsidePreemptible()
    }

    private mutating func leaveRunning(_ task: Task) {
        if task.lingering {
            counts.lingering -= 1
            lingeringKeys.remove(task.key)
        } else if task.lane == .fast {
            leaveFastLane(task.key)
        } else {
            counts.slowRunning -= 1
        }
        if task.inTail { counts.slowInTail -= 1 }
        preemptible.remove(task.key)
        if task.overran { passOverNoLonger(task.host) }
        sliceStarts.removeValue(forKey: task.key)
        runningPerHost[task.host, default: 1] -= 1
        if runningPerHost[task.host] == 0 { runningPerHost.removeValue(forKey: task.host) }
    }

    /// Starts what the widths allow: fast first; slow only when the fast lane is empty.
    /// Tokens are spent in that order, so urgent work gets them before background work. A lane beyond its width
    /// (made narrower) first parks what is too much; a wider fast lane takes pending promotions before the slow lane
    /// parks any of them.
    private mutating func admit(now: Moment, into actions: inout [Action]) {
        guard admissionDeferrals == 0 else { return }
        nextToken = nil
        parkBeyondWidth(.fast, into: &actions)
        fillFastLane(now: now, into: &actions)
        // A parked background transfer may free its host for urgent work.
        if parkBeyondWidth(.slow, into: &actions) { fillFastLane(now: now, into: &actions) }
        // A parked lingering transfer may free its host for urgent work too.
        if settleLingering(now: now, into: &actions) { fillFastLane(now: now, into: &actions) }
        while yieldHostToUrgentWork(into: &actions) || yieldHostOfAbandoned(into: &actions) {
            fillFastLane(now: now, into: &actions)
        }
        if let until = waitingForDiskUntil, until <= now { waitingForDiskUntil = nil }
        while !counts.slowSuspended, waitingForDiskUntil == nil, slowCapacity > 0 {
            if slowOccupied < slowCapacity {
                // A task parked after its slice only takes a place nothing else could.
                guard let key = popStartable(lane: .slow, now: now)
                        ?? (sliced.isEmpty ? nil : popStartable(lane: .slow, now: now, sliced: true)) else { break }
                start(key, now: now, into: &actions)
            } else {
                // A full lane: a preemptible task yields its place to another that could start.
                guard !preemptible.isEmpty, let key = popStartable(lane: .slow, now: now) else { break }
                yieldPlace(into: &actions)
                start(key, now: now, into: &actions)
            }
        }
        if (counts.fastRunning > 0) != reportedHold {
            reportedHold = counts.fastRunning > 0
            actions.append(.holdBackground(reportedHold))
        }
        let tasks = self.tasks
        let isLive = { (entry: LaneQueue.Entry) in
            tasks[entry.key].map { $0.ticket == entry.ticket && ($0.state == .waiting || $0.promotionPending) } ?? false
        }
        for turn in turnOrder { fastTurns[turn]!.compactIfNeeded(liveCount: counts.fastWaiting, isLive: isLive) }
        abandonedQueue.compactIfNeeded(liveCount: counts.fastWaiting, isLive: isLive)
        slowQueue.compactIfNeeded(liveCount: counts.slowWaiting, isLive: isLive)
        self.tasks.shrinkIfSparse()
        waitersByClient.shrinkIfSparse()
    }

    /// Starts waiting fast tasks and takes pending promotions in place, in queue order, while the fast lane has room.
    /// In a full lane, a running task nobody waits for any more (abandoned) gives its place to work someone waits
    /// for: the most recent start is parked, bytes kept, first in line among the abandoned (a client that left a
    /// trickling download held its place for hours, every `get` after it timed out).
    private mutating func fillFastLane(now: Moment, into actions: inout [Action]) {
        while let key = popFastStartable(now: now, into: &actions) {
            if tasks[key]!.promotionPending {
                moveRunning(key, to: .fast, now: now, into: &actions)
            } else {
                start(key, now: now, into: &actions)
            }
        }
    }

    /// The next fast task to start or promote: any while the lane has room; when it is full, only one someone waits
    /// for, into the place of the newest abandoned task, which is parked; else only one not begun, into the place of
    /// the oldest preemptible task, which is parked.
    private mutating func popFastStartable(now: Moment, into actions: inout [Action]) -> String? {
        let key: String
        if fastOccupied < configuration.fastWidth {
            guard let next = popStartable(lane: .fast, now: now) else { return nil }
            key = next
        } else if fastOccupied == configuration.fastWidth, let newestAbandoned = newestAbandonedRunning(onHosts: nil) {
            guard let next = popStartable(lane: .fast, now: now, waitedForOnly: true, yielding: newestAbandoned) else {
                return nil
            }
            park(newestAbandoned, waitingIn: .fast, into: &actions)
            key = next
        } else {
            guard fastOccupied == configuration.fastWidth, let oldest = oldestFastPreemptible,
                  let next = popStartable(lane: .fast, now: now, waitedForOnly: true, notBegunOnly: true, yielding: oldest)
            else { return nil }
            park(oldest, waitingIn: .fast, into: &actions)
            key = next
        }
        if let poppedTurn { tasks[key]!.servedInTurn = poppedTurn }
        return key
    }

    /// The first task of `lane` that may start now, taken out of its queue; in the slow lane, `sliced`: only one
    /// parked after its slice, else any other; in the fast lane, `waitedForOnly`: none of the abandoned, and
    /// `notBegunOnly`: none parked (nor a promotion, which runs already). The host of `yielding`, a running task parked
    /// for the one taken, counts as free of it.
    private mutating func popStartable(lane: Lane, now: Moment, sliced slicedOnly: Bool = false,
                                       waitedForOnly: Bool = false, notBegunOnly: Bool = false,
                                       yielding: String? = nil) -> String? {
        let tasks = self.tasks
        let isLive = { (entry: LaneQueue.Entry) in
            tasks[entry.key].map {
                $0.ticket == entry.ticket && ($0.state == .waiting && $0.lane == lane || lane == .fast && $0.promotionPending)
            } ?? false
        }
        let limit = configuration.perHostLimit
        let running = runningPerHost
        let freedHost = yielding.map { tasks[$0]!.host }
        let overrun = lane == .slow ? overrunHosts : [:]
        let sliced = lane == .slow ? self.sliced.filter { isSliced($0.key) } : [:]
        let slicedHosts = Set(sliced.keys.map { tasks[$0]!.host })
        let yieldingHosts = lane == .slow ? Set(preemptible.map { tasks[$0]!.host }) : []
        let paused = pausedHosts
        let rate = configuration.hostStartRate
        let buckets = self.buckets
        var nextToken = self.nextToken
        var hostsAtLimit: Set<String> = []
        let accept = { (entry: LaneQueue.Entry) in
            let task = tasks[entry.key]!
            if notBegunOnly, task.parked || task.promotionPending { return false }
            // A promotion starts nothing: no host limit, pause or token applies to it.
            if task.promotionPending { return true }
            let host = task.host
            if let until = paused[host], until > now { return false }
            if overrun[host] != nil || yieldingHosts.contains(host) { return false }
            // A task parked after its slice is looked for apart; its host's other work waits for it.
            if sliced[entry.key] != nil ? !slicedOnly : slicedOnly || slicedHosts.contains(host) { return false }
            // At its limit the host is passed over, unless the task yielding holds a place there; it is at its
            // limit again once that task is parked for this one.
            if let limit, running[host, default: 0] >= limit {
                hostsAtLimit.insert(host)
                if host != freedHost || running[host]! > limit { return false }
            }
            guard let rate, let bucket = buckets[host] else { return true }
            let tokens = Self.tokens(bucket, rate: rate, now: now)
            if tokens >= 1 { return true }
            let wait = now + Int64(((1 - tokens) * 1000 / rate.perSecond).rounded(.up))
            nextToken = min(nextToken ?? wait, wait)
            return false
        }
        // A promotion is a group of its own, never passed over for its host, and so is a task parked after its
        // slice (its host's other work is passed over for it).
        let host = { (entry: LaneQueue.Entry) -> String in
            let task = tasks[entry.key]!
            return task.promotionPending || sliced[entry.key] != nil || notBegunOnly && task.parked
                ? "\u{0}" + task.key : task.host
        }
        guard lane == .fast else {
            let entry = slowQueue.popFirst(isLive: isLive, group: host, accept: accept, passLimit: Self.slowPassLimit)
            self.nextToken = nextToken
            return entry?.key
        }
        // The turns in order, within one budget of refused hosts, each passing over `fastPassLimit` entries at most
        // and all of them four times that, past which a turn's first entry is still looked at (a turn whose queue
        // empties leaves the order): 1,100 promotions of one host at per_host, passed over one by one, used up a
        // budget shared by all turns, and every client's gets waited for that host; so did four clients' 1,100 gets
        // each. Abandoned work only once nothing someone waits for can start, all of it looked at; the hosts it waits
        // for are not urgent work held back.
        var entry: LaneQueue.Entry?
        var refused: Set<String> = []
        var passedInAll = 0
        var gaveUp = false
        var emptied: Set<UInt64> = []
        poppedTurn = nil
        for (index, turn) in turnOrder.enumerated() {
            // An entry of a turn the task left (its client went) is stale there.
            let isLiveInTurn = { (entry: LaneQueue.Entry) in isLive(entry) && tasks[entry.key]!.turns.contains(turn) }
            var passed = 0
            let limit = passedInAll < 4 * Self.fastPassLimit ? Self.fastPassLimit : 1
            entry = fastTurns[turn]!.popFirst(isLive: isLiveInTurn, group: host, accept: accept, refused: &refused,
                                              passed: &passed, passLimit: limit)
            passedInAll += passed
            if fastTurns[turn]!.storedCount == 0 { emptied.insert(turn) }
            if entry != nil {
                poppedTurn = turn
                turnsServed += 1
                lastServed[turn] = turnsServed
                turnOrder.remove(at: index)
                turnOrder.append(turn)
                break
            }
            gaveUp = gaveUp || fastTurns[turn]!.gaveUp
        }
        drop(emptyTurns: emptied)
        fastHostsAtLimit = hostsAtLimit
        if entry == nil, !waitedForOnly, !gaveUp {
            entry = abandonedQueue.popFirst(isLive: isLive, group: host, accept: accept)
        }
        self.nextToken = nextToken
        return entry?.key
    }

    /// The tokens in `bucket` at `now`: what was left plus what flowed in since, at most a burst.
    private static func tokens(_ bucket: (tokens: Double, at: Moment), rate: StartRate, now: Moment) -> Double {
        let elapsed = Double(max(0, now.milliseconds - bucket.at.milliseconds))
        return min(Double(rate.burst), bucket.tokens + elapsed * rate.perSecond / 1000)
    }

    private mutating func start(_ key: String, now: Moment, into actions: inout [Action]) {
        var task = tasks[key]!
        task.state = .running
        task.inTail = false
        task.overran = false
        task.responded = false
        if task.parked {
            task.parked = false
            parkedCount -= 1
        } else {
            task.attempts += 1
            task.tries += 1
        }
        startsSoFar += 1
        task.startOrder = startsSoFar
        task.startedAt = now
        task.notWaitedFor = nil
        tasks[key] = task
        if task.lane == .fast {
            counts.fastWaiting -= 1
            enterFastLane(key, now: now)
        } else {
            counts.slowWaiting -= 1
            counts.slowRunning += 1
            sliceStarts[key] = now
        }
        runningPerHost[task.host, default: 0] += 1
        if let rate = configuration.hostStartRate {
            let tokens = buckets[task.host].map { Self.tokens($0, rate: rate, now: now) } ?? Double(rate.burst)
            buckets[task.host] = (tokens - 1, now)
        }
        actions.append(.start(key: key, lane: task.lane, revalidate: task.revalidate))
    }
}

extension Dictionary {
    /// Gives back storage once at most an eighth of it is used (a dictionary never shrinks by itself), so the state
    /// left after a burst of tasks is the size of what remains, not of the peak.
    fileprivate mutating func shrinkIfSparse() {
        guard capacity > 1024, count * 8 < capacity else { return }
        var smaller = Self(minimumCapacity: count * 2)
        for (key, value) in self { smaller[key] = value }
        self = smaller
    }
}
