import PrefetchProtocol
import QueueCore

/// The numeric fields of a request, checked before anything acts on them: a value that cannot mean anything is a
/// `bad_request` naming the field, a merely large one is clamped, and no arithmetic on them can overflow.
/// (`quality` and `size` are checked by `VariantSpec`; Fuzz/FuzzRequestNumbers.swift fuzzes all of them.)
extension Request {
    /// `max_stale` in milliseconds (nil when not given): any number of seconds from 0 up, as large as it likes.
    func staleAllowance() throws(WireError) -> Int64? {
        guard let maxStale else { return nil }
        guard maxStale >= 0 else {
            throw WireError(.badRequest, "max_stale must be a number of seconds from 0 up (got \(maxStale))")
        }
        return maxStale.saturatingMultiply(1000)
    }

    /// The visible range a `view` asks for (nil when it gives none), with `ahead` and `behind` defaulted: as many rows
    /// as are visible, and half as many.
    func viewRange(maximumRows: Int, maximumVisible: Int, maximumLookAround: Int) throws(WireError) -> Viewport.Range? {
        guard let first, let last else {
            if first != nil || last != nil {
                throw WireError(.badRequest, "first and last go together: the first and the last visible row")
            }
            if ahead != nil || behind != nil {
                throw WireError(.badRequest, "ahead and behind need first and last")
            }
            return nil
        }
        guard first >= 0, last >= first else {
            throw WireError(.badRequest, "first and last must be rows counted from 0, first <= last (got \(first) and \(last))")
        }
        guard first < maximumRows else {
            throw WireError(.badRequest, "first must be a row below \(maximumRows), the most a view holds (got \(first))")
        }
        // Both are at least 0, so their difference cannot overflow; the count can.
        let visible = (last - first).saturatingAdd(1)
        guard visible <= maximumVisible else {
            throw WireError(.badRequest, "at most \(maximumVisible) visible rows (got \(visible))")
        }
        let ahead = ahead ?? visible, behind = behind ?? visible / 2
        guard (0...maximumLookAround).contains(ahead), (0...maximumLookAround).contains(behind) else {
            throw WireError(.badRequest, "ahead and behind must be between 0 and \(maximumLookAround) rows")
        }
        return Viewport.Range(first: first, last: last, ahead: ahead, behind: behind)
    }
}
