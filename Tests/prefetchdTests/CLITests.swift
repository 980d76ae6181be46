import Foundation
import PrefetchProtocol
import Synchronization
import Testing

/// A socket that greets like prefetchd, keeps every request line it reads and answers each with `reply(line)`:
/// what prefetchctl puts on the wire, which the real daemon does not show.
final class RecordingDaemon: @unchecked Sendable {
    let socket: String
    private let directory: TemporaryDirectory
    private let listener: Int32
    private let received = Mutex<[String]>([])
    private let finished = DispatchSemaphore(value: 0)
    private let released = DispatchSemaphore(value: 0)

    /// `reply` gives each request line's reply, or nil for none. Not `reading`, it reads nothing after its greeting
    /// (a daemon stopped with SIGSTOP) until it goes.
    init(greeting: String = "{\"hello\":\"prefetchd\",\"version\":\"0.1.0\",\"protocol\":1}", reading: Bool = true,
         reply: @escaping @Sendable (String) -> String?) throws {
        directory = try TemporaryDirectory()
        socket = directory.path + "/ctl.sock"
        listener = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(socket.utf8)
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 1) == 0 else { throw HarnessError("bind/listen \(socket): errno \(errno)") }
        let fd = listener
        DispatchQueue.global().async { [self] in
            defer { finished.signal() }
            let connection = accept(fd, nil, nil)
            guard connection >= 0 else { return }
            defer { close(connection) }
            func write(_ text: String) {
                var bytes = Array(text.utf8)
                var offset = 0
                while offset < bytes.count {
                    let n = bytes.withUnsafeMutableBytes { send(connection, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                    if n <= 0 { return }
                    offset += n
                }
            }
            write(greeting + "\n")
            guard reading else {
                _ = released.wait(timeout: .now() + 60)
                return
            }
            var buffer = LineBuffer(limit: 1 << 24)
            while true {
                while case .line(let bytes)? = buffer.next() {
                    let line = String(decoding: bytes, as: UTF8.self)
                    received.withLock { $0.append(line) }
                    if let answer = reply(line) { write(answer + "\n") }
                }
                var chunk = [UInt8](repeating: 0, count: 65536)
                let n = read(connection, &chunk, chunk.count)
                if n <= 0 { return }
                buffer.append(chunk[..<n])
            }
        }
    }

    /// Also wakes the accepting thread when prefetchctl never connected.
    deinit {
        released.signal()
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    /// The request lines, once prefetchctl has closed its connection.
    func lines() -> [String] {
        _ = finished.wait(timeout: .now() + 60)
        return received.withLock { $0 }
    }

    /// The id of a request line, for a reply.
    static func id(_ line: String) -> Int {
        ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])?["id"] as? Int ?? 0
    }
}

/// `prefetchctl` as a user meets it: one exit-code rule for every verb, usage errors, output that says which line is
/// which URL, plurals, and what it writes on the wire.
@Suite(.serialized)
struct CLITests {
    static let origin = try! Origin()

    @Test("a bad --quality, --size, --fit, --format, --timeout… exits 2 like every usage error, for get and view alike, and sends nothing")
    func badOptionValues() throws {
        let daemon = try DaemonUnderTest()
        let url = Self.origin.url("/never-sent.jpg")
        let cases: [[String]] = [
            ["get", "--size", "100x100", "--quality", "0", url],
            ["get", "--size", "0x0", url],
            ["get", "--size", "100", url],
            ["get", "--size", "100x100", "--fit", "round", url],
            ["get", "--size", "100x100", "--format", "gif", url],
            ["get", "--timeout", "1e300", url],
            ["get", "--timeout", "inf", url],
            ["get", "--max-stale", "-1", url],
            ["view", "--size", "0x0", "-"],
            ["view", "--size", "64x64", "--fit", "round", "-"],
            ["view", "--ahead", "5000", "-"],
            ["list", "--limit", "-1"],
            ["queue", "--wait", "--timeout", "0", url],
        ]
        for arguments in cases {
            // No stdin: a usage error exits before reading it (and a write to its pipe would be a SIGPIPE here).
            let result = daemon.ctl(arguments: arguments)
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
            #expect(result.stderr.hasPrefix("prefetchctl: "), "\(arguments): \(result.stderr)")
        }
        #expect(try Self.origin.count("/never-sent.jpg") == 0, "nothing reached the origin")
        #expect(!daemon.ctl("info", url).stdout.contains("task:"), "the daemon holds no task for it")
    }

    @Test("a mistyped verb, option or setting is named with the one meant (exit 2 and 1, before connecting or starting)")
    func didYouMean() throws {
        let verb = run(Paths.prefetchctl, ["--socket", "/nonexistent/ctl.sock", "gte", "http://example.com/a.jpg"])
        #expect(verb.status == 2 && verb.stderr == "prefetchctl: unknown verb 'gte'; did you mean 'get'? (see prefetchctl --help)\n",
                "\(verb.stderr)")
        let option = run(Paths.prefetchctl, ["--socket", "/nonexistent/ctl.sock", "get", "--tiemout=3", "http://example.com/a.jpg"])
        #expect(option.status == 2 && option.stderr.contains("unknown option '--tiemout=3'; did you mean '--timeout'?"),
                "\(option.stderr)")
        let unlike = run(Paths.prefetchctl, ["--socket", "/nonexistent/ctl.sock", "fetch", "http://example.com/a.jpg"])
        #expect(unlike.status == 2 && unlike.stderr == "prefetchctl: unknown verb 'fetch' (see prefetchctl --help)\n",
                "\(unlike.stderr)")
        let flag = run(Paths.prefetchd, ["--check-config", "--cache-dri", "/tmp/x"])
        #expect(flag.status == 1 && flag.stderr.contains("unknown option '--cache-dri'; did you mean '--cache-dir'?"),
                "\(flag.stderr)")
    }

    @Test("info of a URL the daemon refuses names the URL, as get does (it said only 'invalid_url: …')")
    func infoNamesTheURL() throws {
        let daemon = try DaemonUnderTest()
        let result = daemon.ctl("info", "example.com/a.jpg")
        #expect(result.status == 4 && result.stderr.hasPrefix("prefetchctl: example.com/a.jpg: invalid_url: "), "\(result.stderr)")
    }

    @Test("an option the verb does not take is a usage error (exit 2), not silently ignored")
    func optionsTheVerbDoesNotTake() throws {
        let daemon = try DaemonUnderTest()
        let url = Self.origin.url("/not-this-way.jpg")
        for arguments in [["status", "--limit", "3"], ["ping", "--size", "64x64"], ["cancel", "--wait", url],
                          ["queue", "--timeout", "5", url], ["info", "--offline", url], ["demote", "--all"],
                          ["get", "--ahead", "3", url]] {
            let result = daemon.ctl(arguments: arguments)
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
        }
        #expect(try Self.origin.count("/not-this-way.jpg") == 0)
    }

    @Test("a flag of another verb (get --limit 3, queue --offline, demote --wait, info --size, list --max-stale) exits 2 naming the flag and the verb, whatever its value and wherever it stands; nothing is sent")
    func flagOfAnotherVerb() throws {
        let daemon = try DaemonUnderTest()
        let url = Self.origin.url("/foreign-flag.jpg")
        let cases: [(arguments: [String], verb: String, flag: String)] = [
            (["get", "--limit", "3", url], "get", "--limit"),
            (["queue", "--offline", url], "queue", "--offline"),
            (["demote", "--wait", url], "demote", "--wait"),
            (["info", "--size", "64x64", url], "info", "--size"),
            (["list", "--max-stale", "5"], "list", "--max-stale"),
            // Before the verb; with a value no verb would take; taking the URL as its value; spelled short or with `=`.
            (["--limit", "3", "get", url], "get", "--limit"),
            (["get", "--limit", "-1", url], "get", "--limit"),
            (["info", "--limit", url], "info", "--limit"),
            (["queue", url, "--size"], "queue", "--size"),
            (["list", "-o", "tasks.txt"], "list", "-o"),
            (["status", "--ahead=5000"], "status", "--ahead"),
        ]
        for (arguments, verb, flag) in cases {
            let result = daemon.ctl(arguments: arguments)
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
            #expect(result.stderr == "prefetchctl: \(verb) does not take \(flag) (see prefetchctl \(verb) --help)\n",
                    "\(arguments): \(result.stderr)")
            #expect(result.stdout.isEmpty, "\(arguments): \(result.stdout)")
        }
        #expect(try Self.origin.count("/foreign-flag.jpg") == 0, "nothing reached the origin")
        let info = daemon.ctl("info", "--json", url)
        #expect(info.status == 0 && !info.stdout.contains("\"task\"") && !info.stdout.contains("\"cached\""), "\(info.stdout)")
    }

    @Test("each verb's own flags still work: get --timeout --max-stale -o, get --offline --size --fit --format --quality --upscale, queue --now --wait --timeout, demote, info, list --limit, status, ping with --json, evict --all")
    func ownFlagsStillWork() throws {
        let daemon = try DaemonUnderTest()
        let directory = try TemporaryDirectory()
        let url = Self.origin.url("/own-flags.jpg"), later = Self.origin.url("/own-flags-later.jpg")
        let copy = directory.path + "/copy.jpg"
        let got = daemon.ctl("get", "--timeout", "30", "--max-stale", "60", "-o", copy, url)
        #expect(got.status == 0, "\(got.stderr)")
        #expect(FileManager.default.contents(atPath: copy) == (try Self.origin.body("/own-flags.jpg")))
        let thumb = daemon.ctl("get", "--offline", "--size", "4x4", "--fit", "cover", "--format", "jpeg", "--quality", "80",
                               "--upscale", "--json", url)
        #expect(thumb.status == 0 && thumb.stdout.contains("\"variant\":\"4x4-cover-jpeg-q80"), "\(thumb.stdout) \(thumb.stderr)")
        let queued = daemon.ctl("queue", "--now", "--wait", "--timeout", "30", later)
        #expect(queued.status == 0, "\(queued.stderr)")
        for arguments in [["demote", "--json", later], ["info", "--json", later], ["list", "--limit", "1", "--json"],
                          ["status", "--json"], ["ping", "--json"], ["evict", "--all", "--json"]] {
            let result = daemon.ctl(arguments: arguments)
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            #expect(result.stdout.hasPrefix("{"), "\(arguments): \(result.stdout)")
        }
    }

    @Test("get -o into the cache directory is refused, and nothing is made there (it wrote the JPEG over the live index.sqlite: 83 entries lost)")
    func outputIntoTheCache() throws {
        let daemon = try DaemonUnderTest()
        let url = Self.origin.url("/output-cache.jpg")
        #expect(daemon.ctl("get", url).status == 0)
        let index = daemon.cache + "/index.sqlite"
        let before = FileManager.default.contents(atPath: index)
        let link = daemon.cache + "/../into-cache"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: daemon.cache)
        for target in [index, daemon.cache + "/files/new-file", link + "/index.sqlite"] {
            let result = daemon.ctl("get", "-o", target, url)
            #expect(result.status == 2 && result.stderr.contains("is inside the cache"), "\(target): \(result.stderr)")
        }
        // A link to a file not made yet in the cache: open would make it there.
        let dangling = daemon.cache + "/../dangling"
        try FileManager.default.createSymbolicLink(atPath: dangling, withDestinationPath: daemon.cache + "/files/via-link")
        let viaLink = daemon.ctl("get", "-o", dangling, url)
        #expect(viaLink.status == 2 && viaLink.stderr.contains("is a link to nothing"), "\(viaLink.stderr)")
        #expect(!FileManager.default.fileExists(atPath: daemon.cache + "/files/via-link"))
        // Another name of a cached file (a hard link), or of the cache directory (a bind mount: checked by hand).
        let cachedFile = daemon.ctl("get", Self.origin.url("/output-cache-2.jpg")).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let hardLink = daemon.cache + "/../hard-link"
        #expect(Glibc.link(cachedFile, hardLink) == 0)
        let viaHardLink = daemon.ctl("get", "-o", hardLink, url)
        #expect(viaHardLink.status == 2 && viaHardLink.stderr.contains("is inside the cache"), "\(viaHardLink.stderr)")
        #expect(FileManager.default.contents(atPath: index) == before)
        #expect(!FileManager.default.fileExists(atPath: daemon.cache + "/files/new-file"))
        #expect(daemon.ctl("info", url).status == 0, "the daemon serves its index")
    }

    @Test("get -o onto the cached file itself is refused and leaves it whole (it emptied it under the daemon); a copy that cannot be written is a failure, exit 1, not a usage error")
    func outputOntoTheCachedFile() throws {
        let daemon = try DaemonUnderTest()
        let url = Self.origin.url("/output-self.jpg")
        let cached = daemon.ctl("get", url).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let body = try Self.origin.body("/output-self.jpg")
        #expect(FileManager.default.contents(atPath: cached) == body)
        let onto = daemon.ctl("get", "-o", cached, url)
        #expect(onto.status == 2 && onto.stderr.contains("is the cached file itself"), "\(onto.stderr)")
        #expect(FileManager.default.contents(atPath: cached) == body, "the cached file is whole")
        let full = daemon.ctl("get", "-o", "/dev/full", url)
        #expect(full.status == 1 && full.stderr.contains("disk_full: cannot write /dev/full"), "\(full.stderr)")
    }

    @Test("get -o /dev/stdout writes to the stream the shell gave it: a socket (open failed: ENXIO) and a file opened with >> (written over from its start), but never the cache (appended to, the cached file grew until the disk was full), nor a descriptor not open for writing when it starts (an image's bytes went to its own socket to the daemon, whose lines ran as requests)")
    func outputToItsOwnStream() throws {
        let daemon = try DaemonUnderTest()
        let directory = try TemporaryDirectory()
        let url = Self.origin.url("/own-stream.jpg")
        let body = try Self.origin.body("/own-stream.jpg")
        let appended = directory.path + "/appended"
        try Data("before\n".utf8).write(to: URL(fileURLWithPath: appended))
        let shell = { (output: String, redirection: String, file: String) in
            run("/bin/sh", ["-c", "exec \"$0\" --socket \"$1\" get -o \(output) \"$2\" \(redirection) \"$3\"", Paths.prefetchctl,
                            daemon.socket, url, file])
        }
        for name in ["/dev/stdout", "/proc/self/fd/1"] {
            let result = shell(name, ">>", appended)
            #expect(result.status == 0, "\(name): \(result.stderr)")
        }
        #expect(FileManager.default.contents(atPath: appended) == Data("before\n".utf8) + body + body)
        let onSocket = """
            import socket, subprocess, sys
            ours, theirs = socket.socketpair()
            child = subprocess.Popen(sys.argv[1:], stdout=theirs)
            theirs.close()
            data = b""
            while chunk := ours.recv(65536):
                data += chunk
            sys.stdout.buffer.write(data)
            sys.exit(child.wait())
            """
        let socket = run("/usr/bin/env", ["python3", "-c", onSocket, Paths.prefetchctl, "--socket", daemon.socket,
                                          "get", "-o", "/dev/stdout", url])
        #expect(socket.status == 0 && socket.stdoutData == body, "\(socket.status) \(socket.stderr)")
        // A descriptor not open when prefetchctl starts: by the copy, that number may be its socket to the daemon (an
        // image's lines were read as requests: an evict --all emptied the cache). Each refused before anything is sent.
        let refusals = [("/dev/fd/3", "", "-o /dev/fd/3: descriptor 3 is not open"),
                        ("/proc/self/fd/4", "", "-o /proc/self/fd/4: descriptor 4 is not open"),
                        // However spelled (they were opened after the fetch: the socket refused, the cached file caught).
                        ("//dev/./fd/3", "", "-o //dev/./fd/3: descriptor 3 is not open"),
                        ("/proc/self/../self/fd/3", "", "-o /proc/self/../self/fd/3: descriptor 3 is not open"),
                        ("/proc/thread-self/fd/3", "", "-o /proc/thread-self/fd/3: descriptor 3 is not open"),
                        ("/proc/$$/fd/3", "", "/fd/3: descriptor 3 is not open"),  // $$: prefetchctl's, after exec
                        ("/dev/stderr", "2>&-", "-o /dev/stderr: descriptor 2 is not open"),
                        ("/dev/fd/01", "", "-o /dev/fd/01 names no descriptor"),
                        ("/dev/fd/+1", "", "-o /dev/fd/+1 names no descriptor"),
                        ("/dev/fd/3", "3</etc/hostname", "-o /dev/fd/3: descriptor 3 is open for reading only")]
        for (name, redirection, message) in refusals {
            let refused = run("/bin/sh", ["-c", "exec \"$0\" --socket \"$1\" get -o \(name) \"$2\" \(redirection)",
                                          Paths.prefetchctl, daemon.socket, Self.origin.url("/never.jpg")])
            // (Without stderr the message goes nowhere: the status tells.)
            #expect(refused.status == 2 && (redirection == "2>&-" || refused.stderr.contains(message)),
                    "\(name) \(redirection): \(refused.status) \(refused.stderr)")
        }
        #expect(try Self.origin.count("/never.jpg") == 0)
        // The cached file itself, or another entry's: -o - is checked as its name is.
        let cached = daemon.ctl("get", url).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        for output in ["/dev/stdout", "-"] {
            let onto = shell(output, ">>", cached)
            #expect(onto.status == 2 && onto.stderr.contains("is the cached file itself"), "\(output): \(onto.stderr)")
        }
        #expect(FileManager.default.contents(atPath: cached) == body)
        let other = daemon.ctl("get", Self.origin.url("/own-stream-other.jpg")).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let otherBody = try Self.origin.body("/own-stream-other.jpg")
        let intoOther = shell("-", ">>", other)
        #expect(intoOther.status == 2 && intoOther.stderr.contains("is inside the cache"), "\(intoOther.stderr)")
        #expect(FileManager.default.contents(atPath: other) == otherBody)
    }

    @Test("output that cannot be written (a full disk, a closed stdout) fails the command, saying so (status, list, get… exited 0)",
          arguments: ["> /dev/full", ">&-"])
    func unwritableOutputFails(redirection: String) throws {
        let daemon = try DaemonUnderTest()
        for verb in ["status", "ping", "formats"] {
            let result = run("/bin/sh", ["-c", "exec \"$0\" --socket \"$1\" \(verb) \(redirection)", Paths.prefetchctl, daemon.socket])
            #expect(result.status == 1 && result.stderr.hasPrefix("prefetchctl: cannot write the output"), "\(verb): \(result.stderr)")
        }
        #expect(run("/bin/sh", ["-c", "exec \"$0\" --socket \"$1\" ping > /dev/null", Paths.prefetchctl, daemon.socket]).status == 0)
    }

    @Test("a URL list is read in lines a request may hold, and a failed read is no end of the list (queue - </dev/zero took 4.2 GB; a directory was an empty list: view exited 0)")
    func listReadingIsBounded() throws {
        let daemon = try DaemonUnderTest()
        let endless = run("/bin/sh", ["-c", "exec \"$0\" --socket \"$1\" queue - < /dev/zero", Paths.prefetchctl, daemon.socket])
        #expect(endless.status == 2 && endless.stderr.contains("stdin, line 1: longer than 1048576 bytes"), "\(endless.stderr)")
        for command in ["get - < /tmp", "queue - < /tmp", "view /tmp"] {
            let result = run("/bin/sh", ["-c", "exec \"$0\" --socket \"$1\" \(command)", Paths.prefetchctl, daemon.socket])
            #expect(result.status == 2 && result.stderr.contains("cannot read: Is a directory"), "\(command): \(result.stderr)")
        }
    }

    @Test("an argument that is not UTF-8 text is a usage error (it was repaired to U+FFFD and another URL was fetched)")
    func argumentNotUTF8() throws {
        let result = run("/bin/sh", ["-c", "exec \"$0\" --socket /nonexistent.sock info \"$(printf 'http://x/\\377\\376')\"",
                                     Paths.prefetchctl])
        #expect(result.status == 2 && result.stderr.contains("argument 4 is not UTF-8 text"), "\(result.stderr)")
    }

    @Test("a URL list line that is not UTF-8 text (stdin or a view's file) is a usage error naming the line; nothing is sent (it was repaired to U+FFFD)")
    func listLineNotUTF8() throws {
        let daemon = try DaemonUnderTest()
        let good = Self.origin.url("/list-good.jpg")
        let list = Data((good + "\n# a comment\n").utf8) + Data([0x68, 0x74, 0x74, 0x70, 0x3A, 0x2F, 0x2F, 0x78, 0x2F, 0xFF, 0x0A])
        for verb in ["get", "queue"] {
            let result = run(Paths.prefetchctl, ["--socket", daemon.socket, verb, "-"], stdinData: list)
            #expect(result.status == 2 && result.stderr.contains("stdin, line 3: not UTF-8 text"), "\(verb): \(result.stderr)")
            #expect(result.stdout.isEmpty, "\(verb): \(result.stdout)")
        }
        let directory = try TemporaryDirectory()
        let file = directory.path + "/rows.txt"
        try list.write(to: URL(fileURLWithPath: file))
        let view = daemon.ctl("view", file, stdin: "")
        #expect(view.status == 2 && view.stderr.contains("\(file), line 3: not UTF-8 text"), "\(view.stderr)")
        #expect(daemon.ctl("list").stdout.isEmpty, "\(daemon.ctl("list").stdout)")
        #expect(try Self.origin.count("/list-good.jpg") == 0)
    }

    @Test("status x, list x, ping x (every verb taking no operands) exit 2 instead of ignoring the word; so do info A B and view A B")
    func extraOperands() throws {
        let daemon = try DaemonUnderTest()
        for arguments in [["status", "x"], ["list", "x"], ["ping", "x"], ["formats", "x"], ["metrics", "x"], ["watch", "x"],
                          ["info", "http://a/1.jpg", "http://a/2.jpg"], ["view", "a.txt", "b.txt"],
                          ["get", "-", Self.origin.url("/x.jpg")]] {
            let result = daemon.ctl(arguments: arguments)
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
            #expect(result.stdout.isEmpty, "\(arguments): \(result.stdout)")
        }
    }

    @Test("--timeout also bounds the wait for the greeting: a socket that accepts and never greets is exit 3 after the --timeout when shorter than 5 s (it waited 5 s whatever --timeout said)")
    func timeoutBoundsTheGreeting() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/silent.sock"
        let silent = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(silent) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(path.utf8))
            raw[path.utf8.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(silent, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && listen(silent, 8) == 0, "errno \(errno)")  // never accepted: connect succeeds, no greeting
        for (timeout, said) in [("1", "within 1 s"), ("0.5", "within 0.5 s"), ("30", "within 5 s")] {
            let result = run(Paths.prefetchctl, ["--socket", path, "status", "--timeout", timeout])
            #expect(result.status == 3 && result.stderr.contains("accepted the connection but sent no greeting \(said)"),
                    "--timeout \(timeout): \(result.stderr)")
        }
    }

    @Test("a wrong command line is exit 2 even when no daemon is running (checked before connecting), not 3")
    func usageBeforeConnecting() throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/nothing.sock"
        for arguments in [["status", "x"], ["get"], ["get", "--size", "0x0", "http://a/1.jpg"], ["queue", "--timeout", "1", "http://a/"]] {
            let result = run(Paths.prefetchctl, ["--socket", socket] + arguments)
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
        }
        #expect(run(Paths.prefetchctl, ["--socket", socket, "status"]).status == 3)
    }

    @Test("bare prefetchctl prints the usage on stderr and exits 2; --help prints it on stdout and exits 0")
    func bareCommand() {
        let bare = run(Paths.prefetchctl, [])
        #expect(bare.status == 2)
        #expect(bare.stdout.isEmpty)
        #expect(bare.stderr.contains("Usage: prefetchctl"))
        let help = run(Paths.prefetchctl, ["--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("Usage: prefetchctl"))
        #expect(help.stderr.isEmpty)
    }

    @Test("get A B C where B fails: line N of stdout is URL N's (B's is empty) and the error line names B")
    func severalURLsStayInStep() throws {
        let daemon = try DaemonUnderTest()
        let a = Self.origin.url("/step-a.jpg"), b = Self.origin.url("/step-b.jpg?status=404"), c = Self.origin.url("/step-c.jpg")
        let result = daemon.ctl("get", a, b, c)
        #expect(result.status == 1, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.count == 4 && lines[3].isEmpty, "three lines: \(lines)")
        #expect(lines[0] == daemon.ctl("get", a).stdout.trimmingCharacters(in: .newlines))
        #expect(lines[1].isEmpty)
        #expect(lines[2] == daemon.ctl("get", c).stdout.trimmingCharacters(in: .newlines))
        #expect(result.stderr.contains("\(b): http_status"), "\(result.stderr)")

        // One URL: the path alone, or nothing at all, so `feh "$(prefetchctl get URL)"` keeps working.
        let one = daemon.ctl("get", a)
        #expect(one.stdout == lines[0] + "\n")
        let failed = daemon.ctl("get", b)
        #expect(failed.status == 1 && failed.stdout.isEmpty)
    }

    @Test("get --timeout with a slow URL before a cached one prints the cached URL's path too, each on its own line")
    func timeoutKeepsAnsweredURLs() throws {
        let daemon = try DaemonUnderTest()
        let cached = Self.origin.url("/answered.jpg")
        let path = daemon.ctl("get", cached).stdout.trimmingCharacters(in: .newlines)
        let result = daemon.ctl("get", "--timeout", "0.5", Self.origin.url("/slow.jpg?delay=5"), cached)
        #expect(result.status == 5)
        #expect(result.stdout == "\n" + path + "\n", "\(result.stdout)")
        #expect(result.stderr.contains("slow.jpg?delay=5: timeout"), "\(result.stderr)")
    }

    @Test("counts agree with their nouns: 1 URL, 1 entry, 1 miss, 1 connection")
    func plurals() throws {
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("get", Self.origin.url("/plural.jpg")).status == 0)
        var status = ""
        // The `get` connection may not be closed yet when `status` asks.
        waitUntil(seconds: 5) {
            status = daemon.ctl("status").stdout
            return status.contains("1 connection\n")
        }
        #expect(status.contains("1 connection\n") && status.contains("cache: 1 entry,") && status.contains("(0 hits, 1 miss)"),
                "\(status)")
        #expect(status.contains(" kB of 1.1 GB, hit ratio"), "sizes a person reads (1 GiB limit): \(status)")
        let waited = daemon.ctl("queue", "--wait", "--timeout", "0.5", Self.origin.url("/plural-slow.jpg?delay=5"))
        #expect(waited.status == 5)
        #expect(waited.stderr.contains("1 URL still not fetched after 0.5 s; it stays queued"), "\(waited.stderr)")
        let evicted = daemon.ctl("evict", "--all").stderr
        let count = evicted.split(separator: " ").dropFirst(2).first.flatMap { Int($0) }
        #expect(evicted == "prefetchctl: evicted \(count ?? -1) \(count == 1 ? "entry" : "entries")\n", "\(evicted)")
    }

    @Test("queue --wait --timeout shorter than sending the list, or than the daemon takes to greet: every URL is sent and queued, and the message counts them all (the rest of the list was dropped silently; a greeting later than --timeout was exit 3, nothing queued)")
    func queueWaitTimeoutSendsAll() throws {
        let daemon = try DaemonUnderTest()
        let pid = try #require(daemon.child?.process.processIdentifier)
        let urls = (0..<20_000).map { Self.origin.url("/timeout-list/\($0).jpg?delay=30") }
        // Stopped for 2 s, the daemon greets long after the --timeout (however slowly prefetchctl starts), and
        // within the 5 s prefetchctl waits for a greeting.
        kill(pid, SIGSTOP)
        DispatchQueue.global().asyncAfter(deadline: .now() + 2) { kill(pid, SIGCONT) }
        let waited = daemon.ctl("queue", "--wait", "--timeout", "0.001", "-", stdin: urls.joined(separator: "\n") + "\n")
        #expect(waited.status == 5)
        #expect(waited.stderr.contains("20000 queued; 0 finished, 0 failed"), "\(waited.stderr)")
        #expect(waited.stderr.contains("20000 URLs still not fetched after 0.001 s; they stay queued"), "\(waited.stderr)")
        let status = try #require(try JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any])
        let slow = status["slow"] as? [String: Any] ?? [:]
        let held = (status["backlog"] as? Int ?? 0) + (slow["waiting"] as? Int ?? 0) + (slow["running"] as? Int ?? 0)
        #expect(held == urls.count, "\(status)")
    }

    @Test("a queue the daemon refuses part of (its disk full) says how many URLs were queued, durably, and how many were not (it said \"nothing was queued\" after thousands were)",
          .enabled(if: getuid() == 0, "mounting a tmpfs needs root"))
    func queueOnAFullDiskCounts() throws {
        let disk = try TemporaryDirectory()
        try #require(mount("tmpfs", disk.path, "tmpfs", 0, "size=4m,mode=0700") == 0)
        defer { umount2(disk.path, Int32(MNT_DETACH)) }
        let daemon = try DaemonUnderTest(["--cache-dir", disk.path + "/cache", "--quiet-hours", "00:00-23:59"])
        let urls = (0..<30_000).map { "http://127.0.0.1:9/full/\($0)/" + String(repeating: "y", count: 400) + ".jpg" }
        let result = daemon.ctl("queue", "-", stdin: urls.joined(separator: "\n") + "\n")
        #expect(result.status == 1, "\(result.stderr)")
        let summary = try #require(result.stderr.split(separator: "\n").first { $0.hasSuffix(" queued") }, "\(result.stderr)")
        let queued = try #require(Int(summary.dropFirst("prefetchctl: ".count).dropLast(" queued".count)))
        #expect(queued > 0 && queued < urls.count, "\(summary)")
        #expect(result.stderr.contains("disk_full: "), "\(result.stderr)")
        #expect(result.stderr.contains("URLs sent were not queued (the others were, durably: the summary above)"), "\(result.stderr)")
        let status = try #require(try JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any])
        let slow = status["slow"] as? [String: Any] ?? [:]
        let held = (status["backlog"] as? Int ?? 0) + (slow["waiting"] as? Int ?? 0) + (slow["running"] as? Int ?? 0)
        #expect(held == queued, "every URL the summary counts is queued: \(status)")
    }

    @Test("list of 2,500 tasks with 8 KB URLs (a 20 MB reply line) is shown (it failed: the daemon sent an over-long line, exit 3)")
    func longListReply() throws {
        let daemon = try DaemonUnderTest()
        // Three clients: a get of an 8 KB URL counts 8 against the 8,192 one client may have waiting.
        let connections = try (0..<3).map { _ in try RawConnection(socket: daemon.socket) }
        for connection in connections { _ = connection.receive() }
        let padding = String(repeating: "p", count: 8_000)
        for n in 0..<2_500 {
            connections[n % 3].send("{\"id\":\(n),\"op\":\"get\",\"url\":\"\(Self.origin.url("/long/\(n)/\(padding).jpg?delay=30"))\"}\n")
        }
        // Waited for with `status`: a look with `list` makes and parses a 20 MB reply, and looking again and again kept
        // the daemon from reading the gets (1,924 of 2,500 in after 60 s, the whole suite on 2 cores).
        waitUntil(seconds: 60) {
            let status = (try? JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData)) as? [String: Any]
            let fast = status?["fast"] as? [String: Any] ?? [:]
            return (fast["waiting"] as? Int ?? 0) + (fast["running"] as? Int ?? 0) == 2_500
        }
        let listed = daemon.ctl("list", "--limit", "100000", "--json")
        let tasks = (try? JSONSerialization.jsonObject(with: listed.stdoutData) as? [String: Any])?["tasks"] as? [[String: Any]]
        #expect(tasks?.count == 2_500)
        let text = daemon.ctl("list", "--limit", "100000")
        #expect(text.status == 0 && text.stdout.utf8.count > 16 << 20, "\(text.status) \(text.stderr)")
    }

    @Test("a daemon of another protocol is refused (it was used); one that never answers ends status at its --timeout (it waited for ever); --timeout takes decimal seconds only (0x10 and 1e3 were read); --socket '' and -o DIR, -o '' and -o to a link to nothing are usage errors before anything is sent (the last two after fetching)")
    func refusalsBeforeSending() throws {
        let newer = try RecordingDaemon(greeting: "{\"hello\":\"prefetchd\",\"version\":\"9.0\",\"protocol\":2}") { line in
            "{\"id\":\(RecordingDaemon.id(line)),\"ok\":true,\"result\":{}}"
        }
        let ping = run(Paths.prefetchctl, ["--socket", newer.socket, "ping"])
        #expect(ping.status == 3 && ping.stderr.contains("speaks protocol 2; this prefetchctl (") , "\(ping.stderr)")
        #expect(newer.lines() == [], "nothing sent to a daemon of another protocol")

        // Refused before connecting: no daemon there (trying to reach one would be exit 3).
        let directory = try TemporaryDirectory()
        let nothing = directory.path + "/nothing.sock"
        for value in ["0x10", "1e3", "inf", "1..5", "", "0.0009", "0.0000001"] {
            let result = run(Paths.prefetchctl, ["--socket", nothing, "get", "--timeout", value, "http://a/x.jpg"])
            #expect(result.status == 2 && result.stderr.contains("--timeout: '\(value)' is not a number of seconds"), "\(value): \(result.stderr)")
        }
        let silent = try RecordingDaemon { _ in nil }
        let began = Date()
        let unanswered = run(Paths.prefetchctl, ["--socket", silent.socket, "status", "--timeout", "0.5"])
        #expect(unanswered.status == 5 && unanswered.stderr.contains("prefetchd did not answer within 0.5 s"), "\(unanswered.stderr)")
        #expect(Date().timeIntervalSince(began) < 5, "it waited for ever")
        let empty = run(Paths.prefetchctl, ["--socket", "", "ping"])
        #expect(empty.status == 2 && empty.stderr.contains("--socket needs a path"), "\(empty.stderr)")
        let dangling = directory.path + "/dangling.jpg"
        try FileManager.default.createSymbolicLink(atPath: dangling, withDestinationPath: directory.path + "/nothing/x.jpg")
        for (output, said) in [("/tmp", "/tmp is a directory"), ("/nonexistent-dir/x.jpg", "/nonexistent-dir does not exist"),
                               ("/etc/hostname/x.jpg", "/etc/hostname is not a directory"), ("", "-o needs a file name"),
                               (dangling, "is a link to nothing")] {
            let result = run(Paths.prefetchctl, ["--socket", nothing, "get", "-o", output, "http://a/x.jpg"])
            #expect(result.status == 2 && result.stderr.contains(said), "\(output): \(result.status) \(result.stderr)")
        }
    }

    @Test("-o to a file that cannot be written (a read-only file system, new or existing) is exit 2 before connecting (the URL was fetched first, then the copy failed, exit 1)",
          .enabled(if: getuid() == 0, "a read-only bind mount needs root"))
    func unwritableOutputRefusedFirst() throws {
        let directory = try TemporaryDirectory()
        let readOnly = directory.path + "/ro"
        try FileManager.default.createDirectory(atPath: readOnly, withIntermediateDirectories: false)
        try Data("old".utf8).write(to: URL(fileURLWithPath: readOnly + "/old.jpg"))
        try #require(mount(readOnly, readOnly, nil, UInt(MS_BIND), nil) == 0)
        defer { umount2(readOnly, Int32(MNT_DETACH)) }
        try #require(mount(nil, readOnly, nil, UInt(MS_REMOUNT | MS_BIND | MS_RDONLY), nil) == 0)
        // No daemon: trying to reach one would be exit 3.
        for (output, said) in [(readOnly + "/new.jpg", "cannot be written: in \(readOnly): Read-only file system"),
                               (readOnly + "/old.jpg", "cannot be written: Read-only file system")] {
            let result = run(Paths.prefetchctl, ["--socket", directory.path + "/nothing.sock", "get", "-o", output, "http://a/x.jpg"])
            #expect(result.status == 2 && result.stderr.contains(said), "\(output): \(result.status) \(result.stderr)")
        }
    }

    @Test("`-` with stdin closed is a usage error before connecting, and an empty list on stdin says that it held no URL (both said a URL was needed, as if no - had been given)")
    func emptyOrClosedStdin() throws {
        let directory = try TemporaryDirectory()
        for verb in ["get", "queue", "demote"] {
            let closed = run("/bin/sh", ["-c", "exec \"$0\" --socket \"$1\" \"$2\" - <&-", Paths.prefetchctl,
                                         directory.path + "/nothing.sock", verb])
            #expect(closed.status == 2 && closed.stderr == "prefetchctl: - reads the URLs from stdin, but stdin is closed\n",
                    "\(verb): \(closed.stderr)")
            let daemon = try RecordingDaemon { line in "{\"id\":\(RecordingDaemon.id(line)),\"ok\":true,\"result\":{}}" }
            let empty = run(Paths.prefetchctl, ["--socket", daemon.socket, verb, "-"], stdin: "\n# only a comment\n")
            #expect(empty.status == 2 && empty.stderr == "prefetchctl: \(verb) -: stdin held no URL (empty lines and lines "
                    + "that start with # are skipped)\n", "\(verb): \(empty.stderr)")
            #expect(daemon.lines() == [], "\(verb): nothing sent")
        }
    }

    @Test("demote, promote, cancel and evict end at --timeout when the daemon never answers or takes no more of the list, saying how many URLs were answered (they waited for ever; queue waits a minute, the same code)")
    func batchVerbsStopWaitingForASilentDaemon() throws {
        for verb in ["demote", "promote", "cancel", "evict"] {
            let silent = try RecordingDaemon { _ in nil }
            let began = Date()
            let result = run(Paths.prefetchctl, ["--socket", silent.socket, verb, "--timeout", "0.5",
                                                 "http://a/x.jpg", "http://a/y.jpg"])
            #expect(result.status == 5, "\(verb): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("prefetchd did not answer within 0.5 s")
                    && result.stderr.contains("Answers came for 0 URLs of the 2 sent"), "\(verb): \(result.stderr)")
            #expect(Date().timeIntervalSince(began) < 5, "\(verb) waited for ever")
            #expect(silent.lines().count == 1, "\(verb): the list went in one request")
        }
        // One that answers every part of the list but the second: the parts answered after it count, and are shown.
        let skipping = try RecordingDaemon { line in
            let request = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
            let id = request["id"] as? Int ?? 0, urls = request["urls"] as? [String] ?? []
            guard id != 2 else { return nil }
            let results = urls.map { "{\"url\":\"\($0)\",\"status\":\"demoted\"}" }.joined(separator: ",")
            return "{\"id\":\(id),\"ok\":true,\"result\":{\"results\":[\(results)]}}"
        }
        let list = (0..<10_000).map { "http://a/\($0).jpg" }
        let partly = run(Paths.prefetchctl, ["--socket", skipping.socket, "demote", "--timeout", "0.5", "-"],
                         stdin: list.joined(separator: "\n") + "\n")
        let parts = skipping.lines().map { ((try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any])?["urls"] as? [String] ?? [] }
        #expect(parts.count >= 3 && parts.map(\.count).reduce(0, +) == list.count, "\(parts.map(\.count))")
        let shown = list.count - (parts.count > 1 ? parts[1].count : 0)
        #expect(partly.status == 5 && partly.stderr.contains("Answers came for \(shown) URLs of the 10000 sent"), "\(partly.stderr)")
        #expect(partly.stdout.split(separator: "\n").count == shown, "every URL answered is shown")
        // One that takes no more of a long list once the socket's buffers are full: sending it waited for ever.
        let deaf = try RecordingDaemon(reading: false) { _ in nil }
        let began = Date()
        let urls = (0..<50_000).map { "http://a/\($0).jpg" }.joined(separator: "\n") + "\n"
        let result = run(Paths.prefetchctl, ["--socket", deaf.socket, "demote", "--timeout", "1", "-"], stdin: urls)
        #expect(result.status == 5 && result.stderr.contains("prefetchd did not answer within 1 s")
                && result.stderr.contains("Answers came for 0 URLs of the "), "\(result.stderr)")
        #expect(Date().timeIntervalSince(began) < 10, "sending waited for ever")
    }

    @Test("a reply that accounts for fewer URLs than its request sent (a result short, or counts short) is exit 3, not a shorter list and exit 0")
    func shortReplyRefused() throws {
        for (verb, status) in [("demote", "demoted"), ("cancel", "cancelled"), ("queue", "queued")] {
            let short = try RecordingDaemon { line in
                let request = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
                let id = request["id"] as? Int ?? 0, urls = (request["urls"] as? [String] ?? []).dropLast()
                if request["summary"] as? Bool == true {
                    return "{\"id\":\(id),\"ok\":true,\"result\":{\"results\":[],\"counts\":{\"\(status)\":\(urls.count)}}}"
                }
                let results = urls.map { "{\"url\":\"\($0)\",\"status\":\"\(status)\"}" }.joined(separator: ",")
                return "{\"id\":\(id),\"ok\":true,\"result\":{\"results\":[\(results)]}}"
            }
            let result = run(Paths.prefetchctl, ["--socket", short.socket, verb, "http://a/x.jpg", "http://a/y.jpg"])
            let said = verb == "queue" ? "with 0 results and counts of 1" : "with 1 result:"
            #expect(result.status == 3 && result.stderr.contains("answered a request of 2 URLs \(said)"),
                    "\(verb): \(result.status) \(result.stdout) \(result.stderr)")
        }
        // Counts nobody asked for stand for no result; counts that balance a negative one are no counts.
        for (verb, counts) in [("demote", "{\"demoted\":2}"), ("queue", "{\"queued\":-3,\"already\":5}"),
                               ("queue", "{\"queued\":-9223372036854775808,\"already\":2}")] {
            let lying = try RecordingDaemon { line in
                "{\"id\":\(RecordingDaemon.id(line)),\"ok\":true,\"result\":{\"results\":[],\"counts\":\(counts)}}"
            }
            let result = run(Paths.prefetchctl, ["--socket", lying.socket, verb, "http://a/x.jpg", "http://a/y.jpg"])
            #expect(result.status == 3 && result.stderr.contains("answered a request of 2 URLs with 0 results"),
                    "\(verb) \(counts): \(result.status) \(result.stdout) \(result.stderr)")
        }
        let negative = try RecordingDaemon { line in "{\"id\":\(RecordingDaemon.id(line)),\"ok\":true,\"result\":{\"results\":[],\"evicted\":-1}}" }
        let evicted = run(Paths.prefetchctl, ["--socket", negative.socket, "evict", "--all"])
        #expect(evicted.status == 3 && evicted.stderr.contains("said it evicted -1 entries"), "\(evicted.stderr)")
    }

    @Test("request lines carry / as is, not as \\/ (a byte per slash)")
    func slashesAreNotEscaped() throws {
        let recorder = try RecordingDaemon { line in
            "{\"id\":\(RecordingDaemon.id(line)),\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":\"recorded\"}}"
        }
        let url = "http://example.com/a/b/c.jpg"
        _ = run(Paths.prefetchctl, ["--socket", recorder.socket, "info", url])
        let line = try #require(recorder.lines().first)
        #expect(line.contains("\"url\":\"\(url)\""), "\(line)")
        #expect(!line.contains("\\/"), "\(line)")
    }

    @Test("what the daemon relays from servers (an error's detail, a task's URL) reaches the terminal with its control characters and bidi overrides written out, not acted on")
    func controlCharactersAreWrittenOut() throws {
        // JSON escapes in the reply, and the way prefetchctl writes the characters out.
        let hostile = "\\u001b]0;owned\\u0007\\u001b[2J \\u202egpj.exe \\u009b31m"
        let failing = try RecordingDaemon { line in
            "{\"id\":\(RecordingDaemon.id(line)),\"ok\":false,\"error\":{\"code\":\"http_status\",\"message\":\"\(hostile)\"}}"
        }
        let listing = try RecordingDaemon { line in
            "{\"id\":\(RecordingDaemon.id(line)),\"ok\":true,\"result\":{\"tasks\":[{\"url\":\"http://example.com/\(hostile)\","
                + "\"lane\":\"slow\",\"state\":\"running\",\"attempts\":1,\"waiters\":0}],\"backlog\":0}}"
        }
        let failed = run(Paths.prefetchctl, ["--socket", failing.socket, "info", "http://example.com/a.jpg"])
        let listed = run(Paths.prefetchctl, ["--socket", listing.socket, "list"])
        for text in [failed.stderr, listed.stdout] {
            #expect(text.contains(hostile), "\(text)")
            #expect(!text.unicodeScalars.contains { [0x1B, 0x07, 0x9B, 0x202E].contains($0.value) }, "\(text)")
        }
    }

    @Test("a per-URL status or a task state this prefetchctl does not know (a newer daemon's) is shown as sent, not a decoding failure")
    func unknownStatusesFromANewerDaemon() throws {
        func answering(_ result: @escaping @Sendable (_ urls: [String]) -> String) throws -> RecordingDaemon {
            try RecordingDaemon { line in
                let urls = ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])?["urls"] as? [String] ?? []
                return "{\"id\":\(RecordingDaemon.id(line)),\"ok\":true,\"result\":\(result(urls))}"
            }
        }
        let queue = try answering { urls in
            "{\"results\":[" + zip(urls, ["queued", "deferred"]).map { "{\"url\":\"\($0)\",\"key\":\"\($0)\",\"status\":\"\($1)\"}" }
                .joined(separator: ",") + "]}"
        }
        let queued = run(Paths.prefetchctl, ["--socket", queue.socket, "queue", "http://example.com/1.jpg", "http://example.com/2.jpg"])
        #expect(queued.status == 0, "\(queued.stderr)")
        #expect(queued.stderr == "prefetchctl: 1 queued, 1 deferred\n")

        let demote = try answering { urls in "{\"results\":[{\"url\":\"\(urls[0])\",\"key\":\"\(urls[0])\",\"status\":\"parked\"}]}" }
        let demoted = run(Paths.prefetchctl, ["--socket", demote.socket, "demote", "http://example.com/3.jpg"])
        #expect(demoted.status == 0, "\(demoted.stderr)")
        #expect(demoted.stdout == "http://example.com/3.jpg parked\n")

        let list = try answering { _ in
            "{\"tasks\":[{\"url\":\"http://example.com/4.jpg\",\"lane\":\"slow\",\"state\":\"throttled\",\"attempts\":1,\"waiters\":0}],\"backlog\":0}"
        }
        let listed = run(Paths.prefetchctl, ["--socket", list.socket, "list"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(listed.stdout.contains("slow throttled http://example.com/4.jpg"), "\(listed.stdout)")
    }

    @Test("queue - of 100,000 URLs of 300 bytes: parts sized by bytes, every request line well under the 64 KiB limit")
    func partsAreSizedByBytes() throws {
        let recorder = try RecordingDaemon { line in
            let urls = ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])?["urls"] as? [String] ?? []
            let results = urls.map { "{\"url\":\"\($0)\",\"key\":\"\($0)\",\"status\":\"queued\"}" }.joined(separator: ",")
            return "{\"id\":\(RecordingDaemon.id(line)),\"ok\":true,\"result\":{\"results\":[\(results)]}}"
        }
        let urls = LongList.urls(100_000, length: 300) { "http://example.com/p\($0).jpg?pad=" }
        let result = run(Paths.prefetchctl, ["--socket", recorder.socket, "queue", "-"], stdin: urls.joined(separator: "\n"))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr == "prefetchctl: 100000 queued\n")
        let lines = recorder.lines()
        #expect(lines.allSatisfy { $0.utf8.count <= 40 * 1024 }, "longest line: \(lines.map(\.utf8.count).max() ?? 0) bytes")
        let sent = lines.flatMap { ((try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any])?["urls"] as? [String] ?? [] }
        #expect(sent == urls, "every URL sent once, in order")
    }

    @Test("600 URLs of 157 bytes: queue - and cancel - succeed instead of 'Broken pipe' (exit 3) and line_too_long")
    func issueListOf157ByteURLs() throws {
        let daemon = try DaemonUnderTest()
        let urls = LongList.urls(600, length: 157) { Self.origin.url("/m\($0).jpg?delay=600&pad=") }
        let list = urls.joined(separator: "\n") + "\n"
        let queued = daemon.ctl(arguments: ["queue", "-"], stdin: list)
        #expect(queued.status == 0 && queued.stderr == "prefetchctl: 600 queued\n", "\(queued.stderr)")
        let cancelled = daemon.ctl(arguments: ["cancel", "-"], stdin: list)
        #expect(cancelled.status == 0, "\(cancelled.stderr)")
        #expect(cancelled.lines == urls.map { "\($0) cancelled" })
    }

    @Test("a URL too long for any request line is refused by name (exit 4); the URLs around it are still sent")
    func urlTooLongForALine() throws {
        let daemon = try DaemonUnderTest()
        let huge = Self.origin.url("/huge.jpg?pad=" + String(repeating: "x", count: 70_000))
        let before = Self.origin.url("/before.jpg?delay=600"), after = Self.origin.url("/after.jpg?delay=600")
        let queued = daemon.ctl(arguments: ["queue", "--json", "-"], stdin: [before, huge, after].joined(separator: "\n"))
        #expect(queued.status == 4, "\(queued.stderr)")
        let statuses = queued.lines.compactMap { line -> String? in
            ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])?["status"] as? String
        }
        #expect(statuses == ["queued", "rejected", "queued"], "\(queued.stdout.prefix(300))")
        #expect(queued.lines.count == 3 && errorCode(queued.lines[1]) == "line_too_long")
        let got = daemon.ctl("get", huge, before, "--offline")
        #expect(got.status == 4, "\(got.stderr)")
        #expect(got.stderr.contains("line_too_long: not sent"), "\(got.stderr.suffix(300))")
    }

    @Test("view of 1,700 URLs of 34 bytes is sent in parts and answered, instead of line_too_long")
    func viewOfManyShortURLs() throws {
        let daemon = try DaemonUnderTest()
        let urls = LongList.urls(1_700, length: 34) { Self.origin.url("/\($0).jpg?p=") }
        let directory = try TemporaryDirectory()
        try (urls.joined(separator: "\n") + "\n").write(toFile: directory.path + "/list.txt", atomically: true, encoding: .utf8)
        let result = daemon.ctl(arguments: ["view", directory.path + "/list.txt"], stdin: "1690 1699\n")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(Set(result.lines.compactMap { Int($0.split(separator: " ")[0]) }) == Set(1690...1699), "\(result.stdout)")
    }

    @Test("the view --help example shows \\n, not a line break")
    func viewHelpExample() {
        let help = run(Paths.prefetchctl, ["view", "--help"]).stdout
        #expect(help.contains("printf '%s\\n' https://example.com/1.jpg https://example.com/2.jpg '' '0 1' | prefetchctl view -"), "\(help)")
    }
}

/// Lists of 100,000 URLs of 300 bytes each through a real daemon: every verb that takes a list.
@Suite(.serialized)
struct LongListTests {
    static let origin = try! Origin()

    @Test("a queue - whose daemon dies midway says what was acknowledged (queued durably) and that running it again is safe (it said only 'the daemon closed the connection', exit 3, with 62,443 of 300,000 queued)")
    func queueCutShortSaysWhatWasQueued() throws {
        let daemon = try DaemonUnderTest()
        let urls = (0..<6_000).map { Self.origin.url("/cut/\($0).jpg?hold=1") }
        let first = daemon.directory.path + "/first.txt", second = daemon.directory.path + "/second.txt"
        try (urls[..<3_000].joined(separator: "\n") + "\n").write(toFile: first, atomically: true, encoding: .utf8)
        try (urls[3_000...].joined(separator: "\n") + "\n").write(toFile: second, atomically: true, encoding: .utf8)
        // The parts read before the pause are answered; the daemon dies during it.
        let cut = run("/bin/sh", ["-c", "(cat \(first); sleep 3; cat \(second)) | \(Paths.prefetchctl) --socket \(daemon.socket) "
                                  + "queue - & sleep 1.5; kill -9 \(daemon.child!.pid); wait $!"])
        #expect(cut.status == 3, "\(cut)")
        let acknowledged = cut.stderr.firstMatch(of: /prefetchctl: (\d+) queued\n/).flatMap { Int($0.1) } ?? 0
        #expect(acknowledged > 0 && acknowledged < 3_000, "\(cut.stderr)")
        #expect(cut.stderr.contains("answers came for \(acknowledged) URLs") && cut.stderr.contains("run the same command again"),
                "\(cut.stderr)")
        try daemon.start()
        let again = daemon.ctl(arguments: ["queue", "-"], stdin: urls.joined(separator: "\n") + "\n")
        #expect(again.status == 0 && again.stderr == "prefetchctl: \(6_000 - acknowledged) queued, \(acknowledged) already\n",
                "\(again.stderr)")
        try Self.origin.release()
    }

    @Test("queue -, demote - and cancel - of 100,000 URLs of 300 bytes each: all acknowledged, one result line per URL")
    func queueDemoteCancel() throws {
        let daemon = try DaemonUnderTest()
        // The origin holds each answer for 10 minutes: the slow lane fetches one URL meanwhile, not 100,000.
        let urls = LongList.urls(100_000, length: 300) { Self.origin.url("/q\($0).jpg?delay=600&pad=") }
        let list = urls.joined(separator: "\n") + "\n"
        let queued = daemon.ctl(arguments: ["queue", "-"], stdin: list)
        #expect(queued.status == 0 && queued.stderr == "prefetchctl: 100000 queued\n", "\(queued.status) \(queued.stderr.prefix(500))")

        let demoted = daemon.ctl(arguments: ["demote", "-"], stdin: list)
        #expect(demoted.status == 0, "\(demoted.stderr.prefix(500))")
        #expect(demoted.lines.count == 100_000)
        #expect(zip(demoted.lines, urls).allSatisfy { $0.hasPrefix($1 + " ") && !$0.hasSuffix(" rejected") })

        let cancelled = daemon.ctl(arguments: ["cancel", "-"], stdin: list)
        #expect(cancelled.status == 0, "\(cancelled.stderr.prefix(500))")
        #expect(cancelled.lines == urls.map { "\($0) cancelled" })
        let status = try #require(try JSONSerialization.jsonObject(with: daemon.ctl("status", "--json").stdoutData) as? [String: Any])
        #expect(status["backlog"] as? Int == 0, "nothing stays queued: \(status)")
    }

    @Test("get - of 100,000 URLs of 300 bytes each: one answer line per URL, in order")
    func get() throws {
        let daemon = try DaemonUnderTest()
        let cached = Self.origin.url("/g.jpg")
        let path = daemon.ctl("get", cached).stdout.trimmingCharacters(in: .newlines)
        #expect(!path.isEmpty)
        // One cached image under 100,000 names (the fragment is not part of the key), and every 10,000th URL one
        // that is not cached: each answered at once with --offline.
        let urls = LongList.urls(100_000, length: 300) { $0 % 10_000 == 0 ? Self.origin.url("/n\($0).jpg?pad=") : cached + "#\($0)-" }
        let result = daemon.ctl(arguments: ["get", "--offline", "-"], stdin: urls.joined(separator: "\n"))
        #expect(result.status == 1, "\(result.stderr.prefix(500))")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count == 100_000)
        #expect(lines.enumerated().allSatisfy { $0.element == ($0.offset % 10_000 == 0 ? "" : path) })
        let errors = result.stderr.split(separator: "\n")
        #expect(errors.count == 10, "\(result.stderr.prefix(500))")
        #expect(zip(errors, stride(from: 0, to: 100_000, by: 10_000)).allSatisfy { $0.hasPrefix("prefetchctl: \(urls[$1]): not_cached") })
    }

    @Test("view of 100,000 URLs of 300 bytes each is answered; 100,001 rows get the 100,000-row message, not line_too_long")
    func view() throws {
        let daemon = try DaemonUnderTest()
        let directory = try TemporaryDirectory()
        // Image-CDN URLs have many path segments: each `/` is a byte more when escaped as `\/`.
        let urls = LongList.urls(100_000, length: 300) { Self.origin.url("/v\($0)" + String(repeating: "/s", count: 30) + ".jpg?pad=") }
        try (urls.joined(separator: "\n") + "\n").write(toFile: directory.path + "/list.txt", atomically: true, encoding: .utf8)
        let result = daemon.ctl(arguments: ["view", directory.path + "/list.txt"], stdin: "99990 99999\n")
        #expect(result.status == 0, "\(result.stderr.prefix(500))")
        #expect(Set(result.lines.compactMap { Int($0.split(separator: " ")[0]) }) == Set(99990...99999), "\(result.stdout)")

        try (urls.joined(separator: "\n") + "\n" + Self.origin.url("/one-more.jpg") + "\n")
            .write(toFile: directory.path + "/over.txt", atomically: true, encoding: .utf8)
        let over = daemon.ctl(arguments: ["view", directory.path + "/over.txt"])
        #expect(over.status == 4)
        #expect(over.stderr == "prefetchctl: bad_request: a view holds at most 100000 rows\n", "\(over.stderr.prefix(500))")
    }
}

enum LongList {
    /// `count` URLs of exactly `length` bytes: `prefix(i)` padded with `x`.
    static func urls(_ count: Int, length: Int, _ prefix: (Int) -> String) -> [String] {
        (0..<count).map { index in
            let start = prefix(index)
            return start + String(repeating: "x", count: max(0, length - start.utf8.count))
        }
    }
}
