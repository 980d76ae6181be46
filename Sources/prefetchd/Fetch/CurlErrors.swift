import CCurl
import Glibc
import QueueCore

/// Maps libcurl's result codes to the protocol's error codes.
enum CurlErrors {
    /// The failure for `code`. One that came with the end of its connection (closed, reset or broken as a whole, not
    /// a single HTTP/2 stream refused or a stall) names that connection: when it drops, every transfer on it fails,
    /// and the host's circuit breaker counts that once.
    static func failure(_ code: CURLcode, transfer: Transfer) -> Failure {
        var failure = classify(code, transfer: transfer)
        switch code {
        case CURLE_PARTIAL_FILE, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_HTTP2, CURLE_GOT_NOTHING:
            if failure.isTransient, failure.code == .network { failure.connection = transfer.connection }
        default:
            break
        }
        return failure
    }

    /// Whether curl 7.88's words for `CURLE_UNSUPPORTED_PROTOCOL` say that the reply was not HTTP (rather than that
    /// the URL's scheme is not one curl may use).
    private static func isNotHTTP(_ detail: String) -> Bool {
        ["Received HTTP/0.9", "Unsupported HTTP version", "Unsupported response code"].contains { detail.hasPrefix($0) }
    }

    private static func classify(_ code: CURLcode, transfer: Transfer) -> Failure {
        if let reason = transfer.stopReason { return reason }
        if let refused = transfer.refusedAddress {
            let kind = IPNetwork.linkLocal.contains(refused.network) ? "link-local network" : "denied network"
            return Failure(code: .addressNotAllowed,
                           message: "refused to connect to \(refused.address): it is in the \(kind) \(refused.network)",
                           isTransient: false)
        }
        let text = String(cString: curl_easy_strerror(code))
        // curl's own words for this transfer's failure when it wrote some, else its code's.
        let detail = transfer.errorDetail ?? text
        var osError = 0
        pf_easy_getinfo_long(transfer.easy, CURLINFO_OS_ERRNO, &osError)
        // curl leaves no errno when the socket it asked for could not be made: the transfer noted it.
        if let socketError = transfer.socketError { osError = Int(socketError) }
        if osError == EMFILE || osError == ENFILE {
            // This machine ran out of descriptors: a local condition, never counted against the server.
            return Failure(code: .internal, message: "out of file descriptors here (\(text)); RLIMIT_NOFILE is too low",
                           isTransient: true)
        }
        switch code {
        case CURLE_UNSUPPORTED_PROTOCOL where (300...399).contains(transfer.responseCode) && !Self.isNotHTTP(detail):
            // After a redirect, a scheme curl may not follow (`Protocol "file" not supported or disabled in libcurl`)
            // or does not know at all (`data:`, `javascript:`: "Unsupported URL scheme").
            return Failure(code: .schemeNotAllowed, message: "a redirect led to a scheme other than http or https (\(detail))",
                           isTransient: false)
        case CURLE_UNSUPPORTED_PROTOCOL:
            // curl read a reply that is not HTTP (an HTTP/0.9-style or garbage status line, a status code out of
            // range), also after a redirect. On a connection made for it, the server sends the same again; on a
            // reused one, what it read may be bytes left after the last response, and a retry goes on a connection
            // of its own.
            return Failure(code: .network, message: "the server's reply is not valid HTTP (\(detail))",
                           isTransient: !transfer.madeItsConnection)
        case CURLE_TOO_MANY_REDIRECTS:
            return Failure(code: .tooManyRedirects, message: "more than 5 redirects", isTransient: false)
        case CURLE_OPERATION_TIMEDOUT where transfer.requestSent && transfer.headers.byteCount == 0
                                            && transfer.errorDetail?.hasPrefix("Operation too slow") == true:
            // curl's words ("Operation too slow. Less than 1024 bytes/sec transferred") hide that nothing came. (Not
            // a connect timeout: curl may have sent the request on a connection that was gone, then connected anew.)
            return Failure(code: .timeout, message: "the server took the request but sent no response within "
                           + "\(transfer.lowSpeedTime) s (low_speed_time)", isTransient: true)
        case CURLE_OPERATION_TIMEDOUT:
            return Failure(code: .timeout, message: transfer.errorDetail ?? "the transfer stalled or timed out (\(text))",
                           isTransient: true, unreached: !transfer.requestSent)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
            return Failure(code: .tls, message: transfer.errorDetail ?? transfer.certificateProblem ?? text, isTransient: false)
        case CURLE_URL_MALFORMAT where (300...399).contains(transfer.responseCode):
            // Where the server redirected cannot be parsed: its answer is at fault, not the URL that was asked for.
            return Failure(code: .httpStatus, message: "the server redirected (HTTP \(transfer.responseCode)) to a "
                           + "location that is no URL (\(text))", isTransient: false, httpStatus: transfer.responseCode)
        case CURLE_URL_MALFORMAT:
            return Failure(code: .invalidURL, message: text, isTransient: false)
        case CURLE_OUT_OF_MEMORY where !transfer.bodyStarted:
            // curl 7.88 reports a header line over its 100 KiB limit as "Out of memory".
            return Failure(code: .tooLarge, message: "a response header line exceeds curl's 100 KiB limit", isTransient: false)
        case CURLE_WEIRD_SERVER_REPLY:
            // curl refused a response it could not parse before handing the line over (a Content-Length of `-1`, a
            // NUL byte in a header): on a connection made for it the server sends the same again, so it is neither
            // retried nor counted against the host (a retried failure is). On a reused one, as above.
            return Failure(code: .network, message: "the server's response is malformed (\(detail)): the response is refused",
                           isTransient: !transfer.madeItsConnection)
        case CURLE_RECV_ERROR where transfer.errorDetail?.hasSuffix(" in chunked-encoding") == true:
            // A chunk size that is not hex, or too long for one: the server's body, not the connection.
            return Failure(code: .network, message: "the server's chunked body is malformed (\(transfer.errorDetail!))",
                           isTransient: false)
        case CURLE_BAD_CONTENT_ENCODING where transfer.headers.contentEncoding == nil:
            // curl refused the Content-Encoding line itself, before handing it over: more codings stacked than it
            // decodes (five).
            return Failure(code: .network, message: "the server's Content-Encoding is refused (\(detail))", isTransient: false)
        case CURLE_BAD_CONTENT_ENCODING:
            if let coding = transfer.headers.undecodableCoding {
                // Not a stream broken on the way: the server answered in a coding nobody asked for, and will again.
                return Failure(code: .network, message: "the body is in a coding the daemon did not ask for and cannot "
                               + "decode (Content-Encoding: \(coding.prefix(40)))", isTransient: false)
            }
            return Failure(code: .network, message: "cannot decode the body (Content-Encoding: "
                           + "\(transfer.headers.contentEncoding?.prefix(40) ?? "?")): \(text)", isTransient: true)
        case CURLE_WRITE_ERROR where transfer.headers.isEncoded:
            // Each refusal of the daemon's own callbacks has its reason (`stopReason`, above): this is curl's decoder,
            // which reports bytes after the end of a gzip stream (garbage, a second member) as a failed write. The
            // server sends the same body again: not retried, and not counted against the host (a retried failure is).
            return Failure(code: .network, message: "cannot decode the body (Content-Encoding: "
                           + "\(transfer.headers.contentEncoding?.prefix(40) ?? "?")): bytes follow the end of its stream",
                           isTransient: false)
        case CURLE_PARTIAL_FILE:
            // A connection closed early, or an HTTP/2 session that a protocol error (a window overflow, an oversized
            // frame) ended: curl's detail says how many bytes were missing.
            return Failure(code: .network, message: "the connection ended before the whole body came"
                           + (transfer.errorDetail.map { " (\($0))" } ?? ""), isTransient: true)
        default:
            return Failure(code: .network, message: detail, isTransient: true,
                           unreached: !transfer.requestSent)
        }
    }
}
