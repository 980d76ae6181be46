import FoundationEssentials
import Testing
@testable import PrefetchProtocol

@Suite("JSON syntax")
struct JSONSyntaxTests {
    func problem(_ text: String) -> String? { JSONSyntax.problem(in: Array(text.utf8)) }
    func problem(_ bytes: [UInt8]) -> String? { JSONSyntax.problem(in: bytes) }

    @Test("JSON values are accepted: requests, every kind of value, escapes, characters beyond ASCII, space around")
    func accepted() {
        for text in ["{\"id\":1,\"op\":\"queue\",\"urls\":[\"http://a/1.jpg\",\"http://a/2.jpg\"],\"summary\":true}",
                     " \t{ \"a\" : [ 1 , -0 , 0.5e+10 , 1E-400 , -12.25 , true , false , null , { } , [ ] ] }\r ",
                     "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00\"", "\"é ☃ 😀\"", "{\"\":0,\"\\u0000\":1}",
                     "[]", "0", "null", "{\"op\":\"o\\u0070\"}"] {
            #expect(problem(text) == nil, "\(text)")
        }
        let deep = String(repeating: "[", count: JSONSyntax.depthLimit) + String(repeating: "]", count: JSONSyntax.depthLimit)
        #expect(problem(deep) == nil)
    }

    @Test("what Foundation's decoder let by or read one way of two is refused, naming the byte where it is",
          arguments: [
              ("{\"op\":\"evict\",\"all\":true,\"op\":\"ping\"}", "at byte 26, a second member with the same name"),
              ("{\"op\":\"ping\",\"o\\u0070\":\"evict\"}", "at byte 14, a second member with the same name"),
              ("{\"id\":1,\"op\":\"ping\",}", "at byte 21, a member name was expected after the comma"),
              ("{\"urls\":[\"a\",]}", "at byte 14, a value was expected after the comma"),
              ("[1,,2]", "at byte 4, a value was expected"),
              ("{\"a\" 1}", "at byte 6, a colon was expected after the member name"),
              ("{\"a\":1 \"b\":2}", "at byte 8, a comma or a closing brace was expected"),
              ("[1 2]", "at byte 4, a comma or a closing bracket was expected"),
              ("{1:2}", "at byte 2, a member name was expected"),
              ("{} {}", "at byte 4, more after the value"),
              ("", "at its end, a value was expected"), ("this is not json", "at byte 1, a value was expected"),
              ("nul", "at byte 1, a value was expected"), ("[True]", "at byte 2, a value was expected"),
              ("01", "at byte 2, a number does not begin with 0"), ("+1", "at byte 1, a value was expected"),
              (".5", "at byte 1, a value was expected"), ("1.", "at its end, a digit was expected"),
              ("1e", "at its end, a digit was expected"), ("-", "at its end, a digit was expected"),
              ("\"abc", "at its end, the string does not end"), ("\"a\tb\"", "at byte 3, a control character in a string (it is written \\u0009)"),
              ("\"\\x\"", "at byte 2, an escape that JSON does not have (\\x)"), ("\"\\u12\"", "at byte 6, \\u needs four hex digits"),
              ("\"\\uD83D\"", "at byte 2, a \\u escape of a high surrogate without its low one"),
              ("\"\\uD83D\\u0041\"", "at byte 2, a \\u escape of a high surrogate without its low one"),
              ("\"\\uDE00\"", "at byte 2, a \\u escape of a low surrogate alone"),
          ])
    func refused(text: String, said: String) {
        #expect(problem(text) == said, "\(text)")
    }

    @Test("bytes that are not UTF-8 in a string are refused at their place: overlong, surrogates, past U+10FFFF, cut short, stray")
    func notUTF8() {
        for bad: [UInt8] in [[0xC0, 0x80], [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80],
                             [0x80], [0xC3], [0xE2, 0x98], [0xC3, 0x41]] {
            let line = Array("{\"url\":\"http://a/".utf8) + bad + Array("\"}".utf8)
            #expect(problem(line)?.hasPrefix("at byte 18, a byte that is not UTF-8") == true, "\(bad): \(problem(line) ?? "accepted")")
        }
        #expect(problem(Array("\"".utf8) + [0xF0, 0x9F, 0x98, 0x80, 0xC3, 0xA9] + Array("\"".utf8)) == nil)
    }

    @Test("nesting is bounded before the end is looked at: 33 levels, and 513 opening brackets with nothing after (the decoder trapped)")
    func nesting() {
        let said = "it nests arrays or objects deeper than 32 levels; a request needs two"
        #expect(problem(String(repeating: "[", count: 33) + String(repeating: "]", count: 33)) == "at byte 33, " + said)
        #expect(problem(String(repeating: "[", count: 513)) == "at byte 33, " + said)
        #expect(problem("{\"op\":\"ping\",\"x\":" + String(repeating: "{\"a\":", count: 40)) == "at byte 173, " + said)
        #expect(problem("{\"a\":\"" + String(repeating: "[", count: 100) + "\\\"" + String(repeating: "{", count: 100) + "\"}") == nil,
                "brackets in strings do not count")
    }

    @Test("numbers of the named members of the outer object that are not whole as written are named (the decoder read 0.99999999999999999999 as 1, 1e-400 as 0); whole ones however written, and others, are not",
          arguments: [("0.99999999999999999999", false), ("1.0000000000000000001", false), ("1e-400", false), ("-1e-400", false),
                      ("84.99999999999999999", false), ("1." + String(repeating: "0", count: 65_000) + "1", false), ("1.5e0", false),
                      ("12.5e1", true), ("5.0", true), ("1e3", true), ("100e-2", true), ("-0", true), ("0.0e-400", true),
                      ("1e400", true), ("9223372036854775808", true), ("7", true)])
    func wholeNumbers(number: String, whole: Bool) {
        let reading = JSONSyntax.read(Array("{\"id\":1,\"limit\":\(number),\"x\":1.5,\"y\":{\"limit\":0.5}}".utf8),
                                      wholeNumbersIn: ["id", "limit"])
        #expect(reading.problem == nil && reading.notWhole == (whole ? nil : "limit"), "\(number.prefix(40))")
    }

    @Test("random values, written with random space, are accepted and read by the decoder; a comma put before their last closing bracket is refused; a name repeated is refused however it is written")
    func randomValues() throws {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let text = Self.randomValue(depth: 0, using: &random)
            #expect(problem(text) == nil, "\(text)")
            #expect((try? JSONDecoder().decode(AnyValue.self, from: Data(text.utf8))) != nil, "\(text)")
            if let close = text.lastIndex(where: { $0 == "]" || $0 == "}" }) {
                #expect(problem(String(text[..<close]) + "," + String(text[close...])) != nil, "\(text)")
            }
        }
        for name in ["a", "é", "\\u00e9", "😀", "\\uD83D\\uDE00"] {
            #expect(problem("{\"\(name)\":1,\"b\":2,\"\(name)\":3}") != nil, "\(name)")
        }
        #expect(problem("{\"é\":1,\"\\u00e9\":2}") != nil, "names compared as decoded")
    }

    /// A random JSON value as text, with random space between its tokens.
    static func randomValue(depth: Int, using random: inout SystemRandomNumberGenerator) -> String {
        let space = { (random: inout SystemRandomNumberGenerator) in [" ", "", "", "\t", "\r\n"].randomElement(using: &random)! }
        switch Int.random(in: depth >= 6 ? 2..<8 : 0..<8, using: &random) {
        case 0:
            let names = Set((0..<Int.random(in: 0...4, using: &random)).map { "k\($0)\(["", "é", "\\n"].randomElement(using: &random)!)" })
            return "{" + names.map { space(&random) + "\"\($0)\"" + space(&random) + ":" + space(&random)
                + randomValue(depth: depth + 1, using: &random) + space(&random) }.joined(separator: ",") + "}"
        case 1:
            return "[" + (0..<Int.random(in: 0...4, using: &random)).map { _ in
                space(&random) + randomValue(depth: depth + 1, using: &random) + space(&random) }.joined(separator: ",") + "]"
        case 2:
            let pieces = ["a", "é", "😀", "\\\"", "\\\\", "\\/", "\\n", "\\u0041", "\\uD83D\\uDE00", " ", "/", "?"]
            return "\"" + (0..<Int.random(in: 0...6, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined() + "\""
        case 3: return ["true", "false", "null"].randomElement(using: &random)!
        case 4: return String(Int.random(in: Int(Int32.min)...Int(Int32.max), using: &random))
        case 5: return ["0", "-0", "0.5", "-12.25e3", "1E+2", "3e-7"].randomElement(using: &random)!
        default: return "\"" + String(Int.random(in: 0...1000, using: &random)) + "\""
        }
    }
}

/// Any JSON value, to check that the decoder reads what the syntax accepts.
private enum AnyValue: Decodable {
    case object([String: AnyValue]), array([AnyValue]), string(String), number(Double), bool(Bool), null

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([AnyValue].self) { self = .array(value) }
        else { self = .object(try container.decode([String: AnyValue].self)) }
    }
}
