import Testing
@testable import QueueCore

@Suite("Numbers from outside: saturating arithmetic and the viewport at the ends of Int")
struct SaturatingTests {
    @Test("sums, differences and products stop at the bounds instead of trapping")
    func bounds() {
        #expect(Int64.max.saturatingAdd(1) == .max && Int64.min.saturatingAdd(-1) == .min)
        #expect(Int64.min.saturatingSubtract(1) == .min && Int64.max.saturatingSubtract(-1) == .max)
        #expect(Int64.max.saturatingMultiply(1000) == .max && Int64.min.saturatingMultiply(1000) == .min)
        #expect(Int64.min.saturatingMultiply(-1) == .max && Int64(4).saturatingMultiply(-3) == -12)
        #expect(Int64(40).saturatingAdd(2) == 42 && Int64(40).saturatingSubtract(-2) == 42)
    }

    @Test("a view scrolled to rows near Int.max (first..last near the end, the default ahead) crashed; now it plans nothing")
    func viewportAtTheEnd() {
        var view = Viewport()
        _ = view.append(rows: 100)
        for range in [Viewport.Range(first: 0, last: .max, ahead: 1000, behind: 500),
                      Viewport.Range(first: .max - 1, last: .max, ahead: 2, behind: 1),
                      Viewport.Range(first: .max, last: .max, ahead: .max, behind: .max)] {
            let plan = view.show(range)
            #expect(plan.show.allSatisfy { $0 < 100 } && plan.prefetch.allSatisfy { $0 < 100 })
        }
        #expect(view.visible == nil)
        _ = view.show(Viewport.Range(first: 0, last: 9, ahead: .max, behind: 0))
        #expect(view.visible == 0...9)
    }
}
