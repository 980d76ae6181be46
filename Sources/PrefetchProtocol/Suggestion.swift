/// `; did you mean 'NAME'?` for a usage error about a mistyped `word`, or nothing when no name is near (`suggestion`).
public func didYouMean(_ word: String, _ names: some Sequence<String>) -> String {
    suggestion(for: word, among: names).map { "; did you mean '\($0)'?" } ?? ""
}

/// The name a mistyped `word` most likely meant: the nearest of `names` by edit distance (a swap of two neighbours
/// counts one edit), one edit away for a word of 3 to 5 characters, two for a longer one; nil for none (or a tie).
func suggestion(for word: String, among names: some Sequence<String>) -> String? {
    let typed = Array(word.unicodeScalars)
    guard typed.count >= 3 else { return nil }
    let limit = typed.count <= 5 ? 1 : 2
    var best: (name: String, distance: Int)?
    var tied = false
    for name in names {
        let candidate = Array(name.unicodeScalars)
        guard abs(candidate.count - typed.count) <= limit else { continue }
        let distance = editDistance(typed, candidate)
        guard distance <= limit else { continue }
        if let current = best, distance >= current.distance {
            if distance == current.distance, name != current.name { tied = true }
            continue
        }
        best = (name, distance)
        tied = false
    }
    return tied ? nil : best?.name
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of adjacent characters.
private func editDistance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar]) -> Int {
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var before = [Int](repeating: 0, count: b.count + 1)
    var previous = Array(0...b.count)
    var current = [Int](repeating: 0, count: b.count + 1)
    for i in 1...a.count {
        current[0] = i
        for j in 1...b.count {
            let cost = a[i - 1] == b[j - 1] ? 0 : 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                current[j] = min(current[j], before[j - 2] + 1)
            }
        }
        (before, previous, current) = (previous, current, before)
    }
    return previous[b.count]
}
