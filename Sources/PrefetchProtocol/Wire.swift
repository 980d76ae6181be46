import FoundationEssentials
import QueueCore

/// The protocol revision the greeting announces.
public let protocolVersion = 1
/// The version both programs report.
public let prefetchVersion = "0.1.0"
/// The longest request or reply line, newline excluded.
public let maximumLineLength = 64 * 1024

/// The first line the daemon sends on every connection.
public struct Greeting: Codable, Equatable, Sendable {
    public var hello: String
    public var version: String
    public var `protocol`: Int

    public init(version: String = prefetchVersion) {
        self.hello = "prefetchd"
        self.version = version
        self.protocol = protocolVersion
    }
}

/// A request id as the client chose it: a number or a string, echoed in the reply.
public enum RequestID: Codable, Hashable, Sendable, CustomStringConvertible {
    case number(Int64)
    case text(String)

    /// The longest string an id may be, in bytes as a reply writes it back (`writtenLength`): a request waiting holds
    /// its id until its reply (8 clients of 8,192 waiting gets, each with an id of 60 KB, held 3.95 GB, then as many
    /// replies at once).
    public static let longestText = 1024

    /// The bytes `text` takes in a reply, quotes aside: an escape (`\"`, `\n`, `\u0000`) counts its characters, so
    /// that an id of 1,024 control characters does not come back six times as long.
    public static func writtenLength(_ text: String) -> Int {
        text.utf8.reduce(0) { length, byte in
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x08, 0x09, 0x0A, 0x0C, 0x0D: length + 2
            case ..<0x20: length + 6
            default: length + 1
            }
        }
    }

    /// What an id may be, said when it is none of them.
    public static let expected = "an id is a string or a whole number from -2^63 to 2^63-1"

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            self = .number(number)
        } else if let text = try? container.decode(String.self) {
            self = .text(text)
        } else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: Self.expected)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .number(let n): try container.encode(n)
        case .text(let s): try container.encode(s)
        }
    }

    public var description: String {
        switch self {
        case .number(let n): return String(n)
        case .text(let s): return s
        }
    }
}

/// Every operation the daemon understands.
public enum Operation: String, Codable, CaseIterable, Sendable {
    case ping, get, queue, demote, promote, cancel, info, evict, status, list, watch, metrics, formats, view
}

/// One request line. Which fields an operation reads is documented in docs/protocol.md.
public struct Request: Codable, Equatable, Sendable {
    public var id: RequestID?
    public var op: String
    /// `get`, `info`: the one URL.
    public var url: String?
    /// `queue`, `demote`, `promote`, `cancel`, `evict`: the URLs, at most `maximumBatch`.
    public var urls: [String]?
    /// `list`: how many tasks to return at most.
    public var limit: Int?
    /// `get`: answer at once from an entry stale by at most this many seconds (and revalidate in the background).
    public var maxStale: Int64?
    /// `get`: answer only from the cache, never fetch.
    public var offline: Bool?
    /// `evict`: every entry.
    public var all: Bool?
    /// `get`: a resized variant, `WxH`, instead of the original.
    public var size: String?
    /// `get` with `size`: `contain` (default), `cover` or `fill`.
    public var fit: String?
    /// `get` with `size`: `jpeg` or `png` (default: JPEG for JPEG originals, PNG otherwise).
    public var format: String?
    /// `get` with `size`: JPEG quality 1–100 (default 85).
    public var quality: Int?
    /// `get` with `size`: enlarge originals smaller than the box.
    public var upscale: Bool?
    /// `view`: add `urls` to the end of the list instead of replacing it.
    public var append: Bool?
    /// `view`: the first and last visible rows (inclusive, counted from 0).
    public var first: Int?
    public var last: Int?
    /// `view`: rows after and before the visible ones to prefetch.
    public var ahead: Int?
    public var behind: Int?
    /// `queue`: fetch them now, as urgent work, even while background work is paused or slowed.
    public var now: Bool?
    /// Batch ops: reply with how many URLs ended in each status, and the results of only those with an error.
    public var summary: Bool?

    public static let maximumBatch = 10_000

    /// The members whose numbers must be whole (`JSONSyntax.read`).
    public static let wholeNumberMembers: Set<String> = ["id", "limit", "max_stale", "quality", "first", "last", "ahead",
                                                         "behind"]

    public init(id: RequestID?, op: Operation, url: String? = nil, urls: [String]? = nil, limit: Int? = nil,
                maxStale: Int64? = nil, offline: Bool? = nil, all: Bool? = nil, size: String? = nil, fit: String? = nil,
                format: String? = nil, quality: Int? = nil, upscale: Bool? = nil, append: Bool? = nil,
                first: Int? = nil, last: Int? = nil, ahead: Int? = nil, behind: Int? = nil, now: Bool? = nil,
                summary: Bool? = nil) {
        self.id = id
        self.op = op.rawValue
        self.url = url
        self.urls = urls
        self.limit = limit
        self.maxStale = maxStale
        self.offline = offline
        self.all = all
        self.size = size
        self.fit = fit
        self.format = format
        self.quality = quality
        self.upscale = upscale
        self.append = append
        self.first = first
        self.last = last
        self.ahead = ahead
        self.behind = behind
        self.now = now
        self.summary = summary
    }

    enum CodingKeys: String, CodingKey {
        case id, op, url, urls, limit, offline, all, size, fit, format, quality, upscale, append, first, last, ahead, behind, now
        case summary
        case maxStale = "max_stale"
    }

    public init(from decoder: any Decoder) throws {
        let fields = try decoder.container(keyedBy: CodingKeys.self)
        id = try fields.decodeIfPresent(RequestID.self, forKey: .id)
        op = try fields.decode(String.self, forKey: .op)
        url = try fields.decodeIfPresent(String.self, forKey: .url)
        urls = try fields.decodeIfPresent([String].self, forKey: .urls)
        limit = try fields.wholeNumber(.limit)
        maxStale = try fields.wholeNumber(.maxStale)
        offline = try fields.decodeIfPresent(Bool.self, forKey: .offline)
        all = try fields.decodeIfPresent(Bool.self, forKey: .all)
        size = try fields.decodeIfPresent(String.self, forKey: .size)
        fit = try fields.decodeIfPresent(String.self, forKey: .fit)
        format = try fields.decodeIfPresent(String.self, forKey: .format)
        quality = try fields.wholeNumber(.quality)
        upscale = try fields.decodeIfPresent(Bool.self, forKey: .upscale)
        append = try fields.decodeIfPresent(Bool.self, forKey: .append)
        first = try fields.wholeNumber(.first)
        last = try fields.wholeNumber(.last)
        ahead = try fields.wholeNumber(.ahead)
        behind = try fields.wholeNumber(.behind)
        now = try fields.decodeIfPresent(Bool.self, forKey: .now)
        summary = try fields.decodeIfPresent(Bool.self, forKey: .summary)
    }
}

extension KeyedDecodingContainer {
    /// An integer field. A number that is not whole or out of range gets an error naming the field: the decoder's own
    /// says that the whole line "was not valid JSON".
    func wholeNumber<Number: FixedWidthInteger & Decodable>(_ key: Key) throws -> Number? {
        do {
            return try decodeIfPresent(Number.self, forKey: key)
        } catch let error as DecodingError {
            throw error
        } catch {
            throw DecodingError.dataCorruptedError(
                forKey: key, in: self, debugDescription: "not a whole number from \(Number.min) to \(Number.max)")
        }
    }
}

/// A stable, documented error code: one enum from the scheduler (QueueCore) to the wire (docs/protocol.md).
public typealias ErrorCode = QueueCore.ErrorCode

/// The error half of a reply.
public struct WireError: Codable, Equatable, Sendable, Error {
    public var code: String
    public var message: String
    /// The HTTP status, for `http_status`.
    public var status: Int?

    /// The code as the enum has it; nil for one this version does not know (a newer daemon's).
    public var knownCode: ErrorCode? { ErrorCode(rawValue: code) }

    public init(_ code: ErrorCode, _ message: String, status: Int? = nil) {
        self.init(code: code.rawValue, message: message, status: status)
    }

    public init(code: String, message: String, status: Int? = nil) {
        self.code = code
        self.message = message
        self.status = status
    }
}

/// One reply line: `{"id":…,"ok":true,"result":{…}}` or `{"id":…,"ok":false,"error":{…}}`.
/// A reply, of whatever result: its id.
public protocol AnyReply {
    var id: RequestID? { get }
}

public struct Reply<Result: Codable & Sendable>: Codable, Sendable, AnyReply {
    public var id: RequestID?
    public var ok: Bool
    public var result: Result?
    public var error: WireError?

    public init(id: RequestID?, result: Result) {
        self.id = id
        self.ok = true
        self.result = result
    }

    public init(id: RequestID?, error: WireError) {
        self.id = id
        self.ok = false
        self.error = error
    }

    /// Always writes `id` (null when the request had none or could not be read).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(ok, forKey: .ok)
        try container.encodeIfPresent(result, forKey: .result)
        try container.encodeIfPresent(error, forKey: .error)
    }
}

/// A reply's result left undecoded, to read the envelope first.
public struct Ignored: Codable, Sendable {}
