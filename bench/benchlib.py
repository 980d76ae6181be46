"""Shared plumbing for bench.py: processes we start (and always stop), the daemon, a protocol client, origins,
whole-process timing, statistics. Python standard library only."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------------------
# Processes


class Processes:
    """Every process the bench starts. Each runs in a session of its own, so stopping one also stops what it
    started (xargs' curls, nginx' workers); all are stopped by process id, never by name."""

    def __init__(self):
        self.running = []
        self.lock = threading.Lock()

    def start(self, argv, **kwargs):
        kwargs.setdefault("start_new_session", True)
        process = subprocess.Popen(argv, **kwargs)
        with self.lock:
            self.running.append(process)
        return process

    def forget(self, process):
        with self.lock:
            if process in self.running:
                self.running.remove(process)

    def signal_group(self, process, sig):
        try:
            os.killpg(process.pid, sig)  # the session leader's pid is the group's id
        except ProcessLookupError:
            pass
        except PermissionError:
            try:
                process.send_signal(sig)
            except ProcessLookupError:
                pass

    def stop(self, process, sig=signal.SIGTERM, timeout=15):
        """Signals the process (and its group), waits, then kills; returns its exit status."""
        if process.returncode is None and process.poll() is None:
            self.signal_group(process, sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal_group(process, signal.SIGKILL)
                process.wait()
        # Whatever it left in its group (a curl of xargs) goes too.
        self.signal_group(process, signal.SIGKILL)
        self.forget(process)
        return process.returncode

    def stop_all(self):
        with self.lock:
            running = list(reversed(self.running))
        for process in running:
            try:
                self.stop(process, timeout=5)
            except Exception as error:  # keep stopping the others
                log("could not stop pid %d: %s" % (process.pid, error))


PROCS = Processes()


def install_signal_handlers():
    def interrupted(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)


def timed(argv, stdin=None, stdout=None, cwd=None, timeout=600, env=None):
    """Runs argv as a whole process and returns wall seconds, CPU seconds (user+system, children included) and
    peak RSS in KiB, from wait4. stdin/stdout are file paths or None (/dev/null)."""
    fin = open(stdin, "rb") if stdin else open(os.devnull, "rb")
    fout = open(stdout, "wb") if stdout else open(os.devnull, "wb")
    try:
        start = time.monotonic()
        process = PROCS.start(argv, stdin=fin, stdout=fout, stderr=subprocess.PIPE, cwd=cwd, env=env)
        timer = threading.Timer(timeout, lambda: PROCS.signal_group(process, signal.SIGKILL))
        timer.start()
        err_chunks = []
        reader = threading.Thread(target=lambda: err_chunks.append(process.stderr.read()))
        reader.start()
        _, status, usage = os.wait4(process.pid, 0)
        end = time.monotonic()
        timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        reader.join()
        PROCS.stop(process)
        return {
            "wall": end - start,
            "cpu": usage.ru_utime + usage.ru_stime,
            "maxrss_kb": usage.ru_maxrss,
            "rc": process.returncode,
            "stderr": b"".join(err_chunks).decode("utf-8", "replace")[-2000:],
        }
    finally:
        fin.close()
        fout.close()


class JournaledExt4:
    """A fresh ext4 with a journal (what `mkfs.ext4` makes, and what a desktop's disk is), in a file under `work`
    mounted on a loop device, for the rows that time making files. This machine's root is an ext4 without a
    journal, where making an inode within a few minutes of deleting thousands costs every tool a scan past each
    deleted one (`recently_deleted()` in the kernel's `find_inode_bit`, checked only without a journal): about a
    millisecond per file after the last round's deletions, depending on how many seconds ago they were. Those rows
    would time that scan, not the tools. Needs root; `path` is None (and `reason` says why) where it cannot be made,
    and the caller uses the work directory instead. Each one lives in a directory of its own under `work`, so two
    runs never share an image. Unmounted and deleted on exit, also on failure."""

    def __init__(self, work, size=3 << 30):
        self.work = work
        self.directory = None
        self.size = size
        self.path = None
        self.reason = None

    def __enter__(self):
        if os.geteuid() != 0:
            self.reason = "not root: no loop mount"
            return self
        try:
            self.directory = tempfile.mkdtemp(prefix="ext4-", dir=self.work)
            self.image = os.path.join(self.directory, "image")
            self.mountpoint = os.path.join(self.directory, "mnt")
            with open(self.image, "wb") as f:
                f.truncate(self.size)
            # Inode tables and journal written now, not by a kernel thread during the measurements.
            subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", self.image],
                           check=True, capture_output=True)
            os.makedirs(self.mountpoint)
            self.path = self.mountpoint  # from here on, __exit__ unmounts
            # discard: a file deleted in it frees its blocks in the image too, so the gigabytes the rounds write and
            # delete are not written back to the disk under it while later rows run.
            subprocess.run(["mount", "-o", "loop,discard", self.image, self.mountpoint], check=True,
                           capture_output=True)
        except (OSError, subprocess.CalledProcessError) as error:
            detail = getattr(error, "stderr", b"") or b""
            self.reason = "cannot make it: %s %s" % (error, detail.decode("utf-8", "replace").strip())
            self.__exit__()
        except BaseException:  # interrupted: nothing left mounted
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        if self.path:
            if subprocess.run(["umount", self.mountpoint], capture_output=True).returncode != 0:
                subprocess.run(["umount", "--lazy", self.mountpoint], capture_output=True)
            self.path = None
        self._remove()
        return False

    def _remove(self):
        if self.directory and not os.path.ismount(self.mountpoint):
            shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------------------
# The daemon and its protocol


class Client:
    """A blocking client of the prefetchd protocol (docs/protocol.md): newline-delimited JSON over a Unix socket."""

    def __init__(self, path, timeout=120):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.reader = self.sock.makefile("rb")
        greeting = json.loads(self.reader.readline())
        if greeting.get("hello") != "prefetchd":
            raise RuntimeError("not a prefetchd greeting: %r" % greeting)
        self.next_id = 0

    def send(self, op, **fields):
        self.next_id += 1
        fields.update(id=self.next_id, op=op)
        self.sock.sendall(json.dumps(fields).encode() + b"\n")
        return self.next_id

    def receive(self):
        line = self.reader.readline()
        if not line:
            raise ConnectionError("the daemon closed the connection")
        return json.loads(line)

    def call(self, op, **fields):
        request = self.send(op, **fields)
        while True:
            reply = self.receive()
            if reply.get("id") == request:
                return reply

    def close(self):
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


def proc_status(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def fd_breakdown(pid):
    """Open descriptors of pid: total, Unix sockets, TCP sockets, others."""
    unix_inodes = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            parts = line.split()
            if len(parts) >= 7:
                unix_inodes.add(parts[6])
    total = unix = other_sockets = 0
    for name in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, name))
        except OSError:
            continue
        total += 1
        if target.startswith("socket:["):
            if target[8:-1] in unix_inodes:
                unix += 1
            else:
                other_sockets += 1
    return {"total": total, "unix_sockets": unix, "tcp_sockets": other_sockets}


class Daemon:
    """One prefetchd process in a directory of its own; stopped by pid."""

    def __init__(self, bins, directory, args=(), cache=None):
        self.bins = bins
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.socket = os.path.join(directory, "ctl.sock")
        self.cache = cache or os.path.join(directory, "cache")
        self.args = list(args)
        self.log_path = os.path.join(directory, "daemon.log")
        self.process = None
        self.final = None

    def start(self, wait=True):
        argv = [os.path.join(self.bins, "prefetchd"), "--socket", self.socket, "--cache-dir", self.cache] + self.args
        self.log_file = open(self.log_path, "ab")
        self.started_at = time.monotonic()
        self.process = PROCS.start(argv, stdin=subprocess.DEVNULL, stdout=self.log_file, stderr=self.log_file)
        if wait:
            self.wait_ready()
        return self

    @property
    def pid(self):
        return self.process.pid

    def wait_ready(self, timeout=60):
        """Polls until `status` answers; returns seconds from process start to the first greeting, the first
        `ping` reply and the first `status` reply."""
        deadline = time.monotonic() + timeout
        marks = {}
        while True:
            if self.process.poll() is not None:
                raise RuntimeError("prefetchd exited with %s; see %s:\n%s"
                                   % (self.process.returncode, self.log_path, self.tail()))
            try:
                client = Client(self.socket, timeout=timeout)
            except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, json.JSONDecodeError):
                if time.monotonic() > deadline:
                    raise RuntimeError("prefetchd did not answer within %d s; see %s" % (timeout, self.log_path))
                time.sleep(0.001)
                continue
            try:
                marks["greeting"] = time.monotonic() - self.started_at
                client.call("ping")
                marks["ping"] = time.monotonic() - self.started_at
                client.call("status")
                marks["status"] = time.monotonic() - self.started_at
                return marks
            finally:
                client.close()

    def call(self, op, **fields):
        client = Client(self.socket)
        try:
            return client.call(op, **fields)
        finally:
            client.close()

    def status(self):
        return self.call("status")["result"]

    def cpu(self):
        return proc_cpu(self.pid)

    def peak_rss_mb(self):
        return proc_status(self.pid, "VmHWM") / 1024

    def fds(self):
        return fd_breakdown(self.pid)

    def ctl(self, *args):
        return [os.path.join(self.bins, "prefetchctl"), "--socket", self.socket] + list(args)

    def tail(self, lines=15):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        """SIGTERM, wait; returns {cpu_s, peak_rss_mb, shutdown_s} read just before the signal."""
        if self.process is None:
            return self.final
        final = {}
        try:
            final = {"cpu_s": self.cpu(), "peak_rss_mb": self.peak_rss_mb()}
        except (OSError, TypeError):
            pass
        start = time.monotonic()
        rc = PROCS.stop(self.process, timeout=30)
        final["shutdown_s"] = time.monotonic() - start
        final["rc"] = rc
        self.log_file.close()
        self.process = None
        self.final = final
        return final


# --------------------------------------------------------------------------------------------------------------
# Origins


class ShapedOrigin:
    def __init__(self, root, rate, latency, logdir):
        self.root, self.rate, self.latency = root, rate, latency
        self.err = open(os.path.join(logdir, "shaped-origin-%d.log" % int(time.time() * 1000)), "wb")
        argv = [sys.executable, os.path.join(HERE, "shaped_origin.py"), "--root", root, "--rate", str(rate),
                "--latency", str(latency)]
        self.process = PROCS.start(argv, stdout=subprocess.PIPE, stderr=self.err)
        line = self.process.stdout.readline().decode()
        if not line.startswith("PORT "):
            PROCS.stop(self.process)
            raise RuntimeError("the shaped origin did not start: %r" % line)
        self.port = int(line.split()[1])
        self.base = "http://127.0.0.1:%d" % self.port

    def control(self, path):
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(("GET /%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    def stats(self):
        return self.control("__stats")

    def request_log(self):
        return self.control("__log")

    def reset(self):
        self.control("__reset")

    def stop(self):
        PROCS.stop(self.process)
        self.err.close()


NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
{user}
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 1000000;
    types {{ image/jpeg jpg; }}
    default_type application/octet-stream;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ expires 1d; }}
    }}
}}
"""


class Nginx:
    """nginx for raw throughput: keep-alive on, access log off, one worker, config in a temporary directory."""

    def __init__(self, root, tmp):
        os.makedirs(tmp, exist_ok=True)
        self.port = free_port()
        user = "user root;" if os.geteuid() == 0 else ""
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(tmp=tmp, port=self.port, root=root, user=user))
        self.err = open(os.path.join(tmp, "stderr.log"), "wb")
        self.process = PROCS.start(["nginx", "-c", conf, "-p", tmp], stdout=self.err, stderr=self.err)
        self.base = "http://127.0.0.1:%d" % self.port
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nginx did not start; see %s" % tmp)
                time.sleep(0.02)

    def stop(self):
        PROCS.stop(self.process, sig=signal.SIGQUIT)
        self.err.close()


# --------------------------------------------------------------------------------------------------------------
# Statistics


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def spread(values):
    """median, min, max (and n) of a list of figures."""
    ordered = sorted(values)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1], "n": n}


def rotated(items, k):
    k %= len(items)
    return items[k:] + items[:k]
