/// The rows of a client's ordered list that someone looks at, and what each change of them asks of the scheduler.
///
/// Around the visible rows lie three zones: the *window* adds `behind` rows before and `ahead` rows after them (their
/// work is prefetched, nearest first); the *kept* zone adds one window's length on each side (work already asked for
/// stays queued); beyond it rows are *far* (their pending work is dropped). A row that entered the window or became
/// visible is *held* until it goes far or the view closes. Each change is derived from the difference between the old
/// and the new zones, so its cost depends on the window's size, never on the list's.
public struct Viewport: Equatable, Sendable {
    /// The visible rows (inclusive, from 0) and how far to look around them.
    public struct Range: Equatable, Sendable {
        public var first: Int
        public var last: Int
        public var ahead: Int
        public var behind: Int

        public init(first: Int, last: Int, ahead: Int, behind: Int) {
            self.first = max(0, first)
            self.last = max(self.first, last)
            self.ahead = max(0, ahead)
            self.behind = max(0, behind)
        }
    }

    /// What a change asks for, to be applied in this order.
    public struct Plan: Equatable, Sendable {
        /// Rows no longer visible: their waiters are released (the work is demoted unless someone else waits).
        public var hide: [Int] = []
        /// Held rows that went far: let go of them, dropping their pending work.
        public var drop: [Int] = []
        /// Held rows to let go of without dropping anything (the view closed or its list was replaced).
        public var release: [Int] = []
        /// Rows held from now on (they entered the window or became visible): hold their keys.
        public var hold: [Int] = []
        /// The window's rows that are not visible, nearest to the visible rows first (after, on a tie): new ones are
        /// queued, waiting ones move to the front of the slow lane in this order.
        public var prefetch: [Int] = []
        /// Rows that became visible, top to bottom: urgent work, each with a waiter.
        public var show: [Int] = []

        public init() {}

        public var isEmpty: Bool {
            hide.isEmpty && drop.isEmpty && release.isEmpty && hold.isEmpty && prefetch.isEmpty && show.isEmpty
        }
    }

    public private(set) var rowCount = 0
    public private(set) var range: Range?
    /// Rows held (entered the window or became visible, and did not go far since).
    public private(set) var held: Set<Int> = []

    public init() {}

    /// The visible rows, clamped to the list.
    public var visible: ClosedRange<Int>? { zone(range, rowCount) { ($0.first, $0.last) } }

    /// Rows were added at the end of the list; those that fall in the zones now get their work.
    public mutating func append(rows count: Int) -> Plan {
        change(rowCount: rowCount.saturatingAdd(max(0, count)), range: range)
    }

    /// The client scrolled (or resized): a new visible range.
    public mutating func show(_ range: Range) -> Plan {
        change(rowCount: rowCount, range: range)
    }

    /// The view ends (its connection closed, or its list is replaced): visible rows are hidden and every held row is
    /// let go of without dropping its work, which goes on as ordinary background work; nearest to the visible rows
    /// first (after, on a tie), so that a daemon short of room keeps the work most likely wanted next.
    public mutating func close() -> Plan {
        var plan = Plan()
        if let visible { plan.hide = Array(visible) }
        let (first, last) = range.map { ($0.first, $0.last) } ?? (0, 0)
        func order(_ row: Int) -> (distance: Int, before: Int, row: Int) {
            row < first ? (first.saturatingSubtract(row), 1, row) : (max(0, row.saturatingSubtract(last)), 0, row)
        }
        plan.release = held.sorted { order($0) < order($1) }
        self = Viewport()
        return plan
    }

    private mutating func change(rowCount newCount: Int, range newRange: Range?) -> Plan {
        guard newCount != rowCount || newRange != range else { return Plan() }
        let old = (visible: visible, kept: zone(range, rowCount, Self.kept))
        rowCount = newCount
        range = newRange
        let new = (visible: visible, window: zone(range, rowCount, Self.window), kept: zone(range, rowCount, Self.kept))

        var plan = Plan()
        plan.hide = Self.rows(in: old.visible, notIn: new.visible)
        plan.drop = Self.rows(in: old.kept, notIn: new.kept).filter { held.remove($0) != nil }
        if let window = new.window, let visible = new.visible, let range {
            var below = visible.upperBound + 1, above = visible.lowerBound - 1
            while below <= window.upperBound || above >= window.lowerBound {
                let belowDistance = below <= window.upperBound ? below - range.last : Int.max
                let aboveDistance = above >= window.lowerBound ? range.first - above : Int.max
                let row: Int
                if belowDistance <= aboveDistance {
                    row = below
                    below += 1
                } else {
                    row = above
                    above -= 1
                }
                plan.prefetch.append(row)
                if held.insert(row).inserted { plan.hold.append(row) }
            }
        }
        plan.show = Self.rows(in: new.visible, notIn: old.visible)
        for row in plan.show where held.insert(row).inserted { plan.hold.append(row) }
        return plan
    }

    // MARK: Zones

    // Any row numbers a client sends are taken: the bounds saturate instead of overflowing, and `zone` clamps them to
    // the list.

    private static func window(_ range: Range) -> (Int, Int) {
        (range.first - range.behind, range.last.saturatingAdd(range.ahead))
    }

    private static func kept(_ range: Range) -> (Int, Int) {
        let (first, last) = window(range)
        let length = last.saturatingSubtract(first).saturatingAdd(1)
        return (first.saturatingSubtract(length), last.saturatingAdd(length))
    }

    private func zone(_ range: Range?, _ rowCount: Int, _ bounds: (Range) -> (Int, Int)) -> ClosedRange<Int>? {
        guard let range else { return nil }
        let (first, last) = bounds(range)
        let lower = max(0, first), upper = min(rowCount - 1, last)
        return lower <= upper ? lower...upper : nil
    }

    private static func rows(in zone: ClosedRange<Int>?, notIn other: ClosedRange<Int>?) -> [Int] {
        guard let zone else { return [] }
        guard let other else { return Array(zone) }
        return zone.filter { !other.contains($0) }
    }
}
