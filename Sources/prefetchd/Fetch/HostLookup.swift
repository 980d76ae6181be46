import CSystem
import Glibc

/// Tells a name that does not exist from a resolver that failed, which curl reports alike ("Could not resolve
/// host"): it asks the system's resolver again, on a thread of its own and once per host at a time, so that a
/// resolver that does not answer holds neither the loop nor the image workers.
final class HostLookup {
    enum Answer: Sendable {
        /// NXDOMAIN, or a name without addresses: a retry would get the same answer.
        case noSuchName(String)
        /// The resolver failed, or answers now: worth retrying.
        case transient
    }

    private let thread: WorkerPool
    private var waiting: [String: [(Answer) -> Void]] = [:]
    /// Hosts looked up at once at most; beyond, the caller takes a failure as transient without asking.
    private static let mostHosts = 64

    init(loop: EventLoop) throws(SystemError) {
        thread = try WorkerPool(threads: 1, name: "pf-lookup", loop: loop)
    }

    /// Calls `then` later, on the loop thread, with what the resolver says of `host` now; false (and no call) when
    /// too many hosts are being looked up already.
    func check(_ host: String, then answer: @escaping (Answer) -> Void) -> Bool {
        if waiting[host] != nil {
            waiting[host]!.append(answer)
            return true
        }
        guard waiting.count < Self.mostHosts else { return false }
        waiting[host] = [answer]
        thread.run({ Self.lookUp(host) }, completion: { [unowned self] result in
            for answer in self.waiting.removeValue(forKey: host) ?? [] { answer(result) }
        })
        return true
    }

    private static func lookUp(_ host: String) -> Answer {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        if let list { freeaddrinfo(list) }
        switch status {
        case EAI_NONAME: return .noSuchName("the name does not exist")
        case pf_eai_nodata: return .noSuchName("the name has no address")
        default: return .transient
        }
    }
}
