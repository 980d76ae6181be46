#!/usr/bin/env python3
"""The lab rows (issue 16, part 4): prefetchd against curl on a real link, HTTPS + HTTP/2 and HTTP/1.1.

Brings up the network lab (lab/README.md) and measures, each row a ratio of figures taken side by side in one run:

  L1  urgent `prefetchctl get` latency, one every 0.4-0.6 s: idle daemon vs while a 2,000-URL backlog drains
      (p50, p99, ratio to idle; background files fetched meanwhile; urgent requests nginx served on a connection
      that also carried background requests)
  L2  nothing urgent: `prefetchctl queue --wait` of N x 205 KB vs one curl process fetching them serially over one
      connection, and `--slow-width 4` vs `curl --parallel --parallel-max 4`
  L3  fast-lane bulk: `prefetchctl get -` of N vs `curl -Z --parallel-max 8` and `wget2 --max-threads=8`
  L4  a person scrolling 10-row screens, 2 s per screen, `prefetchctl view --ahead 20`: time until a screen is
      fully ready (median of screens 2..S) vs a client running `curl -Z` for each screen when it is shown

The daemon runs in the lab's client namespace with a socket and cache of its own in a temporary directory, and
trusts the lab's CA with `--ca-file`.

Usage: lab_bench.py [--quick] [--only L1,L3] [--links 50/20/64K,10/100/64K] [--origins h2,h1]
                    [--bin-dir DIR] [--daemon-args "--background-window 0"] [--get-interval 4-6] [--gets 15] [--keep]
Needs root (the lab). Writes bench/results/lab-<date>-<time>-<commit>[-quick].json and prints the table; a full
run of every row with the default links, origins and daemon options also replaces the table in bench/README.md.
"""

import argparse
import bisect
import datetime
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "lab"))

import lab  # noqa: E402
from benchlib import Client, log, percentile  # noqa: E402

FULL = dict(gets=60, warm=3, backlog=2000, drain_files=200, drain_cap=120, bulk_files=200, bulk_repeats=3, screens=10)
QUICK = dict(gets=12, warm=3, backlog=2000, drain_files=30, drain_cap=45, bulk_files=60, bulk_repeats=1, screens=6)
# L1: seconds from one get's start to the next, drawn evenly from this range (the same seeded draws for the idle and the
# busy daemon; `--get-interval` sets another, as 4-6 for a person reading). Gets exactly 0.5 s apart met the
# background's file boundaries at one phase, which the drain's rhythm locked in and which changed from run to run
# (docs/transport.md, "What a file boundary costs").
GET_INTERVALS = (0.4, 0.6)
SCREEN_ROWS = 10
SCREEN_SECONDS = 2.0
VIEW_AHEAD = 20
# Origins of the lab: name -> (lab origin, what the table calls it)
ORIGINS = {"h2": ("https", "HTTPS + HTTP/2"), "h1": ("https_h1", "HTTPS + HTTP/1.1"), "http": ("http", "HTTP/1.1")}


def parse_interval(text):
    """`LO-HI` seconds, 0 < LO <= HI."""
    try:
        low, high = (float(part) for part in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError("expected LO-HI in seconds, e.g. 4-6, not %r" % text)
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError("expected 0 < LO <= HI, not %r" % text)
    return (low, high)


def positive(text):
    """A whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("expected a whole number of at least 1, not %r" % text)
    return int(text)


def parse_link(text):
    """`50/20/64K`: round trip in ms, rate in Mbit/s, bottleneck buffer -> lab settings (one-way delay)."""
    try:
        rtt, rate, buffer = text.split("/")
        return {"label": "%s ms / %s Mbit/s / %s" % (rtt, rate, buffer), "delay_ms": float(rtt) / 2,
                "rate_mbit": float(rate), "buffer_bytes": lab.byte_count(buffer)}
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError("a link is RTT_MS/MBIT/BUFFER, like 50/20/64K, not %r" % text) from None


def default_bin_dir():
    """.build/release when both binaries are there and newer than every source file, else .build/debug."""
    newest = max(os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(REPO, "Sources"))
                 for f in fs)
    release = os.path.join(REPO, ".build", "release")
    binaries = [os.path.join(release, name) for name in ("prefetchd", "prefetchctl")]
    if all(os.path.exists(b) and os.path.getmtime(b) >= newest for b in binaries):
        return release, None
    return os.path.join(REPO, ".build", "debug"), "release binaries missing or older than Sources: debug build used"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True).stdout.strip()


def server_start(entry):
    """When nginx began to handle a request (its log has the end, `msec`, and the time taken)."""
    return entry["msec"] - entry["request_time"]


def background_lead(urls, urgent, background):
    """For each of `urls`, seconds from the start of the last background response the server began before its
    request to that request (None if none began, or the URL is not in the log). A background response that began
    shortly before was already on its way when the urgent request left the daemon: the hold cannot stop what the
    server sends into the window open at that moment."""
    starts = sorted(server_start(e) for e in background)
    leads = {}
    for entry in urgent:
        start = server_start(entry)
        before = bisect.bisect_right(starts, start)
        leads[entry["request"].split(" ")[1]] = start - starts[before - 1] if before else None
    return [leads.get("/" + url.split("/", 3)[3]) for url in urls]


def median(values):
    return statistics.median(values) if values else None


def ms(seconds):
    return "—" if seconds is None else "%.0f ms" % (seconds * 1000) if seconds < 10 else "%.1f s" % seconds


class LabDaemon:
    """One prefetchd in the client namespace, trusting the lab CA, with a directory of its own; stopped by pid."""

    def __init__(self, bench, name, args=()):
        self.bench = bench
        self.dir = os.path.join(bench.work, name)
        os.makedirs(self.dir)
        self.socket = os.path.join(self.dir, "ctl.sock")
        argv = [os.path.join(bench.bins, "prefetchd"), "--ca-file", bench.net.ca_file, "--socket", self.socket,
                "--cache-dir", os.path.join(self.dir, "cache"), *bench.daemon_args, *args]
        self.log = open(os.path.join(self.dir, "daemon.log"), "wb")
        self.process = bench.net.popen("client", argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while True:
            failure = None
            if self.process.poll() is not None:
                failure = "prefetchd exited with %s; see %s" % (self.process.returncode, self.log.name)
            else:
                try:
                    self.status()
                    return
                except (OSError, ValueError):
                    if time.monotonic() > deadline:
                        failure = "prefetchd did not answer within 30 s; see %s" % self.log.name
            if failure:
                self.stop()
                raise RuntimeError(failure)
            time.sleep(0.02)

    def ctl(self, *args):
        return [os.path.join(self.bench.bins, "prefetchctl"), "--socket", self.socket, *args]

    def status(self):
        client = Client(self.socket, timeout=30)
        try:
            return client.call("status")["result"]
        finally:
            client.close()

    def stop(self):
        self.bench.net.stop_process(self.process)
        self.log.close()


class LabBench:
    def __init__(self, args, bins, bin_note):
        self.args = args
        self.cfg = dict(QUICK if args.quick else FULL)
        if args.gets is not None:
            self.cfg["gets"] = args.gets
        self.bins, self.bin_note = bins, bin_note
        self.daemon_args = shlex.split(args.daemon_args)
        self.work = tempfile.mkdtemp(prefix="lab-bench-")
        self.rows = []
        self.errors = []
        self.run_id = 0
        self.net = None

    # ---- plumbing

    def tag(self, what):
        self.run_id += 1
        return "%s-%d" % (what, self.run_id)

    def urls(self, origin, tag, count):
        """`count` distinct URLs of the lab's images (the same files under distinct queries, so none is cached)."""
        return [self.net.url(lab.IMAGE_PATH % (i % self.net.images), origin) + "?%s-%d" % (tag, i)
                for i in range(count)]

    def curl(self, *args):
        """curl on the client side, trusting the lab CA."""
        return self.net.command("client", ["curl", "-sS", "--fail", "--cacert", self.net.ca_file, *args])

    def curl_config(self, urls, directory):
        """A curl -K file: one url/output pair per URL, into `directory` (a disk, as the daemon writes one)."""
        os.makedirs(directory, exist_ok=True)
        path = directory + ".curlrc"
        with open(path, "w") as f:
            for i, url in enumerate(urls):
                f.write('url = "%s"\noutput = "%s/%d.jpg"\n' % (url, directory, i))
        return path

    def write_list(self, name, urls):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write("".join(u + "\n" for u in urls))
        return path

    def requests(self, tag):
        return self.net.tagged_requests(tag)

    def timed(self, argv, stdin=None, timeout=600):
        """Wall seconds and exit status of argv (stdout discarded)."""
        start = time.monotonic()
        with open(stdin, "rb") if stdin else open(os.devnull, "rb") as fin:
            result = subprocess.run(argv, stdin=fin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    timeout=timeout)
        return time.monotonic() - start, result.returncode, result.stderr.decode(errors="replace")[-500:]

    def overflow(self):
        stats = self.net.stats()
        return stats["s2c"].get("overflowed", 0) + stats["c2s"].get("overflowed", 0)

    def row(self, **fields):
        self.rows.append(fields)
        log("%s %s %s: %s vs %s -> %s" % (fields["row"], fields["origin"], fields["what"], fields["ours"],
                                         fields["peer"], "—" if fields.get("ratio") is None
                                         else "%.2f" % fields["ratio"]))

    # ---- L1: urgent latency, idle vs backlog draining

    def gets(self, daemon, urls):
        """One `prefetchctl get` per URL, started `--get-interval` apart (or when the one before ends, if later);
        returns their wall times and how many failed."""
        latencies, errors = [], 0
        draws = random.Random(len(urls))
        start = time.monotonic()
        for url in urls:
            delay = start - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            start += draws.uniform(*self.args.get_interval)
            seconds, rc, _ = self.timed(daemon.ctl("get", "--timeout", "60", url))
            latencies.append(seconds)
            errors += rc != 0
        return latencies, errors

    def l1(self, link, origin):
        cfg = self.cfg
        figures = {}
        for config in ("idle", "busy"):
            tag = self.tag("l1%s" % config)
            daemon = LabDaemon(self, tag)
            try:
                urgent = self.urls(origin, tag + "u", cfg["warm"] + cfg["gets"])
                if config == "busy":
                    backlog = self.write_list(tag + "-backlog.txt", self.urls(origin, tag + "bg", cfg["backlog"]))
                    _, rc, err = self.timed(daemon.ctl("queue", "-"), stdin=backlog)
                    if rc != 0:
                        raise RuntimeError("queue - failed (%d): %s" % (rc, err))
                    time.sleep(1.0)
                # The warm-up gets open the urgent side's connection in the condition measured (while the backlog
                # drains, for busy), so that no counted get pays a handshake the idle daemon does not.
                warm, warm_errors = self.gets(daemon, urgent[:cfg["warm"]])
                before, overflow = daemon.status()["fetched"], self.overflow()
                latencies, errors = self.gets(daemon, urgent[cfg["warm"]:])
                background = daemon.status()["fetched"] - before - (len(latencies) - errors)
                overflow = self.overflow() - overflow
            finally:
                daemon.stop()
            log_urgent = self.requests(tag + "u")
            log_background = self.requests(tag + "bg")
            background_connections = {e["connection"] for e in log_background}
            shared = sum(1 for e in log_urgent if e["connection"] in background_connections)
            figures[config] = {
                "after_background_start": background_lead(urgent[cfg["warm"]:], log_urgent, log_background),
                "latencies": latencies, "p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
                "p99": percentile(latencies, 99),
                "max": max(latencies), "first": latencies[0], "warm_up": warm, "errors": errors + warm_errors,
                "background_fetched": background,
                "urgent_requests": len(log_urgent), "urgent_on_background_connection": shared,
                "urgent_connections": len({e["connection"] for e in log_urgent}),
                "background_connections": len(background_connections), "packets_overflowed": overflow,
            }
        idle, busy = figures["idle"], figures["busy"]
        # A get far slower than the rest: a retransmission timeout (RTO) after packets overflowed the bottleneck, or,
        # with nothing overflowed, most likely BBR's ProbeRTT on the server (cwnd 4 for 200 ms once its minimum RTT is
        # 10 s old; never seen with --cc cubic). Either daemon meets them now and then; with 60 gets p99 is the
        # largest, so one of them decides the ratio.
        slow_limit = idle["p50"] + 0.2
        for figure in (idle, busy):
            figure["gets_over_p50_plus_200ms"] = sum(1 for s in figure["latencies"] if s > slow_limit)
        # Gets that met a file boundary: a background response began less than a round trip before them
        # (docs/transport.md, "What a file boundary costs").
        round_trip = 2 * self.net.link["delay_ms"] / 1000
        boundary = [s for s, lead in zip(busy["latencies"], busy["after_background_start"])
                    if lead is not None and lead < round_trip]
        self.row(row="L1", link=link, origin=origin, what="urgent get latency, %d gets %g-%g s apart, while a %d-URL "
                 "backlog drains (p99 ratio to idle)" % (cfg["gets"], *self.args.get_interval, cfg["backlog"]),
                 ours="p50 %s / p99 %s (first %s)" % (ms(busy["p50"]), ms(busy["p99"]), ms(busy["first"])),
                 peer="idle daemon: p50 %s / p99 %s" % (ms(idle["p50"]), ms(idle["p99"])),
                 ratio=busy["p99"] / idle["p99"], target="p99 ≤ 1.15 × idle",
                 met=busy["p99"] <= 1.15 * idle["p99"] and busy["background_fetched"] > 0,
                 note="p50 ratio %.2f, p95 ratio %.2f (p99 of %d gets is the largest); background files fetched "
                      "meanwhile %d; warm-up gets (not counted) idle %s, busy %s; urgent requests on a connection that "
                      "carried background requests: %d of %d; connections urgent %d, background %d; errors %d; "
                      "packets overflowed %d (idle %d); gets slower than idle p50 + 200 ms (an RTO or ProbeRTT): idle %d, busy %d; "
                      "busy gets less than a round trip after a background response began: %d%s"
                      % (busy["p50"] / idle["p50"], busy["p95"] / idle["p95"], len(busy["latencies"]),
                         busy["background_fetched"], "/".join(ms(s) for s in idle["warm_up"]),
                         "/".join(ms(s) for s in busy["warm_up"]), busy["urgent_on_background_connection"],
                         busy["urgent_requests"], busy["urgent_connections"], busy["background_connections"],
                         busy["errors"] + idle["errors"], busy["packets_overflowed"], idle["packets_overflowed"],
                         idle["gets_over_p50_plus_200ms"], busy["gets_over_p50_plus_200ms"], len(boundary),
                         " (p50 %s)" % ms(median(boundary)) if boundary else ""),
                 figures=figures)

    # ---- L2: background drain with nothing urgent

    def daemon_batch(self, origin, tag, count, ctl_args, daemon_args=(), timeout=600):
        """A fresh daemon given `count` URLs on stdin (`prefetchctl CTL_ARGS -`); the files it fetched count as done."""
        daemon = LabDaemon(self, tag, list(daemon_args))
        try:
            listing = self.write_list(tag + ".txt", self.urls(origin, tag, count))
            seconds, rc, _ = self.timed(daemon.ctl(*ctl_args, "-"), stdin=listing, timeout=timeout)
            done = daemon.status()["fetched"]
        finally:
            daemon.stop()
        return self.drain_figures(tag, seconds, done, count, rc)

    def drain(self, origin, tag, count, slow_width):
        cap = self.cfg["drain_cap"]
        return self.daemon_batch(origin, tag, count, ("queue", "--wait", "--timeout", str(cap)),
                                 ("--slow-width", str(slow_width)), timeout=cap + 60)

    def peer_figures(self, tag, count, argv, directory):
        """Runs a peer that downloads into `directory`; the files it left there count as done."""
        seconds, rc, _ = self.timed(argv, timeout=600)
        done = len(os.listdir(directory))
        shutil.rmtree(directory)
        return self.drain_figures(tag, seconds, done, count, rc)

    def curl_drain(self, origin, tag, count, parallel):
        directory = os.path.join(self.work, tag)
        config = self.curl_config(self.urls(origin, tag, count), directory)
        extra = ["--parallel", "--parallel-max", str(parallel)] if parallel else []
        return self.peer_figures(tag, count, self.curl(*extra, "-K", config), directory)

    def wget2_fetch(self, origin, tag, count, threads):
        """wget2 on the client side, trusting the lab CA: `count` URLs with `threads` at once, into a directory."""
        directory = os.path.join(self.work, tag)
        os.makedirs(directory)
        listing = self.write_list(tag + ".txt", self.urls(origin, tag, count))
        return self.peer_figures(tag, count, self.net.command("client", [
            "wget2", "--max-threads=%d" % threads, "-q", "-i", listing, "-P", directory,
            "--ca-certificate=" + self.net.ca_file]), directory)

    def drain_figures(self, tag, seconds, done, count, rc):
        entries = self.requests(tag)
        return {"seconds": seconds, "files": done, "asked": count, "rate": done / seconds, "rc": rc,
                "connections": len({e["connection"] for e in entries}), "requests": len(entries),
                "complete": done >= count}

    def l2(self, link, origin):
        count = self.cfg["drain_files"]
        for width in (1, 4):
            ours = self.drain(origin, self.tag("l2d%d" % width), count, width)
            peer = self.curl_drain(origin, self.tag("l2c%d" % width), count, 0 if width == 1 else width)

            def text(f):
                shown = ("%.1f s" % f["seconds"]) if f["complete"] else ("%d of %d in %.0f s (capped)"
                                                                        % (f["files"], f["asked"], f["seconds"]))
                return "%s, %.1f files/s, %d connection%s" % (shown, f["rate"], f["connections"],
                                                              "" if f["connections"] == 1 else "s")
            what = ("nothing urgent: `queue --wait` of %d × 205 KB" % count if width == 1 else
                    "nothing urgent: `queue --wait` of %d × 205 KB, --slow-width 4" % count)
            self.row(row="L2", link=link, origin=origin, what=what + " (files/s ratio)", ours=text(ours),
                     peer=("curl, one process, serial: " if width == 1 else "curl --parallel --parallel-max 4: ")
                     + text(peer), ratio=ours["rate"] / peer["rate"], target="≥ 0.9 × curl",
                     met=ours["rate"] >= 0.9 * peer["rate"], note="", figures={"prefetchd": ours, "curl": peer})

    # ---- L3: fast-lane bulk

    def l3(self, link, origin):
        count = self.cfg["bulk_files"]
        tools = {"prefetchd": lambda: self.daemon_batch(origin, self.tag("l3d"), count, ("get", "--timeout", "300")),
                 "curl -Z --parallel-max 8": lambda: self.curl_drain(origin, self.tag("l3c"), count, 8),
                 "wget2 --max-threads=8": lambda: self.wget2_fetch(origin, self.tag("l3w"), count, 8)}
        names = list(tools)
        runs = {name: [] for name in names}
        for repeat in range(self.cfg["bulk_repeats"]):  # rotating order: no tool always first or last
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                runs[name].append(tools[name]())

        def shown(name):
            figures = runs[name]
            seconds = [f["seconds"] for f in figures]
            text = "%.1f s" % median(seconds)
            if len(seconds) > 1:
                text += " (%.1f–%.1f)" % (min(seconds), max(seconds))
            incomplete = [f for f in figures if not f["complete"]]
            if incomplete:
                text += ", %d of %d runs incomplete (rc %s)" % (len(incomplete), len(figures),
                                                                 ",".join(str(f["rc"]) for f in incomplete))
            return text + ", %d connections" % max(f["connections"] for f in figures)

        ours = median([f["seconds"] for f in runs["prefetchd"]])
        complete = all(f["complete"] for f in runs["prefetchd"])
        repeats = len(runs["prefetchd"])
        what = "fast-lane bulk: `get -` of %d × 205 KB (time ratio%s)" % (
            count, ", median of %d runs each" % repeats if repeats > 1 else "")
        for name, target in ((names[1], "≥ 1.0 × curl -Z (speed)"), (names[2], None)):
            peer = median([f["seconds"] for f in runs[name]])
            self.row(row="L3", link=link, origin=origin, what=what, ours=shown("prefetchd"),
                     peer="%s: %s" % (name, shown(name)), ratio=peer / ours, target=target or "—",
                     met=None if target is None else complete and ours <= peer,
                     note="ratio: the peer's median time ÷ ours",
                     figures={"prefetchd": runs["prefetchd"], "peer": runs[name]})

    # ---- L4: a person scrolling

    def l4(self, link, origin):
        screens = self.cfg["screens"]
        tag = self.tag("l4d")
        listing = self.write_list(tag + ".txt", self.urls(origin, tag, self.net.images))
        daemon = LabDaemon(self, tag)
        ready = {}
        try:
            view = subprocess.Popen(daemon.ctl("view", listing, "--ahead", str(VIEW_AHEAD)), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

            def read():
                for line in view.stdout:
                    row = line.split(b" ", 1)[0]
                    if row.isdigit():
                        ready.setdefault(int(row), time.monotonic())
            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            shown = []
            started = time.monotonic()
            for screen in range(screens):
                delay = started + screen * SCREEN_SECONDS - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                shown.append(time.monotonic())
                view.stdin.write(b"%d %d\n" % (screen * SCREEN_ROWS, screen * SCREEN_ROWS + SCREEN_ROWS - 1))
                view.stdin.flush()
            view.stdin.close()
            view.wait(timeout=120)
            reader.join(timeout=5)
        finally:
            daemon.stop()
        ours = []
        for screen in range(screens):
            rows = range(screen * SCREEN_ROWS, (screen + 1) * SCREEN_ROWS)
            ours.append(max(ready[r] for r in rows) - shown[screen] if all(r in ready for r in rows) else None)

        tag = self.tag("l4c")
        urls = self.urls(origin, tag, screens * SCREEN_ROWS)
        naive = [None] * screens

        def fetch(screen):
            part = urls[screen * SCREEN_ROWS:(screen + 1) * SCREEN_ROWS]
            config = self.curl_config(part, os.path.join(self.work, "%s-%d" % (tag, screen)))
            seconds, rc, _ = self.timed(self.curl("-Z", "-K", config))
            naive[screen] = seconds if rc == 0 else None
        threads = []
        started = time.monotonic()
        for screen in range(screens):
            delay = started + screen * SCREEN_SECONDS - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            threads.append(threading.Thread(target=fetch, args=(screen,)))
            threads[-1].start()
        for thread in threads:
            thread.join()
        counted_ours = [s for s in ours[1:] if s is not None]
        counted_naive = [s for s in naive[1:] if s is not None]
        ours_median = median(counted_ours) if len(counted_ours) == len(ours) - 1 else None
        naive_median = median(counted_naive)
        self.row(row="L4", link=link, origin=origin,
                 what="scrolling: %d-row screens every %g s, `view --ahead %d`, a screen fully ready "
                      "(median of screens 2–%d)" % (SCREEN_ROWS, SCREEN_SECONDS, VIEW_AHEAD, screens),
                 ours=ms(ours_median), peer="curl -Z per screen when shown: %s" % ms(naive_median),
                 ratio=None if ours_median is None else ours_median / naive_median, target="≤ 0.1 × naive",
                 met=ours_median is not None and ours_median <= 0.1 * naive_median,
                 note="per screen, ours: %s; naive: %s" % (", ".join(ms(s) for s in ours),
                                                           ", ".join(ms(s) for s in naive)),
                 figures={"prefetchd": ours, "naive": naive})

    # ---- the run

    def run(self):
        rows = {"L1": self.l1, "L2": self.l2, "L3": self.l3, "L4": self.l4}
        only = [r.strip().upper() for r in self.args.only.split(",")] if self.args.only else list(rows)
        started = time.monotonic()
        self.load_before = os.getloadavg()[0]
        first = self.args.links[0]
        self.net = lab.Lab(name=self.args.name, delay_ms=first["delay_ms"], rate_mbit=first["rate_mbit"],
                           buffer_bytes=first["buffer_bytes"], congestion_control=self.args.cc)
        with self.net:
            for link in self.args.links:
                self.net.set_link(delay_ms=link["delay_ms"], rate_mbit=link["rate_mbit"],
                                  buffer_bytes=link["buffer_bytes"])
                for name in self.args.origins:
                    for row in only:
                        log("%s on %s, %s" % (row, link["label"], ORIGINS[name][1]))
                        try:
                            rows[row](link["label"], ORIGINS[name][0])
                        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, KeyError) as error:
                            log("%s failed: %s" % (row, error))
                            self.errors.append("%s on %s, %s: %s" % (row, link["label"], ORIGINS[name][1], error))
        return time.monotonic() - started

    def report(self, seconds):
        commit = git("rev-parse", "--short", "HEAD") or "unknown"
        dirty = bool(git("status", "--porcelain", "Sources"))
        now = datetime.datetime.now(datetime.timezone.utc)
        names = {v[0]: v[1] for v in ORIGINS.values()}
        load = (self.load_before, os.getloadavg()[0])
        lines = ["Lab run of %s, commit %s%s, %s mode, %.0f s; binaries %s%s; %d cores, load %.2f before, %.2f "
                 "after; TCP congestion control %s. Link: `RTT / rate / bottleneck buffer` (lab/README.md)." % (
                     now.strftime("%Y-%m-%d %H:%M UTC"), commit, " with uncommitted changes in Sources" if dirty else "",
                     "quick" if self.args.quick else "full", seconds, os.path.relpath(self.bins, REPO),
                     " (%s)" % self.bin_note if self.bin_note else "", os.cpu_count(), *load, self.net.congestion_control),
            "", "| row | network | what | prefetchd | peer | ratio | target | met |", "|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            lines.append("| %s | lab %s, %s | %s%s | %s | %s | %s | %s | %s |" % (
                r["row"], r["link"], names[r["origin"]], r["what"], " — " + r["note"] if r["note"] else "", r["ours"],
                r["peer"], "—" if r["ratio"] is None else "%.2f" % r["ratio"], r["target"],
                "—" if r["met"] is None else "**yes**" if r["met"] else "**no**"))
        lines += ["", "Rows that could not run: " + "; ".join(self.errors)] if self.errors else []
        table = "\n".join(lines)
        print(table)
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        path = os.path.join(HERE, "results", "lab-%s-%s%s.json" % (now.strftime("%Y%m%d-%H%M"), commit,
                                                                    "-quick" if self.args.quick else ""))
        with open(path, "w") as f:
            json.dump({"date": now.isoformat(timespec="seconds"), "commit": commit, "sources_dirty": dirty,
                       "mode": "quick" if self.args.quick else "full", "seconds": round(seconds, 1), "load": load,
                       "binaries": self.bins, "binaries_note": self.bin_note, "daemon_args": self.daemon_args,
                       "congestion_control": self.net.congestion_control,
                       "config": self.cfg, "get_interval": self.args.get_interval, "links": self.args.links, "origins": self.args.origins,
                       "curl": subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split("\n")[0],
                       "rows": self.rows, "errors": self.errors, "table": table}, f, indent=1)
        print("\nresults: %s" % os.path.relpath(path, REPO))
        if self.args.quick or self.args.only or self.args.custom or self.errors:
            return
        readme = os.path.join(HERE, "README.md")  # a full run with every row replaces the table there
        with open(readme) as f:
            text = f.read()
        begin, end = "<!-- lab-results:begin -->", "<!-- lab-results:end -->"
        if begin in text and end in text:
            header = lines[0].replace("Link: `RTT / rate / bottleneck buffer` (lab/README.md).",
                                      "Raw figures: `%s`." % os.path.relpath(path, REPO))
            table = "\n".join([header] + lines[1:])
            with open(readme, "w") as f:
                f.write(text.split(begin)[0] + begin + "\n" + table + "\n" + end + text.split(end, 1)[1])
            print("table written to bench/README.md")


def main():
    parser = argparse.ArgumentParser(description="prefetchd against curl on the network lab (issue 16). Needs root.")
    parser.add_argument("--quick", action="store_true", help="fewer gets and files, one link")
    parser.add_argument("--only", help="rows to run, e.g. L1,L4 (default: all)")
    parser.add_argument("--links", type=lambda t: [parse_link(x) for x in t.split(",")],
                        help="RTT_MS/MBIT/BUFFER,... (default 50/20/64K,10/100/64K; quick: 50/20/64K)")
    parser.add_argument("--origins", type=lambda t: t.split(","), default=["h2", "h1"],
                        help="h2 (HTTPS :443, HTTP/2), h1 (HTTPS :8443, HTTP/1.1), http (:80) (default h2,h1)")
    parser.add_argument("--bin-dir", help="where prefetchd and prefetchctl are (default: .build/release when up to "
                                          "date, else .build/debug)")
    parser.add_argument("--daemon-args", default="", help="extra prefetchd options for every daemon")
    parser.add_argument("--name", default="lbench", help="the lab's name (default lbench)")
    parser.add_argument("--cc", help="TCP congestion control on both sides of the lab, e.g. cubic, the usual server default (default: the "
                        "kernel's; it must be in net.ipv4.tcp_allowed_congestion_control)")
    parser.add_argument("--get-interval", type=parse_interval, default=GET_INTERVALS, metavar="LO-HI",
                        help="L1: seconds between one get's start and the next, drawn from LO-HI (default 0.4-0.6; "
                             "4-6 for a person reading)")
    parser.add_argument("--gets", type=positive, help="L1: gets counted (default 60; quick: 12)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (daemon logs)")
    args = parser.parse_args()
    args.custom = (args.links is not None or args.origins != ["h2", "h1"] or bool(args.daemon_args) or bool(args.cc)
                   or args.get_interval != GET_INTERVALS or args.gets is not None)
    if args.links is None:
        args.links = [parse_link("50/20/64K")] + ([] if args.quick else [parse_link("10/100/64K")])
    unknown = [o for o in args.origins if o not in ORIGINS]
    if unknown:
        parser.error("unknown origin %s (h2, h1, http)" % ", ".join(unknown))
    if os.geteuid() != 0:
        parser.error("the lab needs root")
    bins, bin_note = (args.bin_dir, None) if args.bin_dir else default_bin_dir()
    for binary in ("prefetchd", "prefetchctl"):
        if not os.access(os.path.join(bins, binary), os.X_OK):
            parser.error("%s/%s is missing; run `make release` (or give --bin-dir)" % (bins, binary))
    if bin_note:
        log("note: " + bin_note)
    bench = LabBench(args, bins, bin_note)
    try:
        seconds = bench.run()
        bench.report(seconds)
    finally:
        if args.keep:
            log("kept %s" % bench.work)
        else:
            shutil.rmtree(bench.work, ignore_errors=True)
    return 1 if bench.errors else 0  # unmet targets are results (the table says so), not failures


if __name__ == "__main__":
    sys.exit(main())
