/// Splits a byte stream into newline-terminated lines of at most `maximumLineLength` bytes.
public struct LineBuffer: Sendable {
    public enum Line: Equatable, Sendable {
        case line([UInt8])
        /// More than the limit arrived without a newline; the stream cannot be resynchronised.
        case tooLong
    }

    private var buffer: [UInt8] = []
    /// Where the bytes not taken yet begin: lines are taken from the front without moving what follows.
    private var start = 0
    /// From here on no newline was looked for yet.
    private var scanned = 0
    /// Just past the last newline received, or `start` when none is left.
    private var wholeEnd = 0
    public let limit: Int

    public init(limit: Int = maximumLineLength) { self.limit = limit }

    /// Adds received bytes; returns whether they end a line.
    @discardableResult
    public mutating func append(_ bytes: some Collection<UInt8>) -> Bool {
        let end = buffer.count
        buffer.append(contentsOf: bytes)
        guard let newline = buffer[end...].lastIndex(of: 0x0A) else { return false }
        wholeEnd = newline + 1
        return true
    }

    /// The next complete line (without its newline, and without a trailing carriage return), if any.
    public mutating func next() -> Line? {
        if let newline = buffer[scanned...].firstIndex(of: 0x0A) {
            guard newline - start <= limit else { return .tooLong }
            var line = Array(buffer[start..<newline])
            if line.last == 0x0D { line.removeLast() }
            start = newline + 1
            scanned = start
            compact()
            return .line(line)
        }
        scanned = buffer.count
        return pending > limit ? .tooLong : nil
    }

    /// Once the stream ended: what is left, a last line that came without its newline, if any.
    public mutating func finish() -> Line? {
        guard pending > 0 else { return nil }
        guard pending <= limit else { return .tooLong }
        var line = Array(buffer[start...])
        if line.last == 0x0D { line.removeLast() }
        self = LineBuffer(limit: limit)
        return .line(line)
    }

    /// Bytes received that were not taken as lines yet.
    public var pending: Int { buffer.count - start }

    /// Bytes received after the last newline: a line not finished yet.
    public var unfinished: Int { buffer.count - max(start, wholeEnd) }

    /// Lets go of the taken lines' storage: at once when all is taken (a client idle after a long line held the
    /// line's size), else once they are half of it (what is left is copied to storage of its own size).
    private mutating func compact() {
        if start == buffer.count {
            buffer = []
        } else if start >= 4096, start * 2 >= buffer.count {
            buffer = Array(buffer[start...])
        } else {
            return
        }
        scanned -= start
        wholeEnd = max(0, wholeEnd - start)
        start = 0
    }
}
