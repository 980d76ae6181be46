#!/usr/bin/env python3
"""A shaped HTTP/1.1 origin for `make bench`: one shared bandwidth budget and a fixed added latency.

Standard library only. This kernel has no netem, so the shaping is done here, in the server:

- **One link.** Every response body goes out in chunks (16 KiB by default), and every chunk must first reserve
  its slot on one virtual link of `--rate` bytes/s shared by all connections: a chunk of n bytes occupies the link
  for n/rate seconds, and slots are handed out first come, first served. Concurrent responses therefore share the
  budget chunk by chunk (about 1/k each for k active responses), and an idle link earns no burst credit.
- **Latency.** Every response waits `--latency` seconds before its status line (the round trip plus the server's
  think time of a distant origin); `?delay=S` adds S more seconds (B4 uses it to keep a backlog queued).
- **Back-pressure.** Each accepted socket gets a small send buffer (`--sndbuf`), and a chunk reserves its slot only
  once the socket is writable, so a client that reads slowly (a throttled transfer) really does use less of the
  link instead of having its bytes parked in kernel buffers at full speed.

Usage: shaped_origin.py --root DIR [--rate BYTES_PER_S] [--latency SEC] [--port 0]

Prints `PORT n` once listening on 127.0.0.1. Paths:
    /<pool>/<name>                 DIR/<pool>/<name> when that file exists
    /<pool>/<any/thing>/<k>.jpg    the file number k (modulo their count) of DIR/<pool>, in name order: any number
                                   of distinct URLs over a fixed set of real JPEGs
Control (never shaped, never counted):
    /__stats   {"requests": n, "distinct": n, "bytes": n, "active": n}
    /__log     [[path, start, end, bytes, status], ...] with time.monotonic() seconds (end null while running)
    /__reset   clears counters and the log
"""

import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit


class Link:
    """A virtual link of `rate` bytes/s: `wait(n)` blocks until an n-byte chunk's first-come slot begins."""

    def __init__(self, rate):
        self.rate = rate
        self.lock = threading.Lock()
        self.next_free = 0.0

    def wait(self, n):
        if self.rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_free)
            self.next_free = start + n / self.rate
        if start > now:
            time.sleep(start - now)


class Pools:
    """The files under the root, read once and kept in memory (the origin must not be disk-bound)."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.lock = threading.Lock()
        self.names = {}
        self.data = {}

    def names_of(self, pool):
        with self.lock:
            if pool not in self.names:
                directory = os.path.join(self.root, pool)
                try:
                    self.names[pool] = sorted(n for n in os.listdir(directory) if not n.startswith("."))
                except OSError:
                    self.names[pool] = []
            return self.names[pool]

    def read(self, pool, name):
        path = os.path.join(self.root, pool, name)
        with self.lock:
            body = self.data.get(path)
        if body is None:
            with open(path, "rb") as f:
                body = f.read()
            with self.lock:
                self.data[path] = body
        return body

    def body_for(self, raw_path):
        parts = [p for p in unquote(raw_path).split("/") if p]
        if len(parts) < 2 or any(p in (".", "..") for p in parts):
            return None
        pool = parts[0]
        names = self.names_of(pool)
        if not names:
            return None
        if len(parts) == 2 and parts[1] in names:
            return self.read(pool, parts[1])
        stem = parts[-1].rsplit(".", 1)[0]
        if not stem.isdigit():
            return None
        return self.read(pool, names[int(stem) % len(names)])


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.requests = 0
        self.bytes = 0
        self.active = 0
        self.paths = set()
        self.log = []

    def begin(self, path):
        entry = [path, time.monotonic(), None, 0, None]
        with self.lock:
            self.requests += 1
            self.active += 1
            self.paths.add(path)
            self.log.append(entry)
        return entry

    def end(self, entry, sent, status):
        with self.lock:
            entry[2] = time.monotonic()
            entry[3] = sent
            entry[4] = status
            self.bytes += sent
            self.active -= 1


LINK = Link(0)
LATENCY = 0.0
CHUNK = 16384
SNDBUF = 8192
POOLS = None
STATS = Stats()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "shaped-origin/1"
    disable_nagle_algorithm = True

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        except OSError:
            pass

    def log_message(self, format, *args):  # noqa: A002
        pass

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def finish(self):
        try:
            super().finish()
        except (OSError, ValueError):
            pass

    def do_GET(self):
        parts = urlsplit(self.path)
        path = parts.path or "/"
        if path.startswith("/__"):
            self.control(path)
            return
        query = dict(parse_qsl(parts.query))
        entry = STATS.begin(path)
        sent, status = 0, 500
        try:
            delay = LATENCY + float(query.get("delay", 0) or 0)
            if delay > 0:
                time.sleep(delay)
            body = POOLS.body_for(path)
            if body is None:
                status = 404
                self.reply_small(404, b"not found\n", "text/plain")
                return
            status = 200
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "max-age=86400")
            self.end_headers()
            self.wfile.flush()
            view = memoryview(body)
            sock = self.connection
            poller = select.poll()
            poller.register(sock, select.POLLOUT)
            while sent < len(body):
                n = min(CHUNK, len(body) - sent)
                if LINK.rate > 0:
                    poller.poll()  # reserve a slot only once the client can take bytes
                    LINK.wait(n)
                sock.sendall(view[sent:sent + n])
                sent += n
        finally:
            STATS.end(entry, sent, status)

    def control(self, path):
        with STATS.lock:
            if path == "/__stats":
                obj = {"requests": STATS.requests, "distinct": len(STATS.paths), "bytes": STATS.bytes,
                       "active": STATS.active}
            elif path == "/__log":
                obj = [list(e) for e in STATS.log]
            elif path == "/__reset":
                STATS.reset()
                obj = {"ok": True}
            else:
                obj = {"error": "unknown control path"}
        self.reply_small(200, json.dumps(obj).encode(), "application/json")

    def reply_small(self, code, data, ctype):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main():
    global LINK, LATENCY, CHUNK, SNDBUF, POOLS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rate", type=float, default=2_500_000, help="bytes/s shared by all responses, 0 = no limit")
    ap.add_argument("--latency", type=float, default=0.030, help="seconds added before every response")
    ap.add_argument("--chunk", type=int, default=16384)
    ap.add_argument("--sndbuf", type=int, default=8192)
    args = ap.parse_args()
    LINK, LATENCY, CHUNK, SNDBUF = Link(args.rate), args.latency, args.chunk, args.sndbuf
    POOLS = Pools(args.root)

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server = Server(("127.0.0.1", args.port), Handler)
    try:
        print("PORT %d" % server.server_address[1], flush=True)
        server.serve_forever(poll_interval=0.2)
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
