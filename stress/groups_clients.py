"""Group 3, hostile clients: the libFuzzer targets (request path, response headers, numeric request fields), garbage
over the socket, clients that never read, half-open connections, many concurrent connections with the fd count back
to its baseline."""
import json
import math
import os
import random
import socket
import subprocess
import tempfile
import time

from lib import ROOT, Client, Daemon, Origin, fd_count, log, scratch, wait_until

GROUP = "clients"


def waiters_once(client, url, count, seconds=60):
    """The waiters of url's task, read until there are count of them or seconds have passed."""
    waiting = 0
    deadline = time.monotonic() + seconds
    while waiting < count and time.monotonic() < deadline:
        task = client.call({"op": "info", "url": url}).get("result", {}).get("task") or {}
        waiting = task.get("waiters", 0)
        time.sleep(0.1)
    return waiting


def worst_ping(daemon, pings=10, timeout=30):
    """The slowest of `pings` pings in a row, in seconds (99 for one that failed)."""
    latencies = []
    for _ in range(pings):
        began = time.monotonic()
        latencies.append((time.monotonic() - began) if daemon.ping_ok(timeout=timeout) else 99)
    return max(latencies)


def raw(daemon, timeout=10):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(daemon.socket)
    greeting = b""
    while not greeting.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        greeting += chunk
    return sock


def read_lines(sock, count, timeout=10):
    """Up to `count` lines, then whether the daemon closed the connection."""
    sock.settimeout(timeout)
    data = b""
    closed = False
    try:
        while data.count(b"\n") < count:
            chunk = sock.recv(65536)
            if not chunk:
                closed = True
                break
            data += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:  # the daemon closed with our bytes unread: closed all the same
        closed = True
    lines = [json.loads(line) for line in data.split(b"\n") if line.strip()]
    return lines, closed


# The libFuzzer targets built by stress/build_fuzz.sh: (binary, corpus, row, invariant, share of --fuzz-seconds).
FUZZ_TARGETS = [
    ("request", "corpus", "libFuzzer: LineBuffer + JSON decoder + CanonicalURL", "no crash, key idempotent", 1),
    ("headers", "corpus-headers",
     "libFuzzer: response headers (Cache-Control, Age, Date, Expires, Last-Modified, Retry-After, Content-Length, "
     "Content-Range)", "no crash, every number in bounds", 0.5),
    ("numbers", "corpus-numbers", "libFuzzer: numeric request fields (max_stale, first/last/ahead/behind, size, quality, "
     "limit)", "no crash, checks hold", 0.5),
]


def fuzz(args, table):
    build = os.path.join(ROOT, "stress", "build_fuzz.sh")
    binaries = args.fuzz_dir or os.path.join(tempfile.gettempdir(), f"prefetchd-fuzz-targets-{os.getuid()}")
    if not args.fuzz_dir:
        result = subprocess.run([build, binaries], capture_output=True, text=True)
        if result.returncode != 0:
            table.add(GROUP, "fuzz targets build (swiftc -sanitize=fuzzer)", "built", result.stderr[-200:], False)
            return
    for name, corpus_name, row, invariant, share in FUZZ_TARGETS:
        seconds = max(2, math.ceil(args.fuzz_seconds * share))
        run_target(table, os.path.join(binaries, name), os.path.join(ROOT, "Fuzz", corpus_name), seconds, row,
                   invariant)


def run_target(table, binary, corpus, seconds, row, invariant):
    work = tempfile.mkdtemp(prefix="prefetchd-fuzz-")
    try:
        seeds = len(os.listdir(corpus))
        result = subprocess.run(
            ["nice", "-n", "10", binary, f"-max_total_time={seconds}", "-max_len=8192", "-timeout=10",
             "-rss_limit_mb=2048", f"-artifact_prefix={work}/", "-print_final_stats=1", work, corpus],
            capture_output=True, text=True, timeout=seconds + 120,
            # Let libFuzzer, not the Swift runtime's backtracer, handle a crash: it writes the input to `work`.
            env=dict(os.environ, SWIFT_BACKTRACE="enable=no"))
        runs = [line for line in result.stderr.splitlines() if line.startswith("stat::number_of_executed_units")]
        executed = runs[-1].split(":")[-1].strip() if runs else "?"
        crashes = [f for f in os.listdir(work) if f.startswith(("crash-", "leak-", "timeout-", "oom-"))]
        detail = f"{executed} inputs in {seconds}s from {seeds} seeds, exit {result.returncode}"
        fatal = [line for line in result.stderr.splitlines() if "Fatal error" in line or "ERROR: libFuzzer" in line]
        if crashes or result.returncode != 0:
            detail += f", artifacts {crashes[:2]}: {(fatal or ['?'])[0][:160]}"
            for name in crashes[:1]:  # keep the input for a reproduction
                kept = os.path.join(tempfile.gettempdir(), f"prefetchd-fuzz-{os.path.basename(binary)}-{name}")
                subprocess.run(["cp", os.path.join(work, name), kept])
                detail += f" (input kept in {kept})"
        table.add(GROUP, row, invariant, detail, result.returncode == 0 and not crashes)
    finally:
        subprocess.run(["rm", "-rf", work])


def settled_fds(pid):
    """The daemon's fd count once closed connections are gone: the lowest of a second's samples."""
    samples = []
    for _ in range(10):
        samples.append(fd_count(pid))
        time.sleep(0.1)
    return min(samples)


def run(args, table, processes, scratch_dirs):
    fuzz(args, table)
    work = scratch(GROUP)
    scratch_dirs.append(work)
    origin = Origin(processes)
    daemon = Daemon(processes, args.binary, work).start()
    rng = random.Random(3)

    # --- garbage over the socket: each on its own connection, each answered, the daemon alive after each ---
    big_batch = json.dumps({"id": 1, "op": "queue", "urls": [f"http://h/{n}" for n in range(100_000)]}).encode()
    over_batch = json.dumps({"id": 1, "op": "demote", "urls": [""] * 10_001}).encode()
    garbage = [
        ("random bytes", bytes(rng.randrange(256) for _ in range(4000)).replace(b"\n", b" ") + b"\n",
         "bad_request, connection kept", "bad_request", False),
        ("invalid UTF-8 in a JSON string", b'{"id":1,"op":"get","url":"http://h/\xff\xfe\xc0"}\n',
         "bad_request or invalid_url", ("bad_request", "invalid_url"), False),
        ("1 MiB line", b"a" * (1 << 20) + b"\n", "line_too_long, then closed", "line_too_long", True),
        ("deeply nested JSON (30,000 levels)", b"[" * 30_000 + b"]" * 30_000 + b"\n",
         "bad_request", "bad_request", False),
        ("nested 10,000 deep in a field", b'{"id":1,"op":"ping","x":' + b'{"a":' * 10_000 + b"1" + b"}" * 10_000
         + b"}\n", "ok or bad_request", ("ok", "bad_request"), False),
        ("wrong types (urls: a string)", b'{"id":1,"op":"queue","urls":"http://h/a"}\n', "bad_request",
         "bad_request", False),
        ("wrong types (id: object, limit: string)", b'{"id":{"a":1},"op":"list","limit":"x"}\n', "bad_request",
         "bad_request", False),
        ("number overflow", b'{"id":1,"op":"list","limit":1e400}\n', "bad_request", "bad_request", False),
        ("100,000-URL array", big_batch + b"\n", "line_too_long (over 64 KiB), then closed", "line_too_long", True),
        ("10,001-URL array (under 64 KiB)", over_batch + b"\n", "bad_request", "bad_request", False),
        ("NUL bytes and CR only", b"\x00\x00\r\r\x00\n", "bad_request", "bad_request", False),
        ("unknown op", b'{"id":1,"op":"\xe2\x98\x83"}\n', "unknown_op", "unknown_op", False),
        ("URL of 4 KB whose key would pass 8 KiB (found by the fuzzer)",
         json.dumps({"id": 1, "op": "get", "url": "http://h/" + "\u00e9" * 2000}).encode() + b"\n",
         "invalid_url", "invalid_url", False),
    ]
    for name, payload, expected_text, expected, closes in garbage:
        sock = raw(daemon)
        try:
            sock.sendall(payload)
        except OSError:
            pass
        lines, closed = read_lines(sock, 1)
        code = "ok" if lines and lines[0].get("ok") else (lines[0]["error"]["code"] if lines else "no reply")
        good = code in (expected if isinstance(expected, tuple) else (expected,))
        if closes:
            if not closed:
                _, closed = read_lines(sock, 1, timeout=3)
            good = good and closed
        else:
            # The connection stays usable: a ping on it is answered.
            try:
                sock.sendall(b'{"id":99,"op":"ping"}\n')
                more, _ = read_lines(sock, 1, timeout=5)
                good = good and bool(more) and more[-1].get("id") == 99
            except OSError:
                good = False
        sock.close()
        alive = daemon.ping_ok()
        table.add(GROUP, f"garbage: {name}", expected_text + ", daemon alive",
                  f"{code}{', closed' if closed else ''}, alive {alive}", good and alive)

    # --- clients that never read: the loop keeps serving others ---
    hogs = []
    hog_requests = 5_000 if args.quick else 50_000
    line = b'{"id":1,"op":"status"}\n'
    for _ in range(3):
        sock = raw(daemon)
        sock.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 10
        while sent < hog_requests and time.monotonic() < deadline:
            try:
                sock.send(line * 100)
                sent += 100
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break
        hogs.append((sock, sent))
    worst = worst_ping(daemon, pings=20, timeout=5)
    get_ok = False
    client = daemon.client()
    try:
        reply = client.call({"op": "get", "url": origin.url("/while-hogged.jpg")}, timeout=30)
        get_ok = reply.get("ok") is True
    finally:
        client.close()
    daemon.sample()
    table.add(GROUP, "3 clients send, never read", "others served: ping < 1 s, get ok",
              f"{sum(s for _, s in hogs)} requests unread; ping worst {worst * 1000:.0f} ms, get {get_ok}, "
              f"RSS {daemon.peak / 1024:.0f} MiB", worst < 1 and get_ok)
    for sock, _ in hogs:
        sock.close()

    # --- clients with many waiting gets of one URL leave: their waiters go at once (one at a time: 10 s). One
    # client may have 8,192 requests waiting, and all clients 65,536, so 8,000 each and at most 8 ---
    leaving = 6 if args.quick else 8
    many = leaving * 8_000
    slow = origin.url("/many-waiters.jpg?delay=120")
    socks = []
    for _ in range(leaving):
        sock = raw(daemon, timeout=60)
        sock.sendall(("".join('{"op":"get","url":"%s"}\n' % slow for _ in range(8_000))).encode())
        socks.append(sock)
    client = daemon.client()
    try:
        waiting = waiters_once(client, slow, many)
        for sock in socks:
            sock.close()
        worst = worst_ping(daemon, timeout=30)
    finally:
        client.close()
    table.add(GROUP, f"{leaving} clients with {many:,} waiting gets of one URL leave", "others served: ping < 1 s after",
              f"{waiting:,} waiters read; ping worst {worst * 1000:.0f} ms", waiting == many and worst < 1)

    # --- views on many connections showing 1,000 rows of one URL scroll away: one filter of its waiters per scroll
    # (one per row: 20 scrolls of 20 views took the loop for seconds) ---
    viewers = 20 if args.quick else 50
    shared = origin.url("/view-waiters.jpg?delay=120")
    views = []
    for _ in range(viewers):
        sock = raw(daemon, timeout=60)
        sock.sendall((json.dumps({"op": "view", "urls": [shared] * 1000, "first": 0, "last": 999,
                                  "ahead": 0, "behind": 0}) + "\n").encode())
        views.append(sock)
    client = daemon.client()
    try:
        waiting = waiters_once(client, shared, viewers * 1000)
        scroll = json.dumps({"op": "view", "urls": [shared] * 1000, "append": True, "first": 1000, "last": 1999})
        for sock in views:
            sock.sendall(scroll.encode() + b"\n")
        worst = worst_ping(daemon, timeout=60)
    finally:
        client.close()
        for sock in views:
            sock.close()
    table.add(GROUP, f"{viewers} views of 1,000 rows of one URL scroll away", "others served: ping < 1 s after",
              f"{waiting:,} waiters; ping worst {worst * 1000:.0f} ms", waiting == viewers * 1000 and worst < 1)

    # --- half-open connections ---
    sock = raw(daemon)
    sock.sendall(b'{"id":7,"op":"ping"}\n')
    sock.shutdown(socket.SHUT_WR)
    lines, closed = read_lines(sock, 2, timeout=5)
    sock.close()
    table.add(GROUP, "half-close after a request", "reply, then EOF",
              f"{len(lines)} reply, closed {closed}", len(lines) == 1 and lines[0].get("id") == 7 and closed)
    sock = raw(daemon)
    sock.sendall(b'{"id":8,"op":"pi')
    sock.shutdown(socket.SHUT_WR)
    lines, closed = read_lines(sock, 2, timeout=5)
    sock.close()
    codes = [m.get('error', {}).get('code', 'ok') for m in lines]
    table.add(GROUP, "half-close inside a line", "bad_request (what came is read as a last line), then EOF",
              f"{codes}, closed {closed}", codes == ["bad_request"] and closed)
    idle = [raw(daemon) for _ in range(50)]
    partial = [raw(daemon) for _ in range(50)]
    for sock in partial:
        sock.sendall(b'{"id":1,"op":"ping"')  # never finished
    alive = daemon.ping_ok()
    for sock in idle + partial:
        sock.close()
    table.add(GROUP, "50 idle + 50 half-written connections", "others served", f"ping {alive}", alive)

    # --- many concurrent connections, then the fd count back to its baseline ---
    baseline_fds = settled_fds(daemon.pid)
    count = 200 if args.quick else 1000
    clients, errors = [], []
    for _ in range(count):
        try:
            clients.append(Client(daemon.socket, timeout=10))
        except (OSError, ValueError) as error:
            errors.append(type(error).__name__)
    peak_fds = fd_count(daemon.pid)
    ids = [(c, c.send({"op": "ping"})) for c in clients]
    answered = 0
    for c, i in ids:
        try:
            if c.wait([i], timeout=10)[i].get("ok"):
                answered += 1
        except Exception:  # noqa: BLE001
            pass
    for c in clients:
        c.close()
    try:
        wait_until(lambda: fd_count(daemon.pid) <= baseline_fds, 10, what="fd count back to its baseline")
        back = True
    except Exception:  # noqa: BLE001
        back = False
    after = fd_count(daemon.pid)
    table.add(GROUP, f"{count} concurrent connections", f"{count} greeted and answered",
              f"{len(clients)} greeted, {answered} answered, refused {len(set(errors))}", answered == count)
    table.add(GROUP, "fd count back to baseline", f"{baseline_fds} fds",
              f"{baseline_fds} -> {peak_fds} -> {after}", back)
    table.add(GROUP, "daemon alive after all", "ping ok", daemon.ping_ok(), daemon.ping_ok())
    daemon.stop()
    table.peak(GROUP, daemon.peak)
    log(f"clients: peak RSS {daemon.peak} KiB")
