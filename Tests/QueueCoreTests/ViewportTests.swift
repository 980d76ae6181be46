import Testing
@testable import QueueCore

private func range(_ first: Int, _ last: Int, ahead: Int = 0, behind: Int = 0) -> Viewport.Range {
    Viewport.Range(first: first, last: last, ahead: ahead, behind: behind)
}

@Suite("Viewport: the work a visible range asks for")
struct ViewportTests {
    @Test("the first range shows the visible rows and prefetches the window nearest first, after before before on a tie")
    func firstRange() {
        var view = Viewport()
        _ = view.append(rows: 100)
        let plan = view.show(range(10, 14, ahead: 3, behind: 2))
        #expect(plan.show == [10, 11, 12, 13, 14])
        #expect(plan.prefetch == [15, 9, 16, 8, 17])
        #expect(plan.hold == [15, 9, 16, 8, 17, 10, 11, 12, 13, 14])
        #expect(plan.hide.isEmpty && plan.drop.isEmpty && plan.release.isEmpty)
        #expect(view.held == Set(8...17))
        #expect(view.visible == 10...14)
    }

    @Test("scrolling one screen hides the old rows, shows the new ones and re-orders the window; nothing is dropped")
    func scrollOneScreen() {
        var view = Viewport()
        _ = view.append(rows: 1000)
        _ = view.show(range(0, 19, ahead: 20))
        let plan = view.show(range(20, 39, ahead: 20))
        #expect(plan.hide == Array(0...19))
        #expect(plan.show == Array(20...39))
        #expect(plan.prefetch == Array(40...59))
        #expect(plan.hold == Array(40...59))      // 20...39 were held as the first window
        #expect(plan.drop.isEmpty)
        // Rows 0-19 left the window but stay held: the kept zone reaches one window's length (40 rows) further.
        #expect(view.held == Set(0...59))
    }

    @Test("rows that were prefetched and become visible are shown, not prefetched again")
    func prefetchedThenVisible() {
        var view = Viewport()
        _ = view.append(rows: 100)
        _ = view.show(range(0, 9, ahead: 10))
        let plan = view.show(range(5, 14, ahead: 10))
        #expect(plan.show == [10, 11, 12, 13, 14])
        #expect(plan.hide == [0, 1, 2, 3, 4])
        #expect(plan.prefetch == Array(15...24))
        #expect(plan.hold == Array(20...24))
    }

    @Test("held rows that go far are dropped, once")
    func far() {
        var view = Viewport()
        _ = view.append(rows: 10_000)
        _ = view.show(range(0, 9, ahead: 10))          // window 0...19, kept 0...39
        let jump = view.show(range(5000, 5009, ahead: 10))
        #expect(jump.hide == Array(0...9))
        #expect(jump.drop == Array(0...19))
        #expect(view.held == Set(5000...5019))
        let back = view.show(range(5001, 5010, ahead: 10))
        #expect(back.drop.isEmpty)
    }

    @Test("a row in the kept zone that was never in the window gets no work and is not held")
    func keptButNeverWindowed() {
        var view = Viewport()
        _ = view.append(rows: 100)
        _ = view.show(range(50, 59))                    // window 50...59, kept 40...69
        #expect(view.held == Set(50...59))
        let plan = view.show(range(52, 61))
        #expect(plan.show == [60, 61] && plan.hide == [50, 51] && plan.drop.isEmpty && plan.prefetch.isEmpty)
    }

    @Test("the zones are clamped to the list; rows appended later fall into them")
    func appendIntoWindow() {
        var view = Viewport()
        _ = view.append(rows: 5)
        let first = view.show(range(0, 9, ahead: 5))
        #expect(first.show == [0, 1, 2, 3, 4] && first.prefetch.isEmpty)
        let more = view.append(rows: 20)
        #expect(more.show == [5, 6, 7, 8, 9])
        #expect(more.prefetch == [10, 11, 12, 13, 14])
        #expect(more.hide.isEmpty && more.drop.isEmpty)
        #expect(view.rowCount == 25)
    }

    @Test("the same range again asks for nothing; a list without a range asks for nothing")
    func noChange() {
        var view = Viewport()
        #expect(view.append(rows: 100).isEmpty)
        _ = view.show(range(0, 9, ahead: 5))
        #expect(view.show(range(0, 9, ahead: 5)).isEmpty)
        #expect(view.append(rows: 0).isEmpty)
    }

    @Test("closing hides the visible rows and releases every held row without dropping, nearest to the visible rows first (after, on a tie)")
    func close() {
        var view = Viewport()
        _ = view.append(rows: 100)
        _ = view.show(range(10, 11, ahead: 2, behind: 1))
        let plan = view.close()
        #expect(plan.hide == [10, 11])
        #expect(plan.release == [10, 11, 12, 9, 13])
        #expect(plan.drop.isEmpty && plan.show.isEmpty && plan.prefetch.isEmpty)
        #expect(view == Viewport())
    }

    @Test("a range is normalised: last before first is one row; negative counts are zero")
    func normalised() {
        let r = Viewport.Range(first: -3, last: -5, ahead: -1, behind: -2)
        #expect(r == range(0, 0))
    }

    @Test("random ranges and appends: plans replayed give the viewport's own visible and held rows")
    func randomChanges() {
        for seed in 0..<300 {
            var rng = SplitMix64(seed: UInt64(seed))
            func below(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
            var view = Viewport()
            var visible: Set<Int> = []
            var held: Set<Int> = []
            for step in 0..<60 {
                let plan: Viewport.Plan
                switch below(10) {
                case 0..<2: plan = view.append(rows: below(40))
                case 2: plan = view.close()
                default:
                    let first = below(max(1, view.rowCount + 20))
                    plan = view.show(range(first, first + below(15), ahead: below(12), behind: below(6)))
                }
                let context = Comment(rawValue: "seed \(seed) step \(step)")
                #expect(Set(plan.hide).isSubset(of: visible), context)
                #expect(Set(plan.show).isDisjoint(with: visible.subtracting(plan.hide)), context)
                visible.subtract(plan.hide)
                visible.formUnion(plan.show)
                #expect(Set(plan.drop).isSubset(of: held) && Set(plan.release).isSubset(of: held), context)
                held.subtract(plan.drop)
                held.subtract(plan.release)
                #expect(Set(plan.hold).isDisjoint(with: held), context)
                held.formUnion(plan.hold)
                #expect(visible == Set(view.visible.map(Array.init) ?? []), context)
                #expect(held == view.held, context)
                #expect(Set(plan.prefetch).union(plan.show).isSubset(of: held), context)
                // Prefetch order: by distance from the visible rows, never a visible row.
                if let range = view.range {
                    let distances = plan.prefetch.map { $0 > range.last ? $0 - range.last : range.first - $0 }
                    #expect(distances == distances.sorted() && distances.allSatisfy { $0 > 0 }, context)
                    // Held rows lie in the kept zone: the window and one window's length on each side.
                    let length = range.last + range.ahead - (range.first - range.behind) + 1
                    let kept = (range.first - range.behind - length)...(range.last + range.ahead + length)
                    #expect(held.allSatisfy { kept.contains($0) && $0 < view.rowCount }, context)
                }
            }
        }
    }
}
