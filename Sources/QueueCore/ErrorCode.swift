/// A stable, documented error code, the same from the scheduler to the wire (docs/protocol.md has each one's meaning).
public enum ErrorCode: String, Codable, CaseIterable, Sendable {
    case badRequest = "bad_request"
    case unknownOp = "unknown_op"
    case lineTooLong = "line_too_long"
    case invalidURL = "invalid_url"
    case schemeNotAllowed = "scheme_not_allowed"
    case httpStatus = "http_status"
    case tooLarge = "too_large"
    case tooManyRedirects = "too_many_redirects"
    case timeout
    case network
    /// The origin's name does not exist (NXDOMAIN) or has no address.
    case unknownHost = "unknown_host"
    case tls
    case cancelled
    case diskFull = "disk_full"
    case notAnImage = "not_an_image"
    case formatNotAllowed = "format_not_allowed"
    case pixelLimit = "pixel_limit"
    case hostPaused = "host_paused"
    case notCached = "not_cached"
    case addressNotAllowed = "address_not_allowed"
    case unauthorized
    case shuttingDown = "shutting_down"
    /// The daemon died while handling this URL too often in a row (two crashes, or four kills from outside); it is
    /// set aside for the negative TTL.
    case quarantined
    /// A new client when as many are connected as the descriptor limit leaves room for.
    case tooManyClients = "too_many_clients"
    /// As many requests of all clients wait for their answers as the daemon lets wait: ask again once some are.
    case busy
    case `internal`
}
