/// A strict reading of a request line as JSON (RFC 8259), before it is decoded. Foundation's decoder is lenient
/// where a request must not be read two ways: it accepts trailing commas, takes the first of two members with one
/// name (`{"op":"evict","all":true,"op":"ping"}` evicted everything), and traps (the daemon died) on a line that
/// ends right after its 513th opening bracket. What it says of a line that is not JSON names no place in it.
public struct JSONSyntax {
    /// The deepest a request line may nest arrays and objects; a request needs two.
    public static let depthLimit = 32

    /// What makes `line` something other than one JSON value, with the byte where it was found; nil when it is one.
    /// Duplicate member names are compared as decoded (`"o\u0070"` is `"op"`), byte for byte: the request's names
    /// are lower-case ASCII, which no other spelling equals as a Swift `String` either.
    public static func problem(in line: [UInt8]) -> String? { read(line, wholeNumbersIn: []).problem }

    /// `problem(in:)`, and the first of the outer object's members named in `whole` whose value is a number that is
    /// not whole as written (the decoder reads `0.99999999999999999999` as 1 and `1e-400` as 0).
    public static func read(_ line: [UInt8], wholeNumbersIn whole: Set<String>) -> (problem: String?, notWhole: String?) {
        line.withUnsafeBufferPointer { bytes in
            var reader = JSONSyntax(bytes, whole: whole)
            do throws(Fault) {
                reader.skipSpace()
                try reader.value(depth: 0, member: nil)
                reader.skipSpace()
                guard reader.position == bytes.count else { throw reader.fault("more after the value") }
                return (nil, reader.notWhole)
            } catch {
                return (error.description, nil)
            }
        }
    }

    struct Fault: Error, CustomStringConvertible {
        let description: String
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private let whole: Set<String>
    private var notWhole: String?
    private var position = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>, whole: Set<String>) {
        self.bytes = bytes
        self.whole = whole
    }

    private var next: UInt8? { position < bytes.count ? bytes[position] : nil }

    private func fault(_ what: String) -> Fault {
        Fault(description: position < bytes.count ? "at byte \(position + 1), \(what)" : "at its end, \(what)")
    }

    private mutating func skipSpace() {
        while let byte = next, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { position += 1 }
    }

    private mutating func expect(_ byte: UInt8, _ what: String) throws(Fault) {
        guard next == byte else { throw fault(what) }
        position += 1
    }

    /// A value; `member`: the name it has in the outer object, if it is one of its members.
    private mutating func value(depth: Int, member: [UInt8]?) throws(Fault) {
        guard let byte = next else { throw fault("a value was expected") }
        switch byte {
        case UInt8(ascii: "{"): try object(depth: depth + 1)
        case UInt8(ascii: "["): try array(depth: depth + 1)
        case UInt8(ascii: "\""): _ = try string(keeping: false)
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number(member: member)
        default: throw fault("a value was expected")
        }
    }

    private mutating func open(depth: Int) throws(Fault) {
        guard depth <= Self.depthLimit else {
            throw fault("it nests arrays or objects deeper than \(Self.depthLimit) levels; a request needs two")
        }
        position += 1
        skipSpace()
    }

    private mutating func object(depth: Int) throws(Fault) {
        try open(depth: depth)
        if next == UInt8(ascii: "}") {
            position += 1
            return
        }
        var names: Set<[UInt8]> = []
        while true {
            guard next == UInt8(ascii: "\"") else {
                throw fault(names.isEmpty ? "a member name was expected" : "a member name was expected after the comma")
            }
            let start = position
            let name = try string(keeping: true)
            guard names.insert(name).inserted else {
                position = start
                throw fault("a second member with the same name")
            }
            skipSpace()
            try expect(UInt8(ascii: ":"), "a colon was expected after the member name")
            skipSpace()
            try value(depth: depth, member: depth == 1 && !whole.isEmpty ? name : nil)
            skipSpace()
            if next == UInt8(ascii: "}") {
                position += 1
                return
            }
            try expect(UInt8(ascii: ","), "a comma or a closing brace was expected")
            skipSpace()
        }
    }

    private mutating func array(depth: Int) throws(Fault) {
        try open(depth: depth)
        if next == UInt8(ascii: "]") {
            position += 1
            return
        }
        while true {
            guard next != UInt8(ascii: "]") else { throw fault("a value was expected after the comma") }
            try value(depth: depth, member: nil)
            skipSpace()
            if next == UInt8(ascii: "]") {
                position += 1
                return
            }
            try expect(UInt8(ascii: ","), "a comma or a closing bracket was expected")
            skipSpace()
        }
    }

    private mutating func literal(_ word: String) throws(Fault) {
        let word = Array(word.utf8)
        guard position + word.count <= bytes.count, bytes[position..<position + word.count].elementsEqual(word) else {
            throw fault("a value was expected")
        }
        position += word.count
    }

    /// Digits, at least one; returns where they begin.
    @discardableResult
    private mutating func digits() throws(Fault) -> Int {
        guard let byte = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else {
            throw fault("a digit was expected")
        }
        let start = position
        while let byte = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { position += 1 }
        return start
    }

    private mutating func number(member: [UInt8]?) throws(Fault) {
        if next == UInt8(ascii: "-") { position += 1 }
        let integer = position
        if next == UInt8(ascii: "0") {
            position += 1
            if let byte = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                throw fault("a number does not begin with 0")
            }
        } else {
            try digits()
        }
        let integerEnd = position
        var fraction = position..<position
        if next == UInt8(ascii: ".") {
            position += 1
            fraction = try digits()..<position
        }
        var exponent = 0
        if next == UInt8(ascii: "e") || next == UInt8(ascii: "E") {
            position += 1
            let negative = next == UInt8(ascii: "-")
            if negative || next == UInt8(ascii: "+") { position += 1 }
            for index in try digits()..<position {  // beyond a million, as good as infinite
                exponent = min(1_000_000, exponent * 10 + Int(bytes[index] - UInt8(ascii: "0")))
            }
            if negative { exponent = -exponent }
        }
        if let member, notWhole == nil, !isWhole(integer: integer..<integerEnd, fraction: fraction, exponent: exponent),
           whole.contains(String(decoding: member, as: UTF8.self)) {
            notWhole = String(decoding: member, as: UTF8.self)
        }
    }

    /// Whether digits `integer`.`fraction` times ten to `exponent` make a whole number: each digit that is not 0
    /// stands at a place of ten to 0 or more.
    private func isWhole(integer: Range<Int>, fraction: Range<Int>, exponent: Int) -> Bool {
        let zero = UInt8(ascii: "0")
        if let last = fraction.last(where: { bytes[$0] != zero }), last - fraction.lowerBound + 1 > exponent {
            return false  // the last digit that is not 0 stands at ten to (exponent - its place after the point)
        }
        guard exponent < 0, let lowest = integer.last(where: { bytes[$0] != zero }) else { return true }
        return integer.upperBound - 1 - lowest + exponent >= 0
    }

    /// A string, from its opening quote past its closing one; its UTF-8 as decoded when `keeping` (else empty).
    private mutating func string(keeping: Bool) throws(Fault) -> [UInt8] {
        position += 1
        var decoded: [UInt8] = []
        while true {
            guard let byte = next else { throw fault("the string does not end") }
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return decoded
            case UInt8(ascii: "\\"):
                position += 1
                let scalar = try escape()
                if keeping { decoded.append(contentsOf: String(Character(scalar)).utf8) }
            case 0..<0x20:
                throw fault("a control character in a string (it is written \\u00\(byte < 16 ? "0" : "")"
                            + "\(String(byte, radix: 16)))")
            case 0..<0x80:
                if keeping { decoded.append(byte) }
                position += 1
            default:
                let start = position
                try scalarOfUTF8()
                if keeping { decoded.append(contentsOf: bytes[start..<position]) }
            }
        }
    }

    /// The character an escape stands for, from the byte after its backslash; a fault in it is placed at the
    /// backslash.
    private mutating func escape() throws(Fault) -> Unicode.Scalar {
        let backslash = position - 1
        guard let byte = next else { throw fault("the string does not end") }
        position += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): return Unicode.Scalar(byte)
        case UInt8(ascii: "b"): return "\u{8}"
        case UInt8(ascii: "f"): return "\u{C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "u"):
            let first = try hexQuad()
            switch first {
            case 0xD800..<0xDC00:
                if next == UInt8(ascii: "\\"), position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: "u") {
                    position += 2
                    let second = try hexQuad()
                    if (0xDC00..<0xE000).contains(second) {
                        return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))!
                    }
                }
                position = backslash
                throw fault("a \\u escape of a high surrogate without its low one")
            case 0xDC00..<0xE000:
                position = backslash
                throw fault("a \\u escape of a low surrogate alone")
            default:
                return Unicode.Scalar(first)!
            }
        default:
            position = backslash
            throw fault("an escape that JSON does not have (\\\(Unicode.Scalar(byte).escaped(asASCII: true)))")
        }
    }

    private mutating func hexQuad() throws(Fault) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = next, let digit = Self.hexValue(byte) else { throw fault("\\u needs four hex digits") }
            value = value << 4 | digit
            position += 1
        }
        return value
    }

    private static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    /// One character of two to four bytes of UTF-8 (not overlong, no surrogate, at most U+10FFFF).
    private mutating func scalarOfUTF8() throws(Fault) {
        let lead = bytes[position]
        let (count, lowest): (Int, UInt32)
        switch lead {
        case 0xC2...0xDF: (count, lowest) = (2, 0x80)
        case 0xE0...0xEF: (count, lowest) = (3, 0x800)
        case 0xF0...0xF4: (count, lowest) = (4, 0x10000)
        default: throw fault("a byte that is not UTF-8")
        }
        guard position + count <= bytes.count else { throw fault("a byte that is not UTF-8 (a character cut short)") }
        var scalar = UInt32(lead) & (0xFF >> (count + 1))
        for offset in 1..<count {
            let byte = bytes[position + offset]
            guard byte & 0xC0 == 0x80 else { throw fault("a byte that is not UTF-8") }
            scalar = scalar << 6 | UInt32(byte & 0x3F)
        }
        guard scalar >= lowest, scalar <= 0x10FFFF, !(0xD800..<0xE000).contains(scalar) else {
            throw fault("a byte that is not UTF-8")
        }
        position += count
    }
}
