import CSQLite
import Glibc
import Testing
@testable import prefetchd

/// The cache index and the files it describes, on a real directory and a real SQLite file.
@Suite struct StoreIndexTests {
    @Test("a copy fetched later than now (the wall clock stepped back since) is not fresh, however long its lifetime (with max-age=60 it stayed fresh for the whole step)")
    func copyFetchedInTheFutureIsNotFresh() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            var entry = try cache("https://example.com/a.png", at: 10_000_000, in: store)
            entry.freshUntil = 10_060_000  // max-age=60
            #expect(entry.isFresh(at: 10_030_000) && !entry.isFresh(at: 10_070_000))
            #expect(!entry.isFresh(at: 10_000_000 - 3_600_000), "an hour back: fetched in an hour, fresh for 61 minutes")
            #expect(entry.isFresh(at: 10_000_000 - 500), "within the clock's small corrections")
        }
    }

    @Test("a distrusted answer (its connection was caught with bytes nobody asked for, while a request waited on it) is stale at once, without its validators, and not to be served stale; its file stays")
    func distrustedAnswerIsStale() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let entry = try cache("https://example.com/a.png", at: 1000, in: store)
            try store.distrust(entry.key)
            try store.commit()
            let distrusted = try #require(try store.liveEntry(entry.key))
            #expect(distrusted.freshUntil == 0 && distrusted.etag == nil && distrusted.lastModified == nil)
            #expect(distrusted.mustRevalidate && !distrusted.isFresh(at: 1001))
            #expect(distrusted.file == entry.file && distrusted.sha256 == entry.sha256)
        }
    }

    @Test("a cached file reads back after a restart: its row, its file under files/ab/<sha256 of the key>, its disk usage")
    func putReadsBack() throws {
        try withCacheDirectory { directory in
            let url = "https://example.com/a.png"
            let written: IndexEntry
            do {
                let store = try Store(directory: directory)
                written = try cache(url, count: 5000, at: 1000, in: store)
                try store.commit()
            }
            let store = try Store(directory: directory)
            #expect(try store.entry(url) == written)
            let name = SHA256.hex(of: url)
            #expect(written.file == "files/\(name.prefix(2))/\(name)")
            let path = directory + "/" + written.file
            #expect(store.files.size(of: written.file) == 5000)
            #expect(store.entryCount == 1)
            #expect(store.totalBytes == allocatedOnDisk(path))
            #expect(store.totalBytes >= 5000)
            #expect(try store.entry("https://example.com/other.png") == nil)
        }
    }

    @Test("SQLite keeps no memory statistics (each allocation would take a process-wide mutex for them)")
    func noMemoryStatistics() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            try cache("https://example.com/a.png", in: store)
            try store.commit()
            #expect(sqlite3_memory_used() == 0)
        }
    }

    @Test("caching a URL again replaces its row and counts its disk usage once")
    func putReplaces() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            try cache("https://example.com/a.png", count: 5000, at: 1000, in: store)
            let again = try cache("https://example.com/a.png", count: 20_000, at: 2000, in: store)
            try store.commit()
            #expect(try store.entry(again.key) == again)
            #expect(store.entryCount == 1)
            #expect(store.totalBytes == allocatedOnDisk(store.files.absolute(again.file)))
        }
    }

    @Test("new content for a URL drops the variants made of the old content")
    func putDropsStaleVariants() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let url = "https://example.com/a.png"
            try cache(url, count: 5000, in: store)
            let thumbnail = try makeVariant(of: url, spec: "100x100", in: store)
            // The same bytes fetched again (a 200 where a 304 could have been): the variant still shows them.
            try cache(url, count: 5000, at: 2000, in: store)
            #expect(try store.variant(url, spec: "100x100") == thumbnail)
            // Different bytes: the old thumbnail must not be handed out for them.
            let changed = try cache(url, count: 7000, at: 3000, in: store)
            try store.commit()
            #expect(try store.variant(url, spec: "100x100") == nil)
            #expect(!exists(store.files.absolute(thumbnail.file)))
            #expect(store.totalBytes == allocatedOnDisk(store.files.absolute(changed.file)))
        }
    }

    @Test("removing an entry deletes its file, its variants and their disk usage")
    func removeDeletesVariants() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let kept = try cache("https://example.com/kept.png", in: store)
            let gone = try cache("https://example.com/gone.png", in: store)
            let variant = try makeVariant(of: gone.key, spec: "64x64", in: store)
            #expect(store.totalBytes == [kept.file, gone.file, variant.file].compactMap { store.files.allocated($0) }.reduce(0, +))
            #expect(try store.remove(gone.key))
            #expect(try !store.remove(gone.key))
            try store.commit()
            #expect(try store.entry(gone.key) == nil)
            #expect(try store.variant(gone.key, spec: "64x64") == nil)
            #expect(!exists(store.files.absolute(gone.file)) && !exists(store.files.absolute(variant.file)))
            #expect(store.entryCount == 1)
            #expect(store.totalBytes == store.files.allocated(kept.file))
        }
    }

    @Test("a file deleted behind the daemon's back is fetched again, not handed out")
    func liveEntryDropsMissingFile() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let entry = try cache("https://example.com/a.png", in: store)
            #expect(try store.liveEntry(entry.key) == entry)
            unlink(store.files.absolute(entry.file))
            #expect(try store.liveEntry(entry.key) == nil)
            try store.commit()
            #expect(try store.entry(entry.key) == nil)
            #expect(store.entryCount == 0 && store.totalBytes == 0)
        }
    }

    @Test("a file truncated, or replaced by a symbolic link, behind the daemon's back is fetched again, not handed out with the entry's size and sha256", arguments: ["truncated", "link"])
    func liveEntryDropsChangedFile(change: String) throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let entry = try cache("https://example.com/a.png", in: store)
            let path = store.files.absolute(entry.file)
            if change == "truncated" {
                #expect(truncate(path, 1) == 0)
            } else {
                try writeFile(directory + "/elsewhere", count: Int(entry.bytes))  // the same size, through a link
                #expect(unlink(path) == 0 && symlink(directory + "/elsewhere", path) == 0)
            }
            #expect(try store.liveEntry(entry.key) == nil)
            try store.commit()
            #expect(try store.entry(entry.key) == nil)
        }
    }

    @Test("a directory someone made at a cached file's path is removed when the file is installed (every fetch of the URL failed, also after a restart)")
    func installOverDirectory() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let relative = CacheFiles.relativePath(forName: CacheFiles.name(forKey: "https://example.com/a.png"))
            let target = store.files.absolute(relative)
            #expect(mkdir(target, 0o700) == 0 && mkdir(target + "/inner", 0o700) == 0)
            try writeFile(target + "/inner/x", count: 3)
            #expect(symlink(directory + "/outside", target + "/link") == 0)
            try writeFile(directory + "/outside", count: 5)
            try writeFile(directory + "/body", count: 10)
            try store.files.install(temporary: directory + "/body", as: relative)
            #expect(store.files.size(of: relative) == 10)
            #expect(exists(directory + "/outside"), "the link's target is not the cache's")
        }
    }

    @Test("hits are remembered across a restart: last access and hit count")
    func touchesAreWritten() throws {
        try withCacheDirectory { directory in
            let url = "https://example.com/a.png"
            do {
                let store = try Store(directory: directory)
                try cache(url, at: 1000, in: store)
                store.touch(url, now: 5000)
                #expect(try store.entry(url)?.lastAccess == 5000)
                try store.flushAccesses()
                try store.commit()
            }
            let entry = try #require(try Store(directory: directory).entry(url))
            #expect(entry.lastAccess == 5000)
            #expect(entry.hits == 1)
        }
    }

    @Test("a second daemon on the same cache directory is refused while the first runs")
    func lockRefusesSecondStore() throws {
        try withCacheDirectory { directory in
            let first = try Store(directory: directory)
            withExtendedLifetime(first) {
                _ = #expect {
                    _ = try Store(directory: directory)
                } throws: { error in
                    (error as? CacheLock.Held).map { "\($0)".contains(directory) && "\($0)".contains("pid \(getpid())") } ?? false
                }
            }
            _ = consume first
            _ = try Store(directory: directory)
        }
    }

    @Test("with the lock file deleted under the first, a second daemon is still refused (the directory is locked too)")
    func lockFileDeletedStillRefuses() throws {
        try withCacheDirectory { directory in
            let first = try Store(directory: directory)
            withExtendedLifetime(first) {
                #expect(unlink(directory + "/lock") == 0)
                _ = #expect {
                    _ = try Store(directory: directory)
                } throws: { error in
                    (error as? CacheLock.Held).map { "\($0)".contains("its lock file was deleted") } ?? false
                }
                #expect(first.removedBehindOurBack() != nil, "the first one still sees its lock file gone")
            }
            _ = consume first
            _ = try Store(directory: directory)
        }
    }
}
