/// A message that writes its own JSON line: byte for byte what `JSONEncoder` with sorted keys and unescaped slashes
/// writes (the tests compare the two), without the encoder's work per key. For the lines sent once per fetched file.
public protocol DirectJSON {
    /// The message's JSON, without a newline.
    var json: [UInt8] { get }
}

extension Reply: DirectJSON where Result == CacheEntry {
    public var json: [UInt8] {
        var writer = JSONWriter()
        writer.open()
        if let error {
            writer.key("error")
            writer.open()
            writer.string("code", error.code)
            writer.string("message", error.message)
            writer.number("status", error.status.map(Int64.init))
            writer.close()
        }
        writer.key("id")
        switch id {
        case .number(let number): writer.bytes += String(number).utf8
        case .text(let text): writer.quoted(text)
        case nil: writer.bytes += "null".utf8
        }
        writer.bool("ok", ok)
        if let result {
            writer.key("result")
            result.write(to: &writer)
        }
        writer.close()
        return writer.bytes
    }
}

extension CacheEntry {
    /// The members in the order `JSONEncoder` sorts their keys.
    fileprivate func write(to writer: inout JSONWriter) {
        writer.open()
        writer.number("bytes", bytes)
        writer.string("content_type", contentType)
        writer.number("fetched_at", fetchedAt)
        writer.string("format", format)
        writer.number("fresh_until", freshUntil)
        writer.bool("from_cache", fromCache)
        writer.number("height", height.map(Int64.init))
        writer.string("path", path)
        writer.string("sha256", sha256)
        writer.bool("stale", stale)
        writer.string("url", url)
        writer.string("variant", variant)
        writer.number("width", width.map(Int64.init))
        writer.close()
    }
}

/// Writes objects member by member, in the order given; absent values are left out.
private struct JSONWriter {
    var bytes: [UInt8] = []
    /// Whether the object being written has no member yet.
    private var empty = false

    mutating func open() {
        bytes.append(UInt8(ascii: "{"))
        empty = true
    }

    /// Ends an object, which is then its parent's member.
    mutating func close() {
        bytes.append(UInt8(ascii: "}"))
        empty = false
    }

    mutating func key(_ name: StaticString) {
        if !empty { bytes.append(UInt8(ascii: ",")) }
        empty = false
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes += $0 }
        bytes += "\":".utf8
    }

    mutating func string(_ name: StaticString, _ value: String?) {
        guard let value else { return }
        key(name)
        quoted(value)
    }

    mutating func number(_ name: StaticString, _ value: Int64?) {
        guard let value else { return }
        key(name)
        bytes += String(value).utf8
    }

    mutating func bool(_ name: StaticString, _ value: Bool?) {
        guard let value else { return }
        key(name)
        bytes += (value ? "true" : "false").utf8
    }

    /// A JSON string: `"` and `\` escaped, control characters as `\n`-style or `\u00XX` escapes, the rest as it is.
    mutating func quoted(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes += "\\\"".utf8
            case UInt8(ascii: "\\"): bytes += "\\\\".utf8
            case 0x0A: bytes += "\\n".utf8
            case 0x0D: bytes += "\\r".utf8
            case 0x09: bytes += "\\t".utf8
            case 0x08: bytes += "\\b".utf8
            case 0x0C: bytes += "\\f".utf8
            case ..<0x20: bytes += "\\u00".utf8 + [Self.hex[Int(byte >> 4)], Self.hex[Int(byte & 0x0F)]]
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private static let hex = Array("0123456789abcdef".utf8)
}
