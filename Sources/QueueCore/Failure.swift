/// Why a fetch failed, in the terms the wire protocol uses, and whether trying again may help.
public struct Failure: Error, Equatable, Hashable, Sendable {
    public var code: ErrorCode
    public var message: String
    public var isTransient: Bool
    /// The server's `Retry-After`, in milliseconds, when it sent one.
    public var retryAfter: Int64?
    /// The HTTP status, for `http_status` failures.
    public var httpStatus: Int?
    /// The server was not reached: no address, no connection or no TLS handshake, so no request was sent. When its
    /// host was failing already, such a failure says nothing about the URL: the host, or the network, is down.
    public var unreached: Bool
    /// The connection that carried the request, when the failure came with its end (its addresses and ports): on
    /// HTTP/2 one connection that drops ends every transfer on it, and those failures are one event for the host's
    /// circuit breaker.
    public var connection: String?
    /// The response ended cleanly, but inside its image, and nothing (no Content-Length) tells a cut from the end of
    /// the server's file: fetched again, but the host answered, so it never counts towards pausing the host.
    public var endedInsideImage: Bool

    public init(code: ErrorCode, message: String, isTransient: Bool, retryAfter: Int64? = nil, httpStatus: Int? = nil,
                unreached: Bool = false, connection: String? = nil, endedInsideImage: Bool = false) {
        self.code = code
        self.message = message
        self.isTransient = isTransient
        self.retryAfter = retryAfter
        self.httpStatus = httpStatus
        self.unreached = unreached
        self.connection = connection
        self.endedInsideImage = endedInsideImage
    }

    /// A failure for an HTTP status: 408, 429 and 5xx are worth retrying, other statuses are not.
    public static func httpStatus(_ status: Int, retryAfter: Int64? = nil) -> Failure {
        let transient = status == 408 || status == 429 || (500...599).contains(status)
        return Failure(code: .httpStatus, message: "the server answered HTTP \(status)",
                       isTransient: transient, retryAfter: retryAfter, httpStatus: status)
    }
}

/// When and how often failed fetches are tried again, and how long permanent failures are remembered.
public struct RetryPolicy: Equatable, Sendable {
    /// Attempts in all, the first included.
    public var maxAttempts: Int
    public var baseDelay: Int64
    public var maxDelay: Int64
    /// The longest `Retry-After` honoured; a server asking for more gets this.
    public var retryAfterCap: Int64
    /// How long a permanent failure is answered from memory.
    public var negativeTTL: Int64

    public init(maxAttempts: Int = 3, baseDelay: Int64 = 500, maxDelay: Int64 = 60_000,
                retryAfterCap: Int64 = 300_000, negativeTTL: Int64 = 300_000) {
        self.maxAttempts = maxAttempts
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.retryAfterCap = retryAfterCap
        self.negativeTTL = negativeTTL
    }

    /// The delay before attempt `attempt + 1`: exponential with "equal jitter", never below a capped `Retry-After`.
    public func delay(after attempt: Int, retryAfter: Int64?, random: inout some RandomNumberGenerator) -> Int64 {
        let exponent = min(max(attempt - 1, 0), 40)
        let (product, overflow) = baseDelay.multipliedReportingOverflow(by: 1 << exponent)
        let backoff = overflow ? maxDelay : min(maxDelay, product)
        let half = max(backoff / 2, 0)
        let jittered = half + (half > 0 ? Int64.random(in: 0...half, using: &random) : 0)
        guard let retryAfter else { return jittered }
        return max(jittered, min(max(retryAfter, 0), retryAfterCap))
    }
}
