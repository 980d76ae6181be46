import Foundation
import Testing

/// `watch` (live view in a real terminal, plain lines, raw JSON), `queue --wait`, and the progress bars on stderr.
@Suite(.serialized)
struct WatchTests {
    /// A body that takes 15 s to arrive: long enough to see its bar move.
    static let slowQuery = "?drip=200000&size=3000000"

    @Test("watch in a 100x30 terminal shows lane counts and a progress bar that advances; fits 40 columns; q quits")
    func liveView() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--fast-width", "3"])
        let tmux = try Tmux([Paths.prefetchctl, "--socket", daemon.socket, "watch"], columns: 100, rows: 30)
        defer { tmux.kill() }
        let urls = (1...3).map { origin.url("/slow\($0).jpg" + Self.slowQuery) }
        let queued = daemon.ctl(arguments: ["queue"] + urls)
        #expect(queued.status == 0, "\(queued.stderr)")

        let first = try tmux.waitForScreen("a running transfer with a bar") { Tmux.filledCells($0, "/slow1.jpg") ?? 0 > 0 }
        usleep(1_000_000)
        let second = tmux.capture()
        #expect(first.contains("fast  0/3 running  0 waiting"), "\(first)")
        #expect(first.contains("slow  1/1 running  2 waiting"), "\(first)")
        #expect(first.contains("backlog 0 queued"), "\(first)")
        let before = try #require(Tmux.filledCells(first, "/slow1.jpg"), "\(first)")
        let after = try #require(Tmux.filledCells(second, "/slow1.jpg"), "\(second)")
        #expect(after > before, "the bar did not advance:\n\(first)\n---\n\(second)")
        #expect(first.split(separator: "\n").allSatisfy { $0.count <= 100 })

        try tmux.resize(columns: 40, rows: 30)
        let narrow = try tmux.waitForScreen("the narrow layout") { screen in
            screen.contains("slow http://127.0.0.1") && (Tmux.filledCells(screen, nil) ?? 0) > 0
        }
        #expect(narrow.contains("slow  1/1 running  2 waiting"), "\(narrow)")
        #expect(narrow.split(separator: "\n").allSatisfy { $0.count <= 40 }, "\(narrow)")

        tmux.send("q")
        let status = try tmux.waitForExit()
        #expect(status == 0)
        #expect(!tmux.capture().contains("prefetchd watch"), "the alternate screen was left")
    }

    @Test("watch colours its live view, and not at all when NO_COLOR is set")
    func noColor() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        #expect(daemon.ctl("queue", origin.url("/c1.jpg" + Self.slowQuery)).status == 0)
        for noColor in [false, true] {
            let tmux = try Tmux([Paths.prefetchctl, "--socket", daemon.socket, "watch"], columns: 100, rows: 30,
                                environment: noColor ? ["NO_COLOR": "1"] : [:])
            defer { tmux.kill() }
            _ = try tmux.waitForScreen("a running transfer") { Tmux.filledCells($0, "/c1.jpg") != nil }
            let screen = tmux.capture(escapes: true)
            let coloured = ["\u{1B}[32m", "\u{1B}[36m", "\u{1B}[1m"].contains { screen.contains($0) }
            #expect(coloured == !noColor, "NO_COLOR=\(noColor):\n\(screen)")
            tmux.send("q")
            #expect(try tmux.waitForExit() == 0)
        }
    }

    @Test("watch in a pipe: started, finished and failed lines, a lanes line; exit 3 when the daemon goes away")
    func plainLines() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let watch = try ChildProcess(Paths.prefetchctl, ["--socket", daemon.socket, "watch"],
                                     stderrPath: daemon.directory.path + "/watch.err")
        let output = LineCollector(watch.stdout)
        _ = try output.wait("the first lanes line") { $0.contains { $0.contains(" lanes fast ") } }

        let good = [origin.url("/p1.jpg"), origin.url("/p2.jpg?size=5000")]
        let missing = origin.url("/gone.jpg?status=404")
        #expect(daemon.ctl(arguments: ["queue"] + good + [missing]).status == 0)
        let lines = try output.wait("both finished and the failure") { lines in
            good.allSatisfy { url in lines.contains { $0.contains("finished slow \(url) ") } }
                && lines.contains { $0.contains("failed \(missing) ") }
        }
        let clock = #"^\d\d:\d\d:\d\d "#
        for url in good {
            #expect(lines.contains { $0.wholeMatch(clock + "started slow " + NSRegularExpression.escapedPattern(for: url) + "$") })
        }
        #expect(lines.contains { $0.wholeMatch(clock + "finished slow " + NSRegularExpression.escapedPattern(for: good[0])
                                              + #" 2048 bytes in \d+\.\d\d s$"#) }, "\(lines)")
        #expect(lines.contains { $0.wholeMatch(clock + "failed " + NSRegularExpression.escapedPattern(for: missing)
                                              + " http_status: .+$") }, "\(lines)")
        #expect(lines.contains { $0.wholeMatch(clock + #"lanes fast 0/8 running 0 waiting, slow [01]/1 running \d+ waiting(?: suspended)?, backlog \d+$"#) },
                "\(lines)")
        let lanes = lines.filter { $0.contains(" lanes ") }.map { $0.dropFirst(9) }
        #expect(zip(lanes, lanes.dropFirst()).allSatisfy { $0 != $1 }, "a lanes line only when the counts change: \(lanes)")

        daemon.kill9()
        watch.process.waitUntilExit()
        #expect(watch.process.terminationStatus == 3)
        #expect(watch.stderrText.contains("prefetchd went away"), "\(watch.stderrText)")
    }

    @Test("watch --json: every line is JSON with the documented fields for snapshot, started, finished and failed")
    func jsonEvents() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let output = try daemon.watchJSON()

        let slow = origin.url("/j1.jpg?drip=400000&size=400000")
        let missing = origin.url("/j404.jpg?status=404")
        #expect(daemon.ctl("queue", slow, missing).status == 0)
        let lines = try output.wait("finished and failed") { lines in
            lines.contains { $0.contains("\"finished\"") } && lines.contains { $0.contains("\"failed\"") }
        }
        let all = try lines.map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        }
        for event in all {
            #expect(event["event"] is String && event["time"] is Int, "\(event)")
        }
        func events(_ kind: String) -> [[String: Any]] { all.filter { $0["event"] as? String == kind } }

        let snapshots = events("snapshot")
        #expect(!snapshots.isEmpty)
        for snapshot in snapshots {
            for lane in ["fast", "slow"] {
                let counts = snapshot[lane] as? [String: Any]
                #expect(["waiting", "running", "width"].allSatisfy { counts?[$0] is Int }, "\(snapshot)")
            }
            #expect(snapshot["slow_suspended"] is Bool && snapshot["backlog"] is Int && snapshot["transfers"] is [Any], "\(snapshot)")
        }
        let transfers = snapshots.flatMap { $0["transfers"] as? [[String: Any]] ?? [] }
        let transfer = try #require(transfers.first { $0["url"] as? String == slow }, "a snapshot shows the transfer")
        #expect(transfer["lane"] as? String == "slow" && transfer["bytes"] is Int && transfer["rate"] is Int)
        #expect(transfer["total"] as? Int == 400_000)

        let started = try #require(events("started").first { $0["url"] as? String == slow })
        #expect(started["lane"] as? String == "slow")
        let finished = try #require(events("finished").first { $0["url"] as? String == slow })
        #expect(finished["lane"] as? String == "slow")
        #expect(finished["bytes"] as? Int == 400_000)
        #expect((finished["duration"] as? Int ?? 0) >= 500, "\(finished)")
        let failed = try #require(events("failed").first { $0["url"] as? String == missing })
        #expect(failed["lane"] as? String == "slow")
        let error = try #require(failed["error"] as? [String: Any], "\(failed)")
        #expect(error["code"] as? String == "http_status")
        #expect(error["message"] is String)
    }

    @Test("queue --wait returns once every URL is cached (exit 0); a 404 among them: exit 1, named on stderr")
    func queueWait() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let urls = (1...3).map { origin.url("/w\($0).jpg?drip=500000&size=200000") }
        let waited = daemon.ctl(arguments: ["queue", "--wait"] + urls)
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(waited.stderr.contains("3 queued; 3 finished, 0 failed"), "\(waited.stderr)")
        for url in urls {
            #expect(daemon.ctl("get", "--offline", url).status == 0, "\(url) is cached when --wait returns")
        }

        let more = [origin.url("/w4.jpg?drip=500000&size=200000"), origin.url("/w404.jpg?status=404")]
        let failed = daemon.ctl(arguments: ["queue", "--wait"] + more + [urls[0]])
        #expect(failed.status == 1, "\(failed.stderr)")
        #expect(failed.stderr.contains("\(more[1]): http_status:"), "\(failed.stderr)")
        #expect(!failed.stderr.contains("\(more[0]):"), "\(failed.stderr)")
        #expect(failed.stderr.contains("1 finished, 1 failed"), "\(failed.stderr)")  // and one cached at once
        #expect(daemon.ctl("get", "--offline", more[0]).status == 0)
    }

    @Test("queue --wait --json adds a finished or failed line per URL; --timeout stops the wait with exit 5")
    func queueWaitJSONAndTimeout() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let good = origin.url("/x1.jpg?drip=500000&size=100000")
        let missing = origin.url("/x404.jpg?status=404")
        let result = daemon.ctl("queue", "--wait", "--json", good, missing)
        #expect(result.status == 1)
        let items = result.lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(items.count == 4, "\(result.stdout)")
        func status(_ url: String) -> [String] { items.filter { $0["url"] as? String == url }.compactMap { $0["status"] as? String } }
        #expect(status(good) == ["queued", "finished"])
        #expect(status(missing) == ["queued", "failed"])
        let failure = items.last { $0["url"] as? String == missing }?["error"] as? [String: Any]
        #expect(failure?["code"] as? String == "http_status")

        let start = Date()
        let slow = daemon.ctl("queue", "--wait", "--timeout", "1", origin.url("/x2.jpg?drip=100000&size=2000000"))
        #expect(slow.status == 5, "\(slow.stderr)")
        #expect(Date().timeIntervalSince(start) < 10)
        #expect(slow.stderr.contains("still not fetched"), "\(slow.stderr)")
    }

    @Test("on a terminal, get and queue --wait draw a bar on stderr while they wait and clear it at the end")
    func stderrBars() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let ctl = "'\(Paths.prefetchctl)' --socket '\(daemon.socket)'"
        let get = origin.url("/g1.jpg?drip=300000&size=1500000")
        let queue = (1...3).map { origin.url("/q\($0).jpg?drip=400000&size=400000") }
        let script = "\(ctl) get '\(get)' >/dev/null; echo GET=$?; "
            + "\(ctl) queue --wait \(queue.map { "'\($0)'" }.joined(separator: " ")); echo QUEUE=$?; sleep 60"
        let tmux = try Tmux(["/bin/sh", "-c", script], columns: 120, rows: 20)
        defer { tmux.kill() }

        let getting = try tmux.waitForScreen("the get bar") { $0.contains("% ") && $0.contains("/ 1.5 MB") }
        #expect(getting.contains("/g1.jpg"), "\(getting)")
        let batch = try tmux.waitForScreen("the batch bar") { $0.contains("GET=0") && $0.contains("/3 done") }
        #expect(batch.contains("ETA"), "\(batch)")
        let done = try tmux.waitForScreen("the end", timeout: 20) { $0.contains("QUEUE=0") }
        #expect(!done.contains("/ 1.5 MB") && !done.contains("/3 done"), "the bars were cleared:\n\(done)")
        #expect(done.contains("3 queued; 3 finished, 0 failed"), "\(done)")
    }
}

extension WatchTests {
    @Test("TERM=dumb (an editor's shell buffer) is no terminal: get drew its bar there with escape sequences; now it writes none")
    func dumbTerminal() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        /// What `get` writes on a terminal (script(1)'s recording of its pty), with `TERM` set to `term`.
        func onTerminal(_ term: String, _ path: String) -> String {
            let get = "env TERM=\(term) '\(Paths.prefetchctl)' --socket '\(daemon.socket)' get '\(origin.url(path))' >/dev/null"
            return run("/usr/bin/script", ["-qfec", get, "/dev/null"]).stdout
        }
        let dumb = onTerminal("dumb", "/dumb.jpg?drip=400000&size=800000")
        #expect(!dumb.contains("\u{1B}"), "\(dumb.debugDescription)")
        let xterm = onTerminal("xterm", "/xterm.jpg?drip=400000&size=800000")
        #expect(xterm.contains("\u{1B}[K"), "a terminal that takes them gets the bar: \(xterm.debugDescription)")
    }
}

/// A program in a detached tmux session of a fixed size, on a private tmux server (its socket in a temporary
/// directory), killed by name at the end.
final class Tmux {
    static let executable = "/usr/bin/tmux"
    private let directory: TemporaryDirectory
    let session = "watch"
    var server: String { directory.path + "/tmux.sock" }
    private var statusPath: String { directory.path + "/status" }

    init(_ command: [String], columns: Int, rows: Int, environment: [String: String] = [:]) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.executable) else {
            throw HarnessError("tmux is not installed (it is in the Makefile's TEST_PACKAGES: run `make test-deps`)")
        }
        directory = try TemporaryDirectory()
        let quoted = command.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        // A known environment: UTF-8, and NO_COLOR only when asked for (the test runner may set it).
        let assignments = environment.map { "\($0.key)='\($0.value)' " }.joined()
        // The exit status goes to a file: tmux may mark a dead pane long before it records the status.
        let shellCommand = "env -u NO_COLOR LC_ALL=C.UTF-8 \(assignments)" + quoted.joined(separator: " ")
            + "; echo $? > '\(statusPath)'"

        // The tmux server outlives the client and keeps what it inherits. Started straight from Foundation's Process
        // it would hold the socket Process watches for the client's exit, and the signal mask of a test thread; so
        // the client is started through Python, which closes every other descriptor, with no signal blocked.
        let spawn = "import signal, subprocess, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); "
            + "sys.exit(subprocess.call(sys.argv[1:], stdin=subprocess.DEVNULL))"
        let started = run("/usr/bin/env", ["python3", "-c", spawn, "env", "LC_ALL=C.UTF-8", Self.executable, "-u", "-S", server,
                                           "new-session", "-d", "-s", session, "-x", String(columns), "-y", String(rows),
                                           shellCommand, ";", "set-option", "-t", session, "remain-on-exit", "on"])
        guard started.status == 0 else { throw HarnessError("tmux new-session failed: \(started.stderr)") }
    }

    deinit { kill() }

    @discardableResult
    func tmux(_ arguments: [String]) -> CommandResult {
        run("/usr/bin/env", ["LC_ALL=C.UTF-8", Self.executable, "-u", "-S", server] + arguments)
    }

    /// The visible screen, one line per row, trailing blanks dropped; with `escapes`, colours and attributes as
    /// escape sequences.
    func capture(escapes: Bool = false) -> String {
        tmux(["capture-pane", "-p"] + (escapes ? ["-e"] : []) + ["-t", session]).stdout
    }

    func send(_ keys: String) { tmux(["send-keys", "-t", session, keys]) }

    func resize(columns: Int, rows: Int) throws {
        let result = tmux(["resize-window", "-t", session, "-x", String(columns), "-y", String(rows)])
        guard result.status == 0 else { throw HarnessError("tmux resize-window failed: \(result.stderr)") }
    }

    /// Captures until `condition` holds; fails with the last screen after `timeout` seconds.
    func waitForScreen(_ what: String, timeout: Double = 10, _ condition: (String) -> Bool) throws -> String {
        let end = Date().addingTimeInterval(timeout)
        var screen = ""
        while Date() < end {
            screen = capture()
            if condition(screen) { return screen }
            usleep(100_000)
        }
        throw HarnessError("no \(what) within \(timeout) s; the screen:\n\(screen)")
    }

    /// The exit status of the program once it exited and the pane with it (`remain-on-exit` keeps the pane to ask).
    func waitForExit(timeout: Double = 5) throws -> Int {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            let dead = tmux(["display-message", "-p", "-t", session, "#{pane_dead}"]).stdout.hasPrefix("1")
            if dead, let text = try? String(contentsOfFile: statusPath, encoding: .utf8),
               let status = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                return status
            }
            usleep(50_000)
        }
        throw HarnessError("the program in tmux did not exit within \(timeout) s:\n\(capture())")
    }

    func kill() {
        tmux(["kill-session", "-t", session])
        tmux(["kill-server"])
    }

    /// Filled cells of the progress bar on the transfer line of `path` (any transfer when nil): on the line itself, or
    /// in the narrow layout on the line below it.
    static func filledCells(_ screen: String, _ path: String?) -> Int? {
        let lines = screen.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (index, line) in lines.enumerated() where line.hasPrefix("slow ") || line.hasPrefix("fast ") {
            guard path.map({ line.contains($0) }) ?? true else { continue }
            for candidate in [line, index + 1 < lines.count ? lines[index + 1] : ""] where candidate.contains("░") || candidate.contains("█") {
                return candidate.filter { $0 == "█" }.count
            }
        }
        return nil
    }
}

extension DaemonUnderTest {
    /// `prefetchctl watch --json` on this daemon, once its first snapshot came: the lines it prints, which keep the
    /// process running while they are in use.
    func watchJSON() throws -> LineCollector {
        let watch = try ChildProcess(Paths.prefetchctl, ["--socket", socket, "watch", "--json"],
                                     stderrPath: directory.path + "/watch.err")
        let output = LineCollector(watch.stdout, keeping: watch)
        _ = try output.wait("the first snapshot") { !$0.isEmpty }
        return output
    }
}

/// Lines of a child's stdout, read on a background thread as they come.
final class LineCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    /// The process whose output this is, when the collector is what keeps it running.
    private let process: ChildProcess?

    init(_ output: ChildOutput, keeping process: ChildProcess? = nil) {
        self.process = process
        let handle = output.fileHandleForReading
        Thread.detachNewThread { [self] in
            while let line = handle.readLine() {
                lock.withLock { lines.append(line) }
            }
        }
    }

    var current: [String] { lock.withLock { lines } }

    /// Waits until `condition` holds for the lines so far; fails with them after `timeout` seconds.
    func wait(_ what: String, timeout: Double = 20, _ condition: ([String]) -> Bool) throws -> [String] {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            let lines = current
            if condition(lines) { return lines }
            usleep(50_000)
        }
        throw HarnessError("no \(what) within \(timeout) s; the lines:\n\(current.joined(separator: "\n"))")
    }
}

extension String {
    func wholeMatch(_ pattern: String) -> Bool {
        range(of: pattern, options: .regularExpression) != nil
    }
}
