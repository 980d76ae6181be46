/// `prefetchctl --help` and per-verb help.
enum Help {
    static let general = """
        Usage: prefetchctl [--socket PATH] [--json] VERB [ARGS]

        Talks to prefetchd, the image-prefetch daemon, over its Unix socket.

        Verbs:
          get URL...|-        fetch urgently, wait, print one cached file path per URL
          queue URL...|-      fetch later, in the background lane (durable once acknowledged)
          demote URL...|-     urgent work becomes background work (nothing restarts)
          promote URL...|-    background work becomes urgent
          cancel URL...|-     drop the task; its waiters get `cancelled`
          evict URL...|-      delete cached files
          info URL            what the daemon knows about a URL
          status              lanes, cache, counters
          list                tasks in memory (--limit N)
          formats             image formats gdk-pixbuf can read, and which are allowed
          metrics             counters, gauges and histograms in Prometheus text format
          watch               live view of the lanes, transfers and recent fetches (q quits)
          view FILE|-         a list someone scrolls: give it once, then visible ranges on stdin
          ping                is the daemon there?

        Options:
          --socket PATH       the daemon's socket (else $PREFETCHD_SOCKET, else $XDG_RUNTIME_DIR/prefetchd/ctl.sock,
                              else /tmp/prefetchd-$UID/ctl.sock; when that does not exist but the system
                              service's /run/prefetchd/ctl.sock does, that one)
          --json              machine-readable output (one JSON object per line; schemas in docs/protocol.md)
          --timeout SEC       info, status, list, formats, metrics, ping, and demote, promote, cancel, evict (each
                              answer): wait at most SEC for the answer (default 60; exit 5); get, queue --wait: for
                              the fetches (default: no limit); and, but for queue, at most SEC of the 5 s prefetchctl
                              waits for the daemon's greeting (none: exit 3)
          -h, --help          this text, or `prefetchctl VERB --help`
          --version

        `-` reads URLs from stdin, one per line. Human messages go to stderr, data to stdout.

        Exit codes: 0 ok, 1 a fetch failed, 2 usage error (the command line is wrong: found before connecting, for
        every verb), 3 daemon unreachable (or shutting down, or no room for another client or request), 4 request
        rejected (invalid URL, scheme not allowed in it, bad request, unauthorized), 5 timeout.

        Example:
          feh "$(prefetchctl get https://example.com/a.jpg)"
        """

    static func verb(_ verb: String) -> String? {
        switch verb {
        case "get": return """
            Usage: prefetchctl get URL...|- [--timeout SEC] [--max-stale SEC] [--offline] [-o FILE|-] [--json]
                   [--size WxH [--fit contain|cover|fill] [--format jpeg|png] [--quality N] [--upscale]]

            Fetches each URL urgently (or answers from the cache at once) and prints the cached file's path, one
            line per URL, in the order given. A URL waiting in the background lane is promoted. A URL that fails is
            named on stderr; with several URLs it also leaves an empty line on stdout, so line N is URL N's.
              --timeout SEC   stop waiting after SEC seconds (exit 5); the fetch goes on in the daemon
              --max-stale SEC answer at once from an entry stale by at most SEC seconds, revalidate in the background
              --offline       answer only from the cache (fresh or stale); `not_cached` otherwise
              --size WxH      a resized variant instead of the original, made once and cached: --fit contain
                              (default: fits inside), cover (fills and crops the centre) or fill (stretches);
                              --format jpeg|png (default: JPEG for JPEG originals, PNG otherwise); --quality 1-100
                              (JPEG, default 85); never larger than the original unless --upscale
            A stale answer says so: `"stale":true` with --json, a note on stderr otherwise.
              -o FILE         write the content of the (single) URL to FILE (also --output FILE); `-o -` writes it to stdout
              --json          one CacheEntry object per URL (errors as {"url":…,"error":{…}})
            With one URL and stderr on a terminal, an answer that takes over half a second shows a progress bar there.

            Example:
              prefetchctl get --timeout 10 https://example.com/a.jpg https://example.com/b.jpg
            """
        case "queue": return """
            Usage: prefetchctl queue URL...|- [--now] [--wait [--timeout SEC]] [--json]

            Queues URLs for the background lane. Each is durable once this command reports it `queued`. Lists of
            any length stream in batches. Prints a summary on stderr; --json prints one result per URL.
              --wait          then wait until every URL is fetched or failed: one progress bar on stderr when it is
                              a terminal (done/failed/total, rate, ETA); failed URLs are named on stderr, exit 1.
                              --json adds a second line per URL when it ends, status `finished` or `failed`
              --timeout SEC   with --wait: stop waiting after SEC seconds (exit 5); the fetches go on
              --now           fetch them now, as urgent work (status `promoted`), also while the background lane is
                              paused or slowed (metered network, battery, power saver, quiet hours, no
                              network); still durable. Past 65,536 urgent tasks waiting: status `busy`, they
                              stay background work, exit 3

            Example:
              prefetchctl queue - < urls.txt
              prefetchctl queue --now --wait https://example.com/a.jpg
              prefetchctl queue --wait https://example.com/a.jpg https://example.com/b.jpg
            """
        case "watch": return """
            Usage: prefetchctl watch [--json]

            Follows the daemon. On a terminal: a live view redrawn in place — lane counts (running/width, waiting,
            whether the slow lane is suspended, the backlog), one line per running transfer with a progress bar (a
            spinner when the size is unknown), bytes, rate, lane and URL, and the last finished and failed fetches.
            `q` or Ctrl-C quits. Colour only on a terminal (TERM not dumb) and when NO_COLOR is unset.
            Otherwise one line per event: `HH:MM:SS started LANE URL`, `HH:MM:SS finished LANE URL N bytes in S s`,
            `HH:MM:SS failed URL CODE: MESSAGE`, and `HH:MM:SS lanes …` when the lane counts change.
              --json          the raw event lines as the daemon sends them (docs/protocol.md, "watch events")
            Exits 3 when the daemon goes away.

            Example:
              prefetchctl watch
              prefetchctl watch --json | jq -c 'select(.event == "failed")'
            """
        case "view": return """
            Usage: prefetchctl view FILE|- [--ahead N] [--behind N] [--json]
                   [--size WxH [--fit contain|cover|fill] [--format jpeg|png] [--quality N] [--upscale]]

            For a program that shows a long list and scrolls it. Hands the daemon the list of URLs (FILE, one per
            line, or `-`: stdin up to its first empty line), then reads visible ranges from stdin, one per line:
            `FIRST LAST`, row numbers from 0 (row N is the N+1th URL of the list), both visible. The daemon fetches
            the visible rows urgently, prefetches the rows around them in the background (nearest first), demotes
            rows that scroll out of sight and drops pending work for rows far away. As each visible row becomes
            ready, a line `ROW PATH` is printed (the variant's path with --size).
              --ahead N       rows after the visible ones to prefetch (default: as many as are visible)
              --behind N      rows before them to prefetch (default: half as many)
              --size WxH      answer with resized variants (see `prefetchctl get --help` for --fit and the others)
              --json          the daemon's view_ready / view_failed events as they come (docs/protocol.md)
            Rows that fail are reported on stderr. When stdin ends, waits until the rows of the last range are
            answered, then exits: 0, 1 when a row failed, or 4 when the daemon refused the list or a range (see
            the message). Closing (or Ctrl-C) turns the remaining work into
            ordinary background work.

            Example:
              { echo 0 19; sleep 1; echo 20 39; } | prefetchctl view urls.txt
              printf '%s\\n' https://example.com/1.jpg https://example.com/2.jpg '' '0 1' | prefetchctl view -
            """
        case "demote", "promote", "cancel", "evict": return """
            Usage: prefetchctl \(verb) URL...|-\(verb == "evict" ? "|--all" : "") [--timeout SEC] [--json]

            \(["demote": "Moves urgent work to the background lane; running transfers keep their bytes.",
               "promote": "Moves background work to the urgent lane.",
               "cancel": "Drops the URLs' tasks (and queued entries); waiting `get`s receive `cancelled`.",
               "evict": "Deletes the URLs' cached files (and their variants)."][verb]!)
            Prints `URL STATUS` per URL.
              --timeout SEC   wait at most SEC (default 60) for each answer of the daemon (exit 5)\(verb == "evict" ? """

              --all           delete every cached entry (but those a waiting `get` or a variant being made needs) and
                              print `evicted N entries`; takes no URLs
            """ : "")

            Example:
              prefetchctl \(verb) https://example.com/a.jpg
            """
        case "info": return """
            Usage: prefetchctl info URL [--timeout SEC] [--json]

            Shows the canonical key, the cached entry, the task and any remembered failure for URL.

            Example:
              prefetchctl info https://example.com/a.jpg
            """
        case "status": return """
            Usage: prefetchctl status [--timeout SEC] [--json]

            Shows the lanes, the backlog, the cache and the daemon's counters.
            """
        case "list": return """
            Usage: prefetchctl list [--limit N] [--timeout SEC] [--json]

            Lists the tasks held in memory, running ones first, and how many URLs wait only in the durable queue.
              --limit N   list at most N tasks (default 1000, at most 10000)
            """
        case "formats": return """
            Usage: prefetchctl formats [--timeout SEC] [--json]

            Lists the image formats the daemon's gdk-pixbuf can read and whether its policy allows each
            (default: jpeg, png, gif, webp, avif; SVG is off).
            """
        case "metrics": return """
            Usage: prefetchctl metrics [--timeout SEC] [--json]

            Prints the daemon's metrics in the Prometheus text format (0.0.4): fetches by lane and result,
            downloaded bytes, cache hits and misses, lane lengths, cache size, fetch duration, queue wait and get
            latency histograms. Labels never carry a URL or a host.

            Example:
              prefetchctl metrics | grep prefetchd_fetches_total
            """
        case "ping": return """
            Usage: prefetchctl ping [--timeout SEC] [--json]

            Exits 0 and prints the daemon's version when it answers; exit 3 when it cannot be reached, 5 when it
            does not answer within --timeout (default 60 s).
            """
        default: return nil
        }
    }
}
