/// A point in time in milliseconds on a clock the caller owns; QueueCore never reads a clock itself.
public struct Moment: Comparable, Hashable, Sendable, CustomStringConvertible {
    public var milliseconds: Int64

    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    public static func < (a: Moment, b: Moment) -> Bool { a.milliseconds < b.milliseconds }
    public static func + (a: Moment, ms: Int64) -> Moment { Moment(milliseconds: a.milliseconds &+ ms) }

    public var description: String { "t=\(milliseconds)ms" }
}

/// A small deterministic random source (SplitMix64); the daemon seeds it, tests replay it.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
