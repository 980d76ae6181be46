// libFuzzer target for the daemon's request path: line framing (LineBuffer), the JSON request decoder (the same
// `JSONDecoder().decode(Request.self, …)` as Daemon.handle) and the URL canonicaliser (CanonicalURL).
//
// Built by stress/build_fuzz.sh with `swiftc -sanitize=fuzzer -parse-as-library` against QueueCore and
// PrefetchProtocol (built the same way). Invariants checked besides "no crash": a canonical key parses again to
// itself (idempotence), and a line the framer hands out is never longer than its limit.
import FoundationEssentials
import PrefetchProtocol
import QueueCore

private let decoder = JSONDecoder()

@inline(never)
private func canonicalise(_ text: String) {
    guard let url = try? CanonicalURL(text) else { return }
    guard let again = try? CanonicalURL(url.key) else {
        fatalError("canonical key does not parse again: \(url.key.debugDescription) from \(text.debugDescription)")
    }
    if again.key != url.key {
        fatalError("canonicalisation is not idempotent: \(text.debugDescription) -> \(url.key.debugDescription) -> \(again.key.debugDescription)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func test(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    // The whole input as a URL.
    canonicalise(String(decoding: bytes, as: UTF8.self))
    // The input as a stream of request lines, with a small limit so that tooLong is reached too.
    var lines = LineBuffer(limit: 4096)
    lines.append(bytes)
    while let line = lines.next() {
        guard case .line(let content) = line else { break }
        if content.count > lines.limit { fatalError("LineBuffer returned a line over its limit") }
        guard let request = try? decoder.decode(Request.self, from: Data(content)) else { continue }
        if let url = request.url { canonicalise(url) }
        for url in request.urls ?? [] { canonicalise(url) }
        _ = Operation(rawValue: request.op)
    }
    return 0
}
