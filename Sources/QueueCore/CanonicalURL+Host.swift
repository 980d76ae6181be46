/// The host and port of a URL: one spelling per host, so one host gets one key and one per-host count.
///
/// IP addresses are read the way WHATWG URL (browsers) and curl read them: `127.1`, `0x7f.0.0.1`, `0177.0.0.1` and
/// `2130706433` are all `127.0.0.1`; `[0:0:0:0:0:0:0:1]` is `[::1]` (RFC 5952). A host that ends in a number but is no
/// IPv4 address (`1.2.3.256`, `1.2.3.4.5`) is refused, as WHATWG URL does, instead of being looked up as a name.
extension CanonicalURL {
    static func parseHostPort(_ authority: ArraySlice<UInt8>, scheme: String) throws(ParseError) -> (String, Int?) {
        let hostBytes: ArraySlice<UInt8>
        var portBytes: ArraySlice<UInt8> = []
        let host: String
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { throw .invalid("unclosed [ in the host") }
            hostBytes = authority[authority.startIndex...close]
            let after = authority[(close + 1)...]
            if !after.isEmpty {
                guard after.first == UInt8(ascii: ":") else { throw .invalid("unexpected text after the IPv6 address") }
                portBytes = after.dropFirst()
            }
            guard let address = ipv6Address(hostBytes.dropFirst().dropLast()) else {
                throw .invalid("malformed IPv6 address")
            }
            host = "[" + ipv6Text(address) + "]"
        } else {
            if let colon = authority.lastIndex(of: UInt8(ascii: ":")) {
                hostBytes = authority[authority.startIndex..<colon]
                portBytes = authority[(colon + 1)...]
            } else {
                hostBytes = authority
            }
            guard !hostBytes.isEmpty else { throw .invalid("the host is empty") }
            guard hostBytes.allSatisfy({ isAlpha($0) || isDigit($0) || $0 == 0x2D || $0 == 0x2E || $0 == 0x5F }) else {
                throw .invalid("the host contains characters other than letters, digits, '-', '.' and '_'"
                               + " (internationalised names must be given in punycode)")
            }
            let name = hostBytes.map(lowercased)
            if endsInNumber(name) {
                guard let address = ipv4Address(name) else {
                    throw .invalid("the host ends in a number but is not an IPv4 address")
                }
                host = ipv4Text(address)
            } else {
                try checkName(name)
                host = String(decoding: name, as: UTF8.self)
            }
        }
        guard !portBytes.isEmpty else { return (host, nil) }
        let digits = portBytes.drop { $0 == UInt8(ascii: "0") }   // RFC 3986: port = *DIGIT, leading zeros allowed
        guard digits.count <= 5, portBytes.allSatisfy(isDigit),
              let port = Int(String(decoding: digits, as: UTF8.self)), (1...65535).contains(port) else {
            throw .invalid("the port must be a number from 1 to 65535")
        }
        return (host, defaultPorts[scheme] == port ? nil : port)
    }

    // MARK: Names

    /// A name no resolver could look up is refused here, with its reason, instead of being queued and failing later
    /// as "could not resolve": an empty label (`a..b`, `.a`), a label over 63 bytes or a name over 253 (RFC 1035),
    /// and an `xn--` label that is not punycode of a name with a non-ASCII character (RFC 3492, RFC 5890).
    private static func checkName(_ name: [UInt8]) throws(ParseError) {
        let labels = withoutFinalDot(name)
        guard labels.count <= 253 else { throw .invalid("the host name is longer than 253 characters") }
        for label in labels.split(separator: dot, omittingEmptySubsequences: false) {
            guard !label.isEmpty else { throw .invalid("the host name has an empty label (a leading dot or two in a row)") }
            guard label.count <= 63 else { throw .invalid("a label of the host name is longer than 63 characters") }
            if label.starts(with: aceprefix), !isPunycodeOfUnicode(label.dropFirst(aceprefix.count)) {
                throw .invalid("the host label '\(String(decoding: label, as: UTF8.self))' starts with xn-- but is not "
                               + "punycode of an internationalised name")
            }
        }
    }

    private static let aceprefix = Array("xn--".utf8)

    /// Whether `text` decodes as punycode (RFC 3492, section 6.2) to a label with at least one non-ASCII character.
    /// Every step is checked against `limit` before it is taken, so no input can overflow.
    private static func isPunycodeOfUnicode(_ text: ArraySlice<UInt8>) -> Bool {
        let base = 36, tMin = 1, tMax = 26, limit = Int(Int32.max)
        // The ASCII characters come first, up to the last '-'; the encoded ones follow it (all of it without them).
        var length = 0
        var position = text.startIndex
        if let delimiter = text.lastIndex(of: 0x2D), delimiter > text.startIndex {
            length = delimiter - text.startIndex
            position = delimiter + 1
        }
        var code = 0x80, index = 0, bias = 72
        var decodedAny = false
        while position < text.endIndex {
            let oldIndex = index
            var weight = 1
            var k = base
            while true {
                guard position < text.endIndex else { return false }
                let byte = text[position]
                position += 1
                let digit = isAlpha(byte) ? Int(lowercased(byte) - 0x61) : isDigit(byte) ? Int(byte - 0x30) + 26 : base
                guard digit < base, digit <= (limit - index) / weight else { return false }
                index += digit * weight
                let threshold = k <= bias ? tMin : k >= bias + tMax ? tMax : k - bias
                if digit < threshold { break }
                guard weight <= limit / (base - threshold) else { return false }
                weight *= base - threshold
                k += base
            }
            length += 1
            bias = adapt(index - oldIndex, points: length, first: oldIndex == 0)
            guard index / length <= limit - code else { return false }
            code += index / length
            index = index % length + 1
            guard code <= 0x10FFFF, !(0xD800...0xDFFF).contains(code) else { return false }
            decodedAny = true
        }
        return decodedAny
    }

    /// RFC 3492's bias adaptation (section 6.1).
    private static func adapt(_ delta: Int, points: Int, first: Bool) -> Int {
        var delta = first ? delta / 700 : delta / 2
        delta += delta / points
        var k = 0
        while delta > (36 - 1) * 26 / 2 {
            delta /= 36 - 1
            k += 36
        }
        return k + 36 * delta / (delta + 38)
    }

    // MARK: IPv4

    /// WHATWG URL "ends in a number": the last label (a final empty one aside) is decimal digits or `0x` and hex.
    private static func endsInNumber(_ name: [UInt8]) -> Bool {
        let labels = withoutFinalDot(name)
        let last = labels.lastIndex(of: dot).map { labels[($0 + 1)...] } ?? labels
        return !last.isEmpty && (last.allSatisfy(isDigit) || ipv4Number(last) != nil)
    }

    /// WHATWG URL's IPv4 parser: one to four parts, each decimal, octal (leading `0`) or hex (`0x`); the last part
    /// fills the bytes the others leave. Nil when it is not an address.
    private static func ipv4Address(_ name: [UInt8]) -> UInt32? {
        let parts = withoutFinalDot(name)
        var address: UInt64 = 0
        var index = 0
        var start = parts.startIndex
        while true {
            let end = parts[start...].firstIndex(of: dot) ?? parts.endIndex
            guard index < 4, let number = ipv4Number(parts[start..<end]) else { return nil }
            if end == parts.endIndex {
                guard number < UInt64(1) << (8 * (4 - index)) else { return nil }
                return UInt32(address + number)
            }
            guard number <= 255 else { return nil }
            address += number << (8 * (3 - index))
            index += 1
            start = end + 1
        }
    }

    private static let dot = UInt8(ascii: ".")

    /// A host name without the one empty label a final dot makes (`a.` is `a`; `a..` keeps an empty label).
    private static func withoutFinalDot(_ name: [UInt8]) -> ArraySlice<UInt8> {
        name.last == dot ? name.dropLast() : name[...]
    }

    /// One part of an IPv4 address, or nil. Values beyond 32 bits are held at 2^32 (the caller refuses them), so a
    /// long run of digits cannot overflow.
    private static func ipv4Number(_ part: ArraySlice<UInt8>) -> UInt64? {
        guard !part.isEmpty else { return nil }
        var digits = part
        var radix: UInt64 = 10
        let leadingZero = part.count >= 2 && part.first == UInt8(ascii: "0")
        if leadingZero, lowercased(part[part.startIndex + 1]) == UInt8(ascii: "x") {
            digits = part.dropFirst(2)
            radix = 16
        } else if leadingZero {
            digits = part.dropFirst()
            radix = 8
        }
        var value: UInt64 = 0
        for digit in digits {
            guard let digitValue = hexValue(digit).map(UInt64.init), digitValue < radix else { return nil }
            value = min(value * radix + digitValue, 1 << 32)
        }
        return value
    }

    private static func ipv4Text(_ address: UInt32) -> String {
        "\(address >> 24).\(address >> 16 & 0xFF).\(address >> 8 & 0xFF).\(address & 0xFF)"
    }

    // MARK: IPv6

    /// WHATWG URL's IPv6 parser (RFC 4291 text forms): eight hex pieces, one `::` for a run of zero pieces, and an
    /// optional dotted IPv4 address in the last 32 bits. Nil when it is not an address.
    private static func ipv6Address(_ text: ArraySlice<UInt8>) -> [UInt16]? {
        var pieces = [UInt16](repeating: 0, count: 8)
        var pieceIndex = 0
        var compress: Int? = nil
        var i = text.startIndex
        let colon = UInt8(ascii: ":")
        if i < text.endIndex, text[i] == colon {
            guard i + 1 < text.endIndex, text[i + 1] == colon else { return nil }
            i += 2
            pieceIndex += 1
            compress = pieceIndex
        }
        while i < text.endIndex {
            guard pieceIndex < 8 else { return nil }
            if text[i] == colon {
                guard compress == nil else { return nil }
                i += 1
                pieceIndex += 1
                compress = pieceIndex
                continue
            }
            var value: UInt16 = 0
            var length = 0
            while length < 4, i < text.endIndex, let digit = hexValue(text[i]) {
                value = value << 4 | UInt16(digit)
                i += 1
                length += 1
            }
            if i < text.endIndex, text[i] == UInt8(ascii: ".") {
                guard length > 0, pieceIndex <= 6, let ipv4 = dottedQuad(text[(i - length)...]) else { return nil }
                pieces[pieceIndex] = UInt16(ipv4 >> 16)
                pieces[pieceIndex + 1] = UInt16(ipv4 & 0xFFFF)
                pieceIndex += 2
                break
            }
            if i < text.endIndex {
                guard text[i] == colon, i + 1 < text.endIndex else { return nil }
                i += 1
            }
            pieces[pieceIndex] = value
            pieceIndex += 1
        }
        if let compress {
            var swaps = pieceIndex - compress
            var last = 7
            while last != 0, swaps > 0 {
                pieces.swapAt(last, compress + swaps - 1)
                last -= 1
                swaps -= 1
            }
        } else if pieceIndex != 8 {
            return nil
        }
        return pieces
    }

    /// Exactly four decimal parts from 0 to 255 without leading zeros, as in an IPv6 address's last 32 bits.
    private static func dottedQuad(_ text: ArraySlice<UInt8>) -> UInt32? {
        let parts = text.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var address: UInt32 = 0
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy(isDigit),
                  part.count == 1 || part.first != UInt8(ascii: "0") else { return nil }
            let value = part.reduce(UInt32(0)) { $0 * 10 + UInt32($1 - 0x30) }
            guard value <= 255 else { return nil }
            address = address << 8 | value
        }
        return address
    }

    /// RFC 5952: lowercase hex without leading zeros, the longest run of two or more zero pieces (the first of equal
    /// runs) as `::`, and an IPv4-mapped address (`::ffff:0:0/96`) with its last 32 bits in dotted decimal.
    private static func ipv6Text(_ pieces: [UInt16]) -> String {
        if pieces[0..<5].allSatisfy({ $0 == 0 }), pieces[5] == 0xFFFF {
            return "::ffff:" + ipv4Text(UInt32(pieces[6]) << 16 | UInt32(pieces[7]))
        }
        var best: (start: Int, length: Int) = (0, 0)
        var run: (start: Int, length: Int) = (0, 0)
        for (index, piece) in pieces.enumerated() {
            if piece == 0 {
                if run.length == 0 { run.start = index }
                run.length += 1
                if run.length > best.length { best = run }
            } else {
                run.length = 0
            }
        }
        func hex(_ range: Range<Int>) -> String {
            pieces[range].map { String($0, radix: 16) }.joined(separator: ":")
        }
        guard best.length >= 2 else { return hex(0..<8) }
        return hex(0..<best.start) + "::" + hex((best.start + best.length)..<8)
    }
}
