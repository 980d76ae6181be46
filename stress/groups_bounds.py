"""Group 6, bounds (issue 15): budgets that hold whatever clients do. Each scenario has a daemon of its own.

1. A `view` whose range changes as fast as a client can send: running transfers per lane sampled every 100 ms from
   `status`, another client's ping latency, peak RSS and fds, RSS back near its start after the clients leave, and
   SIGTERM leaving no temporary file but the resumable partials the index records.
2. 200 `watch` clients that never read, while transfers run: RSS bounded and not rising, others served.
3. 50 views of 100,000 rows (quick: 5): peak RSS, then everything given back when they close.
4. A descriptor limit of 64 with 200 clients each asking for a URL: no `host_paused`, no failure blamed on the
   origin, every client served or refused with a logged local reason.
5. A full tmpfs with a queued backlog (root): every acknowledged URL is cached once space is freed.
6. 40 clients pipelining `list`s (120 KB replies) and never reading: peak RSS within reach of `output_budget`.
7. One client pipelining `queue`s of 2,400 new URLs each: another client's cache hits still come in a short turn.
8. Clients that write megabytes of `queue` lines and leave without reading: what they left is carried out in turns.
"""
import hashlib
import json
import os
import re
import socket
import sqlite3
import subprocess
import threading
import time

from lib import Client, Daemon, Origin, Failed, fd_count, outcome, percentile, proc_status, scratch, wait_until

GROUP = "bounds"

# Budgets, documented in stress/README.md: what a row must stay under.
PEAK_RSS_MIB = 64
PEAK_FDS = 128
PING_P99_MS = 100
QUEUE_FLOOD_HIT_P50_MS = 50
ABANDONED_HIT_MAX_MS = 1000
CHURN_HIT_MAX_MS = 500
RSS_RETURN = 0.20


def rss_kib(pid):
    """VmRSS (resident now) of a live process, in KiB; 0 when it is gone."""
    return proc_status(pid, "VmRSS")


class Poller(threading.Thread):
    """A client of its own that calls `poll()` every `interval` seconds until stopped; an exception ends it and is
    kept in `error` (reported as a row)."""

    interval = 0.1

    def __init__(self, daemon):
        super().__init__(daemon=True)
        self.daemon_process = daemon
        self.client = daemon.client(timeout=30)
        self.stopping = threading.Event()
        self.error = None

    def run(self):
        try:
            while not self.stopping.is_set():
                self.poll()
                self.stopping.wait(self.interval)
        except Exception as error:  # noqa: BLE001 (reported as a row)
            self.error = error
        finally:
            self.client.close()

    def stop(self):
        self.stopping.set()
        self.join(60)


class Sampler(Poller):
    """Every 100 ms: `status` (running transfers per lane), the fd count and the resident size."""

    def __init__(self, daemon):
        super().__init__(daemon)
        self.samples = []  # (fast running, fast width, slow running in the lane's places, slow width, lingering)
        self.peak_fds = 0
        self.peak_rss = 0

    def poll(self):
        status = self.client.call({"op": "status"}, timeout=30)["result"]
        # Lingering transfers (rows scrolled away before their responses began) are counted in slow.running but take
        # no place in the lane; at most fast_width of them.
        lingering = status["slow"].get("lingering", 0)
        self.samples.append((status["fast"]["running"], status["fast"]["width"],
                             status["slow"]["running"] - lingering, status["slow"]["width"], lingering))
        self.peak_fds = max(self.peak_fds, fd_count(self.daemon_process.pid))
        self.peak_rss = max(self.peak_rss, rss_kib(self.daemon_process.pid))

    def over_width(self):
        """Samples where a lane ran more than its width."""
        return [s for s in self.samples if s[0] > s[1] or s[2] > s[3] or s[4] > s[1]]


class Pinger(Poller):
    """Another client: a ping, its latency, 10 ms of quiet, again."""

    interval = 0.01

    def __init__(self, daemon):
        super().__init__(daemon)
        self.latencies = []

    def poll(self):
        began = time.monotonic()
        self.client.call({"op": "ping"}, timeout=30)
        self.latencies.append(time.monotonic() - began)


def send_list(sock, urls, first, last):
    """A view's list in parts under the 64 KiB line limit; the first part sets the range. Returns the ids sent."""
    parts = [urls[i:i + 500] for i in range(0, len(urls), 500)]
    for n, part in enumerate(parts):
        request = {"id": n + 1, "op": "view", "urls": part}
        if n == 0:
            request.update(first=first, last=last)
        else:
            request["append"] = True
        sock.sendall(json.dumps(request).encode() + b"\n")
    return len(parts)


def flood_view(daemon, urls, seconds, visible=10):
    """One connection: the list, then range changes as fast as it can send them for `seconds`, its replies and
    events read (and dropped) by a thread of its own so the daemon never holds it back for not reading. Returns
    how many range changes were sent."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(daemon.socket)

    def drain():
        while True:
            try:
                if not sock.recv(1 << 20):
                    return
            except OSError:
                return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    next_id = send_list(sock, urls, 0, visible - 1)
    changes = 0
    span = len(urls) - visible
    deadline = time.monotonic() + seconds
    batch = []
    while time.monotonic() < deadline:
        # Scrolls forward, three rows a step, and wraps: every change shows rows the last one did not.
        first = (changes * 3) % span
        next_id += 1
        changes += 1
        batch.append(b'{"id":%d,"op":"view","first":%d,"last":%d}\n' % (next_id, first, first + visible - 1))
        if len(batch) == 20:
            sock.sendall(b"".join(batch))
            batch = []
    if batch:
        sock.sendall(b"".join(batch))
    sock.shutdown(socket.SHUT_RDWR)
    reader.join(5)
    sock.close()
    return changes


def temporary_files(cache):
    directory = os.path.join(cache, "tmp")
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def resumable_partials(cache):
    """Names of the partial bodies the index records as resumable: a validator, and the URL in the durable queue."""
    db = sqlite3.connect(f"file:{os.path.join(cache, 'index.sqlite')}?mode=ro", uri=True)
    try:
        keys = [row[0] for row in db.execute("SELECT key FROM partials WHERE key IN (SELECT key FROM queue)")]
    finally:
        db.close()
    return sorted(hashlib.sha256(key.encode()).hexdigest() for key in keys)


def cancel_all(client, urls):
    for i in range(0, len(urls), 500):
        client.call({"op": "cancel", "urls": urls[i:i + 500]}, timeout=120)


def run(args, table, processes, scratch_dirs):
    work = scratch(GROUP)
    scratch_dirs.append(work)
    origin = Origin(processes)
    scenarios = [range_changes, silent_watchers, big_views, descriptor_limit, full_disk_backlog, unread_replies,
                 queue_flood, queue_floods, queue_churn, queue_churn_unterminated, short_queue_lines, abandoned_queues]
    for number, scenario in enumerate(scenarios):
        directory = os.path.join(work, str(number))
        os.mkdir(directory)
        try:
            scenario(args, table, processes, directory, origin)
        except Exception as error:  # noqa: BLE001 (one broken scenario is a failed row; the others still run)
            table.add(GROUP, f"{scenario.__name__} ran to the end", "no exception", f"{type(error).__name__}: {error}",
                      False)
        finally:
            for process in list(processes.live):
                if process is not origin.process:
                    processes.stop(process)


def finish(table, daemon):
    daemon.stop()
    table.peak(GROUP, daemon.peak)


def range_changes(args, table, processes, work, origin):
    """A view scrolled as fast as a client can send: the lanes' widths, other clients, memory, fds, SIGTERM."""
    daemon = Daemon(processes, args.binary, work).start()
    rows = 2_000 if args.quick else 20_000
    seconds = 8 if args.quick else 60
    # Bodies that take about a second (100 KB at 100 KB/s, with an ETag: resumable), so that transfers are
    # running when rows scroll away.
    urls = [origin.url(f"/bounds/{n}.jpg?size=100000&drip=100000") for n in range(rows)]

    start_rss = warm_up(daemon, origin)

    sampler, pinger = Sampler(daemon), Pinger(daemon)
    sampler.start()
    pinger.start()
    try:
        changes = flood_view(daemon, urls, seconds)
    finally:
        sampler.stop()
        pinger.stop()
    daemon.sample()
    for thread in (sampler, pinger):
        if thread.error:
            raise Failed(f"{type(thread).__name__} failed: {thread.error}")

    over = sampler.over_width()
    worst_fast = max(s[0] for s in sampler.samples)
    worst_slow = max(s[2] for s in sampler.samples)
    worst_lingering = max(s[4] for s in sampler.samples)
    width_fast, width_slow = sampler.samples[0][1], sampler.samples[0][3]
    table.add(GROUP, f"view range changed as fast as sent ({seconds} s)",
              f"running slow <= slow_width {width_slow}, fast and lingering <= {width_fast} in every 100 ms sample",
              f"{changes} changes ({changes / seconds:.0f}/s), {len(sampler.samples)} samples, "
              f"max running slow {worst_slow}, fast {worst_fast}, lingering {worst_lingering}, {len(over)} over",
              not over and len(sampler.samples) >= seconds * 5)
    p50, p99 = percentile(pinger.latencies, 0.5) * 1000, percentile(pinger.latencies, 0.99) * 1000
    table.add(GROUP, "another client's ping during the range changes", f"p99 < {PING_P99_MS} ms",
              f"p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(pinger.latencies)} pings)", p99 < PING_P99_MS)
    table.add(GROUP, "peak RSS (VmHWM) during the range changes", f"< {PEAK_RSS_MIB} MiB",
              f"{daemon.peak / 1024:.1f} MiB (start {start_rss / 1024:.1f} MiB)", daemon.peak < PEAK_RSS_MIB * 1024)
    table.add(GROUP, "peak fds during the range changes", f"< {PEAK_FDS}", sampler.peak_fds,
              sampler.peak_fds < PEAK_FDS)

    # The clients leave; what the view left behind is cancelled, so the daemon has nothing left to do.
    client = daemon.client(timeout=120)
    cancel_all(client, urls)
    client.close()
    wait_until(lambda: idle(daemon), 60, what="the daemon to be idle after the clients left")
    time.sleep(2)
    end_rss = rss_kib(daemon.pid)
    table.add(GROUP, "RSS after the clients leave", f"within {RSS_RETURN:.0%} of the start ({start_rss / 1024:.1f} MiB)",
              f"{end_rss / 1024:.1f} MiB (peak {daemon.peak / 1024:.1f} MiB)", end_rss <= start_rss * (1 + RSS_RETURN))

    # SIGTERM in the middle of it: durable work (queued, resumable) running, a view's transfers parked and running.
    durable = [origin.url(f"/bounds-durable/{n}.jpg?size=3000000&drip=300000") for n in range(3)]
    client = daemon.client(timeout=60)
    client.call({"op": "queue", "urls": durable})
    for url in durable:
        client.send({"op": "get", "url": url})  # urgent: they start at once, and stay durable
    flood_view(daemon, urls, 2)
    time.sleep(1)
    daemon.stop()
    client.close()
    left = temporary_files(daemon.cache)
    recorded = resumable_partials(daemon.cache)
    table.add(GROUP, "SIGTERM during the range changes: tmp/", "only the resumable partials it records (>= 1)",
              f"{len(left)} files, {len(recorded)} recorded resumable, {len(set(left) - set(recorded))} others",
              set(left) <= set(recorded) and len(recorded) >= 1)
    finish(table, daemon)


def idle(daemon):
    """Nothing running or waiting in either lane."""
    client = daemon.client(timeout=30)
    try:
        status = client.call({"op": "status"})["result"]
    finally:
        client.close()
    return all(status[lane]["running"] + status[lane]["waiting"] == 0 for lane in ("fast", "slow")) \
        and status["delayed"] == 0


def until_accepted(call, seconds=10):
    """`call()`, asked again while the daemon refuses new clients (a broken pipe, a reset, no greeting)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except (OSError, ValueError, Failed):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def status_of(daemon):
    client = daemon.client(timeout=30)
    try:
        return client.call({"op": "status"})["result"]
    finally:
        client.close()


def metric(daemon, name):
    client = daemon.client(timeout=30)
    try:
        text = client.call({"op": "metrics"})["result"]["text"]
    finally:
        client.close()
    return next((float(line.split()[-1]) for line in text.splitlines() if line.split(" ")[0] == name), None)


def settle_rss(daemon, seconds=2):
    time.sleep(seconds)
    return rss_kib(daemon.pid)


def warm_up(daemon, origin):
    """The kinds of work the scenarios do, at a small scale and finished (gets, a queue, a scrolled view, a watch);
    returns the resident size then: what "its start" means for the rows that compare with it."""
    client = daemon.client(timeout=60)
    for n in range(20):
        client.call({"op": "get", "url": origin.url(f"/warm/get{n}.jpg?size=20000")})
    client.call({"op": "queue", "urls": [origin.url(f"/warm/queue{n}.jpg?size=20000") for n in range(20)]})
    urls = [origin.url(f"/warm/view{n}.jpg?size=20000") for n in range(40)]
    client.call({"op": "view", "urls": urls, "first": 0, "last": 4})
    for n in range(0, 40, 5):
        client.call({"op": "view", "first": n, "last": n + 4})
    client.close()
    watcher = daemon.client(timeout=60)
    watcher.send({"op": "watch"})
    wait_until(lambda: idle(daemon), 60, what="the warm-up to finish")
    watcher.close()
    return settle_rss(daemon)


def silent_watchers(args, table, processes, work, origin):
    """200 `watch` connections that never read while transfers run and another client works."""
    daemon = Daemon(processes, args.binary, work).start()
    seconds = 10 if args.quick else 60
    start_rss = warm_up(daemon, origin)
    watchers = []
    for _ in range(200):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(daemon.socket)
        sock.sendall(b'{"id":1,"op":"watch"}\n')
        watchers.append(sock)
    # Work for the snapshots to describe: background transfers of dripped bodies, and urgent gets.
    client = daemon.client(timeout=120)
    client.call({"op": "queue", "urls": [origin.url(f"/silent/q{n}.jpg?size=200000&drip=50000") for n in range(200)]})
    samples = []
    latencies = []
    began = time.monotonic()
    n = 0
    while time.monotonic() - began < seconds:
        n += 1
        t0 = time.monotonic()
        reply = client.call({"op": "get", "url": origin.url(f"/silent/g{n}.jpg?size=5000")}, timeout=60)
        latencies.append((time.monotonic() - t0, outcome(reply)))
        samples.append((time.monotonic() - began, rss_kib(daemon.pid)))
        time.sleep(0.1)
    daemon.sample()
    fails = [o for _, o in latencies if o != "ok"]
    p99 = percentile([t for t, _ in latencies], 0.99) * 1000
    table.add(GROUP, "200 watch clients that never read: another client's get", f"all ok, p99 < {PING_P99_MS * 5} ms",
              f"{len(latencies) - len(fails)}/{len(latencies)} ok {fails[:2]}, p99 {p99:.0f} ms",
              not fails and p99 < PING_P99_MS * 5)
    half = [rss for at, rss in samples if at >= seconds / 2]
    rising = (half[-1] - half[0]) / 1024 if half else 0
    table.add(GROUP, "200 watch clients that never read: RSS", f"peak < {PEAK_RSS_MIB} MiB, not rising (< 2 MiB "
              "over the second half)", f"start {start_rss / 1024:.1f} MiB, peak {daemon.peak / 1024:.1f} MiB, "
              f"second half {rising:+.1f} MiB", daemon.peak < PEAK_RSS_MIB * 1024 and rising < 2)
    for sock in watchers:
        sock.close()
    client.call({"op": "cancel", "urls": [origin.url(f"/silent/q{n}.jpg?size=200000&drip=50000") for n in range(200)]})
    client.close()
    wait_until(lambda: idle(daemon) and status_of(daemon)["connections"] == 1, 60, what="the watchers to be gone")
    end_rss = settle_rss(daemon)
    table.add(GROUP, "RSS after the watch clients leave", f"within {RSS_RETURN:.0%} of the start",
              f"{start_rss / 1024:.1f} -> {end_rss / 1024:.1f} MiB", end_rss <= start_rss * (1 + RSS_RETURN))
    finish(table, daemon)


def big_views(args, table, processes, work, origin):
    """Many connections, each with a view of the same 100,000 rows (clients of one feed), each looking at another
    place in it; then all close."""
    daemon = Daemon(processes, args.binary, work).start()
    count = 5 if args.quick else 50
    start_rss = warm_up(daemon, origin)
    urls = [origin.url(f"/bigview/{n}.jpg") for n in range(100_000)]
    clients = []
    for v in range(count):
        client = daemon.client(timeout=300)
        ids = []
        for i in range(0, len(urls), 500):
            request = {"op": "view", "urls": urls[i:i + 500]}
            request.update({"first": v * 1000, "last": v * 1000 + 9} if i == 0 else {"append": True})
            ids.append(client.send(request))
        replies = client.wait(ids, timeout=300)
        if not all(r.get("ok") for r in replies.values()):
            raise Failed(f"view {v}: {next(r for r in replies.values() if not r.get('ok'))}")
        clients.append(client)
        daemon.sample()
    peak = daemon.sample()
    views = metric(daemon, "prefetchd_views")
    table.add(GROUP, f"{count} views of 100,000 rows", f"peak RSS < {PEAK_RSS_MIB * 2} MiB ({count} views open)",
              f"{peak / 1024:.1f} MiB (start {start_rss / 1024:.1f} MiB), prefetchd_views {views:g}",
              peak < PEAK_RSS_MIB * 2 * 1024 and views == count)
    for client in clients:
        client.close()
    # Nobody else connects: the daemon must notice the closed views by itself.
    time.sleep(3)
    views = metric(daemon, "prefetchd_views")
    connections = status_of(daemon)["connections"]
    end_rss = settle_rss(daemon)
    table.add(GROUP, "after the views close", f"prefetchd_views 0, 1 connection (this one), RSS within "
              f"{RSS_RETURN:.0%} of the start", f"views {views:g}, connections {connections}, RSS "
              f"{start_rss / 1024:.1f} -> {end_rss / 1024:.1f} MiB",
              views == 0 and connections == 1 and end_rss <= start_rss * (1 + RSS_RETURN))
    finish(table, daemon)


def descriptor_limit(args, table, processes, work, origin):
    """RLIMIT_NOFILE 64 (set by prlimit before the daemon starts) and 200 clients, each asking for a URL."""
    wrapper = os.path.join(work, "prefetchd-nofile-64")
    with open(wrapper, "w") as script:
        script.write(f'#!/bin/sh\nexec prlimit --nofile=64:64 {args.binary} "$@"\n')
    os.chmod(wrapper, 0o755)
    daemon = Daemon(processes, wrapper, work).start()
    clients, refused = [], 0
    for _ in range(200):
        try:
            clients.append(Client(daemon.socket, timeout=120))
        except (OSError, ValueError):
            refused += 1
    sent = []
    codes = []
    for n, c in enumerate(clients):
        try:
            sent.append((c, c.send({"op": "get", "url": origin.url(f"/nofile/{n}.jpg?size=30000")})))
        except OSError as error:
            codes.append(type(error).__name__)
            c.close()
    for c, i in sent:
        try:
            codes.append(outcome(c.wait([i], timeout=120)[i]))
        except (OSError, ValueError, Failed) as error:
            codes.append(type(error).__name__)
        c.close()
    # The 200 clients just left; until the daemon has seen them go, a new client may still be refused
    # (too_many_clients, then the connection closes): ask again for a few seconds, here and below.
    status = until_accepted(lambda: status_of(daemon))
    daemon.sample()
    counts = {code: codes.count(code) for code in sorted(set(codes))}
    blamed = [c for c in codes if c in ("host_paused", "network", "timeout")]
    table.add(GROUP, "RLIMIT_NOFILE 64, 200 clients: no host blamed", "no host_paused/network, no paused host",
              f"{counts}, paused {status['paused_hosts']}, {refused} not greeted",
              not blamed and not status["paused_hosts"])
    served = counts.get("ok", 0)
    deadline = time.monotonic() + 10
    while True:
        try:
            after = daemon.client(timeout=60)
            try:
                later = outcome(after.call({"op": "get", "url": origin.url("/nofile/after.jpg?size=30000")}, timeout=60))
            finally:
                after.close()
        except (OSError, ValueError, Failed) as error:
            later = type(error).__name__
        if later == "ok" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # Refusals are logged one a second, and a second later how many more that second refused.
    time.sleep(1.2)
    with open(daemon.log_path, errors="replace") as logfile:
        lines = logfile.readlines()
    logged = sum(1 for line in lines if "descriptor" in line or "Too many open files" in line)
    logged += sum(int(m.group(1)) for line in lines for m in [re.search(r"refused (\d+) more connections", line)] if m)
    table.add(GROUP, "RLIMIT_NOFILE 64, 200 clients: refusals", "each client served or refused with a logged local "
              "reason; a get afterwards ok", f"{served} served, {200 - served} refused, {logged} refusals logged "
              f"(about descriptors, or counted), then {later}", served + logged >= 200 and later == "ok")
    finish(table, daemon)


def full_disk_backlog(args, table, processes, work, origin):
    """15 queued URLs of 2.6 MB into a 20 MiB tmpfs: the disk fills; freeing space lets every one be cached."""
    if os.geteuid() != 0:
        table.skip(GROUP, "full tmpfs with a queued backlog", "not root: cannot mount a tmpfs")
        return
    mount = os.path.join(work, "mnt")
    os.mkdir(mount)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m,mode=0700", "tmpfs", mount], check=True)
    try:
        daemon = Daemon(processes, args.binary, work, cache_dir=os.path.join(mount, "cache")).start()
        client = daemon.client(timeout=120)
        urls = [origin.url(f"/fulldisk/{n}.jpg?size=2600000") for n in range(15)]
        results = client.call({"op": "queue", "urls": urls})["result"]["results"]
        queued = [r["url"] for r in results if r["status"] == "queued"]
        cached = set()
        deadline = time.monotonic() + (60 if args.quick else 180)
        # Take what is cached out of the way again and again (as a user freeing space would), until every
        # acknowledged URL was cached once or the time is up.
        while time.monotonic() < deadline and len(cached) < len(queued):
            for url in queued:
                info = client.call({"op": "info", "url": url})["result"]
                if info.get("cached"):
                    cached.add(url)
            client.call({"op": "evict", "urls": sorted(cached)})
            time.sleep(1)
        status = client.call({"op": "status"})["result"]
        client.close()
        table.add(GROUP, "full tmpfs, 15 queued URLs of 2.6 MB", "every acknowledged URL cached once space is freed",
                  f"{len(cached)}/{len(queued)} cached, failed {status['failed']}, backlog {status['backlog']}",
                  len(queued) == 15 and len(cached) == len(queued))
        finish(table, daemon)
    finally:
        for process in list(processes.live):
            if "--cache-dir" in process.args and any(mount in str(a) for a in process.args):
                processes.stop(process)
        if subprocess.run(["umount", mount]).returncode != 0:
            subprocess.run(["umount", "-l", mount])


def unread_replies(args, table, processes, work, origin):
    """40 clients that pipeline `list`s of 5,000 queued URLs (120 KB each) and never read. What they hold unsent is
    bounded by `output_budget`; what the process holds must stay near it (glibc kept the freed large buffers in its
    heap: 164 MB for a 64 MiB budget)."""
    budget_mib = 64
    daemon = Daemon(processes, args.binary, work, "--output-budget", f"{budget_mib}M",
                    "--quiet-hours", "00:00-23:59").start()
    client = daemon.client(timeout=60)
    for batch in range(5):
        client.call({"op": "queue", "urls": [origin.url(f"/unread/q{batch}-{n}.jpg") for n in range(1000)]})
    start_rss = settle_rss(daemon, 0.5)
    request = b'{"op":"list","limit":1000}\n' * 2000
    hogs = []
    for _ in range(40):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(daemon.socket)
        sock.settimeout(0.2)
        try:
            sock.sendall(request)
        except OSError:
            pass  # the daemon stopped reading it (it does not read its replies), or closed it
        hogs.append(sock)
    time.sleep(8)
    daemon.sample()
    t0 = time.monotonic()
    client.call({"op": "ping"})
    ping_ms = (time.monotonic() - t0) * 1000
    for sock in hogs:
        sock.close()
    client.close()
    bound = start_rss / 1024 + 1.5 * budget_mib
    table.add(GROUP, "40 clients pipelining 120 KB lists, never reading: peak RSS",
              f"< start + 1.5 x output_budget ({bound:.0f} MiB); another client's ping < 1 s",
              f"start {start_rss / 1024:.1f} MiB, peak {daemon.peak / 1024:.1f} MiB, ping {ping_ms:.0f} ms",
              daemon.peak / 1024 < bound and ping_ms < 1000)
    finish(table, daemon)


def queueing_daemon(args, processes, work, origin):
    """A daemon with background work paused (quiet hours: queued URLs stay queued), a client, and a URL it cached."""
    daemon = Daemon(processes, args.binary, work, "--quiet-hours", "00:00-23:59").start()
    hit = origin.url("/turns/hit.jpg")
    client = daemon.client(timeout=60)
    if not client.call({"op": "get", "url": hit}).get("ok"):
        raise Failed("the URL to hit could not be cached")
    return daemon, client, hit


def cache_hits(client, hit, busy, seconds):
    """The latencies (s) of `client`'s cache hits of `hit`, one every 10 ms, while `busy()` and for `seconds` at most."""
    began, latencies = time.monotonic(), []
    while busy() and time.monotonic() - began < seconds:
        t0 = time.monotonic()
        answer = client.call({"op": "get", "url": hit, "max_stale": 10 ** 9})
        if not answer.get("ok"):
            raise Failed(f"a cache hit failed: {answer}")
        latencies.append(time.monotonic() - t0)
        time.sleep(0.01)
    return latencies


def read_lines(sock, count):
    """Reads from `sock` until `count` lines came (the greeting counts); raises OSError when it closes first."""
    buffered = b""
    while buffered.count(b"\n") < count:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise OSError("the daemon closed the connection")
        buffered += chunk
    return buffered.split(b"\n")[:count]


def queue_flood(args, table, processes, work, origin):
    """One client pipelines `queue` lines of 2,400 short new URLs each (under the 64 KiB line limit) and reads the replies
    on a thread of its own; another client asks for a cached URL meanwhile. A turn takes no more lines once its queues
    hold about a thousand URLs, so a hit waits for one line's commit, not for every line a turn read (a1ce51d: p50
    120 ms, every hit behind about ten lines). Background work is paused (quiet hours): the URLs stay queued."""
    flood_queues(args, table, processes, work, origin, flooders=1, lines=200 if args.quick else 600)


def queue_floods(args, table, processes, work, origin):
    """Eight clients do what `queue_flood`'s one does at once. A full turn takes no line, not even one a client, and
    the clients whose lines wait are served longest-waiting first: a hit waits for about one line's commit, not one
    of each flooding client (8a47512: p50 136 ms, p99 709 ms; adv49)."""
    flood_queues(args, table, processes, work, origin, flooders=8, lines=25 if args.quick else 75)


def queue_churn(args, table, processes, work, origin):
    """Eight clients each connect, send one `queue` line of 1,100 new URLs (a turn's worth), read the reply and
    close, again and again, while another client asks for a cached URL: a client that connects for one line waits
    with those waiting, in its place. Served at once, each newcomer took the turn and the waiting client's request
    waited seconds (637bb55: 4.1-7.1 s; adv55). Background work is paused (quiet hours)."""
    churn_queues(args, table, processes, work, origin, newline=True, size=1100)


def queue_churn_unterminated(args, table, processes, work, origin):
    """`queue_churn` with lines of 3,000 URLs, each sent without its newline and the client half-closing (`printf ... |
    nc -U -N`): the last line of a stream waits its turn like any other (49ab1aa carried it out at once: p50 78 ms
    here, 112 ms in adv57's run)."""
    churn_queues(args, table, processes, work, origin, newline=False, size=3000)


def churn_queues(args, table, processes, work, origin, newline, size):
    daemon, client, hit = queueing_daemon(args, processes, work, origin)
    seconds = 4 if args.quick else 12
    stop, sent, errors = threading.Event(), [0] * 8, []

    def churn(k):
        n = 0
        try:
            while not stop.is_set():
                line = json.dumps({"id": 1, "op": "queue", "summary": True,
                                   "urls": [f"http://c{k}/{n}/{i}" for i in range(size)]}).encode()
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(60)
                sock.connect(daemon.socket)
                sock.sendall(line + b"\n" if newline else line)
                if not newline:
                    sock.shutdown(socket.SHUT_WR)
                read_lines(sock, 2)  # the greeting, then the reply
                sock.close()
                n += 1
                sent[k] = n
        except OSError as error:
            errors.append(error)

    churners = [threading.Thread(target=churn, args=(k,), daemon=True) for k in range(8)]
    for thread in churners:
        thread.start()
    latencies = cache_hits(client, hit, lambda: True, seconds)
    stop.set()
    for thread in churners:
        thread.join(60)
    client.close()
    if errors:
        raise Failed(f"a churning client failed: {errors[0]}")
    worst = max(latencies) * 1000
    p50 = percentile(latencies, 0.5) * 1000
    table.add(GROUP, f"8 clients connecting for one {size:,}-URL queue line each" + ("" if newline else
              " (no newline, then half-closing)") + ", again and again: another client's cache hits",
              f"p50 < {QUEUE_FLOOD_HIT_P50_MS} ms, max < {CHURN_HIT_MAX_MS} ms",
              f"max {worst:.0f} ms, p50 {p50:.1f} ms ({len(latencies)} hits); {sum(sent)} lines queued",
              p50 < QUEUE_FLOOD_HIT_P50_MS and worst < CHURN_HIT_MAX_MS)
    finish(table, daemon)


def short_queue_lines(args, table, processes, work, origin):
    """Sixty clients each pipelining `queue` lines under 4 KiB (180 URLs each): a client's first short line is taken
    even from a full turn (a `get`, a `ping`), but not past four times a full one (one such line of each of 100
    clients went into every turn: a ping waited 243 ms; adv57). Background work is paused (quiet hours)."""
    daemon, client, hit = queueing_daemon(args, processes, work, origin)
    lines, errors, sockets = 20 if args.quick else 60, [], []

    def pipeline(k):
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(60)
            sock.connect(daemon.socket)
            sockets.append(sock)
            sock.sendall(b"".join(json.dumps({"id": n, "op": "queue", "summary": True,
                                              "urls": [f"http://s{k}/{n}/{i}" for i in range(180)]}).encode() + b"\n"
                                  for n in range(lines)))
            read_lines(sock, lines + 1)
        except OSError as error:
            errors.append(error)

    threads = [threading.Thread(target=pipeline, args=(k,), daemon=True) for k in range(60)]
    for thread in threads:
        thread.start()
    began = time.monotonic()
    latencies = cache_hits(client, hit, lambda: any(thread.is_alive() for thread in threads), 60)
    for thread in threads:
        thread.join(10)
    for sock in sockets:
        sock.close()
    client.close()
    if errors:
        raise Failed(f"a pipelining client failed: {errors[0]}")
    p50 = percentile(latencies, 0.5) * 1000
    table.add(GROUP, f"60 clients each pipelining {lines} queue lines of 180 URLs (under 4 KiB): another client's "
              "cache hits", f"p50 < {QUEUE_FLOOD_HIT_P50_MS} ms",
              f"p50 {p50:.1f} ms, max {max(latencies) * 1000:.0f} ms ({len(latencies)} hits in "
              f"{time.monotonic() - began:.1f} s)", p50 < QUEUE_FLOOD_HIT_P50_MS)
    finish(table, daemon)


def flood_queues(args, table, processes, work, origin, flooders, lines):
    daemon, client, hit = queueing_daemon(args, processes, work, origin)
    sockets, replies, errors = [], [[] for _ in range(flooders)], []
    for _ in range(flooders):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(daemon.socket)
        sock.settimeout(120)
        sockets.append(sock)

    def flood_and_read(k):
        flood = b"".join(json.dumps({"id": n, "op": "queue", "summary": True,
                                     "urls": [f"http://q{k}/{n}/{i}" for i in range(2400)]}).encode() + b"\n"
                         for n in range(lines))
        try:
            sender = threading.Thread(target=sockets[k].sendall, args=(flood,), daemon=True)
            sender.start()
            replies[k] = read_lines(sockets[k], lines + 1)  # the greeting, then a reply per line
            sender.join(5)
        except OSError as error:
            errors.append(error)

    flooding = [threading.Thread(target=flood_and_read, args=(k,), daemon=True) for k in range(flooders)]
    began = time.monotonic()
    for thread in flooding:
        thread.start()
    latencies = cache_hits(client, hit, lambda: any(thread.is_alive() for thread in flooding), 120)
    for thread in flooding:
        thread.join(5)
    seconds = time.monotonic() - began
    for sock in sockets:
        sock.close()
    if errors:
        raise Failed(f"a flooding client failed: {errors[0]}")
    queued = sum(json.loads(line)["result"]["counts"].get("queued", 0) for lines_of in replies for line in lines_of[1:])
    client.close()
    p50, p99 = percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000
    who = (f"{lines} pipelined queues of 2,400 URLs" if flooders == 1
           else f"{flooders} clients each pipelining {lines} queues of 2,400 URLs")
    table.add(GROUP, f"{who}: another client's cache hits",
              f"p50 < {QUEUE_FLOOD_HIT_P50_MS} ms; every URL queued",
              f"p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(latencies)} hits in {seconds:.1f} s); {queued} queued",
              p50 < QUEUE_FLOOD_HIT_P50_MS and queued == flooders * lines * 2400)
    finish(table, daemon)


def abandoned_queues(args, table, processes, work, origin):
    """Clients with a 4 MiB send buffer (no privilege needed) each write as many `queue` lines as it holds, then
    close without reading: the daemon finds each gone at its first reply, and carries out what it left (up to 1 MiB
    of lines) as it serves a live client, a turn at a time. It did that at once: 10 such clients held another
    client's cache hit 1.5-2 s, 30 held it 6.4 s (adv49). A full turn takes no line of any client (it took one of
    each: 10 lines of 2,200 URLs, about 0.25 s on this machine). Background work is paused (quiet hours)."""
    daemon, client, hit = queueing_daemon(args, processes, work, origin)
    clients = 10 if args.quick else 30

    def lines(k):
        return b"".join(json.dumps({"id": n, "op": "queue", "summary": True,
                                    "urls": [f"http://k{k}/{n}/{i}" for i in range(2200)]}).encode() + b"\n"
                        for n in range(40))

    payloads = [lines(k) for k in range(clients)]
    sockets = []
    for _ in range(clients):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sock.connect(daemon.socket)
        sock.setblocking(False)
        sockets.append(sock)
    latencies, stop = [], threading.Event()
    hitter = threading.Thread(target=lambda: latencies.extend(cache_hits(client, hit, lambda: not stop.is_set(), 600)),
                              daemon=True)
    hitter.start()
    sent = 0
    for sock, payload in zip(sockets, payloads):
        written = 0
        try:
            while written < len(payload):
                written += sock.send(payload[written:written + 65536])
        except BlockingIOError:
            pass
        sent += payload[:written].count(b"\n")
        sock.close()
    time.sleep(3)
    stop.set()
    hitter.join(30)
    status = client.call({"op": "status"})["result"]
    client.close()
    worst = max(latencies) * 1000 if latencies else float("nan")
    table.add(GROUP, f"{clients} clients writing 4 MiB of queue lines and leaving: another client's cache hits",
              f"max < {ABANDONED_HIT_MAX_MS} ms; the daemon serves on",
              f"{sent} lines written, max {worst:.0f} ms, p50 {percentile(latencies, 0.5) * 1000:.1f} ms "
              f"({len(latencies)} hits); {status['connections']} connections after", worst < ABANDONED_HIT_MAX_MS)
    finish(table, daemon)
