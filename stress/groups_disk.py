"""Group 4, full disk: the cache on a small tmpfs mounted here (needs root). The size limit holds; when the disk
itself fills, waiters get disk_full, the cache gives back its least recently used entries and the index stays
consistent; fetching recovers once space is freed."""
import os
import subprocess
import time

from lib import Daemon, Origin, get_many, log, outcome, scratch

GROUP = "disk"


def run(args, table, processes, scratch_dirs):
    if os.geteuid() != 0:
        table.skip(GROUP, "the cache on a tmpfs", "not root: cannot mount a tmpfs")
        return
    work = scratch(GROUP)
    scratch_dirs.append(work)
    mount = os.path.join(work, "mnt")
    os.mkdir(mount)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m,mode=0700", "tmpfs", mount], check=True)
    try:
        body(args, table, processes, work, mount)
    finally:
        processes.stop_all()
        if subprocess.run(["umount", mount]).returncode != 0:
            subprocess.run(["umount", "-l", mount])


def files_bytes(cache):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(os.path.join(cache, "files"))
               for f in names)


def body(args, table, processes, work, mount):
    origin = Origin(processes)
    cache = os.path.join(mount, "cache")
    count = 12 if args.quick else 30
    # 1. The size limit holds: 1 MB images into a 6 MB cache.
    daemon = Daemon(processes, args.binary, work, "--max-cache-bytes", "6M", cache_dir=cache).start()
    client = daemon.client(timeout=120)
    urls = [origin.url(f"/fill/{n}.jpg?size=1000000") for n in range(count)]
    peak_files = 0
    results = {}
    for start in range(0, count, 4):
        results.update(get_many(client, urls[start:start + 4], timeout=120))
        peak_files = max(peak_files, files_bytes(cache))
    status = client.call({"op": "status"})["result"]["cache"]
    fails = [outcome(r) for r in results.values() if outcome(r) != "ok"]
    table.add(GROUP, f"{count} x 1 MB into --max-cache-bytes 6M", "all ok, cache <= 6 MiB after each batch",
              f"{count - len(fails)} ok {fails[:2]}, status {status['bytes']} B, files peak {peak_files} B",
              not fails and status["bytes"] <= 6 << 20 and peak_files <= 6 << 20)
    ok, problems = daemon.check_index()
    table.add(GROUP, "index after eviction (check_index.py)", "ok", problems, ok)
    client.close()
    daemon.stop()
    table.peak(GROUP, daemon.peak)

    # 2. The disk itself fills: a limit far above the tmpfs, a filler file leaving about 0.5 MB. The first disk_full
    # frees at most about 2 MB more (the index's 1 MiB reserve, given up when SQLite finds the disk full, and the
    # cache's least recently used tenth, one 1 MB file): still short of a 3 MB body.
    daemon = Daemon(processes, args.binary, work, "--max-cache-bytes", "1G", "--max-attempts", "2",
                    cache_dir=cache).start()
    client = daemon.client(timeout=120)
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    filler = os.path.join(mount, "filler")
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - 500_000))
    big = [origin.url(f"/full/{n}.jpg?size=3000000") for n in range(3)]
    replies = get_many(client, big, timeout=120)
    codes = [outcome(r) for r in replies.values()]
    table.add(GROUP, "disk full: 3 x 3 MB with 0.5 MB free", "every waiter gets disk_full",
              ", ".join(codes), all(c == "disk_full" for c in codes))
    ping = daemon.ping_ok()
    ok, problems = daemon.check_index(allow_temporary=True)  # its retries keep downloading
    table.add(GROUP, "while full: index consistent, still serving", "check_index ok, ping ok",
              f"{problems}, ping {ping}", ok and ping)
    # Not one byte left: the body, the temp file and the index (WAL) all hit ENOSPC.
    # Unbuffered: a buffered file's close raised ENOSPC again for what its failed flush kept.
    fd = os.open(filler, os.O_WRONLY | os.O_APPEND)
    try:
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    small = [origin.url(f"/nospace/{n}.jpg?size=20000") for n in range(3)]
    replies = get_many(client, small, timeout=120)
    codes = [outcome(r) for r in replies.values()]
    ping = daemon.ping_ok()
    # The first disk_full evicts the cache's least recently used tenth: a get after it may find room.
    table.add(GROUP, "disk 100% full: 3 x 20 KB", "disk_full (or ok, once the cache gave way) each, still serving",
              f"{', '.join(codes)}, ping {ping}", "disk_full" in codes and set(codes) <= {"disk_full", "ok"} and ping)
    ok, problems = daemon.check_index(allow_temporary=True)  # its retries keep downloading
    table.add(GROUP, "100% full: index consistent", "check_index ok", problems, ok)
    # Nothing else frees space: the cache does (a limit of 1G never would). Evictions come at most every 5 s. The
    # failed URLs' background retries would race the get for the space freed: they are cancelled first.
    client.call({"op": "cancel", "urls": big + small})
    gave_way = None
    deadline = time.monotonic() + 30
    while gave_way != "ok" and time.monotonic() < deadline:
        gave_way = outcome(get_many(client, [origin.url("/nospace/after.jpg?size=20000")], timeout=60).popitem()[1])
        time.sleep(1)
    with open(daemon.log_path, errors="replace") as f:
        evictions = f.read().count("the disk is full: evicted")
    table.add(GROUP, "still 100% full: the cache gives way", "a get is ok within 30 s; entries evicted (log)",
              f"{gave_way}, {evictions} evictions logged", gave_way == "ok" and evictions > 0)
    os.unlink(filler)
    big += small
    replies = get_many(client, big, timeout=120)
    codes = [outcome(r) for r in replies.values()]
    table.add(GROUP, "space freed: the same 6 URLs again", "all ok (disk_full is not remembered)",
              ", ".join(codes), all(c == "ok" for c in codes))
    client.close()
    daemon.stop()
    ok, problems = daemon.check_index()
    table.add(GROUP, "index after recovery (check_index.py)", "ok", problems, ok)
    table.peak(GROUP, daemon.peak)
    log(f"disk: peak {daemon.peak} KiB")
