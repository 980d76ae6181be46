import Glibc

/// An IPv4 or IPv6 network in CIDR form (`10.0.0.0/8`, `fc00::/7`); IPv4 is kept as IPv4-mapped IPv6 so one
/// comparison covers both families.
struct IPNetwork: Equatable, Sendable, CustomStringConvertible {
    let address: [UInt8]
    let prefixLength: Int
    let description: String

    /// Link-local networks (cloud metadata endpoints live there): always refused.
    static let linkLocal = [IPNetwork("169.254.0.0/16")!, IPNetwork("fe80::/10")!]

    /// Reads `address/length` (or an address alone); the description is the network's own form, host bits cleared
    /// (`10.1.2.3/8` is `10.0.0.0/8`), so that what a user wrote by mistake shows in `--check-config`.
    init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard let first = parts.first, !first.contains("%"), let bytes = Self.bytes(of: first) else { return nil }
        let isIPv4 = !first.contains(":")
        let maximum = isIPv4 ? 32 : 128
        let digits = parts.count == 2 ? parts[1] : String(maximum)
        guard (1...3).contains(digits.utf8.count), digits.utf8.allSatisfy({ (48...57).contains($0) }),
              digits.utf8.count == 1 || digits.utf8.first != 48,
              let length = Int(digits), length <= maximum else { return nil }
        prefixLength = isIPv4 ? length + 96 : length
        address = Self.masked(bytes, to: prefixLength)
        description = Self.text(of: address, isIPv4: isIPv4) + "/\(length)"
    }

    private static func masked(_ bytes: [UInt8], to prefixLength: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let bits = min(8, max(0, prefixLength - index * 8))
            return byte & UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
        }
    }

    private static func text(of bytes: [UInt8], isIPv4: Bool) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = isIPv4 ? AF_INET : AF_INET6
        let source = isIPv4 ? Array(bytes[12...]) : bytes
        _ = source.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether the numeric address `text` (as curl reports the connected peer) lies in this network.
    func contains(_ text: String) -> Bool {
        guard let bytes = Self.bytes(of: text) else { return false }
        var remaining = prefixLength
        for index in 0..<16 where remaining > 0 {
            let bits = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
            if bytes[index] & mask != address[index] { return false }
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
