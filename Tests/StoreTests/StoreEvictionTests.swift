import Testing
@testable import prefetchd

/// `max_cache_bytes`: least recently used entries go first, and the index, the files and the byte count agree after.
@Suite struct StoreEvictionTests {
    /// The disk usage of the entries of `keys` still in the index, measured on disk.
    func usage(of keys: [String], in store: Store) throws -> Int64 {
        try keys.compactMap { try store.entry($0) }.compactMap { store.files.allocated($0.file) }.reduce(0, +)
    }

    @Test("eviction to a byte cap removes the least recently used entries, their files and their bytes")
    func evictsLeastRecentlyUsed() throws {
        try withCacheDirectory { directory in
            let keys = (1...5).map { "https://example.com/\($0).png" }
            let oneEntry: Int64
            do {
                let store = try Store(directory: directory)
                for (index, key) in keys.enumerated() { try cache(key, at: Int64(1000 + index), in: store) }
                let first = try #require(try store.entry(keys[0]))
                oneEntry = try #require(store.files.allocated(first.file))
                #expect(store.totalBytes == 5 * oneEntry)
                // The oldest is looked at again (a hit not yet written): it is now the most recently used.
                store.touch(keys[0], now: 9000)
                let cap = 3 * oneEntry
                #expect(try store.evict(downTo: cap, protecting: []) == 2)
                try store.commit()
                #expect(try keys.map { try store.entry($0) != nil } == [true, false, false, true, true])
                for key in keys[1...2] {
                    #expect(!exists(store.files.absolute(CacheFiles.relativePath(forName: CacheFiles.name(forKey: key)))))
                }
                #expect(store.totalBytes == cap)
                #expect(store.totalBytes == (try usage(of: keys, in: store)))
                #expect(store.entryCount == 3)
            }
            // What a restart finds agrees: the same total, nothing for recovery to sweep.
            let store = try Store(directory: directory)
            #expect(store.totalBytes == 3 * oneEntry && store.entryCount == 3)
            #expect(try store.recover() == (0, 0, 0))
        }
    }

    @Test("eviction spares protected entries and takes the next least recently used")
    func evictionSparesProtected() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let keys = (1...4).map { "https://example.com/\($0).png" }
            for (index, key) in keys.enumerated() { try cache(key, at: Int64(1000 + index), in: store) }
            let oneEntry = store.totalBytes / 4
            #expect(try store.evict(downTo: 2 * oneEntry, protecting: [keys[0]]) == 2)
            #expect(try keys.map { try store.entry($0) != nil } == [true, false, false, true])
            // Nothing left to take but what is protected: eviction stops above the cap rather than take it.
            #expect(try store.evict(downTo: 0, protecting: [keys[0], keys[3]]) == 0)
            #expect(store.totalBytes == 2 * oneEntry)
        }
    }

    @Test("eviction reaches unprotected entries however many protected ones are older")
    func evictionPassesManyProtected() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            // A client holds the 70 paths it was handed first; newer entries came after.
            let held = (0..<70).map { "https://example.com/held/\($0).png" }
            let newer = (0..<3).map { "https://example.com/new/\($0).png" }
            for (index, key) in (held + newer).enumerated() { try cache(key, count: 100, at: Int64(1000 + index), in: store) }
            let oneEntry = store.totalBytes / 73
            #expect(try store.evict(downTo: 71 * oneEntry, protecting: Set(held)) == 2)
            #expect(try (held + newer).map { try store.entry($0) != nil } == Array(repeating: true, count: 70) + [false, false, true])
            #expect(store.totalBytes == 71 * oneEntry)
        }
    }

    @Test("evicting an entry counts the bytes of its variants too")
    func evictionCountsVariants() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let old = try cache("https://example.com/old.png", at: 1000, in: store)
            let recent = try cache("https://example.com/recent.png", at: 2000, in: store)
            let variant = try makeVariant(of: old.key, spec: "32x32", in: store)
            let recentBytes = try #require(store.files.allocated(recent.file))
            #expect(try store.evict(downTo: recentBytes, protecting: []) == 1)
            #expect(try store.entry(recent.key) != nil && store.entry(old.key) == nil)
            #expect(!exists(store.files.absolute(variant.file)))
            #expect(store.totalBytes == recentBytes)
        }
    }

    @Test("the entries cached up to a row are read in pages, in the order they came; an entry cached after it is not among them")
    func entryPagesUpToARow() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let keys = (1...5).map { "https://example.com/\($0).png" }
            #expect(try store.lastEntryRow() == 0 && store.entryKeys(after: 0, through: 0, limit: 2) == nil)
            for key in keys { try cache(key, in: store) }
            let last = try store.lastEntryRow()
            try cache("https://example.com/later.png", in: store)
            var seen: [String] = [], after: Int64 = 0
            while let page = try store.entryKeys(after: after, through: last, limit: 2) {
                #expect(page.keys.count <= 2)
                seen += page.keys
                after = page.last
            }
            #expect(seen == keys)
        }
    }
}
