import Foundation
import Glibc
import Testing
@testable import prefetchd

/// Runs `body` with a new, empty directory under /tmp, removed with everything in it afterwards, also when `body`
/// throws or an expectation fails.
func withCacheDirectory(_ body: (String) throws -> Void) throws {
    var template = Array("/tmp/prefetchd-store-XXXXXX".utf8CString)
    guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
        throw SystemError(call: "mkdtemp", errno: errno, detail: "/tmp")
    }
    let directory = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try body(directory)
}

/// Writes `count` bytes (or `text`) to `path`, replacing what was there.
func writeFile(_ path: String, count: Int = 0, text: String? = nil) throws {
    let bytes = text.map { Array($0.utf8) } ?? [UInt8](repeating: UInt8(ascii: "x"), count: count)
    let fd = try syscall("open", path) { open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600) }
    defer { close(fd) }
    guard write(fd, bytes, bytes.count) == bytes.count else { throw SystemError(call: "write", errno: errno, detail: path) }
}

func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

/// Whether `path` is a directory itself (not a symbolic link to one).
func isDirectory(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
}

/// Creates an empty file at a path given as bytes; returns whether it could.
func createFile(_ path: [CChar]) -> Bool {
    let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { return false }
    close(fd)
    return true
}

/// `prefix` followed by `name`, bytes that need not be UTF-8, as the NUL-terminated path a system call takes.
func rawPath(_ prefix: String, _ name: [UInt8]) -> [CChar] {
    (Array(prefix.utf8) + name + [0]).map { CChar(bitPattern: $0) }
}

/// A file's bytes, or nil when it cannot be read.
func contents(of path: String) -> [UInt8]? { FileManager.default.contents(atPath: path).map(Array.init) }

/// The disk space a file takes, as `du` counts it.
func allocatedOnDisk(_ path: String) -> Int64? {
    var info = stat()
    guard stat(path, &info) == 0 else { return nil }
    return Int64(info.st_blocks) * 512
}

/// The names of the entries of a directory, sorted.
func names(in directory: String) -> [String] {
    guard let dir = opendir(directory) else { return [] }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
        if name != "." && name != ".." { names.append(name) }
    }
    return names.sorted()
}

/// Caches `count` bytes under `key` the way the daemon does: the body written in tmp/, renamed to
/// files/ab/<sha256(key)>, then indexed with `time` as its fetch and last access.
@discardableResult
func cache(_ key: String, count: Int = 5000, at time: Int64 = 1000, in store: Store) throws -> IndexEntry {
    let name = CacheFiles.name(forKey: key)
    let temporary = store.files.downloadPath(forName: name)
    try writeFile(temporary, count: count)
    let sha256 = try #require(SHA256.hex(ofFile: temporary))
    let relative = CacheFiles.relativePath(forName: name)
    try store.files.install(temporary: temporary, as: relative)
    let entry = IndexEntry(key: key, url: key, file: relative, bytes: Int64(count), sha256: sha256,
                           contentType: "image/png", format: "png", width: 40, height: 30, etag: "\"v1\"",
                           lastModified: "Tue, 01 Dec 2026 12:00:00 GMT", freshUntil: time + 60_000, fetchedAt: time,
                           lastAccess: time, hits: 0)
    try store.put(entry, allocated: try #require(store.files.allocated(relative)))
    return entry
}

/// Makes a `spec` variant of the cached `key` the way the daemon does: its file, then its row.
@discardableResult
func makeVariant(of key: String, spec: String, count: Int = 3000, in store: Store) throws -> Store.Variant {
    let relative = CacheFiles.relativePath(forName: CacheFiles.name(forKey: key + "#" + spec))
    try writeFile(store.files.absolute(relative), count: count)
    let variant = Store.Variant(file: relative, bytes: Int64(count), sha256: SHA256.hex(of: spec), format: "png",
                                width: 20, height: 15)
    try store.putVariant(key, spec: spec, variant)
    return variant
}

extension Store {
    /// The whole recovery at once, as a start and its sweep do it: what `beginRecovery` and every `sweepStep` removed.
    func recover() throws -> (temporaries: Int, badRows: Int, orphans: Int) {
        let temporaries = try beginRecovery()
        var swept = sweeping ? nil : (badRows: 0, orphans: 0)
        while swept == nil { swept = try sweepStep(limit: 1000) }
        try commit()
        return (temporaries, swept!.badRows, swept!.orphans)
    }
}
