import Foundation
import Testing
@testable import prefetchd

/// The SHA-256 that names cache files and checks downloads (OpenSSL's since GLib's was 5 times slower).
struct SHA256Tests {
    @Test("the standard vectors, and the same digest however the bytes are split")
    func vectors() {
        #expect(SHA256.hex(of: "") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(of: "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256.hex(of: "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let whole = SHA256()
        bytes.withUnsafeBytes { whole.update($0) }
        let pieces = SHA256()
        var offset = 0
        for size in [0, 1, 63, 64, 65, 4096, 100_000] + Array(repeating: 50_000, count: 5) where offset < bytes.count {
            let end = min(bytes.count, offset + size)
            bytes.withUnsafeBytes { pieces.update(UnsafeRawBufferPointer(rebasing: $0[offset..<end])) }
            offset = end
        }
        bytes.withUnsafeBytes { pieces.update(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
        let digest = whole.hex()
        #expect(digest == pieces.hex() && digest.count == 64)
        let path = NSTemporaryDirectory() + "sha256-\(getpid())"
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        defer { unlink(path) }
        #expect(SHA256.hex(ofFile: path) == digest)
        #expect(SHA256.hex(ofFile: path + ".missing") == nil)
    }

    @Test("a fetched body's digest, as its checks read it: from the first 256 KiB read once, then on from there")
    func imageFileDigest() throws {
        let path = NSTemporaryDirectory() + "sha256-body-\(getpid())"
        defer { unlink(path) }
        for count in [0, 1_000, ImageHeader.prefixLength, ImageHeader.prefixLength + 1, 700_000] {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ count) }
            _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
            let file = try ImageFile(path)
            #expect(file.prefix.count == min(count, ImageHeader.prefixLength))
            #expect(try file.sha256() == SHA256.hex(ofFile: path), "\(count) bytes")
        }
    }
}
