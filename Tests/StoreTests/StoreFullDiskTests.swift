import CSQLite
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

    @Test("a disk that stayed full after the reserve was given up: the start failed at its first write (\"database or disk is full\", exit 1, until space was freed by hand); now the oldest cached files make room, and what is queued stays")
    func startsOnADiskThatStayedFull() throws {
        try withSmallDisk(megabytes: 8) { disk, directory in
            let keys = (0..<10).map { "https://example.com/\($0).png" }
            do {
                let store = try Store(directory: directory)
                for (n, key) in keys.enumerated() {
                    let entry = try cache(key, count: 500_000, at: Int64(1000 + n), in: store)
                    // Written a minute apart (the kernel's file times are coarser than the loop's pace).
                    var times = [timespec(tv_sec: 1_700_000_000 + 60 * n, tv_nsec: 0), timespec(tv_sec: 1_700_000_000 + 60 * n, tv_nsec: 0)]
                    #expect(utimensat(AT_FDCWD, store.files.absolute(entry.file), &times, 0) == 0)
                }
                #expect(try store.enqueue(key: "https://example.com/queued", now: 1))
                try store.commit()
            }
            unlink(directory + "/index.sqlite-reserve")  // given up in the full disk's first episode
            try fill(disk + "/ballast")
            #expect(freeBytes(disk) < 64 * 1024)

            let store = try Store(directory: directory)
            let swept = try store.recover()
            #expect(swept.badRows >= 8, "the oldest went: \(swept)")
            #expect(try store.entry(keys[9]) != nil, "the newest stayed")
            #expect(try store.enqueue(key: "https://example.com/after", now: 2))
            try store.commit()
            #expect(store.backlogCount == 2, "the queue is whole")
        }
    }

    @Test("a disk that stayed full, filled by partial downloads: the start deletes those, and no cached file (it deleted the cached files first and the partials filling the disk after)")
    func partialsGoBeforeCachedFiles() throws {
        try withSmallDisk(megabytes: 8) { disk, directory in
            let keys = (0..<4).map { "https://example.com/\($0).png" }
            do {
                let store = try Store(directory: directory)
                for key in keys { try cache(key, count: 300_000, in: store) }
                try store.commit()
            }
            for index in 0..<2 { try writeFile(directory + "/tmp/" + String(repeating: "\(index)", count: 64), count: 2_200_000) }
            unlink(directory + "/index.sqlite-reserve")
            try fill(disk + "/ballast")
            #expect(freeBytes(disk) < 64 * 1024)

            let store = try Store(directory: directory)
            #expect(names(in: directory + "/tmp").isEmpty)
            #expect(try store.recover().badRows == 0, "no cached file went")
            for key in keys { #expect(try store.entry(key) != nil, "\(key)") }
        }
    }

    @Test("a full disk with nothing to delete is named as such at start (it said \"disk I/O error; the cache directory must be writable\")")
    func fullDiskWithNothingToDeleteIsNamed() throws {
        try withSmallDisk(megabytes: 4) { disk, directory in
            do { _ = try Store(directory: directory) }
            unlink(directory + "/index.sqlite-reserve")
            try fill(disk + "/ballast")
            let error = #expect(throws: DaemonError.self) { try Store(directory: directory) }
            #expect(error.map { "\($0)" }?.contains("the disk is full") == true, "\(String(describing: error))")
        }
    }

    @Test("an I/O error that is no full disk (a log made immutable, a failing disk) is not taken for one: the daemon evicted cached files for it")
    func ioErrorIsNoFullDisk() {
        let writeFailed = SQLITE_IOERR | (3 << 8)  // SQLITE_IOERR_WRITE, a macro Swift does not import
        #expect(DatabaseError(call: "exec", code: SQLITE_FULL, message: "full").isDiskFull)
        #expect(DatabaseError(call: "exec", code: writeFailed, message: "io", systemErrno: EDQUOT).isDiskFull)
        #expect(DatabaseError(call: "exec", code: writeFailed, message: "io", systemErrno: ENOSPC).isDiskFull)
        #expect(!DatabaseError(call: "exec", code: writeFailed, message: "io", systemErrno: EPERM).isDiskFull)
        #expect(!DatabaseError(call: "exec", code: writeFailed, message: "io", systemErrno: EIO).isDiskFull)
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

extension StoreFullDiskTests {
    @Test("a sparse reserve (a backup restored sparse-aware) is not taken for one: its blocks are allocated at start (on a full disk, giving it up freed nothing and no queue was acknowledged)")
    func sparseReserveIsAllocated() throws {
        try withCacheDirectory { directory in
            do { _ = try Store(directory: directory) }
            let reserve = directory + "/index.sqlite-reserve"
            #expect(truncate(reserve, 0) == 0 && truncate(reserve, off_t(SpaceReserve.bytes)) == 0)
            #expect((allocatedOnDisk(reserve) ?? -1) < SpaceReserve.bytes, "sparse")
            let store = try Store(directory: directory)
            try store.commit()
            #expect((allocatedOnDisk(reserve) ?? 0) >= SpaceReserve.bytes)
        }
    }
}

private func fileSize(_ path: String) -> Int64 {
    var info = stat()
    return stat(path, &info) == 0 ? Int64(info.st_size) : -1
}
