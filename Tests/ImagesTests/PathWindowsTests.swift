import Glibc
import Testing
@testable import prefetchd

/// The receive buffers PathWindows gives background connections, read back from real sockets (Linux reports twice
/// the buffer set). What the buffers do on the wire is lab test 7 (`make lab-test`).
@Suite struct PathWindowsTests {
    static let ceiling: Int32 = 128 << 10

    /// A TCP socket opened as a background connection with `ceiling`, closed by the caller.
    func socketWithCeiling(_ windows: PathWindows, _ ceiling: Int32 = ceiling) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        setReceiveBuffer(fd, ceiling)
        windows.opened(fd, buffer: ceiling)
        return fd
    }

    func buffer(_ fd: Int32) -> Int32 {
        var size: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, &length)
        return size / 2
    }

    @Test("an HTTP/1.1 background connection keeps a quarter of its window while urgent work is recent, the whole window before and after")
    func serialConnectionShrinksWhileUrgentWorkIsRecent() throws {
        let windows = PathWindows()
        let fd = try socketWithCeiling(windows)
        defer { close(fd) }
        windows.serial(fd)
        #expect(buffer(fd) == Self.ceiling)
        windows.setUrgentRecent(true, live: [fd])
        #expect(buffer(fd) == Self.ceiling / 4)
        windows.serial(fd)  // its next response
        #expect(buffer(fd) == Self.ceiling / 4)
        windows.setUrgentRecent(false, live: [fd])
        #expect(buffer(fd) == Self.ceiling)
    }

    @Test("a connection idle when urgency begins or ends takes the change at its next response")
    func idleConnectionTakesTheChangeLater() throws {
        let windows = PathWindows()
        let fd = try socketWithCeiling(windows)
        defer { close(fd) }
        windows.serial(fd)
        windows.setUrgentRecent(true, live: [])
        #expect(buffer(fd) == Self.ceiling)
        windows.serial(fd)
        #expect(buffer(fd) == Self.ceiling / 4)
        windows.setUrgentRecent(false, live: [])
        #expect(buffer(fd) == Self.ceiling / 4)
        windows.serial(fd)
        #expect(buffer(fd) == Self.ceiling)
    }

    @Test("a multiplexing (HTTP/2) connection that has not grown to its path keeps its window when urgent work is recent: lowered so early, it never grew back")
    func youngMultiplexingConnectionIsLeftAlone() throws {
        let windows = PathWindows()
        let fd = try socketWithCeiling(windows)
        defer { close(fd) }
        windows.setUrgentRecent(true, live: [fd])
        #expect(buffer(fd) == Self.ceiling)
        #expect(windows.buffer(of: fd) == Self.ceiling)
    }

    @Test("a transfer promoted in place keeps its wide buffer while urgent work is recent; given back, the connection takes the quarter")
    func promotedTransferKeepsItsBuffer() throws {
        let windows = PathWindows()
        let fd = try socketWithCeiling(windows)
        defer { close(fd) }
        windows.serial(fd)
        setReceiveBuffer(fd, Transfer.urgentWindow)
        windows.lift(fd)
        let wide = buffer(fd)
        #expect(wide > Self.ceiling)
        windows.setUrgentRecent(true, live: [fd])
        windows.serial(fd)
        #expect(buffer(fd) == wide)
        #expect(windows.restore(fd))
        #expect(buffer(fd) == Self.ceiling / 4)
    }

    @Test("a quarter of a small ceiling is never below 16K, nor above the ceiling")
    func quarterOfASmallCeiling() throws {
        let windows = PathWindows()
        for (ceiling, expected) in [(Int32(32 << 10), Int32(16 << 10)), (8 << 10, 8 << 10)] {
            let fd = try socketWithCeiling(windows, ceiling)
            defer { close(fd) }
            windows.serial(fd)
            windows.setUrgentRecent(true, live: [fd])
            #expect(buffer(fd) == expected, "ceiling \(ceiling)")
            windows.setUrgentRecent(false, live: [fd])
        }
    }

    @Test("urgent work keeps background windows small for twice the interval since the urgent work before, within 3-20 s")
    func recencyFollowsThePersonsRhythm() {
        #expect(CurlFetcher.recency(afterInterval: nil) == 3_000)
        #expect(CurlFetcher.recency(afterInterval: 500) == 3_000)
        #expect(CurlFetcher.recency(afterInterval: 1_500) == 3_000)
        #expect(CurlFetcher.recency(afterInterval: 5_000) == 10_000)
        #expect(CurlFetcher.recency(afterInterval: 10_000) == 20_000)
        // Longer than half the longest recency: a lone get after a pause, not a rhythm.
        #expect(CurlFetcher.recency(afterInterval: 10_001) == 3_000)
        #expect(CurlFetcher.recency(afterInterval: 3_600_000) == 3_000)
    }
}
