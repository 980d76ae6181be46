#!/usr/bin/env python3
"""What a background file boundary costs an urgent get (docs/transport.md, "What a file boundary costs").

On the network lab, a daemon drains a 2,000-URL backlog while urgent gets come at chosen delays after a background
transfer starts (the daemon's `watch` event): 0 ms is a get whose request meets the next background request on the
link. For each delay it reports the get's latency and, from the lab's counters for the server-to-client direction
while the get ran, the packets the bottleneck dropped and the bytes that crossed the link beyond the image (what the
background sent meanwhile). With --peer-bin-dir, a second build runs after the first on the same lab.

Usage: lab_boundary_probe.py [--link 50/20/64K] [--origin h1|h2] [--bin-dir DIR] [--peer-bin-dir DIR]
                             [--delays 0,20,40,60,80,120,200] [--repeats 4]
Needs root (the lab). Prints one line per build and delay.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "lab"))
import lab  # noqa: E402
from benchlib import Client  # noqa: E402
from lab_bench import LabDaemon, parse_link  # noqa: E402

ORIGINS = {"h1": "https_h1", "h2": "https"}
BACKLOG = 2000
GAP = 0.3  # seconds after a get before waiting for the next background start


def probe(net, bin_dir, origin, delays, repeats, work, tag):
    """{delay ms: [(latency ms, packets overflowed, bytes beyond the image)]} for one build."""
    daemon = LabDaemon(types.SimpleNamespace(work=work, bins=bin_dir, net=net, daemon_args=[]), tag)
    try:
        client = Client(daemon.socket, timeout=60)
        starts = []
        watcher = Client(daemon.socket, timeout=600)
        watcher.call("watch")

        def read_events():
            try:
                while True:
                    event = watcher.receive()
                    if event.get("event") == "started" and event.get("lane") == "slow":
                        starts.append(time.monotonic())
            except (OSError, ValueError, ConnectionError):
                pass
        threading.Thread(target=read_events, daemon=True).start()
        scheme = ORIGINS[origin]
        for n in range(3):  # warm: the urgent connection and the daemon
            client.call("get", url=net.url(lab.IMAGE_PATH % n, scheme) + "?%s-warm%d" % (tag, n))
        backlog = [net.url(lab.IMAGE_PATH % (n % 200), scheme) + "?%s-bg%d" % (tag, n) for n in range(BACKLOG)]
        for first in range(0, BACKLOG, 1000):
            reply = client.call("queue", urls=backlog[first:first + 1000])
            if not reply.get("ok"):
                raise RuntimeError("queue failed: %r" % reply)
        time.sleep(1.5)  # the drain settles
        results = {}
        n = 0
        for _ in range(repeats):
            for delay in delays:
                seen = len(starts)
                while len(starts) == seen:
                    time.sleep(0.001)
                time.sleep(max(0.0, starts[-1] + delay / 1000 - time.monotonic()))
                n += 1
                path = lab.IMAGE_PATH % (100 + n % 100)
                before = net.stats()["s2c"]
                began = time.monotonic()
                reply = client.call("get", url=net.url(path, scheme) + "?%s-u%d" % (tag, n))
                took = (time.monotonic() - began) * 1000
                after = net.stats()["s2c"]
                if not reply.get("ok"):
                    raise RuntimeError("an urgent get failed: %r" % reply)
                image = os.path.getsize(os.path.join(net.docroot, path.lstrip("/")))
                results.setdefault(delay, []).append(
                    (took, after["overflowed"] - before["overflowed"],
                     after["delivered_bytes"] - before["delivered_bytes"] - image))
                time.sleep(GAP)
        return results
    finally:
        daemon.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--link", type=parse_link, default=parse_link("50/20/64K"))
    parser.add_argument("--origin", choices=sorted(ORIGINS), default="h1")
    parser.add_argument("--bin-dir", default=os.path.join(REPO, ".build", "release"))
    parser.add_argument("--peer-bin-dir", help="a second build, measured after the first on the same lab")
    parser.add_argument("--delays", type=lambda t: [int(x) for x in t.split(",")], default=[0, 20, 40, 60, 80, 120, 200])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--name", default="lbound")
    args = parser.parse_args()
    builds = [args.bin_dir] + ([args.peer_bin_dir] if args.peer_bin_dir else [])
    work = tempfile.mkdtemp(prefix="prefetchd-boundary-")
    try:
        with lab.Lab(name=args.name, delay_ms=args.link["delay_ms"], rate_mbit=args.link["rate_mbit"],
                     buffer_bytes=args.link["buffer_bytes"]) as net:
            print("link %s, origin %s; per delay after a background start: latency median (all), packets "
                  "overflowed, bytes beyond the image (median)" % (args.link["label"], ORIGINS[args.origin]))
            for number, bin_dir in enumerate(builds):
                results = probe(net, bin_dir, args.origin, args.delays, args.repeats, work, "b%d" % number)
                print(os.path.relpath(bin_dir, REPO) if bin_dir.startswith(REPO) else bin_dir, flush=True)
                for delay, rows in results.items():
                    print("  %4d ms: %4.0f ms (%s), overflowed %d, +%d KB" % (
                        delay, statistics.median(r[0] for r in rows), " ".join("%.0f" % r[0] for r in sorted(rows)),
                        sum(r[1] for r in rows), statistics.median(r[2] for r in rows) / 1000), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
