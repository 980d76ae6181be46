import Glibc

/// The cache directory's files: `files/ab/cd/<sha256(key)>` for bodies, `tmp/<sha256(key)>` for downloads in
/// progress (kept across restarts when the index records a validator to resume them with).
struct CacheFiles {
    let root: String

    /// Cached files and their directories are group-readable, so members of an allowed group can read the file
    /// they were given; the root itself stays 0700 in user mode (the unit makes it 0750, group `prefetch`).
    static let fileMode: mode_t = 0o640
    static let directoryMode: mode_t = 0o750

    var temporaryDirectory: String { root + "/tmp" }
    var filesDirectory: String { root + "/files" }

    /// The file name for a key: its SHA-256, never anything taken from the URL text.
    static func name(forKey key: String) -> String { SHA256.hex(of: key) }

    /// `files/ab/cd/<name>`, relative to the root.
    static func relativePath(forName name: String) -> String {
        let chars = Array(name)
        return "files/\(String(chars[0..<2]))/\(String(chars[2..<4]))/\(name)"
    }

    func absolute(_ relative: String) -> String { root + "/" + relative }

    func prepare() throws(SystemError) {
        try makeDirectories(root, mode: 0o700)
        try makeDirectories(temporaryDirectory, mode: 0o700)
        try makeDirectories(filesDirectory, mode: Self.directoryMode)
    }

    /// Where the body of a download in progress for `name` is written.
    func downloadPath(forName name: String) -> String { temporaryDirectory + "/" + name }

    /// Moves a finished download into place under `relative`, creating its directories.
    func install(temporary: String, as relative: String) throws(SystemError) {
        let target = absolute(relative)
        let directory = String(target[..<target.lastIndex(of: "/")!])
        try makeDirectories(directory, mode: Self.directoryMode)
        try syscall("rename", "\(temporary) to \(target)") { rename(temporary, target) }
    }

    /// The size of a file, or nil when it does not exist.
    func size(of relative: String) -> Int64? { usage(of: relative)?.size }

    /// The disk space a file takes (its allocated blocks, as `du` counts), or nil when it does not exist.
    func allocated(_ relative: String) -> Int64? { usage(of: relative)?.allocated }

    /// A regular file's size and allocated bytes.
    func usage(of relative: String) -> (size: Int64, allocated: Int64)? {
        var info = stat()
        guard stat(absolute(relative), &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return (Int64(info.st_size), Int64(info.st_blocks) * 512)
    }

    func remove(_ relative: String) { unlink(absolute(relative)) }

    /// Deletes every temporary file but the resumable downloads named in `keeping`; returns how many went.
    func clearTemporaries(keeping: Set<String>) -> Int {
        var removed = 0
        forEachFile(in: temporaryDirectory) { path in
            guard !keeping.contains(path) else { return }
            unlink(path)
            removed += 1
        }
        return removed
    }

    /// Calls `body` with the name and path of every file under `files/`.
    func forEachCachedFile(_ body: (_ name: String, _ path: String) -> Void) {
        forEachFile(in: filesDirectory, depth: 2) { path in
            body(String(path[path.index(after: path.lastIndex(of: "/")!)...]), path)
        }
    }

    private func forEachFile(in directory: String, depth: Int = 0, _ body: (String) -> Void) {
        guard let dir = opendir(directory) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
            }
            if name == "." || name == ".." { continue }
            let path = directory + "/" + name
            if depth > 0 {
                forEachFile(in: path, depth: depth - 1, body)
            } else {
                body(path)
            }
        }
    }
}
