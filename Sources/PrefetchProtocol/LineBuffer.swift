/// Splits a byte stream into newline-terminated lines of at most `maximumLineLength` bytes.
public struct LineBuffer: Sendable {
    public enum Line: Equatable, Sendable {
        case line([UInt8])
        /// More than the limit arrived without a newline; the stream cannot be resynchronised.
        case tooLong
    }

    private var buffer: [UInt8] = []
    private var scanned = 0
    public let limit: Int

    public init(limit: Int = maximumLineLength) { self.limit = limit }

    public mutating func append(_ bytes: some Collection<UInt8>) { buffer.append(contentsOf: bytes) }

    /// The next complete line (without its newline, and without a trailing carriage return), if any.
    public mutating func next() -> Line? {
        if let newline = buffer[scanned...].firstIndex(of: 0x0A) {
            guard newline <= limit else { return .tooLong }
            var line = Array(buffer[..<newline])
            if line.last == 0x0D { line.removeLast() }
            // Emptied, it lets go of its storage: a client idle after a long line held the line's size.
            if newline + 1 == buffer.count { buffer = [] } else { buffer.removeFirst(newline + 1) }
            scanned = 0
            return .line(line)
        }
        scanned = buffer.count
        return buffer.count > limit ? .tooLong : nil
    }

    /// Once the stream ended: what is left, a last line that came without its newline, if any.
    public mutating func finish() -> Line? {
        guard !buffer.isEmpty else { return nil }
        guard buffer.count <= limit else { return .tooLong }
        var line = buffer
        if line.last == 0x0D { line.removeLast() }
        buffer = []
        scanned = 0
        return .line(line)
    }

    /// Bytes received that do not yet form a line.
    public var pending: Int { buffer.count }
}
