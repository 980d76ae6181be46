import Glibc

/// Keeps one poisonous response from killing the daemon for good.
///
/// The risky steps of handling a URL — interpreting its response, inspecting the body, making a variant — are
/// recorded durably before they run (`begin`) and cleared after (`end`). A start-up that finds records counts a
/// death for each of those URLs: they become suspects. Until every suspect has been handled once without incident,
/// risky steps run one at a time (`whenFree`), so that another death names exactly one URL. A crash (a fatal signal of
/// the daemon's own, `FatalSignalMark`) weighs `crashWeight`, a kill from outside (SIGKILL, the OOM killer, a power
/// cut) 1: a URL whose deaths in a row weigh `quarantineWeight` — two crashes, or four kills that each came while it
/// was handled — is returned by `init` for quarantine. A kill is no proof that the URL did it, and a queued URL is
/// acknowledged work: two `kill -9`s from a person, or a stop that ends in SIGKILL, cost a queued URL nothing.
final class CrashGuard {
    private let store: Store
    /// URLs in a risky step now, with how many steps each (a fetch and a variant of one URL may overlap).
    private var active: [String: Int] = [:]
    /// URLs that were in a risky step when the daemon last died and have not been handled since.
    private(set) var suspects: Set<String>
    /// Risky steps held back while another runs (only while there are suspects).
    private var held: [() -> Void] = []
    /// Called when risky steps may start again after being held back.
    var onFree: () -> Void = {}
    /// Test hooks: when a URL containing `crashOn` (`PREFETCHD_TEST_DIE_ON`) begins a risky step the daemon crashes
    /// (a stack overflow: SIGSEGV), when one containing `killedOn` (`PREFETCHD_TEST_KILLED_ON`) does it is killed
    /// (SIGKILL).
    private let crashOn: String?
    private let killedOn: String?

    static let crashWeight = 2
    static let quarantineWeight = 4

    /// Counts the deaths found at start-up, weighed by `mark`, which then marks this run's crashes; `quarantine` lists
    /// the URLs whose deaths in a row reached `quarantineWeight`.
    init(store: Store, mark: FatalSignalMark, crashOn: String?, killedOn: String?) throws {
        self.store = store
        self.crashOn = crashOn.flatMap { $0.isEmpty ? nil : $0 }
        self.killedOn = killedOn.flatMap { $0.isEmpty ? nil : $0 }
        (quarantine, suspects) = try store.countDeaths(weight: mark.signal == nil ? 1 : Self.crashWeight,
                                                       limit: Self.quarantineWeight)
        mark.arm()
        if !suspects.isEmpty {
            let cause = mark.signal.map { "crashed (signal \($0))" } ?? "was killed from outside or lost power"
            Log.warning("the daemon \(cause) while handling \(suspects.count) URL(s); handling them one at a time until "
                        + "each is done")
        }
    }

    /// URLs whose deaths in a row reached `quarantineWeight`, found at start-up.
    let quarantine: [String]

    /// How many risky steps may start together now: any number, or one at a time while suspects are singled out.
    var room: Int { suspects.isEmpty ? .max : (active.isEmpty ? 1 : 0) }

    /// Whether a risky step may start now.
    var isFree: Bool { room > 0 }

    /// Runs `step` now if `isFree`, else once the running steps have ended.
    func whenFree(_ step: @escaping () -> Void) {
        if isFree { step() } else { held.append(step) }
    }

    /// `keys` enter a risky step: recorded durably, in one commit, before this returns.
    func begin(_ keys: [String]) {
        var entering: [String] = []
        for key in keys {
            active[key, default: 0] += 1
            if active[key] == 1 { entering.append(key) }
        }
        guard !entering.isEmpty else { return }
        do {
            try store.startWorking(entering)
        } catch {
            Log.error("cannot record the handling of \(entering.count) URL(s), \(entering[0]) first: \(error)")
        }
        if let crashOn, let key = entering.first(where: { $0.contains(crashOn) }) {
            Log.error("PREFETCHD_TEST_DIE_ON matched \(key): crashing the daemon (a stack overflow on a thread of its own)")
            var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
            _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
            try? startDetachedThread(named: "pf-test-crash") { _ = overflowStack(0) }
            while true { pause() }
        }
        if let killedOn, let key = entering.first(where: { $0.contains(killedOn) }) {
            Log.error("PREFETCHD_TEST_KILLED_ON matched \(key): killing the daemon")
            kill(getpid(), SIGKILL)
        }
    }

    /// `key` left a risky step unharmed; held-back steps may start.
    func end(_ key: String) {
        guard let count = active[key] else { return }
        if count > 1 {
            active[key] = count - 1
            return
        }
        active.removeValue(forKey: key)
        suspects.remove(key)
        do { try store.finishedWorking(key) } catch { Log.error("cannot record the handling of \(key): \(error)") }
        while isFree, !held.isEmpty { held.removeFirst()() }
        if isFree { onFree() }
    }
}

/// Calls itself until the stack runs out (the test hook's crash: the hardest one to mark). Not optimised, so that
/// every call takes a frame.
@_optimize(none) private func overflowStack(_ depth: Int) -> Int {
    depth < .max ? overflowStack(depth + 1) + 1 : 0
}
