import CCurl
import CSystem
import Glibc

/// One lane's connections: a curl multi handle driven from the event loop by its socket and timer callbacks. Each
/// multi keeps its own connection cache, so transfers of two pools never share a connection, not even an HTTP/2
/// one (docs/transport.md). A held pool is not read at all: its sockets leave the loop and its timer waits, so
/// its servers stop sending once the receive window is full, and it goes on where it was when let go.
///
/// Connections a pool keeps idle are closed once no transfer used the pool for `idleLifetime`: curl reads no idle
/// socket, so a connection its server closed would stay half-closed (CLOSE_WAIT) until the pool is next used.
final class ConnectionPool {
    private(set) var multi: UnsafeMutableRawPointer
    private let loop: EventLoop
    /// Transfers attached now.
    private var attached = 0
    /// Since when (monotonic ms) no transfer is attached, while curl may keep connections of earlier ones.
    private var idleSince: Int64?
    /// Shorter than the usual servers' keepalive timeouts (nginx: 75 s), so that the daemon closes first; curl
    /// would not reuse a connection idle for 118 s anyway.
    static let idleLifetime: Int64 = 60_000
    /// The events curl asked for on each of this pool's sockets, also while they are out of the loop.
    private var interest: [Int32: UInt32] = [:]
    /// When curl wants `socketAction(timeout)` (monotonic ms); its timer waits while the pool is held.
    private var curlDue: Int64?
    private var curlTimer: LoopTimer!
    private var idleTimer: LoopTimer!
    private(set) var isHeld = false
    /// Watches the calls into curl, shared by the pools.
    private let watchdog: CallWatchdog
    /// Its HTTP/1 connections between transfers, checked before each is used again.
    let idleConnections = IdleConnections()
    /// The pool's sockets that transfers use now.
    var sockets: Dictionary<Int32, UInt32>.Keys { interest.keys }
    /// Called after curl ran, to collect the transfers that ended.
    var afterAction: () -> Void = {}
    /// Called after curl read a socket that had data.
    var afterRead: (Int32) -> Void = { _ in }

    init(loop: EventLoop, watchdog: CallWatchdog) {
        multi = curl_multi_init()
        self.loop = loop
        self.watchdog = watchdog
        curlTimer = loop.makeTimer { [unowned self] in self.curlTimerFired() }
        idleTimer = loop.makeTimer { [unowned self] in self.closeIdleConnections() }
        configure()
    }

    private func configure() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        pf_multi_setopt_socket_callback(multi, poolSocket)
        pf_multi_setopt_pointer(multi, CURLMOPT_SOCKETDATA, me)
        pf_multi_setopt_timer_callback(multi, poolTimer)
        pf_multi_setopt_pointer(multi, CURLMOPT_TIMERDATA, me)
        pf_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
    }

    deinit {
        for fd in interest.keys where loop.isRegistered(fd) { loop.remove(fd) }
        curl_multi_cleanup(multi)
    }

    /// Keeps at most `count` connections open, idle ones included. Without a number curl keeps 4 × the transfers
    /// attached at that moment, and a lane's transfers leave the pool before the next ones come (their bodies are
    /// checked first): at the end of each burst it closed the warm connections that the next burst then opened again,
    /// 107 extra connections for 2,000 files at `fast_width` 16, each a TCP (and TLS) handshake on a real link.
    func keepConnections(_ count: Int) {
        pf_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, count)
    }

    func add(_ easy: UnsafeMutableRawPointer) -> CURLMcode {
        idleConnections.watchClosing(easy)
        let added = curl_multi_add_handle(multi, easy)
        if added == CURLM_OK {
            attached += 1
            idleSince = nil
            idleTimer.cancel()
        }
        return added
    }

    func remove(_ easy: UnsafeMutableRawPointer) {
        curl_multi_remove_handle(multi, easy)
        attached -= 1
        if attached == 0 {
            idleSince = monotonicMilliseconds()
            armTimers()
        }
    }

    /// Stops reading this pool's sockets and running its timers, or reads them again: the loop's next turn finds
    /// what arrived meanwhile and fires curl's timer if it passed.
    func hold(_ held: Bool) {
        guard held != isHeld else { return }
        isHeld = held
        if held {
            for fd in interest.keys { loop.remove(fd) }
        } else {
            for (fd, events) in interest { watch(fd, events) }
        }
        armTimers()
    }

    /// The longest smoothed round trip (ms) the kernel measured on this pool's connections; 0 without any.
    func longestRoundTrip() -> Int64 {
        var longest: Int64 = 0
        for fd in interest.keys {
            var info = tcp_info()
            var length = socklen_t(MemoryLayout<tcp_info>.size)
            guard getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { continue }
            longest = max(longest, Int64(info.tcpi_rtt) / 1000)
        }
        return longest
    }

    private func armTimers() {
        curlTimer.schedule(at: isHeld ? nil : curlDue)
        idleTimer.schedule(at: isHeld ? nil : idleSince.map { $0 + Self.idleLifetime })
    }

    private func curlTimerFired() {
        curlDue = nil
        var running: Int32 = 0
        watchdog.watch(-1) { curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running) }
        afterAction()
    }

    /// With no transfer attached, a new multi handle replaces the old one, whose cleanup closes the connections.
    private func closeIdleConnections() {
        precondition(attached == 0, "closing the connections of running transfers")
        idleSince = nil
        for fd in interest.keys {
            watchdog.polls(fd, false)
            if loop.isRegistered(fd) { loop.remove(fd) }
        }
        interest = [:]
        curl_multi_cleanup(multi)
        multi = curl_multi_init()
        curlDue = nil
        configure()
        armTimers()
        Log.debug("closed the connections idle for \(Self.idleLifetime / 1000) s")
    }

    fileprivate func socketChanged(_ fd: Int32, what: Int32, easy: UnsafeMutableRawPointer?) {
        if what == CURL_POLL_REMOVE {
            interest.removeValue(forKey: fd)
            watchdog.polls(fd, false)
            loop.remove(fd)
            return
        }
        var pointer: UnsafeMutableRawPointer?
        if let easy, pf_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &pointer) == CURLE_OK, let pointer {
            Unmanaged<Transfer>.fromOpaque(pointer).takeUnretainedValue().polls(fd)
        }
        var events: UInt32 = 0
        if what == CURL_POLL_IN || what == CURL_POLL_INOUT { events |= UInt32(EPOLLIN.rawValue) }
        if what == CURL_POLL_OUT || what == CURL_POLL_INOUT { events |= UInt32(EPOLLOUT.rawValue) }
        if interest.updateValue(events, forKey: fd) == nil { watchdog.polls(fd, true) }
        if !isHeld { watch(fd, events) }
    }

    private func watch(_ fd: Int32, _ events: UInt32) {
        if loop.isRegistered(fd) { return loop.modify(fd, events: events) }
        do {
            try loop.add(fd, events: events) { [unowned self] ready in self.socketReady(fd, ready) }
        } catch {
            Log.error("cannot watch a curl socket: \(error)")
        }
    }

    fileprivate func timerChanged(_ milliseconds: Int) {
        curlDue = milliseconds < 0 ? nil : monotonicMilliseconds() + Int64(milliseconds)
        curlTimer.schedule(at: isHeld ? nil : curlDue)
    }

    private func socketReady(_ fd: Int32, _ events: UInt32) {
        var mask: Int32 = 0
        if events & UInt32(EPOLLIN.rawValue) != 0 { mask |= CURL_CSELECT_IN }
        if events & UInt32(EPOLLOUT.rawValue) != 0 { mask |= CURL_CSELECT_OUT }
        if events & UInt32(EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { mask |= CURL_CSELECT_ERR }
        var running: Int32 = 0
        watchdog.watch(fd) { curl_multi_socket_action(multi, fd, mask, &running) }
        if mask & CURL_CSELECT_IN != 0 { afterRead(fd) }
        afterAction()
    }
}

private let poolSocket: curl_socket_callback = { easy, fd, what, userdata, _ in
    Unmanaged<ConnectionPool>.fromOpaque(userdata!).takeUnretainedValue().socketChanged(fd, what: what, easy: easy)
    return 0
}

private let poolTimer: curl_multi_timer_callback = { _, milliseconds, userdata in
    Unmanaged<ConnectionPool>.fromOpaque(userdata!).takeUnretainedValue().timerChanged(milliseconds)
    return 0
}
