import Foundation
import Glibc
import Synchronization
import Testing

/// What the daemon does with its own state when the world around it misbehaves: a second daemon, a damaged index,
/// files deleted behind its back, a response that kills it, clients that leave without reading.
@Suite(.serialized)
struct TrustTests {
    func object(_ result: CommandResult) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
                     "\(result.stdout) \(result.stderr)")
    }

    @Test("a second daemon on the same cache directory refuses to start and names the first one's pid")
    func secondDaemonRefused() throws {
        let first = try DaemonUnderTest()
        let second = run(Paths.prefetchd, ["--socket", first.directory.path + "/other.sock", "--cache-dir", first.cache])
        #expect(second.status != 0)
        #expect(second.stderr.contains("in use by another prefetchd (pid \(first.child!.process.processIdentifier))"),
                "\(second.stderr)")
        #expect(first.ctl("ping").status == 0, "the first daemon goes on")
    }

    @Test("a corrupt index is moved aside with a timestamp, both paths are logged and the daemon starts empty")
    func corruptIndexSetAside() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/a.jpg")).status == 0)
        daemon.child!.stop()
        let index = daemon.cache + "/index.sqlite"
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: index + suffix) }
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: index))
        try daemon.start()
        let aside = try FileManager.default.contentsOfDirectory(atPath: daemon.cache).filter { $0.hasPrefix("index.sqlite.corrupt-") }
        #expect(aside.count == 1)
        #expect(daemon.log.contains(index) && daemon.log.contains(aside.first ?? "?"), "\(daemon.log)")
        #expect(!daemon.log.contains("sqlite exec"), "no raw SQL error is the only message")
        let status = try object(daemon.ctl("status", "--json"))
        #expect((status["cache"] as? [String: Any])?["entries"] as? Int == 0)
        #expect(daemon.ctl("get", origin.url("/a.jpg")).status == 0, "the index works again")
    }

    @Test("after a clean stop the start reads only what it counts; damage it meets beyond (the remembered failures) makes it start again, read the index through and move it aside, and it serves")
    func damageBeyondTheCountsAfterACleanStop() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/missing.jpg?status=404")).status == 1)
        daemon.child!.stop()
        let index = daemon.cache + "/index.sqlite"
        let script = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            assert db.execute("SELECT count(*) FROM failures").fetchone()[0] == 1
            assert db.execute("SELECT count(*) FROM clean_stop").fetchone()[0] == 1
            page = db.execute("SELECT pageno FROM dbstat WHERE name = 'failures'").fetchone()[0]
            db.close()
            with open(sys.argv[1], "r+b") as f:
                f.seek((page - 1) * 4096); f.write(b"\\xa5" * 4096)
            """
        let damaged = run("/usr/bin/env", ["python3", "-c", script, index])
        try #require(damaged.status == 0, "\(damaged.stderr)")
        try daemon.start()
        #expect(daemon.log.contains("the index is damaged"), "\(daemon.log)")
        let aside = try FileManager.default.contentsOfDirectory(atPath: daemon.cache).filter { $0.hasPrefix("index.sqlite.corrupt-") }
        #expect(aside.count == 1)
        #expect(daemon.ctl("get", origin.url("/a.jpg")).status == 0, "it serves")
    }

    @Test("damage met while serving (a page of the queue, after a clean stop: the backlog failed at it every turn, for good) starts the daemon again in the same process on the same socket: the index is set aside, the queue but that page kept and drained")
    func damageMetWhileServing() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--quiet-hours", "00:00-23:59"])  // nothing drains before the damage
        let urls = (0..<3000).map { origin.url("/queued/\($0).jpg") }
        #expect(daemon.ctl("queue", "-", stdin: urls.joined(separator: "\n")).status == 0)
        daemon.child!.stop()
        let script = """
            import sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            assert db.execute("SELECT count(*) FROM clean_stop").fetchone()[0] == 1
            leaves = db.execute("SELECT pageno FROM dbstat WHERE name = 'queue' AND pagetype = 'leaf' ORDER BY pageno").fetchall()
            db.close()
            with open(sys.argv[1], "r+b") as f:
                f.seek((leaves[len(leaves) // 2][0] - 1) * 4096); f.write(b"\\xa5" * 4096)
            """
        let damaged = run("/usr/bin/env", ["python3", "-c", script, daemon.cache + "/index.sqlite"])
        try #require(damaged.status == 0, "\(damaged.stderr)")
        let before = try FileManager.default.contentsOfDirectory(atPath: daemon.cache)
        #expect(!before.contains { $0.hasPrefix("index.sqlite.corrupt-") })
        daemon.arguments = ["--slow-width", "8"]
        try daemon.start()
        let pid = try #require(daemon.child?.pid)
        // The lock is held throughout: no second daemon gets the directory while the program is executed again.
        var lockInfo = stat()
        try #require(stat(daemon.cache + "/lock", &lockInfo) == 0)
        let lockInode = UInt64(lockInfo.st_ino)
        let watching = Mutex(true), unlocked = Mutex(0)
        let watcher = Thread {
            while watching.withLock({ $0 }) {
                if !flockedInodes().contains(lockInode) { unlocked.withLock { $0 += 1 } }
                usleep(100)
            }
        }
        watcher.start()
        #expect(waitUntil(seconds: 60) { daemon.log.contains("queued URLs read from it") })
        watching.withLock { $0 = false }
        #expect(unlocked.withLock { $0 } == 0, "the cache's lock was let go while starting again")
        #expect(daemon.log.contains("was found damaged while serving"), "\(daemon.log)")
        let aside = try FileManager.default.contentsOfDirectory(atPath: daemon.cache).filter { $0.hasPrefix("index.sqlite.corrupt-") }
        #expect(aside.count == 1)
        #expect(waitUntil(seconds: 120) {
            guard let status = try? object(daemon.ctl("status", "--json")), let slow = status["slow"] as? [String: Any]
            else { return false }
            return status["backlog"] as? Int == 0 && slow["waiting"] as? Int == 0 && slow["running"] as? Int == 0
        })
        let fetched = try origin.stats().counts.filter { $0.key.hasPrefix("/queued/") }
        #expect(fetched.count >= 2900 && fetched.count < 3000, "all but the rows of one page: \(fetched.count)")
        #expect(daemon.child?.pid == pid && daemon.child?.process.isRunning == true, "the same process")
        #expect(daemon.ctl("get", origin.url("/after.jpg")).status == 0, "it serves on the same socket")
    }

    @Test("a download's file in tmp/ replaced behind the daemon's back (another file of the same size, a symbolic link out of the cache, a FIFO, a directory) is not kept: that get fails, no thread waits on the FIFO, and the next get caches the origin's bytes (the same-size file was installed and served with the origin's SHA-256; the link was moved into files/; the FIFO held a checking thread for good)",
          arguments: ["file", "link", "fifo", "directory"])
    func downloadReplacedInTmp(kind: String) throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let outside = daemon.directory.path + "/outside.jpg"
        let url = origin.url("/swapped.jpg?size=300000&drip=300000")
        let expected = daemon.ctl("get", "-o", "-", origin.url("/swapped.jpg?size=300000")).stdoutData  // the same bytes
        #expect(expected.count == 300_000)
        try Data(repeating: 0x41, count: expected.count).write(to: URL(fileURLWithPath: outside))
        let get = Mutex<CommandResult?>(nil)
        let thread = Thread { get.withLock { $0 = daemon.ctl("get", "--json", url) } }
        thread.start()
        let tmp = daemon.cache + "/tmp"
        #expect(waitUntil(seconds: 5) { ((try? FileManager.default.contentsOfDirectory(atPath: tmp)) ?? []).count == 1 })
        let path = tmp + "/" + (try FileManager.default.contentsOfDirectory(atPath: tmp)).first!
        #expect(unlink(path) == 0)
        switch kind {
        case "file": try Data(repeating: 0x41, count: expected.count).write(to: URL(fileURLWithPath: path))
        case "link": #expect(symlink(outside, path) == 0)
        case "fifo": #expect(mkfifo(path, 0o600) == 0)
        default: #expect(mkdir(path, 0o700) == 0)
        }
        #expect(waitUntil(seconds: 20) { get.withLock { $0 != nil } }, "the get is answered")
        let first = try #require(get.withLock { $0 })
        #expect(first.status == 1 && first.stdout.contains("replaced behind the daemon's back"), "\(first.stdout)")
        let again = try object(daemon.ctl("get", "--json", url))
        let file = try #require(again["path"] as? String)
        #expect(file.hasPrefix(daemon.cache + "/files/"))
        #expect(FileManager.default.contents(atPath: file) == expected)
        #expect(FileManager.default.contents(atPath: outside) == Data(repeating: 0x41, count: expected.count))
    }

    @Test("the directories under files/ replaced by files behind the daemon's back: a variant is still made (mkstemp failed: Not a directory), and a new body placed")
    func fanOutReplacedWhileServing() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let original = daemon.ctl("get", origin.url("/photo.jpg")).stdout.trimmingCharacters(in: .newlines)
        let kept = URL(fileURLWithPath: original).deletingLastPathComponent().lastPathComponent
        let files = daemon.cache + "/files"
        for shard in try FileManager.default.contentsOfDirectory(atPath: files) where shard != kept {
            #expect(rmdir(files + "/" + shard) == 0)
            try Data("junk".utf8).write(to: URL(fileURLWithPath: files + "/" + shard))
        }
        let variant = daemon.ctl("get", "--size", "16x16", origin.url("/photo.jpg"))
        #expect(variant.status == 0, "\(variant.stderr)")
        let other = daemon.ctl("get", origin.url("/other.jpg"))
        #expect(other.status == 0, "\(other.stderr)")
    }

    @Test("tmp/ or files/ replaced behind the daemon's back (by a file, or by a link out of the cache) is made again by the next get: every get failed until a restart ('Not a directory'), or the download went where the link pointed",
          arguments: ["tmp file", "tmp link", "files file", "files link"])
    func cacheDirectoryReplacedWhileServing(kind: String) throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/before.jpg")).status == 0)
        let outside = daemon.directory.path + "/outside"
        #expect(mkdir(outside, 0o700) == 0)
        let replaced = daemon.cache + (kind.hasPrefix("tmp") ? "/tmp" : "/files")
        try FileManager.default.removeItem(atPath: replaced)
        if kind.hasSuffix("link") { #expect(symlink(outside, replaced) == 0) } else { try Data("junk".utf8).write(to: URL(fileURLWithPath: replaced)) }
        let got = daemon.ctl("get", origin.url("/after.jpg"))
        #expect(got.status == 0, "\(got.stderr)")
        #expect(got.stdout.hasPrefix(daemon.cache + "/files/"))
        var info = stat()
        #expect(lstat(replaced, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR, "a directory again")
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty, "nothing went through the link")
        #expect(daemon.ctl("get", origin.url("/then.jpg")).status == 0)
    }

    @Test("a cached file deleted behind the daemon's back is fetched again instead of handing out a missing path")
    func deletedFileRefetched() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/gone.jpg")
        let path = daemon.ctl("get", url).stdout.trimmingCharacters(in: .newlines)
        try FileManager.default.removeItem(atPath: path)
        let again = try object(daemon.ctl("get", "--json", url))
        #expect(again["from_cache"] as? Bool == false)
        #expect(FileManager.default.fileExists(atPath: try #require(again["path"] as? String)))
        #expect(try origin.count("/gone.jpg") == 2)
        #expect(daemon.log.contains("is gone"))
    }

    @Test("the index deleted while the daemon runs: queue acknowledges nothing more and the daemon stops, exit 1 (acknowledged URLs were lost at the restart)")
    func indexDeleted() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for suffix in ["", "-wal", "-shm"] { unlink(daemon.cache + "/index.sqlite" + suffix) }
        let queued = daemon.ctl("queue", origin.url("/after-rm.jpg?delay=30"))
        #expect(queued.status != 0 && queued.stderr.contains("nothing was queued"), "\(queued.stderr)")
        let process = try #require(daemon.child?.process)
        #expect(waitUntil(seconds: 10) { !process.isRunning })
        #expect(!process.isRunning && process.terminationStatus == 1)
        #expect(daemon.log.contains("the index \(daemon.cache)/index.sqlite was deleted or replaced"), "\(daemon.log)")
        // The restart makes a new index; what is queued now is kept.
        try daemon.start()
        #expect(daemon.ctl("queue", origin.url("/after-restart.jpg?delay=30")).status == 0)
    }

    @Test("the index's write-ahead log deleted a while after a queue was acknowledged, then a crash before the next check: the queue is kept (the log held every write since the last checkpoint, and they were lost)")
    func writeAheadLogDeletedAfterAQuietSpell() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--quiet-hours", "00:00-23:59"])
        let urls = (0..<3).map { origin.url("/kept/\($0).jpg") }
        #expect(daemon.ctl(arguments: ["queue"] + urls).status == 0)
        Thread.sleep(forTimeInterval: 7)  // a second of quiet, and the next 5-second tick
        #expect(unlink(daemon.cache + "/index.sqlite-wal") == 0)
        #expect(daemon.ctl("ping").status == 0)
        daemon.kill9()
        try daemon.start()
        let listed = daemon.ctl("list")
        for url in urls { #expect(listed.stdout.contains(url), "\(listed.stdout)") }
    }

    @Test("the lock deleted while the daemon runs (a cleared cache directory): the daemon stops within seconds, exit 1, rather than let a second one sweep its files")
    func lockDeleted() throws {
        let daemon = try DaemonUnderTest()
        #expect(unlink(daemon.cache + "/lock") == 0)
        let process = try #require(daemon.child?.process)
        #expect(waitUntil(seconds: 15) { !process.isRunning })
        #expect(!process.isRunning && process.terminationStatus == 1)
        #expect(daemon.log.contains("the lock \(daemon.cache)/lock was deleted or replaced"), "\(daemon.log)")
    }

    @Test("a stale entry whose file was deleted is fetched in full, not 'refreshed' by a 304")
    func deletedStaleFileNotRevalidated() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/stale.jpg?cc=max-age%3D0")
        let path = daemon.ctl("get", url).stdout.trimmingCharacters(in: .newlines)
        try FileManager.default.removeItem(atPath: path)
        let again = try object(daemon.ctl("get", "--json", url))
        #expect(FileManager.default.fileExists(atPath: try #require(again["path"] as? String)))
        #expect(try origin.stats().log.filter { $0.path == "/stale.jpg" }.map(\.status) == [200, 200])
    }

    @Test("a cached file deleted while its revalidation waits for the 304 is fetched again in full, without costing an attempt, and the get succeeds (it failed with internal)")
    func fileDeletedDuringRevalidation() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-attempts", "1"])
        let url = origin.url("/vanishing.jpg?cc=max-age%3D0&delay=3")
        let path = daemon.ctl("get", url).stdout.trimmingCharacters(in: .newlines)
        nonisolated(unsafe) var again: CommandResult?
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            again = daemon.ctl("get", "--json", url)
            done.signal()
        }
        // Deleted once the revalidation is asked, while its answer waits 3 s.
        #expect(try waitUntil(seconds: 10) { try origin.count("/vanishing.jpg") == 2 })
        try FileManager.default.removeItem(atPath: path)
        done.wait()
        let result = try object(try #require(again))
        #expect(FileManager.default.fileExists(atPath: try #require(result["path"] as? String)), "\(result)")
        #expect(try origin.stats().log.filter { $0.path == "/vanishing.jpg" }.map(\.status) == [200, 304, 200])
    }

    @Test("a cache that cannot be written (tmp/ made read-only) answers get with internal at once and keeps every queued URL until it can (they were dropped after three attempts), fetching them as soon as a fetch succeeds (they waited out their backoff)")
    func unwritableCacheKeepsQueue() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let tmp = daemon.cache + "/tmp"
        try #require(getuid() == 0, "a read-only bind mount needs root")
        try #require(mount(tmp, tmp, nil, UInt(MS_BIND), nil) == 0)
        var mounted = true
        defer { if mounted { umount2(tmp, Int32(MNT_DETACH)) } }
        try #require(mount(nil, tmp, nil, UInt(MS_REMOUNT | MS_BIND | MS_RDONLY), nil) == 0)
        let urls = (0..<5).map { origin.url("/local\($0).jpg") }
        #expect(daemon.ctl(arguments: ["queue"] + urls).status == 0)
        let get = daemon.ctl("get", "--json", origin.url("/local-get.jpg"))
        #expect(errorCode(get.stdout) == "internal" && get.stdout.contains("Read-only file system"), "\(get.stdout)")
        sleep(4)  // three attempts' backoffs: 0.5 + 1 + 2 s
        let status = try object(daemon.ctl("status", "--json"))
        let delayed = status["delayed"] as? Int ?? 0, backlog = status["backlog"] as? Int ?? 0
        let slow = status["slow"] as? [String: Any] ?? [:]
        let kept = delayed + backlog + (slow["waiting"] as? Int ?? 0) + (slow["running"] as? Int ?? 0)
        #expect(kept >= urls.count, "queued URLs kept: \(status)")
        #expect(status["waiting_for_disk"] != nil, "\(status)")
        // Asked for, a waiting URL tries again at once: still failing, its get is answered at once.
        let began = Date()
        let again = daemon.ctl("get", "--json", urls[0])
        #expect(errorCode(again.stdout) == "internal" && Date().timeIntervalSince(began) < 2,
                "\(Date().timeIntervalSince(began)) s: \(again.stdout)")
        mounted = umount2(tmp, Int32(MNT_DETACH)) != 0
        #expect(!mounted)
        // One fetch that succeeds wakes what waited (it waited out its backoff, up to a minute).
        #expect(daemon.ctl("get", origin.url("/local-after.jpg")).status == 0)
        #expect(waitUntil(seconds: 5) {
            urls.allSatisfy { (try? object(daemon.ctl("info", "--json", $0)))?["cached"] != nil }
        }, "every queued URL fetched once the cache can be written")
    }

    @Test("an index cut to 0 bytes (a crash on a file system that delays allocation) is said in the log at the next start (it was silent, and the cached files were swept)")
    func emptiedIndexLogged() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", origin.url("/emptied.jpg")).status == 0)
        daemon.child?.stop()
        #expect(truncate(daemon.cache + "/index.sqlite", 0) == 0)
        try daemon.start()
        #expect(daemon.log.contains("index.sqlite is empty (0 bytes"), "\(daemon.log)")
        #expect(daemon.ctl("get", origin.url("/emptied.jpg")).status == 0, "and the cache works again")
    }

    @Test("a URL whose response crashed the daemon twice in a row is quarantined; every other queued URL is served")
    func crashLoopQuarantined() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(environment: ["PREFETCHD_TEST_DIE_ON": "poison"])
        let poison = origin.url("/poison.jpg")
        let others = (0..<5).map { origin.url("/ok\($0).jpg") }
        #expect(daemon.ctl(arguments: ["queue", poison] + others).status == 0)
        var deaths = 0
        for _ in 0..<3 {
            guard waitUntil(seconds: 5, { !daemon.child!.process.isRunning }) else { break }
            deaths += 1
            try? daemon.start()  // it may die again before it answers
        }
        #expect(deaths == 2, "the poisoned URL crashed the daemon twice (each death marked with its signal), then no more")
        let info = try object(daemon.ctl("info", "--json", poison))
        #expect((info["failure"] as? [String: Any])?["code"] as? String == "quarantined", "\(info)")
        #expect(errorCode(daemon.ctl("get", "--json", poison).stdout) == "quarantined")
        #expect(daemon.log.contains("quarantined"))
        for url in others {
            #expect(try object(daemon.ctl("get", "--json", url))["path"] != nil, "\(url)")
        }
        #expect(try origin.count("/poison.jpg") == 2, "never fetched again after the second death")
        let mark = try String(contentsOfFile: daemon.cache + "/index.sqlite-crash", encoding: .utf8)
        #expect(mark == "--\n", "cleared at the start, holding the space a mark needs (a crash on a full disk)")
    }

    @Test("a queued URL whose handling was killed from outside (SIGKILL: a person's kill -9, the OOM killer) twice in a row is fetched again: a kill is no proof; four such deaths in a row quarantine it")
    func killsFromOutsideWeighLess() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(environment: ["PREFETCHD_TEST_KILLED_ON": "unlucky"])
        let unlucky = origin.url("/unlucky.jpg")
        #expect(daemon.ctl("queue", unlucky, origin.url("/ok.jpg")).status == 0)
        var deaths = 0
        for _ in 0..<5 {
            guard waitUntil(seconds: 5, { !daemon.child!.process.isRunning }) else { break }
            deaths += 1
            try? daemon.start()
        }
        #expect(deaths == 4, "killed four times, then quarantined (on the code before: twice)")
        #expect(try origin.count("/unlucky.jpg") == 4)
        #expect(errorCode(daemon.ctl("get", "--json", unlucky).stdout) == "quarantined")
        #expect(try object(daemon.ctl("get", "--json", origin.url("/ok.jpg")))["path"] != nil)
    }

    @Test("evict of a URL whose variant is being made answers in_use and the waiting get --size gets its variant")
    func evictDuringVariant() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let url = origin.url("/v.jpg")
        #expect(daemon.ctl("get", url).status == 0)
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        connection.send("{\"id\":1,\"op\":\"get\",\"url\":\"\(url)\",\"size\":\"4x4\"}\n{\"id\":2,\"op\":\"evict\",\"urls\":[\"\(url)\"]}\n")
        var replies: [Int: [String: Any]] = [:]
        while replies.count < 2, let reply = connection.receive() { replies[reply["id"] as? Int ?? 0] = reply }
        let variant = try #require(replies[1]?["result"] as? [String: Any], "\(replies)")
        #expect(FileManager.default.fileExists(atPath: try #require(variant["path"] as? String)))
        let items = (replies[2]?["result"] as? [String: Any])?["results"] as? [[String: Any]]
        #expect(items?.first?["status"] as? String == "in_use", "\(replies)")
    }

    @Test("an upscaled variant beyond max_pixels is refused with pixel_limit instead of being made and kept")
    func upscaleBeyondPixelLimit() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let result = daemon.ctl("get", "--json", "--size", "10000x7500", "--upscale", "--fit", "fill", origin.url("/up.jpg"))
        #expect(errorCode(result.stdout) == "pixel_limit", "\(result.stdout) \(result.stderr)")
        let files = FileManager.default.enumerator(atPath: daemon.cache + "/files")?.allObjects.count ?? 0
        #expect(files > 0)
        let status = try object(daemon.ctl("status", "--json"))
        #expect(((status["cache"] as? [String: Any])?["bytes"] as? Int ?? .max) < 100_000, "no 75 MP variant is kept")
    }

    @Test("six pipelined gets under a 1 MB cache limit each name a file that exists when its reply arrives")
    func handedOutPathsSurviveEviction() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-cache-bytes", "1M"])
        let connection = try RawConnection(socket: daemon.socket)
        _ = connection.receive()
        // The client reads nothing yet: 2,000 status replies (about 2 MB) fill its socket, so the six answers stay
        // unwritten in the daemon while another client's fetches fill the cache past its limit again and again.
        var lines = String(repeating: "{\"op\":\"status\"}\n", count: 2000)
        for index in 0..<6 { lines += "{\"id\":\(index),\"op\":\"get\",\"url\":\"\(origin.url("/big\(index).jpg?size=400000"))\"}\n" }
        connection.send(lines)
        #expect(waitUntil(seconds: 20) { (0..<6).allSatisfy { (try? origin.count("/big\($0).jpg")) == 1 } }, "\(daemon.log)")
        usleep(500_000)  // their installs
        let others = (0..<6).map { origin.url("/other\($0).jpg?size=400000") }
        #expect(daemon.ctl(arguments: ["get", "-"], stdin: others.joined(separator: "\n")).status == 0)
        var paths: [Int: String] = [:]
        while paths.count < 6, let reply = connection.receive() {
            guard let id = reply["id"] as? Int else { continue }
            paths[id] = (reply["result"] as? [String: Any])?["path"] as? String
        }
        #expect(paths.count == 6)
        for (id, path) in paths.sorted(by: { $0.key < $1.key }) {
            #expect(FileManager.default.fileExists(atPath: path), "reply \(id): \(path)")
        }
    }

    @Test("sixteen concurrent get -o of 400 KB images arriving together under a 1 MB cache limit all write their file (none fails with cannot open)")
    func concurrentGetOutputs() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--max-cache-bytes", "1M"])
        let results = Mutex<[Int: (CommandResult, Int)]>([:])
        DispatchQueue.concurrentPerform(iterations: 16) { index in
            let output = daemon.directory.path + "/out\(index).jpg"
            let result = daemon.ctl("get", "-o", output, origin.url("/o\(index).jpg?size=400000&delay=0.5"))
            let size = (try? FileManager.default.attributesOfItem(atPath: output)[.size] as? Int) ?? -1
            results.withLock { $0[index] = (result, size) }
        }
        for (index, (result, size)) in results.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            #expect(result.status == 0 && size == 400_000, "\(index): \(result.stderr) \(size)")
        }
    }

    @Test("a client that sends queue and get and closes without reading still has both carried out (20 times)")
    func clientLeavingWithoutReading() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        for index in 0..<20 {
            let connection = try RawConnection(socket: daemon.socket)
            connection.send("{\"id\":1,\"op\":\"queue\",\"urls\":[\"\(origin.url("/q\(index).jpg"))\"]}\n"
                            + "{\"id\":2,\"op\":\"get\",\"url\":\"\(origin.url("/g\(index).jpg"))\"}\n")
            // Closing with the greeting unread makes the kernel reset the connection.
        }
        for index in 0..<20 {
            #expect(waitUntil(seconds: 10) { daemon.ctl("get", "--offline", origin.url("/q\(index).jpg")).status == 0 },
                    "queued URL \(index)")
            #expect(waitUntil(seconds: 10) { daemon.ctl("get", "--offline", origin.url("/g\(index).jpg")).status == 0 },
                    "got URL \(index)")
        }
    }
}

/// Descriptors are a budget: clients are admitted only while the transfers keep room for their own.
@Suite(.serialized)
struct DescriptorBudgetTests {
    @Test("with RLIMIT_NOFILE 64 and 60 clients, the extra clients are refused with a logged reason and fetches never fail for want of descriptors")
    func descriptorLimit() throws {
        let origin = try Origin()
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/ctl.sock"
        let daemon = try ChildProcess("/usr/bin/prlimit", ["--nofile=64:64", Paths.prefetchd, "--socket", socket,
                                                          "--cache-dir", directory.path + "/cache"],
                                      stderrPath: directory.path + "/daemon.log")
        defer { daemon.stop() }
        #expect(waitUntil(seconds: 5) { run(Paths.prefetchctl, ["--socket", socket, "ping"]).status == 0 })
        var admitted: [RawConnection] = [], refusals: [String] = []
        for _ in 0..<60 {
            let connection = try RawConnection(socket: socket)
            let first = connection.receive()
            if first?["hello"] != nil {
                admitted.append(connection)
            } else {
                refusals.append((first?["error"] as? [String: Any])?["code"] as? String ?? "?")
            }
        }
        #expect(!admitted.isEmpty && !refusals.isEmpty, "\(admitted.count) admitted")
        #expect(Set(refusals) == ["too_many_clients"])
        let refused = run(Paths.prefetchctl, ["--socket", socket, "status"])
        #expect(refused.status == 3 && refused.stderr.contains("too_many_clients"), "exit 3, as unreachable: \(refused)")
        admitted.removeLast()  // room for prefetchctl, once the daemon saw this one leave
        #expect(waitUntil(seconds: 5) { run(Paths.prefetchctl, ["--socket", socket, "ping"]).status == 0 })
        let urls = (0..<16).map { origin.url("/fd\($0).jpg?delay=0.2") }
        let got = run(Paths.prefetchctl, ["--socket", socket, "get"] + urls)
        #expect(got.status == 0, "\(got.stdout) \(got.stderr)")
        // One line a second, and a second later one with how many more that second refused.
        func logged() -> Int {
            let log = daemon.stderrText
            return log.components(separatedBy: "refused a connection").count - 1
                + log.matches(of: #/refused (\d+) more connections/#).compactMap { Int($0.1) }.reduce(0, +)
        }
        #expect(waitUntil(seconds: 3) { logged() == refusals.count + 1 }, "each refusal is counted in the log: \(logged())")
        let log = daemon.stderrText
        #expect(!log.contains("pausing"), "no host was paused")
    }
}

extension DescriptorBudgetTests {
    @Test("transfers that find no descriptor for their socket fail as out of descriptors here, never against the server (curl said it could not connect, and the healthy host was paused)")
    func noSocketIsNotTheServersFault() throws {
        let origin = try Origin()
        // Which of a transfer's descriptors runs out first (its body file's or its socket's) depends on how many are
        // free: limits are tried until sockets ran out too.
        var socketsRanOut = false
        for limit in stride(from: 40, through: 64, by: 3) where !socketsRanOut {
            let directory = try TemporaryDirectory()
            let socket = directory.path + "/ctl.sock"
            let daemon = try ChildProcess("/usr/bin/prlimit", ["--nofile=\(limit):\(limit)", Paths.prefetchd, "--socket", socket,
                                                              "--cache-dir", directory.path + "/cache", "--fast-width", "32"],
                                          stderrPath: directory.path + "/daemon.log")
            defer { daemon.stop() }
            #expect(waitUntil(seconds: 5) { run(Paths.prefetchctl, ["--socket", socket, "ping"]).status == 0 })
            let urls = (0..<30).map { origin.url("/nofd\(limit)-\($0).jpg?delay=1") }
            let got = run(Paths.prefetchctl, ["--socket", socket, "get"] + urls)
            let log = daemon.stderrText
            socketsRanOut = log.contains("out of file descriptors here")
            #expect(!got.stderr.contains(": network:") && !got.stderr.contains("host_paused"), "limit \(limit): \(got.stderr)")
            #expect(!log.contains("pausing"), "limit \(limit): no host was paused: \(log)")
        }
        #expect(socketsRanOut, "at some limit a transfer found no descriptor for its socket")
    }
}

/// Output buffered for clients that do not read is bounded per client and in all.
@Suite(.serialized)
struct OutputBudgetTests {
    @Test("a reply larger than output_budget is answered too_large (a list of 190 MB was cut off mid-line, the client disconnected)")
    func replyOverTheBudget() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--output-budget", "256K", "--quiet-hours", "00:00-23:59"])
        // About 650 KB listed (1,000 tasks of 1,200-byte URLs, shortened in the list): well over the budget whatever
        // the origin's port and the URLs' states.
        let name = String(repeating: "a-longer-name-of-an-image-", count: 46)
        let urls = (0..<1100).map { origin.url("/listed/\(name)\($0).jpg") }.joined(separator: "\n")
        #expect(daemon.ctl("queue", "-", stdin: urls).status == 0)
        let listed = daemon.ctl("list")
        #expect(listed.stderr.contains("too_large") && listed.stderr.contains("output_budget")
                && listed.stderr.contains("the request itself was carried out"), "\(listed.stderr)")
        #expect(daemon.ctl("list", "--limit", "10").status == 0, "a smaller one is answered")
    }

    @Test("clients that pipeline requests and never read are disconnected once all together pass output_budget; others are served")
    func nonReadingClientsShed() throws {
        let daemon = try DaemonUnderTest(["--output-budget", "2M"])
        let request = String(repeating: "{\"op\":\"formats\"}\n", count: 20_000)
        var hogs: [RawConnection] = []
        for _ in 0..<3 {
            let hog = try RawConnection(socket: daemon.socket)
            var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
            setsockopt(hog.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            hog.send(request)
            hogs.append(hog)
        }
        #expect(waitUntil(seconds: 10) { daemon.log.contains("over its share") }, "\(daemon.log)")
        #expect(daemon.ctl("ping").status == 0)
        let status = daemon.ctl("status", "--json")
        let object = try #require(JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        #expect((object["connections"] as? Int ?? 99) < 4, "at least one hog was disconnected")
    }
}

/// The inodes of the files `flock`ed now, all processes (`/proc/locks`: `1: FLOCK ADVISORY WRITE pid 08:01:inode 0 EOF`).
private func flockedInodes() -> Set<UInt64> {
    guard let text = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return [] }
    return Set(text.split(separator: "\n").compactMap { line in
        let fields = line.split(separator: " ")
        guard fields.count > 5, fields[1] == "FLOCK" else { return nil }
        return fields[5].split(separator: ":").last.flatMap { UInt64($0) }
    })
}
