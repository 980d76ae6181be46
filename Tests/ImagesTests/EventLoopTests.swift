import Foundation
import Testing
@testable import prefetchd

/// The loop's registrations are keyed by descriptor number, which the kernel hands out again once closed: whoever
/// closes a registered descriptor must leave the loop first, or the next descriptor with that number (a connection's
/// socket) goes to the old handler.
@Suite struct EventLoopTests {
    /// This process's descriptors of one anonymous kind (`timerfd`, `eventfd`).
    func descriptors(_ kind: String) -> Set<Int32> {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return Set(names.compactMap { name in
            let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + name)
            return target == "anon_inode:[\(kind)]" ? Int32(name) : nil
        })
    }

    @Test("a wall-clock timer dropped while its loop runs leaves no registration behind (its handler, which reads 8 bytes, stayed for the next descriptor with its number)")
    func droppedTimerLeavesTheLoop() throws {
        let loop = try EventLoop()
        let before = descriptors("timerfd")
        var timer: WallClockTimer? = try WallClockTimer(loop: loop) {}
        let fd = try #require(descriptors("timerfd").subtracting(before).first)
        #expect(loop.isRegistered(fd))
        timer?.cancel()
        timer = nil
        #expect(!loop.isRegistered(fd))
    }

    @Test("a worker pool dropped while its loop runs leaves no registration behind (its handler held the pool unowned)")
    func droppedWorkerPoolLeavesTheLoop() throws {
        let loop = try EventLoop()
        let before = descriptors("eventfd")
        var pool: WorkerPool? = try WorkerPool(threads: 1, loop: loop)
        let fd = try #require(descriptors("eventfd").subtracting(before).first)
        #expect(loop.isRegistered(fd))
        _ = pool
        pool = nil
        #expect(!loop.isRegistered(fd))
    }
}
