"""Shared pieces of the stress suite: daemon and origin processes, a protocol client, the result table.

Standard library only. Every process started here is remembered and stopped by PID (SIGTERM, then SIGKILL) when
its scenario ends, also on failure.
"""
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURES = os.path.join(ROOT, "Tests", "prefetchdTests", "Fixtures")
ORIGIN = os.path.join(FIXTURES, "origin.py")
CHECK_INDEX = os.path.join(FIXTURES, "check_index.py")


class Failed(Exception):
    pass


def log(*parts):
    print("[stress]", *parts, file=sys.stderr, flush=True)


def proc_status(pid, field):
    """A numeric field of /proc/PID/status (VmRSS, VmHWM in KiB, Threads); 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss_kib(pid):
    """VmHWM (peak resident set) of a live process, in KiB; 0 when it is gone."""
    return proc_status(pid, "VmHWM")


def percentile(values, fraction, empty=float("nan")):
    """The value below which `fraction` of `values` lie; `empty` when there are none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else empty


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_until(predicate, timeout, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failed(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Table:
    """The rows of the final table: group, scenario, expected, observed, pass."""

    def __init__(self):
        self.rows = []
        self.rss = {}

    def add(self, group, scenario, expected, observed, ok):
        self.rows.append((group, scenario, str(expected), str(observed), bool(ok)))
        log(("PASS" if ok else "FAIL"), group, "|", scenario, "| expected:", expected, "| observed:", observed)
        return ok

    def skip(self, group, scenario, reason):
        """A row that cannot run here (e.g. not root): shown as SKIP, not counted as a failure."""
        self.rows.append((group, scenario, "-", reason, None))
        log("SKIP", group, "|", scenario, "|", reason)

    def peak(self, group, kib):
        self.rss[group] = max(self.rss.get(group, 0), kib)

    def render(self):
        headers = ("group", "scenario", "expected", "observed", "pass")
        rows = [(g, s, e, o, "SKIP" if p is None else "PASS" if p else "FAIL") for g, s, e, o, p in self.rows]
        widths = [len(h) for h in headers]
        clip = (14, 44, 48, 64, 4)
        rows = [tuple(c if len(c) <= w else c[: w - 1] + "…" for c, w in zip(row, clip)) for row in rows]
        for row in rows:
            widths = [max(w, len(c)) for w, c in zip(widths, row)]
        line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
        out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        out += [line(row) for row in rows]
        out.append("")
        out.append("daemon peak RSS (VmHWM) per group:")
        for group, kib in self.rss.items():
            out.append(f"  {group:<16} {kib / 1024:8.1f} MiB")
        passed = sum(1 for r in self.rows if r[4])
        skipped = sum(1 for r in self.rows if r[4] is None)
        out.append(f"{passed}/{len(self.rows) - skipped} rows pass" + (f", {skipped} skipped" if skipped else ""))
        failed = [r for r in self.rows if r[4] is False]
        if failed:  # unclipped and last, so that the tail of a CI log names them
            out.append("failed rows:")
            out += [f"  {g} | {s}\n    expected: {e}\n    observed: {o}" for g, s, e, o, _ in failed]
        return "\n".join(out)


class Processes:
    """Everything started by a scenario; `stop_all` ends them by PID."""

    def __init__(self):
        self.live = []

    def add(self, process):
        self.live.append(process)
        return process

    def stop(self, process, timeout=10):
        if process.poll() is None:
            try:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process in self.live:
            self.live.remove(process)

    def stop_all(self):
        for process in list(reversed(self.live)):
            self.stop(process)


class Origin:
    """Tests/prefetchdTests/Fixtures/origin.py on an ephemeral port."""

    def __init__(self, processes):
        self.process = processes.add(subprocess.Popen(
            [sys.executable, ORIGIN, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            raise Failed(f"origin.py did not start: {line!r}")
        self.port = int(line.split()[1])
        self.base = f"http://127.0.0.1:{self.port}"

    def url(self, path):
        return self.base + path

    def sha256(self, path):
        with urllib.request.urlopen(self.url(path), timeout=60) as response:
            return hashlib.sha256(response.read()).hexdigest()

    def stats(self):
        with urllib.request.urlopen(self.url("/__stats"), timeout=10) as response:
            return json.loads(response.read())


class Client:
    """One protocol connection: greeting, pipelined requests matched by id."""

    def __init__(self, path, timeout=30):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buffer = b""
        self.next_id = 0
        self.pending = {}
        self.greeting = json.loads(self.readline())

    def readline(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the daemon")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def send(self, request):
        self.next_id += 1
        request = dict(request, id=self.next_id)
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        return self.next_id

    def wait(self, ids, timeout=60):
        """Replies for every id in `ids`, as a dict id -> reply; raises on timeout."""
        wanted = set(ids)
        got = {i: self.pending.pop(i) for i in list(wanted) if i in self.pending}
        deadline = time.monotonic() + timeout
        while len(got) < len(wanted):
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failed(f"no reply within {timeout}s for ids {sorted(wanted - set(got))[:5]}")
            self.sock.settimeout(left)
            message = json.loads(self.readline())
            if "id" not in message:
                continue  # an event
            if message["id"] in wanted:
                got[message["id"]] = message
            else:
                self.pending[message["id"]] = message
        return got

    def call(self, request, timeout=60):
        return self.wait([self.send(request)], timeout)[self.next_id]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Daemon:
    """One prefetchd process with its own socket and cache directory."""

    def __init__(self, processes, binary, workdir, *extra, cache_dir=None, socket_path=None, log_name="daemon.log"):
        self.processes = processes
        self.binary = binary
        self.workdir = workdir
        self.socket = socket_path or os.path.join(workdir, "run", "ctl.sock")
        self.cache = cache_dir or os.path.join(workdir, "cache")
        self.extra = list(extra)
        self.log_path = os.path.join(workdir, log_name)
        self.process = None
        self.peak = 0

    log_level = "warning"

    def argv(self):
        """The daemon's command line (a subclass may run it elsewhere, e.g. in a network namespace)."""
        return [self.binary, "--socket", self.socket, "--cache-dir", self.cache, "--log-level", self.log_level,
                "--config", "/dev/null", *self.extra]

    def environment(self):
        """The daemon's environment: this one's, without systemd's variables."""
        return {k: v for k, v in os.environ.items() if k not in ("LISTEN_FDS", "NOTIFY_SOCKET")}

    def start(self, timeout=60):
        logfile = open(self.log_path, "ab")
        self.process = self.processes.add(subprocess.Popen(self.argv(), stdout=logfile, stderr=logfile,
                                                           env=self.environment()))
        logfile.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise Failed(f"prefetchd exited with {self.process.returncode} at start-up; see {self.log_path}")
            try:
                client = Client(self.socket, timeout=5)
                client.close()
                return self
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise Failed("prefetchd did not greet within the start-up timeout")
                time.sleep(0.05)

    @property
    def pid(self):
        return self.process.pid

    def sample(self):
        self.peak = max(self.peak, peak_rss_kib(self.process.pid))
        return self.peak

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def kill9(self):
        self.sample()
        self.process.kill()
        self.process.wait()
        self.processes.live.remove(self.process)

    def restart_after_kill9(self, up):
        """kill -9, then start again; `up` is clear while it is down. Returns how long the start took (s)."""
        up.clear()
        self.kill9()
        began = time.monotonic()
        self.start(timeout=120)
        up.set()
        return time.monotonic() - began

    def stop(self):
        if self.process is not None:
            self.sample()
            self.processes.stop(self.process, timeout=20)

    def client(self, timeout=30):
        return Client(self.socket, timeout)

    def ping_ok(self, timeout=5):
        try:
            client = self.client(timeout)
            try:
                return client.call({"op": "ping"}, timeout).get("ok") is True
            finally:
                client.close()
        except (OSError, ValueError, Failed):
            return False

    def check_index(self, allow_temporary=False):
        """check_index.py on the cache; `allow_temporary` while downloads may be in progress."""
        arguments = [sys.executable, CHECK_INDEX, self.cache] + (["--allow-temporary"] if allow_temporary else [])
        result = subprocess.run(arguments, capture_output=True, text=True)
        return result.returncode == 0, result.stdout.strip().replace("\n", "; ")


def scratch(prefix):
    return tempfile.mkdtemp(prefix=f"prefetchd-stress-{prefix}-", dir="/tmp")


def get_many(client, urls, timeout=120, **extra):
    """Pipelined `get`s on one connection: url -> reply."""
    ids = {client.send(dict({"op": "get", "url": url}, **extra)): url for url in urls}
    replies = client.wait(ids.keys(), timeout)
    return {ids[i]: reply for i, reply in replies.items()}


def outcome(reply):
    """`ok` or the error code of a reply."""
    if reply.get("ok"):
        return "ok"
    return reply.get("error", {}).get("code", "?")
