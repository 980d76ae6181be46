import PrefetchProtocol
import QueueCore

/// Why prefetchctl stops, and the exit code that says so.
enum CLIError: Error {
    case usage(String)
    case unreachable(String)
    case failed(WireError)
    case timeout(String)

    /// Documented in `prefetchctl --help` and docs/protocol.md.
    var exitCode: Int32 {
        switch self {
        case .usage: return ExitCode.usage
        case .unreachable: return ExitCode.unreachable
        case .failed(let error): return ExitCode.of(error)
        case .timeout: return ExitCode.timeout
        }
    }

    var message: String {
        switch self {
        case .usage(let text), .unreachable(let text), .timeout(let text): return text
        case .failed(let error): return "\(error.code): \(error.message)"
        }
    }
}

enum ExitCode {
    static let ok: Int32 = 0
    static let failed: Int32 = 1
    static let usage: Int32 = 2
    static let unreachable: Int32 = 3
    static let rejected: Int32 = 4
    static let timeout: Int32 = 5

    /// Rejections (the request itself was wrong) versus failures (the fetch went wrong). `scheme_not_allowed` for a
    /// `sent` URL that is valid itself came from a redirect: the fetch failed.
    static func of(_ error: WireError, sent url: String? = nil) -> Int32 {
        switch error.knownCode {
        case .schemeNotAllowed where url.map { (try? CanonicalURL($0)) != nil } == true: return failed
        case .invalidURL, .schemeNotAllowed, .badRequest, .unknownOp, .lineTooLong, .unauthorized: return rejected
        case .shuttingDown, .tooManyClients, .busy: return unreachable
        default: return failed
        }
    }
}
