/// How deeply a line of JSON nests arrays and objects, counted before it is decoded: a request needs two levels,
/// and Foundation's decoder traps (the daemon dies) on a line that ends right after its 513th opening bracket.
public enum Nesting {
    /// The deepest a request line may nest.
    public static let limit = 32

    /// Whether `line` opens more than `limit` arrays or objects at once (brackets inside strings do not count).
    public static func exceedsLimit(_ line: some Sequence<UInt8>) -> Bool {
        var depth = 0, inString = false, escaped = false
        for byte in line {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > limit { return true }
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return false
    }
}
