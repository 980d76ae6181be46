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

/// A process started for a test and stopped (by PID) when the test lets go of it, also on failure.
final class ChildProcess {
    let process = Process()
    let stdout = Pipe()
    let stderrPath: String

    init(_ executable: String, _ arguments: [String], stderrPath: String, environment: [String: String]? = nil) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = stdout
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        self.stderrPath = stderrPath
        if let environment { process.environment = environment }
        try process.run()
        Leftovers.track(pid: process.processIdentifier)
    }

    var pid: Int32 { process.processIdentifier }
    var stderrText: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` and waits for the exit; after 2 s, SIGKILL. (Children of the test runner may start with
    /// signals blocked, inherited from the spawning thread.)
    func stop(_ signal: Int32 = SIGTERM) {
        guard process.isRunning else { return }
        kill(pid, signal)
        waitUntil(seconds: 2) { !process.isRunning }
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
        let line = child.stdout.fileHandleForReading.readLine()
        guard let line, line.hasPrefix("PORT "), let port = Int(line.dropFirst(5)) else {
            throw HarnessError("the origin did not start: \(child.stderrText)")
        }
        self.port = port
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
            var range: String? { headers?["Range"] }
            var ifNoneMatch: String? { headers?["If-None-Match"] }
        }
        var counts: [String: Int]
        var log: [Entry]
    }

    func stats() throws -> Stats {
        try JSONDecoder().decode(Stats.self, from: try fetch("/__stats"))
    }

    func count(_ path: String) throws -> Int { try stats().counts[path] ?? 0 }

    /// The exact bytes the origin serves for `path` (fetched directly).
    func body(_ path: String) throws -> Data { try fetch(path) }

    func setDelay(_ seconds: Double) throws { _ = try fetch("/__config", post: "{\"delay\": \(seconds)}") }

    /// A request made with Python's urllib (Foundation on Linux has no HTTP client without FoundationNetworking).
    private func fetch(_ path: String, post: String? = nil) throws -> Data {
        let script = """
            import sys, urllib.request
            data = sys.argv[2].encode() if len(sys.argv) > 2 else None
            sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], data=data).read())
            """
        let result = run("/usr/bin/env", ["python3", "-c", script, url(path)] + (post.map { [$0] } ?? []))
        guard result.status == 0 else { throw HarnessError("origin request \(path) failed: \(result.stderr)") }
        return result.stdoutData
    }
}

/// A prefetchd started in its own temporary directory.
final class DaemonUnderTest: @unchecked Sendable {
    let directory: TemporaryDirectory
    let arguments: [String]
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
func run(_ executable: String, _ arguments: [String], stdin: String? = nil, stdinData: Data? = nil) -> CommandResult {
    _ = brokenPipesIgnored
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let out = Pipe(), err = Pipe(), input = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = input
    do { try process.run() } catch { return CommandResult(status: -1, stdoutData: Data(), stderr: "\(error)") }
    let feed = stdinData ?? stdin.map { Data($0.utf8) }
    DispatchQueue.global().async {
        // A command that exits before reading all of it (a timeout) leaves a broken pipe: not the test's crash.
        if let feed { try? input.fileHandleForWriting.write(contentsOf: feed) }
        try? input.fileHandleForWriting.close()
    }
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data(), errData = Data()
    DispatchQueue.global().async(group: group) { outData = out.fileHandleForReading.readDataToEndOfFile() }
    DispatchQueue.global().async(group: group) { errData = err.fileHandleForReading.readDataToEndOfFile() }
    group.wait()
    process.waitUntilExit()
    return CommandResult(status: process.terminationStatus, stdoutData: outData,
                         stderr: String(decoding: errData, as: UTF8.self))
}

/// A raw protocol connection, for what prefetchctl never sends.
final class RawConnection {
    let fd: Int32
    private var buffer = LineBuffer(limit: 1 << 24)

    init(socket path: String) throws {
        fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
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

    func send(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            offset += n
        }
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
