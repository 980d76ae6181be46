import Foundation
import Testing

/// The configuration file: `--check-config`, errors that name the line, flags over the file, and documentation
/// that names every key.
struct ConfigTests {
    /// `prefetchd --check-config` with `arguments`, parsed into `key → value` when it succeeds (a quoted value
    /// without its quotes, as the file's reader takes it).
    func check(_ arguments: [String]) -> (result: CommandResult, settings: [String: String]) {
        let result = run(Paths.prefetchd, ["--check-config"] + arguments)
        var settings: [String: String] = [:]
        for line in result.lines where !line.hasPrefix("#") {
            let parts = line.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            var value = parts.count > 1 ? parts[1] : ""
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            settings[parts[0]] = value
        }
        return (result, settings)
    }

    @Test("--check-config on a good file prints the effective settings; flags win over the file")
    func goodFile() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("""
            # prefetchd test configuration
            fast_width = 4      # inline comment
              slow_width=2
            max_cache_bytes = 512M
            cache_dir = "/var/tmp/prefetch #1"
            log_level = debug
            allowed_groups = 0, 4242
            allowed_users =
            """, to: config)
        let (result, settings) = check(["--config", config, "--slow-width", "3"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains(config))
        #expect(settings["fast_width"] == "4")
        #expect(settings["slow_width"] == "3", "the flag overrides the file")
        #expect(settings["max_cache_bytes"] == "512M")
        #expect(settings["cache_dir"] == "/var/tmp/prefetch #1")
        #expect(settings["log_level"] == "debug")
        #expect(settings["allowed_groups"] == "root,4242")
        #expect(settings["allowed_users"] == "")
        #expect(settings["default_ttl"] == "86400", "unset keys keep their defaults")
    }

    @Test("--check-config refuses a cache directory the daemon would refuse: a file, a directory of someone else's files, a link to nothing or a loop of links (it said the configuration was valid, and the start failed)")
    func checkRefusesAnUnusableCacheDirectory() throws {
        let directory = try TemporaryDirectory()
        try write("y", to: directory.path + "/b.txt")
        let file = check(["--cache-dir", directory.path + "/b.txt"]).result
        #expect(file.status == 1 && file.stderr.contains("b.txt is not a directory"), "\(file.stderr)")
        let foreign = check(["--cache-dir", directory.path]).result
        #expect(foreign.status == 1 && foreign.stderr.contains("holds other files (b.txt) and no prefetchd index"), "\(foreign.stderr)")
        #expect(check(["--cache-dir", directory.path + "/new"]).result.status == 0, "one that does not exist yet is fine")
        #expect(symlink(directory.path + "/nothing", directory.path + "/dangling") == 0)
        let dangling = check(["--cache-dir", directory.path + "/dangling"]).result
        #expect(dangling.status == 1 && dangling.stderr.contains("dangling is a symbolic link to nothing"), "\(dangling.stderr)")
        #expect(symlink(directory.path + "/loop", directory.path + "/loop") == 0)
        let loop = check(["--cache-dir", directory.path + "/loop"]).result
        #expect(loop.status == 1 && loop.stderr.contains("loop cannot be used: Too many levels of symbolic links"), "\(loop.stderr)")
    }

    @Test("a cache directory or socket from the environment with a control character or bytes that are not UTF-8 is refused, as a flag's is (CACHE_DIRECTORY with a newline printed `cache_dir = /tmp/a` and a line `b`; a HOME not in UTF-8 named another directory)")
    func environmentPathsFollowTheFlagsRules() throws {
        let directory = try TemporaryDirectory()
        // The shell makes the bytes: an argument of this process is a String, always UTF-8.
        func checkWith(_ assignments: String) -> CommandResult {
            run("/bin/sh", ["-c", "exec env -u XDG_CACHE_HOME -u XDG_RUNTIME_DIR -u RUNTIME_DIRECTORY \(assignments) "
                            + "\"$0\" --check-config --socket '\(directory.path)/ctl.sock'", Paths.prefetchd])
        }
        let newline = checkWith("CACHE_DIRECTORY=\"$(printf '\(directory.path)/a\\nb')\"")
        #expect(newline.status == 1 && newline.stdout.isEmpty, "\(newline.stdout)")
        #expect(newline.stderr.contains("cache_dir: '\(directory.path)/a<U+000A>b' holds a control character")
                && newline.stderr.contains("$CACHE_DIRECTORY") && newline.stderr.contains("--cache-dir"), "\(newline.stderr)")
        let latin1 = checkWith("-u CACHE_DIRECTORY HOME=\"$(printf '\(directory.path)/\\377')\"")
        #expect(latin1.status == 1 && latin1.stderr.contains("holds U+FFFD, the replacement character"), "\(latin1.stderr)")
        // The quote rule too: `--check-config` printed `cache_dir = "/tmp/a"b "`, which does not read back.
        let quoted = checkWith("CACHE_DIRECTORY='\(directory.path)/a\"b '")
        #expect(quoted.status == 1 && quoted.stderr.contains("holds a double quote and needs quotes"), "\(quoted.stderr)")
        let fine = checkWith("-u CACHE_DIRECTORY HOME='\(directory.path)/h\u{E9}'")
        #expect(fine.status == 0 && fine.stdout.contains("cache_dir = \(directory.path)/h\u{E9}/.cache/prefetchd"),
                "\(fine.stdout) \(fine.stderr)")
    }

    @Test("--check-config on a bad file fails with the file and line", arguments: [
        ("fast_width = 4\nfast_widht = 5\n", ":2: unknown key 'fast_widht'; did you mean 'fast_width'?"),
        ("\n\nfast_width = 0\n", ":3: fast_width: '0' is not a number in 1...1024"),
        ("max_cache_bytes = lots\n", ":1: max_cache_bytes: 'lots' is not a size"),
        ("log_level = loud\n", ":1: log_level: 'loud' is not one of error, warning, info, debug"),
        ("# comment\njust words\n", ":2: expected `key = value`"),
        ("fast_width = 2\nfast_width = 3\n", ":2: fast_width is already set on line 1"),
        ("cache_dir = relative/dir\n", ":1: cache_dir: 'relative/dir' is not an absolute path"),
        ("allowed_groups = no-such-group-here\n", ":1: allowed_groups: no group 'no-such-group-here'"),
        ("socket_mode = 0400\n", ":1: socket_mode: '0400' is not an octal mode"),
    ])
    func badFile(text: String, expected: String) throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write(text, to: config)
        let (result, _) = check(["--config", config])
        #expect(result.status == 1)
        #expect(result.stderr.contains(config + expected), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    @Test("sizes are written as people write them: 1.5G, 500 MB, 2GiB were refused as 'not a size'", arguments: [
        ("1.5G", "1536M"), ("1GB", "1G"), ("500 MB", "500M"), ("2GiB", "2G"), ("64k", "64K"), ("100B", "100"),
        ("0.5K", "512"), ("1.3K", "1331"), ("1073741824", "1G"), ("1.99999999999999999999K", "2047"),
    ])
    func sizesAsPeopleWriteThem(text: String, shown: String) {
        let (result, settings) = check(["--max-cache-bytes", text])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(settings["max_cache_bytes"] == shown)
    }

    @Test("what is not a size is refused by name", arguments: [
        "1.5.G", "G", ".5G", "5.G", "-1G", "1e3", "1,5G", "1 iB", "1GBB", "1XB", "0.1", "0", "99999999999999999999",
        "9000000T", "١٢", "1\u{212A}", "nan", "1e3K", "0x10", "+5",
    ])
    func notASize(text: String) {
        let (result, _) = check(["--max-cache-bytes", text])
        #expect(result.status == 1)
        #expect(result.stderr.contains("--max-cache-bytes: '\(text)' is not a size"), "\(result.stderr)")
    }

    @Test("a bad flag names the flag; --config naming a missing file, or nothing, fails; no file at all is fine")
    func flagsAndMissingFile() throws {
        let bad = check(["--fast-width", "many"])
        #expect(bad.result.status == 1)
        #expect(bad.result.stderr.contains("--fast-width: 'many' is not a number"), "\(bad.result.stderr)")
        let missing = check(["--config", "/nonexistent/prefetchd.conf"])
        #expect(missing.result.status == 1)
        #expect(missing.result.stderr.contains("open /nonexistent/prefetchd.conf: No such file or directory"))
        // An empty path was "open : No such file or directory", naming neither the flag nor a file.
        let empty = check(["--config", ""]).result
        #expect(empty.status == 1 && empty.stderr.contains("--config needs the path of a configuration file"), "\(empty.stderr)")
        if !FileManager.default.fileExists(atPath: "/etc/prefetchd/prefetchd.conf") {
            let none = check([])
            #expect(none.result.status == 0, "\(none.result.stderr)")
            #expect(none.result.stdout.contains("no configuration file"))
        }
    }

    @Test("--check-config warns on stderr of an allowed format without a loader (a typo like webbp was only in the start-up log)")
    func checkConfigWarnsOfMissingLoader() {
        let (result, settings) = check(["--allowed-formats", "jpeg,webbp"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(settings["allowed_formats"] == "jpeg,webbp", "\(settings)")
        #expect(result.stderr.contains("warning: the allowed image format webbp has no gdk-pixbuf loader"), "\(result.stderr)")
        #expect(!check(["--allowed-formats", "jpeg,png"]).result.stderr.contains("warning"))
    }

    @Test("--check-config printed the proxy's password: it shows user:***@, as the log does")
    func checkConfigHidesProxyPassword() {
        let (result, settings) = check(["--proxy", "http://alice:s3cret@proxy.example:3128"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!result.stdout.contains("s3cret"), "\(result.stdout)")
        #expect(settings["proxy"] == "http://alice:***@proxy.example:3128")
    }

    @Test("--check-config prints each value as it is kept: userinfo hidden in the proxy alone (a cache_dir with x://me@host in it was printed as another path, which read back), no empty format name (a trailing ', ' added one), a configuration file may have a quote in its name, and a value read back by code point")
    func checkConfigPrintsWhatIsKept() throws {
        let directory = try TemporaryDirectory()
        let odd = directory.path + "/x://me@host/c"
        let printed = check(["--cache-dir", odd])
        #expect(printed.result.status == 0 && printed.settings["cache_dir"] == odd, "\(printed.result.stdout)")
        let formats = check(["--allowed-formats", "JPEG, ,image/png, "])
        #expect(formats.result.status == 0 && formats.settings["allowed_formats"] == "jpeg,png", "\(formats.result.stdout)")
        let twice = check(["--allowed-formats", "image/image/png"]).result
        #expect(twice.status == 1 && twice.stderr.contains("'image/png' is not a format's name"), "\(twice.stderr)")
        // Read by code point: a combining mark first joined the space before it and was trimmed with it; a prepended
        // mark last (U+0600) joined the closing quote, which was then not found.
        for (flag, value) in [("--proxy", "\u{301}p:3128"), ("--cache-dir", directory.path + "/a #b\u{600}")] {
            let first = run(Paths.prefetchd, ["--check-config", flag, value])
            #expect(first.status == 0, "\(first.stderr)")
            try write(first.stdout, to: directory.path + "/printed.conf")
            let again = run(Paths.prefetchd, ["--check-config", "--config", directory.path + "/printed.conf"])
            #expect(again.status == 0 && again.lines.dropFirst() == first.lines.dropFirst(), "\(again.stdout) \(again.stderr)")
        }
        let config = directory.path + "/my \"prefetchd\" #1.conf"
        try write("fast_width = 3\n", to: config)
        let named = check(["--config", config])
        #expect(named.result.status == 0 && named.settings["fast_width"] == "3", "\(named.result.stderr)")
    }

    @Test("a value refused for --check-config names where it was given: the file and line, or the flag that overrode it, without the hint on where a default comes from (a cache_dir from the file with U+FFFD named neither)")
    func refusedValuesNameWhereTheyWereGiven() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/p.conf"
        try write("fast_width = 3\ncache_dir = \(directory.path)/a\u{FFFD}b\n", to: config)
        let file = run(Paths.prefetchd, ["--check-config", "--config", config])
        #expect(file.status == 1 && file.stderr.contains("\(config):2: cache_dir: '") && file.stderr.contains("holds U+FFFD")
                && !file.stderr.contains("when not set"), "\(file.stderr)")
        let flag = run(Paths.prefetchd, ["--check-config", "--config", config, "--cache-dir", directory.path + "/a\"b "])
        #expect(flag.status == 1 && flag.stderr.contains("cache_dir: '") && flag.stderr.contains("holds a double quote")
                && !flag.stderr.contains(config) && !flag.stderr.contains("when not set"), "\(flag.stderr)")
    }

    @Test("background policies: run, slow or pause per condition, slow_rate, quiet_hours; a bad value is refused by name")
    func backgroundPolicies() {
        let defaults = check([]).settings
        #expect(defaults["metered"] == "pause" && defaults["on_battery"] == "slow" && defaults["power_saver"] == "slow")
        #expect(defaults["slow_rate"] == "128K" && defaults["quiet_hours"] == "" && defaults["offline"] == "pause")
        let good = check(["--metered", "slow", "--on-battery", "pause", "--power-saver", "run", "--slow-rate", "1M",
                          "--quiet-hours", "22:00-6:30", "--offline", "run"])
        #expect(good.result.status == 0, "\(good.result.stderr)")
        #expect(good.settings["metered"] == "slow" && good.settings["on_battery"] == "pause"
                && good.settings["power_saver"] == "run" && good.settings["slow_rate"] == "1M"
                && good.settings["quiet_hours"] == "22:00-06:30" && good.settings["offline"] == "run", "\(good.settings)")
        for (flag, value, message) in [("--metered", "stop", "'stop' is not one of run, slow, pause"),
                                       ("--offline", "wait", "'wait' is not one of run, slow, pause"),
                                       ("--on-battery", "Pause", "is not one of run, slow, pause"),
                                       ("--quiet-hours", "25:00-01:00", "is not a daily window like 08:00-18:00"),
                                       ("--quiet-hours", "08:00-08:00", "start and end different"),
                                       ("--quiet-hours", "8-18", "is not a daily window"),
                                       ("--slow-rate", "100", "is not a rate from 4K to 1T bytes per second"),
                                       ("--slow-rate", "-1K", "--slow-rate")] {
            let bad = check([flag, value]).result
            #expect(bad.status != 0 && bad.stderr.contains(flag) && bad.stderr.contains(message), "\(flag) \(value): \(bad.stderr)")
        }
    }

    @Test("a cache directory the daemon's user cannot write is refused naming the directory and the user (it said only \"mkdir …/tmp: Permission denied\")",
          .enabled(if: getuid() == 0, "setpriv needs root"))
    func unwritableCacheDirectory() throws {
        let directory = try TemporaryDirectory()
        let cache = directory.path + "/cache"
        try FileManager.default.createDirectory(atPath: cache, withIntermediateDirectories: false)
        for path in [directory.path, cache] { try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path) }
        let daemon = directory.path + "/prefetchd-binary"
        try copyExecutable(Paths.prefetchd, to: daemon)
        let result = runAs(uid: 65534, gid: 65534, ["/usr/bin/env", "HOME=/nonexistent", daemon, "--cache-dir", cache,
                                                    "--socket", directory.path + "/never.sock"])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("cannot make the cache in \(cache): mkdir \(cache)/tmp: Permission denied")
                && result.stderr.contains("writable by the daemon's user, uid 65534"), "\(result.stderr)")
        // --check-config says so too (it called the configuration valid).
        let checked = runAs(uid: 65534, gid: 65534, ["/usr/bin/env", "HOME=/nonexistent", daemon, "--check-config",
                                                     "--cache-dir", cache])
        #expect(checked.status == 1 && checked.stderr.contains("is not writable by the user prefetchd runs as (uid 65534)"),
                "\(checked.stderr)")
    }

    @Test("the daemon refuses a socket directory another user owns, or others may write to (it bound its socket in nobody's mode-0777 /tmp/prefetchd-$UID, where nobody then put a socket of their own)",
          .enabled(if: getuid() == 0, "chown needs root"), arguments: [(65534, 0o700, "belongs to uid 65534"), (0, 0o777, "may be written by others (mode 777)")])
    func untrustedSocketDirectory(owner: UInt32, mode: Int, problem: String) throws {
        let directory = try TemporaryDirectory()
        let sockets = directory.path + "/sockets"
        try FileManager.default.createDirectory(atPath: sockets, withIntermediateDirectories: false)
        #expect(chown(sockets, owner, owner) == 0 && chmod(sockets, mode_t(mode)) == 0)
        let result = run("/usr/bin/timeout", ["20", Paths.prefetchd, "--cache-dir", directory.path + "/cache",
                                              "--socket", sockets + "/ctl.sock"])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("the socket \(sockets)/ctl.sock cannot be made safely: \(sockets) \(problem)"), "\(result.stderr)")
    }

    @Test("prefetchctl does not use a /tmp/prefetchd-$UID another user made (it talked to their fake daemon and printed the path it chose)",
          .enabled(if: getuid() == 0, "setpriv needs root"))
    func untrustedFallbackDirectory() throws {
        let directory = try TemporaryDirectory()
        let ctl = try publicPrefetchctl(in: directory)
        let fallback = "/tmp/prefetchd-4242"
        try? FileManager.default.removeItem(atPath: fallback)
        try FileManager.default.createDirectory(atPath: fallback, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: fallback) }
        // Another user's; the user's own but writable by all, sticky or not (others could make the socket first).
        for (owner, mode, problem) in [(65534, 0o777, "belongs to uid 65534, not to this user"),
                                       (4242, 0o1777, "may be written by others (mode 1777)"),
                                       (4242, 0o770, "may be written by others (mode 770)")] {
            #expect(chown(fallback, UInt32(owner), UInt32(owner)) == 0 && chmod(fallback, mode_t(mode)) == 0)
            let result = runAs(uid: 4242, gid: 4242, ["/usr/bin/env", "-u", "XDG_RUNTIME_DIR", "-u", "PREFETCHD_SOCKET", ctl, "ping"])
            #expect(result.status == 3 && result.stderr.contains("not using \(fallback)/ctl.sock: \(fallback) \(problem)"),
                    "\(result.stderr)")
        }
    }

    @Test("a user service read /etc, whose cache_dir and socket are the system service's: a user but root reads their own ~/.config/prefetchd/prefetchd.conf",
          .enabled(if: getuid() == 0, "setpriv needs root"))
    func usersOwnConfiguration() throws {
        let directory = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory.path + "/prefetchd", withIntermediateDirectories: true)
        try write("quiet_hours = 22:00-06:00\n", to: directory.path + "/prefetchd/prefetchd.conf")
        let daemon = directory.path + "/prefetchd-binary"
        try copyExecutable(Paths.prefetchd, to: daemon)
        for path in [directory.path, directory.path + "/prefetchd", daemon] {
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: directory.path + "/prefetchd/prefetchd.conf")
        let user = runAs(uid: 65534, gid: 65534, ["/usr/bin/env", "XDG_CONFIG_HOME=" + directory.path, "HOME=/nonexistent",
                                                  daemon, "--check-config"])
        #expect(user.status == 0, "\(user.stderr)")
        #expect(user.stdout.contains("read from \(directory.path)/prefetchd/prefetchd.conf"), "\(user.stdout)")
        #expect(user.stdout.contains("quiet_hours = 22:00-06:00"))
        let root = run("/usr/bin/env", ["XDG_CONFIG_HOME=" + directory.path, daemon, "--check-config"])
        #expect(root.status == 0 && !root.stdout.contains(directory.path), "root reads only the system's file: \(root.stdout)")
    }

    @Test("a configuration written for an older version, with the retired background_rate, still starts: a warning names it")
    func retiredSetting() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("background_rate = 32K\nslow_width = 2\n", to: config)
        let (result, settings) = check(["--config", config, "--background-rate", "0"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("\(config):1: background_rate is ignored: background work is now held back"),
                "\(result.stderr)")
        #expect(result.stderr.contains("--background-rate is ignored"), "\(result.stderr)")
        #expect(settings["slow_width"] == "2", "the lines after it are read")
        #expect(settings["background_rate"] == nil)
    }

    @Test("the daemon refuses to start on a bad configuration file and says which line")
    func daemonRefusesBadFile() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("fast_width = 2\nper_host = -1\n", to: config)
        let result = run(Paths.prefetchd, ["--config", config, "--socket", directory.path + "/ctl.sock",
                                           "--cache-dir", directory.path + "/cache"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("\(config):2: per_host:"), "\(result.stderr)")
    }

    @Test("metrics_textfile on the socket, the configuration or in the cache directory (it replaced the socket, and the index with its queue) is refused; so is a missing directory, and a socket in the cache's files/ or tmp/")
    func metricsTextfileClashes() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf", socket = directory.path + "/ctl.sock"
        let cache = directory.path + "/cache"
        try write("fast_width = 2\n", to: config)
        try FileManager.default.createDirectory(atPath: cache, withIntermediateDirectories: true)
        let base = ["--config", config, "--socket", socket, "--cache-dir", cache]
        for (path, clash) in [(socket, "is the socket"), (config, "is the configuration file"),
                              (cache + "/index.sqlite", "is in the cache directory"),
                              (directory.path + "/cache/../cache/m.prom", "is in the cache directory")] {
            let (result, _) = check(base + ["--metrics-textfile", path])
            #expect(result.status == 1 && result.stderr.contains("metrics_textfile: \(path) \(clash)"), "\(result.stderr)")
        }
        #expect(mkfifo(directory.path + "/fifo", 0o600) == 0)
        let (fifo, _) = check(base + ["--metrics-textfile", directory.path + "/fifo"])
        #expect(fifo.status == 1 && fifo.stderr.contains("is not a regular file"), "a device or a FIFO was replaced: \(fifo.stderr)")
        #expect(symlink(directory.path + "/target.prom", directory.path + "/link.prom") == 0)
        let (link, _) = check(base + ["--metrics-textfile", directory.path + "/link.prom"])
        #expect(link.status == 0, "a symbolic link is replaced, not written through: \(link.stderr)")
        let (missing, _) = check(base + ["--metrics-textfile", directory.path + "/none/m.prom"])
        #expect(missing.status == 1 && missing.stderr.contains("cannot use the directory of"), "\(missing.stderr)")
        // The socket where the start deletes what the index does not name: it deleted its own socket, and served on.
        #expect(symlink(cache, directory.path + "/link") == 0)
        for socketPath in [cache + "/files/ab/ctl.sock", cache + "/tmp/ctl.sock", cache + "/../cache/files/ctl.sock",
                           directory.path + "/link/files/new/ctl.sock"] {
            let (result, _) = check(["--socket", socketPath, "--cache-dir", cache])
            #expect(result.status == 1 && result.stderr.contains("where the daemon deletes every file"), "\(socketPath): \(result.stderr)")
        }
        #expect(check(["--socket", cache + "/ctl.sock", "--cache-dir", cache]).0.status == 0, "beside the index it stays")
        let (good, settings) = check(base + ["--metrics-textfile", directory.path + "/prefetchd.prom"])
        #expect(good.status == 0 && settings["metrics_textfile"] == directory.path + "/prefetchd.prom", "\(good.stderr)")
    }

    @Test("a LISTEN_FDS without this process's LISTEN_PID (inherited from elsewhere) switched the socket's checks off while the daemon bound the socket itself: in the cache's files/ it started and deleted its own socket; now it is refused as without the variable")
    func strayListenFDsKeepsTheSocketChecks() throws {
        let directory = try TemporaryDirectory()
        let cache = directory.path + "/cache"
        for variables in [["LISTEN_FDS=1"], ["LISTEN_FDS=abc"], ["LISTEN_FDS=1", "LISTEN_PID=1"]] {
            let result = run("/usr/bin/env", variables + [Paths.prefetchd, "--check-config", "--socket", cache + "/files/ctl.sock",
                                                          "--cache-dir", cache])
            #expect(result.status == 1 && result.stderr.contains("where the daemon deletes every file"), "\(variables): \(result.stderr)")
        }
    }

    @Test("--check-config refuses the socket paths a start refuses (it said 0, the start 1): an existing file or directory, a path ending in / (the start made the directory, then refused it), a directory others may write to; a stale socket is replaced")
    func checkConfigRefusesWhatTheStartRefuses() throws {
        let directory = try TemporaryDirectory()
        let cache = directory.path + "/cache"
        try write("x", to: directory.path + "/file")
        #expect(mkdir(directory.path + "/open", 0o777) == 0 && chmod(directory.path + "/open", 0o777) == 0)
        for (socketPath, said) in [(directory.path + "/file", "exists and is not a socket"),
                                   (directory.path, "exists and is not a socket"),
                                   (directory.path + "/new/", "ends in /: name the socket's file"),
                                   (directory.path + "/open/ctl.sock", "may be written by others (mode 777)")] {
            let (result, _) = check(["--socket", socketPath, "--cache-dir", cache])
            #expect(result.status == 1 && result.stderr.contains(said), "\(socketPath): \(result.stderr)")
        }
        #expect(access(directory.path + "/new", F_OK) != 0, "nothing made")
        let stale = directory.path + "/stale.sock"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(stale.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        close(fd)
        #expect(bound == 0)
        #expect(check(["--socket", stale, "--cache-dir", cache]).0.status == 0, "a stale socket is replaced at the start")
    }

    @Test("allowed_users of 120,000 uids froze the daemon 8.5 s at each reload (each looked up, twice): a list of users or groups holds at most 1,024, and says to admit a group")
    func longUserListsRefused() throws {
        let ids = { (count: Int) in (1...count).map { String(100_000 + $0) }.joined(separator: ",") }
        let (many, _) = check(["--allowed-users", ids(1025)])
        #expect(many.status == 1 && many.stderr.contains("1025 users listed, at most 1024: admit them as members of a group"),
                "\(many.stderr)")
        let (groups, _) = check(["--allowed-groups", ids(1025)])
        #expect(groups.status == 1 && groups.stderr.contains("1025 groups listed, at most 1024"), "\(groups.stderr)")
        let (most, settings) = check(["--allowed-users", ids(1024)])
        #expect(most.status == 0 && settings["allowed_users"]?.split(separator: ",").count == 1024, "\(most.stderr)")
    }

    @Test("a configuration that is a FIFO or a pipe (SIGHUP blocked on it, or read it empty), a value with a NUL (cut short silently) and a socket path too long to bind (--check-config passed it) are refused; /dev/null is no file")
    func notARegularFileOrControlCharacter() throws {
        let directory = try TemporaryDirectory()
        let fifo = directory.path + "/fifo.conf"
        #expect(mkfifo(fifo, 0o600) == 0)
        let (result, _) = check(["--config", fifo])
        #expect(result.status == 1 && result.stderr.contains("\(fifo): not a regular file"), "\(result.stderr)")
        let nul = directory.path + "/nul.conf"
        try Data(Array("fast_width = 2\ncache_dir = /tmp/a".utf8) + [0] + Array("b\n".utf8)).write(to: URL(fileURLWithPath: nul))
        let (cut, _) = check(["--config", nul])
        #expect(cut.status == 1 && cut.stderr.contains("\(nul):2: cache_dir: a control character in '/tmp/a<U+0000>b'"),
                "\(cut.stderr)")
        // Lines end at LF and CR LF only (a form feed, NEL or U+2028 split lines, and numbered them past the editor's).
        for separator in ["\u{0C}", "\u{85}", "\u{2028}", "\r"] {
            let path = directory.path + "/separator.conf"
            try write("fast_width = 2\r\nslow_width = 1" + separator + "per_host = 2\n", to: path)
            let (split, _) = check(["--config", path])
            #expect(split.status == 1 && split.stderr.contains("\(path):2: slow_width: "),
                    "\(separator.unicodeScalars.first!.value): \(split.stderr)")
        }
        let long = "/tmp/" + String(repeating: "s", count: 103)  // 108 bytes: one more than sun_path holds
        let (tooLong, _) = check(["--socket", long])
        #expect(tooLong.status == 1 && tooLong.stderr.contains("is 108 bytes long: a Unix socket's path has at most 107"),
                "--check-config passed it, then bind failed: \(tooLong.stderr)")
        // The default socket under a long $XDG_RUNTIME_DIR: passed too, then bind failed.
        let runtime = "/tmp/" + String(repeating: "r", count: 100)
        let byDefault = run("/usr/bin/env", ["-u", "RUNTIME_DIRECTORY", "-u", "LISTEN_FDS", "XDG_RUNTIME_DIR=" + runtime,
                                             Paths.prefetchd, "--check-config"])
        #expect(byDefault.status == 1 && byDefault.stderr.contains("socket: \(runtime)/prefetchd/ctl.sock is 124 bytes long"),
                "\(byDefault.stderr)")
        // Over a setting's largest value: refused, not cut to it unsaid.
        for (flag, value, most) in [("--output-budget", "2T", "1T"), ("--background-window", "65M", "64M")] {
            let (over, _) = check([flag, value])
            #expect(over.status == 1 && over.stderr.contains("\(flag): '\(value)' is more than this setting takes, \(most)"), "\(over.stderr)")
        }
        // Under output_budget's least: it failed every reply but the shortest (a queue's, after the URLs were queued).
        let (under, _) = check(["--output-budget", "64K"])
        #expect(under.status == 1 && under.stderr.contains("--output-budget: '64K' is less than this setting takes, 256K"), "\(under.stderr)")
        let (none, _) = check(["--config", "/dev/null"])
        #expect(none.status == 0, "/dev/null stays the way to read no file: \(none.stderr)")
    }

    @Test("a proxy curl cannot use (every fetch then failed and innocent origins were paused) is refused without showing its password; the usual forms pass")
    func proxyChecked() throws {
        for proxy in ["socks9://user:secret@x", "ftp://x", "::::", "http://", "http://a:0", "http://a:99999", "http://[::1",
                      "http://user:a/secret@h:1"] {
            let (result, _) = check(["--proxy", proxy])
            #expect(result.status == 1 && result.stderr.contains("is not a proxy URL like http://proxy.example:3128"),
                    "\(proxy): \(result.stderr)")
            #expect(!result.stderr.contains("secret"), "\(result.stderr)")
        }
        // A password curl would cut at # / ? or a space, then quote in an error every client saw (check-config showed it).
        for proxy in ["http://u:p#ss@127.0.0.1:1", "http://u:pa ss@h:1", "socks5://u?:secret@h"] {
            let (result, _) = check(["--proxy", proxy])
            #expect(result.status == 1 && result.stderr.contains("must be percent-encoded (# as %23"), "\(proxy): \(result.stderr)")
            #expect(!result.stderr.contains("ss@") && !result.stderr.contains("secret"), "\(result.stderr)")
        }
        // curl sent %zz as it is: a mistyped escape was a wrong password that nothing named.
        for proxy in ["http://u:se%zzcret@h:1", "http://u:secret%2@h:1", "http://u%:secret@h:1"] {
            let (result, _) = check(["--proxy", proxy])
            #expect(result.status == 1 && result.stderr.contains("has a % that does not start a %HH escape (a % itself is %25)"),
                    "\(proxy): \(result.stderr)")
            #expect(!result.stderr.contains("secret"), "\(result.stderr)")
        }
        for proxy in ["http://proxy.example:3128", "proxy.example", "HTTPS://proxy:443", "socks5h://[::1]:1080",
                      "http://u:p%23ss@h:1", "http://u%40corp:p%25%2fx@h:1"] {
            let (result, settings) = check(["--proxy", proxy])
            let shown = proxy.replacingOccurrences(of: ":p%23ss@", with: ":***@").replacingOccurrences(of: ":p%25%2fx@", with: ":***@")
            #expect(result.status == 0 && settings["proxy"] == shown, "\(proxy): \(result.stderr) \(settings)")
        }
    }

    @Test("--check-config prints what its own reader reads back: a value with ' #' or spaces at its ends is quoted (it was cut at the comment); a flag value with a newline is refused (it printed two lines), and so is one with a double quote that needs quotes (it printed what the reader refused)")
    func checkConfigReadsBack() throws {
        let directory = try TemporaryDirectory()
        let cache = directory.path + "/thumbs #2", socket = directory.path + "/ctl.sock "
        let first = run(Paths.prefetchd, ["--check-config", "--cache-dir", cache, "--socket", socket])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains("cache_dir = \"\(cache)\"") && first.stdout.contains("socket = \"\(socket)\""), "\(first.stdout)")
        let config = directory.path + "/printed.conf"
        try write(first.stdout, to: config)
        let (again, settings) = check(["--config", config])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(settings["cache_dir"] == cache && settings["socket"] == socket, "\(again.stdout)")
        let newline = run(Paths.prefetchd, ["--check-config", "--cache-dir", directory.path + "/a\nb"])
        #expect(newline.status == 1 && newline.stderr.contains("--cache-dir: a control character in the value"), "\(newline.stderr)")
        // A double quote in a value that needs quotes cannot be written (the file's quotes have no escape): it printed
        // `cache_dir = "/x/q"x "`, which the reader refused.
        for unwritable in [directory.path + "/q\"x ", directory.path + "/q\" #x"] {
            let refused = run(Paths.prefetchd, ["--check-config", "--cache-dir", unwritable])
            #expect(refused.status == 1 && refused.stderr.contains("holds a double quote and needs quotes")
                    && refused.stderr.contains("--cache-dir"), "\(unwritable): \(refused.stderr)")
        }
        // The reader ends a bare value at a # after any whitespace, a no-break space too (it was printed bare and read
        // back cut short), and allowed_formats is printed as it is kept, lower-cased and sorted.
        let nbsp = directory.path + "/a\u{A0}#b"
        let spaced = run(Paths.prefetchd, ["--check-config", "--cache-dir", nbsp])
        #expect(spaced.stdout.contains("cache_dir = \"\(nbsp)\""), "\(spaced.stdout) \(spaced.stderr)")
        try write(spaced.stdout, to: config)
        #expect(check(["--config", config]).settings["cache_dir"] == nbsp)
        let format = run(Paths.prefetchd, ["--check-config", "--allowed-formats", "jpeg,\"x"])
        #expect(format.status == 1 && format.stderr.contains("allowed_formats:") && format.stderr.contains("--allowed-formats"),
                "\(format.stderr)")
        let quote = directory.path + "/q\"x"
        let bare = run(Paths.prefetchd, ["--check-config", "--cache-dir", quote])
        #expect(bare.status == 0 && bare.stdout.contains("cache_dir = \(quote)\n"), "\(bare.stdout) \(bare.stderr)")
        try write(bare.stdout, to: config)
        #expect(check(["--config", config]).settings["cache_dir"] == quote)
    }

    @Test("a configuration file starting with a UTF-8 byte order mark failed with an invisible bad key: it is read")
    func byteOrderMark() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try Data([0xEF, 0xBB, 0xBF] + Array("fast_width = 4\nslow_width = 2\n".utf8)).write(to: URL(fileURLWithPath: config))
        let (result, settings) = check(["--config", config])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(settings["fast_width"] == "4" && settings["slow_width"] == "2")
    }

    @Test("an invisible character in a key is named in the error, not printed as it is")
    func invisibleCharacterNamed() throws {
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try write("fast_width = 4\nslow\u{200B}_width = 2\n", to: config)
        let (result, _) = check(["--config", config])
        #expect(result.status == 1)
        #expect(result.stderr.contains("\(config):2: 'slow<U+200B>_width' is not a key"), "\(result.stderr)")
    }

    /// The first fenced block after `heading` in docs/configuration.md.
    func documentedBlock(after heading: String) throws -> String {
        let text = try String(contentsOfFile: Paths.repository + "/docs/configuration.md", encoding: .utf8)
        let section = try #require(text.range(of: heading)).upperBound
        let open = try #require(text.range(of: "```\n", range: section..<text.endIndex))
        let close = try #require(text.range(of: "```", range: open.upperBound..<text.endIndex))
        return String(text[open.upperBound..<close.lowerBound])
    }

    @Test("the configuration syntax examples failed on a machine without group prefetch: they are valid as written")
    func documentedExamplesAreValid() throws {
        let manual = try String(contentsOfFile: Paths.repository + "/docs/man/prefetchd.conf.5", encoding: .utf8)
        let example = try #require(manual.range(of: ".SH EXAMPLE\n.EX\n"))
        let end = try #require(manual.range(of: ".EE", range: example.upperBound..<manual.endIndex))
        let directory = try TemporaryDirectory()
        for (name, text) in [("configuration.md", try documentedBlock(after: "## Syntax")),
                             ("prefetchd.conf.5", String(manual[example.upperBound..<end.lowerBound]))] {
            let config = directory.path + "/" + name + ".conf"
            try write(text, to: config)
            let (result, _) = check(["--config", config])
            #expect(result.status == 0, "\(name): \(result.stderr)")
        }
    }

    @Test("default_ttl was silently replaced by the Last-Modified heuristic: its documentation says so, and it holds")
    func defaultTTLDocumented() throws {
        let documentation = try String(contentsOfFile: Paths.repository + "/docs/configuration.md", encoding: .utf8)
        let row = try #require(documentation.split(separator: "\n").first { $0.hasPrefix("| `default_ttl`") })
        #expect(row.contains("Last-Modified") && row.contains("a tenth") && row.contains("at most a day"))
        let manual = try String(contentsOfFile: Paths.repository + "/docs/man/prefetchd.conf.5", encoding: .utf8)
        let item = try #require(manual.range(of: ".BI default_ttl"))
        let next = manual.range(of: ".TP", range: item.upperBound..<manual.endIndex)?.lowerBound ?? manual.endIndex
        #expect(manual[item.upperBound..<next].contains("Last\\-Modified"))
        let help = run(Paths.prefetchd, ["--help"]).stdout
        let flag = try #require(help.range(of: "--default-ttl"))
        let flagEnd = help.range(of: "\n  -", range: flag.upperBound..<help.endIndex)?.lowerBound ?? help.endIndex
        #expect(help[flag.upperBound..<flagEnd].contains("Last-Modified"), "--help on --default-ttl")
        let example = try String(contentsOfFile: Paths.repository + "/systemd/prefetchd.conf.example", encoding: .utf8)
        #expect(example.contains("Last-Modified"))

        // What the documentation says: the origin sends Last-Modified (2020) and no Cache-Control.
        let origin = try Origin()
        let daemon = try DaemonUnderTest(["--default-ttl", "60"])
        let line = daemon.ctl("get", "--json", origin.url("/heuristic.jpg?cc=")).stdout
        let entry = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        let fetchedAt = try #require(entry["fetched_at"] as? Int), freshUntil = try #require(entry["fresh_until"] as? Int)
        #expect(abs(freshUntil - fetchedAt - 86_400) <= 1, "a day, not default_ttl's 60 s")
    }

    @Test("every key is documented in docs/configuration.md, prefetchd.conf(5), prefetchd(8), the example file and --help")
    func everyKeyDocumented() throws {
        let keys = check([]).settings.keys.sorted()
        #expect(keys.count >= 17)
        let documentation = try String(contentsOfFile: Paths.repository + "/docs/configuration.md", encoding: .utf8)
        let manual = try String(contentsOfFile: Paths.repository + "/docs/man/prefetchd.conf.5", encoding: .utf8)
        let example = try String(contentsOfFile: Paths.repository + "/systemd/prefetchd.conf.example", encoding: .utf8)
        let help = run(Paths.prefetchd, ["--help"]).stdout
        let daemonManual = try String(contentsOfFile: Paths.repository + "/docs/man/prefetchd.8", encoding: .utf8)
        for key in keys {
            let roffFlag = "\\-\\-" + key.replacingOccurrences(of: "_", with: "\\-")
            #expect(daemonManual.contains(roffFlag), "prefetchd.8 lacks \(roffFlag)")
            #expect(documentation.contains("`\(key)`"), "docs/configuration.md lacks \(key)")
            #expect(manual.contains(key.replacingOccurrences(of: "_", with: "\\_")) || manual.contains(key),
                    "prefetchd.conf.5 lacks \(key)")
            #expect(example.contains(key), "prefetchd.conf.example lacks \(key)")
            #expect(help.contains("--" + key.replacingOccurrences(of: "_", with: "-")), "--help lacks \(key)")
        }
        // The example file, uncommented, is itself a valid configuration.
        let directory = try TemporaryDirectory()
        let uncommented = example.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.hasPrefix("#") && line.dropFirst().drop { $0 == " " }.split(separator: " ").dropFirst().first == "=" ?
                String(line.dropFirst().drop { $0 == " " }) : String(line)
        }.joined(separator: "\n")
        try write(uncommented, to: directory.path + "/example.conf")
        let parsed = check(["--config", directory.path + "/example.conf"])
        #expect(parsed.result.status == 0, "\(parsed.result.stderr)")
    }
}
