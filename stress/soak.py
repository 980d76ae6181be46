#!/usr/bin/env python3
"""prefetchd soak (issue 15): every feature in use at once for a long time, and nothing may grow.

    python3 stress/soak.py --bin-dir .build/release [--minutes 20] [--csv soak.csv]

One daemon (`max_cache_bytes` 50M) and one origin in a temporary directory, and clients doing all at once: urgent
`get`s (new URLs and cached ones), a backlog of queued URLs topped up as it drains, variants (`get` with a size), a
`view` scrolled up and down, a `watch` connection reading snapshots, `metrics` and `status`, `evict` of some URLs;
the cache limit evicts all the time. Every 5 s one CSV row: RSS, fds, threads, temporary files, WAL size, `get`
latency (p50/p99 of that interval), fetches so far. After the warm-up (the first quarter, at least 1 minute when
the run is long enough) each column must show no growth: a least-squares slope that is both significant (beyond 3
standard errors) and large (over the run, more than the column's tolerance) fails the run (exit 1).
"""
import argparse
import csv
import math
import os
import random
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lib import Daemon, Failed, Origin, Processes, fd_count, log, percentile, proc_status, scratch  # noqa: E402

INTERVAL = 5.0
# Growth over the post-warm-up window that counts as real, per column: (relative to the column's mean, absolute).
TOLERANCE = {
    "rss_kib": (0.10, 2048),
    "fds": (0.10, 5),
    "threads": (0.0, 1),
    "tmp_files": (0.0, 10),
    "wal_kib": (0.25, 4096),
    "get_p99_ms": (0.50, 20),
}


class Load:
    """The clients: each a thread with its own connection; errors are counted, not fatal."""

    def __init__(self, daemon, origin, seed=15):
        self.daemon = daemon
        self.origin = origin
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.latencies = []
        self.errors = {}
        self.counts = {}
        self.rng = random.Random(seed)
        self.threads = [threading.Thread(target=self.guard, args=(work,), daemon=True) for work in
                        (self.urgent, self.backlog, self.variants, self.view, self.watch, self.observe, self.evict)]

    def start(self):
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def note(self, what, ok=True):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1
            if not ok:
                self.errors[what] = self.errors.get(what, 0) + 1

    def take_latencies(self):
        with self.lock:
            taken, self.latencies = self.latencies, []
        return taken

    def guard(self, work):
        """Runs one client until the end, reconnecting after an error."""
        while not self.stopping.is_set():
            try:
                client = self.daemon.client(timeout=120)
            except OSError:
                self.note(work.__name__ + " connect", False)
                self.stopping.wait(1)
                continue
            try:
                work(client, random.Random(self.rng.random()))
            except (OSError, ValueError, Failed) as error:
                log(f"soak: {work.__name__}: {type(error).__name__}: {error}")
                self.note(work.__name__, False)
                self.stopping.wait(1)
            finally:
                client.close()

    def url(self, kind, n, size):
        return self.origin.url(f"/soak/{kind}/{n}.jpg?size={size}")

    def urgent(self, client, rng):
        """A person looking at images: new URLs, and ones seen a moment ago (cache hits), 20 a second."""
        n = 0
        while not self.stopping.is_set():
            n += 1
            target = self.url("urgent", n if rng.random() < 0.6 else max(1, n - rng.randrange(50)),
                              rng.choice((8_000, 40_000, 150_000)))
            began = time.monotonic()
            reply = client.call({"op": "get", "url": target}, timeout=120)
            with self.lock:
                self.latencies.append(time.monotonic() - began)
            self.note("get", reply.get("ok") is True)
            self.stopping.wait(0.05)

    def backlog(self, client, rng):
        """4,000 URLs queued at once, then every 30 s 500 more when fewer than 1,000 wait."""
        n = 0
        batch = 4_000
        while not self.stopping.is_set():
            status = client.call({"op": "status"})["result"]
            if status["backlog"] + status["slow"]["waiting"] < 1_000:
                urls = [self.url("backlog", n + i, rng.choice((20_000, 60_000))) for i in range(batch)]
                n += batch
                for i in range(0, len(urls), 500):
                    self.note("queue", client.call({"op": "queue", "urls": urls[i:i + 500]}).get("ok") is True)
                batch = 500
            self.stopping.wait(30)

    def variants(self, client, rng):
        """Thumbnails of 400 URLs in two sizes, 5 a second: made once, then mostly served as made before."""
        while not self.stopping.is_set():
            n = rng.randrange(1, 400)
            reply = client.call({"op": "get", "url": self.url("variant", n, 30_000),
                                 "size": rng.choice(("64x64", "128x96"))}, timeout=120)
            self.note("variant", reply.get("ok") is True)
            self.stopping.wait(0.2)

    def view(self, client, rng):
        """A 2,000-row list scrolled down and back up, 5 rows a step, 10 steps a second; every minute the list is
        replaced by another of five (so rows come back cached, or evicted since)."""
        generation = 0
        while not self.stopping.is_set():
            generation += 1
            urls = [self.url(f"view{generation % 5}", i, 12_000) for i in range(2_000)]
            for i in range(0, len(urls), 500):
                request = {"op": "view", "urls": urls[i:i + 500]}
                request.update({"first": 0, "last": 19} if i == 0 else {"append": True})
                client.call(request)
            began = time.monotonic()
            first, step = 0, 5
            while not self.stopping.is_set() and time.monotonic() - began < 60:
                first += step
                if first <= 0 or first >= 1_980:
                    step = -step
                    first = max(0, min(1_980, first))
                self.note("scroll", client.call({"op": "view", "first": first, "last": first + 19}).get("ok") is True)
                self.stopping.wait(0.1)

    def watch(self, client, rng):
        """A `watch` connection reading every snapshot."""
        client.send({"op": "watch"})
        client.sock.settimeout(5)
        while not self.stopping.is_set():
            try:
                client.readline()
                self.note("watch event")
            except TimeoutError:
                continue

    def observe(self, client, rng):
        """`metrics` and `status` every 2 s, as a monitoring agent would."""
        while not self.stopping.is_set():
            self.note("metrics", client.call({"op": "metrics"}).get("ok") is True)
            self.note("status", client.call({"op": "status"}).get("ok") is True)
            self.stopping.wait(2)

    def evict(self, client, rng):
        """A few URLs evicted by hand every 10 s, and everything not in use every 5 minutes."""
        rounds = 0
        while not self.stopping.wait(10):
            rounds += 1
            request = {"op": "evict", "all": True} if rounds % 30 == 0 else \
                {"op": "evict", "urls": [self.url("urgent", rng.randrange(1, 2_000), 8_000) for _ in range(20)]}
            self.note("evict", client.call(request, timeout=120).get("ok") is True)


def slope(xs, ys):
    """Least-squares slope and its standard error."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 3 or sxx == 0:
        return 0.0, math.inf
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    residual = sum((y - my - b * (x - mx)) ** 2 for x, y in zip(xs, ys))
    return b, math.sqrt(residual / (n - 2) / sxx)


def judge(rows, warmup):
    """Per column: (column, growth over the window, tolerance, significant, fails)."""
    after = [r for r in rows if r["seconds"] >= warmup]
    verdicts = []
    if len(after) < 4:
        return verdicts
    xs = [r["seconds"] for r in after]
    window = xs[-1] - xs[0]
    for column, (relative, absolute) in TOLERANCE.items():
        ys = [float(r[column]) for r in after]
        b, error = slope(xs, ys)
        growth = b * window
        tolerance = max(absolute, relative * (sum(ys) / len(ys)))
        significant = b > 3 * error
        verdicts.append((column, growth, tolerance, significant, significant and growth > tolerance))
    return verdicts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", default=".build/release")
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--csv", default="soak.csv", help="where the samples go (default: ./soak.csv)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()
    binary = os.path.abspath(os.path.join(args.bin_dir, "prefetchd"))
    if not os.access(binary, os.X_OK):
        sys.exit(f"no prefetchd at {binary}")
    if not 0.5 <= args.minutes <= 24 * 60:
        sys.exit("--minutes: 0.5 to 1440")
    duration = args.minutes * 60
    warmup = min(max(duration / 4, min(60.0, duration / 2)), duration / 2)
    processes = Processes()
    work = scratch("soak")
    try:
        origin = Origin(processes)
        daemon = Daemon(processes, binary, work, "--max-cache-bytes", "50M").start()
        load = Load(daemon, origin)
        wal = os.path.join(daemon.cache, "index.sqlite-wal")
        probe = daemon.client(timeout=60)
        rows = []
        columns = ["seconds", "rss_kib", "fds", "threads", "tmp_files", "wal_kib", "get_p50_ms", "get_p99_ms", "gets",
                   "fetched", "cache_mib", "evictions"]
        log(f"soak: {args.minutes:g} min, warm-up {warmup:.0f} s, samples every {INTERVAL:.0f} s to {args.csv}")
        began = time.monotonic()
        load.start()
        with open(args.csv, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            next_sample = began + INTERVAL
            while time.monotonic() - began < duration:
                time.sleep(max(0.0, next_sample - time.monotonic()))
                next_sample += INTERVAL
                if not daemon.alive():
                    raise Failed(f"the daemon exited with {daemon.process.returncode}; see {daemon.log_path}")
                status = probe.call({"op": "status"})["result"]
                metrics = probe.call({"op": "metrics"})["result"]["text"]
                evictions = next((line.split()[-1] for line in metrics.splitlines()
                                  if line.startswith("prefetchd_evictions_total")), "0")
                latencies = load.take_latencies()
                tmp = os.path.join(daemon.cache, "tmp")
                row = {
                    "seconds": round(time.monotonic() - began, 1),
                    "rss_kib": proc_status(daemon.pid, "VmRSS"),
                    "fds": fd_count(daemon.pid),
                    "threads": proc_status(daemon.pid, "Threads"),
                    "tmp_files": len(os.listdir(tmp)) if os.path.isdir(tmp) else 0,
                    "wal_kib": os.path.getsize(wal) // 1024 if os.path.exists(wal) else 0,
                    "get_p50_ms": round(percentile(latencies, 0.5, empty=0.0) * 1000, 1),
                    "get_p99_ms": round(percentile(latencies, 0.99, empty=0.0) * 1000, 1),
                    "gets": len(latencies),
                    "fetched": status["fetched"],
                    "cache_mib": round(status["cache"]["bytes"] / 1048576, 1),
                    "evictions": evictions,
                }
                rows.append(row)
                writer.writerow(row)
                out.flush()
                log("soak: " + ", ".join(f"{k} {v}" for k, v in row.items()))
        load.stop()
        probe.close()
        alive = daemon.ping_ok()
        daemon.stop()
        index_ok, problems = daemon.check_index()
    finally:
        processes.stop_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    verdicts = judge(rows, warmup)
    failed = [v for v in verdicts if v[4]]
    print(f"SOAK ({args.minutes:g} min, warm-up {warmup:.0f} s, {len(rows)} samples in {args.csv})")
    first, last = rows[0], rows[-1]
    print(f"  fetched {last['fetched']}, evictions {last['evictions']}, RSS {first['rss_kib'] / 1024:.1f} -> "
          f"{last['rss_kib'] / 1024:.1f} MiB, peak VmHWM {daemon.peak / 1024:.1f} MiB")
    print(f"  requests: {dict(sorted(load.counts.items()))}")
    print(f"  errors:   {dict(sorted(load.errors.items())) or 'none'}")
    for column, growth, tolerance, significant, fails in verdicts:
        print(f"  {column:<11} growth after warm-up {growth:+10.1f} (tolerance {tolerance:.1f}, "
              f"{'significant' if significant else 'noise'}) {'FAIL' if fails else 'ok'}")
    print(f"  daemon alive at the end: {alive}; index: {problems}")
    gets = load.counts.get("get", 0)
    quiet = gets > 0 and load.errors.get("get", 0) <= gets // 100
    if not quiet:
        print("  FAIL: more than 1 % of the urgent gets failed")
    ok = verdicts and not failed and alive and index_ok and quiet
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
