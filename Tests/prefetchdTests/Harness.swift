import Foundation
import PrefetchProtocol
import Synchronization
import Testing

/// Paths of the built programs and the fixtures.
enum Paths {
    /// The directory holding the test bundle, where `swift build` put the executables too.
    static let products = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        .deletingLastPathComponent().path
    static let prefetchd = products + "/prefetchd"
    static let prefetchctl = products + "/prefetchctl"
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures").path
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path
}

/// A temporary directory removed when the value goes away.
final class TemporaryDirectory {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "pf-test-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        Leftovers.track(directory: path)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
        Leftovers.forget(directory: path)
    }
}

/// Children still running and temporary directories still there when the test process exits: a suite's shared
/// origin lives in a `static let`, which is never deinitialised, so an exit handler stops and removes them.
enum Leftovers {
    static let state = Mutex<(pids: Set<Int32>, directories: Set<String>, registered: Bool)>(([], [], false))

    static func track(pid: Int32? = nil, directory: String? = nil) {
        let register = state.withLock { state -> Bool in
            if let pid { state.pids.insert(pid) }
            if let directory { state.directories.insert(directory) }
            defer { state.registered = true }
            return !state.registered
        }
        if register { atexit { Leftovers.cleanUp() } }
    }

    static func forget(pid: Int32? = nil, directory: String? = nil) {
        state.withLock { state in
            if let pid { state.pids.remove(pid) }
            if let directory { state.directories.remove(directory) }
        }
    }

    static func cleanUp() {
        let (pids, directories) = state.withLock { ($0.pids, $0.directories) }
        for pid in pids { kill(pid, SIGKILL) }
        for directory in directories { try? FileManager.default.removeItem(atPath: directory) }
    }
}

/// A child process started with `posix_spawn` and reaped with `waitpid` by whoever asks. (Foundation's `Process`
/// reaps its children on one monitor thread, which was seen blocked in `waitpid` on a child still running: every
/// `waitUntilExit` of the test run then waited for ever.)
final class Spawned: @unchecked Sendable {
    let processIdentifier: pid_t
    /// The raw wait status, once reaped.
    private let status = Mutex<Int32?>(nil)

    /// Starts `executable` (a full path) with `arguments`, the given environment (else this one's) and descriptors
    /// for its standard streams (else this process's). Signals start unblocked and at their defaults: the test
    /// process ignores SIGPIPE, and the thread that spawns may block some.
    init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
         standardInput: Int32? = nil, standardOutput: Int32? = nil, standardError: Int32? = nil) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (descriptor, target) in [(standardInput, 0), (standardOutput, 1), (standardError, 2)] {
            if let descriptor { posix_spawn_file_actions_adddup2(&actions, descriptor, Int32(target)) }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer {
            argv.forEach { free($0) }
            envp?.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = spawning.withLock { _ in
            if let envp { posix_spawn(&pid, executable, &actions, &attributes, argv, envp) }
            else { posix_spawn(&pid, executable, &actions, &attributes, argv, environ) }
        }
        guard result == 0 else { throw HarnessError("cannot start \(executable): \(String(cString: strerror(result)))") }
        processIdentifier = pid
    }

    var isRunning: Bool { reap() == nil }

    func waitUntilExit() {
        while reap() == nil { usleep(5_000) }
    }

    /// The exit status, or the number of the signal that ended it (as Foundation's `Process` says); it waits for
    /// the end.
    var terminationStatus: Int32 {
        waitUntilExit()
        let raw = reap() ?? 0
        return raw & 0x7f == 0 ? (raw >> 8) & 0xff : raw & 0x7f
    }

    /// The wait status once the child has ended (reaping it then), nil while it runs.
    private func reap() -> Int32? {
        status.withLock { status in
            if let status { return status }
            var raw: Int32 = 0
            var result: pid_t
            repeat { result = waitpid(processIdentifier, &raw, WNOHANG) } while result == -1 && errno == EINTR
            guard result == processIdentifier else { return nil }
            status = raw
            return raw
        }
    }
}

/// The reading end of a child's output.
final class ChildOutput: Sendable {
    let fileHandleForReading: FileHandle
    init(_ descriptor: Int32) { fileHandleForReading = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true) }
}

/// Held while a child is spawned and while a pipe is made close-on-exec, so that no child inherits another's pipe.
private let spawning = Mutex(())

/// A pipe whose ends no child inherits (the child's own end is dup'ed onto its stream).
func closeOnExecPipe() throws -> (read: Int32, write: Int32) {
    var descriptors: [Int32] = [-1, -1]
    try spawning.withLock { _ throws(HarnessError) in
        guard pipe(&descriptors) == 0 else { throw HarnessError("pipe: errno \(errno)") }
        for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
    }
    return (descriptors[0], descriptors[1])
}

/// A process started for a test and stopped (by PID) when the test lets go of it, also on failure.
final class ChildProcess {
    let process: Spawned
    let stdout: ChildOutput
    let stderrPath: String

    init(_ executable: String, _ arguments: [String], stderrPath: String, environment: [String: String]? = nil) throws {
        let output = try closeOnExecPipe()
        let errors = open(stderrPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        defer {
            close(output.write)
            if errors >= 0 { close(errors) }
        }
        guard errors >= 0 else {
            close(output.read)
            throw HarnessError("open \(stderrPath): errno \(errno)")
        }
        stdout = ChildOutput(output.read)
        self.stderrPath = stderrPath
        process = try Spawned(executable, arguments, environment: environment, standardOutput: output.write,
                              standardError: errors)
        Leftovers.track(pid: process.processIdentifier)
    }

    var pid: Int32 { process.processIdentifier }

    /// The port a server child announces on its first line (`PORT <n>`), as the fixtures' origins do.
    func announcedPort() throws -> Int {
        let line = stdout.fileHandleForReading.readLine()
        guard let line, line.hasPrefix("PORT "), let port = Int(line.dropFirst(5)) else {
            throw HarnessError("the server did not start: \(stderrText)")
        }
        return port
    }

    var stderrText: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` and waits for the exit; after 10 s (a loaded machine), SIGKILL.
    func stop(_ signal: Int32 = SIGTERM) {
        guard process.isRunning else { return }
        kill(pid, signal)
        waitUntil(seconds: 10) { !process.isRunning }
        if process.isRunning { kill(pid, SIGKILL) }
        process.waitUntilExit()
        Leftovers.forget(pid: pid)
    }

    deinit { stop(SIGKILL) }
}

/// The scriptable HTTP origin (Fixtures/origin.py) on 127.0.0.1.
final class Origin: @unchecked Sendable {
    let child: ChildProcess
    let port: Int
    private let directory: TemporaryDirectory

    /// Serves HTTPS when given a certificate chain and its key (PEM files).
    init(root: String? = nil, tls: (certificate: String, key: String)? = nil) throws {
        directory = try TemporaryDirectory()
        scheme = tls == nil ? "http" : "https"
        child = try ChildProcess("/usr/bin/env", ["python3", Paths.fixtures + "/origin.py", "--port", "0"] + (root.map { ["--root", $0] } ?? [])
                                 + (tls.map { ["--tls-cert", $0.certificate, "--tls-key", $0.key] } ?? []),
                                 stderrPath: directory.path + "/origin.err")
        port = try child.announcedPort()
    }

    private let scheme: String

    func url(_ path: String) -> String { "\(scheme)://127.0.0.1:\(port)\(path)" }

    struct Stats: Decodable {
        struct Entry: Decodable {
            var path: String
            var query: String
            var status: Int?
            var start: Double
            var end: Double?
            var headers: [String: String]?
            /// The connection's client address and port: requests with the same one shared a connection.
            var client: String
            /// Over TLS: whether the connection resumed a TLS session.
            var tlsResumed: Bool?
            var range: String? { headers?["Range"] }
            var ifNoneMatch: String? { headers?["If-None-Match"] }

            enum CodingKeys: String, CodingKey {
                case path, query, status, start, end, headers, client
                case tlsResumed = "tls_resumed"
            }
        }
        var counts: [String: Int]
        var log: [Entry]
        /// Bytes sent by `endless_extension=1` responses.
        var extensionBytes: Int

        enum CodingKeys: String, CodingKey {
            case counts, log
            case extensionBytes = "extension_bytes"
        }
    }

    func stats() throws -> Stats {
        try JSONDecoder().decode(Stats.self, from: try fetch("/__stats"))
    }

    func count(_ path: String) throws -> Int { try stats().counts[path] ?? 0 }

    /// The exact bytes the origin serves for `path` (fetched directly).
    func body(_ path: String) throws -> Data { try fetch(path) }

    func setDelay(_ seconds: Double) throws { _ = try fetch("/__config", post: "{\"delay\": \(seconds)}") }

    /// Lets the requests held by `hold=1` answer (and every later one at once).
    func release() throws { _ = try fetch("/__release", post: "{}") }

    /// A request made with Python's urllib (Foundation on Linux has no HTTP client without FoundationNetworking).
    private func fetch(_ path: String, post: String? = nil) throws -> Data {
        let script = """
            import ssl, sys, urllib.request
            data = sys.argv[2].encode() if len(sys.argv) > 2 else None
            # The origin's own certificate, from a test CA: the control endpoints need no trust.
            context = ssl._create_unverified_context()
            sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], data=data, context=context).read())
            """
        let result = run("/usr/bin/env", ["python3", "-c", script, url(path)] + (post.map { [$0] } ?? []))
        guard result.status == 0 else { throw HarnessError("origin request \(path) failed: \(result.stderr)") }
        return result.stdoutData
    }
}

/// A prefetchd started in its own temporary directory.
final class DaemonUnderTest: @unchecked Sendable {
    let directory: TemporaryDirectory
    /// The daemon's arguments beyond the socket and the cache directory, at the next `start`.
    var arguments: [String]
    let environment: [String: String]?
    /// A command that runs the daemon (it is appended, with its arguments), such as `unshare --net`; it must exec it.
    let launcher: [String]
    private(set) var child: ChildProcess?
    var socket: String { directory.path + "/ctl.sock" }
    var cache: String { directory.path + "/cache" }

    init(_ extra: [String] = [], environment: [String: String]? = nil, launcher: [String] = []) throws {
        directory = try TemporaryDirectory()
        arguments = extra
        self.environment = environment
        self.launcher = launcher
        try start()
    }

    func start() throws {
        let command = launcher + [Paths.prefetchd, "--socket", socket, "--cache-dir", cache] + arguments
        child = try ChildProcess(command[0], Array(command.dropFirst()), stderrPath: directory.path + "/daemon.log",
                                 environment: environment)
        for _ in 0..<200 {
            if ctl("ping").status == 0 { return }
            guard child!.process.isRunning else { throw HarnessError("prefetchd exited: \(child!.stderrText)") }
            usleep(25_000)
        }
        throw HarnessError("prefetchd did not answer within 5 s: \(child!.stderrText)")
    }

    func kill9() { child?.stop(SIGKILL) }
    var log: String { child?.stderrText ?? "" }

    /// Runs prefetchctl against this daemon.
    @discardableResult
    func ctl(_ arguments: String..., stdin: String? = nil) -> CommandResult {
        run(Paths.prefetchctl, ["--socket", socket] + arguments, stdin: stdin)
    }

    func ctl(arguments: [String], stdin: String? = nil) -> CommandResult {
        run(Paths.prefetchctl, ["--socket", socket] + arguments, stdin: stdin)
    }

    deinit { child?.stop(SIGKILL) }
}

struct CommandResult {
    var status: Int32
    var stdoutData: Data
    var stderr: String
    var stdout: String { String(decoding: stdoutData, as: UTF8.self) }
    var lines: [String] { stdout.split(separator: "\n").map(String.init) }
}

/// Writing stdin to a child that has already exited must fail the write, not kill the test process.
private let brokenPipesIgnored: Void = { signal(SIGPIPE, SIG_IGN) }()

/// Runs a program to completion.
/// Writes a PNG of `size` (`WxH`) drawn from ImageMagick's `picture` (`xc:teal`, `gradient:navy-gold`) at `path`, by
/// rename: an origin serving `path` changes its body at once, never half-written.
func writePicture(_ path: String, size: String, _ picture: String) -> Bool {
    run("/usr/bin/convert", ["-size", size, picture, "png:" + path + ".new"]).status == 0 && rename(path + ".new", path) == 0
}

func run(_ executable: String, _ arguments: [String], stdin: String? = nil, stdinData: Data? = nil) -> CommandResult {
    _ = brokenPipesIgnored
    let child: Spawned
    let input: (read: Int32, write: Int32), out: (read: Int32, write: Int32), err: (read: Int32, write: Int32)
    do {
        (input, out, err) = (try closeOnExecPipe(), try closeOnExecPipe(), try closeOnExecPipe())
        defer { [input.read, out.write, err.write].forEach { close($0) } }
        child = try Spawned(executable, arguments, standardInput: input.read, standardOutput: out.write,
                            standardError: err.write)
    } catch {
        return CommandResult(status: -1, stdoutData: Data(), stderr: "\(error)")
    }
    let feed = stdinData ?? stdin.map { Data($0.utf8) }
    DispatchQueue.global().async {
        // A command that exits before reading all of it (a timeout) leaves a broken pipe: not the test's crash.
        let writer = FileHandle(fileDescriptor: input.write, closeOnDealloc: true)
        if let feed { try? writer.write(contentsOf: feed) }
        try? writer.close()
    }
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data(), errData = Data()
    DispatchQueue.global().async(group: group) {
        outData = FileHandle(fileDescriptor: out.read, closeOnDealloc: true).readDataToEndOfFile()
    }
    DispatchQueue.global().async(group: group) {
        errData = FileHandle(fileDescriptor: err.read, closeOnDealloc: true).readDataToEndOfFile()
    }
    group.wait()
    return CommandResult(status: child.terminationStatus, stdoutData: outData,
                         stderr: String(decoding: errData, as: UTF8.self))
}

/// A raw protocol connection, for what prefetchctl never sends.
final class RawConnection {
    let fd: Int32
    private var buffer = LineBuffer(limit: 1 << 24)

    init(socket path: String) throws {
        fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8)
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else { throw HarnessError("connect \(path): errno \(errno)") }
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ text: String) { Self.send(Array(text.utf8), to: fd) }

    /// Sends `text` from a thread of its own, while the caller reads the replies (a payload larger than the socket's
    /// buffers would otherwise block both sides).
    func sendInBackground(_ text: String) {
        let bytes = Array(text.utf8), fd = fd
        Thread { Self.send(bytes, to: fd) }.start()
    }

    /// Writes `bytes` whole, or until the connection fails.
    private static func send(_ bytes: [UInt8], to fd: Int32) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            offset += n
        }
    }

    /// Whether the daemon closed the connection and nothing it sent before is left unread (does not wait).
    var isClosedByPeer: Bool {
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    /// Half-closes the connection: the daemon reads the end of the stream, and may still write.
    func finishSending() { shutdown(fd, Int32(SHUT_WR)) }

    /// The next line as a JSON object; nil at end of stream.
    func receive() -> [String: Any]? {
        while true {
            if case .line(let line)? = buffer.next() {
                return (try? JSONSerialization.jsonObject(with: Data(line))) as? [String: Any]
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            buffer.append(chunk[..<n])
        }
    }
}

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension FileHandle {
    /// One line of text, without its newline.
    func readLine() -> String? {
        var bytes: [UInt8] = []
        while true {
            let byte = readData(ofLength: 1)
            if byte.isEmpty { return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }
            if byte[0] == 0x0A { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte[0])
        }
    }
}

/// The error code in a `get --json` failure line.
func errorCode(_ line: String) -> String? {
    guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
          let error = object["error"] as? [String: Any] else { return nil }
    return error["code"] as? String
}

/// Polls `condition` every 20 ms until it holds or `seconds` pass; returns whether it held.
@discardableResult
func waitUntil(seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(20_000)
    }
    return try condition()
}
