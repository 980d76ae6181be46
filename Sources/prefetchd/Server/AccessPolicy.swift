import FoundationEssentials
import Glibc
import PrefetchProtocol

/// Who may use the daemon: root, the daemon's own user, and the allowed users and groups, checked against each
/// connection's peer credentials (SO_PEERCRED, and SO_PEERGROUPS for the supplementary groups).
struct AccessPolicy {
    let ownUID: uid_t
    let users: Set<uid_t>
    let groups: Set<gid_t>

    /// The credentials of a connected peer, as the kernel recorded them at `connect`.
    struct Peer {
        let pid: pid_t
        let uid: uid_t
        let gid: gid_t
    }

    /// `socketGroup`: the group owning a socket passed by systemd, admitted like `allowed_groups`.
    init(options: Options, socketGroup: gid_t? = nil, ownUID: uid_t = getuid()) {
        self.ownUID = ownUID
        users = Set(options.allowedUsers)
        groups = Set(options.allowedGroups + (socketGroup.map { [$0] } ?? []))
    }

    /// Whether `peer` (connected on `fd`) may talk to the daemon.
    func admits(_ peer: Peer, on fd: Int32) -> Bool {
        if peer.uid == 0 || peer.uid == ownUID || users.contains(peer.uid) { return true }
        guard !groups.isEmpty else { return false }
        if groups.contains(peer.gid) { return true }
        return Self.supplementaryGroups(fd: fd, pid: peer.pid).contains { groups.contains($0) }
    }

    /// The peer's credentials.
    static func peer(of fd: Int32) throws(SystemError) -> Peer {
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; } (the Glibc module leaves it out without _GNU_SOURCE).
        var credentials = [UInt32](repeating: 0, count: 3)
        var length = socklen_t(3 * MemoryLayout<UInt32>.size)
        try syscall("getsockopt(SO_PEERCRED)") { getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) }
        return Peer(pid: pid_t(bitPattern: credentials[0]), uid: credentials[1], gid: credentials[2])
    }

    /// The peer's supplementary groups: SO_PEERGROUPS (Linux 4.13, recorded at `connect`, readable under
    /// `ProtectProc=invisible`), else the `Groups:` line of /proc/PID/status.
    static func supplementaryGroups(fd: Int32, pid: pid_t) -> [gid_t] {
        var groups = [gid_t](repeating: 0, count: 64)
        for _ in 0..<2 {
            var length = socklen_t(groups.count * MemoryLayout<gid_t>.size)
            if getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, &groups, &length) == 0 {
                return Array(groups.prefix(Int(length) / MemoryLayout<gid_t>.size))
            }
            guard errno == ERANGE else { break }
            groups = [gid_t](repeating: 0, count: Int(length) / MemoryLayout<gid_t>.size + 1)
        }
        return groupsFromProc(pid: pid)
    }

    private static func groupsFromProc(pid: pid_t) -> [gid_t] {
        guard let file = fopen("/proc/\(pid)/status", "re") else { return [] }
        defer { fclose(file) }
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            let text = String(cString: line)
            guard text.hasPrefix("Groups:") else { continue }
            return text.dropFirst(7).split(whereSeparator: \.isWhitespace).compactMap { gid_t($0) }
        }
        return []
    }

    /// Tells a refused peer why in one line (no greeting) and returns the line for the log; the caller closes `fd`.
    static func refuse(fd: Int32, peer: Peer?, error: WireError) -> String {
        let who = peer.map { "uid \($0.uid) (\(Options.userName($0.uid))), gid \($0.gid), pid \($0.pid)" } ?? "an unknown peer"
        let logged = "refused a connection from \(who): \(error.message)"
        guard var line = try? Array(Clients.encoder.encode(Reply<Ignored>(id: nil, error: error))) else { return logged }
        line.append(0x0A)
        _ = line.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        return logged
    }

    /// The reason a peer is refused, for the log and the reply.
    func refusal(_ peer: Peer) -> String {
        var allowed = ["root"]
        for name in ([ownUID] + users.sorted()).map(Options.userName) where !allowed.contains(name) { allowed.append(name) }
        allowed += groups.sorted().map { "group " + Options.groupName($0) }
        return "not authorized: only \(allowed.joined(separator: ", ")) may use this prefetchd"
    }
}
