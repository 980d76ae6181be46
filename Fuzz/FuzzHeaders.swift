// libFuzzer target for the response-header interpretation (Sources/prefetchd/Fetch/ResponseHeaders.swift): header
// lines as a server sends them (Cache-Control, Age, Date, Expires, Last-Modified, Retry-After, Content-Length,
// Content-Range, Content-Encoding, Vary), then what the daemon computes from them: freshness, Retry-After, the check
// of a 206 against the offset asked for, and the framing check.
//
// Built by stress/build_fuzz.sh with `swiftc -sanitize=fuzzer` from ResponseHeaders.swift and this file as one module,
// against QueueCore and libcurl (for curl_getdate). Input: 16 bytes that pick the clock and the resume offset, then
// the header lines. Invariants besides "no trap": every number that comes out is within its documented bounds.
import QueueCore

private let defaultTTLs: [Int64] = [0, 86_400_000, 31_536_000_000]  // none, the default, the most configurable

@inline(never)
private func require(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func test(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    var prefix: (clock: UInt64, offset: UInt64) = (0, 0)
    withUnsafeMutableBytes(of: &prefix) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.prefix(16))) }
    let now = Int64(prefix.clock & (1 << 50 - 1))  // any wall clock up to the year 37,000
    let offset = Int64(prefix.offset >> 2)  // bytes already held by a resume: 0...2^62
    let lines = bytes.dropFirst(16)

    // Raw bytes, as curl hands them over: not necessarily UTF-8, the line's newline included.
    var headers = ResponseHeaders()
    for line in lines.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
        (Array(line) + [UInt8(ascii: "\n")]).withUnsafeBufferPointer { headers.take(bytes: $0) }
    }
    let span = ResponseHeaders.maximumSpan
    require(headers.byteCount >= 0 && headers.byteCount <= lines.count + 1, "byteCount \(headers.byteCount)")
    require(headers.age.map { (0...ResponseHeaders.maximumDeltaSeconds).contains($0) } ?? true, "Age \(headers.age!)")
    require(headers.maxAge.map { (0...ResponseHeaders.maximumDeltaSeconds).contains($0) } ?? true, "max-age \(headers.maxAge!)")
    require((headers.contentLength ?? 0) >= 0, "Content-Length \(headers.contentLength!)")
    for ttl in defaultTTLs {
        let freshUntil = headers.freshUntil(now: now, defaultTTL: ttl)
        require(freshUntil >= now && freshUntil - now <= span, "freshUntil \(freshUntil) at \(now)")
        if headers.noStore { require(freshUntil == now, "a Vary: * or no-store response is fresh") }
    }
    if let retryAfter = headers.retryAfterMilliseconds(now: now) {
        require((0...span).contains(retryAfter), "Retry-After \(retryAfter) ms")
    }
    if let text = headers.contentRange, let range = ContentRange(text) {
        require(range.first <= range.last && range.last < (range.complete ?? .max), "Content-Range \(range)")
    }
    // As Transfer.write does at the start of a 206 body.
    switch headers.partialBody(requestedFrom: offset) {
    case .rest(let length):
        let range = ContentRange(headers.contentRange!)!
        require(offset > 0 && range.first == offset && length >= 1, "rest of \(length) bytes from \(offset)")
        _ = offset.saturatingAdd(length)
    case .whole(let length):
        require(length >= 1 && ContentRange(headers.contentRange!)!.first == 0, "whole file of \(length) bytes")
    case .mismatch(let reason):
        require(!reason.isEmpty, "a mismatch without a reason")
    }
    _ = headers.framingProblem
    _ = headers.isEncoded
    _ = headers.mustRevalidate
    return 0
}
