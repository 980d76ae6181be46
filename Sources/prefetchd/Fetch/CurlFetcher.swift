import CCurl
import CSystem
import Glibc
import QueueCore

/// How a transfer ended, as the daemon needs it.
struct FetchResult {
    enum Body {
        /// A complete new body in `path`, checked and hashed.
        case downloaded(path: String, bytes: Int64, sha256: String)
        /// The server confirmed the cached copy (304).
        case notModified
    }

    let key: String
    let headers: ResponseHeaders
    let outcome: Result<Body, Failure>
}

/// All transfers, driven by one curl multi handle on the event loop (socket and timer callbacks, no polling).
final class CurlFetcher {
    private let multi: UnsafeMutableRawPointer
    private let loop: EventLoop
    var settings: FetchSettings
    private var transfers: [String: Transfer] = [:]
    /// When curl wants `socketAction(timeout)` (monotonic ms).
    private(set) var deadline: Int64?
    /// Called on the loop thread for every transfer that ends (not for aborted or parked ones).
    var onFinish: (FetchResult) -> Void = { _ in }
    /// Called just before a finished transfer's response is interpreted.
    var onConcluding: (String) -> Void = { _ in }
    /// Whether a finished transfer's response may be interpreted now; when not, it waits for `concludeHeld()`.
    var mayConclude: () -> Bool = { true }
    /// Transfers that ended and whose responses are not interpreted yet.
    private var finished: [(Transfer, CURLcode)] = []
    /// Called when a transfer's 2xx body starts, with the validator that would let it resume.
    var onBodyStart: (_ key: String, _ validator: String?) -> Void = { _, _ in }

    init(loop: EventLoop, settings: FetchSettings) {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
        multi = curl_multi_init()
        self.loop = loop
        self.settings = settings
        let me = Unmanaged.passUnretained(self).toOpaque()
        pf_multi_setopt_socket_callback(multi, fetcherSocket)
        pf_multi_setopt_pointer(multi, CURLMOPT_SOCKETDATA, me)
        pf_multi_setopt_timer_callback(multi, fetcherTimer)
        pf_multi_setopt_pointer(multi, CURLMOPT_TIMERDATA, me)
        pf_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, settings.connectionsPerHost)
        pf_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
    }

    deinit {
        for key in Array(transfers.keys) { stop(key, keepingBody: true) }
        curl_multi_cleanup(multi)
    }

    var runningCount: Int { transfers.count }

    /// Bytes received and expected for a running transfer.
    func progress(_ key: String) -> (received: Int64, expected: Int64?)? {
        transfers[key].map { ($0.received, $0.expectedBytes) }
    }

    func start(_ request: TransferRequest, throttled: Bool) throws {
        precondition(transfers[request.key] == nil, "two transfers for \(request.key)")
        let transfer = try Transfer(request, settings: settings)
        transfer.onBodyStart = { [unowned self] transfer, validator in self.onBodyStart(transfer.key, validator) }
        if throttled { transfer.limitRate(settings.backgroundRateWhileSuspended) }
        transfers[request.key] = transfer
        curl_multi_add_handle(multi, transfer.easy)
    }

    /// Stops a transfer; its partial body is deleted, or kept on disk to resume from when `keepingBody`.
    func stop(_ key: String, keepingBody: Bool) {
        guard let transfer = transfers.removeValue(forKey: key) else { return }
        curl_multi_remove_handle(multi, transfer.easy)
        if keepingBody { transfer.closeFile() } else { transfer.discardBody() }
    }

    /// Holds a background transfer to a low rate while urgent work runs, or lets it run at full speed.
    func setThrottled(_ key: String, _ throttled: Bool) {
        transfers[key]?.limitRate(throttled ? settings.backgroundRateWhileSuspended : 0)
    }

    /// A running transfer changed lane in place: held back or not, and urgent work gets its window back.
    func changeLane(_ key: String, to lane: Lane, throttled: Bool) {
        guard let transfer = transfers[key] else { return }
        transfer.lane = lane
        transfer.limitRate(throttled ? settings.backgroundRateWhileSuspended : 0)
        transfer.widenWindowForUrgentWork()
    }

    /// Curl's timer expired.
    func timerFired() {
        deadline = nil
        var running: Int32 = 0
        curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running)
        collectFinished()
    }

    fileprivate func socketChanged(_ fd: Int32, what: Int32, easy: UnsafeMutableRawPointer?) {
        if what == CURL_POLL_REMOVE {
            loop.remove(fd)
            return
        }
        var pointer: UnsafeMutableRawPointer?
        if let easy, pf_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &pointer) == CURLE_OK, let pointer {
            let transfer = Unmanaged<Transfer>.fromOpaque(pointer).takeUnretainedValue()
            transfer.socket = fd
        }
        var events: UInt32 = 0
        if what == CURL_POLL_IN || what == CURL_POLL_INOUT { events |= UInt32(EPOLLIN.rawValue) }
        if what == CURL_POLL_OUT || what == CURL_POLL_INOUT { events |= UInt32(EPOLLOUT.rawValue) }
        if loop.isRegistered(fd) {
            loop.modify(fd, events: events)
        } else {
            do {
                try loop.add(fd, events: events) { [unowned self] ready in self.socketReady(fd, ready) }
            } catch {
                Log.error("cannot watch a curl socket: \(error)")
            }
        }
    }

    fileprivate func timerChanged(_ milliseconds: Int) {
        deadline = milliseconds < 0 ? nil : monotonicMilliseconds() + Int64(milliseconds)
    }

    private func socketReady(_ fd: Int32, _ events: UInt32) {
        var mask: Int32 = 0
        if events & UInt32(EPOLLIN.rawValue) != 0 { mask |= CURL_CSELECT_IN }
        if events & UInt32(EPOLLOUT.rawValue) != 0 { mask |= CURL_CSELECT_OUT }
        if events & UInt32(EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { mask |= CURL_CSELECT_ERR }
        var running: Int32 = 0
        curl_multi_socket_action(multi, fd, mask, &running)
        collectFinished()
    }

    private func collectFinished() {
        var pending: Int32 = 0
        while let message = curl_multi_info_read(multi, &pending) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            var pointer: UnsafeMutableRawPointer?
            pf_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &pointer)
            let transfer = Unmanaged<Transfer>.fromOpaque(pointer!).takeUnretainedValue()
            transfers.removeValue(forKey: transfer.key)
            curl_multi_remove_handle(multi, easy)
            finished.append((transfer, code))
        }
        concludeHeld()
    }

    /// Interprets the finished transfers' responses, in order, while `mayConclude` allows.
    func concludeHeld() {
        while !finished.isEmpty, mayConclude() {
            let (transfer, code) = finished.removeFirst()
            onConcluding(transfer.key)
            onFinish(conclude(transfer, code: code))
        }
    }

    private func conclude(_ transfer: Transfer, code: CURLcode) -> FetchResult {
        let status = transfer.responseCode
        let headers = transfer.headers
        func failed(_ failure: Failure) -> FetchResult {
            transfer.closeFile()
            return FetchResult(key: transfer.key, headers: headers, outcome: .failure(failure))
        }
        if code != CURLE_OK {
            return failed(CurlErrors.failure(code, transfer: transfer))
        }
        if status == 304 && transfer.conditional {
            transfer.discardBody()
            return FetchResult(key: transfer.key, headers: headers, outcome: .success(.notModified))
        }
        if status == 416 {
            transfer.discardBody()
            return failed(Failure(code: "http_status", message: "the server refused to resume (HTTP 416); starting over",
                                  isTransient: true, httpStatus: 416))
        }
        guard (200...299).contains(status) else {
            let retryAfter = headers.retryAfterMilliseconds(now: wallClockMilliseconds())
            return failed(Failure.httpStatus(status, retryAfter: retryAfter))
        }
        if let incomplete = transfer.incompleteBody() {
            return failed(incomplete)
        }
        let sha256 = transfer.finishBody()
        return FetchResult(key: transfer.key, headers: headers,
                           outcome: .success(.downloaded(path: transfer.bodyPath, bytes: transfer.received, sha256: sha256)))
    }
}

private let fetcherSocket: curl_socket_callback = { easy, fd, what, userdata, _ in
    Unmanaged<CurlFetcher>.fromOpaque(userdata!).takeUnretainedValue().socketChanged(fd, what: what, easy: easy)
    return 0
}

private let fetcherTimer: curl_multi_timer_callback = { _, milliseconds, userdata in
    Unmanaged<CurlFetcher>.fromOpaque(userdata!).takeUnretainedValue().timerChanged(milliseconds)
    return 0
}
