import Glibc
import Testing
@testable import prefetchd

/// The index on a disk that bodies filled: `SpaceReserve` keeps it openable and writable.
@Suite struct StoreFullDiskTests {
    /// Runs `body` with the cache directory `cache` on a tmpfs of its own of `megabytes` (root mounts it), unmounted
    /// afterwards, also when `body` throws.
    func withSmallDisk(megabytes: Int, _ body: (_ disk: String, _ cache: String) throws -> Void) throws {
        try #require(getuid() == 0, "mounting a tmpfs needs root")
        try withCacheDirectory { directory in
            guard mount("tmpfs", directory, "tmpfs", 0, "size=\(megabytes)m,mode=0700") == 0 else {
                throw SystemError(call: "mount", errno: errno, detail: directory)
            }
            defer { umount2(directory, Int32(MNT_DETACH)) }
            try body(directory, directory + "/cache")
        }
    }

    /// Writes `path` until the disk is full.
    func fill(_ path: String) throws {
        let fd = try syscall("open", path) { open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600) }
        defer { close(fd) }
        let chunk = [UInt8](repeating: 1, count: 1 << 16)
        while write(fd, chunk, chunk.count) > 0 {}
    }

    func freeBytes(_ path: String) -> UInt {
        var disk = statvfs()
        return statvfs(path, &disk) == 0 ? disk.f_bavail * disk.f_frsize : 0
    }

    @Test("after a clean stop, an index whose disk then filled up opens and takes writes: its reserve makes the room")
    func opensOnFullDisk() throws {
        try withSmallDisk(megabytes: 4) { disk, cache in
            let reserve = cache + "/index.sqlite-reserve"
            do {
                let store = try Store(directory: cache)
                #expect(try store.enqueue(key: "https://example.com/a", now: 1))
                try store.commit()
                #expect(exists(reserve), "taken at the first commit")
            }
            try fill(disk + "/ballast")
            #expect(freeBytes(disk) < 64 * 1024)

            let store = try Store(directory: cache)
            #expect(!exists(reserve), "given up to open the index")
            #expect(try store.enqueue(key: "https://example.com/b", now: 2))
            try store.commit()
            #expect(store.backlogCount == 2)
            #expect(!exists(reserve), "not taken again while the disk is full")
        }
    }

    @Test("a write that fails on a full disk gives the reserve up, and the same writes then commit")
    func commitOnFullDisk() throws {
        try withSmallDisk(megabytes: 4) { disk, cache in
            let reserve = cache + "/index.sqlite-reserve"
            let store = try Store(directory: cache)
            #expect(try store.enqueue(key: "https://example.com/first", now: 1))
            try store.commit()
            #expect(exists(reserve))
            try fill(disk + "/ballast")
            // A turn of rows enough to grow the index's log beyond what it has (50 keys of 2 KB): a statement or the
            // commit fails, and the turn is undone, as the daemon does.
            let keys = (0..<50).map { "https://example.com/" + String(repeating: "k", count: 2000) + "/\($0)" }
            func queueAll() throws {
                for (n, key) in keys.enumerated() { #expect(try store.enqueue(key: key, now: Int64(n))) }
                try store.commit()
            }
            let failure = #expect(throws: DatabaseError.self) { try queueAll() }
            #expect(failure?.isDiskFull == true)
            store.rollback()
            #expect(!exists(reserve), "given up")
            #expect(store.backlogCount == 1, "the failed turn was undone")
            try queueAll()
            #expect(store.backlogCount == 51)
        }
    }

    @Test("the reserve is taken again once the disk has twice its size free")
    func retakenWhenSpaceIsBack() throws {
        try withSmallDisk(megabytes: 4) { disk, cache in
            let reserve = cache + "/index.sqlite-reserve"
            do { _ = try Store(directory: cache) }
            try fill(disk + "/ballast")
            do {
                let store = try Store(directory: cache)
                #expect(try store.enqueue(key: "https://example.com/a", now: 1))
                try store.commit()
                #expect(!exists(reserve))
            }
            unlink(disk + "/ballast")
            let store = try Store(directory: cache)
            #expect(try store.enqueue(key: "https://example.com/b", now: 2))
            try store.commit()
            #expect(exists(reserve) && fileSize(reserve) == SpaceReserve.bytes)
        }
    }
}

private func fileSize(_ path: String) -> Int64 {
    var info = stat()
    return stat(path, &info) == 0 ? Int64(info.st_size) : -1
}
