/// Warnings of one kind, logged one a second and then how many more came in that second: clients refused in a loop
/// flooded the log (20,000 lines, 4.6 MB, in 0.9 s).
final class ThrottledWarning {
    private var second: Int64 = -1
    private var unlogged = 0
    private var timer: LoopTimer!

    /// `summary`: the line for `count` warnings a second left unlogged.
    init(loop: EventLoop, summary: @escaping (_ count: Int) -> String) {
        timer = loop.makeTimer { [unowned self] in
            guard unlogged > 0 else { return }
            Log.warning(summary(unlogged))
            unlogged = 0
        }
    }

    func log(_ line: String) {
        let now = monotonicMilliseconds()
        guard now / 1000 != second else {
            if unlogged == 0 { timer.schedule(at: (second + 1) * 1000) }
            unlogged += 1
            return
        }
        second = now / 1000
        Log.warning(line)
    }
}
