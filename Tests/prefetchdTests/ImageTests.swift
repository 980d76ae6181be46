import Foundation
import Testing

/// Images through the whole daemon: inspection on arrival, variants made on the workers.
@Suite(.serialized)
struct ImageTests {
    /// One origin serving the images of Fixtures/make_images.sh, shared by the suite.
    final class Images: @unchecked Sendable {
        let root: TemporaryDirectory
        let origin: Origin

        init() throws {
            root = try TemporaryDirectory()
            let made = run("/bin/sh", [Paths.fixtures + "/make_images.sh", root.path])
            guard made.status == 0 else { throw HarnessError("cannot make the test images: \(made.stderr)") }
            origin = try Origin(root: root.path)
        }
    }

    static let images = try! Images()
    var origin: Origin { Self.images.origin }

    func entry(_ result: CommandResult) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
                     "\(result.stdout) \(result.stderr)")
    }

    @Test("every allowed format is fetched and described", arguments: [
        ("/photo.jpg", "jpeg", 4000, 3000), ("/small.png", "png", 100, 100), ("/halves.gif", "gif", 48, 32),
        ("/halves.webp", "webp", 48, 32), ("/halves.avif", "avif", 48, 32),
    ])
    func allowedFormats(path: String, format: String, width: Int, height: Int) throws {
        let daemon = try DaemonUnderTest()
        let object = try entry(daemon.ctl("get", "--json", origin.url(path)))
        #expect(object["format"] as? String == format)
        #expect(object["width"] as? Int == width && object["height"] as? Int == height, "\(object)")
    }

    @Test("broken and hostile bodies get their error codes; nothing is kept; the daemon keeps serving", arguments: [
        ("/truncated.jpg", "not_an_image"), ("/huge.png", "pixel_limit"), ("/page.jpg?html=1", "not_an_image"),
        ("/vector.svg", "format_not_allowed"), ("/empty.jpg", "not_an_image"), ("/scans.jpg", "not_an_image"),
        ("/grid-bomb.avif", "pixel_limit"), ("/tile-swarm.avif", "pixel_limit"), ("/small-tiles.avif", "not_an_image"),
    ])
    func rejected(path: String, code: String) throws {
        let daemon = try DaemonUnderTest()
        let result = daemon.ctl("get", "--json", origin.url(path))
        #expect(result.status == 1)
        #expect(errorCode(result.stdout) == code, "\(path): \(result.stdout)")
        #expect(directoryBytes(daemon.cache + "/files") == 0, "a rejected body is not kept")
        #expect(daemon.ctl("get", origin.url("/small.png")).status == 0)
        let again = daemon.ctl("get", "--json", origin.url(path))
        #expect(errorCode(again.stdout) == code, "the rejection is remembered")
    }

    @Test("a reload narrowing allowed_formats: a cached original of another format is still served, but no new variant of it is decoded")
    func noVariantOfAFormatNoLongerAllowed() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("allowed_formats = jpeg,png\n", to: config)
        let daemon = try DaemonUnderTest(["--config", config])
        let url = origin.url("/photo.jpg")
        #expect(daemon.ctl("get", "--size", "64x64", url).status == 0)
        try write("allowed_formats = png\n", to: config)
        kill(daemon.child!.pid, SIGHUP)
        for _ in 0..<200 where !daemon.log.contains("allowed_formats") { usleep(25_000) }
        #expect(daemon.log.contains("allowed_formats"), "\(daemon.log)")
        #expect(daemon.ctl("get", url).status == 0, "the original is served")
        #expect(daemon.ctl("get", "--size", "64x64", url).status == 0, "the variant made before is served")
        let refused = daemon.ctl("get", "--json", "--size", "32x32", url)
        #expect(errorCode(refused.stdout) == "format_not_allowed", "\(refused.stdout) \(refused.stderr)")
    }

    @Test("an animated WebP of 100 one-pixel frames on a 1000x1000 canvas is kept; a variant of it is pixel_limit at once (it decoded 100 canvases)")
    func animatedWebPVariant() throws {
        let daemon = try DaemonUnderTest()
        let url = origin.url("/frames.webp")
        let original = try entry(daemon.ctl("get", "--json", url))
        #expect(original["format"] as? String == "webp" && original["width"] as? Int == 1000, "\(original)")
        let pid = try #require(daemon.child?.process.processIdentifier)
        let variant = daemon.ctl("get", "--json", "--size", "100x100", url)
        #expect(errorCode(variant.stdout) == "pixel_limit" && variant.stdout.contains("100 frames of 1000x1000"),
                "\(variant.stdout)")
        let peak = try Self.peakMemory(pid)
        #expect(peak < 150 << 20, "peak \(peak >> 20) MB")
        #expect(daemon.ctl("get", "--size", "32x32", origin.url("/small.png")).status == 0, "the daemon keeps serving")
    }

    /// A picture an origin serves (fresh for a second) that the test may change, and a daemon: the directory (kept
    /// while the test holds it), the picture's file, the origin, the daemon and the picture's URL.
    func changingPicture(size: String, _ picture: String) throws
        -> (TemporaryDirectory, String, Origin, DaemonUnderTest, String) {
        let root = try TemporaryDirectory()
        let path = root.path + "/changing.png"
        #expect(writePicture(path, size: size, picture))
        let origin = try Origin(root: root.path)
        return (root, path, origin, try DaemonUnderTest(), origin.url("/changing.png?cc=max-age=1"))
    }

    @Test("a variant of a new body gets a new path, and the old variant's file is deleted, not written over (the path was the key's and the spec's only: a client holding it got the new picture)")
    func variantPathFollowsTheBody() throws {
        let (root, path, origin, daemon, url) = try changingPicture(size: "300x200", "xc:teal")
        defer { withExtendedLifetime(root) {} }
        let first = try entry(daemon.ctl("get", "--json", "--size", "64x64", url))
        let firstPath = try #require(first["path"] as? String)
        Thread.sleep(forTimeInterval: 1.2)  // stale now: a plain get fetches it again
        #expect(writePicture(path, size: "200x300", "xc:gold"))
        #expect(try entry(daemon.ctl("get", "--json", url))["width"] as? Int == 200, "the new body is fetched")
        let second = try entry(daemon.ctl("get", "--json", "--size", "64x64", url))
        #expect(second["path"] as? String != firstPath && second["height"] as? Int == 64, "\(second)")
        #expect(!FileManager.default.fileExists(atPath: firstPath), "the old variant's file is deleted")
    }

    @Test("a variant decoded from the old body while a new body came is made again from the new one (one of the old was kept and served)")
    func variantOfReplacedOriginal() throws {
        let (root, path, origin, daemon, url) = try changingPicture(size: "6000x6000", "gradient:navy-gold")
        defer { withExtendedLifetime(root) {} }
        #expect(daemon.ctl("get", url).status == 0)
        Thread.sleep(forTimeInterval: 1.2)  // stale now: a plain get fetches it again
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        connection.send(#"{"id":1,"op":"get","url":"\#(url)","offline":true,"size":"64x64"}"# + "\n")
        Thread.sleep(forTimeInterval: 0.2)  // 36 megapixels are being decoded
        #expect(writePicture(path, size: "400x100", "xc:teal"))
        #expect(try entry(daemon.ctl("get", "--json", url))["width"] as? Int == 400, "the new body is fetched")
        let reply = try #require(connection.receive())
        let variant = try #require(reply["result"] as? [String: Any], "\(reply)")
        #expect(variant["width"] as? Int == 64 && variant["height"] as? Int == 16, "\(reply)")
        #expect(try origin.count("/changing.png") == 2)
    }

    @Test("a get --size from a client that half-closes after sending it still gets its variant, then the end of the stream")
    func variantAfterHalfClose() throws {
        let daemon = try DaemonUnderTest()
        for (id, size) in [(1, "64x64"), (2, "32x32")] {  // the original to fetch first, then already cached
            let connection = try RawConnection(socket: daemon.socket)
            _ = connection.receive()  // the greeting
            connection.send("{\"id\":\(id),\"op\":\"get\",\"url\":\"\(origin.url("/photo.jpg"))\",\"size\":\"\(size)\"}\n")
            connection.finishSending()
            let reply = connection.receive()
            #expect(reply?["id"] as? Int == id && reply?["ok"] as? Bool == true, "\(String(describing: reply))")
            #expect((reply?["result"] as? [String: Any])?["variant"] as? String != nil, "\(String(describing: reply))")
            #expect(connection.receive() == nil, "then the end of the stream")
        }
    }

    @Test("--size 256x256 of a 4000x3000 JPEG: contain 256x192, cover 256x256; EXIF rotation applied; no upscaling")
    func variants() throws {
        let daemon = try DaemonUnderTest()
        let fetchesBefore = try origin.count("/photo.jpg")
        func variant(_ path: String, _ options: String...) throws -> [String: Any] {
            try entry(daemon.ctl(arguments: ["get", "--json", origin.url(path), "--size", "256x256"] + options))
        }
        let contain = try variant("/photo.jpg")
        #expect(contain["width"] as? Int == 256 && contain["height"] as? Int == 192, "\(contain)")
        #expect(contain["variant"] as? String != nil)
        let cover = try variant("/photo.jpg", "--fit", "cover")
        #expect(cover["width"] as? Int == 256 && cover["height"] as? Int == 256, "\(cover)")
        let rotated = try variant("/rotated.jpg")
        #expect(rotated["width"] as? Int == 48 && rotated["height"] as? Int == 64, "upright: \(rotated)")
        let small = try variant("/small.png")
        #expect(small["width"] as? Int == 100 && small["height"] as? Int == 100, "not upscaled: \(small)")
        let upscaled = try variant("/small.png", "--upscale")
        #expect(upscaled["width"] as? Int == 256, "\(upscaled)")
        let path = try #require(cover["path"] as? String)
        let identify = run("/usr/bin/identify", ["-format", "%m %w %h", path])
        #expect(identify.stdout == "JPEG 256 256", "the file is what the answer says")
        #expect(try origin.count("/photo.jpg") == fetchesBefore + 1, "variants are made from the cached original")
    }

    @Test("50 concurrent gets of one variant: one fetch and one decode")
    func variantsCoalesce() throws {
        let daemon = try DaemonUnderTest()
        let fetchesBefore = try origin.count("/photo.jpg")
        let url = origin.url("/photo.jpg?delay=0.5")
        nonisolated(unsafe) var results = [CommandResult?](repeating: nil, count: 50)
        DispatchQueue.concurrentPerform(iterations: 50) { index in
            results[index] = daemon.ctl("get", url, "--size", "128x128")
        }
        #expect(results.allSatisfy { $0?.status == 0 })
        #expect(Set(results.map { $0?.stdout }).count == 1)
        #expect(try origin.count("/photo.jpg") == fetchesBefore + 1)
        let metrics = daemon.ctl("metrics").lines
        #expect(metrics.contains("prefetchd_variant_decodes_total 1"), "\(metrics.filter { $0.contains("variant") })")
    }

    @Test("two full-size variants of a 40-megapixel JPEG asked at once are made one after the other: peak memory as for one")
    func largeDecodesTakeTurns() throws {
        let daemon = try DaemonUnderTest()
        let url = origin.url("/forty.jpg")
        #expect(daemon.ctl("get", url).status == 0)
        let pid = try #require(daemon.child?.process.processIdentifier)
        let base = try Self.peakMemory(pid)
        // Each job scales: its decoded and output pictures are near 40 Mpx each, 3 bytes a pixel.
        #expect(daemon.ctl("get", url, "--size", "7997x4997", "--fit", "fill").status == 0)
        let one = try Self.peakMemory(pid) - base
        #expect(one > 200 << 20, "one job raised the peak by \(one >> 20) MB")

        nonisolated(unsafe) var results = [CommandResult?](repeating: nil, count: 2)
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            results[index] = daemon.ctl("get", url, "--size", index == 0 ? "7999x4999" : "7998x4998", "--fit", "fill")
        }
        #expect(results.allSatisfy { $0?.status == 0 }, "\(results.map { $0?.stderr ?? "" })")
        let two = try Self.peakMemory(pid) - base
        #expect(two < one * 3 / 2, "two jobs at once raised the peak by \(two >> 20) MB, one alone by \(one >> 20) MB")
    }

    @Test("a thumbnail asked after three full-size variants of a 40-megapixel JPEG passes them (it waited for all three)")
    func thumbnailPassesLargeDecodes() throws {
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/forty.jpg"), origin.url("/small.png")).status == 0)
        let thumbnail = "{\"id\":\"thumb\",\"op\":\"get\",\"url\":\"\(origin.url("/small.png"))\",\"size\":\"32x32\"}\n"
        let order = try replyOrder(behindVariants: 3, size: { "799\($0)x4990" }, then: thumbnail, on: daemon)
        #expect(order.count == 4 && order.first == "thumb", "\(order)")
    }

    @Test("a thumbnail of an animated WebP asked behind three full-size variants of a 40-megapixel JPEG waits its turn: its 40 frames of 1000x1000 count, each on a canvas of its own (it passed them as a 1-megapixel job, and ran beside one: 342 MB)")
    func animatedWebPCountsItsFrames() throws {
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/forty.jpg"), origin.url("/forty-frames.webp")).status == 0)
        let thumbnail = "{\"id\":\"animation\",\"op\":\"get\",\"url\":\"\(origin.url("/forty-frames.webp"))\",\"size\":\"32x32\"}\n"
        let order = try replyOrder(behindVariants: 3, size: { "799\($0)x4990" }, then: thumbnail, on: daemon)
        #expect(order.count == 4 && order.last == "animation", "\(order)")
    }

    @Test("clients take turns for large variants: one asked while another client's four full-size variants of a 40-megapixel JPEG wait is made after that client's next, not after all four (adv41: twenty large upscales held another client's variant 24 s)")
    func variantsTakeTurnsAcrossClients() throws {
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/forty.jpg")).status == 0)
        let first = try RawConnection(socket: daemon.socket), second = try RawConnection(socket: daemon.socket)
        _ = first.receive()
        _ = second.receive()
        // Each needs about 40 Mpx decoded: one runs at a time under max_pixels.
        first.send((1...4).map { Self.filledVariant("large\($0)", origin.url("/forty.jpg"), size: "799\($0)x4990") }.joined())
        #expect(first.receive()?["id"] as? String == "large1")  // the second runs by now, the other two wait
        second.send(Self.filledVariant("other", origin.url("/forty.jpg"), size: "7995x4990"))
        #expect(second.receive()?["ok"] as? Bool == true)
        // What the first client got before the other's variant was made: a ping's answer comes behind it.
        first.send("{\"id\":\"ping\",\"op\":\"ping\"}\n")
        var before: [String] = []
        while let reply = first.receive(), let id = reply["id"] as? String, id != "ping" { before.append(id) }
        #expect(before == ["large2"], "the first client's variants made before the other's: large1 and \(before)")
    }

    @Test("a new fetch asked behind four variants of a 40-megapixel JPEG is answered first: its body is checked on threads of its own")
    func fetchPassesVariantsBeingMade() throws {
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/forty.jpg")).status == 0)
        // Each decodes the original at half size (10 Mpx): all four fit the pixel budget, two run on the workers.
        let fetch = "{\"id\":\"fetch\",\"op\":\"get\",\"url\":\"\(origin.url("/not-cached-yet.jpg"))\"}\n"
        let order = try replyOrder(behindVariants: 4, size: { "200\($0)x1250" }, then: fetch, on: daemon)
        #expect(order.count == 5 && order.first == "fetch", "\(order)")
    }

    @Test("SIGTERM answers the gets waiting for variants with shutting_down, as every waiting get")
    func shutdownAnswersVariantWaits() throws {
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/forty.jpg")).status == 0)
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        // Full-size variants of a 40 Mpx original take turns, a second or more each: at least two still wait.
        for id in 1...3 { connection.send(Self.filledVariant("large\(id)", origin.url("/forty.jpg"), size: "799\(id)x4990")) }
        usleep(300_000)
        daemon.child?.stop(SIGTERM)
        var codes: [String: String] = [:]
        while let reply = connection.receive() {
            codes["\(reply["id"] ?? "nil")"] = (reply["error"] as? [String: Any])?["code"] as? String ?? "ok"
        }
        #expect(Set(codes.keys) == ["large1", "large2", "large3"], "every request answered: \(codes)")
        #expect(codes.values.filter { $0 == "shutting_down" }.count >= 2, "\(codes)")
    }

    /// A request line: `get` of the `size` variant of `url`, stretched to it (`fill`).
    static func filledVariant(_ id: String, _ url: String, size: String) -> String {
        "{\"id\":\"\(id)\",\"op\":\"get\",\"url\":\"\(url)\",\"size\":\"\(size)\",\"fit\":\"fill\"}\n"
    }

    /// The ids of the replies, in the order they came, to `count` filled variants of the cached /forty.jpg (ids
    /// `large1`..., sizes from `size`) and then `last`, all sent at once on one connection.
    func replyOrder(behindVariants count: Int, size: (Int) -> String, then last: String, on daemon: DaemonUnderTest)
        throws -> [String] {
        let variants = (1...count).map { Self.filledVariant("large\($0)", origin.url("/forty.jpg"), size: size($0)) }
        return try Self.replyOrder(of: variants.joined() + last, count: count + 1, on: daemon)
    }

    /// Sends request `lines` on one connection and returns the ids of the first `count` replies, in the order they
    /// came; each must be ok.
    static func replyOrder(of lines: String, count: Int, on daemon: DaemonUnderTest) throws -> [String] {
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        connection.send(lines)
        var order: [String] = []
        for _ in 0..<count {
            guard let reply = connection.receive() else { break }
            #expect(reply["ok"] as? Bool == true, "\(reply)")
            order.append("\(reply["id"] ?? "nil")")
        }
        return order
    }

    /// The most memory (bytes) process `pid` held so far: VmHWM.
    static func peakMemory(_ pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])) << 10
    }

    @Test("while a 40-megapixel image is resized, 100 cache hits are all answered first (the loop never waits)")
    func resizeDoesNotBlockTheLoop() throws {
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/forty.jpg"), origin.url("/small.png")).status == 0)
        var lines = "{\"id\":\"resize\",\"op\":\"get\",\"url\":\"\(origin.url("/forty.jpg"))\",\"size\":\"4000x3000\",\"fit\":\"fill\"}\n"
        for id in 1...100 { lines += "{\"id\":\(id),\"op\":\"get\",\"url\":\"\(origin.url("/small.png"))\"}\n" }
        let order = try Self.replyOrder(of: lines, count: 101, on: daemon)
        #expect(order.count == 101)
        #expect(order.last == "resize", "the resize answered after every hit: \(order.firstIndex(of: "resize") ?? -1)")
    }
}
