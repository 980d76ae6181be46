#!/usr/bin/env python3
"""Where B2's time per fetched file goes, by thread: prefetchd (and, with --base, another build of it) against
curl --parallel-max 16, alternating, each round after the last round's files were deleted, as make bench does, on a
fresh ext4 with a journal as B2 (benchlib.JournaledExt4; where that cannot be made, in bench/results/tmp).

With --work DIR, the files are made under DIR instead: on a tmpfs no file system cost at all, so what is left is
each program's own work per file; on this machine's root (an ext4 without a journal) making an inode within minutes
of mass deletions scans past each deleted one, unless --keep keeps every round's files until the end.

Prints files/s and CPU microseconds per file (user + system) for each daemon thread, and curl's. The table in
bench/README.md ("Where the time per item goes") comes from it. Needs the bench corpus (bench/corpus.py) and nginx.

    python3 bench/per_item.py --rounds 6 --base /tmp/old/.build/release
    mount -t tmpfs -o size=2g tmpfs /mnt/t && python3 bench/per_item.py --work /mnt/t
"""

import argparse
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import CLK_TCK, REPO, Daemon, JournaledExt4, Nginx, PROCS, install_signal_handlers, timed  # noqa: E402
import corpus  # noqa: E402


def threads(pid):
    """user and system seconds per kind of thread: the loop (the main thread) or its name."""
    out = {}
    for task in glob.glob("/proc/%d/task/*" % pid):
        try:
            name = open(task + "/comm").read().strip()
            fields = open(task + "/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = "loop" if task.endswith("/%d" % pid) else name
        times = out.setdefault(kind, [0.0, 0.0])
        times[0] += int(fields[11]) / CLK_TCK
        times[1] += int(fields[12]) / CLK_TCK
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--bin-dir", default=os.path.join(REPO, ".build", "release"))
    parser.add_argument("--base", help="another build's bin directory, measured side by side")
    parser.add_argument("--keep", action="store_true", help="keep every round's files until the end")
    parser.add_argument("--work", help="where the scratch directory per-item/ is made (emptied first), instead of "
                                           "a fresh ext4 with a journal; on a tmpfs the file system's cost of making "
                                           "inodes is left out of every tool's figure")
    args = parser.parse_args()
    install_signal_handlers()  # a SIGTERM unwinds: processes stopped, the ext4 unmounted
    if args.work:
        return measure(args, os.path.join(args.work, "per-item"))  # only this is emptied, never what --work names
    scratch = os.path.join(REPO, "bench", "results", "tmp")
    os.makedirs(scratch, exist_ok=True)
    with JournaledExt4(scratch) as disk:
        if disk.path is None:
            print("no fresh ext4 with a journal (%s): the files go to %s" % (disk.reason, scratch), flush=True)
        measure(args, os.path.join(disk.path or scratch, "per-item"))


def measure(args, work):
    n = args.files
    builds = {"prefetchd": args.bin_dir}
    if args.base:
        builds["base"] = args.base
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    corpus.generate(os.path.join(REPO, "bench", "corpus"))
    nginx = Nginx(os.path.join(REPO, "bench", "corpus"), os.path.join(work, "nginx"))
    try:
        urls = os.path.join(work, "urls.txt")
        with open(urls, "w") as f:
            f.write("".join("%s/small/%04d.jpg\n" % (nginx.base, i) for i in range(1, n + 1)))
        config = os.path.join(work, "curl.cfg")
        with open(config, "w") as f:
            f.write("".join('url = "%s/small/%04d.jpg"\n' % (nginx.base, i) for i in range(1, n + 1)))
        order = list(builds) + ["curl"]
        for round_ in range(args.rounds):
            for tool in order[round_ % len(order):] + order[:round_ % len(order)]:
                directory = os.path.join(work, "r%d-%s" % (round_, tool))
                os.makedirs(directory)
                if tool in builds:
                    daemon = Daemon(builds[tool], directory, ["--fast-width", "16"]).start()
                    try:
                        before = threads(daemon.pid)
                        r = timed(daemon.ctl("get", "-"), stdin=urls)
                        after = threads(daemon.pid)
                    finally:
                        daemon.stop()
                    if r["rc"] != 0:
                        sys.exit("per_item: prefetchctl get failed (exit %d): %s" % (r["rc"], r["stderr"].strip()))
                    parts, total = [], 0.0
                    for kind in sorted(after):
                        user = after[kind][0] - before.get(kind, [0, 0])[0]
                        system = after[kind][1] - before.get(kind, [0, 0])[1]
                        total += user + system
                        if user + system > 0:
                            parts.append("%s %.0f+%.0f" % (kind, user * 1e6 / n, system * 1e6 / n))
                    print("round %d %-9s %5.0f files/s, %4.0f µs/file (user+system by thread: %s); prefetchctl %.0f µs"
                          % (round_, tool, n / r["wall"], total * 1e6 / n, ", ".join(parts), r["cpu"] * 1e6 / n),
                          flush=True)
                else:
                    out = os.path.join(directory, "out")
                    os.makedirs(out)
                    r = timed(["curl", "--parallel", "--parallel-max", "16", "-s", "--remote-name-all",
                               "--fail", "--output-dir", out, "-K", config], cwd=out)
                    if r["rc"] != 0:
                        sys.exit("per_item: curl failed (exit %d): %s" % (r["rc"], r["stderr"].strip()))
                    print("round %d %-9s %5.0f files/s, %4.0f µs/file" % (round_, "curl", n / r["wall"],
                                                                          r["cpu"] * 1e6 / n), flush=True)
                if not args.keep:
                    shutil.rmtree(directory)
    finally:
        nginx.stop()
        PROCS.stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as interrupted:
        sys.exit("per_item: %s" % (interrupted or "interrupted"))
