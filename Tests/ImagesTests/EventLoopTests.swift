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
        var pool: WorkerPool? = try WorkerPool(threads: 1, name: "test", loop: loop)
        let fd = try #require(descriptors("eventfd").subtracting(before).first)
        #expect(loop.isRegistered(fd))
        _ = pool
        pool = nil
        #expect(!loop.isRegistered(fd))
    }

    @Test("a job that ends after its pool was dropped writes nothing into the descriptors opened since (it used to signal the closed eventfd's number)")
    func lateJobWritesNowhere() throws {
        let loop = try EventLoop()
        var pool: WorkerPool? = try WorkerPool(threads: 1, name: "test", loop: loop)
        pool?.run({ usleep(200_000) }, completion: {})
        pool = nil
        // The lowest free numbers: where the pool's eventfd was, were it closed.
        var pairs: [[Int32]] = []
        for _ in 0..<4 {
            var fds: [Int32] = [-1, -1]
            #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
            pairs.append(fds)
        }
        defer { for fd in pairs.joined() { close(fd) } }
        usleep(400_000)
        for fd in pairs.joined() {
            var probe = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            #expect(poll(&probe, 1, 0) == 0, "descriptor \(fd) received bytes from a dropped pool's job")
        }
    }
}
