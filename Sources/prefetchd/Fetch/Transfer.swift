import CCrypto
import CCurl
import Glibc
import PrefetchProtocol
import QueueCore

/// What to fetch and where its body goes.
struct TransferRequest {
    var key: String
    var lane: Lane
    /// Validators of the cached copy, for a conditional request (a 304 then confirms it).
    var conditional: (etag: String?, lastModified: String?)?
    /// The body file; when it already holds bytes and `resumeValidator` is set, the transfer asks for the rest.
    var bodyPath: String
    var resumeValidator: String?
    /// The length of the file whose first bytes the body file holds, when the server announced it: a rest of a file of
    /// another length is another version's, whatever its validator says.
    var resumeLength: Int64?
    /// A retry after a failed attempt: it opens a connection of its own. The connection that failed may be dead
    /// (an outage, a stall) and still kept by curl, and on HTTP/2 the retry would be multiplexed onto it.
    var freshConnection = false
    /// A connection that serves nothing else on HTTP/1, before or after: the last answer of this URL was evicted because
    /// its connection had bytes nobody asked for, which may shift every answer on it (docs/transport.md, item 9).
    /// (HTTP/2 frames its answers, and another transfer may multiplex onto the new connection.)
    var ownConnection = false
}

/// One download in progress: its easy handle and the body file it streams into (resuming what is there).
final class Transfer {
    let key: String
    let easy: UnsafeMutableRawPointer
    let bodyPath: String
    private(set) var lane: Lane
    /// The lane whose connection pool carries it: the lane it started in (a lane change keeps the connection).
    let pool: Lane
    /// What starts it again from where it is: its request, resuming the body once it started with a validator.
    private(set) var continuation: TransferRequest
    /// Whether a conditional request was sent (a 304 is then expected, not an error).
    let conditional: Bool
    /// Bytes in the body file, resumed ones included.
    private(set) var received: Int64 = 0
    /// Bytes that were already on disk when this transfer started (0 when it started over).
    private(set) var resumedFrom: Int64 = 0
    private(set) var headers = ResponseHeaders()
    /// Set when the write callback stopped the transfer on purpose.
    private(set) var stopReason: Failure?
    /// Set when the body of an error page was cut short (`progress`): the transfer ends as the status says.
    private(set) var errorPageCut = false
    /// The connection's socket and the bytes its kernel had received (`TCP_INFO`) at the first `progress` after the
    /// request went out on it, and when `progress` last looked (monotonic ms): what the response brought on the wire.
    private var wire: (socket: curl_socket_t, baseline: UInt64, lookedAt: Int64)?
    /// Set when the server answered the resume in a way that cannot continue the bytes kept, though it may well serve
    /// the whole file: another version's rest, or the whole body in a Content-Encoding.
    private(set) var resumeRefused = false
    /// Set when `allows` refused the address curl was to connect to, or connected to: the address and the network.
    private(set) var refusedAddress: (address: String, network: IPNetwork)?
    /// Why the last socket this transfer asked for could not be made (`errno`; EMFILE when out of descriptors): curl
    /// then reports only that it could not connect.
    fileprivate(set) var socketError: Int32?
    /// Whether the request was sent, on a connection made (handshakes included) or reused: false when the server was
    /// not reached.
    fileprivate(set) var requestSent = false
    private let deniedNetworks: [IPNetwork]
    /// Called once when a 2xx body starts arriving, with the validator a resume would need (if any) and the file's
    /// length (if announced).
    var onBodyStart: (Transfer, _ validator: String?, _ length: Int64?) -> Void = { _, _, _ in }
    /// Called once, inside curl's write callback, when a body with a validator holds `resumeWorthRecording` bytes:
    /// from then on a start after a crash should resume it rather than fetch it again.
    var onResumeWorthRecording: (Transfer) -> Void = { _ in }
    /// Bytes a body holds before its resume is worth a durable record: two index writes cost more than fetching
    /// less again after a crash (a stop or a failure that keeps the body records it whatever its length).
    static let resumeWorthRecording: Int64 = 64 << 10
    private var resumeRecorded = false
    /// Called once, inside curl's write callback, when background work on a multiplexed (HTTP/2 or later)
    /// connection of the background pool reaches its tail, `tailWindows` windows from its end: about one window is on
    /// its way, and a request for the next file sent now reaches the server before the other runs out. Not with
    /// `background_window` 0 (no bound to count in).
    var onTail: (Transfer) -> Void = { _ in }
    /// How many of its connection's windows (`window`) from its end a body's tail begins.
    static let tailWindows: Int64 = 2
    /// Whether the response came over a connection that multiplexes, and whether `onTail` was called.
    private var multiplexed = false
    private var tailReported = false
    /// Counts the body bytes this transfer receives while it is background work (the background rate budget).
    private let backgroundBytes: ByteCounter?
    /// The windows of the background pool's connections, for a transfer of that pool.
    fileprivate let pathWindows: PathWindows?
    /// The HTTP/1 connections its pool keeps between transfers, checked before a request goes out on one.
    fileprivate let idleConnections: IdleConnections
    /// The TLS sessions it may resume and adds to; held until curl lets go of them (`deinit`).
    private let tlsSessions: TLSSessions
    /// When it was made (monotonic ms): curl's own total time stops short on a failed name lookup.
    let startedAt = monotonicMilliseconds()
    /// Whether body bytes of the final response arrived.
    private(set) var bodyStarted = false
    /// The file's length once a `206` body is complete, from its `Content-Range`.
    private var expectedTotal: Int64?
    /// The receive buffer a background connection gets (`background_window`), 0 for the kernel's.
    fileprivate let backgroundWindow: Int32
    private var fd: Int32
    /// Body bytes received and not written yet: curl hands over each chunk of a chunked body apart, and a server
    /// sending 1-byte chunks made one `write` per byte (about 270,000 in one call into curl, which stopped the loop for
    /// seconds). Written at `bodyBufferSize`, at the end, and before the file is closed.
    private var unwritten: [UInt8] = []
    private static let bodyBufferSize = 64 * 1024
    /// Successful statuses whose body is not the resource asked for (RFC 9110 section 15.3; RFC 4918, 5842, 3229): a
    /// 205 carries no content, a 201 or 202 describes the request's effect, a 207 or 208 is WebDAV's XML, a 226 a
    /// delta the daemon never asked for (A-IM). They fail as `http_status`, at their headers; another 2xx is a 200.
    static let notTheResource: Set<Int> = [201, 202, 205, 207, 208, 226]
    /// The most bytes read of a body that is never kept, an error page's or a redirect's: small ones are read to the
    /// end, so that the connection can carry the next request; past this the transfer stops (an endless chunked 302
    /// was read at 2 GB/s, for as long as its server went on).
    static let mostUnkeptBodyBytes: Int64 = 64 << 10
    private let maxBytes: Int64
    /// Seconds with less than `low_speed_limit` bytes/s that stop the transfer.
    let lowSpeedTime: Int64
    private var requestHeaders: UnsafeMutablePointer<curl_slist>?
    /// Where curl writes what went wrong in its own words (`CURLOPT_ERRORBUFFER`).
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
    /// Whether the error buffer held text when the transfer began resolving, opening a socket or sending a request.
    /// curl keeps only a transfer's first error, and before connecting it checks the pooled connections of other
    /// transfers, writing what broke one of those (an HTTP/2 protocol error) as this one's: such text is about another
    /// connection, and the transfer's own failure went unwritten.
    private var detailIsStale = false

    /// A transfer writing into `body`, which it owns from now on (and closes).
    init(_ request: TransferRequest, body: BodyFile, settings: FetchSettings,
         backgroundBytes: ByteCounter?, pathWindows: PathWindows?, idleConnections: IdleConnections,
         tlsSessions: TLSSessions) throws(SystemError) {
        guard let easy = curl_easy_init() else {
            close(body.descriptor)
            throw SystemError(call: "curl_easy_init", errno: ENOMEM, detail: "")
        }
        self.easy = easy
        self.backgroundBytes = backgroundBytes
        self.pathWindows = pathWindows
        self.idleConnections = idleConnections
        self.tlsSessions = tlsSessions
        key = request.key
        lane = request.lane
        pool = request.lane
        continuation = request
        maxBytes = settings.maxBytes
        lowSpeedTime = settings.lowSpeedTime
        backgroundWindow = Int32(settings.backgroundWindow)
        deniedNetworks = IPNetwork.linkLocal + settings.deniedNetworks
        conditional = request.conditional != nil
        bodyPath = request.bodyPath
        fd = body.descriptor

        // RFC 9218 priorities, for the servers and CDNs that order their sending by them: background is the least
        // urgent and incremental.
        var headerLines = ["Accept: image/*,*/*;q=0.8", request.lane == .fast ? "Priority: u=1" : "Priority: u=7, i"]
        if let conditional = request.conditional {
            if let etag = conditional.etag { headerLines.append("If-None-Match: \(etag)") }
            if let modified = conditional.lastModified { headerLines.append("If-Modified-Since: \(modified)") }
        }
        if let validator = request.resumeValidator {
            resumedFrom = body.length
            // Without Accept-Encoding any coding would do (RFC 9110 section 12.5.3), and curl decodes none.
            if resumedFrom > 0 { headerLines += ["If-Range: \(validator)", "Accept-Encoding: identity"] }
        }
        received = resumedFrom
        for line in headerLines { requestHeaders = curl_slist_append(requestHeaders, line) }

        let me = Unmanaged.passUnretained(self).toOpaque()
        pf_easy_setopt_string(easy, CURLOPT_URL, key)
        pf_easy_setopt_pointer(easy, CURLOPT_PRIVATE, me)
        pf_easy_setopt_pointer(easy, CURLOPT_SHARE, tlsSessions.share)
        pf_easy_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION, transferWrite)
        pf_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, me)
        pf_easy_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION, transferHeader)
        pf_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, me)
        pf_easy_setopt_long(easy, CURLOPT_NOPROGRESS, 0)
        pf_easy_setopt_xferinfo_callback(easy, transferProgress)
        pf_easy_setopt_pointer(easy, CURLOPT_XFERINFODATA, me)
        pf_easy_setopt_opensocket_callback(easy, transferOpenSocket)
        pf_easy_setopt_pointer(easy, CURLOPT_OPENSOCKETDATA, me)
        pf_easy_setopt_prereq_callback(easy, transferPrerequest)
        pf_easy_setopt_resolver_start_callback(easy, transferResolverStart)
        pf_easy_setopt_pointer(easy, CURLOPT_RESOLVER_START_DATA, me)
        if pool == .slow, backgroundWindow > 0 {
            // Connections of the background pool get a bounded window: a held transfer stops taking the link soon.
            pf_easy_setopt_sockopt_callback(easy, transferSocketOptions)
            pf_easy_setopt_pointer(easy, CURLOPT_SOCKOPTDATA, me)
        }
        pf_easy_setopt_pointer(easy, CURLOPT_PREREQDATA, me)
        pf_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, requestHeaders)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        pf_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer)
        if resumedFrom > 0 {
            pf_easy_setopt_string(easy, CURLOPT_RANGE, "\(resumedFrom)-")
        } else {
            // curl decodes these; the size limit counts the decoded bytes. Not zstd: its frames may ask for a 128 MiB
            // window, which curl 7.88 grants (50 MB of memory a transfer for 10 KB of zstd). A resume asks for the
            // identity encoding only: a range of an encoded body is not a range of the file.
            pf_easy_setopt_string(easy, CURLOPT_ACCEPT_ENCODING, ResponseHeaders.decodedCodings.joined(separator: ", "))
        }
        pf_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https")
        pf_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        pf_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 1)
        pf_easy_setopt_long(easy, CURLOPT_MAXREDIRS, 5)
        pf_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        pf_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Int(settings.connectTimeout))
        pf_easy_setopt_long(easy, CURLOPT_LOW_SPEED_LIMIT, Int(settings.lowSpeedLimit))
        pf_easy_setopt_long(easy, CURLOPT_LOW_SPEED_TIME, Int(settings.lowSpeedTime))
        pf_easy_setopt_string(easy, CURLOPT_USERAGENT, "prefetchd/\(prefetchVersion)")
        pf_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        // Over TLS, transfers started together wait for the first connection's ALPN instead of each opening one: on
        // HTTP/2 they multiplex on it. Not for plain HTTP, where curl 7.88 learns that only from the first response
        // and then wakes one waiting transfer per finished one (docs/transport.md).
        if key.lowercased().hasPrefix("https:") { pf_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1) }
        pf_easy_setopt_long(easy, CURLOPT_TCP_KEEPALIVE, 1)
        if request.freshConnection || request.ownConnection { pf_easy_setopt_long(easy, CURLOPT_FRESH_CONNECT, 1) }
        if request.ownConnection { pf_easy_setopt_long(easy, CURLOPT_FORBID_REUSE, 1) }
        if let proxy = settings.proxy { pf_easy_setopt_string(easy, CURLOPT_PROXY, proxy) }
        // TLS 1.2 at least: curl 7.88 would otherwise take TLS 1.0 from a server offering nothing newer.
        pf_easy_setopt_long(easy, CURLOPT_SSLVERSION, CURL_SSLVERSION_TLSv1_2)
        if let caFile = settings.caFile { pf_easy_setopt_string(easy, CURLOPT_CAINFO, caFile) }
        if let caPath = settings.caPath { pf_easy_setopt_string(easy, CURLOPT_CAPATH, caPath) }
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_slist_free_all(requestHeaders)
        errorBuffer.deallocate()
        closeFile()
    }

    /// Whether curl made a connection for this transfer (redirects included), rather than reusing one: on a reused
    /// HTTP/1 connection, bytes the server sent after the last response may be what curl could not read.
    var madeItsConnection: Bool {
        var made = 0
        pf_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &made)
        return made > 0
    }

    /// curl's own account of the failure, naming what `curl_easy_strerror` only classifies (which certificate
    /// check failed, which address refused), if it wrote one about this transfer.
    var errorDetail: String? {
        guard !detailIsStale else { return nil }
        let text = String(String(cString: errorBuffer).trimmingCharacters(in: " \n"))
        return text.isEmpty ? nil : text
    }

    /// Called when the transfer begins resolving, opens a socket or sends its request: an error written before then
    /// is not this transfer's.
    fileprivate func noteConnectionStep() {
        if errorBuffer.pointee != 0 { detailIsStale = true }
    }

    /// Whether curl verifies certificates with OpenSSL, whose verify results `certificateProblem` names.
    private static let verifiesWithOpenSSL = pf_version_info().pointee.ssl_version
        .map { String(cString: $0).hasPrefix("OpenSSL") } ?? false

    /// Why the server's certificate was not trusted, in OpenSSL's words (`CURLINFO_SSL_VERIFYRESULT`), if it was not.
    var certificateProblem: String? {
        guard Self.verifiesWithOpenSSL else { return nil }
        var result = 0
        pf_easy_getinfo_long(easy, CURLINFO_SSL_VERIFYRESULT, &result)
        guard result != 0, let text = X509_verify_cert_error_string(result) else { return nil }
        return "SSL certificate problem: " + String(cString: text)
    }

    /// The host of the URL curl asked for last (a redirect's target included).
    var effectiveHost: String? {
        var url: UnsafeMutablePointer<CChar>?
        pf_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &url)
        guard let url, let parsed = curl_url() else { return nil }
        defer { curl_url_cleanup(parsed) }
        var host: UnsafeMutablePointer<CChar>?
        guard curl_url_set(parsed, CURLUPART_URL, url, 0) == CURLUE_OK,
              curl_url_get(parsed, CURLUPART_HOST, &host, 0) == CURLUE_OK, let host else { return nil }
        defer { curl_free(host) }
        return String(cString: host)
    }

    /// The connection the transfer ran on, once it had one: its local and remote addresses and ports.
    var connection: String? {
        var localPort = 0, remotePort = 0
        var local: UnsafeMutablePointer<CChar>?, remote: UnsafeMutablePointer<CChar>?
        pf_easy_getinfo_long(easy, CURLINFO_LOCAL_PORT, &localPort)
        pf_easy_getinfo_long(easy, CURLINFO_PRIMARY_PORT, &remotePort)
        pf_easy_getinfo_string(easy, CURLINFO_LOCAL_IP, &local)
        pf_easy_getinfo_string(easy, CURLINFO_PRIMARY_IP, &remote)
        guard localPort > 0, let local, let remote else { return nil }
        return "[\(String(cString: local))]:\(localPort)>[\(String(cString: remote))]:\(remotePort)"
    }

    var responseCode: Int {
        var code = 0
        pf_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    /// The size of this response's body, when the server announced it (and it is not the size of an encoded body).
    var expectedBytes: Int64? {
        guard !headers.isEncoded else { return nil }
        var length: curl_off_t = -1
        pf_easy_getinfo_off_t(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length)
        return length >= 0 ? Int64(length) : nil
    }

    /// The whole body's size, when known: a resumed response's range added to the bytes kept (nil until its first
    /// byte says whether the server sent the range), else what the server announced.
    var expectedBodyBytes: Int64? { expectedTotal ?? (resumedFrom > 0 ? nil : expectedBytes) }

    /// The file the body is written into, while it is open.
    var bodyFile: FileIdentity? { fd >= 0 ? FileIdentity(descriptor: fd) : nil }

    /// Closes the file and deletes it.
    func discardBody() {
        unwritten.removeAll()
        closeFile()
        unlink(bodyPath)
    }

    func closeFile() {
        if fd >= 0 {
            _ = writeBody()
            close(fd)
        }
        fd = -1
    }

    /// Writes the bytes received and not written yet; false, with the reason in `stopReason`, when it cannot.
    func writeBody() -> Bool {
        guard !unwritten.isEmpty else { return true }
        defer { unwritten.removeAll(keepingCapacity: true) }
        let count = unwritten.count
        return unwritten.withUnsafeBytes { bytes in
            var offset = 0
            while offset < count {
                let written = Glibc.write(fd, bytes.baseAddress! + offset, count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    let full = errno == ENOSPC || errno == EDQUOT
                    if stopReason == nil {
                        stopReason = Failure(code: full ? .diskFull : .internal,
                                             message: "writing \(bodyPath): \(String(cString: strerror(errno)))", isTransient: true)
                    }
                    return false
                }
                offset += written
            }
            return true
        }
    }

    /// Drops what a resume had kept: the server sent the whole body again, or the bytes held cannot be trusted.
    private func startOver() {
        unwritten.removeAll(keepingCapacity: true)
        _ = ftruncate(fd, 0)
        _ = lseek(fd, 0, SEEK_SET)
        received = 0
        resumedFrom = 0
    }

    /// Stops the transfer with a transient failure and drops the bytes held, so that the next attempt starts at 0.
    private func refuse(_ reason: String) -> Int {
        startOver()
        stopReason = Failure(code: .network, message: reason + "; the download starts over", isTransient: true)
        return 0
    }

    /// Stops a resume the server answered with something that cannot continue the bytes kept (`refuse`).
    private func refuseResume(_ reason: String) -> Int {
        resumeRefused = true
        return refuse(reason)
    }

    /// Why a `206` with the rest of the file cannot be joined to the bytes kept (`sent` is the `If-Range` validator):
    /// its validator differs (a server that ignores `If-Range` sends the rest of its current version), or it has none
    /// to compare. Joined, they would make a file that never was (RFC 9110 section 15.3.7: only parts with the same
    /// strong validator combine).
    private func otherVersion(than sent: String?) -> String? {
        guard let sent else { return nil }
        if sent.hasPrefix("\"") {
            guard let etag = headers.etag else { return "the server sent the rest of the file without its ETag" }
            guard etag != sent else { return nil }
            return "the server sent the rest of another version of the file (ETag \(etag.prefix(60)), the bytes kept "
                + "are of \(sent.prefix(60)))"
        }
        guard let modified = headers.lastModified else { return "the server sent the rest of the file without its Last-Modified" }
        guard ResponseHeaders.parseDate(modified) != ResponseHeaders.parseDate(sent) else { return nil }
        return "the server sent the rest of another version of the file (Last-Modified \(modified.prefix(40)), the "
            + "bytes kept are of \(sent.prefix(40)))"
    }

    fileprivate func write(_ data: UnsafeRawBufferPointer) -> Int {
        let status = responseCode
        guard (200...299).contains(status) else { return data.count }  // an error page: not kept
        if !bodyStarted {
            bodyStarted = true
            if status == 206 {
                switch headers.partialBody(requestedFrom: resumedFrom) {
                case .rest(let bytes):
                    if let version = otherVersion(than: continuation.resumeValidator) { return refuseResume(version) }
                    let total = resumedFrom.saturatingAdd(bytes)
                    if let kept = continuation.resumeLength, kept != total {
                        return refuseResume("the server sent the rest of a file of \(total) bytes, the bytes kept are of "
                                            + "one of \(kept) bytes: another version of it")
                    }
                    expectedTotal = total
                case .whole(let bytes):
                    if resumedFrom > 0 { startOver() }
                    expectedTotal = bytes
                case .mismatch(let reason):
                    return refuse(reason)
                }
            } else if resumedFrom > 0 {
                guard !headers.isEncoded else {
                    return refuseResume("the server answered the resume with the whole file in a Content-Encoding, "
                                        + "which a resume does not decode")
                }
                startOver()
            }
            // An encoded body is stored decoded: its bytes are not the ones a range would count. Only a strong
            // validator may join a rest to it; nor to a server that serves no ranges.
            let validator = headers.isEncoded || headers.refusesRanges ? nil
                : headers.etag.flatMap { $0.hasPrefix("W/") ? nil : $0 } ?? headers.strongLastModified
            let length = expectedTotal ?? expectedBytes
            continuation.conditional = nil
            continuation.resumeValidator = validator
            continuation.resumeLength = length
            var version = 0
            pf_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
            multiplexed = version >= Int(CURL_HTTP_VERSION_2_0)
            if !multiplexed, pool == .slow { pathWindows?.serial(socket) }
            onBodyStart(self, validator, length)
        }
        let count = Int64(data.count)
        if let expectedTotal, count > expectedTotal - received {
            return refuse("the server sent more than the \(expectedTotal - resumedFrom) bytes its Content-Range announced")
        }
        if count > maxBytes - received {
            stopReason = Failure(code: .tooLarge, message: "the body exceeds the \(maxBytes)-byte limit", isTransient: false)
            return 0
        }
        if unwritten.isEmpty { unwritten.reserveCapacity(Self.bodyBufferSize) }
        unwritten.append(contentsOf: data)
        if unwritten.count >= Self.bodyBufferSize, !writeBody() { return 0 }
        received += Int64(data.count)
        if !resumeRecorded, received >= Self.resumeWorthRecording, continuation.resumeValidator != nil {
            resumeRecorded = true
            onResumeWorthRecording(self)
        }
        if lane == .slow { backgroundBytes?.add(Int64(data.count)) }
        if multiplexed, !tailReported, lane == .slow, pool == .slow, backgroundWindow > 0,
           let total = expectedBodyBytes, total - received <= Self.tailWindows * window {
            tailReported = true
            onTail(self)
        }
        return data.count
    }

    /// Takes the bytes curl read of the current response's body (`CURLOPT_XFERINFOFUNCTION`); false stops the
    /// transfer: an error page's or a redirect's body, which no write keeps (curl reads a redirect's without one),
    /// past `mostUnkeptBodyBytes`. An error page so cut ends as one read whole (`errorPageCut`). Also, every
    /// `wireLookInterval`, a response that brought far more on the wire than its body (`tooMuchBesidesTheBody`).
    fileprivate func progress(bodyBytes: Int64) -> Bool {
        guard stopReason == nil, !errorPageCut else { return true }
        if let reason = tooMuchBesidesTheBody() {
            stopReason = reason
            return false
        }
        guard bodyBytes > Self.mostUnkeptBodyBytes else { return true }
        let status = responseCode
        switch status {
        case 200...299:
            return true
        case 300...399:
            stopReason = Failure(code: .tooLarge, message: "the \(status) redirect's body went on past "
                                 + "\(Self.mostUnkeptBodyBytes / 1024) KiB", isTransient: false)
        default:
            errorPageCut = true
        }
        return false
    }

    /// How often `progress` asks the kernel what the connection received: a transfer shorter than this never asks.
    static let wireLookInterval: Int64 = 100

    /// The request goes out (`CURLOPT_PREREQFUNCTION`): what the connection received so far is not this response's.
    /// (curl 7.88 reports no active socket before a transfer's end: `progress` takes the baseline at its next call.)
    fileprivate func requestGoesOut() { wire = nil }

    /// Why the response is stopped, when it brought more than twice what its body may be (and a MiB) on an HTTP/1.x
    /// connection: bytes curl reads and counts as no body, such as a chunk extension that never ends (curl 7.88 skips
    /// one unbounded: an adversary's server sent 30 GB in three attempts of `low_speed_time`, the loop thread busy
    /// parsing them). Looked at every `wireLookInterval`, from what the kernel of the connection curl polls had
    /// received at the first call after the request went out on it (`TCP_INFO`). HTTP/2 carries no chunks, and its
    /// connection other transfers' bytes.
    private func tooMuchBesidesTheBody() -> Failure? {
        // No socket yet (curl announces it once it polls one): there is nothing to ask (it was `EBADF` 8 times a file).
        guard socket >= 0 else { return nil }
        let now = monotonicMilliseconds()
        guard let last = wire, last.socket == socket else {
            wire = PathWindows.info(socket).map { [socket] in (socket, $0.bytes_received, now) }
            return nil
        }
        guard now - last.lookedAt >= Self.wireLookInterval else { return nil }
        wire?.lookedAt = now
        var version = 0
        pf_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        // Only a response known to be HTTP/1.x: curl says 0 before the status line, and for an HTTP/2 stream.
        guard [Int(CURL_HTTP_VERSION_1_0), Int(CURL_HTTP_VERSION_1_1)].contains(version),
              let info = PathWindows.info(last.socket),
              info.bytes_received >= last.baseline else { return nil }
        let brought = Int64(clamping: info.bytes_received - last.baseline)
        let most = ((200...299).contains(responseCode) ? maxBytes : Self.mostUnkeptBodyBytes).saturatingMultiply(2)
            .saturatingAdd(1 << 20)
        guard brought > most else { return nil }
        return Failure(code: .tooLarge, message: "the response brought \(brought) bytes on the wire, more than twice the "
                       + "most its body may be: bytes that are no body (a chunk extension without end)", isTransient: false)
    }

    /// Whether curl may connect to, or send on a connection to, the numeric `address`: not in a link-local or denied
    /// network. A refusal is kept for the error (`CurlErrors`); an address allowed after it (curl tried another of
    /// the name's addresses) clears it.
    fileprivate func allows(_ address: String) -> Bool {
        refusedAddress = deniedNetworks.first { $0.contains(address) }.map { (address, $0) }
        return refusedAddress == nil
    }

    /// Takes a header line; false stops the transfer (headers over the size limit, or a length that cannot be trusted).
    fileprivate func header(_ line: UnsafeBufferPointer<UInt8>) -> Bool {
        headers.take(bytes: line)
        if headers.byteCount > ResponseHeaders.maximumBytes {
            stopReason = Failure(code: .tooLarge, message: "the response headers exceed \(ResponseHeaders.maximumBytes / 1024) KiB "
                                 + "(those of interim and redirect responses counted)",
                                 isTransient: false)
            return false
        }
        if let problem = headers.framingProblem {
            stopReason = Failure(code: .network, message: problem + " (RFC 9112 section 6.3): the response is refused",
                                 isTransient: false)
            return false
        }
        // At the end of a final response's headers: curl would decode a coding it knows but the daemon did not ask
        // for (zstd) before anything could look at it, an error page's too. (A redirect's body curl does not read.)
        let status = line.count <= 2 ? responseCode : 0
        // A body announced over the limit is refused before it comes; a redirect's is never read, so it does not
        // count (curl's CURLOPT_MAXFILESIZE judged every response: a 303 announcing 1 TB failed a good image). A
        // resume's range is judged with its Content-Range, as it comes (a lying one starts over).
        if (200...299).contains(status), status != 206, let length = headers.contentLength, length > maxBytes {
            stopReason = Failure(code: .tooLarge, message: "the server announced a body of \(length) bytes, over the "
                                 + "\(maxBytes)-byte limit", isTransient: false)
            return false
        }
        if Self.notTheResource.contains(status) {
            stopReason = Failure.httpStatus(status)
            return false
        }
        if status >= 200, !(300...399).contains(status), let coding = headers.undecodableCoding {
            stopReason = (200...299).contains(status)
                ? Failure(code: .network, message: "the body is in a coding the daemon did not ask for and does not "
                          + "decode (Content-Encoding: \(coding.prefix(40)))", isTransient: false)
                : Failure.httpStatus(status, retryAfter: headers.retryAfterMilliseconds(now: wallClockMilliseconds()))
            return false
        }
        return true
    }

    /// Why the body in the file is not the whole file, if it is not; a `206` that did not bring what was asked for
    /// drops the bytes held, so that the next attempt starts at 0.
    func incompleteBody() -> Failure? {
        if !bodyStarted {
            if responseCode == 206 {
                _ = refuse("the server answered 206 with an empty body")
                return stopReason
            }
            if resumedFrom > 0 { startOver() }  // an empty 200: the file is empty, not what a resume had kept
        }
        let fresh = received - resumedFrom
        if let expectedTotal, received != expectedTotal {
            return Failure(code: .network, message: "the body ended after \(fresh) of \(expectedTotal - resumedFrom) bytes",
                           isTransient: true)
        }
        if let expected = expectedBytes, expected != fresh {
            return Failure(code: .network, message: "the body ended after \(fresh) of \(expected) bytes", isTransient: true)
        }
        return nil
    }

    /// The receive buffer a background transfer promoted in place gets: set by hand (the kernel no longer grows a
    /// buffer once it was set), large.
    static let urgentWindow: Int32 = 4 << 20

    /// The window of this background transfer's connection: the path's (`PathWindows`) or else `background_window`.
    private var window: Int64 { Int64(pathWindows?.buffer(of: socket) ?? backgroundWindow) }

    /// The connection's socket, as curl reported it for polling (`ConnectionPool`).
    private(set) var socket: Int32 = -1

    /// Its connection was ended for `failure`, which the transfer's end reports.
    func connectionEnded(_ failure: Failure) { stopReason = failure }

    func polls(_ socket: Int32) { self.socket = socket }

    /// Moves to `lane` in place, on its connection: promoted, it gets a wide window there; demoted, the background
    /// window again.
    func move(to lane: Lane) {
        self.lane = lane
        if lane == .fast {
            widenWindowForUrgentWork()
        } else {
            narrowWindowAfterUrgentWork(stillOnConnection: true)
        }
    }
    /// The background connection whose window was widened for this transfer promoted in place.
    private var widenedSocket: Int32?

    /// Gives the connection room when this transfer became urgent on a connection of the background pool.
    func widenWindowForUrgentWork() {
        guard pool == .slow, backgroundWindow > 0, socket >= 0, widenedSocket == nil else { return }
        setReceiveBuffer(socket, Self.urgentWindow)
        pathWindows?.lift(socket)
        widenedSocket = socket
    }

    /// Gives a connection widened for urgent work its background window back before it carries background work
    /// again: while this transfer still runs on it (demoted, stopped), or once it ended, if curl kept the connection.
    func narrowWindowAfterUrgentWork(stillOnConnection: Bool) {
        guard let widened = widenedSocket else { return }
        widenedSocket = nil
        if !stillOnConnection {
            var alive: curl_socket_t = -1
            guard pf_easy_getinfo_socket(easy, CURLINFO_ACTIVESOCKET, &alive) == CURLE_OK, alive == widened else { return }
        }
        if pathWindows?.restore(widened) != true { setReceiveBuffer(widened, backgroundWindow) }
    }

    /// While the background lane's rate is capped its transfers wait in turns, so curl's low-speed abort (under
    /// 1 KiB/s for `low_speed_time`) would end slow but living ones: capped, only no byte at all for that long does.
    func acceptSlowSpeed(_ capped: Bool, settings: FetchSettings) {
        pf_easy_setopt_long(easy, CURLOPT_LOW_SPEED_LIMIT, capped ? 1 : Int(settings.lowSpeedLimit))
    }

    /// Whether the transfer is still connecting (resolving, TCP, TLS): its request has not gone out yet.
    var isConnecting: Bool {
        var sent: curl_off_t = 0
        pf_easy_getinfo_off_t(easy, CURLINFO_PRETRANSFER_TIME_T, &sent)
        return sent == 0
    }
}

private let transferWrite: pf_data_callback = { data, size, count, userdata in
    let transfer = Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue()
    return transfer.write(UnsafeRawBufferPointer(start: data, count: size * count))
}

private let transferProgress: pf_xferinfo_callback = { userdata, _, downloaded, _, _ in
    let transfer = Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue()
    return transfer.progress(bodyBytes: Int64(downloaded)) ? 0 : 1
}

private let transferHeader: pf_data_callback = { data, size, count, userdata in
    let transfer = Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue()
    let bytes = UnsafeRawBufferPointer(start: data, count: size * count).assumingMemoryBound(to: UInt8.self)
    return transfer.header(bytes) ? size * count : 0
}

/// A connection opened for background work gets a small receive buffer (see `FetchSettings.backgroundWindow`), and
/// its window follows its path below that (`PathWindows`).
private let transferSocketOptions: curl_sockopt_callback = { userdata, socket, _ in
    let transfer = Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue()
    setReceiveBuffer(socket, transfer.backgroundWindow)
    transfer.pathWindows?.opened(socket, buffer: transfer.backgroundWindow)
    return 0  // CURL_SOCKOPT_OK
}

/// Refuses link-local addresses (cloud metadata endpoints) and the configured denied networks before connecting to
/// them, so that one where nothing answers is `address_not_allowed`, not a network failure counted against the server
/// that named it. curl then tries the name's next address, if any.
private let transferOpenSocket: curl_opensocket_callback = { userdata, _, address in
    let transfer = Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue()
    transfer.noteConnectionStep()
    guard let address else { return -1 }
    var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
    let named = withUnsafePointer(to: &address.pointee.addr) {
        getnameinfo($0, socklen_t(address.pointee.addrlen), &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST)
    }
    let text = String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    guard transfer.allows(named == 0 ? text : "") else { return -1 }  // CURL_SOCKET_BAD
    let made = socket(address.pointee.family, address.pointee.socktype | Int32(SOCK_CLOEXEC.rawValue), address.pointee.protocol)
    transfer.socketError = made < 0 ? errno : nil
    return made
}

/// Before a name is looked up (not one curl has cached): an error written by then is another transfer's.
private let transferResolverStart: pf_resolver_start_callback = { _, _, userdata in
    Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue().noteConnectionStep()
    return 0
}

/// Refuses the same, judged on the address curl actually connected to (a proxy's included), so neither a redirect
/// nor a DNS name gets around it; and ends a reused HTTP/1 connection its server sent bytes on while it was idle
/// (`IdleConnections`), so that curl sends the request on another one.
private let transferPrerequest: pf_prereq_callback = { userdata, remote, _, remotePort, localPort in
    let transfer = Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue()
    transfer.noteConnectionStep()
    let address = remote.map { String(cString: $0) } ?? ""
    guard transfer.allows(address) else { return 1 }  // CURL_PREREQFUNC_ABORT
    transfer.idleConnections.beforeRequest(on: .init(localPort: Int(localPort), remoteAddress: address,
                                                     remotePort: Int(remotePort)), by: transfer.easy)
    transfer.requestSent = true
    transfer.requestGoesOut()
    return 0  // CURL_PREREQFUNC_OK
}

/// Bytes counted on the loop thread.
final class ByteCounter {
    private var count: Int64 = 0

    func add(_ bytes: Int64) { count += bytes }

    /// The bytes counted since the last call.
    func take() -> Int64 {
        defer { count = 0 }
        return count
    }
}
