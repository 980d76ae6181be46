import Foundation
import Testing

/// examples/thumbs/thumbs.py, the terminal thumbnail browser built on `view`, in a real terminal (tmux) against a live
/// daemon and origin. With `--text` it draws one line per row, `ROW [ WxH ] URL`, and a status line at the bottom.
@Suite(.serialized)
struct ThumbsTests {
    static let script = Paths.repository + "/examples/thumbs/thumbs.py"

    /// A list file for thumbs.py: a comment and a blank line (both skipped), then one URL per line.
    static func list(_ urls: [String], in directory: TemporaryDirectory, name: String = "list.txt") throws -> String {
        let path = directory.path + "/" + name
        try ("# thumbnails\n\n" + urls.map { $0 + "\n" }.joined()).write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Whether `screen` shows `row` in text mode: its number, `label` centred in the box, then `rest` up to the end
    /// of the line.
    static func shows(_ screen: String, row: Int, _ label: String, _ rest: String) -> Bool {
        let pattern = "^ *\(row) \\[ *" + NSRegularExpression.escapedPattern(for: label) + " *\\] "
            + NSRegularExpression.escapedPattern(for: rest) + "$"
        return screen.split(separator: "\n").contains { String($0).wholeMatch(pattern) }
    }

    /// The lines of `screen` that show a row.
    static func rowLines(_ screen: String) -> [String] {
        screen.split(separator: "\n").map(String.init).filter { $0.wholeMatch(#"^ *\d+ \[.*\] "#) }
    }

    static func alternateScreen(_ tmux: Tmux) -> Bool {
        tmux.tmux(["display-message", "-p", "-t", tmux.session, "#{alternate_on}"]).stdout.hasPrefix("1")
    }

    @Test("thumbs.py --text in 80x24: rows fill in, two PageDowns show rows 46-68 ready, each shown row fetched once; q exits 0")
    func scrollAndQuit() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let directory = try TemporaryDirectory()
        let urls = (0..<200).map { origin.url("/t\($0).jpg") }
        let list = try Self.list(urls, in: directory)
        let tmux = try Tmux(["python3", Self.script, "--text", "--socket", daemon.socket, list], columns: 80, rows: 24)
        defer { tmux.kill() }

        // 23 rows on 24 lines, the last one is the status line. The origin's JPEGs are 8x8 (origin.py) and thumbs.py
        // asks for 128x128 thumbnails, which never enlarge: a ready row says 8x8.
        let first = try tmux.waitForScreen("the first screen ready", timeout: 20) { screen in
            (0...22).allSatisfy { Self.shows(screen, row: $0, "8x8", urls[$0]) }
        }
        #expect(Self.rowLines(first).count == 23, "\(first)")
        #expect(first.contains("rows 0-22 of 200 · 23 ready · "), "\(first)")
        #expect(Self.alternateScreen(tmux))

        tmux.send("NPage")
        _ = try tmux.waitForScreen("the second screen") { $0.contains("rows 23-45 of 200 · ") }
        tmux.send("NPage")
        let third = try tmux.waitForScreen("the third screen ready", timeout: 20) { screen in
            (46...68).allSatisfy { Self.shows(screen, row: $0, "8x8", urls[$0]) }
        }
        let lines = third.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(Self.rowLines(third).count == 23, "\(third)")
        #expect(lines.contains("rows 46-68 of 200 · 23 ready · ↑/↓ PgUp/PgDn Home/End · q quits"), "\(third)")
        #expect(lines.allSatisfy { $0.count <= 80 }, "\(third)")

        // Every row that was on a screen was fetched, once: rows 23-45 were prefetched ahead of the first screen and
        // shown from the cache. The end of the list was never near a view.
        let counts = try origin.stats().counts
        for row in 0...68 {
            #expect(counts["/t\(row).jpg"] == 1, "row \(row) was fetched \(counts["/t\(row).jpg"] ?? 0) times")
        }
        #expect(counts["/t199.jpg"] == nil, "the last row was fetched though never near a view")

        tmux.send("q")
        #expect(try tmux.waitForExit() == 0)
        #expect(!Self.alternateScreen(tmux), "the alternate screen was left")
        #expect(!tmux.capture().contains("q quits"), "\(tmux.capture())")
    }

    @Test("thumbs.py with chafa draws each visible row's thumbnail as coloured blocks beside its URL")
    func pictures() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chafa") else {
            throw HarnessError("chafa is not installed (it is in the Makefile's TEST_PACKAGES: run `make test-deps`)")
        }
        let directory = try TemporaryDirectory()
        let root = directory.path + "/root"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let colours = ["red-blue", "gold-navy", "green-white", "black-orange", "purple-yellow", "cyan-maroon"]
        for (i, colours) in colours.enumerated() {
            let made = run("/usr/bin/convert", ["-size", "96x64", "gradient:" + colours, root + "/g\(i).jpg"])
            #expect(made.status == 0, "convert: \(made.stderr)")
        }
        let origin = try Origin(root: root)
        let daemon = try DaemonUnderTest()
        let urls = colours.indices.map { origin.url("/g\($0).jpg") }
        let list = try Self.list(urls, in: directory)
        let tmux = try Tmux(["python3", Self.script, "--socket", daemon.socket, list], columns: 80, rows: 24)
        defer { tmux.kill() }

        // Five lines a row (room for a picture of 8x4 cells, and a gap): rows 0-3 fit above the status line.
        let screen = try tmux.waitForScreen("four pictures", timeout: 20) { $0.contains("rows 0-3 of 6 · 4 ready") }
        let lines = screen.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let blocks = Set("▀▄█▌▐▖▗▘▝▚▞▙▛▜▟░▒▓")
        for row in 0...3 {
            let top = try #require(lines.firstIndex { $0.contains("\(row)  " + urls[row]) }, "row \(row):\n\(screen)")
            // 96x64 in 8 columns: 2 lines of half blocks (2 pixels a cell, one above the other).
            let picture = lines[top..<min(lines.count, top + 2)].map { String($0.prefix(8)) }
            #expect(picture.allSatisfy { $0.contains { blocks.contains($0) } }, "row \(row)'s picture:\n\(picture.joined(separator: "\n"))")
        }
        #expect(tmux.capture(escapes: true).contains("\u{1B}[38;"), "the pictures are in colour")
        tmux.send("q")
        #expect(try tmux.waitForExit() == 0)
    }

    /// The processes whose parent is `parent`, from /proc (read to the end: its files have no size).
    static func children(of parent: Int32) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { Int32($0) }.filter { pid in
            guard let handle = FileHandle(forReadingAtPath: "/proc/\(pid)/stat") else { return false }
            defer { try? handle.close() }
            // "PID (COMMAND) STATE PPID ...": the command may hold blanks and parentheses.
            guard let data = try? handle.readToEnd() else { return false }
            let stat = String(decoding: data, as: UTF8.self)
            guard let end = stat.lastIndex(of: ")") else { return false }
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            return fields.count > 1 && Int32(fields[1]) == parent
        }
    }

    @Test("thumbs.py shows a 404 and a URL without scheme as ERR with their codes; SIGINT exits 130, terminal restored")
    func failuresAndInterrupt() throws {
        let origin = try Origin()
        let daemon = try DaemonUnderTest()
        let directory = try TemporaryDirectory()
        let urls = [origin.url("/e0.jpg"), origin.url("/e1.jpg?status=404"), "no-scheme.example/e2.jpg", origin.url("/e3.jpg")]
        let list = try Self.list(urls, in: directory)
        // A shell that writes its PID, runs thumbs.py, then saves the terminal's modes to see that they were restored.
        let stty = directory.path + "/stty", shellPID = directory.path + "/shell.pid"
        let script = "echo $$ > '\(shellPID)'; python3 '\(Self.script)' --text --socket '\(daemon.socket)' '\(list)'; "
            + "status=$?; stty -a > '\(stty)'; exit $status"
        let tmux = try Tmux(["/bin/sh", "-c", script], columns: 80, rows: 24)
        defer { tmux.kill() }

        let screen = try tmux.waitForScreen("every row answered", timeout: 20) { $0.contains("2 ready · 2 failed") }
        #expect(Self.shows(screen, row: 0, "8x8", urls[0]), "\(screen)")
        #expect(Self.shows(screen, row: 1, "ERR", "http_status " + urls[1]), "\(screen)")
        #expect(Self.shows(screen, row: 2, "ERR", "invalid_url " + urls[2]), "\(screen)")
        #expect(Self.shows(screen, row: 3, "8x8", urls[3]), "\(screen)")
        #expect(screen.contains("rows 0-3 of 4 · 2 ready · 2 failed · "), "\(screen)")
        #expect(Self.rowLines(screen).count == 4, "\(screen)")

        // The Ctrl-C key would send SIGINT to the shells around thumbs.py too, and dash (sh) dies of it; so the signal
        // goes to thumbs.py alone, the shell's child.
        let pidText = try String(contentsOfFile: shellPID, encoding: .utf8)
        let shell = try #require(Int32(pidText.trimmingCharacters(in: .whitespacesAndNewlines)))
        let thumbs = try #require(Self.children(of: shell).first, "thumbs.py runs under the shell")
        kill(thumbs, SIGINT)
        #expect(try tmux.waitForExit() == 130)
        #expect(!Self.alternateScreen(tmux), "the alternate screen was left")
        let modes = try String(contentsOfFile: stty, encoding: .utf8)
        #expect(modes.contains(" icanon") && modes.contains(" echo "), "canonical mode and echo are back:\n\(modes)")
    }

    @Test("thumbs.py exits 3 with a message on the normal screen when no daemon listens; usage errors exit 2")
    func unreachableAndUsage() throws {
        let directory = try TemporaryDirectory()
        let list = try Self.list(["http://127.0.0.1:9/u.jpg"], in: directory)
        let socket = directory.path + "/none.sock"
        let tmux = try Tmux(["python3", Self.script, "--socket", socket, list], columns: 80, rows: 24)
        defer { tmux.kill() }
        #expect(try tmux.waitForExit() == 3)
        #expect(!Self.alternateScreen(tmux))
        // With the history (tmux scrolls the line up when it marks the pane dead) and wrapped lines joined.
        let screen = tmux.tmux(["capture-pane", "-p", "-J", "-S", "-", "-t", tmux.session]).stdout
        #expect(screen.contains("thumbs: cannot connect to \(socket): No such file or directory (is prefetchd running?)"),
                "\(screen)")

        let empty = try Self.list([], in: directory, name: "empty.txt")
        let usageErrors: [(arguments: [String], message: String)] = [
            ([], "required: LIST|-"), (["--size", "big", list], "--size must be WxH"), ([empty], "has no URLs"),
            ([list], "standard output is not a terminal"),
        ]
        for (arguments, message) in usageErrors {
            let result = run("/usr/bin/env", ["python3", Self.script] + arguments)
            #expect(result.status == 2, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
    }
}
