import Glibc
import PrefetchProtocol
import QueueCore

/// Everything the daemon can be told, by its configuration file or its command line; the defaults need neither.
///
/// `Options.settings` is the one table of settings: it drives the flag parser, the configuration file parser,
/// `--help`, `--check-config` and what SIGHUP may change live.
struct Options {
    var socketPath: String
    /// Permissions of a socket the daemon binds itself (a socket-activated one keeps the unit's `SocketMode=`).
    var socketMode: mode_t = 0o600
    var cacheDirectory: String
    var maxCacheBytes: Int64 = 1 << 30
    /// Replies and events buffered for all clients and not yet read; beyond it the worst readers are disconnected.
    var outputBudget = 64 << 20
    var fastWidth = 8
    var slowWidth = 1
    /// Seconds a background fetch runs before the next one starts beside it; nil never.
    var backgroundSlice: Int64? = 30
    /// Seconds an urgent fetch holds its place before the next one starts beside it; nil never.
    var urgentSlice: Int64? = 5
    var perHostLimit: Int?
    /// Starts per second per host (a token bucket), and the burst it allows; no limit when the rate is nil.
    var hostStartRate: Double?
    var hostStartBurst = 10
    var fetch = FetchSettings()
    var retry = RetryPolicy()
    /// Freshness when the response says nothing (ms).
    var defaultTTL: Int64 = 86_400_000
    /// Slow-lane tasks held in memory; the rest of the backlog stays in SQLite.
    var backlogWindow = 1024
    var workerThreads = 2
    var logLevel = Log.Level.info
    /// What bodies are kept: image formats, the pixel limit, non-images.
    var images = ImagePolicy()
    /// What the background lane does on a metered network, on battery, in power-saver mode and in quiet hours.
    var background = BackgroundPolicy()
    /// The background lane's download rate while a condition asks for `slow` (bytes per second, shared by its
    /// transfers).
    var slowRate: Int64 = 128 * 1024
    /// Where to write the metrics for node_exporter's textfile collector, every few seconds.
    var metricsTextfile: String?
    /// Users and groups allowed to connect besides root and the daemon's own user.
    var allowedUsers: [uid_t] = []
    var allowedGroups: [gid_t] = []

    /// The configuration file that was read, if any.
    var configPath: String?
    /// The command line and environment these options came from, read again on SIGHUP.
    var arguments: [String] = []
    var environment: [String: String] = [:]

    /// The system's file, read by root and by the system unit when it exists and no `--config` names another.
    static let defaultConfigPath = "/etc/prefetchd/prefetchd.conf"

    /// The file read when `--config` names none, when it exists: under a unit with `ConfigurationDirectory=` the one
    /// there (the system service's); for root the system's; for any other user their own
    /// (`$XDG_CONFIG_HOME/prefetchd/prefetchd.conf`, else `~/.config/prefetchd/prefetchd.conf`), so that a user
    /// service keeps its user's settings.
    static func defaultConfig(environment: [String: String]) -> String? {
        let candidate: String?
        if let directory = firstDirectory(environment["CONFIGURATION_DIRECTORY"]) {
            // The system unit (ConfigurationDirectory=): its HOME is the service's, not a person's.
            candidate = directory + "/prefetchd.conf"
        } else if getuid() != 0 {
            // Not the system's file: its cache_dir and socket are the system service's, which a user cannot use.
            let base = environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
                ?? environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 + "/.config" : nil }
            candidate = base.map { $0 + "/prefetchd/prefetchd.conf" }
        } else {
            candidate = defaultConfigPath
        }
        return candidate.flatMap { access($0, F_OK) == 0 ? $0 : nil }
    }

    /// The defaults: the socket and cache directory follow systemd's `$RUNTIME_DIRECTORY` and `$CACHE_DIRECTORY`
    /// under a unit, else the XDG locations of the user.
    init(environment: [String: String]) {
        self.environment = environment
        if let runtime = Self.firstDirectory(environment["RUNTIME_DIRECTORY"]) {
            socketPath = runtime + "/ctl.sock"
        } else {
            socketPath = DefaultPaths.socket(environment: environment)
        }
        cacheDirectory = Self.firstDirectory(environment["CACHE_DIRECTORY"])
            ?? DefaultPaths.cacheDirectory(environment: environment)
    }

    /// The first absolute path of a colon-separated systemd directory list.
    private static func firstDirectory(_ list: String?) -> String? {
        guard let first = list?.split(separator: ":").first, first.hasPrefix("/") else { return nil }
        return String(first)
    }

    // MARK: The table of settings

    /// One setting: its configuration key (the flag is the key with dashes), how to read and print its value.
    struct Setting: Sendable {
        /// The configuration file key, e.g. `fast_width`.
        let key: String
        /// The placeholder in `--help`, e.g. `N`.
        let placeholder: String
        let summary: String
        /// The default as `--help` says it, when printing the default value would not say it well.
        var defaultText: String? = nil
        /// Whether SIGHUP applies a change; the others need a restart.
        var live = true
        /// Whether its value may hold a password (a URL's userinfo), shown as `user:***@` wherever it is printed.
        var secret = false
        /// Parses `value` into `options`; throws a message that does not name where the value came from.
        let read: @Sendable (inout Options, String) throws(BadValue) -> Void
        /// The value as a configuration file would say it.
        let show: @Sendable (Options) -> String

        /// `--fast-width` for `fast_width`.
        var flag: String { Self.flag(forKey: key) }
        /// `value` as it may be printed: a password shown as `user:***@`, as in the log.
        func printable(_ value: String) -> String { secret ? CanonicalURL.redactingUserinfo(in: value) : value }
        static func flag(forKey key: String) -> String { "--" + String(key.map { $0 == "_" ? "-" : $0 }) }
    }

    /// A value a setting cannot take.
    struct BadValue: Error, Sendable {
        let message: String
        init(_ message: String) { self.message = message }
    }

    static let settings: [Setting] = [
        Setting(key: "socket", placeholder: "PATH", summary: "control socket, unless systemd passes one",
                defaultText: "$RUNTIME_DIRECTORY/ctl.sock under systemd, else $XDG_RUNTIME_DIR/prefetchd/ctl.sock, "
                    + "else /tmp/prefetchd-$UID/ctl.sock", live: false,
                read: { options, value throws(BadValue) in
                    let limit = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1
                    guard value.utf8.count <= limit else {
                        throw BadValue("'\(value)' is \(value.utf8.count) bytes long: a Unix socket's path has at most \(limit)")
                    }
                    options.socketPath = try absolutePath(value)
                },
                show: { $0.socketPath }),
        Setting(key: "socket_mode", placeholder: "MODE", summary: "permissions of a socket prefetchd binds itself",
                live: false,
                read: { options, value throws(BadValue) in options.socketMode = try fileMode(value) },
                show: { "0" + String($0.socketMode, radix: 8) }),
        Setting(key: "cache_dir", placeholder: "DIR", summary: "cache files and index",
                defaultText: "$CACHE_DIRECTORY under systemd, else $XDG_CACHE_HOME/prefetchd, else ~/.cache/prefetchd",
                live: false,
                read: { options, value throws(BadValue) in options.cacheDirectory = try absolutePath(value) },
                show: { $0.cacheDirectory }),
        Setting(key: "max_cache_bytes", placeholder: "SIZE", summary: "cache size limit, LRU eviction beyond it",
                read: { options, value throws(BadValue) in options.maxCacheBytes = try size(value) },
                show: { showSize($0.maxCacheBytes) }),
        Setting(key: "output_budget", placeholder: "SIZE",
                summary: "replies and events buffered for all clients; past it the worst readers are disconnected",
                read: { options, value throws(BadValue) in
                    let budget = try size(value, atMost: 1 << 40)
                    // Less could not hold one client's ordinary replies (a queue's per-URL results, a list).
                    guard budget >= 256 << 10 else { throw BadValue("'\(value)' is less than this setting takes, 256K") }
                    options.outputBudget = Int(budget)
                },
                show: { showSize(Int64($0.outputBudget)) }),
        Setting(key: "fast_width", placeholder: "N", summary: "parallel urgent fetches",
                read: { options, value throws(BadValue) in options.fastWidth = Int(try number(value, 1...1024)) },
                show: { String($0.fastWidth) }),
        Setting(key: "slow_width", placeholder: "N", summary: "parallel background fetches",
                read: { options, value throws(BadValue) in options.slowWidth = Int(try number(value, 1...1024)) },
                show: { String($0.slowWidth) }),
        Setting(key: "background_slice", placeholder: "SEC",
                summary: "a background fetch running longer steps aside: the next one starts beside it, its server's "
                    + "other background work waits for it; a fetch its client left is background work after it; "
                    + "0 for never",
                read: { options, value throws(BadValue) in
                    let seconds = try number(value, 0...86_400)
                    options.backgroundSlice = seconds == 0 ? nil : seconds
                },
                show: { String($0.backgroundSlice ?? 0) }),
        Setting(key: "urgent_slice", placeholder: "SEC",
                summary: "an urgent fetch running longer steps aside: the next one starts beside it (at most "
                    + "fast_width such), so that slow servers do not hold the fast lane from the others; 0 for never",
                read: { options, value throws(BadValue) in
                    let seconds = try number(value, 0...86_400)
                    options.urgentSlice = seconds == 0 ? nil : seconds
                },
                show: { String($0.urgentSlice ?? 0) }),
        Setting(key: "per_host", placeholder: "N", summary: "running fetches per host at most, 0 for no limit",
                read: { options, value throws(BadValue) in
                    let limit = Int(try number(value, 0...1024))
                    options.perHostLimit = limit == 0 ? nil : limit
                },
                show: { String($0.perHostLimit ?? 0) }),
        Setting(key: "host_start_rate", placeholder: "N",
                summary: "fetches started per second per host at most (with bursts of host_start_burst), 0 for no limit",
                read: { options, value throws(BadValue) in
                    // Decimal digits only (Double also reads 0x10, 1e2 and inf); a rate near 0 would make the wait
                    // for a host's next start overflow.
                    guard value.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: ".") }),
                          let rate = Double(value), rate == 0 || (0.001...100_000).contains(rate) else {
                        throw BadValue("'\(value)' is not 0 or a number of starts per second from 0.001 to 100000")
                    }
                    options.hostStartRate = rate == 0 ? nil : rate
                },
                show: { $0.hostStartRate.map { $0 == $0.rounded() ? String(Int($0)) : String($0) } ?? "0" }),
        Setting(key: "host_start_burst", placeholder: "N",
                summary: "fetches a host may start at once before host_start_rate applies",
                read: { options, value throws(BadValue) in options.hostStartBurst = Int(try number(value, 1...100_000)) },
                show: { String($0.hostStartBurst) }),
        Setting(key: "max_bytes", placeholder: "SIZE", summary: "largest body accepted",
                read: { options, value throws(BadValue) in options.fetch.maxBytes = try size(value) },
                show: { showSize($0.fetch.maxBytes) }),
        Setting(key: "connect_timeout", placeholder: "SEC", summary: "connect timeout",
                read: { options, value throws(BadValue) in options.fetch.connectTimeout = try number(value, 1...3600) * 1000 },
                show: { String($0.fetch.connectTimeout / 1000) }),
        Setting(key: "low_speed_time", placeholder: "SEC",
                summary: "abort a transfer slower than 1 KiB/s for this long",
                read: { options, value throws(BadValue) in options.fetch.lowSpeedTime = try number(value, 1...3600) },
                show: { String($0.fetch.lowSpeedTime) }),
        Setting(key: "max_attempts", placeholder: "N", summary: "attempts per URL for transient failures",
                read: { options, value throws(BadValue) in options.retry.maxAttempts = Int(try number(value, 1...100)) },
                show: { String($0.retry.maxAttempts) }),
        Setting(key: "negative_ttl", placeholder: "SEC", summary: "how long a permanent failure is remembered",
                read: { options, value throws(BadValue) in
                    options.retry.negativeTTL = try number(value, 0...31_536_000) * 1000
                },
                show: { String($0.retry.negativeTTL / 1000) }),
        Setting(key: "default_ttl", placeholder: "SEC",
                summary: "freshness when the server gives none (with Last-Modified: a tenth of its age, at most a day)",
                read: { options, value throws(BadValue) in options.defaultTTL = try number(value, 0...31_536_000) * 1000 },
                show: { String($0.defaultTTL / 1000) }),
        Setting(key: "proxy", placeholder: "URL",
                summary: "upstream proxy, empty for none (then curl reads http_proxy, https_proxy, no_proxy)", secret: true,
                read: { options, value throws(BadValue) in options.fetch.proxy = value.isEmpty ? nil : try proxyURL(value) },
                show: { $0.fetch.proxy ?? "" }),
        Setting(key: "ca_file", placeholder: "PATH",
                summary: "trust the certificate authorities in this PEM file instead of the system's (a private CA)",
                defaultText: "the system's",
                read: { options, value throws(BadValue) in options.fetch.caFile = value.isEmpty ? nil : try readable(value, directory: false) },
                show: { $0.fetch.caFile ?? "" }),
        Setting(key: "ca_path", placeholder: "DIR",
                summary: "trust the certificate authorities in this directory of hashed certificates (c_rehash)",
                defaultText: "the system's",
                read: { options, value throws(BadValue) in options.fetch.caPath = value.isEmpty ? nil : try readable(value, directory: true) },
                show: { $0.fetch.caPath ?? "" }),
        Setting(key: "deny_networks", placeholder: "LIST",
                summary: "networks never connected to, in CIDR form, comma-separated (link-local ones always are)",
                defaultText: "none",
                read: { options, value throws(BadValue) in
                    options.fetch.deniedNetworks = try value.split(separator: ",").map { part throws(BadValue) in
                        let text = String(String(part).trimmingCharacters(in: " "))
                        guard let network = IPNetwork(text) else { throw BadValue("'\(text)' is not a network like 10.0.0.0/8 or fc00::/7") }
                        return network
                    }
                },
                show: { $0.fetch.deniedNetworks.map(\.description).joined(separator: ",") }),
        Setting(key: "background_window", placeholder: "SIZE",
                summary: "largest TCP receive buffer of background connections, below which each HTTP/2 one follows its path: "
                    + "what still arrives once urgent work holds them back, and their speed per round trip (a quarter of it for "
                    + "3 s after urgent work, up to 20 s when gets come every few seconds); 0 for the kernel's",
                read: { options, value throws(BadValue) in
                    options.fetch.backgroundWindow = value == "0" ? 0 : try size(value, atMost: 64 << 20)
                },
                show: { showSize($0.fetch.backgroundWindow) }),
        Setting(key: "metered", placeholder: "POLICY",
                summary: "background work on a metered network (NetworkManager): run, slow or pause",
                read: { options, value throws(BadValue) in options.background.metered = try mode(value) },
                show: { $0.background.metered.rawValue }),
        Setting(key: "on_battery", placeholder: "POLICY", summary: "background work on battery (UPower): run, slow or pause",
                read: { options, value throws(BadValue) in options.background.onBattery = try mode(value) },
                show: { $0.background.onBattery.rawValue }),
        Setting(key: "power_saver", placeholder: "POLICY",
                summary: "background work in the power-saver profile (power-profiles-daemon): run, slow or pause",
                read: { options, value throws(BadValue) in options.background.powerSaver = try mode(value) },
                show: { $0.background.powerSaver.rawValue }),
        Setting(key: "offline", placeholder: "POLICY",
                summary: "background work while NetworkManager says no connection is up: run, slow or pause",
                read: { options, value throws(BadValue) in options.background.offline = try mode(value) },
                show: { $0.background.offline.rawValue }),
        Setting(key: "slow_rate", placeholder: "SIZE",
                summary: "bytes per second the background lane downloads at, in all, while a condition says slow",
                read: { options, value throws(BadValue) in
                    options.slowRate = try size(value)
                    guard ((4 << 10)...(1 << 40)).contains(options.slowRate) else {
                        throw BadValue("'\(value)' is not a rate from 4K to 1T bytes per second")
                    }
                },
                show: { showSize($0.slowRate) }),
        Setting(key: "quiet_hours", placeholder: "HH:MM-HH:MM",
                summary: "local times when the background lane starts nothing (may wrap midnight), empty for none",
                defaultText: "none",
                read: { options, value throws(BadValue) in
                    guard !value.isEmpty else { return options.background.quietHours = nil }
                    guard let window = QuietHours(parsing: value) else {
                        throw BadValue("'\(value)' is not a daily window like 08:00-18:00 (24-hour local times, start "
                                       + "and end different; 22:00-06:00 wraps midnight)")
                    }
                    options.background.quietHours = window
                },
                show: { $0.background.quietHours?.description ?? "" }),
        Setting(key: "allowed_formats", placeholder: "LIST",
                summary: "image formats kept (comma-separated gdk-pixbuf names; svg is off unless listed)",
                read: { options, value throws(BadValue) in
                    // An empty name (`jpeg, ,png`, a trailing `, `) is no format; `image/` may lead a name once.
                    let formats = value.split(separator: ",").map { ImageFormats.normalise(String(String($0).trimmingCharacters(in: " "))) }
                        .filter { !$0.isEmpty }
                    guard !formats.isEmpty else { throw BadValue("name at least one format") }
                    if let odd = formats.first(where: { $0.contains("/") }) {
                        throw BadValue("'\(odd)' is not a format's name (a gdk-pixbuf name, such as jpeg or png)")
                    }
                    options.images.allowedFormats = Set(formats)
                },
                show: { $0.images.allowedFormats.sorted().joined(separator: ",") }),
        Setting(key: "max_pixels", placeholder: "N", summary: "largest image (width x height) decoded or kept",
                read: { options, value throws(BadValue) in options.images.maxPixels = try number(value, 1...10_000_000_000) },
                show: { String($0.images.maxPixels) }),
        Setting(key: "allow_non_images", placeholder: "yes|no", summary: "keep bodies that are not images",
                read: { options, value throws(BadValue) in options.images.allowNonImages = try boolean(value) },
                show: { $0.images.allowNonImages ? "yes" : "no" }),
        Setting(key: "metrics_textfile", placeholder: "PATH",
                summary: "write the metrics there every 5 s (atomically), for node_exporter's textfile collector",
                defaultText: "none",
                read: { options, value throws(BadValue) in options.metricsTextfile = value.isEmpty ? nil : try absolutePath(value) },
                show: { $0.metricsTextfile ?? "" }),
        Setting(key: "log_level", placeholder: "LEVEL", summary: "error, warning, info or debug",
                read: { options, value throws(BadValue) in
                    guard let level = Log.Level(name: value) else {
                        throw BadValue("'\(value)' is not one of error, warning, info, debug")
                    }
                    options.logLevel = level
                },
                show: { $0.logLevel.configName }),
        Setting(key: "allowed_users", placeholder: "LIST",
                summary: "users (names or uids, comma-separated) who may connect besides root and the daemon's user",
                defaultText: "none",
                read: { options, value throws(BadValue) in options.allowedUsers = try users(value) },
                show: { $0.allowedUsers.map(userName).joined(separator: ",") }),
        Setting(key: "allowed_groups", placeholder: "LIST",
                summary: "groups (names or gids, comma-separated) whose members may connect; a socket from systemd "
                    + "also admits its own group (SocketGroup=)",
                defaultText: "none",
                read: { options, value throws(BadValue) in options.allowedGroups = try groups(value) },
                show: { $0.allowedGroups.map(groupName).joined(separator: ",") }),
    ]

    static func setting(key: String) -> Setting? { settings.first { $0.key == key } }
    static func setting(flag: String) -> Setting? { settings.first { $0.flag == flag } }

    /// Settings that no longer exist, and why: accepted with a warning and ignored, so an old configuration starts.
    static let retired = [
        "background_rate": "background work is now held back by not reading its connections (background_window bounds "
            + "what still arrives)",
    ]

    private static func warnRetired(_ name: String, key: String) {
        writeStandardError("prefetchd: warning: \(name) is ignored: \(retired[key] ?? "")\n")
    }

    // MARK: Parsing

    enum Parsed {
        case run(Options)
        /// `--check-config`: print the effective settings and exit.
        case check(Options)
        case help
        case version
    }

    /// Reads the configuration file, then the command line over it; a bad flag, key or value throws a message that
    /// names the flag, or the file and line.
    static func parse(_ arguments: [String], environment: [String: String]) throws -> Parsed {
        var rest = arguments[...]
        var flags: [(flag: String, setting: Setting, value: String)] = []
        var configPath: String?
        var check = false
        while let argument = rest.popFirst() {
            var flag = argument
            var inline: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                flag = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            func value() throws -> String {
                if let inline { return inline }
                guard let next = rest.popFirst() else { throw DaemonError("\(flag) needs a value") }
                return next
            }
            switch flag {
            case "-h", "--help": return .help
            case "--version": return .version
            case "--check-config": check = true
            case "--config":
                configPath = try value()
                if configPath == "" { throw DaemonError("--config needs the path of a configuration file (it was empty)") }
            default:
                if let key = retired.keys.first(where: { Setting.flag(forKey: $0) == flag }) {
                    _ = try value()
                    warnRetired(flag, key: key)
                    continue
                }
                guard let setting = setting(flag: flag) else {
                    let known = settings.map(\.flag) + ["--help", "--version", "--check-config", "--config"]
                    throw DaemonError("unknown option '\(argument)'\(didYouMean(flag, known)) (see prefetchd --help)")
                }
                flags.append((flag, setting, try value()))
            }
        }

        var options = Options(environment: environment)
        options.arguments = arguments
        var given: [String: Given] = [:]
        if configPath == nil { configPath = defaultConfig(environment: environment) }
        if let configPath {
            let file = try ConfigFile(path: configPath)
            for entry in file.entries {
                let location = "\(configPath):\(entry.line)"
                if retired[entry.key] != nil {
                    warnRetired("\(location): \(entry.key)", key: entry.key)
                    continue
                }
                guard let setting = setting(key: entry.key) else {
                    throw DaemonError("\(location): unknown key '\(entry.key)'\(didYouMean(entry.key, settings.map(\.key))) "
                                      + "(see prefetchd.conf(5))")
                }
                do {
                    try setting.read(&options, entry.value)
                } catch {
                    throw DaemonError("\(location): \(entry.key): \(error.message)")
                }
                given[setting.key] = .file(line: location)
            }
            options.configPath = configPath
        }
        for (flag, setting, value) in flags {
            do throws(BadValue) {
                if ConfigFile.hasControlCharacter(value) {
                    throw BadValue("a control character in the value")
                }
                try setting.read(&options, value)
            } catch {
                throw DaemonError("\(flag): \(error.message)")
            }
            given[setting.key] = .flag
        }
        try options.checkMetricsTextfile()
        try options.checkPrintable(given: given)
        try options.checkSocketPath()
        return check ? .check(options) : .run(options)
    }

    /// The socket's path as it will be bound, a default or a relative one made absolute, fits a Unix socket address
    /// and is not where the daemon deletes what its index does not name, the cache's `files/` and `tmp/` (a socket
    /// systemd passes is not bound here).
    private func checkSocketPath() throws {
        guard !SocketActivation.isOffered(environment: environment) else { return }
        let limit = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1
        if socketPath.utf8.count > limit {
            throw DaemonError("socket: \(socketPath) is \(socketPath.utf8.count) bytes long: a Unix socket's path has at "
                              + "most \(limit); set socket (or --socket) to a shorter path")
        }
        if socketPath.hasSuffix("/") {
            throw DaemonError("socket: \(socketPath) ends in /: name the socket's file in that directory (\(socketPath)ctl.sock)")
        }
        _ = try UnixSocket.holdsSocket(socketPath)
        if let problem = Self.untrustedSocketDirectory(socketPath) { throw problem }
        // Its directories may not exist yet: the start makes them.
        let socket = resolvingExistingAncestor(socketPath), cache = resolvingExistingAncestor(cacheDirectory)
        for swept in ["/files/", "/tmp/"] where socket.hasPrefix(cache + swept) {
            throw DaemonError("socket: \(socketPath) is in the cache's \(swept.dropFirst()) directory, where the daemon "
                              + "deletes every file its index does not name (its own socket among them): put it elsewhere")
        }
    }

    /// Why the directory of the socket at `path` cannot be trusted, when it exists (`DefaultPaths.untrustedDirectory`).
    static func untrustedSocketDirectory(_ path: String) -> DaemonError? {
        guard let problem = DefaultPaths.untrustedDirectory(of: path, rootToo: path != DefaultPaths.sharedTemporarySocket) else {
            return nil
        }
        return DaemonError("the socket \(path) cannot be made safely: \(problem). Another user could put a socket of their "
                           + "own in its place; remove it, or choose another place with --socket")
    }

    /// Whether the metrics may replace what is at `path`: nothing, a regular file, or a symbolic link (the link is
    /// replaced, nothing is written through it), never a device, a FIFO, a socket or a directory.
    static func isReplaceable(_ path: String) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0 else { return true }
        return [S_IFREG, S_IFLNK].contains(info.st_mode & S_IFMT)
    }

    /// Every effective value reads back as `--check-config` prints it, and names what it was given as: a control
    /// character cuts it short (a value from the environment, as `$CACHE_DIRECTORY`, skipped the flags' and the file's
    /// check); U+FFFD is what bytes that are not UTF-8 became on the command line or in the environment, so the value
    /// would name another file; and the file's quotes have no escape, so a value that needs them cannot hold a quote.
    /// Where a setting was given: on a line of the configuration file (`FILE:LINE`), or by a flag (which wins).
    private enum Given { case file(line: String), flag }

    private func checkPrintable(given: [String: Given]) throws {
        func problem(_ value: String, quoted: Bool = true) -> String? {
            if ConfigFile.hasControlCharacter(value) { return "holds a control character" }
            if value.unicodeScalars.contains("\u{FFFD}") {
                return "holds U+FFFD, the replacement character, which bytes that are not UTF-8 become"
            }
            if quoted, ConfigFile.needsQuotes(value), value.unicodeScalars.contains("\"") {
                return "holds a double quote and needs quotes in a configuration file (spaces at its ends, a # after a "
                    + "space, a quote or a # first), where quotes have no escape"
            }
            return nil
        }
        let defaults = ["cache_dir": " (when not set, it comes from $CACHE_DIRECTORY, $XDG_CACHE_HOME or $HOME)",
                        "socket": " (when not set, it comes from $RUNTIME_DIRECTORY or $XDG_RUNTIME_DIR)"]
        for setting in Self.settings {
            let value = setting.show(self)
            guard let problem = problem(value) else { continue }
            let shown = setting.printable(ConfigFile.visible(value))
            // A value given in the file is named by its line; where none was given, by where the default came from.
            let (location, origin) = switch given[setting.key] {
            case .file(let line)?: ("\(line): ", "")
            case .flag?: ("", "")
            case nil: ("", defaults[setting.key] ?? "")
            }
            throw DaemonError("\(location)\(setting.key): '\(shown)' \(problem)\(origin): set \(setting.key) "
                              + "(or \(setting.flag)) to another value")
        }
        // The path is printed in a comment, where quotes do not matter.
        if let configPath, let problem = problem(configPath, quoted: false) {
            throw DaemonError("the configuration file's path '\(ConfigFile.visible(configPath))' \(problem): name another "
                              + "with --config")
        }
    }

    /// The metrics file is replaced every 5 s: it must be `isReplaceable`, not the socket, the
    /// configuration, or anything in the cache directory (the index among them), and its directory must exist.
    func checkMetricsTextfile() throws {
        guard let path = metricsTextfile else { return }
        let file = resolvingDirectory(path) ?? path
        let cache = resolvingExistingAncestor(cacheDirectory)
        let clash = file == resolvingDirectory(socketPath) ? "the socket"
            : file == configPath.flatMap(resolvingDirectory) ? "the configuration file"
            : file == cache || file.hasPrefix(cache + "/") ? "in the cache directory" : nil
        if let clash {
            throw DaemonError("metrics_textfile: \(path) is \(clash); the metrics, written there every 5 s, would destroy the "
                              + "daemon's own files: write them elsewhere (node_exporter's textfile directory)")
        }
        if !Self.isReplaceable(path) {
            throw DaemonError("metrics_textfile: \(path) is not a regular file; the metrics replace what is there every "
                              + "5 s: name a file, or a path where none is yet")
        }
        guard resolvingDirectory(path) != nil else {
            throw DaemonError("metrics_textfile: cannot use the directory of \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// The effective settings as a configuration file, as `--check-config` prints them.
    var description: String {
        Self.settings.map { setting in
            let value = setting.show(self)
            guard !value.isEmpty else { return "\(setting.key) =" }
            let shown = setting.printable(value)
            return "\(setting.key) = " + (ConfigFile.needsQuotes(shown) ? "\"\(shown)\"" : shown)
        }.joined(separator: "\n")
    }

    /// What reloading `next` over these options does: the result keeps the settings that need a restart, and lists
    /// each change applied (`key: old -> new`) and each one left for the next start.
    func reloaded(_ next: Options) -> (options: Options, applied: [String], needRestart: [String]) {
        var result = next
        var applied: [String] = [], needRestart: [String] = []
        for setting in Self.settings {
            let old = setting.show(self), new = setting.show(next)
            guard old != new else { continue }
            if setting.live {
                applied.append("\(setting.key): \(old) -> \(new)")
            } else {
                needRestart.append("\(setting.key): \(old) -> \(new)")
                try? setting.read(&result, old)
            }
        }
        return (result, applied, needRestart)
    }

    static var usage: String {
        var lines = [
            "Usage: prefetchd [--config FILE] [--check-config] [OPTIONS]",
            "",
            "The image-prefetch daemon: fetches URLs into a local cache through an urgent (parallel) lane and a",
            "background (serial) lane that waits while urgent work runs. Drive it with prefetchctl.",
            "",
            "Every option is also a key of the configuration file (--fast-width N is `fast_width = N`); the",
            "command line wins over the file. None is needed.",
            "  --config FILE           read FILE (default, when it exists: \(defaultConfigPath) for root and the",
            "                          system unit, ~/.config/prefetchd/prefetchd.conf for any other user)",
            "  --check-config          validate the configuration, print the effective settings, exit 0 or 1",
        ]
        let defaults = Options(environment: [:])
        for setting in settings {
            let left = "  \(setting.flag) \(setting.placeholder)"
            let padded = left.count < 26 ? left + String(repeating: " ", count: 26 - left.count) : left + "  "
            let fallback = setting.defaultText ?? setting.show(defaults)
            var line = padded
            for word in "\(setting.summary) (default \(fallback.isEmpty ? "none" : fallback))".split(separator: " ") {
                if line.count + word.count > 112 && line.count > 26 {
                    lines.append(line)
                    line = String(repeating: " ", count: 26)
                }
                line += (line.last == " " ? "" : " ") + word
            }
            lines.append(line)
        }
        lines += [
            "  --help, --version",
            "",
            "Signals: SIGHUP reloads the configuration; SIGTERM and SIGINT stop, keeping every queued URL.",
            "",
            "Example:",
            "  prefetchd --cache-dir /var/tmp/thumbs --max-cache-bytes 500M &",
            "  prefetchctl get https://example.com/a.jpg",
        ]
        return lines.joined(separator: "\n")
    }

    // MARK: Values

    /// `123`, `64K`, `1.5G`, `500 MB`, `2GiB`: bytes, or K, M, G, T (powers of 1024, with or without `B` or `iB`);
    /// a fraction of a unit is rounded down to whole bytes.
    static func parseSize(_ text: String) -> Int64? {
        let multipliers: [String: Int64] = ["": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40]
        guard text.allSatisfy(\.isASCII) else { return nil }
        let lower = text.lowercased()
        var unit = lower.drop { $0.isNumber || $0 == "." }
        let number = lower[..<unit.startIndex]
        unit = unit.drop { $0 == " " }
        if unit.hasSuffix("ib") { unit = unit.dropLast(2); guard !unit.isEmpty else { return nil } }
        else if unit.hasSuffix("b") { unit = unit.dropLast() }
        guard let multiplier = multipliers[String(unit)] else { return nil }
        let parts = number.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let wholeText = parts.first, let whole = Int64(wholeText) else { return nil }
        var fraction: Int64 = 0
        if parts.count == 2 {
            // Digits past the 18th only make the fraction larger, and it is rounded down anyway.
            let digits = parts[1].prefix(18)
            guard let numerator = Int64(digits) else { return nil }
            let denominator = (0..<digits.count).reduce(Int64(1)) { power, _ in power * 10 }
            fraction = denominator.dividingFullWidth(numerator.multipliedFullWidth(by: multiplier)).quotient
        }
        let (scaled, overflow) = whole.multipliedReportingOverflow(by: multiplier)
        let (total, overflowToo) = scaled.addingReportingOverflow(fraction)
        return overflow || overflowToo ? nil : total
    }

    private static func mode(_ text: String) throws(BadValue) -> BackgroundMode {
        guard let mode = BackgroundMode(rawValue: text) else { throw BadValue("'\(text)' is not one of run, slow, pause") }
        return mode
    }

    private static func number(_ text: String, _ range: ClosedRange<Int64>) throws(BadValue) -> Int64 {
        guard let n = Int64(text), range.contains(n) else {
            throw BadValue("'\(text)' is not a number in \(range.lowerBound)...\(range.upperBound)")
        }
        return n
    }

    private static func boolean(_ text: String) throws(BadValue) -> Bool {
        switch text.lowercased() {
        case "yes", "true", "on", "1": return true
        case "no", "false", "off", "0": return false
        default: throw BadValue("'\(text)' is not yes or no")
        }
    }

    /// The scheduler's part of the settings.
    var schedulerConfiguration: Scheduler.Configuration {
        Scheduler.Configuration(fastWidth: fastWidth, slowWidth: slowWidth, perHostLimit: perHostLimit, retry: retry,
                                hostStartRate: hostStartRate.map { .init(perSecond: $0, burst: hostStartBurst) },
                                backgroundSlice: backgroundSlice.map { $0 * 1000 },
                                urgentSlice: urgentSlice.map { $0 * 1000 },
                                slowWaitingKept: BacklogWindow.blockedLimit * backlogWindow)
    }

    private static func size(_ text: String) throws(BadValue) -> Int64 {
        guard let n = parseSize(text), n >= 1 else {
            throw BadValue("'\(text)' is not a size (a positive number of bytes, or with K, M, G or T: 64K, 1.5G)")
        }
        return n
    }

    /// A size up to `most`: a larger one is refused, not cut to it unsaid.
    private static func size(_ text: String, atMost most: Int64) throws(BadValue) -> Int64 {
        let n = try size(text)
        guard n <= most else { throw BadValue("'\(text)' is more than this setting takes, \(showSize(most))") }
        return n
    }

    private static func showSize(_ bytes: Int64) -> String {
        guard bytes != 0 else { return "0" }
        for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] where bytes % (1 << shift) == 0 {
            return "\(bytes >> shift)\(suffix)"
        }
        return String(bytes)
    }

    /// A proxy as curl takes it, `[scheme://][user:password@]host[:port]`, with a scheme curl speaks to proxies.
    private static func proxyURL(_ text: String) throws(BadValue) -> String {
        let schemes = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]
        var scheme = "", rest = Substring(text)
        if let colon = text.firstIndex(of: ":"), text[colon...].hasPrefix("://") {
            scheme = String(text[..<colon])
            rest = text[text.index(colon, offsetBy: 3)...]
        }
        // The error shows no password.
        let shown = rest.lastIndex(of: "@").map { (scheme.isEmpty ? "" : scheme + "://") + "…" + rest[$0...] } ?? text
        let bad = BadValue("'\(shown)' is not a proxy URL like http://proxy.example:3128 (schemes: "
                           + schemes.joined(separator: ", ") + ")")
        guard scheme.isEmpty || schemes.contains(scheme.lowercased()) else { throw bad }
        var authority = rest.prefix { $0 != "/" }
        if let at = authority.lastIndex(of: "@") {
            // curl ends the authority at the first / ? or #, and takes no space: a password with one would be cut,
            // and curl's error, which quotes the proxy, would show it to every client.
            let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~%!$&'()*+,;=:")
            guard authority[..<at].allSatisfy(allowed.contains) else {
                throw BadValue("the proxy's user or password holds a character that must be percent-encoded "
                               + "(# as %23, a space as %20, / as %2F, ? as %3F, @ as %40)")
            }
            // curl sends a % not followed by two hex digits as it is: a typo would be a wrong password, unsaid.
            let parts = authority[..<at].split(separator: "%", omittingEmptySubsequences: false).dropFirst()
            guard parts.allSatisfy({ $0.prefix(2).count == 2 && $0.prefix(2).allSatisfy(\.isHexDigit) }) else {
                throw BadValue("the proxy's user or password has a % that does not start a %HH escape (a % itself is %25)")
            }
            authority = authority[authority.index(after: at)...]
        }
        var host = authority, port: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw bad }
            host = authority[...close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw bad }
                port = after.dropFirst()
            }
        } else if let colon = authority.firstIndex(of: ":") {
            host = authority[..<colon]
            port = authority[authority.index(after: colon)...]
        }
        guard !host.isEmpty, host.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) else { throw bad }
        if let port { guard let number = UInt16(port), number > 0 else { throw bad } }
        return text
    }

    private static func absolutePath(_ text: String) throws(BadValue) -> String {
        guard text.hasPrefix("/") else { throw BadValue("'\(text)' is not an absolute path") }
        return text
    }

    /// An absolute path to a file (or directory) the daemon can read now.
    private static func readable(_ text: String, directory: Bool) throws(BadValue) -> String {
        let path = try absolutePath(text)
        var info = stat()
        guard stat(path, &info) == 0, access(path, R_OK) == 0 else {
            throw BadValue("cannot read '\(path)': \(String(cString: strerror(errno)))")
        }
        guard ((info.st_mode & S_IFMT) == S_IFDIR) == directory else {
            throw BadValue("'\(path)' is not a \(directory ? "directory" : "file")")
        }
        return path
    }

    private static func fileMode(_ text: String) throws(BadValue) -> mode_t {
        guard let mode = mode_t(text, radix: 8), mode <= 0o777, mode & 0o600 == 0o600 else {
            throw BadValue("'\(text)' is not an octal mode between 0600 and 0777 that the owner can read and write")
        }
        return mode
    }

    /// The most users or groups a list admits: each is looked up (`getpwnam`, and `getpwuid` to show it) on the loop
    /// thread at a reload; 120,000 uids took 8.5 s. Many users are a group's members.
    static let mostListed = 1024

    /// The names of a list of users or groups (`what`), at most `mostListed`.
    private static func list(_ text: String, of what: String) throws(BadValue) -> [String] {
        let names = text.split { $0 == "," || $0 == " " || $0 == "\t" }.map(String.init)
        guard names.count <= mostListed else {
            throw BadValue("\(names.count) \(what) listed, at most \(mostListed)"
                           + (what == "users" ? ": admit them as members of a group (allowed_groups)" : ""))
        }
        return names
    }

    private static func users(_ text: String) throws(BadValue) -> [uid_t] {
        var ids: [uid_t] = []
        for name in try list(text, of: "users") {
            if let id = uid_t(name) {
                ids.append(id)
            } else if let entry = getpwnam(name) {
                ids.append(entry.pointee.pw_uid)
            } else {
                throw BadValue("no user '\(name)' (getpwnam)")
            }
        }
        return ids
    }

    private static func groups(_ text: String) throws(BadValue) -> [gid_t] {
        var ids: [gid_t] = []
        for name in try list(text, of: "groups") {
            if let id = gid_t(name) {
                ids.append(id)
            } else if let entry = getgrnam(name) {
                ids.append(entry.pointee.gr_gid)
            } else {
                throw BadValue("no group '\(name)' (getgrnam)")
            }
        }
        return ids
    }

    static func userName(_ id: uid_t) -> String {
        guard let entry = getpwuid(id), let name = entry.pointee.pw_name else { return String(id) }
        return String(cString: name)
    }

    static func groupName(_ id: gid_t) -> String {
        guard let entry = getgrgid(id), let name = entry.pointee.gr_name else { return String(id) }
        return String(cString: name)
    }
}

extension Log.Level {
    private static let names: [(String, Log.Level)] = [("error", .error), ("warning", .warning), ("info", .info),
                                                        ("debug", .debug)]

    init?(name: String) {
        guard let level = Self.names.first(where: { $0.0 == name })?.1 else { return nil }
        self = level
    }

    /// The level as `log_level` spells it.
    var configName: String { Self.names.first { $0.1 == self }!.0 }
}

/// `path` with every symbolic link and `..` resolved; nil when it does not exist.
private func realPath(_ path: String) -> String? {
    guard let resolved = realpath(path, nil) else { return nil }
    defer { free(resolved) }
    return String(cString: resolved)
}

/// An absolute `path` with its longest existing ancestor resolved, the rest (which the start may make) taken from its
/// text: what it names once made, through the links above it.
private func resolvingExistingAncestor(_ path: String) -> String {
    var parts = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
    var rest: [String] = []
    while !parts.isEmpty {
        if let real = realPath("/" + parts.joined(separator: "/")) {
            return lexicallyNormal((real == "/" ? "" : real) + "/" + rest.joined(separator: "/"))
        }
        rest.insert(parts.removeLast(), at: 0)
    }
    return lexicallyNormal(path)
}

/// An absolute `path` without `.` and `..` components, worked out from its text alone.
private func lexicallyNormal(_ path: String) -> String {
    var parts: [Substring] = []
    for part in path.split(separator: "/") where part != "." {
        if part == ".." { _ = parts.popLast() } else { parts.append(part) }
    }
    return "/" + parts.joined(separator: "/")
}

/// An absolute `path` with its directory resolved (the file itself need not exist); nil when the directory does not.
private func resolvingDirectory(_ path: String) -> String? {
    guard let slash = path.lastIndex(of: "/"), let directory = realPath(slash == path.startIndex ? "/" : String(path[..<slash]))
    else { return nil }
    return (directory == "/" ? "" : directory) + path[slash...]
}
