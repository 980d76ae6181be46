import Glibc
import QueueCore
import Testing
@testable import prefetchd

/// Start-up after a crash, an index written by an older version, and an index that is not a database.
@Suite struct StoreRecoveryTests {
    @Test("a directory holding someone else's files and no index is refused and left as it was (the sweep deleted ~/tmp/* and files/**); one prefetchd made before its index is not")
    func foreignDirectoryRefused() throws {
        try withCacheDirectory { directory in
            let theirs = ["tmp/important.txt", "files/notes/x.txt"]
            for made in ["tmp", "files", "files/notes"] { mkdir(directory + "/" + made, 0o700) }
            for file in theirs { try writeFile(directory + "/" + file, count: 10) }
            #expect(throws: DaemonError.self) { try Store(directory: directory) }
            for file in theirs { #expect(exists(directory + "/" + file), "\(file)") }
            #expect(!exists(directory + "/" + CacheFiles.indexName))
            unlink(directory + "/tmp/important.txt")
            #expect(throws: DaemonError.self) { try Store(directory: directory) }  // files/notes
            unlink(directory + "/files/notes/x.txt")
            rmdir(directory + "/files/notes")
            // What a first start that stopped before its index leaves: its directories and a download's body.
            mkdir(directory + "/files/ab", 0o750)
            try writeFile(directory + "/tmp/" + CacheFiles.name(forKey: "https://example.com/a.png"), count: 10)
            let store = try Store(directory: directory)
            #expect(try store.recover().temporaries == 1)
        }
    }

    @Test("a tmp/ or files/ that is a symbolic link is refused and what it points to is left alone (the sweep deleted the files of the directory it pointed to)", arguments: ["tmp", "files"])
    func linkedDirectoryRefused(name: String) throws {
        try withCacheDirectory { directory in
            let elsewhere = directory + "/elsewhere"
            mkdir(elsewhere, 0o700)
            try writeFile(elsewhere + "/notes.txt", count: 10)
            _ = try Store(directory: directory + "/cache")  // made, then closed
            let linked = directory + "/cache/" + name
            #expect(rename(linked, linked + ".moved") == 0 && symlink(elsewhere, linked) == 0)
            let error = #expect(throws: DaemonError.self) { try Store(directory: directory + "/cache") }
            #expect(error.map { "\($0)" }?.contains("is not a directory of the cache's own") == true)
            #expect(exists(elsewhere + "/notes.txt"))
        }
    }

    @Test("an index, log or shared-memory file that is a directory or a FIFO is named as such (it said only SQLite's \"unable to open database file\" or \"disk I/O error\")",
          arguments: ["", "-wal", "-shm"])
    func indexFileThatIsNoFile(suffix: String) throws {
        try withCacheDirectory { directory in
            do {
                let store = try Store(directory: directory + "/cache")
                #expect(try store.enqueue(key: "https://example.com/a.png", now: 0))
                try store.commit()
            }
            let path = directory + "/cache/" + CacheFiles.indexName + suffix
            unlink(path)
            #expect(mkdir(path, 0o700) == 0)
            let error = #expect(throws: DaemonError.self) { try Store(directory: directory + "/cache") }
            let index = directory + "/cache/" + CacheFiles.indexName
            #expect(error.map { "\($0)" } == "cannot open the index \(index): \(path) is a directory, which SQLite cannot use: "
                    + "move it away, or choose another --cache-dir")
            #expect(rmdir(path) == 0 && mkfifo(path, 0o600) == 0)
            let fifo = #expect(throws: DaemonError.self) { try Store(directory: directory + "/cache") }
            #expect(fifo.map { "\($0)" }?.contains("\(path) is not a regular file") == true)
            unlink(path)
            if suffix == "" { return }
            #expect(try Store(directory: directory + "/cache").backlogCount == 1, "the queue is whole once the file is moved away")
        }
    }

    @Test("after a clean stop the start does not compare every row with its file (100,000 entries took 3.5 s); the mark is in the index, so a start after a crash, after an undone turn or with an index made anew sweeps")
    func cleanStopSkipsTheSweep() throws {
        try withCacheDirectory { directory in
            let orphan = directory + "/files/aa/" + String(repeating: "a", count: 64)
            do {
                let store = try Store(directory: directory)
                _ = try cache("https://example.com/a.png", in: store)
                try store.markStoppedCleanly()
                try store.commit()
            }
            try writeFile(orphan, count: 10)  // no row names it
            do {
                let store = try Store(directory: directory)
                #expect(store.stoppedCleanly)
                #expect(try store.recover() == (0, 0, 0), "not swept")
            }
            do {  // the start before ended without a clean stop
                let store = try Store(directory: directory)
                #expect(!store.stoppedCleanly)
                #expect(try store.recover() == (0, 0, 1))
                #expect(try store.enqueue(key: "https://example.com/queued", now: 1))
                store.rollback()
                try store.markStoppedCleanly()
                try store.commit()
            }
            do {
                let store = try Store(directory: directory)
                #expect(!store.stoppedCleanly, "a turn was undone before that stop")
                _ = try store.recover()
                try store.markStoppedCleanly()
                try store.commit()
            }
            for suffix in ["", "-wal", "-shm"] { unlink(directory + "/" + CacheFiles.indexName + suffix) }
            let store = try Store(directory: directory)
            #expect(!store.stoppedCleanly, "an index made anew")
            #expect(try store.recover().orphans == 1, "the file of the lost index's row")
        }
    }

    @Test("after a crash the sweep runs in slices while the daemon serves (100,000 entries held the start for 1.6 s warm, 3.5 s cold): what this run moves into place meanwhile (a body before its row, a variant's temporary) is no orphan, a crash's leftover temporary of the same variant is, and no clean stop is marked before the sweep ends")
    func sweepInSlices() throws {
        try withCacheDirectory { directory in
            var entries: [IndexEntry] = []
            do {
                let store = try Store(directory: directory)
                for index in 0..<20 { entries.append(try cache("https://example.com/\(index).png", in: store)) }
                _ = try makeVariant(of: entries[0].key, spec: "10x10", in: store)
                try store.commit()
            }  // and no clean stop
            let missing = entries.removeLast()
            unlink(directory + "/" + missing.file)
            let orphans = (0..<5).map { "files/0\($0)/" + String(repeating: "\($0)", count: 64) }
            for orphan in orphans { try writeFile(directory + "/" + orphan, count: 10) }
            let body = CacheFiles.relativePath(forName: CacheFiles.name(forKey: "https://example.com/new.png", body: "b"))
            let variantName = CacheFiles.name(forKey: entries[1].key + "#20x20")
            let variant = CacheFiles.relativePath(forName: variantName)
            let encoding = "files/" + variantName.prefix(2) + "/." + variantName + ".Ab12Cd"
            let leftover = "files/" + variantName.prefix(2) + "/." + variantName + ".Zz98Yx"
            do {
                let store = try Store(directory: directory)
                #expect(try store.beginRecovery() == 0)
                #expect(store.sweeping)
                #expect(try store.sweepStep(limit: 3) == nil)
                // Between two slices: a body moved into place whose row comes at the end of its turn, and a variant
                // being encoded beside where it goes.
                let temporary = store.files.downloadPath(forName: "new")
                try writeFile(temporary, count: 10)
                try store.files.install(temporary: temporary, as: body)
                store.files.willPlace(store.files.absolute(variant))
                store.files.placed.note(directory + "/" + encoding)
                try writeFile(directory + "/" + encoding, count: 10)
                // A crash's leftover temporary of that same variant is not this run's.
                try writeFile(directory + "/" + leftover, count: 10)
                try store.markStoppedCleanly()  // a stop now: the sweep is not done
                var slices = 1
                var swept: (badRows: Int, orphans: Int)?
                while swept == nil {
                    swept = try store.sweepStep(limit: 3)
                    slices += 1
                }
                #expect(swept.map { $0 == (1, 6) } == true, "\(String(describing: swept))")
                #expect(slices > 10, "in slices of 3")
                #expect(!store.sweeping)
                for orphan in orphans { #expect(!exists(directory + "/" + orphan), "\(orphan)") }
                #expect(exists(directory + "/" + body) && exists(directory + "/" + encoding))
                #expect(!exists(directory + "/" + leftover))
                #expect(try store.entry(missing.key) == nil)
                for entry in entries { #expect(try store.liveEntry(entry.key) == entry) }
                #expect(store.entryCount == 19)
                try store.commit()
            }
            do {
                let store = try Store(directory: directory)
                #expect(!store.stoppedCleanly, "stopped before the sweep ended")
                _ = try store.recover()
                try store.markStoppedCleanly()
                try store.commit()
            }
            let store = try Store(directory: directory)
            #expect(store.stoppedCleanly)
            #expect(try store.beginRecovery() == 0)
            #expect(!store.sweeping)
        }
    }

    @Test("a directory of 5,000 files no row names is swept a slice at a time (one of 200,000 files held the loop for 576 ms in one step)")
    func hugeDirectoryInSlices() throws {
        try withCacheDirectory { directory in
            do { _ = try Store(directory: directory) }  // made, and no clean stop
            for index in 0..<5000 { try writeFile(directory + "/files/00/junk\(index)") }
            let store = try Store(directory: directory)
            #expect(try store.beginRecovery() == 0)
            var slices = 0
            var swept: (badRows: Int, orphans: Int)?
            while swept == nil {
                swept = try store.sweepStep(limit: 16)
                slices += 1
            }
            #expect(swept.map { $0 == (0, 5000) } == true, "\(String(describing: swept))")
            #expect(slices > 5000 / 16, "\(slices) slices")
            #expect(names(in: directory + "/files/00").isEmpty)
        }
    }

    @Test("after a clean stop the index is not read through at open (0.85 s for 100,000 entries from a cold disk): damage where the start counts is set aside there, damage elsewhere shows when it is read, and then no clean stop is marked, so the next start reads it through and sets it aside")
    func cleanStopSkipsTheCheck() throws {
        func damage(_ table: String, in directory: String) throws { try damageLeaf(of: table, in: directory) }
        func stopCleanly(_ fill: (Store) throws -> Void, in directory: String) throws {
            let store = try Store(directory: directory)
            _ = try store.recover()
            try fill(store)
            try store.markStoppedCleanly()
            try store.commit()
        }
        let set = { (directory: String) in names(in: directory).filter { $0.hasPrefix("index.sqlite.corrupt-") }.count }
        try withCacheDirectory { directory in
            let keys = (0..<300).map { "https://example.com/\($0).png" }
            try stopCleanly({ store in
                for key in keys { try cache(key, count: 10, in: store) }
            }, in: directory)
            try damage("sqlite_autoindex_entries_1", in: directory)  // the keys' index: no count reads it
            do {
                let store = try Store(directory: directory)
                #expect(store.stoppedCleanly && set(directory) == 0, "not read through")
                #expect(store.entryCount == 300)
                #expect(keys.contains { (try? store.entry($0)) == nil }, "a lookup found the damage")
                try store.markStoppedCleanly()
                try store.commit()
            }
            let store = try Store(directory: directory)
            #expect(!store.stoppedCleanly, "damage was seen before that stop")
            #expect(set(directory) == 1 && store.entryCount == 0, "read through and set aside")
        }
        try withCacheDirectory { directory in
            try stopCleanly({ store in
                for index in 0..<300 { try cache("https://example.com/\(index).png", count: 10, in: store) }
            }, in: directory)
            try damage("entries", in: directory)
            let store = try Store(directory: directory)
            #expect(set(directory) == 1 && store.entryCount == 0, "the counts found it")
        }
    }

    @Test("a damaged index keeps what of its queue can be read (every acknowledged URL was lost with it): damage elsewhere loses none, a damaged page in the middle of the queue only the rows on it, in their order")
    func damagedIndexKeepsItsQueue() throws {
        let queued = (0..<3000).map { "https://example.com/queued/\($0).png" }
        for table in ["entries", "queue"] {
            try withCacheDirectory { directory in
                do {
                    let store = try Store(directory: directory)
                    for (index, key) in queued.enumerated() { #expect(try store.enqueue(key: key, now: Int64(index))) }
                    for index in 0..<300 { try cache("https://example.com/cached/\(index).png", count: 10, in: store) }
                    try store.commit()
                }
                try damageLeaf(of: table, in: directory, middle: true)
                let store = try Store(directory: directory)
                #expect(names(in: directory).contains { $0.hasPrefix("index.sqlite.corrupt-") }, "\(table)")
                #expect(store.entryCount == 0)
                let kept = try store.backlog(after: 0, limit: 10_000).map(\.key)
                #expect(store.backlogCount == Int64(kept.count))
                if table == "entries" {
                    #expect(kept == queued)
                } else {
                    #expect(kept.count >= queued.count - 150 && kept.count < queued.count, "\(kept.count) kept")
                    #expect(kept.first == queued.first && kept.last == queued.last, "both ends")
                    #expect(kept == queued.filter(Set(kept).contains), "in their order")
                }
                #expect(try store.enqueue(key: "https://example.com/after.png", now: 5000))
                #expect(try store.backlog(after: 0, limit: 10_000).last?.key == "https://example.com/after.png")
            }
        }
    }

    /// A store in `directory` with a queue of 5,000 URLs, numbered `spacing` apart (URLs fetched between them), closed.
    private func queue5000(in directory: String, spacing: Int = 1) throws -> [String] {
        let queued = (0..<5000).map { "https://example.com/queued/\($0).png" }
        do {
            let store = try Store(directory: directory)
            for (index, key) in queued.enumerated() { #expect(try store.enqueue(key: key, now: Int64(index))) }
            try store.commit()
        }
        if spacing > 1 {
            try Database(path: directory + "/index.sqlite")
                .execute("UPDATE queue SET seq = -seq; UPDATE queue SET seq = -seq * \(spacing);")
        }
        return queued
    }

    /// The damaged index in `directory` kept every one of `queued` but the `lost` on damaged pages, and (`inOrder`, no
    /// row's number changed) in their order.
    private func expectKept(_ queued: [String], but lost: Int, inOrder: Bool = true, in directory: String) throws {
        let kept = try Store(directory: directory).backlog(after: 0, limit: 10_000).map(\.key)
        #expect(kept.count == queued.count - lost, "\(kept.count) kept, \(lost) rows on the damaged pages")
        let ordered = kept == queued.filter(Set(kept).contains)
        #expect(!inOrder || ordered, "in their order")
    }

    @Test("each damaged page of a damaged index's queue costs the rows on it, however many there are and wherever they lie, also when the rows are numbered far apart (read from both ends, three damaged pages in the middle cost every row between the first and the last: 2,885 of 5,000 URLs in the adversary's file; rows 2,000 apart made the start creep on by one number a read for over ten minutes)",
          .timeLimit(.minutes(1)),
          arguments: [([0.25, 0.5, 0.75], 1), ([0, 0.3, 0.6, 1], 1), ([0.1, 0.12, 0.14, 0.9], 1), ([0.4, 0.41], 1),
                      ([0.3, 0.6], 2000)])
    func damagedPagesCostTheirRowsOnly(fractions: [Double], spacing: Int) throws {
        try withCacheDirectory { directory in
            let queued = try queue5000(in: directory, spacing: spacing)
            let lost = try damageLeaves(of: "queue", in: directory, at: fractions)
            try expectKept(queued, but: lost, in: directory)
        }
    }

    @Test("a row whose number a flipped bit made far larger, last or next to last on its page before a damaged page, does not make the salvage skip every row between (774 of 4,924 were kept)",
          arguments: [1, 2])
    func flippedRowNumberBeforeDamage(fromTheEnd: Int) throws {
        try withCacheDirectory { directory in
            let queued = try queue5000(in: directory)
            let path = directory + "/index.sqlite"
            let leaves: [(page: Int64, cells: Int64)]
            do {
                let db = try Database(path: path)
                try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                let rows = try db.statement("SELECT pageno, ncell FROM dbstat WHERE name = 'queue' AND pagetype = 'leaf' ORDER BY path")
                var found: [(Int64, Int64)] = []
                while try rows.step() { found.append((rows.int(0), rows.int(1))) }
                leaves = found
            }
            let flipped = leaves[leaves.count / 3], damaged = leaves[leaves.count / 3 + 1]
            let fd = try syscall("open", path) { open(path, O_RDWR | O_CLOEXEC) }
            defer { close(fd) }
            var page = [UInt8](repeating: 0, count: 4096)
            #expect(pread(fd, &page, 4096, off_t(flipped.page - 1) * 4096) == 4096)
            // The last cell or the one before (a table leaf's cells are in key order): its payload length, then its row
            // number, both varints; a two-byte row number becomes 16383, the largest of two bytes.
            let cell = (Int(page[3]) << 8 | Int(page[4])) - fromTheEnd
            var at = Int(page[8 + 2 * cell]) << 8 | Int(page[9 + 2 * cell])
            while page[at] & 0x80 != 0 { at += 1 }
            at += 1
            try #require(page[at] & 0x80 != 0 && page[at + 1] & 0x80 == 0, "a row number of two bytes")
            page[at] = 0xFF
            page[at + 1] = 0x7F
            #expect(pwrite(fd, page, 4096, off_t(flipped.page - 1) * 4096) == 4096)
            let junk = [UInt8](repeating: 0xA5, count: 4096)
            #expect(pwrite(fd, junk, 4096, off_t(damaged.page - 1) * 4096) == 4096)

            try expectKept(queued, but: Int(damaged.cells), inOrder: false, in: directory)  // the flipped row goes last
        }
    }

    @Test("a cache directory the daemon cannot write (read-only here) is refused naming the fix (it said only \"open …/lock: Read-only file system\")",
          .enabled(if: getuid() == 0, "a read-only bind mount needs root"))
    func unwritableDirectoryRefusedWithItsFix() throws {
        try withCacheDirectory { directory in
            _ = try Store(directory: directory)  // made, then closed: its directories are there
            #expect(mount(directory, directory, nil, UInt(MS_BIND), nil) == 0)
            defer { umount2(directory, Int32(MNT_DETACH)) }
            #expect(mount(nil, directory, nil, UInt(MS_REMOUNT | MS_BIND | MS_RDONLY), nil) == 0)
            let error = #expect(throws: DaemonError.self) { try Store(directory: directory) }
            #expect(error.map { "\($0)" }?.contains("must be writable by the user prefetchd runs as (uid 0)") == true,
                    "\(String(describing: error))")
        }
    }

    @Test("a lock file replaced by a symbolic link is refused and its target left alone (the pid was written through it)")
    func linkedLockRefused() throws {
        try withCacheDirectory { directory in
            try writeFile(directory + "/victim.txt", count: 10)
            _ = try Store(directory: directory + "/cache")  // made, then closed
            #expect(unlink(directory + "/cache/lock") == 0 && symlink(directory + "/victim.txt", directory + "/cache/lock") == 0)
            let error = #expect(throws: DaemonError.self) { try Store(directory: directory + "/cache") }
            #expect(error.map { "\($0)" }?.contains("is a symbolic link") == true)
            var info = stat()
            #expect(stat(directory + "/victim.txt", &info) == 0 && info.st_size == 10)
        }
    }

    @Test("a lock that is a directory is refused with what to do (it said only: Is a directory)")
    func directoryLockRefused() throws {
        try withCacheDirectory { directory in
            _ = try Store(directory: directory + "/cache")  // made, then closed
            #expect(unlink(directory + "/cache/lock") == 0 && mkdir(directory + "/cache/lock", 0o700) == 0)
            let error = #expect(throws: DaemonError.self) { try Store(directory: directory + "/cache") }
            #expect(error.map { "\($0)" }?.contains("/cache/lock is a directory: remove it") == true,
                    "\(String(describing: error))")
        }
    }

    @Test("recovery after a torn write sweeps temporaries, rows without their file and files without a row")
    func recoverSweeps() throws {
        try withCacheDirectory { directory in
            let good: IndexEntry, missing: IndexEntry, truncated: IndexEntry
            let lostVariant: Store.Variant
            let orphan = "files/ab/" + String(repeating: "ab", count: 32)
            let stray = "files/00/core"
            do {
                let store = try Store(directory: directory)
                good = try cache("https://example.com/good.png", in: store)
                missing = try cache("https://example.com/missing.png", in: store)
                truncated = try cache("https://example.com/truncated.png", in: store)
                lostVariant = try makeVariant(of: good.key, spec: "10x10", in: store)
                try store.commit()
            }
            // What a crash mid-write leaves: a download's temporary file, a row whose file never made it (or lost
            // its end), a file whose row was never committed, and a file that is no cache file at all.
            try writeFile(directory + "/tmp/" + CacheFiles.name(forKey: "https://example.com/torn.png"), count: 10)
            unlink(directory + "/" + missing.file)
            try writeFile(directory + "/" + truncated.file, count: 10)
            unlink(directory + "/" + lostVariant.file)
            try writeFile(directory + "/" + orphan, count: 10)
            try writeFile(directory + "/" + stray, count: 10)

            do {
                let store = try Store(directory: directory)
                #expect(try store.recover() == (temporaries: 1, badRows: 3, orphans: 2))
                #expect(try store.entry(good.key) == good)
                #expect(try store.entry(missing.key) == nil && store.entry(truncated.key) == nil)
                #expect(try store.variant(good.key, spec: "10x10") == nil)
                #expect(names(in: directory + "/tmp").isEmpty)
                for file in [truncated.file, orphan, stray] { #expect(!exists(directory + "/" + file), "\(file)") }
                #expect(exists(directory + "/" + good.file))
                #expect(store.entryCount == 1)
                #expect(store.totalBytes == allocatedOnDisk(directory + "/" + good.file))
            }
            // Swept once, for good.
            let store = try Store(directory: directory)
            #expect(store.entryCount == 1 && store.totalBytes == allocatedOnDisk(directory + "/" + good.file))
            #expect(try store.recover() == (0, 0, 0))
        }
    }

    @Test("recovery deletes directories someone made under tmp/ and files/ with what they hold (only files went: tmp/junk/deep/big stayed), never what a link in them points to")
    func recoverSweepsDirectories() throws {
        try withCacheDirectory { directory in
            let elsewhere = directory + "/elsewhere"
            mkdir(elsewhere, 0o700)
            try writeFile(elsewhere + "/notes.txt", count: 10)
            _ = try Store(directory: directory + "/cache")  // made, then closed
            let cache = directory + "/cache"
            let junk = ["tmp/junk", "tmp/junk/deep", "tmp/" + String(repeating: "cd", count: 32),
                        "files/ab/cd", "files/ab/cd/junk"]
            for made in junk { #expect(mkdir(cache + "/" + made, 0o700) == 0, "\(made)") }
            try writeFile(cache + "/tmp/junk/deep/big", count: 100_000)
            try writeFile(cache + "/files/ab/cd/junk/x", count: 10)
            #expect(symlink(elsewhere, cache + "/tmp/link") == 0 && symlink(elsewhere, cache + "/files/ab/cd/link") == 0)

            let store = try Store(directory: cache)
            #expect(try store.recover() == (temporaries: 3, badRows: 0, orphans: 2))
            #expect(names(in: cache + "/tmp").isEmpty)
            #expect(names(in: cache + "/files/ab/cd").isEmpty)
            #expect(exists(elsewhere + "/notes.txt"))
        }
    }

    @Test("entries whose names are not UTF-8 under tmp/ and files/ are deleted, directories with what they hold (they were kept for good: the path a String makes of such a name names nothing), and the directories the sweep emptied go")
    func namesThatAreNotUTF8() throws {
        try withCacheDirectory { directory in
            _ = try Store(directory: directory)  // made, then closed without a clean stop
            for made in ["files/ab/cd", "files/ab/junk", "files/junk", "files/junk/deeper"] {
                #expect(mkdir(directory + "/" + made, 0o700) == 0)
            }
            try writeFile(directory + "/files/junk/deeper/x", count: 10)
            let odd: [UInt8] = [0x6A, 0xFF, 0xFE, 0x80]  // "j" and bytes no UTF-8 has
            let files = ["tmp/", "files/", "files/ab/", "files/ab/cd/"].map { rawPath(directory + "/" + $0, odd) }
            for file in files { #expect(createFile(file)) }
            let oddDirectory = rawPath(directory + "/files/00/", odd)
            #expect(mkdir(oddDirectory, 0o700) == 0)
            #expect(createFile(rawPath(directory + "/files/00/", odd + [UInt8(ascii: "/")] + odd)))

            let store = try Store(directory: directory)
            #expect(try store.recover() == (temporaries: 1, badRows: 0, orphans: 5))
            for file in files + [oddDirectory] { #expect(access(file, F_OK) != 0, "\(String(cString: file))") }
            #expect(names(in: directory + "/tmp").isEmpty)
            #expect(names(in: directory + "/files/00").isEmpty && names(in: directory + "/files/ab").isEmpty)
            #expect(names(in: directory + "/files").count == 256, "files/junk went, and the emptied files/ab/cd")
        }
    }

    @Test("a file or a symbolic link where one of the 256 directories should be is replaced by the directory, at start and when a body is moved into place (every body whose name began as its did failed for good), never touching what the link points to")
    func fanOutDirectoryReplaced() throws {
        try withCacheDirectory { directory in
            let elsewhere = directory + "/elsewhere"
            mkdir(elsewhere, 0o700)
            let cache = directory + "/cache"
            _ = try Store(directory: cache)
            #expect(rmdir(cache + "/files/ee") == 0 && symlink(elsewhere, cache + "/files/ee") == 0)
            #expect(rmdir(cache + "/files/ef") == 0)
            try writeFile(cache + "/files/ef", count: 10)
            let store = try Store(directory: cache)
            for shard in ["ee", "ef"] { #expect(isDirectory(cache + "/files/" + shard), "\(shard)") }
            // Put back behind the running daemon's back.
            #expect(rmdir(cache + "/files/ef") == 0)
            try writeFile(cache + "/files/ef", count: 10)
            let temporary = store.files.downloadPath(forName: "body")
            try writeFile(temporary, count: 100)
            let relative = "files/ef/" + String(repeating: "ef", count: 32)
            try store.files.install(temporary: temporary, as: relative)
            #expect(contents(of: cache + "/" + relative)?.count == 100)
            #expect(names(in: elsewhere).isEmpty)
        }
    }

    /// Overwrites a leaf page of `table` in the index (the first, or one in the middle) with junk, after the log is
    /// folded in.
    private func damageLeaf(of table: String, in directory: String, middle: Bool = false) throws {
        _ = try damageLeaves(of: table, in: directory, at: [middle ? 0.5 : 0])
    }

    /// Overwrites with junk the leaf pages of `table` at `fractions` of its leaves (in page order, 1 for the last);
    /// returns how many rows they held.
    private func damageLeaves(of table: String, in directory: String, at fractions: [Double]) throws -> Int {
        let path = directory + "/index.sqlite"
        let db = try Database(path: path)
        try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let leaves = try db.integer("SELECT count(*) FROM dbstat WHERE name = '\(table)' AND pagetype = 'leaf'")
        let fd = try syscall("open", path) { open(path, O_WRONLY | O_CLOEXEC) }
        defer { close(fd) }
        var pages: Set<Int64> = [], rows = 0
        for fraction in fractions {
            let offset = min(Int(Double(leaves) * fraction), Int(leaves) - 1)
            let page = try db.integer("""
                SELECT pageno FROM dbstat WHERE name = '\(table)' AND pagetype = 'leaf' ORDER BY pageno
                LIMIT 1 OFFSET \(offset)
                """)
            #expect(page > 1)
            if pages.insert(page).inserted { rows += Int(try db.integer("SELECT ncell FROM dbstat WHERE pageno = \(page)")) }
        }
        let junk = [UInt8](repeating: 0xA5, count: 4096)
        for page in pages { #expect(pwrite(fd, junk, junk.count, off_t(page - 1) * 4096) == junk.count) }
        return rows
    }

    /// The index as version 1 of the daemon wrote it (`user_version` 1).
    static let versionOneSchema = """
        CREATE TABLE entries(
            key TEXT PRIMARY KEY, url TEXT NOT NULL, file TEXT NOT NULL UNIQUE, bytes INTEGER NOT NULL,
            sha256 TEXT NOT NULL, content_type TEXT, format TEXT, width INTEGER, height INTEGER,
            etag TEXT, last_modified TEXT, fresh_until INTEGER NOT NULL, fetched_at INTEGER NOT NULL,
            last_access INTEGER NOT NULL, hits INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX entries_lru ON entries(last_access);
        CREATE TABLE queue(seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, url TEXT NOT NULL,
            queued_at INTEGER NOT NULL);
        CREATE TABLE failures(key TEXT PRIMARY KEY, code TEXT NOT NULL, message TEXT NOT NULL, status INTEGER,
            until INTEGER NOT NULL);
        PRAGMA user_version = 1;
        """

    @Test("a cache written by the first version opens with its entries, backlog and failures, migrated to the current schema")
    func migratesVersionOne() throws {
        try withCacheDirectory { directory in
            let url = "https://example.com/old.png"
            let name = CacheFiles.name(forKey: url)
            // That version kept files two levels down: files/ab/cd/<name>.
            let file = "files/\(name.prefix(2))/\(name.dropFirst(2).prefix(2))/\(name)"
            try makeDirectories(directory + "/" + file.prefix(upTo: file.lastIndex(of: "/")!), mode: 0o750)
            try writeFile(directory + "/" + file, count: 6000)
            let sha256 = try #require(SHA256.hex(ofFile: directory + "/" + file))
            do {
                let old = try Database(path: directory + "/index.sqlite")
                try old.execute(Self.versionOneSchema)
                try old.execute("""
                    INSERT INTO entries VALUES ('\(url)', '\(url)', '\(file)', 6000, '\(sha256)', 'image/png', 'png',
                        40, 30, '"e1"', NULL, 9000, 1000, 2000, 3);
                    INSERT INTO queue(key, url, queued_at) VALUES ('https://example.com/later', 'https://example.com/later', 5);
                    INSERT INTO failures VALUES ('https://example.com/404', 'http_status', 'HTTP 404', 404, 99000);
                    """)
            }
            do {
                let store = try Store(directory: directory)
                let entry = try #require(try store.entry(url))
                #expect(entry == IndexEntry(key: url, url: url, file: file, bytes: 6000, sha256: sha256,
                                            contentType: "image/png", format: "png", width: 40, height: 30,
                                            etag: "\"e1\"", lastModified: nil, freshUntil: 9000, fetchedAt: 1000,
                                            lastAccess: 2000, hits: 3, mustRevalidate: false, noStore: false))
                #expect(store.entryCount == 1 && store.backlogCount == 1)
                #expect(try store.backlog(after: 0, limit: 10).map(\.key) == ["https://example.com/later"])
                #expect(try store.failures(now: 0).map(\.failure)
                        == [Failure(code: .httpStatus, message: "HTTP 404", isTransient: false, httpStatus: 404)])
                // That version did not record disk usage: recovery measures it, and finds the file where it is.
                #expect(try store.recover() == (0, 0, 0))
                #expect(exists(directory + "/" + file), "its directory is not taken for one the sweep emptied")
                #expect(store.totalBytes == allocatedOnDisk(directory + "/" + file))
                #expect(try store.entry(url) != nil)
                #expect(try store.enqueue(key: "https://example.com/next", now: 6))
                #expect(try store.backlog(after: 0, limit: 10).map(\.key) == ["https://example.com/later", "https://example.com/next"])
            }
            let check = try Database(path: directory + "/index.sqlite")
            let version = try check.statement("PRAGMA user_version")
            #expect(try version.step())
            #expect(version.int(0) == Int64(Store.migrations.count))
        }
    }

    @Test("an index written by a newer version is refused with an error naming it, and left as it is")
    func refusesNewerIndex() throws {
        try withCacheDirectory { directory in
            do {
                let store = try Store(directory: directory)
                try cache("https://example.com/a.png", in: store)
                try store.commit()
            }
            let newer = Store.migrations.count + 1
            try Database(path: directory + "/index.sqlite").execute("PRAGMA user_version = \(newer)")
            #expect {
                _ = try Store(directory: directory)
            } throws: { error in
                "\(error)".contains("written by a newer prefetchd (schema \(newer)")
            }
            #expect(!names(in: directory).contains { $0.hasPrefix("index.sqlite.corrupt-") }, "not set aside")
            let check = try Database(path: directory + "/index.sqlite")
            let version = try check.statement("PRAGMA user_version")
            #expect(try version.step())
            #expect(version.int(0) == Int64(newer))
            let rows = try check.statement("SELECT count(*) FROM entries")
            #expect(try rows.step())
            #expect(rows.int(0) == 1, "its rows are kept")
        }
    }

    @Test("an index file that is not SQLite is set aside, and the cache starts empty")
    func setsAsideNonDatabase() throws {
        try withCacheDirectory { directory in
            let garbage = String(repeating: "this is not an SQLite database\n", count: 200)
            let earlier: IndexEntry
            do {
                let store = try Store(directory: directory)
                earlier = try cache("https://example.com/a.png", in: store)
                try store.commit()
            }
            try writeFile(directory + "/index.sqlite", text: garbage)
            unlink(directory + "/index.sqlite-wal")
            let store = try Store(directory: directory)
            #expect(store.entryCount == 0 && store.totalBytes == 0)
            let aside = try #require(names(in: directory).first { $0.hasPrefix("index.sqlite.corrupt-") })
            #expect(contents(of: directory + "/" + aside) == Array(garbage.utf8))
            // The file the lost index named is no longer known: recovery sweeps it, and the new index works.
            #expect(try store.recover() == (0, 0, 1))
            #expect(!exists(directory + "/" + earlier.file))
            let again = try cache("https://example.com/a.png", in: store)
            try store.commit()
            #expect(try store.entry(again.key) == again)
        }
    }

    @Test("a damaged SQLite index is set aside, not trusted")
    func setsAsideDamagedDatabase() throws {
        try withCacheDirectory { directory in
            do {
                let store = try Store(directory: directory)
                for index in 0..<200 { try cache("https://example.com/\(index).png", count: 10, in: store) }
                try store.commit()
            }
            // Everything in index.sqlite itself; then the header (first page) kept, the pages after it overwritten.
            let path = directory + "/index.sqlite"
            try Database(path: path).execute("PRAGMA wal_checkpoint(TRUNCATE)")
            let fd = try syscall("open", path) { open(path, O_WRONLY | O_CLOEXEC) }
            let junk = [UInt8](repeating: 0xA5, count: 16 * 1024)
            let written = pwrite(fd, junk, junk.count, 4096)
            close(fd)
            #expect(written == junk.count)
            let store = try Store(directory: directory)
            #expect(store.entryCount == 0)
            #expect(names(in: directory).contains { $0.hasPrefix("index.sqlite.corrupt-") })
            #expect(try store.recover().orphans == 200)
        }
    }

    @Test("an index missing a table of its schema (dropped by hand, or another program's file) is set aside, and the cache starts empty (the start failed on every try)",
          arguments: ["DROP TABLE queue", "DROP TABLE entries; CREATE TABLE entries(key TEXT)", "FOREIGN",
                      "DROP TABLE queue; CREATE VIEW queue AS SELECT 1 AS seq, 'k' AS key, 0 AS queued_at"])
    func setsAsideWrongSchema(damage: String) throws {
        try withCacheDirectory { directory in
            let path = directory + "/index.sqlite"
            if damage == "FOREIGN" {
                // Another program's database, at schema 3 by its own count, with none of our tables.
                try Database(path: path).execute("CREATE TABLE notes(text TEXT); PRAGMA user_version = 3;")
            } else {
                do {
                    let store = try Store(directory: directory)
                    try cache("https://example.com/a.png", in: store)
                    try store.commit()
                }
                try Database(path: path).execute(damage)
            }
            let store = try Store(directory: directory)
            #expect(store.entryCount == 0 && store.backlogCount == 0)
            #expect(names(in: directory).contains { $0.hasPrefix("index.sqlite.corrupt-") })
            let again = try cache("https://example.com/b.png", in: store)
            try store.commit()
            #expect(try store.entry(again.key) == again)
        }
    }

    @Test("an index whose write-ahead log or shared memory cannot be opened is an error naming the index (it said only: sqlite exec: unable to open database file, or attempt to write a readonly database)",
          arguments: ["-wal", "-shm"])
    func unopenableLogNamesIndex(file: String) throws {
        try withCacheDirectory { directory in
            do { _ = try Store(directory: directory) }
            let path = directory + "/index.sqlite"
            #expect(mkdir(path + file, 0o700) == 0)
            #expect {
                _ = try Store(directory: directory)
            } throws: { error in
                "\(error)".hasPrefix("cannot open the index \(path): ")
            }
            #expect(!names(in: directory).contains { $0.hasPrefix("index.sqlite.corrupt-") }, "not set aside")
        }
    }

    @Test("a closed Store leaves a self-contained index: the write-ahead log is folded in and removed")
    func closeCheckpoints() throws {
        try withCacheDirectory { directory in
            let entry: IndexEntry
            do {
                let store = try Store(directory: directory)
                entry = try cache("https://example.com/a.png", in: store)
                try store.commit()
                #expect(exists(directory + "/index.sqlite-wal"))
            }
            #expect(!exists(directory + "/index.sqlite-wal"))
            #expect(try Store(directory: directory).entry(entry.key) == entry)
        }
    }

    @Test("an index that cannot be opened is an error naming it, not a crash")
    func unopenableIndexThrows() throws {
        try withCacheDirectory { directory in
            let path = directory + "/index.sqlite"
            #expect(mkdir(path, 0o700) == 0)
            #expect {
                _ = try Store(directory: directory)
            } throws: { error in
                "\(error)".hasPrefix("cannot open the index \(path): \(path) is a directory")
            }
            // Nothing was set aside or changed: the directory is still there, and the lock is free again.
            #expect(names(in: directory).filter { $0.hasPrefix("index.sqlite") } == ["index.sqlite"])
            rmdir(path)
            _ = try Store(directory: directory)
        }
    }
}
