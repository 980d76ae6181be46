import FoundationEssentials
import Glibc
import PrefetchProtocol

/// `get`: urgent fetches, answered in the order given. With several URLs, line N of stdout belongs to URL N: a URL
/// that failed leaves an empty line there, and its error on stderr names it.
enum GetCommand {
    /// Requests in flight at once.
    static let window = 256

    static func run(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let source = arguments.urls()
        var urls: [String] = []
        while let url = try source() { urls.append(url) }
        guard !urls.isEmpty else { throw arguments.noURLs("get") }
        if arguments.output != nil, urls.count != 1 { throw .usage("-o takes exactly one URL") }
        let deadline = arguments.timeout.map { monotonicNow() + Int64($0 * 1000) }
        // One URL and stderr on a terminal: a progress bar when the answer takes a while.
        let progress = GetProgress(urls: urls, arguments: arguments)
        let report = Report(json: arguments.json, several: urls.count > 1)

        var answers = [Result<CacheEntry, WireError>?](repeating: nil, count: urls.count)
        var indexByID: [Int64: Int] = [:]
        var sent = 0
        var printed = 0
        var exitCode = ExitCode.ok
        var askedAgain = 0
        func request(_ url: String) -> Request {
            Request(id: nil, op: .get, url: url, maxStale: arguments.maxStale, offline: arguments.offline ? true : nil,
                    size: arguments.size, fit: arguments.fit, format: arguments.format, quality: arguments.quality,
                    upscale: arguments.upscale ? true : nil)
        }
        while true {
            while sent < urls.count, indexByID.count < window {
                do throws(CLIError) {
                    indexByID[try client.send(request(urls[sent]))] = sent
                } catch {
                    // A URL too long for a request line is refused before sending.
                    guard case .failed(let refusal) = error else { throw error }
                    answers[sent] = .failure(refusal)
                }
                sent += 1
            }
            while printed < urls.count, let answer = answers[printed] {
                if case .failure(let error) = answer { exitCode = max(exitCode, ExitCode.of(error, sent: urls[printed])) }
                if let output = arguments.output, case .success(let entry) = answer {
                    guard try copy(entry.path, to: output, lastTry: askedAgain == 2) else {
                        // Evicted between the reply and the copy (a cache smaller than what its clients use at
                        // once): asked again, the daemon fetches it again.
                        askedAgain += 1
                        answers[printed] = nil
                        indexByID[try client.send(request(urls[printed]))] = printed
                        break
                    }
                } else {
                    report.answer(urls[printed], answer)
                }
                answers[printed] = nil
                printed += 1
            }
            guard printed < urls.count else { return exitCode }
            let received: (id: Int64, answer: Result<CacheEntry, WireError>)?
            if let progress {
                received = try progress.receive(CacheEntry.self, from: client, deadline: deadline)
            } else {
                received = try client.receive(CacheEntry.self, deadline: deadline)
            }
            guard let reply = received else {
                for index in printed..<urls.count {
                    report.answer(urls[index], answers[index]
                                  ?? .failure(WireError(.timeout, "no answer within \(arguments.timeout!) s; the fetch goes on")))
                }
                return ExitCode.timeout
            }
            guard let index = indexByID.removeValue(forKey: reply.id) else { continue }
            answers[index] = reply.answer
        }
    }

    /// How each answer is printed.
    private struct Report {
        let json: Bool
        /// Several URLs: a failed one keeps its line on stdout, empty, so lines and URLs stay in step.
        let several: Bool

        func answer(_ url: String, _ answer: Result<CacheEntry, WireError>) {
            switch (answer, json) {
            case (.success(let entry), true): Output.json(entry)
            case (.success(let entry), false):
                if entry.stale == true { Output.message("\(Output.shown(url)): served stale (past its freshness)") }
                Output.path(entry.path)
            case (.failure(let error), true): Output.json(FailedURL(url: Output.shown(url), error: error))
            case (.failure(let error), false):
                Output.message("\(Output.shown(url)): \(error.code): \(error.message)")
                if several { Output.line("") }
            }
        }
    }

    /// Copies the cached file to `destination` (`-` is stdout); false when the file is gone (unless `lastTry`).
    private static func copy(_ path: String, to destination: String, lastTry: Bool) throws(CLIError) -> Bool {
        let input = open(path, O_RDONLY | O_CLOEXEC)
        if input < 0, errno == ENOENT {
            guard lastTry else { return false }
            throw .failed(WireError(.internal, "the cached file was evicted before it could be copied, three times: the "
                                    + "cache (max_cache_bytes) is smaller than what its clients use at once; raise it"))
        }
        guard input >= 0 else { throw .failed(WireError(.internal, "cannot open \(path): \(String(cString: strerror(errno)))")) }
        defer { close(input) }
        // (The cached file itself is told apart below, by its inode.) Stdout is checked through its name.
        let name = destination == "-" ? "/dev/stdout" : destination
        if let root = cacheDirectory(of: path) {
            var link = stat(), target = stat()
            if lstat(name, &link) == 0, link.st_mode & S_IFMT == S_IFLNK, stat(name, &target) != 0 {
                throw .usage("\(destination) is a link to nothing: give -o the file itself")  // it may point into the cache
            }
            if let target = resolved(name), target != resolved(path),
               target == root || target.hasPrefix(root + "/") || aliases(target, root) {
                throw .usage("\(destination) is inside the cache (\(root)): writing there would damage it; give -o another path")
            }
        }
        let own = destination == "-" ? 1 : ownDescriptor(named: destination)
        let output = own ?? open(destination, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw writeFailure(destination) }
        defer { if own == nil { close(output) } }
        // Truncated only once known not to be the cached file itself, which would be emptied under the daemon (or,
        // appended to, grow until the disk is full).
        var from = stat(), to = stat()
        guard fstat(input, &from) == 0, fstat(output, &to) == 0 else { throw writeFailure(destination) }
        if from.st_dev == to.st_dev, from.st_ino == to.st_ino {
            throw .usage("\(destination) is the cached file itself (\(path)): give -o another path")
        }
        if own == nil, to.st_mode & S_IFMT == S_IFREG, ftruncate(output, 0) != 0 { throw writeFailure(destination) }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(input, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            var offset = 0
            while offset < count {
                let written = buffer.withUnsafeBytes { write(output, $0.baseAddress! + offset, count - offset) }
                guard written > 0 else { throw writeFailure(destination) }
                offset += written
            }
        }
        return true
    }

    /// The entry a name of this process's own streams stands for, in its directory: `stdout` or `stderr` in `/dev`,
    /// or a number in this process's descriptor directory, however spelled (`/dev/fd/3`, `/proc/self/fd/3`,
    /// `//dev/./fd/3`, `/proc/thread-self/fd/3`, `/proc/PID/fd/3`); nil for any other name. Such a stream is written
    /// to as `-` writes stdout: opened again, a socket's name fails (ENXIO), and a file's is written over from its
    /// start, not where the shell's `>>` appends.
    static func ownStreamEntry(_ path: String) -> Substring? {
        guard let slash = path.lastIndex(of: "/"), let directory = resolved(String(path[..<slash]) + "/.") else { return nil }
        let entry = path[path.index(after: slash)...]
        if directory == "/dev" { return ["stdout", "stderr"].contains(entry) ? entry : nil }
        return ownDescriptorDirectories.contains(directory) ? entry : nil
    }

    /// This process's descriptor directory, as `/proc/self/fd` and `/proc/thread-self/fd` resolve.
    private static let ownDescriptorDirectories = Set(["/proc/self/fd", "/proc/thread-self/fd"].compactMap(resolved))

    /// The descriptor such a name stands for, its number as the directory lists it (not `01`, `+1`); nil for another
    /// name. (`Arguments.checkDestination` refused those not open for writing when prefetchctl started: by now the
    /// number may be its own socket to the daemon, or the cached file.)
    static func ownDescriptor(named path: String) -> Int32? {
        guard let entry = ownStreamEntry(path) else { return nil }
        let number = ["stdout": "1", "stderr": "2"][String(entry)] ?? String(entry)
        guard let descriptor = Int32(number), descriptor >= 0, String(descriptor) == number else { return nil }
        return descriptor
    }

    /// The cache directory a cached file's path is in (the daemon names them `CACHE/files/ab/…`), links resolved.
    private static func cacheDirectory(of path: String) -> String? {
        var parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count > 3, parts[parts.count - 3] == "files" else { return nil }
        parts.removeLast(3)
        return resolved(parts.joined(separator: "/"))
    }

    /// Whether `target` is in the directory `root` under another name: one of its directories is `root` itself (a
    /// bind mount of the cache), or it is a file with other names on the cache's device (a hard link of a cached file).
    private static func aliases(_ target: String, _ root: String) -> Bool {
        var cache = stat(), info = stat()
        guard stat(root, &cache) == 0 else { return false }
        if stat(target, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_nlink > 1, info.st_dev == cache.st_dev {
            return true
        }
        var directory = Substring(target)
        while let slash = directory.lastIndex(of: "/"), slash != directory.startIndex {
            directory = directory[..<slash]
            if stat(String(directory), &info) == 0, info.st_dev == cache.st_dev, info.st_ino == cache.st_ino { return true }
        }
        return false
    }

    /// `path` with its links resolved; for a path that does not exist yet, its directory's, and its own name.
    private static func resolved(_ path: String) -> String? {
        if let real = realpath(path, nil) {
            defer { free(real) }
            return String(cString: real)
        }
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        guard let real = realpath(directory, nil) else { return nil }
        defer { free(real) }
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        return String(cString: real) + "/" + name
    }

    /// Writing the copy failed (a full disk, an I/O error): the fetch worked, so not a usage error.
    private static func writeFailure(_ destination: String) -> CLIError {
        let code: ErrorCode = errno == ENOSPC || errno == EDQUOT ? .diskFull : .internal
        return .failed(WireError(code, "cannot write \(destination): \(String(cString: strerror(errno)))"))
    }
}

/// A failed URL in `--json` output.
struct FailedURL: Codable, Sendable {
    var url: String
    var error: WireError
}
