#!/usr/bin/env python3
"""`make bench` / `make bench-quick`: prefetchd side by side with the tools people use instead (issue 8).

Runs rows B1–B6 against origins on 127.0.0.1 (nginx for raw throughput, bench/shaped_origin.py for contention),
with warm-up and repeats, and writes bench/results/<date>-<commit>[-quick].json plus, for a full run, the table in
bench/README.md. Every process it starts is stopped by pid at the end, also on failure or Ctrl-C.

Usage: bench.py [--quick] [--only B1,B3] [--bin-dir DIR] [--keep]
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus  # noqa: E402
from benchlib import (HERE, PROCS, REPO, Client, Daemon, JournaledExt4, Nginx, ShapedOrigin,  # noqa: E402
                      install_signal_handlers, log, percentile, rotated, spread, timed)

FULL = dict(
    b1_backlog=2000, b1_gets=60, b1_warm=2, b1_reps=2, b1_grace=10, b1_fifo_gets=20,
    b2_files=2000, b2_reps=5, b2_warm=1, b2_drain_reps=2,
    b3_runs=300, b3_warm=30,
    b4_urls=1_000_000, b4_restarts=5,
    b5_clients=500, b5_gets=100, b5_urls=1000,
    b6_warm=2, b6_runs=18,
)
QUICK = dict(
    b1_backlog=2000, b1_gets=12, b1_warm=2, b1_reps=1, b1_grace=4, b1_fifo_gets=6,
    b2_files=500, b2_reps=2, b2_warm=1, b2_drain_reps=1,
    b3_runs=100, b3_warm=10,
    b4_urls=200_000, b4_restarts=3,
    b5_clients=100, b5_gets=50, b5_urls=400,
    b6_warm=1, b6_runs=5,
)

# The shaped origin: one 20 Mbit/s link shared by every response, 30 ms added before each response.
SHAPED_RATE = 2_500_000
SHAPED_LATENCY = 0.030
B1_INTERVAL = 0.5


def convert_binary():
    return corpus.convert_binary()


def fmt_ms(seconds):
    return "%.1f ms" % (seconds * 1000) if seconds < 10 else "%.1f s" % seconds


def fmt_rate(x, unit):
    return ("%.0f" % x if x >= 100 else "%.1f" % x) + " " + unit


def met(value):
    return "n/a" if value is None else ("**yes**" if value else "**no**")


class Bench:
    def __init__(self, args):
        self.args = args
        self.cfg = QUICK if args.quick else FULL
        self.bins = args.bin_dir
        self.corpus = os.path.join(HERE, "corpus")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.work = os.path.join(HERE, "results", "tmp", "run-" + stamp)
        os.makedirs(self.work)
        self.rows = {}
        self.lines = []
        self.notes = []
        self.counter = 0

    def fresh(self, name, under=None):
        self.counter += 1
        path = os.path.join(under or self.work, "%03d-%s" % (self.counter, name))
        os.makedirs(path)
        return path

    def write_lines(self, name, lines):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def line(self, row, measure, ours, peer="—", peer_fig="—", ratio=None, target="—", ok=None, rss=None, cpu=None,
             note=""):
        self.lines.append({
            "row": row, "measure": measure, "ours": ours, "peer": peer, "peer_figure": peer_fig,
            "ratio": None if ratio is None else round(ratio, 3), "target": target,
            "met": None if ok is None else bool(ok),
            "daemon_peak_rss_mb": None if rss is None else round(rss, 1),
            "daemon_cpu_s": None if cpu is None else round(cpu, 3), "note": note,
        })

    # ----------------------------------------------------------------------------------------------------------
    # B1: urgent gets while a backlog drains, on the shaped origin

    def b1(self):
        cfg = self.cfg
        origin = ShapedOrigin(self.corpus, SHAPED_RATE, SHAPED_LATENCY, self.work)
        configs = ["idle", "prefetchd", "fifo"]
        samples = {c: [] for c in configs}
        rep_p99 = {c: [] for c in configs}
        censored = {c: 0 for c in configs}
        daemon = {c: [] for c in configs}
        drained = {c: [] for c in configs}
        errors = {c: [] for c in configs}
        try:
            for rep in range(cfg["b1_reps"]):
                for config in rotated(configs, rep):
                    if config == "fifo" and rep > 0:
                        continue  # the FIFO is orders of magnitude off: one shorter run says so
                    tag = "r%d-%s" % (rep, config)
                    backlog = ["%s/b1/%s/bg/%d.jpg" % (origin.base, tag, i) for i in range(cfg["b1_backlog"])]
                    gets = cfg["b1_fifo_gets"] if config == "fifo" else cfg["b1_gets"]
                    urgent = ["%s/b1/%s/u/%d.jpg" % (origin.base, tag, i * 37 + 5)
                              for i in range(cfg["b1_warm"] + gets)]
                    log("B1 rep %d: %s (%d urgent gets, one every %.1f s)" % (rep + 1, config, len(urgent),
                                                                            B1_INTERVAL))
                    if config == "fifo":
                        lat, cens, info = self.b1_fifo(origin, backlog, urgent)
                    else:
                        lat, cens, info = self.b1_daemon(origin, config, backlog, urgent)
                        daemon[config].append(info["daemon"])
                        errors[config] += info["errors"]
                    lat = lat[cfg["b1_warm"]:]
                    samples[config] += lat
                    censored[config] += sum(cens[cfg["b1_warm"]:])
                    rep_p99[config].append(percentile(lat, 99))
                    drained[config].append(info["backlog_fetched"])
        finally:
            origin.stop()

        def summary(c):
            if not samples[c]:
                return None
            return {"p50_s": percentile(samples[c], 50), "p95_s": percentile(samples[c], 95),
                    "p99_s": percentile(samples[c], 99), "n": len(samples[c]),
                    "p99_per_rep_s": spread(rep_p99[c]), "censored": censored[c],
                    "backlog_fetched_per_run": drained[c], "errors": errors[c],
                    "daemon": daemon[c]}

        result = {c: summary(c) for c in configs}
        result["setup"] = {"rate_bytes_per_s": SHAPED_RATE, "latency_s": SHAPED_LATENCY,
                           "backlog": cfg["b1_backlog"], "gets_per_run": cfg["b1_gets"],
                           "fifo_gets": cfg["b1_fifo_gets"], "percentile": "nearest rank",
                           "interval_s": B1_INTERVAL, "reps": cfg["b1_reps"]}
        self.rows["B1"] = result
        idle = result["idle"]

        def fig(s):
            text = "p50 %s / p95 %s / p99 %s" % (fmt_ms(s["p50_s"]), fmt_ms(s["p95_s"]), fmt_ms(s["p99_s"]))
            if s["censored"]:
                text = "≥ " + text + " (%d of %d unanswered within the window)" % (s["censored"], s["n"])
            return text

        def rss_cpu(c):
            runs = daemon[c]
            if not runs:
                return None, None
            return max(r["peak_rss_mb"] for r in runs), spread([r["cpu_s"] for r in runs])["median"]

        ours = result["prefetchd"]
        rss, cpu = rss_cpu("prefetchd")
        rss_i, cpu_i = rss_cpu("idle")
        self.line("B1", "urgent get latency, idle daemon (the yardstick)", fig(idle), rss=rss_i, cpu=cpu_i,
                  note="p99 per run: %s–%s" % (fmt_ms(idle["p99_per_rep_s"]["min"]),
                                               fmt_ms(idle["p99_per_rep_s"]["max"])))
        ratio = ours["p99_s"] / idle["p99_s"]
        self.line("B1", "urgent get latency while %d × 200 KB drain (p99 ratio to idle)" % cfg["b1_backlog"],
                  fig(ours), "idle daemon", fmt_ms(idle["p99_s"]) + " p99", ratio, "p99 ≤ 1.15 × idle",
                  ratio <= 1.15, rss, cpu,
                  note="p95 ratio %.2f, p50 ratio %.2f; p99 per run %s–%s (idle %s–%s); backlog files fetched "
                  "while the gets ran, per run: %s" % (
                      ours["p95_s"] / idle["p95_s"], ours["p50_s"] / idle["p50_s"],
                      fmt_ms(ours["p99_per_rep_s"]["min"]), fmt_ms(ours["p99_per_rep_s"]["max"]),
                      fmt_ms(idle["p99_per_rep_s"]["min"]), fmt_ms(idle["p99_per_rep_s"]["max"]),
                      ours["backlog_fetched_per_run"]))
        fifo = result["fifo"]
        self.line("B1", "…compared with a naive FIFO", fig(ours), "xargs -P 6 curl (backlog, then urgent URLs)",
                  fig(fifo), ours["p99_s"] / fifo["p99_s"], "—", None,
                  note="FIFO p99/idle %s %.0f; FIFO drained %s" % ("≥" if fifo["censored"] else "=",
                                                                   fifo["p99_s"] / idle["p99_s"],
                                                                   fifo["backlog_fetched_per_run"]))

    def b1_daemon(self, origin, config, backlog, urgent):
        directory = self.fresh("b1-" + config)
        d = Daemon(self.bins, directory, []).start()
        try:
            if config != "idle":
                listing = self.write_lines("b1-backlog.txt", backlog)
                r = timed(d.ctl("queue", "-"), stdin=listing)
                if r["rc"] != 0:
                    raise RuntimeError("queue failed: %s" % r["stderr"])
                time.sleep(1.0)  # the slow lane is running by now
            before = d.status()
            cpu0 = d.cpu()
            latencies = [None] * len(urgent)
            failures = []

            def ask(i, url):
                started = time.monotonic()
                try:
                    client = Client(d.socket, timeout=300)
                    reply = client.call("get", url=url)
                    client.close()
                    latencies[i] = time.monotonic() - started
                    if not reply.get("ok"):
                        failures.append(reply.get("error"))
                except Exception as error:  # counted, reported
                    latencies[i] = time.monotonic() - started
                    failures.append(repr(error))

            threads = []
            t0 = time.monotonic() + 0.05
            for i, url in enumerate(urgent):
                pause = t0 + i * B1_INTERVAL - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                thread = threading.Thread(target=ask, args=(i, url), daemon=True)
                thread.start()
                threads.append(thread)
            for thread in threads:
                thread.join(300)
            after = d.status()
            cpu = d.cpu() - cpu0
            fetched = after["fetched"] - before["fetched"] - (len(urgent) - len(failures))
        finally:
            final = d.stop()
        info = {"daemon": {"cpu_s": cpu, "peak_rss_mb": final["peak_rss_mb"]}, "errors": failures,
                "backlog_fetched": fetched if config != "idle" else 0}
        return [x if x is not None else float("inf") for x in latencies], [0] * len(urgent), info

    def b1_fifo(self, origin, backlog, urgent):
        """The naive FIFO: one queue, six curls at a time; urgent URLs join the end of the queue when asked.
        Completion times come from the origin's log (the same monotonic clock)."""
        cfg = self.cfg
        origin.reset()
        xargs = PROCS.start(["xargs", "-P", "6", "-n", "1", "curl", "-s", "-o", "/dev/null"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = time.monotonic()
        t0 = start + 1.0
        asked = [t0 + i * B1_INTERVAL for i in range(len(urgent))]

        def feed():
            try:
                xargs.stdin.write(("\n".join(backlog) + "\n").encode())
                xargs.stdin.flush()
                for when, url in zip(asked, urgent):
                    pause = when - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    xargs.stdin.write((url + "\n").encode())
                    xargs.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        end = asked[-1] + cfg["b1_grace"]
        time.sleep(max(0, end - time.monotonic()))
        stopped_at = time.monotonic()
        PROCS.stop(xargs)
        entries = origin.request_log()
        done = {e[0]: e[2] for e in entries if e[2] is not None and e[4] == 200}
        # Backlog files finished over the same span as in the daemon runs: from the first ask to the last answer.
        fetched = sum(1 for e in entries if "/bg/" in e[0] and e[2] is not None and t0 <= e[2] <= asked[-1] + 0.15)
        latencies, cens = [], []
        for when, url in zip(asked, urgent):
            path = urlsplit(url).path
            if path in done and done[path] <= stopped_at:
                latencies.append(done[path] - when)
                cens.append(0)
            else:
                latencies.append(stopped_at - when)  # a lower bound: not answered when the run stopped
                cens.append(1)
        return latencies, cens, {"backlog_fetched": fetched}

    # ----------------------------------------------------------------------------------------------------------
    # B2: bulk fetch of small images from nginx; the slow lane's drain rate

    def b2(self, nginx):
        with JournaledExt4(self.work) as disk:
            if disk.path is None:
                self.notes.append("B2 made its files in the work directory, not on a fresh ext4 with a journal (%s)"
                                  % disk.reason)
            self.b2_on(nginx, disk.path)

    def b2_on(self, nginx, disk):
        """B2 with every tool's files (and the daemon's cache) under `disk`, or in the work directory if None."""
        cfg = self.cfg
        n = cfg["b2_files"]
        urls = ["%s/small/%04d.jpg" % (nginx.base, i) for i in range(1, n + 1)]
        url_file = self.write_lines("b2-urls.txt", urls)
        curl_cfg = self.write_lines("b2-curl.cfg", ['url = "%s"' % u for u in urls])
        names = self.write_lines("b2-names.txt", ["%04d.jpg" % i for i in range(1, n + 1)])
        tools = {
            "prefetchd": None,
            "prefetchd (default width 8)": None,
            "curl --parallel-max 16": lambda d: ["curl", "--parallel", "--parallel-max", "16", "-s",
                                                 "--remote-name-all", "--output-dir", d, "-K", curl_cfg],
            "aria2c -j 16": lambda d: ["aria2c", "-j", "16", "-q", "-i", url_file, "-d", d],
            "wget2 --max-threads=16": lambda d: ["wget2", "--max-threads=16", "-q", "-i", url_file, "-P", d],
            "touch (floor)": lambda d: ["xargs", "-a", names, "touch"],
        }
        figures = {t: [] for t in tools}
        cpu = {t: [] for t in tools}
        daemon = {t: [] for t in tools}
        order = list(tools)
        for rep in range(cfg["b2_warm"] + cfg["b2_reps"]):
            warm = rep < cfg["b2_warm"]
            for tool in rotated(order, rep):
                directory = self.fresh("b2", under=disk)
                out = os.path.join(directory, "out")
                os.makedirs(out)
                if tool.startswith("prefetchd"):
                    width = "16" if tool == "prefetchd" else "8"
                    d = Daemon(self.bins, directory, ["--fast-width", width], cache=out).start()
                    try:
                        cpu0 = d.cpu()
                        r = timed(d.ctl("get", "-"), stdin=url_file)
                        dcpu = d.cpu() - cpu0
                        entries = d.status()["cache"]["entries"]
                    finally:
                        final = d.stop()
                    if r["rc"] != 0 or entries != n:
                        raise RuntimeError("B2 %s: rc %s, %d of %d cached: %s" % (tool, r["rc"], entries, n,
                                                                                 r["stderr"]))
                    if not warm:
                        daemon[tool].append({"cpu_s": dcpu, "peak_rss_mb": final["peak_rss_mb"]})
                else:
                    r = timed(tools[tool](out), cwd=out)
                    got = len(os.listdir(out))
                    if r["rc"] != 0 or got != n:
                        raise RuntimeError("B2 %s: rc %s, %d of %d files: %s" % (tool, r["rc"], got, n, r["stderr"]))
                if not warm:
                    figures[tool].append(n / r["wall"])
                    cpu[tool].append(r["cpu"])
                shutil.rmtree(directory)
            log("B2 rep %d/%d%s: %s" % (rep + 1, cfg["b2_warm"] + cfg["b2_reps"], " (warm-up)" if warm else "",
                                        ", ".join("%s %.0f/s" % (t, figures[t][-1]) for t in order if figures[t])))

        drain = {}
        for width in (1, 8):
            rates, druns = [], []
            for rep in range(cfg["b2_drain_reps"]):
                directory = self.fresh("b2-drain", under=disk)
                d = Daemon(self.bins, directory, ["--slow-width", str(width)]).start()
                try:
                    cpu0 = d.cpu()
                    started = time.monotonic()
                    r = timed(d.ctl("queue", "-"), stdin=url_file)
                    if r["rc"] != 0:
                        raise RuntimeError("B2 drain: queue failed: %s" % r["stderr"])
                    deadline = started + 300
                    while True:
                        status = d.status()
                        if status["fetched"] + status["failed"] >= n or time.monotonic() > deadline:
                            break
                        time.sleep(0.02)
                    elapsed = time.monotonic() - started
                    dcpu = d.cpu() - cpu0
                finally:
                    final = d.stop()
                if status["fetched"] != n:
                    raise RuntimeError("B2 drain width %d: %d fetched, %d failed of %d"
                                       % (width, status["fetched"], status["failed"], n))
                rates.append(n / elapsed)
                druns.append({"cpu_s": dcpu, "peak_rss_mb": final["peak_rss_mb"]})
                shutil.rmtree(directory)
            drain[width] = {"files_per_s": spread(rates), "daemon": druns}
            log("B2 slow-lane drain at width %d: %.0f files/s" % (width, spread(rates)["median"]))

        result = {t: {"files_per_s": spread(figures[t]), "cpu_s": spread(cpu[t]),
                      "daemon": daemon[t] or None} for t in order}
        result["drain"] = drain
        result["setup"] = {"files": n, "reps": cfg["b2_reps"], "warm": cfg["b2_warm"]}
        self.rows["B2"] = result
        ours = result["prefetchd"]["files_per_s"]["median"]
        peers = [t for t in order if not t.startswith("prefetchd") and not t.startswith("touch")]
        best = max(peers, key=lambda t: result[t]["files_per_s"]["median"])
        rss = max(x["peak_rss_mb"] for x in daemon["prefetchd"])
        dcpu = spread([x["cpu_s"] for x in daemon["prefetchd"]])["median"]

        def fig(t):
            s = result[t]["files_per_s"]
            return "%.0f files/s (%.0f–%.0f)" % (s["median"], s["min"], s["max"])

        for t in peers:
            ratio = ours / result[t]["files_per_s"]["median"]
            self.line("B2", "bulk get of %d small JPEGs from nginx, --fast-width 16" % n, fig("prefetchd"), t,
                      fig(t), ratio, "≥ 1.0 × best peer" if t == best else "—",
                      ratio >= 1.0 if t == best else None, rss, dcpu,
                      note="best peer" if t == best else "")
        # CPU per fetched file, from the same runs: the daemon (all its threads) against the curl process.
        ours_us = dcpu * 1e6 / n
        ctl_us = result["prefetchd"]["cpu_s"]["median"] * 1e6 / n
        curl = "curl --parallel-max 16"
        curl_us = result[curl]["cpu_s"]["median"] * 1e6 / n
        self.line("B2", "…CPU per fetched file (user + system): the daemon's threads against the curl process",
                  "%.0f µs (prefetchctl: %.0f µs more)" % (ours_us, ctl_us), curl, "%.0f µs" % curl_us,
                  ours_us / curl_us, "≤ 1.0 × curl", ours_us <= curl_us, rss, dcpu)
        self.line("B2", "…floor: creating %d empty files" % n, fig("prefetchd"), "touch", fig("touch (floor)"),
                  ours / result["touch (floor)"]["files_per_s"]["median"], "—", None)
        rss8 = max(x["peak_rss_mb"] for x in daemon["prefetchd (default width 8)"])
        cpu8 = spread([x["cpu_s"] for x in daemon["prefetchd (default width 8)"]])["median"]
        self.line("B2", "…at the default --fast-width 8", fig("prefetchd (default width 8)"), best, fig(best),
                  result["prefetchd (default width 8)"]["files_per_s"]["median"] / result[best]["files_per_s"]["median"],
                  "—", None, rss8, cpu8)
        for width in (1, 8):
            s = drain[width]["files_per_s"]
            self.line("B2", "slow-lane drain rate (queue, then wait), --slow-width %d" % width,
                      "%.0f files/s (%.0f–%.0f)" % (s["median"], s["min"], s["max"]), best, fig(best),
                      s["median"] / result[best]["files_per_s"]["median"], "—", None,
                      max(x["peak_rss_mb"] for x in drain[width]["daemon"]),
                      spread([x["cpu_s"] for x in drain[width]["daemon"]])["median"])

    # ----------------------------------------------------------------------------------------------------------
    # B3: a cache hit as a whole process

    def b3(self, nginx):
        cfg = self.cfg
        directory = self.fresh("b3")
        url = "%s/small/0001.jpg" % nginx.base
        d = Daemon(self.bins, directory).start()
        try:
            r = timed(d.ctl("get", url))
            if r["rc"] != 0:
                raise RuntimeError("B3: the first get failed: %s" % r["stderr"])
            export = os.path.join(directory, "hyperfine.json")
            cpu0 = d.cpu()
            argv = ["hyperfine", "-N", "--style", "none", "--warmup", str(cfg["b3_warm"]), "--runs",
                    str(cfg["b3_runs"]), "--export-json", export,
                    " ".join(d.ctl("get", url)), "curl -s -o /dev/null " + url]
            r = timed(argv, timeout=900)
            dcpu = d.cpu() - cpu0
            hits = d.status()["cache"]["hits"]
        finally:
            final = d.stop()
        if r["rc"] != 0:
            raise RuntimeError("B3: hyperfine failed: %s" % r["stderr"])
        with open(export) as f:
            runs = json.load(f)["results"]
        ours, curl = runs[0], runs[1]
        result = {
            name: {"median_s": x["median"], "min_s": x["min"], "max_s": x["max"], "mean_s": x["mean"],
                   "user_s": x["user"], "system_s": x["system"], "runs": len(x["times"])}
            for name, x in (("prefetchctl get", ours), ("curl", curl))
        }
        result["daemon"] = {"cpu_s": dcpu, "cpu_per_get_ms": dcpu / (cfg["b3_warm"] + cfg["b3_runs"]) * 1000,
                            "peak_rss_mb": final["peak_rss_mb"], "hits": hits}
        self.rows["B3"] = result

        def fig(x):
            return "%.2f ms (%.2f–%.2f)" % (x["median"] * 1000, x["min"] * 1000, x["max"] * 1000)

        ratio = ours["median"] / curl["median"]
        self.line("B3", "cache-hit `prefetchctl get URL`, whole process (hyperfine, %d runs)" % cfg["b3_runs"],
                  fig(ours), "curl -s -o /dev/null (local nginx)", fig(curl), ratio,
                  "median ≤ 3 ms and ≤ 0.5 × curl", ours["median"] <= 0.003 and ratio <= 0.5,
                  final["peak_rss_mb"], dcpu,
                  note="daemon CPU %.3f ms per get" % result["daemon"]["cpu_per_get_ms"])

    # ----------------------------------------------------------------------------------------------------------
    # B4: a million URLs queued; restart with them

    def b4(self):
        cfg = self.cfg
        n = cfg["b4_urls"]
        origin = ShapedOrigin(self.corpus, 0, 0, self.work)
        directory = self.fresh("b4")
        try:
            url_file = os.path.join(directory, "urls.txt")
            with open(url_file, "w") as f:
                base = origin.base
                for start in range(0, n, 100_000):
                    f.write("".join("%s/small/b4/%07d.jpg?delay=600\n" % (base, i)
                                    for i in range(start, min(n, start + 100_000))))
            empty = Daemon(self.bins, os.path.join(directory, "empty"))
            empty_ready = empty.start(wait=False).wait_ready()
            empty.stop()

            d = Daemon(self.bins, directory, ["--low-speed-time", "3600"]).start()
            cpu0 = d.cpu()
            log("B4: queueing %d URLs" % n)
            r = timed(d.ctl("queue", "-"), stdin=url_file, timeout=1200)
            if r["rc"] != 0:
                raise RuntimeError("B4: queue failed: %s" % r["stderr"])
            status = d.status()
            queue_cpu = d.cpu() - cpu0
            rate = n / r["wall"]
            index_after_queue = index_sizes(d.cache)
            final = d.stop()
            index_after_stop = index_sizes(d.cache)
            log("B4: %.0f URLs/s, daemon peak RSS %.1f MB; restarting %d times" % (rate, final["peak_rss_mb"],
                                                                                   cfg["b4_restarts"]))
            restarts = []
            for _ in range(cfg["b4_restarts"]):
                d = Daemon(self.bins, directory, ["--low-speed-time", "3600"])
                marks = d.start(wait=False).wait_ready()
                after = d.status()
                marks["backlog"] = after["backlog"]
                marks["slow_waiting"] = after["slow"]["waiting"]
                marks["startup_cpu_s"] = d.cpu()
                stopped = d.stop()
                marks["peak_rss_mb"] = stopped["peak_rss_mb"]
                marks["shutdown_s"] = stopped["shutdown_s"]
                restarts.append(marks)
        finally:
            origin.stop()
        queued = status["backlog"] + status["slow"]["waiting"] + status["slow"]["running"] + status["delayed"]
        result = {
            "urls": n, "queue_wall_s": r["wall"], "urls_per_s": rate, "prefetchctl_cpu_s": r["cpu"],
            "daemon_queue_cpu_s": queue_cpu, "daemon_peak_rss_mb": final["peak_rss_mb"],
            "held_after_queue": queued, "prefetchctl_summary": r["stderr"].strip()[-200:],
            "restart": {k: spread([m[k] for m in restarts]) for k in ("greeting", "ping", "status", "peak_rss_mb",
                                                                      "startup_cpu_s", "shutdown_s")},
            "restart_runs": restarts, "empty_start": empty_ready,
            "index_bytes": {"after_queue": index_after_queue, "after_stop": index_after_stop,
                            "after_restarts": index_sizes(os.path.join(directory, "cache"))},
        }
        self.rows["B4"] = result
        self.line("B4", "`prefetchctl queue -` of %s URLs (origin answers after 600 s)" % format(n, ","),
                  "%.0f URLs/s (%.1f s)" % (rate, r["wall"]), target="≥ 100,000 URLs/s", ok=rate >= 100_000,
                  rss=final["peak_rss_mb"], cpu=queue_cpu,
                  note="%s held after the run (backlog + in memory); index %.0f MB + WAL %.0f MB" % (
                      format(queued, ","), index_after_queue.get("index.sqlite", 0) / 1e6,
                      index_after_queue.get("index.sqlite-wal", 0) / 1e6))
        self.line("B4", "…CPU per queued URL (user + system)",
                  "daemon %.1f µs, prefetchctl %.1f µs" % (queue_cpu * 1e6 / n, r["cpu"] * 1e6 / n),
                  rss=final["peak_rss_mb"], cpu=queue_cpu)
        self.line("B4", "…daemon peak RSS with them queued", "%.1f MB" % final["peak_rss_mb"],
                  target="≤ 100 MB", ok=final["peak_rss_mb"] <= 100, rss=final["peak_rss_mb"], cpu=queue_cpu)
        rs = result["restart"]
        self.line("B4", "…restart-to-ready with them queued (process start → `status` answers)",
                  "%s (%s–%s); ping %s" % (fmt_ms(rs["status"]["median"]), fmt_ms(rs["status"]["min"]),
                                           fmt_ms(rs["status"]["max"]), fmt_ms(rs["ping"]["median"])),
                  "same daemon, empty cache", fmt_ms(empty_ready["status"]), rs["status"]["median"] / empty_ready["status"],
                  "≤ 1 s", rs["status"]["median"] <= 1.0, rs["peak_rss_mb"]["max"], rs["startup_cpu_s"]["median"],
                  note="shutdown took %s" % fmt_ms(rs["shutdown_s"]["median"]))

    # ----------------------------------------------------------------------------------------------------------
    # B5: many clients, hits and misses

    def b5(self):
        cfg = self.cfg
        origin = ShapedOrigin(self.corpus, 0, SHAPED_LATENCY, self.work)
        directory = self.fresh("b5")
        n = cfg["b5_urls"]
        urls = ["%s/small/b5/%d.jpg" % (origin.base, i) for i in range(n)]
        url_file = self.write_lines("b5-urls.txt", urls)
        hits_file = self.write_lines("b5-hits.txt", urls[: n // 2])
        d = Daemon(self.bins, directory).start()
        try:
            r = timed(d.ctl("get", "-"), stdin=hits_file)
            if r["rc"] != 0:
                raise RuntimeError("B5: pre-caching failed: %s" % r["stderr"])
            time.sleep(1.0)
            origin.reset()
            baseline = d.fds()
            cpu0 = d.cpu()
            out = os.path.join(directory, "clients.json")
            log("B5: %d clients × %d gets over %d URLs (half cached)" % (cfg["b5_clients"], cfg["b5_gets"], n))
            r = timed([sys.executable, os.path.join(HERE, "b5_clients.py"), "--socket", d.socket, "--urls", url_file,
                       "--clients", str(cfg["b5_clients"]), "--gets", str(cfg["b5_gets"]), "--cached", str(n // 2)],
                      stdout=out, timeout=600)
            dcpu = d.cpu() - cpu0
            if r["rc"] != 0:
                raise RuntimeError("B5: the clients failed: %s" % r["stderr"])
            with open(out) as f:
                clients = json.load(f)
            during = d.fds()
            waited = 0.0
            while d.fds()["total"] > baseline["total"] and waited < 5:
                time.sleep(0.05)
                waited += 0.05
            after = d.fds()
            stats = origin.stats()
            status = d.status()
        finally:
            final = d.stop()
            origin.stop()
        misses = sorted(i for i in clients.pop("asked") if i >= n // 2)
        result = {
            "clients": clients, "origin": stats, "expected_origin_requests": len(misses),
            "fds": {"baseline": baseline, "after_clients_exit": during, "after": after, "settled_s": waited},
            "daemon": {"cpu_s": dcpu, "peak_rss_mb": final["peak_rss_mb"], "cache": status["cache"]},
        }
        self.rows["B5"] = result
        errors = sum(clients["errors"].values())
        lat = clients["latency_ms"]
        ok = (stats["requests"] == len(misses) and errors == 0 and clients["answered"] == cfg["b5_clients"] *
              cfg["b5_gets"] and after["total"] <= baseline["total"])
        self.line("B5", "%d clients × %d gets over %d URLs (half cached)" % (cfg["b5_clients"], cfg["b5_gets"], n),
                  "p50 %.1f / p99 %.1f / max %.1f ms; %.0f gets/s" % (lat["p50"], lat["p99"], lat["max"],
                                                                      clients["gets_per_s"]),
                  target="origin requests = unique URLs, 0 errors, fds back to baseline", ok=ok,
                  rss=final["peak_rss_mb"], cpu=dcpu,
                  note="origin requests %d for %d unique misses; errors %d %s; fds %d → %d (after %.1f s); "
                  "p99 for pre-cached URLs %.1f ms, for the others %.1f ms (they wait for the fast lane, width 8, "
                  "and the origin's 30 ms)"
                  % (stats["requests"], len(misses), errors, clients["errors"] or "", baseline["total"],
                     after["total"], waited, clients["latency_ms_by_url"]["cached"]["p99"],
                     clients["latency_ms_by_url"]["uncached"]["p99"]))

    # ----------------------------------------------------------------------------------------------------------
    # B6: a cold 256×256 variant of a 4000×3000 JPEG

    def b6(self, nginx):
        cfg = self.cfg
        directory = self.fresh("b6")
        out = os.path.join(directory, "out")
        os.makedirs(out)
        count = cfg["b6_warm"] + cfg["b6_runs"]
        files = sorted(os.listdir(os.path.join(self.corpus, "large")))[:count]
        urls = ["%s/large/%s" % (nginx.base, f) for f in files]
        convert = convert_binary()
        tools = {
            "prefetchd": None,
            "gdk-pixbuf-thumbnailer -s 256": lambda f, o: ["gdk-pixbuf-thumbnailer", "-s", "256", f, o + ".png"],
            "vipsthumbnail -s 256": lambda f, o: ["vipsthumbnail", f, "-s", "256", "-o", o + ".jpg"],
            "convert -thumbnail 256x256": lambda f, o: [convert, f, "-thumbnail", "256x256", o + ".jpg"],
        }
        order = list(tools)
        walls = {t: [] for t in order}
        cpus = {t: [] for t in order}
        dcpus = []
        d = Daemon(self.bins, directory).start()
        try:
            listing = self.write_lines("b6-urls.txt", urls)
            r = timed(d.ctl("get", "-"), stdin=listing)
            if r["rc"] != 0:
                raise RuntimeError("B6: caching the originals failed: %s" % r["stderr"])
            for i, (f, url) in enumerate(zip(files, urls)):
                path = os.path.join(self.corpus, "large", f)
                for tool in rotated(order, i):
                    o = os.path.join(out, "%s-%d" % (tool.split()[0], i))
                    if tool == "prefetchd":
                        cpu0 = d.cpu()
                        r = timed(d.ctl("get", "--size", "256x256", url))
                        dcpu = d.cpu() - cpu0
                    else:
                        r = timed(tools[tool](path, o))
                    if r["rc"] != 0:
                        raise RuntimeError("B6 %s failed: %s" % (tool, r["stderr"]))
                    if i >= cfg["b6_warm"]:
                        walls[tool].append(r["wall"])
                        cpus[tool].append(r["cpu"] + (dcpu if tool == "prefetchd" else 0))
                        if tool == "prefetchd":
                            dcpus.append(dcpu)
        finally:
            final = d.stop()
        result = {t: {"wall_s": spread(walls[t]), "cpu_s": spread(cpus[t])} for t in order}
        result["daemon"] = {"cpu_s_per_variant": spread(dcpus), "peak_rss_mb": final["peak_rss_mb"]}
        self.rows["B6"] = result
        ours = result["prefetchd"]["wall_s"]

        def fig(t):
            s = result[t]["wall_s"]
            return "%.1f ms (%.1f–%.1f)" % (s["median"] * 1000, s["min"] * 1000, s["max"] * 1000)

        targets = {"gdk-pixbuf-thumbnailer -s 256": 1.0, "vipsthumbnail -s 256": 0.5}
        for t in order[1:]:
            ratio = ours["median"] / result[t]["wall_s"]["median"]
            target = targets.get(t)
            self.line("B6", "`get --size 256x256` of a 4000×3000 JPEG, cold variant, whole process",
                      fig("prefetchd"), t, fig(t), ratio, "≤ %.1f × peer" % target if target else "—",
                      ratio <= target if target else None, final["peak_rss_mb"],
                      spread(dcpus)["median"],
                      note="CPU s (ours incl. daemon) %.3f vs %.3f" % (result["prefetchd"]["cpu_s"]["median"],
                                                                      result[t]["cpu_s"]["median"]))

    # ----------------------------------------------------------------------------------------------------------

    def run(self):
        only = set(self.args.only.split(",")) if self.args.only else None
        wanted = lambda row: only is None or row in only  # noqa: E731
        corpus.generate(self.corpus, log=log)
        nginx = None
        if any(wanted(r) for r in ("B2", "B3", "B6")):
            nginx = Nginx(self.corpus, os.path.join(self.work, "nginx"))
        try:
            for row, job in (("B3", lambda: self.b3(nginx)), ("B6", lambda: self.b6(nginx)),
                             ("B2", lambda: self.b2(nginx)), ("B5", self.b5), ("B4", self.b4), ("B1", self.b1)):
                if not wanted(row):
                    continue
                started = time.monotonic()
                log("%s: start" % row)
                try:
                    job()
                except Exception as error:
                    if isinstance(error, KeyboardInterrupt):
                        raise
                    log("%s FAILED: %s" % (row, error))
                    self.rows[row] = {"error": str(error)}
                    self.line(row, "failed to run", "error: %s" % str(error)[:200], ok=False)
                    self.notes.append("%s failed: %s" % (row, error))
                self.rows.setdefault(row, {})["elapsed_s"] = time.monotonic() - started
                log("%s: done in %.0f s" % (row, time.monotonic() - started))
        finally:
            if nginx:
                nginx.stop()


def index_sizes(cache):
    """Sizes of the SQLite index and its WAL."""
    sizes = {}
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        try:
            sizes[name] = os.path.getsize(os.path.join(cache, name))
        except OSError:
            pass
    return sizes


def git(*args):
    return subprocess.run(["git", "-C", REPO] + list(args), capture_output=True, text=True).stdout.strip()


def tool_versions():
    def first_line(argv):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return None

    return {
        "curl": first_line(["curl", "--version"]), "aria2c": first_line(["aria2c", "--version"]),
        "wget2": first_line(["wget2", "--version"]), "nginx": first_line(["nginx", "-v"]),
        "hyperfine": first_line(["hyperfine", "--version"]), "vips": first_line(["vips", "--version"]),
        "imagemagick": first_line([convert_binary(), "-version"]), "python": platform.python_version(),
        "gdk-pixbuf": subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "libgdk-pixbuf-2.0-0"],
                                     capture_output=True, text=True).stdout,
    }


def table(lines):
    out = ["| row | what | prefetchd | peer | peer's figure | ratio | target | met | daemon peak RSS | daemon CPU |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for x in lines:
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            x["row"], x["measure"] + (" — " + x["note"] if x["note"] else ""), x["ours"], x["peer"],
            x["peer_figure"], "—" if x["ratio"] is None else "%.2f" % x["ratio"], x["target"],
            "—" if x["met"] is None and x["target"] == "—" else met(x["met"]),
            "—" if x["daemon_peak_rss_mb"] is None else "%.1f MB" % x["daemon_peak_rss_mb"],
            "—" if x["daemon_cpu_s"] is None else "%.2f s" % x["daemon_cpu_s"]))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description="prefetchd benchmarks (issue 8)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats (under 3 minutes)")
    ap.add_argument("--only", help="comma-separated rows, e.g. B1,B3")
    ap.add_argument("--bin-dir", default=os.environ.get("BENCH_BIN_DIR", os.path.join(REPO, ".build", "release")))
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory under bench/results/tmp/")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite the table in bench/README.md")
    args = ap.parse_args()
    for binary in ("prefetchd", "prefetchctl"):
        if not os.access(os.path.join(args.bin_dir, binary), os.X_OK):
            sys.exit("bench: %s/%s is missing; run `make release` (or give --bin-dir)" % (args.bin_dir, binary))
    install_signal_handlers()
    started = time.monotonic()
    load_before = os.getloadavg()
    bench = Bench(args)
    failed = False
    try:
        bench.run()
    except KeyboardInterrupt:
        log("interrupted: stopping everything")
        failed = True
    finally:
        PROCS.stop_all()
    elapsed = time.monotonic() - started
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    date = datetime.datetime.now(datetime.timezone.utc)
    result = {
        "date": date.isoformat(timespec="seconds"), "commit": commit, "describe": git("describe", "--always",
                                                                                     "--dirty"),
        "mode": "quick" if args.quick else "full", "only": args.only, "elapsed_s": elapsed,
        "machine": {"cores": os.cpu_count(), "kernel": platform.release(), "load_before": load_before,
                    "load_after": os.getloadavg()},
        "tools": tool_versions(), "config": bench.cfg, "rows": bench.rows, "table": bench.lines,
        "notes": bench.notes,
    }
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    name = "%s-%s%s.json" % (date.strftime("%Y%m%d"), commit, "-quick" if args.quick else "")
    path = os.path.join(HERE, "results", name)
    with open(path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=False)
        f.write("\n")
    md = table(bench.lines)
    header = ("Run of %s UTC, commit %s (`%s`), %s mode, %.0f s; %d cores, load %.2f before, %.2f after. "
              "Raw figures: `bench/results/%s`." % (date.strftime("%Y-%m-%d %H:%M"), commit, result["describe"],
                                                    result["mode"], elapsed, os.cpu_count(), load_before[0],
                                                    result["machine"]["load_after"][0], name))
    print("\n" + header + "\n\n" + md + "\n")
    if not args.quick and not args.only and not args.no_readme:
        readme = os.path.join(HERE, "README.md")
        with open(readme) as f:
            text = f.read()
        begin, end = "<!-- results:begin -->", "<!-- results:end -->"
        if begin in text and end in text:
            text = text.split(begin)[0] + begin + "\n" + header + "\n\n" + md + "\n" + end + text.split(end, 1)[1]
            with open(readme, "w") as f:
                f.write(text)
            log("table written to bench/README.md")
    log("results: %s (%.0f s)" % (path, elapsed))
    if not args.keep and not failed:
        shutil.rmtree(bench.work, ignore_errors=True)
    else:
        log("scratch kept: %s" % bench.work)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
