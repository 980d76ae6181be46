import Foundation
import Testing

/// prefetchd as systemd runs it: readiness and watchdog datagrams, socket activation, reload, journal lines, access
/// control by peer credentials. Nothing here boots systemd: a fake NOTIFY_SOCKET listener and
/// `systemd-socket-activate` stand in for it.
@Suite(.serialized)
struct SystemdTests {
    @Test("a NOTIFY_SOCKET path sees READY=1 with STATUS, WATCHDOG=1 at half WATCHDOG_USEC, RELOADING=1, STOPPING=1")
    func notifications() throws {
        let directory = try TemporaryDirectory()
        let listener = try NotifyListener(path: directory.path + "/notify")
        let daemon = try ServiceDaemon(environment: ["NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "400000"],
                                       directory: directory)
        let ready = try #require(listener.waitFor { $0.fields["READY"] == "1" }, "no READY=1: \(daemon.log)")
        let status = try #require(ready.fields["STATUS"])
        #expect(status.contains("fast 0/8 running"), "\(status)")
        #expect(status.contains("slow 0/1 running"), "\(status)")

        // 200 ms expected, checked loosely on the kernel's arrival times: the mean and the median interval.
        let pings = listener.collect(for: 2).filter { $0.text == "WATCHDOG=1" }.map(\.time)
        #expect(pings.count >= 5, "\(pings.count) pings in 2 s at a 200 ms period")
        let intervals = zip(pings.dropFirst(), pings).map { $0 - $1 }.sorted()
        if intervals.count >= 4 {
            let mean = intervals.reduce(0, +) / Double(intervals.count)
            let median = intervals[intervals.count / 2]
            #expect(mean > 0.15 && mean < 0.3, "mean watchdog period \(mean) s, expected about 0.2 s: \(intervals)")
            #expect(median > 0.15 && median < 0.3, "median watchdog period \(median) s, expected about 0.2 s")
        }

        daemon.signal(SIGHUP)
        let reloading = try #require(listener.waitFor { $0.fields["RELOADING"] == "1" })
        #expect(Int64(reloading.fields["MONOTONIC_USEC"] ?? "") != nil, "\(reloading.text)")
        #expect(listener.waitFor { $0.fields["READY"] == "1" } != nil, "READY=1 again after the reload")

        daemon.signal(SIGTERM)
        #expect(listener.waitFor { $0.fields["STOPPING"] == "1" } != nil)
        daemon.child.process.waitUntilExit()
        #expect(daemon.child.process.terminationStatus == 0)
    }

    @Test("an abstract @NOTIFY_SOCKET gets READY=1 and STATUS updates; WATCHDOG_PID of another process means no pings")
    func abstractSocket() throws {
        let listener = try NotifyListener(path: nil)
        let daemon = try ServiceDaemon(environment: ["NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "200000",
                                                     "WATCHDOG_PID": "1"])
        #expect(listener.waitFor { $0.fields["READY"] == "1" } != nil, "no READY=1: \(daemon.log)")
        // A queued URL to an origin that accepts and never answers keeps a transfer running: the lane counts change
        // and stay changed, so a STATUS= update follows within a second, however the status checks fall.
        let silent = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(silent) }
        var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0,
                                  sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                guard bind(silent, generic, length) == 0, listen(silent, 8) == 0,
                      getsockname(silent, generic, &length) == 0 else { throw HarnessError("silent origin: errno \(errno)") }
            }
        }
        #expect(daemon.ctl("queue", "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))/never.jpg").status == 0)
        let update = listener.waitFor(timeout: 3) { $0.fields["STATUS"] != nil && $0.fields["READY"] == nil }
        #expect(update != nil, "a STATUS= update after the lanes changed")
        #expect(!listener.received.contains { $0.text.contains("WATCHDOG=1") }, "pings are for WATCHDOG_PID only")
    }

    @Test("a WATCHDOG_PID that is no pid means no pings, as sd_watchdog_enabled says (it was taken as this process's)",
          arguments: ["abc", "", "99999999999999999999"])
    func watchdogPidNotANumber(owner: String) throws {
        let listener = try NotifyListener(path: nil)
        let daemon = try ServiceDaemon(environment: ["NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "200000",
                                                     "WATCHDOG_PID": owner])
        #expect(listener.waitFor { $0.fields["READY"] == "1" } != nil, "no READY=1: \(daemon.log)")
        let later = listener.collect(for: 0.5)
        #expect(!(listener.received + later).contains { $0.text.contains("WATCHDOG=1") }, "WATCHDOG_PID=\(owner)")
    }

    @Test("a log line holds one message: control characters from outside are written out (a relative NOTIFY_SOCKET with a newline forged a line of its own; a C1 CSI reached the terminal, and a right-to-left override reordered the line)")
    func logLinesCannotBeForged() throws {
        let daemon = try ServiceDaemon(environment: ["NOTIFY_SOCKET": "nonexistent/x\n2026-01-01 00:00:00 prefetchd[1] error: forged\u{1B}[2J\u{9B}2J\u{202E}gpj.exe"])
        #expect(daemon.waitForLog("not notifying systemd"), "\(daemon.log)")
        #expect(daemon.log.contains("NOTIFY_SOCKET=nonexistent/x\\n2026-01-01 00:00:00 prefetchd[1] error: forged\\x1b[2J\\x9b2J\\u202egpj.exe: "),
                "\(daemon.log)")
        #expect(!daemon.log.split(separator: "\n").contains { $0.hasPrefix("2026-01-01") }, "\(daemon.log)")
        #expect(!daemon.log.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{9B}" || $0 == "\u{202E}" })
    }

    @Test("started by systemd-socket-activate --fdname=ctl, the first client is served and the socket is not unlinked")
    func socketActivation() throws {
        let daemon = try ServiceDaemon(launcher: { ["/usr/bin/systemd-socket-activate", "-l", $0, "--fdname=ctl"] },
                                       wait: false)
        waitUntil(seconds: 2) { FileManager.default.fileExists(atPath: daemon.socket) }
        let ping = daemon.ctl("ping")
        #expect(ping.status == 0, "the first client: \(ping.stderr) \(daemon.log)")
        try daemon.waitUntilServing()
        #expect(daemon.waitForLog("(from systemd)"), "\(daemon.log)")
        #expect(daemon.log.contains("Execing"), "started by systemd-socket-activate: \(daemon.log)")
        daemon.signal(SIGTERM)
        daemon.child.process.waitUntilExit()
        #expect(daemon.child.process.terminationStatus == 0)
        #expect(FileManager.default.fileExists(atPath: daemon.socket), "the socket belongs to the service manager")
    }

    @Test("LISTEN_FDS naming descriptors that were not passed fails the start with one clear line (it trapped at 2^31 - 3, and walked 2^31 descriptors just below)")
    func listenFDsOutOfRange() throws {
        let directory = try TemporaryDirectory()
        for count in ["2147483645", "2147483644"] {
            let script = "LISTEN_PID=$$ LISTEN_FDS=\(count) exec \"$0\" --socket \"$1\" --cache-dir \"$2\""
            let result = run("/usr/bin/timeout", ["-s", "KILL", "20", "/bin/sh", "-c", script, Paths.prefetchd,
                                                  directory.path + "/ctl.sock", directory.path + "/cache"])
            #expect(result.status == 1, "LISTEN_FDS=\(count): exit \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("LISTEN_FDS=\(count) passes descriptors 3-") && result.stderr.contains("is not open"),
                    "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count < 5, "\(result.stderr)")
        }
    }

    @Test("LISTEN_FDS counting more descriptors than were passed fails the start with one clear line (the daemon took its own epoll descriptor for a passed one, closed it and trapped)", arguments: ["2", "5"])
    func listenFDsBeyondThePassedSocket(count: String) throws {
        let directory = try TemporaryDirectory()
        // One listening socket at descriptor 3, as systemd passes it, but LISTEN_FDS says more.
        let script = """
            import os, socket, sys
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(sys.argv[1]); listener.listen()
            if listener.fileno() != 3: os.dup2(listener.fileno(), 3)
            os.set_inheritable(3, True)
            os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS=sys.argv[2])
            os.execv(sys.argv[3], [sys.argv[3], "--cache-dir", sys.argv[4]])
            """
        let result = run("/usr/bin/timeout", ["-s", "KILL", "20", "/usr/bin/python3", "-c", script, directory.path + "/ctl.sock",
                                              count, Paths.prefetchd, directory.path + "/cache"])
        #expect(result.status == 1, "LISTEN_FDS=\(count): exit \(result.status) \(result.stderr)")
        #expect(result.stderr.contains("LISTEN_FDS=\(count) passes descriptors 3-\(2 + Int(count)!), but 4 is not open"),
                "\(result.stderr)")
    }

    @Test("started with standard input and error closed, the daemon writes no log line into its lock file (they went there, over the pid)")
    func closedStandardDescriptors() throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/ctl.sock"
        let daemon = try ServiceDaemon(["--socket", socket], launcher: { _ in ["/bin/sh", "-c", "exec \"$@\" <&- 2>&-", "sh"] },
                                       directory: directory)
        #expect(daemon.ctl("get", "--timeout", "5", "http://127.0.0.1:1/refused.jpg").status == 1)
        let pid = try #require(try daemon.status()["pid"] as? Int)
        let lock = try String(contentsOfFile: daemon.cache + "/lock", encoding: .utf8)
        #expect(lock.split(separator: "\n") == [Substring(String(pid))], "lock: \(lock.prefix(300))")
        for fd in [0, 2] {
            let target = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)")
            #expect(target == "/dev/null", "descriptor \(fd): \(target)")
        }
        daemon.signal(SIGTERM)
        daemon.child.process.waitUntilExit()
    }

    @Test("SIGHUP applies a new fast_width live; a bad file keeps the running configuration and logs the line")
    func reload() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("fast_width = 8\n", to: config)
        let daemon = try ServiceDaemon(["--config", config], directory: directory)
        #expect(try daemon.fastWidth() == 8)

        try write("# fewer urgent fetches\nfast_width = 3\nlog_level = debug\nsocket_mode = 0660\n", to: config)
        daemon.signal(SIGHUP)
        #expect(daemon.waitForLog("fast_width: 8 -> 3"), "\(daemon.log)")
        #expect(try daemon.fastWidth() == 3)
        #expect(daemon.log.contains("restart prefetchd to apply socket_mode: 0600 -> 0660"), "\(daemon.log)")

        try write("fast_width = 3\nslow_width = lots\n", to: config)
        daemon.signal(SIGHUP)
        #expect(daemon.waitForLog("keeping the running configuration"), "\(daemon.log)")
        #expect(daemon.log.contains("\(config):2: slow_width: 'lots'"), "\(daemon.log)")
        #expect(try daemon.fastWidth() == 3)
        #expect(daemon.ctl("ping").status == 0)
    }

    @Test("SIGHUP lowering max_cache_bytes evicts down to it at once (the cache stayed over it until a later fetch ended)")
    func reloadLowersCacheLimit() throws {
        let origin = try Origin()
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("max_cache_bytes = 1M\n", to: config)
        let daemon = try ServiceDaemon(["--config", config], directory: directory)
        let urls = ["a", "b", "c"].map { origin.url("/\($0).jpg?size=20000") }
        #expect(daemon.ctl("get", urls[0], urls[1], urls[2]).status == 0)
        func cache() throws -> [String: Any] {
            let status = try JSONSerialization.jsonObject(with: Data(daemon.ctl("status", "--json").stdout.utf8)) as? [String: Any]
            return try #require(status?["cache"] as? [String: Any])
        }
        #expect(try cache()["entries"] as? Int == 3)
        try write("max_cache_bytes = 30K\n", to: config)
        daemon.signal(SIGHUP)
        #expect(daemon.waitForLog("to stay under 30720 bytes"), "\(daemon.log)")
        let after = try cache()
        #expect((after["bytes"] as? Int).map { $0 <= 30 * 1024 } == true && after["entries"] as? Int == 1, "\(after)")
    }

    @Test("SIGHUP with the configuration replaced by a FIFO keeps the running configuration and keeps serving (it blocked every client until someone wrote to the FIFO)")
    func reloadFromFIFO() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("fast_width = 3\n", to: config)
        let daemon = try ServiceDaemon(["--config", config], directory: directory)
        unlink(config)
        #expect(mkfifo(config, 0o600) == 0)
        daemon.signal(SIGHUP)
        #expect(daemon.waitForLog("keeping the running configuration"), "\(daemon.log)")
        #expect(daemon.log.contains("\(config): not a regular file"), "\(daemon.log)")
        #expect(daemon.ctl("ping").status == 0)
        #expect(try daemon.fastWidth() == 3)
    }

    @Test("SIGHUP with the default configuration file gone keeps the running configuration (every setting went back to its default)")
    func reloadWithDefaultFileGone() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("fast_width = 3\n", to: config)
        let daemon = try ServiceDaemon(environment: ["CONFIGURATION_DIRECTORY": directory.path], directory: directory)
        #expect(try daemon.fastWidth() == 3)
        unlink(config)
        daemon.signal(SIGHUP)
        #expect(daemon.waitForLog("keeping the running configuration: \(config) is gone"), "\(daemon.log)")
        #expect(try daemon.fastWidth() == 3)
    }

    @Test("SIGHUP naming the running index as metrics_textfile, with the file's cache_dir moved, keeps the running configuration (the metrics replaced the index and its queue)")
    func reloadKeepsMetricsOffTheRunningIndex() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf", socket = directory.path + "/ctl.sock"
        let index = directory.path + "/cache/index.sqlite"
        try write("socket = \(socket)\ncache_dir = \(directory.path)/cache\n", to: config)
        let child = try ChildProcess(Paths.prefetchd, ["--config", config], stderrPath: directory.path + "/daemon.log",
                                     environment: serviceEnvironment())
        defer { child.stop(SIGKILL) }
        #expect(waitUntil(seconds: 10) { run(Paths.prefetchctl, ["--socket", socket, "ping"]).status == 0 })
        try write("socket = \(socket)\ncache_dir = \(directory.path)/moved\nmetrics_textfile = \(index)\n", to: config)
        kill(child.pid, SIGHUP)
        #expect(waitUntil(seconds: 5) {
            child.stderrText.contains("keeping the running configuration: metrics_textfile: \(index) is in the cache directory")
        }, "\(child.stderrText)")
        #expect(run(Paths.prefetchctl, ["--socket", socket, "ping"]).status == 0)
    }

    @Test("with JOURNAL_STREAM set, each log line carries its syslog priority and no timestamp; a summary line per burst at info, a line per failure")
    func journalLines() throws {
        let origin = try Origin()
        let daemon = try ServiceDaemon(["--max-attempts", "1"], environment: ["JOURNAL_STREAM": "8:12345"])
        #expect(daemon.waitForLog("serving"))
        #expect(daemon.ctl("get", origin.url("/journal.jpg")).status == 0)
        #expect(daemon.ctl("get", origin.url("/journal-missing.jpg?status=404")).status != 0)
        daemon.signal(SIGTERM)
        daemon.child.process.waitUntilExit()
        let lines = daemon.log.split(separator: "\n")
        #expect(lines.first?.hasPrefix("<6>prefetchd ") == true, "\(lines.first ?? "")")
        #expect(lines.allSatisfy { $0.hasPrefix("<") }, "\(lines)")
        #expect(lines.filter { $0.hasPrefix("<6>in ") && $0.contains(": fetched 1 (") }.count == 1, "\(lines)")
        #expect(!lines.contains { $0.contains("/journal.jpg") }, "no line per fetched file at info: \(lines)")
        #expect(lines.filter { $0.hasPrefix("<6>failed ") && $0.contains("/journal-missing.jpg") }.count == 1, "\(lines)")
    }

    @Test("SIGTERM during 50 running downloads loses no acknowledged queue entry (checked after a restart)")
    func termDuringDownloads() throws {
        let origin = try Origin()
        let directory = try TemporaryDirectory()
        let urls = (1...50).map { origin.url("/term/\($0).jpg?delay=1&size=100000") }
        var daemon = try ServiceDaemon(["--slow-width", "50"], directory: directory)
        let queued = run(Paths.prefetchctl, ["--socket", daemon.socket, "queue", "-"], stdin: urls.joined(separator: "\n"))
        #expect(queued.status == 0, "\(queued.stderr)")
        for _ in 0..<100 {
            if (try daemon.status()["slow"] as? [String: Any])?["running"] as? Int == 50 { break }
            usleep(50_000)
        }
        #expect((try daemon.status()["slow"] as? [String: Any])?["running"] as? Int == 50)
        let stopping = monotonicSeconds()
        daemon.signal(SIGTERM)
        daemon.child.process.waitUntilExit()
        #expect(daemon.child.process.terminationStatus == 0)
        #expect(monotonicSeconds() - stopping < 5, "stops well within a unit's stop timeout")

        daemon = try ServiceDaemon(["--slow-width", "50"], directory: directory)
        let status = try daemon.status()
        let slow = try #require(status["slow"] as? [String: Any])
        let held = (slow["waiting"] as? Int ?? 0) + (slow["running"] as? Int ?? 0) + (status["backlog"] as? Int ?? 0)
        let cached = (status["cache"] as? [String: Any])?["entries"] as? Int ?? 0
        #expect(held + cached == 50, "after the restart: \(status)")
        // Nothing asks for them again: the durable backlog alone brings every one of them into the cache.
        for _ in 0..<300 {
            if (try daemon.status()["cache"] as? [String: Any])?["entries"] as? Int == 50 { break }
            usleep(100_000)
        }
        #expect((try daemon.status()["cache"] as? [String: Any])?["entries"] as? Int == 50, "\(daemon.log)")
    }

    // MARK: Access control (root only: setpriv changes users)

    @Test("prefetchctl says why it cannot connect: a socket this user may not enter, or a path that is no socket, is no daemon to start (both said \"Is it running?\")",
          .enabled(if: getuid() == 0, "setpriv needs root"))
    func unreachableSaysWhy() throws {
        let daemon = try ServiceDaemon()
        let ctl = try publicPrefetchctl(in: daemon.directory)
        let denied = runAs(uid: 65534, gid: 65534, [ctl, "--socket", daemon.socket, "ping"])
        #expect(denied.status == 3 && denied.stderr.contains("Permission denied")
                && denied.stderr.contains("does not let this user in") && !denied.stderr.contains("Is it running"),
                "\(denied.stderr)")
        let file = daemon.directory.path + "/regular.sock"
        try write("", to: file)
        let notSocket = run(Paths.prefetchctl, ["--socket", file, "ping"])
        #expect(notSocket.status == 3 && notSocket.stderr.contains("it is not a socket"), "\(notSocket.stderr)")
    }

    @Test("a peer outside root, the daemon's user and the allowed users and groups gets unauthorized; members are served",
          .enabled(if: getuid() == 0, "setpriv needs root"))
    func accessControl() throws {
        let daemon = try ServiceDaemon(["--socket-mode", "0666", "--allowed-groups", "4242", "--allowed-users", "65533"])
        let ctl = try publicPrefetchctl(in: daemon.directory)
        let raw = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(5)
            data = b""
            while not data.endswith(b"\\n"):
                chunk = s.recv(4096)
                if not chunk: break
                data += chunk
            sys.stdout.write(data.decode()); print("EOF" if s.recv(4096) == b"" else "OPEN")
            """
        let refused = runAs(uid: 65534, gid: 65534, ["/usr/bin/python3", "-c", raw, daemon.socket])
        let line = try #require(refused.lines.first, "\(refused.stderr)")
        let reply = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(reply["id"] is NSNull)
        #expect(reply["ok"] as? Bool == false)
        #expect(errorCode(line) == "unauthorized", "\(line)")
        #expect(refused.lines.last == "EOF", "the connection is closed after the one line")
        #expect(daemon.waitForLog("refused a connection from uid 65534"), "\(daemon.log)")

        let outsider = runAs(uid: 65534, gid: 65534, [ctl, "--socket", daemon.socket, "ping"])
        #expect(outsider.status == 4, "prefetchctl exits 4 (rejected): \(outsider.stderr)")
        #expect(outsider.stderr.contains("unauthorized"), "\(outsider.stderr)")
        #expect(outsider.stderr.contains("only root, ") && !outsider.stderr.contains("root, root"), "each name once: \(outsider.stderr)")

        let member = runAs(uid: 65534, gid: 65534, groups: [4242], [ctl, "--socket", daemon.socket, "ping"])
        #expect(member.status == 0, "supplementary group 4242: \(member.stderr)")
        let primary = runAs(uid: 65534, gid: 4242, [ctl, "--socket", daemon.socket, "ping"])
        #expect(primary.status == 0, "primary group 4242: \(primary.stderr)")
        let user = runAs(uid: 65533, gid: 65533, [ctl, "--socket", daemon.socket, "ping"])
        #expect(user.status == 0, "allowed user 65533: \(user.stderr)")
        #expect(daemon.ctl("ping").status == 0, "root is always served")
    }

    @Test("a member of an allowed group can read the file it was given (group-readable cache)",
          .enabled(if: getuid() == 0, "setpriv needs root"))
    func memberReadsFile() throws {
        let origin = try Origin()
        let directory = try TemporaryDirectory()
        // As under the unit: CacheDirectoryMode=0750, owned by the service's group (here by setgid).
        let cache = directory.path + "/cache"
        try FileManager.default.createDirectory(atPath: cache, withIntermediateDirectories: false)
        #expect(chown(cache, 0, 4242) == 0)
        #expect(chmod(cache, 0o2750) == 0)
        let daemon = try ServiceDaemon(["--socket-mode", "0666", "--allowed-groups", "4242"], directory: directory)
        let ctl = try publicPrefetchctl(in: directory)
        let got = runAs(uid: 65534, gid: 65534, groups: [4242], [ctl, "--socket", daemon.socket, "get", origin.url("/shared.jpg")])
        #expect(got.status == 0, "\(got.stderr)")
        let path = got.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let read = runAs(uid: 65534, gid: 65534, groups: [4242], ["/bin/cat", path])
        #expect(read.status == 0, "\(path): \(read.stderr)")
        #expect(read.stdoutData == (try origin.body("/shared.jpg")))
        let outsider = runAs(uid: 65534, gid: 65534, ["/bin/cat", path])
        #expect(outsider.status != 0, "outside the group the file stays unreadable")
    }
}
