#!/usr/bin/env python3
"""What holding a background connection back does on a real link (docs/transport.md), without prefetchd.

On the network lab, one persistent HTTPS HTTP/1.1 connection plays the background lane and a second, warm one the
urgent lane (the two-pool design). For each way of holding the background back, the probe:

  - drains 205 KB files serially over the background connection (files/s: what the window costs when nothing is
    urgent);
  - starts a large background download, lets it run 2 s at full speed (or half the file), then at one instant
    holds it back and sends an urgent GET of a 205 KB image on the urgent connection: the urgent time, compared
    with `idle` (the same GET after the same 2 s with no background), and the background bytes that still crossed
    the link after the hold (TCP_INFO's tcpi_bytes_received).

Ways of holding back: `none` (the background keeps reading), `stop` (stop reading: TCP's receive window closes
once the socket buffer is full; the buffer is the kernel's, grown by autotuning), `stop-NK` (the same with
SO_RCVBUF set to N KiB before connecting, which fixes the window), `abort` (close the background connection, as
curl does when an HTTP/1.1 transfer is removed mid-body).

Usage: lab_hold_probe.py [--link 50/20/64K] [--modes none,stop,stop-128K,abort] [--repeats 5]
Needs root. Prints one line per mode; --json for the figures.
"""

import argparse
import json
import os
import socket
import ssl
import statistics
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lab"))
import lab  # noqa: E402

PORT = lab.PORTS["https_h1"]
# struct tcp_info: 8 bytes of u8 fields, 24 u32, then u64 pacing_rate, max_pacing_rate, bytes_acked, bytes_received
BYTES_RECEIVED = struct.Struct("=Q")
BYTES_RECEIVED_OFFSET = 8 + 24 * 4 + 3 * 8


def bytes_received(sock):
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return BYTES_RECEIVED.unpack_from(info, BYTES_RECEIVED_OFFSET)[0]


class Connection:
    """A persistent HTTP/1.1 connection over TLS to the lab origin; optional fixed receive buffer."""

    def __init__(self, ca_file, rcvbuf=None):
        self.raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.raw.connect((lab.SERVER_ADDR, PORT))
        context = ssl.create_default_context(cafile=ca_file)
        self.tls = context.wrap_socket(self.raw, server_hostname=lab.HOST)  # takes over the descriptor
        self.pending = b""

    def send(self, path):
        self.tls.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, lab.HOST)).encode())

    def head(self):
        while b"\r\n\r\n" not in self.pending:
            self.pending += self.tls.recv(65536)
        head, self.pending = self.pending.split(b"\r\n\r\n", 1)
        length = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
        return length[0]

    def body(self, length):
        got = len(self.pending)
        self.pending = b""
        while got < length:
            chunk = self.tls.recv(min(65536, length - got))
            if not chunk:
                raise ConnectionError("closed")
            got += len(chunk)
        self.pending = b""

    def get(self, path):
        self.send(path)
        self.body(self.head())

    def close(self):
        self.tls.close()


def probe(ca_file, mode, repeats, files):
    rcvbuf = int(mode.split("-")[1][:-1]) * 1024 if mode.startswith("stop-") else None
    # nothing urgent: serial files over one persistent background connection
    background = Connection(ca_file, rcvbuf)
    background.get("/img/0000.jpg")
    start = time.monotonic()
    for n in range(files):
        background.get("/img/%04d.jpg" % (n % 200))
    drain = files / (time.monotonic() - start)
    background.close()

    urgent_times, after_hold, settle = [], [], []
    for repeat in range(repeats):
        urgent = Connection(ca_file)
        urgent.get("/img/0001.jpg")  # warm, as a pooled urgent connection is
        background = None if mode == "idle" else Connection(ca_file, rcvbuf)
        if background:
            background.send("/large/20M.bin")
            left = background.head() // 2 - len(background.pending)  # the other half is still to come at the hold
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and left > 0:
                left -= len(background.tls.recv(min(65536, left)))
            held_at = bytes_received(background.tls)
        else:
            time.sleep(2.0)  # the same idle time on the urgent connection
        stop = threading.Event()
        samples = []

        def keep_reading():
            try:
                while not stop.is_set() and background.tls.recv(65536):
                    pass
            except OSError:
                pass  # closed under it at the end of the repeat

        def watch():
            while not stop.is_set():
                samples.append((time.monotonic(), bytes_received(background.tls)))
                time.sleep(0.002)
        helper = None
        if mode == "none":
            helper = threading.Thread(target=keep_reading, daemon=True)
        elif mode == "abort":
            background.close()
        elif mode.startswith("stop"):
            helper = threading.Thread(target=watch, daemon=True)
        hold = time.monotonic()
        if helper:
            helper.start()
        urgent.get("/img/%04d.jpg" % (10 + repeat))
        urgent_times.append(time.monotonic() - hold)
        if mode.startswith("stop"):
            time.sleep(1.5)
            stop.set()
            helper.join()
            last = samples[-1][1]
            after_hold.append(last - held_at)
            settle.append(next(t for t, b in samples if b == last) - hold)
        stop.set()
        urgent.close()
        if background:
            background.close()
        time.sleep(0.5)  # what was in flight drains
    return {"mode": mode, "drain_files_per_s": drain, "urgent_s": urgent_times,
            "bytes_after_hold": after_hold, "settled_after_s": settle}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--link", default="50/20/64K")
    parser.add_argument("--modes", default="none,stop,stop-64K,stop-128K,stop-256K,abort")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--name", default="lhold")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--inside", help=argparse.SUPPRESS)  # the CA file: run the probe itself (client side)
    args = parser.parse_args()
    for mode in args.modes.split(","):
        size = mode[5:-1] if mode.startswith("stop-") and mode.endswith("K") else "1"
        if mode not in ("none", "stop", "abort") and not (mode.startswith("stop-") and size.isdigit()
                                                          and 4 <= int(size) <= 65536):
            parser.error("a mode is none, stop, stop-NK (4 to 65536 KiB) or abort, not %r" % mode)
    if args.inside:
        results = [probe(args.inside, mode, args.repeats, args.files) for mode in ["idle"] + args.modes.split(",")]
        print(json.dumps(results))
        return 0
    rtt, rate, buffer = args.link.split("/")
    with lab.Lab(name=args.name, delay_ms=float(rtt) / 2, rate_mbit=float(rate),
                 buffer_bytes=lab.byte_count(buffer)) as net:
        out = net.run("client", [sys.executable, os.path.abspath(__file__), "--inside", net.ca_file, "--modes",
                                 args.modes, "--repeats", str(args.repeats), "--files", str(args.files)],
                      capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return 1
    results = json.loads(out.stdout)
    print("link %s; urgent: a 205 KB GET on a warm connection of its own, sent the instant the background is held"
          % args.link)
    idle = statistics.median(results[0]["urgent_s"])
    for r in results:
        r["urgent_ratio"] = statistics.median(r["urgent_s"]) / idle
        after = ("%d KB (median), settled %.0f ms after the hold" % (statistics.median(r["bytes_after_hold"]) / 1000,
                                                                   statistics.median(r["settled_after_s"]) * 1000)
                 if r["bytes_after_hold"] else "—")
        print("%-10s drain %.1f files/s | urgent %.0f ms (x%.2f of idle; max %.0f ms) | background after the hold: %s"
              % (r["mode"], r["drain_files_per_s"], statistics.median(r["urgent_s"]) * 1000, r["urgent_ratio"],
                 max(r["urgent_s"]) * 1000, after))
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
