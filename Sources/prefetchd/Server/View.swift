import PrefetchProtocol
import QueueCore

/// One connection's `view`: its ordered list, what it looks at (a `Viewport`, which turns each change into a plan of
/// work), the visible rows still waiting for their answer, and the variant every row is answered with.
final class View {
    private let rows: ViewRows
    private var viewport = Viewport()
    /// Visible rows still waiting for their answer.
    private var waiters: [Int: Waiter] = [:]
    private var answeredVariant: VariantSpec?

    init(keys: ViewKeys) { rows = ViewRows(keys: keys) }

    // MARK: The list

    var rowCount: Int { rows.count }

    subscript(row: Int) -> ViewRows.Row { rows[row] }

    /// The row's canonical key; nil for a rejected row.
    func key(_ row: Int) -> String? { rows.key(row) }

    func append(_ url: CanonicalURL) {
        rows.append(url)
        urlBytes += url.key.utf8.count
    }

    /// The bytes of its rows' URLs (canonical keys, or what rejected rows hold), each row counted.
    private(set) var urlBytes = 0

    /// The most URL bytes one view may list (100,000 rows of 8 KB URLs held 860 MB): 671 bytes a row on average.
    static let maximumURLBytes = 64 << 20

    /// Appends a row that cannot be fetched: the text the client sent, and why.
    func reject(_ text: String, _ error: WireError) {
        rows.reject(text, error)
        urlBytes += ViewRows.heldBytes(text, error)
    }

    /// The variant every visible row is answered with, when the view asked for a size.
    var variant: VariantSpec? { answeredVariant }

    func answerRows(with variant: VariantSpec) { answeredVariant = variant }

    // MARK: What it looks at

    /// The rows the client shows, and how far ahead and behind it may scroll.
    var shown: Viewport.Range? { viewport.range }

    /// `count` rows were appended: the work that changes.
    func listGrew(by count: Int) -> Viewport.Plan { viewport.append(rows: count) }

    /// The client shows `range` now: the work that changes.
    func show(_ range: Viewport.Range) -> Viewport.Plan { viewport.show(range) }

    /// The view closes: visible rows stop being urgent, the rest goes on as background work.
    func close() -> Viewport.Plan { viewport.close() }

    // MARK: Visible rows waiting

    /// A visible row waits for its answer as `waiter`.
    func rowWaits(_ row: Int, as waiter: Waiter) { waiters[row] = waiter }

    /// A row was hidden: the waiter it still had, if any.
    func rowHidden(_ row: Int) -> Waiter? { waiters.removeValue(forKey: row) }

    /// A visible row got its answer.
    func rowAnswered(_ row: Int, waiter: Waiter) {
        if waiters[row] == waiter { waiters.removeValue(forKey: row) }
    }
}
