import Glibc

/// An IPv4 or IPv6 network in CIDR form (`10.0.0.0/8`, `fc00::/7`); IPv4 is kept as IPv4-mapped IPv6 so one
/// comparison covers both families.
struct IPNetwork: Equatable, Sendable, CustomStringConvertible {
    let address: [UInt8]
    let prefixLength: Int
    let description: String

    /// Link-local networks (cloud metadata endpoints live there): always refused.
    static let linkLocal = [IPNetwork("169.254.0.0/16")!, IPNetwork("fe80::/10")!]

    init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1).map(String.init)
        guard let first = parts.first, let bytes = Self.bytes(of: first) else { return nil }
        let isIPv4 = !first.contains(":")
        let maximum = isIPv4 ? 32 : 128
        guard let length = parts.count == 2 ? Int(parts[1]) : maximum, (0...maximum).contains(length) else { return nil }
        address = bytes
        prefixLength = isIPv4 ? length + 96 : length
        description = parts.count == 2 ? text : "\(text)/\(maximum)"
    }

    /// Whether the numeric address `text` (as curl reports the connected peer) lies in this network.
    func contains(_ text: String) -> Bool {
        guard let bytes = Self.bytes(of: text) else { return false }
        var remaining = prefixLength
        for index in 0..<16 where remaining > 0 {
            let bits = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
            if bytes[index] & mask != address[index] & mask { return false }
            remaining -= bits
        }
        return true
    }

    /// 16 bytes: an IPv6 address, or an IPv4 one mapped (`::ffff:a.b.c.d`); a zone (`%lo`) is ignored.
    static func bytes(of text: String) -> [UInt8]? {
        let host = String(text.prefix { $0 != "%" })
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        var v4 = in_addr()
        guard inet_pton(AF_INET, host, &v4) == 1 else { return nil }
        return Array(repeating: 0, count: 10) + [0xFF, 0xFF] + withUnsafeBytes(of: &v4) { Array($0) }
    }
}
