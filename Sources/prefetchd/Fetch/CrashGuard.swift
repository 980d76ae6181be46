import Glibc

/// Keeps one poisonous response from killing the daemon for good.
///
/// The risky steps of handling a URL — interpreting its response, inspecting the body, making a variant — are
/// recorded durably before they run (`begin`) and cleared after (`end`). A start-up that finds records counts a
/// death for each of those URLs: they become suspects. Until every suspect has been handled once without incident,
/// risky steps run one at a time (`whenFree`), so that another death names exactly one URL; a URL with two deaths in a
/// row is returned by `init` for quarantine.
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
    /// A test hook (`PREFETCHD_TEST_DIE_ON`): the daemon kills itself when a URL containing it begins a risky step.
    private let dieOn: String?

    /// Counts the deaths found at start-up; `quarantine` lists the URLs that died twice in a row.
    init(store: Store, dieOn: String?) throws {
        self.store = store
        self.dieOn = dieOn.flatMap { $0.isEmpty ? nil : $0 }
        (quarantine, suspects) = try store.countDeaths(limit: 2)
        if !suspects.isEmpty {
            Log.warning("the daemon died while handling \(suspects.count) URL(s); handling them one at a time until each is done")
        }
    }

    /// URLs that died twice in a row, found at start-up.
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
        if let dieOn, let key = entering.first(where: { $0.contains(dieOn) }) {
            Log.error("PREFETCHD_TEST_DIE_ON matched \(key): killing the daemon")
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
