import CSystem
import Glibc

/// Keeps each background connection's TCP window near its path's bandwidth-delay product: `gain` × the most the
/// connection delivered per second over its last samples × its shortest round trip. Such a window fills the link
/// with at most a quarter of a round trip queued at the bottleneck, so an urgent response meets a nearly empty
/// buffer, and after a hold about that much still arrives (docs/transport.md). `background_window` is the ceiling.
/// While the window is the limit, a connection delivers a window per round trip, and the next is `gain` × larger:
/// it grows until the link is the limit.
///
/// The window is set through the socket's receive buffer (`SO_RCVBUF`), which a live socket takes both ways; Linux
/// announces about 1.25 × it. (`TCP_WINDOW_CLAMP` would be the obvious knob, but on this kernel a connection clamped
/// to 45,000 bytes still took in 164 KB while its reader slept, as many as without the clamp.)
///
/// A connection is sampled after the loop read it, at most once per two round trips (shorter spans see the link's
/// bursts, not its rate); no sample spans a hold. The first samples, in slow start, change nothing. Connections that
/// turn out not to multiplex (`serial`), or whose path is shorter than `shortestPath`, are not followed.
///
/// While urgent work is recent (`setUrgentRecent`) connections keep at most a quarter of the ceiling, and take no
/// samples. What a background connection lets loose when urgent work starts is then small: one that does not
/// multiplex (HTTP/1.1) sends each next request into a window read empty, and the server answers with all of it at
/// once, which an urgent response meeting it shares the link with; an HTTP/2 one keeps its window's excess over the
/// path (a quarter of a round trip) queued where urgent responses wait behind it. An HTTP/2 connection is lowered only
/// once it has grown to its path: one lowered before never grew back.
final class PathWindows {
    private struct Connection {
        /// The buffer the connection's path calls for (`background_window` at first), and the most it may be.
        var buffer: Int32
        let ceiling: Int32
        /// The buffer on the socket: `buffer`, or less while urgent work is recent (`apply`).
        var applied: Int32
        /// False once the connection turned out to be too short a path or not to multiplex.
        var follows = true
        /// The connection does not multiplex (`serial`).
        var serial = false
        /// A multiplexing connection has delivered at its path's rate (its window followed the path once).
        var grown = false
        /// Monotonic µs and `tcpi_bytes_received` of the last sample; nil until the next read sets them.
        var last: (time: Int64, bytes: UInt64)?
        /// The minimum round trip (µs) at the last sample: reads sooner than two of it after the sample ask the
        /// kernel nothing (a read is the hot path, `TCP_INFO` a system call).
        var minRTT: Int64 = 0
        /// Recent delivery rates (bytes per second), newest last.
        var rates: [Double] = []
        /// Promoted in place: the buffer is the transfer's (`Transfer.urgentWindow`), not followed.
        var lifted = false
    }

    private var connections: [Int32: Connection] = [:]
    /// Whether urgent work ran a short while ago: connections keep a small window.
    private var urgentIsRecent = false
    /// The window over the path's estimate: room to grow, and at most this much less one round trip queued.
    static let gain = 1.25
    /// The window Linux announces for a receive buffer of 1 byte (the overhead of its accounting aside).
    static let windowPerBufferByte = 1.25
    /// The smallest buffer set, whatever the estimate.
    static let smallest: Int32 = 16 << 10
    /// Paths with a shorter minimum round trip (µs; a LAN, the loopback) keep the ceiling: there the server's and the
    /// daemon's own turnaround is much of each round trip, so a window of 1.25 × rate × minimum round trip would not
    /// keep the link busy, and each sample would shrink it further.
    static let shortestPath: UInt32 = 5_000
    /// How many delivery rates the estimate takes the largest of, and how many it waits for before the first change.
    static let samples = 8
    static let firstChangeAfter = 4

    /// A new socket of the background pool (its number may be an old connection's), with `background_window`.
    func opened(_ fd: Int32, buffer: Int32) {
        connections[fd] = Connection(buffer: buffer, ceiling: buffer, applied: buffer)
    }

    /// The loop read `fd`: a delivery sample if two round trips passed since the last one. None while urgent work is
    /// recent: the small window, not the path, would set the rate.
    func read(_ fd: Int32) {
        apply(fd)
        guard !urgentIsRecent, var connection = connections[fd], connection.follows, !connection.lifted else { return }
        let now = Self.microseconds()
        if let last = connection.last, now - last.time < 2 * connection.minRTT { return }
        // Samples start once the connection is up and has a round trip: curl may read a socket still connecting, whose
        // minimum round trip is "none" (UInt32.max), and a sample kept from then waited 2 × 71 minutes for the next.
        guard let info = Self.info(fd), info.state == UInt8(TCP_ESTABLISHED), info.min_rtt != .max else { return }
        connection.minRTT = Int64(info.min_rtt)
        guard let last = connection.last else {
            connection.last = (now, info.bytes_received)
            return connections[fd] = connection
        }
        guard info.min_rtt >= Self.shortestPath else {
            // Too short a path: the ceiling.
            connection.follows = false
            connection.buffer = connection.ceiling
            connections[fd] = connection
            return apply(fd)
        }
        let elapsed = now - last.time
        guard elapsed >= 2 * connection.minRTT else { return connections[fd] = connection }
        connection.last = (now, info.bytes_received)
        if info.bytes_received > last.bytes {
            connection.rates.append(Double(info.bytes_received - last.bytes) * 1_000_000 / Double(elapsed))
            if connection.rates.count > Self.samples { connection.rates.removeFirst() }
        }
        if connection.rates.count >= Self.firstChangeAfter, let fastest = connection.rates.max() {
            connection.grown = true
            let window = Self.gain * fastest * Double(info.min_rtt) / 1_000_000
            let buffer = Int32(min(max(window / Self.windowPerBufferByte, Double(Self.smallest)), Double(connection.ceiling)))
            if abs(Int(buffer) - Int(connection.buffer)) >= 2048 {
                connection.buffer = buffer
                Log.debug("window of socket \(fd): buffer \(buffer) (\(Int(fastest)) B/s, min rtt \(info.min_rtt) µs, rcv rtt \(info.rcv_rtt) µs)")
            }
        }
        connections[fd] = connection
        apply(fd)
    }

    /// The buffer on `fd` now, unless a transfer promoted in place has its own there.
    func buffer(of fd: Int32) -> Int32? {
        guard let connection = connections[fd], !connection.lifted else { return nil }
        return connection.applied
    }

    /// A connection that does not multiplex (HTTP/1.1) is not followed: it keeps its ceiling, or a quarter of it
    /// while urgent work is recent. It idles a round trip between files, so its delivery per round trip understates
    /// the path: the windows shrank with each file, and a serial drain on 10 ms / 100 Mbit/s fell to 0.87 × curl's;
    /// measured only inside responses, files under two round trips gave no sample, and the drains were no better.
    func serial(_ fd: Int32) {
        guard var connection = connections[fd] else { return }
        connection.follows = false
        connection.serial = true
        connection.buffer = connection.ceiling
        connections[fd] = connection
        apply(fd)
    }

    /// Urgent work ended (true), or none came for a while (false). `live` are the sockets in use now (`connections`
    /// may still name closed ones, whose numbers other sockets took); a serial connection idle meanwhile takes the
    /// change when its next response starts (`serial`), after one burst of the size it had.
    func setUrgentRecent(_ recent: Bool, live: some Sequence<Int32>) {
        guard recent != urgentIsRecent else { return }
        urgentIsRecent = recent
        holdChanged()
        for fd in live { apply(fd) }
    }

    /// Puts on `fd` the buffer it should have now (set before the loop reads what a hold kept, so the window a
    /// connection reopens is already the small one), unless a transfer promoted in place has its own there.
    private func apply(_ fd: Int32) {
        guard let connection = connections[fd], !connection.lifted else { return }
        let quarter = max(min(Self.smallest, connection.ceiling), connection.ceiling / 4)
        let small = urgentIsRecent && (connection.serial || connection.grown)
        let buffer = small ? min(connection.buffer, quarter) : connection.buffer
        guard buffer != connection.applied else { return }
        setReceiveBuffer(fd, buffer)
        connections[fd]?.applied = buffer
    }

    /// A hold began or ended: no sample spans it.
    func holdChanged() {
        for fd in connections.keys { connections[fd]?.last = nil }
    }

    /// A transfer promoted in place on `fd` has its own buffer there (`Transfer.urgentWindow`): not followed.
    func lift(_ fd: Int32) { connections[fd]?.lifted = true }

    /// Its connection is background work's again, with the buffer it should have now. False for a connection this
    /// does not know.
    func restore(_ fd: Int32) -> Bool {
        guard var connection = connections[fd] else { return false }
        connection.lifted = false
        connection.last = nil
        connection.applied = Transfer.urgentWindow  // the transfer's own, on the socket now
        connections[fd] = connection
        apply(fd)
        return true
    }

    /// What the kernel knows of a TCP socket (`TCP_INFO`), if it says.
    static func info(_ fd: Int32) -> pf_tcp_info? {
        var info = pf_tcp_info()
        var length = socklen_t(MemoryLayout<pf_tcp_info>.size)
        guard getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0,
              length >= socklen_t(MemoryLayout<pf_tcp_info>.size) else { return nil }
        return info
    }

    private static func microseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }
}

/// Sets a socket's receive buffer, which bounds the TCP window it announces.
func setReceiveBuffer(_ socket: Int32, _ bytes: Int32) {
    var size = bytes
    setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
}
