/// What the background lane may do: run freely, run at a capped rate, or start nothing.
/// Ordered by how much they hold back, so the strictest of several wins.
public enum BackgroundMode: String, CaseIterable, Comparable, Sendable {
    case run, slow, pause

    private var strictness: Int {
        switch self {
        case .run: 0
        case .slow: 1
        case .pause: 2
        }
    }

    public static func < (a: Self, b: Self) -> Bool { a.strictness < b.strictness }
}

/// A condition of the machine or the clock that may hold the background lane back. Urgent work never is.
public enum Condition: String, CaseIterable, Sendable {
    /// The network is metered (NetworkManager says YES or GUESS_YES).
    case metered
    /// The machine runs on battery (UPower).
    case onBattery = "on_battery"
    /// The power profile is `power-saver` (power-profiles-daemon).
    case powerSaver = "power_saver"
    /// The local time is within `quiet_hours`.
    case quietHours = "quiet_hours"
    /// The machine has no network (NetworkManager's state is asleep, disconnected, disconnecting or connecting).
    case offline

    /// How `status` names the condition when it holds the lane back.
    public var description: String {
        switch self {
        case .metered: "metered network"
        case .onBattery: "on battery"
        case .powerSaver: "power saver"
        case .quietHours: "quiet hours"
        case .offline: "no network"
        }
    }
}

/// A daily window of local time, `08:00-18:00`; it may wrap midnight (`22:00-06:00`). Minutes of the day, the start
/// inside the window, the end outside it.
public struct QuietHours: Equatable, Sendable, CustomStringConvertible {
    public let start: Int
    public let end: Int

    static let minutesPerDay = 24 * 60

    /// Parses `HH:MM-HH:MM`; nil when it is not that, a time does not exist, or both ends are the same.
    public init?(parsing text: String) {
        let ends = text.split(separator: "-", omittingEmptySubsequences: false)
        guard ends.count == 2, let start = Self.minute(ends[0]), let end = Self.minute(ends[1]), start != end else {
            return nil
        }
        self.start = start
        self.end = end
    }

    private static func minute(_ text: Substring) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ (1...2).contains($0.count) && $0.utf8.allSatisfy { (48...57).contains($0) } }),
              let hours = Int(parts[0]), let minutes = Int(parts[1]), parts[1].count == 2,
              (0...23).contains(hours), (0...59).contains(minutes) else { return nil }
        return hours * 60 + minutes
    }

    /// Whether `minute` (0 ..< 1440, minutes since local midnight) is inside the window.
    public func contains(minute: Int) -> Bool {
        start < end ? (start..<end).contains(minute) : (minute >= start || minute < end)
    }

    /// Minutes from `minute` until the window next opens or closes (1 ... 1440).
    public func minutesUntilChange(from minute: Int) -> Int {
        let boundary = contains(minute: minute) ? end : start
        let distance = (boundary - minute + Self.minutesPerDay) % Self.minutesPerDay
        return distance == 0 ? Self.minutesPerDay : distance
    }

    public var description: String {
        func text(_ minute: Int) -> String {
            let hours = minute / 60, minutes = minute % 60
            return (hours < 10 ? "0" : "") + "\(hours):" + (minutes < 10 ? "0" : "") + "\(minutes)"
        }
        return text(start) + "-" + text(end)
    }
}

/// What each condition asks of the background lane, and the quiet hours.
public struct BackgroundPolicy: Equatable, Sendable {
    public var metered: BackgroundMode
    public var onBattery: BackgroundMode
    public var powerSaver: BackgroundMode
    public var quietHours: QuietHours?
    public var offline: BackgroundMode

    public init(metered: BackgroundMode = .pause, onBattery: BackgroundMode = .slow, powerSaver: BackgroundMode = .slow,
                quietHours: QuietHours? = nil, offline: BackgroundMode = .pause) {
        self.metered = metered
        self.onBattery = onBattery
        self.powerSaver = powerSaver
        self.quietHours = quietHours
        self.offline = offline
    }

    /// The mode a condition asks for while it holds.
    public func mode(for condition: Condition) -> BackgroundMode {
        switch condition {
        case .metered: metered
        case .onBattery: onBattery
        case .powerSaver: powerSaver
        case .quietHours: .pause
        case .offline: offline
        }
    }

    /// The mode in force while `active` conditions hold: the strictest they ask for, and the conditions that ask for
    /// it (in `Condition` order), none when it is `run`.
    public func decide(_ active: Set<Condition>) -> (mode: BackgroundMode, because: [Condition]) {
        let mode = active.map(mode(for:)).max() ?? .run
        guard mode != .run else { return (.run, []) }
        return (mode, Condition.allCases.filter { active.contains($0) && self.mode(for: $0) == mode })
    }
}
