"""Group 7, network (issue 20): prefetchd on the network lab (lab/README.md), where packets are lost, links go down,
servers restart, send GOAWAY, reset streams or never answer, certificates are wrong and names do not resolve.

One lab named `snet` (two namespaces, the delay line, nginx with extra servers in conf.d, lab/fault_servers.py and
lab/dns_server.py in the server namespace, a resolv.conf for the client namespace). One daemon runs in the client
namespace through the loss, outage, server, TLS and DNS scenarios (its RSS and descriptors are compared before and
after); the kill -9 scenario has a daemon of its own. Every file's SHA-256 is compared with the docroot's. The lab,
its servers and the daemons are stopped by PID and the namespaces deleted, also on failure.
"""
import collections
import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

from lib import Daemon, Failed, log, outcome, peak_rss_kib, proc_status, scratch, wait_until
from groups_chaos import queue_all

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lab"))
import lab  # noqa: E402

GROUP = "network"
LAB_NAME = "snet"
LAB_DIR = os.path.dirname(os.path.abspath(lab.__file__))
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                   "NO_PROXY")
TOOLS = ("ip", "nginx", "openssl", "convert", "gcc", "curl")

# The shared daemon's settings: a 6 s stall (low_speed_time) ends a transfer cut by an outage, so the retry must
# resume with Range; 6 attempts outlast a 20 s outage (a stall and two connect timeouts); a 5 s connect timeout
# (also the TLS handshake) keeps the silent servers' rows short.
LOW_SPEED_TIME = 6
CONNECT_TIMEOUT = 5
MAX_ATTEMPTS = 6
DAEMON_ARGS = ("--allow-non-images", "yes", "--max-bytes", "64M", "--low-speed-time", str(LOW_SPEED_TIME),
               "--connect-timeout", str(CONNECT_TIMEOUT), "--max-attempts", str(MAX_ATTEMPTS))
GET_TIMEOUT = 60  # prefetchctl get --timeout of the urgent gets under loss: each answers within it
TRANSIENT = ("timeout", "network", "host_paused")  # what a get may answer while the network fails

# Extra servers (conf.d): the TLS faults, HTTP/2 with keepalive_requests 3, an HTTP/2 proxy whose upstream cuts
# bodies; lab/fault_servers.py: a TCP server that never speaks, a TLS server that never answers, the cutting upstream.
TLS_PORTS = {"expired": 9441, "other_name": 9442, "unknown_ca": 9443, "tls1_0": 9444, "plain_http": 9445}
TLS_TITLES = {"expired": "expired certificate", "other_name": "certificate for another name",
              "unknown_ca": "certificate from an unknown CA", "tls1_0": "TLS 1.0-only server",
              "plain_http": "plain HTTP on the TLS port"}
# What the message must contain to name the cause (curl's and OpenSSL's words).
TLS_CAUSES = {"expired": r"expired", "other_name": r"subject name|does not match|hostname mismatch",
              "unknown_ca": r"issuer|self.signed|unknown ca|unable to get",
              "tls1_0": r"protocol version|unsupported protocol|no protocols available",
              "plain_http": r"wrong version number|plain HTTP|http request"}
GOAWAY_PORT, RESET_PORT, SILENT_PORT, TLS_SILENT_PORT, CUTTING_PORT = 9446, 9447, 9448, 9449, 9450
DNS_NAME = "dns.lab"  # resolved by lab/dns_server.py (not in the hosts file)
TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT",
              "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


class LabDaemon(Daemon):
    """lib.Daemon in the lab's client namespace (`ip netns exec` execs it: the PID is the daemon's), trusting the lab
    CA, without the host's proxy variables; its socket is a file, reached from here."""

    def __init__(self, net, processes, binary, workdir, *extra, **kwargs):
        super().__init__(processes, binary, workdir, "--ca-file", net.ca_file, *extra, **kwargs)
        self.net = net
        self.ctl_binary = os.path.join(os.path.dirname(binary), "prefetchctl")

    log_level = "info"

    def argv(self):
        return self.net.command("client", super().argv())

    def environment(self):
        return {k: v for k, v in super().environment().items() if k not in PROXY_VARIABLES}

    def call(self, request, timeout=30):
        client = self.client(timeout)
        try:
            return client.call(request, timeout)
        finally:
            client.close()

    def status(self):
        return self.call({"op": "status"})["result"]

    def errors_by_code(self):
        """prefetchd_fetch_errors_total by code: failed attempts so far."""
        text = self.call({"op": "metrics"})["result"]["text"]
        return {m.group(1): int(float(m.group(2)))
                for m in re.finditer(r'^prefetchd_fetch_errors_total\{code="([^"]+)"\} (\S+)$', text, re.M)}

    def get(self, url, timeout=None, **extra):
        """One urgent get on a connection of its own: (outcome, seconds, reply); `timeout` None waits up to 10 min."""
        began = time.monotonic()
        client = self.client(timeout=(timeout or 600) + 5)
        try:
            reply = client.call(dict({"op": "get", "url": url}, **extra), timeout or 600)
        except Failed:
            reply = {"ok": False, "error": {"code": "no reply", "message": f"no reply within {timeout} s"}}
        finally:
            client.close()
        return outcome(reply), time.monotonic() - began, reply

    def ctl_get(self, url, timeout):
        """`prefetchctl --json get --timeout T URL`: (exit status, code or "ok", seconds, message)."""
        began = time.monotonic()
        result = subprocess.run([self.ctl_binary, "--socket", self.socket, "--json", "get", "--timeout", str(timeout),
                                 url], capture_output=True, text=True, timeout=timeout + 60)
        seconds = time.monotonic() - began
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = {"error": {"code": "?", "message": (result.stdout + result.stderr).strip()[-200:]}}
        error = answer.get("error")
        return result.returncode, (error or {}).get("code", "ok" if "path" in answer else "?"), seconds, \
            (error or {}).get("message", "")

    def resources(self):
        """(VmRSS KiB, open descriptors, its TCP connections as [(server port, state)])."""
        return proc_status(self.pid, "VmRSS"), len(os.listdir(f"/proc/{self.pid}/fd")), self.tcp_connections()

    def tcp_connections(self):
        """The daemon's TCP sockets, from its namespace's table (/proc/PID/net/tcp) by socket inode."""
        by_inode = {}
        with open(f"/proc/{self.pid}/net/tcp") as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                by_inode[fields[9]] = (int(fields[2].split(":")[1], 16), TCP_STATES.get(fields[3], fields[3]))
        found = []
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in by_inode:
                found.append(by_inode[target[8:-1]])
        return sorted(found)


class Scenario:
    """What every scenario shares: the lab, the table, the daemon, the docroot's hashes, nginx's log by tag."""

    def __init__(self, args, table, processes, work, net):
        self.args, self.table, self.processes, self.work, self.net = args, table, processes, work, net
        self.quick = args.quick
        self.hashes = {}

    def add(self, scenario, expected, observed, ok):
        return self.table.add(GROUP, scenario, expected, observed, ok)

    def sha(self, url):
        """The SHA-256 of the docroot file a lab URL serves (query ignored; /reset/ is the cutting upstream's view)."""
        path = url.split("://", 1)[1].split("/", 1)[1].split("?")[0]
        path = path[len("reset/"):] if path.startswith("reset/") else path
        if path not in self.hashes:
            with open(os.path.join(self.net.docroot, path), "rb") as f:
                self.hashes[path] = hashlib.sha256(f.read()).hexdigest()
        return self.hashes[path]

    def image(self, number, tag, origin="https", port=None):
        url = self.net.url(lab.IMAGE_PATH % (number % self.net.images), origin) + f"?{tag}-{number}"
        return url.replace("origin.lab/", f"origin.lab:{port}/", 1) if port else url

    def large(self, name, tag, number=0, origin="https", port=None):
        url = self.net.url("/large/" + name, origin) + f"?{tag}-{number}"
        return url.replace("origin.lab/", f"origin.lab:{port}/", 1) if port else url

    def requests(self, tag):
        return self.net.tagged_requests(tag)

    def queue(self, daemon, urls):
        """Queues `urls`; the acknowledged ones (queued, already, cached)."""
        acked = set()
        for start in range(0, len(urls), 1000):
            reply = daemon.call({"op": "queue", "urls": urls[start:start + 1000]})
            if not reply.get("ok"):
                raise Failed(f"queue answered {reply.get('error')}")
            acked |= {i["url"] for i in reply["result"]["results"] if i["status"] in ("queued", "already", "cached")}
        return acked

    def drained(self, daemon, timeout, watch=None):
        """Waits until nothing is waiting, running, delayed or in the backlog; `watch(status)` is called each time."""
        def idle():
            status = daemon.status()
            daemon.sample()
            if watch:
                watch(status)
            busy = (status["fast"]["waiting"] + status["fast"]["running"] + status["slow"]["waiting"]
                    + status["slow"]["running"] + status["backlog"] + status["delayed"])
            return status if busy == 0 else None
        return wait_until(idle, timeout, interval=0.25, what="the daemon to drain")

    def check_cached(self, daemon, urls):
        """Offline gets: the URLs not cached (with their outcome) and those whose file or SHA-256 is wrong."""
        client = daemon.client(timeout=60)
        try:
            ids = {client.send({"op": "get", "url": url, "offline": True}): url for url in urls}
            replies = client.wait(ids.keys(), timeout=300)
        finally:
            client.close()
        missing, wrong = [], []
        for i, url in ids.items():
            reply = replies[i]
            if not reply.get("ok"):
                missing.append((url.split("origin.lab", 1)[-1], outcome(reply)))
            elif reply["result"]["sha256"] != self.sha(url) or not os.path.exists(reply["result"]["path"]):
                wrong.append(url.split("origin.lab", 1)[-1])
        return missing, wrong

    def task(self, daemon, url):
        return next((t for t in daemon.call({"op": "list"})["result"]["tasks"] if t["url"] == url), None)

    def wait_bytes(self, daemon, url, at_least, timeout=60):
        """Waits until `url`'s transfer has `at_least` bytes; its task summary."""
        def progressed():
            task = self.task(daemon, url)
            if task is None and daemon.call({"op": "info", "url": url})["result"].get("cached"):
                raise Failed(f"{url} finished before {at_least} bytes were seen (the link is too fast)")
            return task if task and task["state"] == "running" and task.get("bytes", 0) >= at_least else None
        return wait_until(progressed, timeout, interval=0.02, what=f"{at_least} bytes of {url}")


def shell(argv):
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise Failed(f"{' '.join(argv)} failed: {(result.stdout + result.stderr).strip()[-300:]}")


def make_fault_certificates(net, directory):
    """An expired certificate and one for another name (both from the lab CA), and one for origin.lab from a CA
    nobody trusts. Returns {fault: (certificate, key)}."""
    os.makedirs(directory)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_key = os.path.join(net.dir, "ca.key")
    rogue_key, rogue_pem = os.path.join(directory, "rogue-ca.key"), os.path.join(directory, "rogue-ca.pem")
    shell(["openssl", "req", "-x509", *ec, "-keyout", rogue_key, "-out", rogue_pem, "-days", "30",
           "-subj", "/CN=nobody's CA", "-addext", "basicConstraints=critical,CA:TRUE",
           "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    made = {}
    # TLS 1.0 with RSA key transport (AES128-SHA): no server signature, so OpenSSL's security level does not refuse it
    # as it refuses TLS 1.0's MD5+SHA-1 signatures (an EC certificate fails with "legacy sigalg disallowed").
    rsa = os.path.join(directory, "tls1_0")
    shell(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", rsa + ".key", "-out", rsa + ".csr",
           "-subj", "/CN=" + lab.HOST])
    with open(rsa + ".ext", "w") as f:
        f.write(f"subjectAltName=DNS:{lab.HOST}\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    shell(["openssl", "x509", "-req", "-in", rsa + ".csr", "-CA", net.ca_file, "-CAkey", ca_key, "-CAcreateserial",
           "-CAserial", rsa + ".srl", "-days", "30", "-extfile", rsa + ".ext", "-out", rsa + ".pem"])
    made["tls1_0"] = (rsa + ".pem", rsa + ".key")
    for fault, name, days, ca, key in (("expired", lab.HOST, "-1", net.ca_file, ca_key),
                                       ("other_name", "other.example", "30", net.ca_file, ca_key),
                                       ("unknown_ca", lab.HOST, "30", rogue_pem, rogue_key)):
        pem, pkey, csr, ext = (os.path.join(directory, fault + e) for e in (".pem", ".key", ".csr", ".ext"))
        shell(["openssl", "req", *ec, "-keyout", pkey, "-out", csr, "-subj", "/CN=" + name])
        with open(ext, "w") as f:
            f.write(f"subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=serverAuth\n")
        # -days -1: valid from now until yesterday, i.e. expired
        shell(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", key, "-CAcreateserial",
               "-CAserial", os.path.join(directory, fault + ".srl"), "-days", days, "-extfile", ext, "-out", pem])
        made[fault] = (pem, pkey)
    return made


def tls_server(fault, port, certificates, broken):
    """nginx server block for `port`: the fault while `broken`, else a correct HTTPS server (the lab's certificate)."""
    if not broken:
        return f"server {{ listen {port} ssl; server_name {lab.HOST}; }}\n"
    if fault == "tls1_0":
        pem, key = certificates[fault]
        return (f"server {{ listen {port} ssl; ssl_certificate {pem}; ssl_certificate_key {key}; ssl_protocols TLSv1; "
                f"ssl_ciphers AES128-SHA:@SECLEVEL=0; }}\n")
    if fault in certificates:
        pem, key = certificates[fault]
        return f"server {{ listen {port} ssl; ssl_certificate {pem}; ssl_certificate_key {key}; }}\n"
    return f"server {{ listen {port}; }}\n"  # plain_http


def set_up(s, fault_log_dir):
    """Extra nginx servers, the fault servers, the resolver and the client's resolv.conf."""
    net = s.net
    os.makedirs(fault_log_dir)
    s.certificates = make_fault_certificates(net, os.path.join(s.work, "certs"))
    for fault, port in TLS_PORTS.items():
        with open(os.path.join(net.conf_dir, f"tls-{fault}.conf"), "w") as f:
            f.write(tls_server(fault, port, s.certificates, broken=True))
    with open(os.path.join(net.conf_dir, "servers.conf"), "w") as f:
        f.write(f"server {{ listen {GOAWAY_PORT} ssl http2; server_name {lab.HOST}; keepalive_requests 3; }}\n"
                f"server {{ listen {RESET_PORT} ssl http2; server_name {lab.HOST};\n"
                f"    location /reset/ {{ proxy_pass http://127.0.0.1:{CUTTING_PORT}/; proxy_buffering off;\n"
                f"        proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}\n")
    net.reload_origin()
    helpers = os.path.join(LAB_DIR, "fault_servers.py")
    s.fault_logs = {kind: os.path.join(fault_log_dir, kind + ".jsonl") for kind in ("silent", "tls-silent", "cutting")}
    started = [
        ["silent", "--bind", lab.SERVER_ADDR, "--port", str(SILENT_PORT)],
        ["tls-silent", "--bind", lab.SERVER_ADDR, "--port", str(TLS_SILENT_PORT),
         "--cert", os.path.join(net.dir, "origin.pem"), "--key", os.path.join(net.dir, "origin.key")],
        ["cutting", "--bind", "127.0.0.1", "--port", str(CUTTING_PORT), "--root", net.docroot, "--cut", "2",
         "--cut-at", "3000000"],
    ]
    s.dns_control = os.path.join(fault_log_dir, "dns.sock")
    s.dns_log = os.path.join(fault_log_dir, "dns.jsonl")
    started.append(["dns", "--bind", lab.SERVER_ADDR, "--control", s.dns_control, f"{DNS_NAME}={lab.SERVER_ADDR}"])
    for argv in started:
        program = [os.path.join(LAB_DIR, "dns_server.py"), *argv[1:], "--log", s.dns_log] if argv[0] == "dns" \
            else [helpers, *argv, "--log", s.fault_logs[argv[0]]]
        with open(os.path.join(fault_log_dir, argv[0] + ".err"), "wb") as errors:
            net.popen("server", [sys.executable, *program], stdout=subprocess.DEVNULL, stderr=errors)
    # The client namespace asks it (ip netns exec binds /etc/netns/NS/resolv.conf; the lab deletes the directory).
    with open(f"/etc/netns/{net.netns['client']}/resolv.conf", "w") as f:
        f.write(f"nameserver {lab.SERVER_ADDR}\noptions timeout:1 attempts:1\n")
    for port in (SILENT_PORT, TLS_SILENT_PORT):
        wait_until(lambda: probe(net, port), 10, interval=0.1, what=f"the fault server on :{port}")
    wait_until(lambda: os.path.exists(s.dns_control), 10, what="the resolver")


def probe(net, port):
    result = net.run("client", [sys.executable, "-c", "import socket,sys; socket.create_connection((sys.argv[1], "
                                "int(sys.argv[2])), 1).close()", lab.SERVER_ADDR, str(port)], capture_output=True)
    return result.returncode == 0


def dns_mode(s, mode):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(s.dns_control)
        sock.sendall(mode.encode() + b"\n")
        if not sock.makefile("rb").readline().startswith(b"ok"):
            raise Failed(f"the resolver refused mode {mode}")


def message_of(reply):
    return (reply.get("error") or {}).get("message", "")


def cached_text(missing, wrong):
    return "cached, SHA-256 ok" if not missing and not wrong else f"MISSING {missing}" if missing else "SHA MISMATCH"


def json_lines(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def run(args, table, processes, scratch_dirs):
    if os.geteuid() != 0:
        table.skip(GROUP, "network lab", "needs root (namespaces, TUN devices)")
        return
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        table.skip(GROUP, "network lab", f"missing {', '.join(missing)} (make lab-deps)")
        return
    work = scratch(GROUP)
    scratch_dirs.append(work)
    began = time.monotonic()
    net = lab.Lab(name=LAB_NAME, delay_ms=5, rate_mbit=100, buffer_bytes=256 * 1024, images=60 if args.quick else 500)
    s = Scenario(args, table, processes, work, net)
    try:
        net.start()
        net.seed(20)
        set_up(s, os.path.join(work, "faults"))
        log(f"network: lab {LAB_NAME} up in {time.monotonic() - began:.1f}s")
        shared(s)
        kills(s)
    finally:
        processes.stop_all()  # the daemons, before their namespace goes
        net.stop()
    log(f"network: group took {time.monotonic() - began:.0f}s")


def shared(s):
    """The scenarios that share one daemon, then its RSS and descriptors against where they started."""
    daemon = LabDaemon(s.net, s.processes, s.args.binary, s.work, *DAEMON_ARGS).start()
    # Warm-up, so that libraries, pools, connections, buffers and the index's cache exist before the first reading:
    # a get on each origin, then a drain of 20 images and a 5 MB file on each TLS origin, and 8 more gets.
    for origin in ("https", "https_h1", "http"):
        got = daemon.get(s.image(0, "warm" + origin.replace("_", ""), origin), timeout=60)
        if got[0] != "ok":
            raise Failed(f"warm-up get on {origin} answered {got[2].get('error')}")
    s.queue(daemon, [s.image(n, "warmq", origin) for origin in ("https", "https_h1") for n in range(20)]
            + [s.large("5M.bin", "warmq", n, origin) for n, origin in enumerate(("https", "https_h1"))])
    s.drained(daemon, 120)
    for n in range(8):
        daemon.get(s.image(n, "warmg"), timeout=60)
    time.sleep(1)
    start_rss, start_fds, start_tcp = daemon.resources()
    pid = daemon.pid
    steps = [loss, outages, tls, dns] if s.quick else [loss, outages, server_side, tls, dns]
    for step in steps:
        began = time.monotonic()
        try:
            step(s, daemon)
        except Failed as error:  # the scenario's row fails; the others still run on the same daemon
            s.add(f"{step.__name__}: scenario ran to the end", "no failure", f"Failed: {error}", False)
        log(f"network: {step.__name__} took {time.monotonic() - began:.0f}s")
        daemon.sample()
        if not daemon.alive():
            raise Failed(f"the shared daemon died during {step.__name__} (exit {daemon.process.returncode})")
    # Idle: nothing running; wait for the RSS and descriptors to settle.
    s.drained(daemon, 120)
    rss, fds, tcp = settle(daemon)
    peak = peak_rss_kib(daemon.pid)
    daemon.sample()
    # Connections idle in curl's caches are counted apart: bounded by curl, closed when a pool is next used.
    other, start_other = fds - len(tcp), start_fds - len(start_tcp)
    s.add("after the group: RSS and descriptors back",
          "same pid; RSS and open fds (idle connections apart) within 10 % of the start (after a warm-up)",
          f"pid {'same' if daemon.pid == pid else 'CHANGED'}; RSS {start_rss / 1024:.1f} -> {rss / 1024:.1f} MiB "
          f"({(rss / start_rss - 1) * 100:+.0f} %), peak {peak / 1024:.1f} MiB; fds {start_fds} -> {fds}: "
          f"{start_other} -> {other} + TCP {len(start_tcp)} -> {len(tcp)}",
          daemon.pid == pid and rss <= start_rss * 1.10 and other <= start_other * 1.10)
    if not s.quick:
        # The daemon closes connections idle for 60 s (ConnectionPool.idleLifetime), before nginx's 65 s here.
        began = time.monotonic()
        half_closed = lambda: [f":{port}" for port, state in daemon.tcp_connections() if state == "CLOSE_WAIT"]
        closed = half_closed()
        while closed and time.monotonic() - began < 75:
            time.sleep(1)
            closed = half_closed()
        s.add("after the group: connections the servers closed",
              "none kept open (CLOSE_WAIT) by the idle daemon for more than its idle lifetime (60 s)",
              f"{len(tcp)} TCP connections at first: " + ", ".join(f":{port} {state}" for port, state in tcp)
              + f"; half-closed ones left after {time.monotonic() - began:.0f} s: {closed or 'none'}", not closed)
    s.table.peak(GROUP, daemon.peak)
    daemon.stop()
    ok, problems = daemon.check_index()
    s.add("shared daemon: index vs files (check_index.py)", "no dangling row, no orphan, no temp file", problems, ok)


def settle(daemon, seconds=10):
    """daemon.resources() once RSS and fds stop falling (idle connections closing), at most `seconds`."""
    last = daemon.resources()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(1)
        now = daemon.resources()
        if now[0] >= last[0] and now[1] >= last[1]:
            return now
        last = now
    return last


# ---- 1. loss


def loss(s, daemon):
    rates = [0.01] if s.quick else [0.01, 0.05]
    images, larges, large = (40, 1, "5M.bin") if s.quick else (500, 5, "20M.bin")
    for rate in rates:
        percent = f"{rate * 100:g} %"
        tag = f"loss{rate * 100:g}"
        s.net.set_link(delay_ms=5, rate_mbit=100, loss=rate)
        before, errors_before = s.net.stats(), daemon.errors_by_code()
        urls = [s.image(n, tag) for n in range(images)] + [s.large(large, tag, n) for n in range(larges)]
        began = time.monotonic()
        acked = s.queue(daemon, urls)
        gets = []
        done = threading.Event()

        def urgent():
            n = 0
            while not done.is_set() and n < (5 if s.quick else 20):
                gets.append(daemon.ctl_get(s.image(n + 7, tag + "u"), GET_TIMEOUT))
                n += 1
                done.wait(0.5 if s.quick else 1.5)

        thread = threading.Thread(target=urgent, daemon=True)
        thread.start()
        try:
            s.drained(daemon, 180 if s.quick else 900)
        finally:
            done.set()
            thread.join(GET_TIMEOUT + 70)
        seconds = time.monotonic() - began
        after = s.net.stats()
        s.net.set_link(loss=0)
        lost = {d: after[d]["lost"] - before[d]["lost"] for d in ("c2s", "s2c")}
        packets = {d: after[d]["packets"] - before[d]["packets"] for d in ("c2s", "s2c")}
        missing, wrong = s.check_cached(daemon, sorted(acked))
        failed = delta(daemon.errors_by_code(), errors_before)
        s.add(f"loss {percent} both ways: {images} x 200 KB + {larges} x {large[:-4]} drain",
              f"{len(urls)} acknowledged, all cached with the origin's SHA-256",
              f"{len(acked)} acknowledged, {len(acked) - len(missing)} cached, {len(missing)} missing {missing[:2]}, "
              f"{len(wrong)} mismatches; {seconds:.0f} s; lost {lost['c2s']}/{packets['c2s']} c2s, "
              f"{lost['s2c']}/{packets['s2c']} s2c packets; failed attempts {failed or 'none'}",
              len(acked) == len(urls) and not missing and not wrong and lost["c2s"] > 0 and lost["s2c"] > 0)
        outcomes = collections.Counter(code for _, code, _, _ in gets)
        times = sorted(t for _, _, t, _ in gets)
        slow = [f"{code} {t:.1f}s" for _, code, t, _ in gets if t > GET_TIMEOUT + 2]
        s.add(f"loss {percent}: urgent gets during the drain",
              f"each ok, or {'/'.join(TRANSIENT)} (documented), within --timeout {GET_TIMEOUT} s",
              f"{len(gets)} gets: {dict(outcomes)}; slowest {times[-1] if times else 0:.2f} s, median "
              f"{times[len(times) // 2] if times else 0:.2f} s{'; late ' + str(slow) if slow else ''}",
              bool(gets) and all(code == "ok" or code in TRANSIENT for _, code, _, _ in gets) and not slow)


# ---- 2. outages


def outages(s, daemon):
    origins = [("https", "HTTP/2")] if s.quick else [("https", "HTTP/2"), ("https_h1", "HTTP/1.1")]
    seconds, large, down_at = (18, "5M.bin", 1_000_000) if s.quick else (20, "20M.bin", 4_000_000)
    for origin, protocol in origins:
        outage(s, daemon, origin, protocol, seconds, large, down_at)


def outage(s, daemon, origin, protocol, seconds, large, down_at):
    tag = "out" + origin.replace("_", "")
    s.net.set_link(delay_ms=5, rate_mbit=20, loss=0)
    url = s.large(large, tag, 0, origin)
    errors_before = daemon.errors_by_code()
    if not s.queue(daemon, [url]):
        raise Failed(f"{url} was not acknowledged")
    task = s.wait_bytes(daemon, url, down_at)
    s.net.link_down(seconds)
    down_since = time.monotonic()
    # No urgent work first: it would hold the background transfer, and a held transfer is not ended by a stall.
    # Unheld, the stall ends it after low_speed_time and the retry must resume with Range once the link is back.
    def ended():
        task = s.task(daemon, url)
        return task if task and task["state"] != "running" else None

    stalled = None
    try:
        # curl averages the speed over a few seconds: the stall is seen some seconds after low_speed_time
        stalled = wait_until(ended, LOW_SPEED_TIME + 10, interval=0.1, what="the stalled transfer to end")
    except Failed:
        pass
    stalled_after = time.monotonic() - down_since
    answers = {}

    def bounded():  # prefetchctl with a client deadline shorter than the outage
        answers["ctl"] = daemon.ctl_get(s.image(1, tag + "c"), 5)

    def unbounded():  # the protocol with no deadline of the client's: the daemon's own connect timeouts and retries
        answers["get"] = daemon.get(s.image(2, tag + "g"))

    threads = [threading.Thread(target=f, daemon=True) for f in (bounded, unbounded)]
    for thread in threads:
        thread.start()
    paused = set()

    def watch(status):
        paused.update(p["host"] for p in status["paused_hosts"])

    wait_until(lambda: time.monotonic() - down_since >= seconds, seconds + 5, interval=0.2, what="the outage's end")
    up_at = time.monotonic()
    # The download resumes once the link is back (and a pause of the circuit breaker, 60 s, is over).
    s.drained(daemon, 180, watch=watch)
    recovered = time.monotonic() - up_at
    for thread in threads:
        thread.join(120)
    failed = delta(daemon.errors_by_code(), errors_before)
    missing, wrong = s.check_cached(daemon, [url])
    entries = [e for e in s.requests(tag) if "/large/" in e["request"]]
    fresh = [e for e in entries if not e["range"]]
    ranged = [e for e in entries if e["range"]]
    s.add(f"outage {seconds} s mid {large[:-4]} download ({protocol})",
          "resumed with Range (or went on on its connection), never started over; cached with the origin's SHA-256",
          f"down at {task['bytes'] // 1000} KB, "
          + (f"stalled transfer ended after {stalled_after:.1f} s ({stalled['state']}, attempt {stalled['attempts']}); "
             if stalled else f"still running after {stalled_after:.1f} s; ")
          + "requests " + ", ".join(f"{e['status']} {e['range'] or 'whole'} (conn {e['connection']})" for e in entries)
          + f"; {cached_text(missing, wrong)}"
          f"; done {recovered:.0f} s after the link came back; failed attempts {failed or 'none'}",
          # The first request may be logged late or not yet: the retry opens a connection of its own, and nginx logs
          # the abandoned stream only when it learns of its end.
          not missing and not wrong and len(fresh) <= 1 and all(e["range"].startswith("bytes=") for e in ranged)
          and (not fresh or entries[0] is fresh[0]))
    rc, code, took, message = answers.get("ctl", (None, "no answer", 0, ""))
    get_code, get_took, reply = answers.get("get", ("no answer", 0, {}))
    deadline = CONNECT_TIMEOUT * MAX_ATTEMPTS + 60
    s.add(f"outage ({protocol}): urgent gets during it",
          f"get --timeout 5: exit 5 timeout in <= 6 s (or {'/'.join(TRANSIENT)} sooner); a get without a deadline: ok "
          f"once the link is back, or {'/'.join(TRANSIENT)}, in < {deadline} s",
          f"--timeout 5: exit {rc} {code} in {took:.1f} s; no deadline: {get_code} in {get_took:.1f} s "
          f"({message_of(reply)[:60]})",
          ((rc == 5 and code == "timeout") or (rc == 1 and code in TRANSIENT)
           or (rc == 0 and stalled_after + 5 > seconds))  # a late stall: the link came back within its 5 s
          and took <= 6.5
          and (get_code == "ok" or get_code in TRANSIENT) and get_took < deadline)
    host = lab.HOST if origin == "https" else f"{lab.HOST}:{lab.PORTS[origin]}"  # the breaker's key: no default port
    after = daemon.get(s.image(3, tag + "after", origin), timeout=60)
    status = daemon.status()
    s.add(f"outage ({protocol}): the host afterwards",
          "circuit breaker (if it tripped) lets the host back in; a new get ok, same daemon",
          f"paused meanwhile: {host in paused} ({sorted(paused) or 'none'}); "
          f"now paused {status['paused_hosts'] or 'none'}; new get {after[0]} in {after[1]:.1f} s; "
          f"daemon {'up' if daemon.alive() else 'DEAD'}",
          after[0] == "ok" and not status["paused_hosts"] and daemon.alive())


# ---- 3. server side


def server_side(s, daemon):
    nginx_restart(s, daemon)
    goaway(s, daemon)
    stream_reset(s, daemon)
    silent_servers(s, daemon)


def nginx_restart(s, daemon):
    tag = "restart"
    s.net.set_link(delay_ms=5, rate_mbit=20, loss=0)
    url = s.large("20M.bin", tag)
    errors_before = daemon.errors_by_code()
    s.queue(daemon, [url])
    task = s.wait_bytes(daemon, url, 4_000_000)
    began = time.monotonic()
    s.net.restart_origin()
    restarted = time.monotonic() - began
    s.drained(daemon, 120)
    failed = delta(daemon.errors_by_code(), errors_before)
    missing, wrong = s.check_cached(daemon, [url])
    entries = s.requests(tag)
    s.add("nginx restarted mid-stream (20 MB, HTTP/2)",
          "a retry finishes it (Range), cached with the origin's SHA-256",
          f"restart at {task['bytes'] // 1000} KB took {restarted:.1f} s; requests "
          + ", ".join(f"{e['status']} {e['range'] or 'whole'}" for e in entries)
          + f"; {'cached, SHA-256 ok' if not missing and not wrong else str(missing or 'SHA MISMATCH')}; "
          f"failed attempts {failed or 'none'}",
          not missing and not wrong and any(e["range"] for e in entries))


def goaway(s, daemon):
    tag = "goaway"
    s.net.set_link(delay_ms=5, rate_mbit=100, loss=0)
    errors_before = daemon.errors_by_code()
    urls = [s.image(n, tag, port=GOAWAY_PORT) for n in range(24)]
    background = [s.image(n, tag + "bg", port=GOAWAY_PORT) for n in range(12)]
    acked = s.queue(daemon, background)
    client = daemon.client(timeout=120)
    try:
        ids = {client.send({"op": "get", "url": url}): url for url in urls}
        replies = client.wait(ids.keys(), timeout=120)
    finally:
        client.close()
    s.drained(daemon, 120)
    outcomes = collections.Counter(outcome(r) for r in replies.values())
    missing, wrong = s.check_cached(daemon, urls + sorted(acked))
    entries = s.requests(tag) + s.requests(tag + "bg")
    per_connection = collections.Counter(e["connection"] for e in entries)
    statuses = collections.Counter(e["status"] for e in entries)
    failed = delta(daemon.errors_by_code(), errors_before)
    s.add("HTTP/2 GOAWAY after 3 requests (keepalive_requests 3)",
          "24 parallel gets + 12 queued: all ok, cached with the origin's SHA-256; <= 3 requests per connection",
          f"gets {dict(outcomes)}; {len(urls) + len(acked) - len(missing)} cached, {len(wrong)} mismatches; "
          f"{len(entries)} requests on {len(per_connection)} connections (most on one: "
          f"{max(per_connection.values(), default=0)}), statuses {dict(statuses)}; failed attempts {failed or 'none'}",
          outcomes == {"ok": len(urls)} and not missing and not wrong and max(per_connection.values(), default=9) <= 3)


def stream_reset(s, daemon):
    tag = "reset"
    s.net.set_link(delay_ms=5, rate_mbit=100, loss=0)
    errors_before = daemon.errors_by_code()
    url = f"https://{lab.HOST}:{RESET_PORT}/reset/large/20M.bin?{tag}-0"
    neighbours = [s.image(n, tag + "n", port=RESET_PORT) for n in range(10)]
    acked = s.queue(daemon, neighbours)  # background work on the same HTTP/2 origin meanwhile
    got = daemon.get(url, timeout=120)
    s.drained(daemon, 120)
    failed = delta(daemon.errors_by_code(), errors_before)
    missing, wrong = s.check_cached(daemon, [url] + sorted(acked))
    upstream = [e for e in json_lines(s.fault_logs["cutting"]) if e.get("event") == "request"]
    with open(os.path.join(s.net.dir, "nginx-error.log"), errors="replace") as f:
        premature = f.read().count("upstream prematurely closed")
    s.add("HTTP/2 stream reset mid-body (upstream cut twice at 3 MB)",
          "the get ok after retries resuming with Range; cached with the origin's SHA-256; neighbours unaffected",
          f"get {got[0]} in {got[1]:.1f} s; upstream saw " + ", ".join(
              f"{e['status']} from {e['start']}{' cut' if e['cut'] else ''}" for e in upstream)
          + f"; nginx 'prematurely closed' x{premature}; {1 + len(acked) - len(missing)} cached"
          f"{' ' + str(missing[:2]) if missing else ''}, {len(wrong)} mismatches; failed attempts {failed or 'none'}",
          got[0] == "ok" and not missing and not wrong and any(e["start"] > 0 for e in upstream))


def silent_servers(s, daemon):
    """A TCP server that never speaks and a TLS server that never answers, at once (different hosts)."""
    errors_before = daemon.errors_by_code()
    since = time.time()  # the set-up's probes connected before
    results = {}
    cases = {"silent": (SILENT_PORT, "accepts TCP, never speaks TLS"),
             "tls-silent": (TLS_SILENT_PORT, "completes TLS, never answers")}

    def ask(kind):
        results[kind] = daemon.get(f"https://{lab.HOST}:{cases[kind][0]}/img/0001.jpg?{kind}-0", timeout=300)

    threads = [threading.Thread(target=ask, args=(kind,), daemon=True) for kind in cases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(320)
    failed = delta(daemon.errors_by_code(), errors_before)
    bound = MAX_ATTEMPTS * (LOW_SPEED_TIME + 1) + 40
    for kind, (port, title) in cases.items():
        code, took, reply = results.get(kind, ("no answer", 0, {}))
        events = collections.Counter(e["event"] for e in json_lines(s.fault_logs[kind]) if e["t"] >= since)
        url = f"https://{lab.HOST}:{port}/img/0001.jpg?{kind}-0"
        lingering = s.task(daemon, url)  # kept for one more attempt when the pause ends (60 s): not waited for here
        if lingering:
            daemon.call({"op": "cancel", "urls": [url]})
        s.add(f"server that {title}",
              f"timeout (its own code), answered in < {bound} s, <= {MAX_ATTEMPTS} connections",
              f"{code} in {took:.0f} s ({message_of(reply)[:70]}); server saw "
              f"{dict(events)}; task kept for after the pause: "
              f"{'yes (attempt %d, cancelled)' % lingering['attempts'] if lingering else 'no'}",
              code == "timeout" and took < bound and events["accepted"] <= MAX_ATTEMPTS)
    s.add("silent servers: failed attempts by code", "timeout only", str(failed), set(failed) <= {"timeout"})


# ---- 4. TLS


def tls(s, daemon):
    faults = ["expired", "tls1_0", "plain_http"] if s.quick else list(TLS_PORTS)
    errors_before = daemon.errors_by_code()
    for fault in faults:
        port = TLS_PORTS[fault]
        tag = "tls" + fault.replace("_", "")
        first = daemon.get(s.image(1, tag, port=port), timeout=60)
        more = [daemon.get(s.image(n, tag, port=port), timeout=60)[0] for n in range(2, 7)]
        status = daemon.status()
        paused = [p["host"] for p in status["paused_hosts"] if p["host"].endswith(f":{port}")]
        logged = s.requests(tag)
        versions = sorted({e.get("tls") or "?" for e in logged})
        with open(os.path.join(s.net.conf_dir, f"tls-{fault}.conf"), "w") as f:
            f.write(tls_server(fault, port, s.certificates, broken=False))
        s.net.reload_origin()
        # The old worker may still accept a connection or two before it sees the master's signal.
        wait_until(lambda: s.net.run("client", ["curl", "-sS", "-o", "/dev/null", "--max-time", "3", "--cacert",
                                                s.net.ca_file, f"https://{lab.HOST}:{port}/img/0000.jpg"],
                                     capture_output=True).returncode == 0, 10, interval=0.1, what=f"the fixed :{port}")
        fixed = daemon.get(s.image(8, tag, port=port), timeout=60)
        again = daemon.get(s.image(1, tag, port=port), timeout=60)
        message = message_of(first[2])
        named = re.search(TLS_CAUSES[fault], message, re.I) is not None
        s.add(f"TLS: {TLS_TITLES[fault]}",
              "tls, the message names the cause; 5 more URLs tls, no pause; fixed: another URL ok",
              f"{first[0]}: {message[:90]!r}; more {dict(collections.Counter(more))}; paused {paused or 'no'}; "
              f"nginx logged {len(logged)}{' over ' + '/'.join(versions) if logged else ''}; "
              f"fixed: {fixed[0]}{' ' + message_of(fixed[2])[:60] if fixed[0] != 'ok' else ''}; "
              f"the first URL again: {again[0]}"
              f"{' (remembered: negative cache)' if again[0] == first[0] != 'ok' else ''}",
              first[0] == "tls" and named and set(more) == {"tls"} and not paused and fixed[0] == "ok")
    failed = delta(daemon.errors_by_code(), errors_before)
    s.add("TLS: failed attempts by code", f"tls only, one attempt per URL ({len(faults) * 6})", str(failed),
          failed == {"tls": len(faults) * 6})


# ---- 5. DNS


def dns(s, daemon):
    nxdomain(s, daemon)
    if not s.quick:
        resolver_down(s, daemon)


def queries(s, name, since=0.0):
    return [q for q in json_lines(s.dns_log) if q.get("name") == name and q["t"] >= since]


def bursts(times, gap=0.3):
    """The start of each group of queries closer than `gap` (one lookup asks A and AAAA at once)."""
    ordered = sorted(times)
    return [t for i, t in enumerate(ordered) if i == 0 or t - ordered[i - 1] > gap]


def nxdomain(s, daemon):
    name = "nx1.lab"
    errors_before = daemon.errors_by_code()
    url = f"http://{name}/img/0001.jpg?dns-0"
    code, took, reply = daemon.get(url, timeout=120)
    time.sleep(3)  # nothing more afterwards
    lingering = s.task(daemon, url)  # a task whose failure paused its host stays, for a retry after the pause
    if lingering:
        daemon.call({"op": "cancel", "urls": [url]})
    lookups = bursts(q["t"] for q in queries(s, name))
    answers = collections.Counter(q["answer"] for q in queries(s, name))
    failed = delta(daemon.errors_by_code(), errors_before)
    message = message_of(reply)
    status = daemon.status()
    s.add("DNS: a name that does not exist (NXDOMAIN)",
          "unknown_host, the message names the name; not retried: one lookup by curl and one to tell NXDOMAIN from a "
          "failed resolver (<= 2 bursts), none after the answer",
          f"{code} in {took:.1f} s ({message[:60]!r}); {len(lookups)} lookups ({dict(answers)}), gaps "
          f"{[round(b - a, 1) for a, b in zip(lookups, lookups[1:])]}; failed attempts {failed or 'none'}; paused "
          f"{[p['host'] for p in status['paused_hosts']] or 'none'}; task kept for after the pause: "
          f"{'yes (attempt %d, cancelled)' % lingering['attempts'] if lingering else 'no'}",
          code == "unknown_host" and name in message and 1 <= len(lookups) <= 2 and failed == {"unknown_host": 1}
          and not lingering and all(t < time.time() - 2.5 for t in lookups))


def resolver_down(s, daemon):
    errors_before = daemon.errors_by_code()
    dns_mode(s, "drop")
    since = time.time()
    url = f"http://{DNS_NAME}/img/0002.jpg?dnsdown-0"
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(get=daemon.get(url, timeout=180)), daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(bursts(q["t"] for q in queries(s, DNS_NAME, since))) >= 3, 60, interval=0.1,
                   what="three lookups while the resolver is down")
    finally:
        dns_mode(s, "answer")
    up = time.time()
    thread.join(200)
    code, took, reply = answer.get("get", ("no answer", 0, {}))
    lookups = bursts(q["t"] for q in queries(s, DNS_NAME, since))
    gaps = [round(b - a, 1) for a, b in zip(lookups, lookups[1:])]
    failed = delta(daemon.errors_by_code(), errors_before)
    missing, wrong = s.check_cached(daemon, [url])
    s.add("DNS: the resolver down, then back",
          "transient (network), retried with growing gaps; once it answers the get ok with the origin's SHA-256",
          f"{code} in {took:.1f} s ({message_of(reply)[:50]}); lookups "
          f"{len([t for t in lookups if t < up])} while down, gaps {gaps}; failed attempts {failed or 'none'}; "
          f"{'cached, SHA-256 ok' if not missing and not wrong else str(missing or 'SHA MISMATCH')}",
          code == "ok" and not missing and not wrong and set(failed) <= {"network"} and failed.get("network", 0) >= 2
          and len(gaps) >= 3 and gaps[2] > gaps[0])  # equal jitter: 0.25-0.5 s, 0.5-1 s, 1-2 s, ...


# ---- 6. kill -9 during an HTTP/2 drain


def kills(s):
    quick = s.quick
    count, images, larges, large, rate = (2, 40, 1, "5M.bin", 20) if quick else (10, 500, 3, "20M.bin", 50)
    s.net.set_link(delay_ms=5, rate_mbit=rate, loss=0)
    tag = "kill"
    urls = [s.image(n, tag) for n in range(images)] + [s.large(large, tag, n) for n in range(larges)]
    daemon = LabDaemon(s.net, s.processes, s.args.binary, s.work, "--allow-non-images", "yes", "--slow-width", "4",
                       "--max-attempts", "10", cache_dir=os.path.join(s.work, "kill-cache"),
                       socket_path=os.path.join(s.work, "run", "kill.sock"), log_name="kill.log").start()
    state = {"acked": set(), "rejected": [], "batches_resent": 0, "done": False, "error": None}
    up = threading.Event()
    up.set()
    acked_now = threading.Event()
    thread = threading.Thread(target=queue_all, args=(daemon, urls, up, state, 0.2, acked_now), daemon=True)
    thread.start()
    restarts = []
    rng = random.Random(20)
    for n in range(count):
        if n % 2 == 0 and not state["done"]:
            acked_now.clear()
            acked_now.wait(3)  # right after an acknowledgement
        else:
            time.sleep(rng.uniform(0.5, 2.5))
        restarts.append(daemon.restart_after_kill9(up))
    thread.join(300)
    s.drained(daemon, 180 if quick else 900)
    missing, wrong = s.check_cached(daemon, sorted(state["acked"]))
    entries = s.requests(tag)
    ranged = [e for e in entries if e["range"] and "/large/" in e["request"]]
    protocols = collections.Counter(e["protocol"] for e in entries)
    s.add(f"kill -9 x{count} during an HTTP/2 drain ({images} images + {larges} x {large[:-4]})",
          f"{len(urls)} acknowledged, all cached with the origin's SHA-256, none lost",
          f"{len(restarts)} restarts (slowest {max(restarts):.1f} s), {len(state['acked'])} acknowledged "
          f"(rejects {state['rejected'][:3]}, error {state['error']}), {len(state['acked']) - len(missing)} cached, "
          f"{len(missing)} missing {missing[:2]}, {len(wrong)} mismatches; {len(ranged)} Range requests; "
          f"{dict(protocols)}",
          len(restarts) == count and len(state["acked"]) == len(urls) and not missing and not wrong
          and state["error"] is None and set(protocols) == {"HTTP/2.0"})
    daemon.stop()
    s.table.peak(GROUP, daemon.peak)
    ok, problems = daemon.check_index()
    s.add("kill -9: index vs files (check_index.py)", "no dangling row, no orphan, no temp file", problems, ok)
