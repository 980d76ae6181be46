#!/usr/bin/env python3
"""The network lab (lab/README.md): real TCP between two network namespaces through an emulated link.

    client netns                                              server netns
    curl, prefetchd ... lab0 10.77.0.1 <-- delayline --> lab0 10.77.0.2 ... nginx: https :443 (HTTP/2 + 1.1),
                                     (delay, rate, buffer,                         https :8443 (HTTP/1.1),
                                      loss, outages)                               http :80 (HTTP/1.1)

The link is lab/delayline.c (user space: this kernel has no netem). The origin is Debian's nginx with a certificate
for origin.lab from a CA the lab makes, serving 800x600 JPEGs of about 205 KB and a few large files, and logging
every request as a JSON line with nginx's connection id. Needs root. Python standard library only.

From Python (bench/, stress/):

    sys.path.insert(0, "lab"); import lab
    with lab.Lab(name="bench", delay_ms=25, rate_mbit=20, buffer_bytes=64 * 1024) as net:
        net.run("client", ["curl", "--cacert", net.ca_file, net.url("/img/0001.jpg")])
        net.set_link(loss=0.05); net.link_down(20)
        net.access_log()

From a shell: `lab.py up --delay 25 --rate 20`, `lab.py exec client CMD...`, `lab.py link --down 20`, `lab.py down`.
"""

import argparse
import atexit
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DELAYLINE_SOURCE = os.path.join(HERE, "delayline.c")
DELAYLINE = os.path.join(REPO, ".build", "lab", "delayline")
STATE_ROOT = "/tmp/prefetchd-lab"

DEVICE = "lab0"
CLIENT_ADDR = "10.77.0.1"
SERVER_ADDR = "10.77.0.2"
HOST = "origin.lab"
CLIENT_HOST = "client.lab"
PORTS = {"https": 443, "https_h1": 8443, "http": 80}
SIDES = ("client", "server")
DIRECTIONS = ("both", "c2s", "s2c")
IMAGE_PATH = "/img/%04d.jpg"
LARGE_FILES = {"1M.bin": 1 << 20, "5M.bin": 5 << 20, "20M.bin": 20 << 20}


class LabError(Exception):
    """Something the lab could not do, said plainly."""


# --------------------------------------------------------------------------------------------------------------
# Processes: each one started in a session of its own and stopped by its id, never by name


def read_stat(pid):
    """(state, process group, start time) of `pid` from /proc/PID/stat, or None when no such process exists."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_time(pid):
    stat = read_stat(pid)
    return stat[2] if stat else None


def group_running(pgid):
    """Whether a process of group `pgid` still runs (a zombie waiting for its parent to reap it does not)."""
    for entry in os.listdir("/proc"):
        stat = read_stat(int(entry)) if entry.isdigit() else None
        if stat and stat[1] == pgid and stat[0] != "Z":
            return True
    return False


def stop_group(pid, started, sig=signal.SIGTERM, timeout=5.0):
    """Stops the session we started as `pid` (its leader) and what it started; kills what is left after
    `timeout`. When `pid` now belongs to another process (another start time), nothing is signalled."""
    leader = read_stat(pid)
    if leader and leader[2] != started:
        return
    for signal_number in (sig, signal.SIGKILL):
        try:
            os.killpg(pid, signal_number)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)  # reaps it when it is our child
            except ChildProcessError:
                pass
            if not group_running(pid):
                return
            time.sleep(0.02)


def sh(argv, check=True, **kwargs):
    """Runs a setup command; a failure names the command and what it printed."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
    if check and result.returncode != 0:
        raise LabError("%s failed (%d): %s" % (" ".join(argv), result.returncode, result.stdout.strip()))
    return result


# --------------------------------------------------------------------------------------------------------------
# What the origin serves and how


def build_delayline():
    """Compiles lab/delayline.c into .build/lab/delayline when the binary is missing or older than the source."""
    if os.path.exists(DELAYLINE) and os.path.getmtime(DELAYLINE) >= os.path.getmtime(DELAYLINE_SOURCE):
        return DELAYLINE
    os.makedirs(os.path.dirname(DELAYLINE), exist_ok=True)
    scratch = "%s.%d" % (DELAYLINE, os.getpid())
    sh(["gcc", "-O2", "-Wall", "-Wextra", "-o", scratch, DELAYLINE_SOURCE])
    os.replace(scratch, DELAYLINE)
    return DELAYLINE


def make_images(docroot, count):
    """`count` distinct 800x600 JPEGs of about 205 KB at /img/NNNN.jpg: eight plasma pictures from ImageMagick,
    each copy made unique by a JPEG comment with its number. Each is dated 30 days back (nginx's Last-Modified), as
    an image that has been on a server for a while: RFC 9111's heuristic gives a copy 10 % of that age to stay fresh
    (the daemon keeps at most a day). A file written seconds before would go stale within a second, and a scrolling
    view (L4) would revalidate rows its look-ahead had just fetched."""
    published = time.time() - 30 * 86400
    images = os.path.join(docroot, "img")
    os.makedirs(images)
    bases = []
    for seed in range(1, 9):
        path = os.path.join(docroot, "base%d.jpg" % seed)
        sh(["convert", "-seed", str(seed), "-size", "800x600", "plasma:fractal", "-quality", "92", path])
        with open(path, "rb") as f:
            bases.append(f.read())
        os.unlink(path)
    for number in range(count):
        text = b"prefetchd lab image %d" % number
        comment = b"\xff\xfe" + (len(text) + 2).to_bytes(2, "big") + text
        base = bases[number % len(bases)]
        path = os.path.join(docroot, IMAGE_PATH.lstrip("/") % number)
        with open(path, "wb") as f:
            f.write(base[:2] + comment + base[2:])
        os.utime(path, (published, published))


def make_large_files(docroot):
    large = os.path.join(docroot, "large")
    os.makedirs(large)
    rng = random.Random(16)
    for name, size in LARGE_FILES.items():
        with open(os.path.join(large, name), "wb") as f:
            f.write(rng.randbytes(size))


def make_certificates(directory):
    """A CA (ca.pem) and a certificate for origin.lab and the server's address signed by it (origin.pem/.key)."""
    ca_key, ca_pem = os.path.join(directory, "ca.key"), os.path.join(directory, "ca.pem")
    key, csr, pem = (os.path.join(directory, "origin" + ext) for ext in (".key", ".csr", ".pem"))
    extensions = os.path.join(directory, "origin.ext")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sh(["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_pem, "-days", "30",
        "-subj", "/CN=prefetchd lab CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    sh(["openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=" + HOST])
    with open(extensions, "w") as f:
        f.write("subjectAltName=DNS:%s,IP:%s\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n" % (HOST, SERVER_ADDR))
    sh(["openssl", "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial", "-days", "30",
        "-extfile", extensions, "-out", pem])
    return ca_pem, pem, key


NGINX_CONF = """\
worker_processes 1;
daemon off;
user root;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format lab escape=json '{{"msec":$msec,"connection":$connection,'
        '"connection_requests":$connection_requests,"request":"$request","status":$status,'
        '"bytes_sent":$bytes_sent,"http2":"$http2","protocol":"$server_protocol","range":"$http_range",'
        '"port":$server_port,"remote":"$remote_addr:$remote_port","request_time":$request_time,'
        '"tls":"$ssl_protocol"}}';
    access_log {dir}/access.log lab;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests {keepalive_requests};
    types {{ image/jpeg jpg; }}
    default_type application/octet-stream;
    client_body_temp_path {dir}/nginx-tmp/client_body;
    proxy_temp_path {dir}/nginx-tmp/proxy;
    fastcgi_temp_path {dir}/nginx-tmp/fastcgi;
    uwsgi_temp_path {dir}/nginx-tmp/uwsgi;
    scgi_temp_path {dir}/nginx-tmp/scgi;
    ssl_certificate {certificate};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    root {docroot};
    server {{ listen {https} ssl http2; server_name {host}; }}
    server {{ listen {https_h1} ssl; server_name {host}; }}
    server {{ listen {http}; server_name {host}; }}
    include {dir}/conf.d/*.conf;  # extra servers a test adds, then reload_origin()
}}
"""


# --------------------------------------------------------------------------------------------------------------
# The lab


def check_link(delay_ms=None, rate_mbit=None, buffer_bytes=None, loss=None):
    """Link settings in the units people use, checked; returns the delay line's keys and values."""
    settings = {}
    if delay_ms is not None:
        if not 0 <= delay_ms <= 60000:
            raise LabError("delay must be 0 to 60000 ms (one way), not %r" % delay_ms)
        settings["delay_us"] = round(delay_ms * 1000)
    if rate_mbit is not None:
        if not 0 <= rate_mbit <= 100000:
            raise LabError("rate must be 0 (unlimited) to 100000 Mbit/s, not %r" % rate_mbit)
        settings["rate_bps"] = round(rate_mbit * 1e6)
    if buffer_bytes is not None:
        if buffer_bytes != 0 and not 1500 <= buffer_bytes <= 1 << 30:
            raise LabError("buffer must be 0 (unlimited) or 1500 bytes to 1 GiB, not %r" % buffer_bytes)
        settings["buffer_bytes"] = int(buffer_bytes)
    if loss is not None:
        if not 0 <= loss <= 1:
            raise LabError("loss is a probability from 0 to 1, not %r" % loss)
        settings["loss"] = loss
    return settings


class Lab:
    """One lab: two namespaces, the delay line, nginx. `start()` (or `with`) brings it up, `stop()` takes it all
    down again; a lab started by another process (`lab.py up`) is reached with `Lab.attach(name)`."""

    def __init__(self, name="lab", delay_ms=25.0, rate_mbit=20.0, buffer_bytes=64 * 1024, loss=0.0, images=200,
                 keepalive_requests=1000, congestion_control=None):
        if not (name.replace("-", "").isalnum() and name.isascii() and 0 < len(name) <= 20):
            raise LabError("a lab name is 1 to 20 letters, digits or '-', not %r" % name)
        if not 1 <= images <= 100000:
            raise LabError("images must be 1 to 100000, not %r" % images)
        if not 1 <= keepalive_requests <= 1 << 31:
            raise LabError("keepalive_requests must be 1 to 2^31, not %r" % keepalive_requests)
        if congestion_control:
            with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
                allowed = f.read().split()
            if congestion_control not in allowed:  # a namespace may only choose from these
                raise LabError("congestion control %r is not allowed in a namespace here "
                               "(net.ipv4.tcp_allowed_congestion_control: %s)" % (congestion_control, " ".join(allowed)))
        self.name = name
        self.dir = os.path.join(STATE_ROOT, name)
        self.netns = {"client": name + "-client", "server": name + "-server"}
        self.link = {"delay_ms": delay_ms, "rate_mbit": rate_mbit, "buffer_bytes": buffer_bytes, "loss": loss}
        check_link(**self.link)
        self.images = images
        self.keepalive_requests = keepalive_requests
        self.congestion_control = congestion_control
        self.ca_file = os.path.join(self.dir, "ca.pem")
        self.docroot = os.path.join(self.dir, "www")
        self.control_socket = os.path.join(self.dir, "delayline.sock")
        self.conf_dir = os.path.join(self.dir, "conf.d")  # nginx includes conf.d/*.conf inside `http`
        self.pids = {}  # "delayline"/"nginx" -> [pid, start time]
        self.processes = []  # processes started with popen(), stopped with the lab
        self.running = False

    # ---- bringing it up and down

    def start(self):
        state = os.path.join(self.dir, "lab.json")
        if os.path.exists(state):
            old = Lab.attach(self.name)
            if old.alive():
                raise LabError("lab %r is already up (python3 lab/lab.py down --name %s)" % (self.name, self.name))
            old.stop()  # what a killed owner left behind
        self.running = True
        atexit.register(self.stop)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _interrupted)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self):
        delayline = build_delayline()
        shutil.rmtree(self.dir, ignore_errors=True)  # a start that died before saving its state
        os.makedirs(os.path.join(self.dir, "nginx-tmp"))
        os.makedirs(self.conf_dir)
        self._save()  # from here on, `down` or the next start can clean up after a killed owner
        os.makedirs(self.docroot)
        make_images(self.docroot, self.images)
        make_large_files(self.docroot)
        _, certificate, key = make_certificates(self.dir)
        with open(os.path.join(self.dir, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(dir=self.dir, docroot=self.docroot, certificate=certificate, key=key,
                                      host=HOST, keepalive_requests=self.keepalive_requests, **PORTS))

        hosts = {"client": "%s %s\n" % (SERVER_ADDR, HOST), "server": "%s %s\n" % (CLIENT_ADDR, CLIENT_HOST)}
        for side in SIDES:
            ns = self.netns[side]
            sh(["ip", "netns", "add", ns])
            os.makedirs("/etc/netns/" + ns, exist_ok=True)
            with open("/etc/netns/%s/hosts" % ns, "w") as f:
                f.write("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n" + hosts[side])

        log = open(os.path.join(self.dir, "delayline.log"), "wb")
        process = subprocess.Popen([delayline, self.control_socket, "/run/netns/" + self.netns["client"],
                                    "/run/netns/" + self.netns["server"], DEVICE],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.pids["delayline"] = [process.pid, start_time(process.pid)]
        self._save()
        os.setpriority(os.PRIO_PROCESS, process.pid, -10)  # the network: builds on the machine wait, not packets
        self._wait_for(lambda: os.path.exists(self.control_socket), process, "the delay line", "delayline.log")

        if not self.congestion_control:  # the kernel's default, which new namespaces inherit
            self.congestion_control = sh(["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip()
        for side, here, there in (("client", CLIENT_ADDR, SERVER_ADDR), ("server", SERVER_ADDR, CLIENT_ADDR)):
            ns = self.netns[side]
            sh(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv4.tcp_congestion_control=" + self.congestion_control])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            sh(["ip", "-n", ns, "addr", "add", here, "peer", there, "dev", DEVICE])
            sh(["ip", "-n", ns, "link", "set", DEVICE, "mtu", "1500", "up"])
        self.set_link(**self.link)

        self._start_nginx()
        probe = self.run("client", ["curl", "-sS", "-o", "/dev/null", "--max-time", "5", "--cacert", self.ca_file,
                                    self.url(IMAGE_PATH % 0)],
                         capture_output=True, text=True)
        if probe.returncode != 0:
            raise LabError("the client cannot fetch from the origin: %s" % probe.stderr.strip())

    def _start_nginx(self):
        log = open(os.path.join(self.dir, "nginx.log"), "ab")
        process = subprocess.Popen(self.command("server", ["nginx", "-c", os.path.join(self.dir, "nginx.conf"),
                                                           "-p", self.dir]),
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.pids["nginx"] = [process.pid, start_time(process.pid)]
        self._save()
        # nginx writes its pid file once it listens on every port
        self._wait_for(lambda: os.path.exists(os.path.join(self.dir, "nginx.pid")), process, "nginx",
                       "nginx.log", "nginx-error.log")

    def restart_origin(self):
        """Stops nginx (SIGTERM: its connections close mid-transfer) and starts it again with the same
        configuration; returns once it listens again."""
        stop_group(*self.pids["nginx"])
        try:
            os.unlink(os.path.join(self.dir, "nginx.pid"))
        except FileNotFoundError:
            pass
        self._start_nginx()

    def workers(self):
        """The pids of nginx's worker processes (the master's children)."""
        master = self.pids["nginx"][0]
        found = []
        for entry in os.listdir("/proc"):
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[1] == str(master) and fields[0] != "Z":
                found.append(int(entry))
        return sorted(found)

    def reload_origin(self, timeout=10.0):
        """Makes nginx read its configuration again (SIGHUP to the master: new workers, the old ones finish
        gracefully), e.g. after writing a server into conf_dir; returns once a new worker runs. A configuration
        nginx refuses raises LabError with its error log's last lines."""
        error_log = os.path.join(self.dir, "nginx-error.log")
        logged = os.path.getsize(error_log) if os.path.exists(error_log) else 0
        before = set(self.workers())
        os.kill(self.pids["nginx"][0], signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while not set(self.workers()) - before:
            text = ""
            if os.path.exists(error_log):
                with open(error_log, errors="replace") as f:
                    f.seek(logged)
                    text = f.read()
            if "[emerg]" in text or time.monotonic() > deadline:
                raise LabError("nginx did not reload: %s" % (text.strip()[-2000:] or "no new worker"))
            time.sleep(0.02)

    def _wait_for(self, ready, process, what, *logs, timeout=10.0):
        """Waits until ready(); when the process exits first or takes too long, says so with its logs."""
        deadline = time.monotonic() + timeout
        while not ready():
            if process.poll() is not None or time.monotonic() > deadline:
                text = ""
                for name in logs:
                    if os.path.exists(os.path.join(self.dir, name)):
                        with open(os.path.join(self.dir, name), errors="replace") as f:
                            text += f.read()[-2000:]
                raise LabError("%s did not start:\n%s" % (what, text.strip()))
            time.sleep(0.01)

    def stop(self):
        """Stops what the lab started (by pid), deletes the namespaces, the hosts files and the lab's directory.
        Safe to call more than once and on a half-started lab."""
        if not self.running:
            return
        self.running = False
        for process in self.processes:
            self.stop_process(process)
        for what in ("nginx", "delayline"):
            if what in self.pids:
                stop_group(*self.pids[what])
        for side in SIDES:
            ns = self.netns[side]
            left = sh(["ip", "netns", "pids", ns], check=False)
            if left.returncode == 0 and left.stdout.split():
                print("lab: pids %s still run in %s (the lab did not start them); the namespace goes when they end"
                      % (", ".join(left.stdout.split()), ns), file=sys.stderr)
            sh(["ip", "netns", "delete", ns], check=False)
            shutil.rmtree("/etc/netns/" + ns, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        for parent in ("/etc/netns", STATE_ROOT):
            try:
                os.rmdir(parent)  # only when no other lab (or anything else) uses it
            except OSError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @classmethod
    def attach(cls, name="lab"):
        """The lab `name` brought up by another process (its state in /tmp/prefetchd-lab/NAME/lab.json)."""
        try:
            with open(os.path.join(STATE_ROOT, name, "lab.json")) as f:
                state = json.load(f)
        except FileNotFoundError:
            raise LabError("no lab named %r is up (python3 lab/lab.py up --name %s)" % (name, name)) from None
        except ValueError:
            state = {}  # damaged: `down` still deletes the namespaces and the directory, and stops nothing
        lab = cls(name=name, images=state.get("image_count", 1),
                  keepalive_requests=state.get("keepalive_requests", 1000),
                  congestion_control=state.get("congestion_control"))
        lab.link.update(state.get("link", {}))
        lab.pids, lab.running = state.get("pids", {}), True
        return lab

    def alive(self):
        return all(start_time(pid) == started for pid, started in self.pids.values()) and bool(self.pids)

    def _save(self):
        with open(os.path.join(self.dir, "lab.json.tmp"), "w") as f:
            json.dump(self.info(), f, indent=2)
        os.replace(os.path.join(self.dir, "lab.json.tmp"), os.path.join(self.dir, "lab.json"))

    # ---- running things on either side

    def command(self, side, argv):
        """argv run inside `side`'s namespace (with that side's /etc/hosts)."""
        if side not in SIDES:
            raise LabError("side is client or server, not %r" % side)
        return ["ip", "netns", "exec", self.netns[side], *argv]

    def run(self, side, argv, **kwargs):
        """subprocess.run of argv in `side`'s namespace."""
        return subprocess.run(self.command(side, argv), **kwargs)

    def popen(self, side, argv, **kwargs):
        """subprocess.Popen of argv in `side`'s namespace, in a session of its own; stopped with the lab unless
        stopped before (stop_process)."""
        kwargs.setdefault("start_new_session", True)
        process = subprocess.Popen(self.command(side, argv), **kwargs)
        self.processes.append(process)
        return process

    def stop_process(self, process, sig=signal.SIGTERM):
        if process.poll() is None:
            stop_group(process.pid, start_time(process.pid), sig)
        process.wait()
        return process.returncode

    # ---- the link

    def control(self, line):
        """One command to the delay line (see lab/delayline.c); returns its reply after "ok"."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            try:
                s.connect(self.control_socket)
            except OSError as error:
                raise LabError("the delay line of lab %r does not answer: %s" % (self.name, error)) from None
            s.sendall(line.encode() + b"\n")
            reply = s.makefile("rb").readline().decode().strip()
        if not reply.startswith("ok"):
            raise LabError("delay line: %s" % reply)
        return reply[2:].strip()

    def set_link(self, direction="both", delay_ms=None, rate_mbit=None, buffer_bytes=None, loss=None):
        """Changes the link now (None: unchanged); direction is both, c2s (client to server) or s2c."""
        if direction not in DIRECTIONS:
            raise LabError("direction is one of %s, not %r" % (", ".join(DIRECTIONS), direction))
        settings = check_link(delay_ms, rate_mbit, buffer_bytes, loss)
        if settings:
            self.control("set %s %s" % (direction, " ".join("%s=%s" % item for item in settings.items())))
        if direction == "both":
            changed = {"delay_ms": delay_ms, "rate_mbit": rate_mbit, "buffer_bytes": buffer_bytes, "loss": loss}
            self.link.update({k: v for k, v in changed.items() if v is not None})
            if os.path.exists(os.path.join(self.dir, "lab.json")):
                self._save()

    def link_down(self, seconds):
        """Takes the link down for `seconds` (every packet dropped both ways); it comes back by itself."""
        if not 0 < seconds <= 86400:
            raise LabError("the link goes down for more than 0 and at most 86400 seconds, not %r" % seconds)
        self.control("down %s" % seconds)

    def link_up(self):
        self.control("down 0")

    def seed(self, number):
        """Seeds the loss generator, for repeatable runs."""
        self.control("seed %d" % number)

    def stats(self):
        """The delay line's settings and counters: {"c2s": {...}, "s2c": {...}, "cpu_user_us": ..., ...}."""
        result = {"c2s": {}, "s2c": {}}
        for word in self.control("stats").split():
            key, value = word.split("=", 1)
            number = float(value) if "." in value or "e" in value else int(value)
            if "." in key:
                direction, key = key.split(".", 1)
                result[direction][key] = number
            else:
                result[key] = number
        return result

    def delayline_cpu_seconds(self):
        stats = self.stats()
        return (stats["cpu_user_us"] + stats["cpu_system_us"]) / 1e6

    # ---- the origin

    def url(self, path, origin="https"):
        """https://origin.lab/PATH (TLS, HTTP/2 and 1.1), https_h1 (TLS, HTTP/1.1 only, :8443) or http (:80)."""
        if origin not in PORTS:
            raise LabError("origin is one of %s, not %r" % (", ".join(PORTS), origin))
        scheme = "http" if origin == "http" else "https"
        port = "" if origin in ("https", "http") else ":%d" % PORTS[origin]
        return "%s://%s%s%s" % (scheme, HOST, port, path)

    def image_urls(self, origin="https"):
        return [self.url(IMAGE_PATH % n, origin) for n in range(self.images)]

    def access_log(self):
        """Every request nginx logged so far, oldest first: dicts with connection, connection_requests, request,
        status, bytes_sent, http2 ("h2" or ""), protocol, range, port, remote, msec, request_time, tls (the TLS
        version, e.g. "TLSv1.3"; "" on :80)."""
        try:
            # errors="replace": nginx logs a TLS hello sent to a plain-HTTP port as raw bytes
            with open(os.path.join(self.dir, "access.log"), errors="replace") as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def tagged_requests(self, tag):
        """The access log's entries for URLs whose query starts with `tag-` (how tests and benchmarks mark their
        URLs), oldest first."""
        found = []
        for entry in self.access_log():
            parts = entry["request"].split(" ")
            if len(parts) >= 3 and parts[1].partition("?")[2].startswith(tag + "-"):
                found.append(entry)
        return found

    def info(self):
        """Everything a test or benchmark needs to use the lab, JSON-ready (`lab.py up --json` prints it)."""
        return {
            "name": self.name,
            "dir": self.dir,
            "netns": self.netns,
            "exec": {side: self.command(side, []) for side in SIDES},
            "client_addr": CLIENT_ADDR,
            "server_addr": SERVER_ADDR,
            "host": HOST,
            "urls": {origin: self.url("", origin) for origin in PORTS},
            "ca_file": self.ca_file,
            "resolve": ["%s:%d:%s" % (HOST, port, SERVER_ADDR) for port in PORTS.values()],
            "hosts_file": "/etc/netns/%s/hosts" % self.netns["client"],
            "docroot": self.docroot,
            "image_path": IMAGE_PATH,
            "image_count": self.images,
            "large_files": ["/large/" + name for name in LARGE_FILES],
            "access_log": os.path.join(self.dir, "access.log"),
            "error_log": os.path.join(self.dir, "nginx-error.log"),
            "control_socket": self.control_socket,
            "link": self.link,
            "congestion_control": self.congestion_control,
            "keepalive_requests": self.keepalive_requests,
            "pids": self.pids,
        }


def _interrupted(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


# --------------------------------------------------------------------------------------------------------------
# The command line


def byte_count(text):
    """64K, 1M, 65536."""
    units = {"K": 1024, "M": 1024 * 1024}
    try:
        if text[-1:].upper() in units:
            return int(float(text[:-1]) * units[text[-1].upper()])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a byte count like 65536, 64K or 1M, not %r" % text) from None


def probability(text):
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a probability like 0.05 or 5%%, not %r" % text) from None


def describe_link(delay_ms, rate_mbit, buffer_bytes, loss):
    return "%g ms one way, %s, %s, loss %g" % (
        delay_ms, "%g Mbit/s" % rate_mbit if rate_mbit else "unlimited rate",
        "%d-byte buffer" % buffer_bytes if buffer_bytes else "unlimited buffer", loss)


def usage_text(lab):
    info = lab.info()
    me = "python3 lab/lab.py"
    named = "" if lab.name == "lab" else " --name " + lab.name
    return "\n".join([
        "lab %r is up: %s, both directions; TCP congestion control %s"
        % (lab.name, describe_link(**lab.link), lab.congestion_control),
        "  origins:  %s  (HTTP/2 + 1.1)   %s  (HTTP/1.1)   %s" % tuple(info["urls"].values()),
        "  images:   %s .. %s  (%d JPEGs, 800x600, ~205 KB); large files: %s"
        % (IMAGE_PATH % 0, IMAGE_PATH % (lab.images - 1), lab.images, ", ".join(info["large_files"])),
        "  CA:       %s   hosts: %s   or curl --resolve %s" % (info["ca_file"], info["hosts_file"], info["resolve"][0]),
        "  log:      %s  (one JSON line per request, with nginx's connection id)" % info["access_log"],
        "run:        %s exec%s client curl --cacert %s %s" % (me, named, info["ca_file"], lab.url(IMAGE_PATH % 1)),
        "            %s exec%s server ss -tni" % (me, named),
        "change:     %s link%s --delay 50 --rate 10 --loss 0.01   |   --down 20   |   --up   |   stats" % (me, named),
        "stop:       %s down%s" % (me, named),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description="The prefetchd network lab (lab/README.md). Needs root.")
    commands = parser.add_subparsers(dest="verb", required=True)

    def with_name(sub):
        sub.add_argument("--name", default="lab", help="which lab (default: lab); several can run at once")
        return sub

    def link_options(sub, defaults):
        sub.add_argument("--delay", type=float, default=defaults[0], help="one-way delay in ms")
        sub.add_argument("--rate", type=float, default=defaults[1], help="Mbit/s, 0 for unlimited")
        sub.add_argument("--buffer", type=byte_count, default=defaults[2], help="bottleneck buffer (64K), 0: none")
        sub.add_argument("--loss", type=probability, default=defaults[3], help="packet loss, 0.05 or 5%%")

    up = with_name(commands.add_parser("up", help="start a lab that stays up until `down`"))
    link_options(up, (25.0, 20.0, 64 * 1024, 0.0))
    up.add_argument("--images", type=int, default=200, help="how many 205 KB JPEGs to serve (default 200)")
    up.add_argument("--keepalive-requests", type=int, default=1000, help="nginx keepalive_requests")
    up.add_argument("--cc", help="TCP congestion control in both namespaces (default: the kernel's)")
    up.add_argument("--json", action="store_true", help="print the lab's details as JSON instead")
    run = with_name(commands.add_parser("exec", help="run a command in the client's or the server's namespace"))
    run.add_argument("side", choices=SIDES)
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    link = with_name(commands.add_parser("link", help="change the link of a running lab"))
    link.add_argument("--dir", default="both", choices=DIRECTIONS, help="c2s: client to server; s2c: back")
    link_options(link, (None, None, None, None))
    link.add_argument("--down", type=float, metavar="SECONDS", help="take the link down for SECONDS")
    link.add_argument("--up", action="store_true", help="bring the link up now")
    with_name(commands.add_parser("stats", help="the link's settings and counters, as JSON"))
    with_name(commands.add_parser("info", help="the lab's details, as JSON"))
    with_name(commands.add_parser("down", help="stop the lab and delete everything it made"))
    commands.add_parser("build", help="compile the delay line")
    args = parser.parse_args(argv)

    try:
        if args.verb == "build":
            print("delay line: %s" % build_delayline())
            print("start a lab: python3 lab/lab.py up --delay 25 --rate 20 --buffer 64K")
        elif args.verb == "up":
            lab = Lab(args.name, args.delay, args.rate, args.buffer, args.loss, args.images,
                      args.keepalive_requests, args.cc)
            lab.start()
            atexit.unregister(lab.stop)  # stays up: `down` stops it
            print(json.dumps(lab.info(), indent=2) if args.json else usage_text(lab))
        elif args.verb == "exec":
            if not args.cmd:
                parser.error("exec needs a command")
            command = Lab.attach(args.name).command(args.side, args.cmd)
            os.execvp(command[0], command)
        elif args.verb == "link":
            lab = Lab.attach(args.name)
            lab.set_link(args.dir, args.delay, args.rate, args.buffer, args.loss)
            if args.down is not None:
                lab.link_down(args.down)
            if args.up:
                lab.link_up()
            stats = lab.stats()
            print("\n".join("%s: %s" % (d, describe_link(stats[d]["delay_us"] / 1000, stats[d]["rate_bps"] / 1e6,
                                                          stats[d]["buffer_bytes"], stats[d]["loss"]))
                            for d in ("c2s", "s2c"))
                  + ("\nthe link is down for %.1f s more" % (stats["down_for_ms"] / 1000) if stats["down_for_ms"] else ""))
        elif args.verb == "stats":
            print(json.dumps(Lab.attach(args.name).stats(), indent=2))
        elif args.verb == "info":
            print(json.dumps(Lab.attach(args.name).info(), indent=2))
        elif args.verb == "down":
            Lab.attach(args.name).stop()
            print("lab %r is down" % args.name)
    except LabError as error:
        print("lab: %s" % error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
