import PrefetchProtocol

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

    /// Rejections (the request itself was wrong) versus failures (the fetch went wrong).
    static func of(_ error: WireError) -> Int32 {
        switch error.knownCode {
        case .invalidURL, .schemeNotAllowed, .badRequest, .unknownOp, .lineTooLong, .unauthorized: return rejected
        case .shuttingDown: return unreachable
        default: return failed
        }
    }
}
