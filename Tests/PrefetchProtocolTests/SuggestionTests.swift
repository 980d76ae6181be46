import Testing
@testable import PrefetchProtocol

@Suite("Did you mean")
struct SuggestionTests {
    let verbs = ["get", "queue", "demote", "promote", "cancel", "evict", "info", "status", "list", "formats", "metrics",
                 "watch", "view", "ping"]

    @Test("a swap, a missing, an extra or a wrong character finds the name meant")
    func nearNames() {
        #expect(suggestion(for: "gte", among: verbs) == "get")
        #expect(suggestion(for: "lst", among: verbs) == "list")
        #expect(suggestion(for: "pnig", among: verbs) == "ping")
        #expect(suggestion(for: "queu", among: verbs) == "queue")
        #expect(suggestion(for: "statuss", among: verbs) == "status")
        #expect(suggestion(for: "--tiemout", among: ["--timeout", "--json"]) == "--timeout")
        #expect(suggestion(for: "fast_widht", among: ["fast_width", "slow_width"]) == "fast_width")
    }

    @Test("nothing for a word too far from every name, too short to judge, or as near to two names")
    func noGuess() {
        #expect(suggestion(for: "fetch", among: verbs) == nil)
        #expect(suggestion(for: "x", among: verbs) == nil)
        #expect(suggestion(for: "ge", among: verbs) == nil)
        #expect(suggestion(for: "", among: verbs) == nil)
        #expect(suggestion(for: "slow_width", among: ["slow_width"]) == "slow_width")
        #expect(suggestion(for: "bat", among: ["cat", "hat"]) == nil)
        #expect(didYouMean("fetch", verbs) == "")
        #expect(didYouMean("gte", verbs) == "; did you mean 'get'?")
    }
}
