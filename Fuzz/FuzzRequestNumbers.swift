// libFuzzer target for every numeric request field: `max_stale` (get), `first`, `last`, `ahead`, `behind` (view),
// `size` and `quality` (get and view with a variant), `limit` (list), `id` (echoed). A request is decoded as the
// daemon decodes it (a JSON line), or, for inputs that are not JSON, built from raw 64-bit numbers so that the ends of
// Int64 are reached at once; then the same checks and arithmetic as the daemon's run on it: Request+Numbers.swift,
// VariantSpec, Viewport.
//
// Built by stress/build_fuzz.sh with `swiftc -sanitize=fuzzer` from Sources/prefetchd/Server/Request+Numbers.swift,
// Sources/prefetchd/Images/VariantSpec.swift and this file as one module, against QueueCore and PrefetchProtocol.
// Invariants besides "no trap": what the checks let through is within the documented bounds, and a variant's spec
// parses back to itself.
import FoundationEssentials
import PrefetchProtocol
import QueueCore

private let decoder = JSONDecoder()
/// The daemon's limits (`Command.maximumViewRows`, `maximumVisibleRows`, `maximumLookAround` in Server/Command.swift).
private let maximumRows = 100_000, maximumVisible = 1_000, maximumLookAround = 1_000

@inline(never)
private func require(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

/// A request from raw numbers: the fields in order, 8 bytes each, a field absent when its byte of `present` is even.
private func rawRequest(_ bytes: UnsafeRawBufferPointer) -> Request {
    var numbers = [Int64](repeating: 0, count: 8)
    numbers.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.prefix(64))) }
    let present = bytes.count > 64 ? bytes[64] : 0xFF
    func field(_ n: Int) -> Int64? { present & (1 << n) != 0 ? numbers[n] : nil }
    func int(_ n: Int) -> Int? { field(n).map(Int.init) }
    return Request(id: .number(numbers[7]), op: .view, limit: int(0), maxStale: field(1), size: field(6).map { "\($0)x\($0 &* 3)" },
                   quality: int(2), first: int(3), last: int(4), ahead: int(5), behind: field(6).map { Int($0 >> 8) })
}

@_cdecl("LLVMFuzzerTestOneInput")
public func test(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    let request: Request
    if bytes.first == UInt8(ascii: "{") {
        guard let decoded = try? decoder.decode(Request.self, from: Data(bytes)) else { return 0 }
        request = decoded
    } else {
        request = rawRequest(bytes)
    }

    // get: max_stale, as Daemon.get compares it.
    do {
        let allowance = try request.staleAllowance()
        require(allowance.map { $0 >= 0 } ?? (request.maxStale == nil), "max_stale \(String(describing: request.maxStale))")
        let now: Int64 = 1_800_000_000_000
        for freshUntil in [Int64.min, -1, 0, now - 1, now + 1, .max] {
            _ = allowance.map { now.saturatingSubtract(freshUntil) <= $0 }
        }
    } catch {
        require((request.maxStale ?? 0) < 0, "max_stale \(request.maxStale!) refused")
    }

    // view: the visible range, then the plan it makes on a list (`limit` stands in for the list's length).
    if let range = try? request.viewRange(maximumRows: maximumRows, maximumVisible: maximumVisible,
                                          maximumLookAround: maximumLookAround) {
        require((0..<maximumRows).contains(range.first) && range.last >= range.first
                && range.last - range.first < maximumVisible, "range \(range)")
        require((0...maximumLookAround).contains(range.ahead) && (0...maximumLookAround).contains(range.behind),
                "look-around \(range)")
        var viewport = Viewport()
        let rows = min(max(request.limit ?? maximumRows, 0), maximumRows)
        _ = viewport.append(rows: rows)
        let plan = viewport.show(range)
        for row in plan.show + plan.prefetch + plan.hold {
            require((0..<rows).contains(row), "row \(row) of \(rows)")
        }
        _ = viewport.show(Viewport.Range(first: range.last, last: range.last.saturatingAdd(range.ahead), ahead: range.ahead,
                                         behind: range.behind))
        _ = viewport.close()
    }

    // get and view with a variant: size and quality.
    if let size = request.size,
       let spec = try? VariantSpec(size: size, fit: request.fit, format: request.format, quality: request.quality,
                                   upscale: request.upscale ?? false) {
        require(VariantSpec.sides.contains(spec.width) && VariantSpec.sides.contains(spec.height)
                && VariantSpec.qualities.contains(spec.quality), "variant \(spec.spec)")
        require((try? VariantSpec(spec: spec.spec)) == spec, "spec \(spec.spec) does not parse back")
    }

    // list: limit, as Command checks it (a negative one is bad_request).
    _ = [1, 2, 3].prefix(max(0, request.limit ?? 1000))
    _ = request.id?.description
    return 0
}
