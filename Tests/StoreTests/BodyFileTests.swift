import Glibc
import Testing
@testable import prefetchd

/// A download's body file as the fetcher's file thread opens it: a new download starts empty, a resumed one keeps its
/// bytes and continues after them.
@Suite struct BodyFileTests {
    @Test("a new download empties what a body file held; a resumed one keeps its bytes and writes after them")
    func newAndResumed() throws {
        try withCacheDirectory { directory in
            let path = directory + "/body"
            try writeFile(path, count: 10)

            let fresh = try BodyFile.open(path, resuming: false)
            #expect(fresh.length == 0)
            #expect(fileSize(path) == 0)
            let kept: [UInt8] = Array("kept!".utf8)
            #expect(write(fresh.descriptor, kept, kept.count) == kept.count)
            close(fresh.descriptor)

            let resumed = try BodyFile.open(path, resuming: true)
            #expect(resumed.length == 5)
            let rest: [UInt8] = Array("new".utf8)
            #expect(write(resumed.descriptor, rest, rest.count) == rest.count)
            close(resumed.descriptor)
            #expect(SHA256.hex(ofFile: path) == SHA256.hex(of: "kept!new"))
        }
    }

    @Test("a stopped transfer's job makes no file when cancelled first, and closes its file when cancelled later")
    func cancelledJobs() throws {
        try withCacheDirectory { directory in
            let path = directory + "/body"
            func open() -> Result<BodyFile, SystemError> {
                Result { () throws(SystemError) in try BodyFile.open(path, resuming: false) }
            }
            let early = BodyFileJob()
            #expect(early.cancel() == false, "not begun: no file to delete")
            #expect(early.run(open) == nil)
            #expect(access(path, F_OK) != 0, "no file was made")

            let late = BodyFileJob()
            var descriptor: Int32 = -1
            var begun: Bool?
            let delivered = late.run {
                let body = open()
                if case .success(let file) = body { descriptor = file.descriptor }
                begun = late.cancel()  // the loop thread stops the transfer while the file is made
                return body
            }
            #expect(delivered == nil, "nothing to deliver")
            #expect(begun == true, "begun: the caller deletes the file")
            #expect(descriptor >= 0 && !isOpen(descriptor, on: path), "its descriptor is closed")

            // Stopped after its file was opened, while the result waits for the loop thread.
            let waiting = BodyFileJob()
            guard case .success(let file)? = waiting.run(open) else { Issue.record("not opened"); return }
            #expect(isOpen(file.descriptor, on: path))
            #expect(waiting.cancel() == true, "begun: the caller deletes the file")
            #expect(!isOpen(file.descriptor, on: path), "cancelling closed its descriptor")
        }
    }

    @Test("a body file whose directory was removed behind the daemon's back is made after the directory")
    func directoryRemoved() throws {
        try withCacheDirectory { directory in
            let path = directory + "/tmp/body"
            let body = try BodyFile.open(path, resuming: false)
            close(body.descriptor)
            #expect(access(path, F_OK) == 0)
        }
    }

    @Test("a symbolic link or a FIFO planted at a body file's path is replaced by a file, never written through (a link overwrote its target outside the cache)", arguments: [false, true])
    func plantedEntries(resuming: Bool) throws {
        try withCacheDirectory { directory in
            let victim = directory + "/victim"
            try writeFile(victim, count: 7)
            let link = directory + "/link-body"
            #expect(symlink(victim, link) == 0)
            let body = try BodyFile.open(link, resuming: resuming)
            #expect(body.length == 0, "nothing is resumed from a link's target")
            let bytes: [UInt8] = Array("jpeg".utf8)
            #expect(write(body.descriptor, bytes, bytes.count) == bytes.count)
            close(body.descriptor)
            #expect(fileSize(victim) == 7, "the link's target was written")
            var info = stat()
            #expect(lstat(link, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && info.st_size == 4)

            let fifo = directory + "/fifo-body"
            #expect(mkfifo(fifo, 0o600) == 0)
            let replaced = try BodyFile.open(fifo, resuming: resuming)  // did not wait for a reader
            close(replaced.descriptor)
            #expect(lstat(fifo, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG)
        }
    }

    @Test("a body file that cannot be made is an error naming the call and the path")
    func cannotMake() throws {
        try withCacheDirectory { directory in
            let path = directory + "/" + String(repeating: "x", count: Int(NAME_MAX) + 1)  // a name too long
            let error = #expect(throws: SystemError.self) { try BodyFile.open(path, resuming: false) }
            #expect(error?.call == "open")
            #expect(error.map { "\($0)" }?.contains(path) == true)
        }
    }
}

/// Whether `descriptor` is open on the file at `path`. Tests run in parallel in one process: a number closed here may
/// already name another test's file, so the file is compared, not only the number.
private func isOpen(_ descriptor: Int32, on path: String) -> Bool {
    var open = stat(), named = stat()
    return fstat(descriptor, &open) == 0 && stat(path, &named) == 0 && open.st_dev == named.st_dev && open.st_ino == named.st_ino
}

private func fileSize(_ path: String) -> Int64 {
    var info = stat()
    return stat(path, &info) == 0 ? Int64(info.st_size) : -1
}
