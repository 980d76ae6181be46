import Glibc
import PrefetchProtocol
import QueueCore

extension Failure {
    /// A failure of this machine while `doing` something: `disk_full` when the disk or quota is full, else `internal`.
    static func local(_ doing: String, _ error: any Error) -> Failure {
        let errno = (error as? SystemError)?.errno
        let full = errno == ENOSPC || errno == EDQUOT || (error as? DatabaseError)?.isDiskFull == true
        return Failure(code: full ? .diskFull : .internal, message: "\(doing): \(error)", isTransient: true)
    }
}

extension WireError {
    /// The error half of a reply for a failed fetch.
    init(_ failure: Failure) {
        self.init(failure.code, failure.message, status: failure.httpStatus)
    }
}
