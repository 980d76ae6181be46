import Glibc
import Synchronization

/// The cache directory's files: `files/ab/<sha256(key)>` for bodies, in 256 directories made once at start-up, and
/// `tmp/<sha256(key)>` for downloads in progress (kept across restarts when the index records a validator to resume
/// them with). Caches written before kept `files/ab/cd/<sha256(key)>`; the index records each file's path, so those
/// are found where they are.
struct CacheFiles {
    let root: String

    /// Cached files and their directories are group-readable, so members of an allowed group can read the file
    /// they were given; the root itself stays 0700 in user mode (the unit makes it 0750, group `prefetch`).
    static let fileMode: mode_t = 0o640
    static let directoryMode: mode_t = 0o750
    /// The root (in user mode) and `tmp/`, whose partial bodies are nobody else's.
    static let privateDirectoryMode: mode_t = 0o700

    var temporaryDirectory: String { root + "/tmp" }
    var filesDirectory: String { root + "/files" }

    /// The file name for a key: its SHA-256, never anything taken from the URL text.
    static func name(forKey key: String) -> String { SHA256.hex(of: key) }

    /// The file name of a key's body, `sha256` its content's: a new body gets a new name, so the file an index row
    /// and a reply name is never written over while a new body is moved into place; `Store.put` deletes the old one.
    static func name(forKey key: String, body sha256: String) -> String { SHA256.hex(of: key + "\n" + sha256) }

    /// `files/ab/<name>`, relative to the root.
    static func relativePath(forName name: String) -> String { "files/" + name.prefix(2) + "/" + name }

    /// The 256 directories `files/00` … `files/ff`.
    private static let fanOut = (0..<256).map { "files/" + (($0 < 16 ? "0" : "") + String($0, radix: 16)) }

    /// Whether `name` is `length` lowercase hexadecimal digits: a file's name (64), or one of the 256 directories' (2).
    static func isHex(_ name: String, _ length: Int) -> Bool {
        name.utf8.count == length && name.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    func absolute(_ relative: String) -> String { root + "/" + relative }

    /// The index's file name in the root (with SQLite's `-wal` and `-shm` beside it, and `SpaceReserve`'s `-reserve`).
    static let indexName = "index.sqlite"

    /// Makes the directories, in a root that is prefetchd's own (`unusable`).
    func prepare() throws {
        if let problem = Self.unusable(root) { throw DaemonError(problem) }
        try makeDirectories(root, mode: Self.privateDirectoryMode)
        try makeDirectories(temporaryDirectory, mode: Self.privateDirectoryMode)
        try makeDirectories(filesDirectory, mode: Self.directoryMode)
        for directory in [temporaryDirectory, filesDirectory] {
            var info = stat()
            guard lstat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
                throw DaemonError("\(directory) is not a directory of the cache's own (a symbolic link, or a file): "
                                  + "prefetchd deletes what it finds there that its index does not name, and renames "
                                  + "downloads from tmp/ into files/ on one file system; remove it and start again")
            }
        }
        for directory in Self.fanOut.map(absolute) where mkdir(directory, Self.directoryMode) != 0 {
            guard errno == EEXIST else { throw SystemError(call: "mkdir", errno: errno, detail: directory) }
            try Self.makeDirectory(replacing: directory)
        }
    }

    /// Makes `directory` where it is missing or something else is (a file or a symbolic link someone put there:
    /// every body or variant whose name begins as its does would fail to be moved into place, or go where the link
    /// points).
    static func makeDirectory(replacing directory: String, mode: mode_t = directoryMode) throws(SystemError) {
        var info = stat()
        guard lstat(directory, &info) != 0 || (info.st_mode & S_IFMT) != S_IFDIR else { return }
        deleteEntry(directory)
        try makeDirectories(directory, mode: mode)
    }

    /// Why `root` cannot be the cache directory, found without changing anything (`prepare` and `--check-config`):
    /// something other than a directory is there (a link to nothing, a loop of links), one its user cannot write
    /// (`checkingAccess`: the start finds that itself, saying what failed), or one that holds files of someone else's
    /// and no index (the start-up sweep deletes what under `tmp/` and
    /// `files/` the index does not name, and `--cache-dir ~` must not cost anyone their `~/tmp`). Nil for a directory
    /// that does not exist yet, an empty one and one prefetchd made (also one whose first start stopped before the
    /// index was made).
    static func unusable(_ root: String, checkingAccess: Bool = false) -> String? {
        var info = stat()
        if stat(root, &info) != 0 {
            let code = errno
            if code == ENOENT, lstat(root, &info) == 0 { return "the cache directory \(root) is a symbolic link to nothing" }
            guard code == ENOENT else {
                return "the cache directory \(root) cannot be used: \(String(cString: strerror(code)))"
            }
            return nil  // made at the start
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            return "the cache directory \(root) is not a directory: give prefetchd a directory of its own (one that does "
                + "not exist yet, or an empty one)"
        }
        guard !checkingAccess || access(root, R_OK | W_OK | X_OK) == 0 else {
            return "the cache directory \(root) is not writable by the user prefetchd runs as (uid \(getuid())): give it "
                + "to that user, or choose another with --cache-dir"
        }
        let top = names(in: root)
        guard !top.contains(where: { $0.hasPrefix(Self.indexName) }) else { return nil }
        let foreign = top.filter { !["tmp", "files", "lock"].contains($0) }
            + names(in: root + "/tmp").filter { !Self.isHex($0, 64) }.map { "tmp/" + $0 }
            + names(in: root + "/files").filter { !Self.isHex($0, 2) }.map { "files/" + $0 }
        guard !foreign.isEmpty else { return nil }
        let shown = foreign.sorted().prefix(3).joined(separator: ", ") + (foreign.count > 3 ? ", …" : "")
        return "the cache directory \(root) holds other files (\(shown)) and no prefetchd index: give prefetchd a "
            + "directory of its own (one that does not exist yet, or an empty one), since it deletes what its index "
            + "does not name"
    }

    /// Where the body of a download in progress for `name` is written.
    func downloadPath(forName name: String) -> String { temporaryDirectory + "/" + name }

    /// Moves a finished download into place under `relative`: one `rename`, and its directory made again first only
    /// when someone deleted it or put a file in its place, or a directory someone made at its path removed first (the
    /// name is the cache's).
    func install(temporary: String, as relative: String) throws(SystemError) {
        let target = absolute(relative)
        willPlace(target)
        // `files/` itself deleted, or a file or a link put in its place: a body is never moved through a link.
        try Self.makeDirectory(replacing: filesDirectory)
        if rename(temporary, target) == 0 { return }
        let directory = String(target[..<target.lastIndex(of: "/")!])
        switch errno {
        case ENOENT where access(temporary, F_OK) == 0, ENOTDIR:
            try Self.makeDirectory(replacing: directory)
        case EISDIR, ENOTEMPTY, EEXIST:
            deleteEntry(target)
        default:
            throw SystemError(call: "rename", errno: errno, detail: "\(temporary) to \(target)")
        }
        try syscall("rename", "\(temporary) to \(target)") { rename(temporary, target) }
    }

    /// The size of a file, or nil when it does not exist.
    func size(of relative: String) -> Int64? { usage(of: relative)?.size }

    /// The disk space a file takes (its allocated blocks, as `du` counts), or nil when it does not exist.
    func allocated(_ relative: String) -> Int64? { usage(of: relative)?.allocated }

    /// A regular file's size and allocated bytes (a symbolic link in its place is not the cache's file).
    func usage(of relative: String) -> (size: Int64, allocated: Int64)? {
        var info = stat()
        guard lstat(absolute(relative), &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return (Int64(info.st_size), Int64(info.st_blocks) * 512)
    }

    /// Deletes a cache file. One that cannot be deleted (its directory made read-only behind the daemon's back) is
    /// logged: its bytes stay on the disk, uncounted, until the next start's recovery takes it (`leftBehind`).
    func remove(_ relative: String) {
        let path = absolute(relative)
        guard unlink(path) != 0, errno != ENOENT else { return }
        Self.leftBehind.store(true, ordering: .relaxed)
        Log.warning("\(SystemError(call: "unlink", errno: errno, detail: path)): its bytes stay on the disk, uncounted, "
                    + "until the next start")
    }

    /// A file that could not be deleted was left in the cache since the process started: the next start must sweep.
    static let leftBehind = Atomic<Bool>(false)

    /// What this run moves into `files/` while the start-up sweep looks for files no row names.
    let placed = PlacedDuringSweep()

    /// Called before a file is written or moved to `path` under `files/`, from any thread.
    func willPlace(_ path: String) { placed.note(path) }

    /// Deletes everything under `tmp/` but the resumable downloads named in `keeping`; returns how many entries went.
    func clearTemporaries(keeping: Set<String>) -> Int {
        var removed = 0
        let unspellable = forEachFile(in: temporaryDirectory) { path in
            guard !keeping.contains(path) else { return }
            deleteEntry(path)
            removed += 1
        }
        return removed + unspellable
    }

    /// Calls `body` with the path of every entry of `tmp/`.
    func forEachTemporary(_ body: (String) -> Void) { forEachFile(in: temporaryDirectory, body) }

    /// Calls `body` with the name and path of every file under `files/`, in either layout (`ab/<name>`, and
    /// `ab/cd/<name>` of caches written before).
    func forEachCachedFile(_ body: (_ name: String, _ path: String) -> Void) {
        forEachFile(in: filesDirectory, depth: 2) { path in body(lastComponent(path), path) }
    }

    /// Calls `body` with every entry that is not a directory, going `depth` directories down; returns how many
    /// entries whose name no path can spell it deleted on the way (`entries(of:junk:)`).
    @discardableResult
    fileprivate func forEachFile(in directory: String, depth: Int = 0, _ body: (String) -> Void) -> Int {
        var junk = 0
        for (name, type) in entries(of: directory, junk: &junk) {
            let path = directory + "/" + name
            if depth > 0, isDirectory(type, path) {
                junk += forEachFile(in: path, depth: depth - 1, body)
            } else {
                body(path)
            }
        }
        return junk
    }
}

/// The names of the files a run moves into `files/` while the start-up sweep runs (`Store.sweepStep`): a body or a
/// variant is in place a moment before its row is, and a variant is encoded into a temporary `.<name>.XXXXXX` beside
/// it; the sweep must not take them for a crash's leftovers.
final class PlacedDuringSweep: Sendable {
    /// nil while no sweep runs.
    private let names = Mutex<Set<String>?>(nil)

    func begin() { names.withLock { $0 = [] } }
    func end() { names.withLock { $0 = nil } }

    func note(_ path: String) {
        let name = lastComponent(path)
        names.withLock { _ = $0?.insert(name) }
    }

    func contains(_ name: String) -> Bool { names.withLock { $0?.contains(name) ?? false } }
}

/// The files under `files/`, in either layout, read a few at a time (`next`), so that a sweep does not hold the loop
/// on a directory of a million entries. Each directory is read once, as it is then; a file placed or deleted while it
/// is read may be seen or not.
final class CachedFilesWalk {
    private let files: CacheFiles
    /// The entries of `files/` not reached yet, and the one being read.
    private var pending: [(path: String, type: UInt8)]
    private var reading: (path: String, directory: OpaquePointer)?
    /// Entries whose name is not UTF-8 deleted on the way: none of the cache's, and no path String can spell them.
    private(set) var junk = 0
    /// The directories read that are not one of the 256 (the layout of caches written before, or someone's junk):
    /// `removeEmptied` takes those the sweep left empty.
    private var others: [String] = []

    init(_ files: CacheFiles) {
        self.files = files
        pending = entries(of: files.filesDirectory, junk: &junk).map { (files.filesDirectory + "/" + $0.name, $0.type) }
    }

    deinit { if let reading { closedir(reading.directory) } }

    /// About `limit` more files, with their names (all a directory below a fan-out one holds: the layout of caches
    /// written before, or someone's junk); none once the walk is done.
    func next(_ limit: Int) -> [(name: String, path: String)] {
        var found: [(name: String, path: String)] = []
        while found.count < limit {
            guard let (directory, stream) = reading else {
                guard let entry = pending.popLast() else { break }
                if !isDirectory(entry.type, entry.path) {
                    found.append((lastComponent(entry.path), entry.path))
                } else if let stream = opendir(entry.path) {
                    reading = (entry.path, stream)
                    if !CacheFiles.isHex(lastComponent(entry.path), 2) { others.append(entry.path) }
                }
                continue
            }
            guard let entry = readdir(stream) else {
                closedir(stream)
                reading = nil
                continue
            }
            guard let name = entryName(entry) else {
                removeEntry(named: rawName(entry), in: dirfd(stream))
                junk += 1
                continue
            }
            guard name != ".", name != ".." else { continue }
            let path = directory + "/" + name
            if isDirectory(entry.pointee.d_type, path) {
                junk += files.forEachFile(in: path) { found.append((lastComponent($0), $0)) }
                others.append(path)
            } else {
                found.append((name, path))
            }
        }
        return found
    }

    /// Deletes the directories read that the sweep emptied, deepest first; those still holding a file stay.
    func removeEmptied() {
        for directory in others.reversed() { rmdir(directory) }
    }
}

/// Deletes what is at `path`: a file or a link, or a directory with what it holds (someone else's junk in the cache),
/// never what a link in it points to. Returns whether there was anything.
@discardableResult
func deleteEntry(_ path: String) -> Bool {
    var info = stat()
    guard lstat(path, &info) == 0 else { return false }
    guard (info.st_mode & S_IFMT) == S_IFDIR else { return unlink(path) == 0 }
    let directory = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    if directory >= 0 { removeContents(ofDirectory: directory) }
    rmdir(path)
    return true
}

/// The names and types of the entries of one of the cache's own directories but `.` and `..`; none when it cannot be
/// read. An entry whose name is not UTF-8 is none of the cache's and no path String can spell it: it is deleted here,
/// through the open directory, and counted in `junk`.
private func entries(of directory: String, junk: inout Int) -> [(name: String, type: UInt8)] {
    guard let dir = opendir(directory) else { return [] }
    defer { closedir(dir) }
    var entries: [(name: String, type: UInt8)] = []
    while let entry = readdir(dir) {
        guard let name = entryName(entry) else {
            removeEntry(named: rawName(entry), in: dirfd(dir))
            junk += 1
            continue
        }
        if name != ".", name != ".." { entries.append((name, entry.pointee.d_type)) }
    }
    return entries
}

/// An entry's name, or nil when it is not UTF-8.
private func entryName(_ entry: UnsafeMutablePointer<dirent>) -> String? {
    withUnsafeBytes(of: entry.pointee.d_name) { String(validatingCString: $0.baseAddress!.assumingMemoryBound(to: CChar.self)) }
}

/// An entry's name as it is on disk (UTF-8 or not), NUL-terminated.
private func rawName(_ entry: UnsafeMutablePointer<dirent>) -> [CChar] {
    withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }.map(CChar.init(bitPattern:))) + [0] }
}

/// Deletes `name` (NUL-terminated) in the directory open at `parent`: a file or a link, or a directory with what it
/// holds, never following a symbolic link.
private func removeEntry(named name: [CChar], in parent: Int32) {
    guard unlinkat(parent, name, 0) != 0, errno == EISDIR else { return }
    let directory = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    if directory >= 0 { removeContents(ofDirectory: directory) }
    unlinkat(parent, name, AT_REMOVEDIR)
}

/// Deletes what the directory open at `fd` holds, by name as it is on disk (UTF-8 or not), and closes `fd`.
private func removeContents(ofDirectory fd: Int32) {
    guard let dir = fdopendir(fd) else {
        close(fd)
        return
    }
    defer { closedir(dir) }
    var names: [[CChar]] = []
    while let entry = readdir(dir) {
        let name = rawName(entry)
        if name != [46, 0], name != [46, 46, 0] { names.append(name) }
    }
    for name in names { removeEntry(named: name, in: dirfd(dir)) }
}

/// What follows the last `/` of a path.
private func lastComponent(_ path: String) -> String {
    guard let slash = path.lastIndex(of: "/") else { return path }
    return String(path[path.index(after: slash)...])
}

/// The names in a directory, also those that are not UTF-8 (repaired, to be shown); none when it cannot be read.
private func names(in directory: String) -> [String] {
    guard let dir = opendir(directory) else { return [] }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.baseAddress!.assumingMemoryBound(to: CChar.self)) }
        if name != ".", name != ".." { names.append(name) }
    }
    return names
}

/// Whether a directory entry is a directory: its type, or `stat` where the file system does not say (DT_UNKNOWN).
private func isDirectory(_ type: UInt8, _ path: String) -> Bool {
    if type != UInt8(DT_UNKNOWN) { return type == UInt8(DT_DIR) }
    var info = stat()
    return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
}
