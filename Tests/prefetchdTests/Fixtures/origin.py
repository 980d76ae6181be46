#!/usr/bin/env python3
"""Scriptable test HTTP origin server for prefetchd integration tests and benchmarks.

Standard library only (Python 3.11+).

Usage:
    python3 origin.py [--port 0] [--root DIR]

Binds 127.0.0.1 (port 0 = ephemeral), prints exactly one line ``PORT <n>`` to
stdout, flushes, and serves until SIGTERM / SIGINT (exit status 0).  Nothing is
logged per request.

Control endpoints (not counted, not delayed):
    GET  /__stats   -> {"counts": {path: n}, "log": [...], "config": {...}, "extension_bytes": n}
    POST /__reset   -> clears counts and log (GET is accepted too)
    POST /__config  -> JSON body {"delay": seconds}: default delay before every
                       non-control response (a ``delay=`` query overrides it)
    POST /__release -> lets every request held by ``hold=1`` go on (and later ones)

Every other request is counted per path (path without query, as sent on the
wire) and appended to the log as
    {"path", "method", "query", "status", "start", "end", "headers", "client"}
where start/end are time.monotonic() seconds (end is null while in flight) and
headers is the subset Range, If-Range, If-None-Match, If-Modified-Since,
User-Agent, Accept that the request carried; client is the connection's
"address:port" (two requests with the same one shared a connection); with
--tls-cert, tls_resumed says whether the connection resumed a TLS session.

Bodies: DIR/<path> when --root is given and the file exists (Content-Type by
extension), otherwise deterministic bytes derived from the path via sha256
chaining (a 64 KiB pattern block repeated, so any size is cheap).  Paths ending
in .jpg/.jpeg are a real 8x8 JPEG padded with comment segments (image/jpeg, minimum 286 bytes),
others application/octet-stream.  ``size=N`` (default 2048) sets the size of
generated bodies.

Query parameters (combine freely):
    delay=S            sleep S seconds (float) before responding
    hold=1             wait for POST /__release (120 s at most) before responding
    status=N           answer status N (!= 200) with a short text/plain body
    retry_after=S      add Retry-After: S to error / status responses
    fail_first=K       first K requests for this path answer 500, then normal
    fail_status=N      the status fail_first answers with (default 500), e.g. 429
    drip=BPS           send the body at BPS bytes/second (correct Content-Length)
    redirect=URL       302 to URL (URL-decoded), e.g. file:///etc/passwd
    redirect_status=N  status to use for redirects (default 302)
    redirect_loop=1    redirect to itself forever (adds incrementing hop=N)
    redirect_chain=N   redirect N times (redirect_chain=N-1, ...), then serve
    redirect_length=N  the redirect announces a body of N bytes (Content-Length), sends its short text and
                       closes the connection
    endless_body=1     a status or redirect response's body (status=N, redirect=URL) is chunked and never ends:
                       16 KiB chunks until the client closes the connection
    endless_extension=1 a chunked response (of status=N, else 200) whose first chunk's size line never ends: 1;x=
                       then bytes without a line end until the client closes the connection
    no_length=1        no Content-Length, Connection: close, stream then close
    chunked=N          Transfer-Encoding: chunked, the body in chunks of N bytes
    chunk_line=S       with chunked=N: the second chunk's size line is S (zz: not hex)
    short=K            full Content-Length but only K bytes sent, then close
    reset_after=K      headers + K bytes, then TCP RST (SO_LINGER 0)
    hangup=1           read the request, then close the connection without a
                       reply (curl: "Empty reply from server")
    html=1             HTML body served as image/jpeg
    ctype=TYPE         override Content-Type
    cc=VALUE           Cache-Control (default max-age=3600; empty: none)
    expires=S          Expires: S seconds from now
    ranges=0           disable Range support (Accept-Ranges: none)
    size=N             body size for generated bodies (underscores allowed)
    status_line=S      the response's status line is S (HTTP/1.1 2000 OK: a status curl refuses)
    header=NAME:VALUE  add this header line to the response (repeatable; added
                       to the origin's own, so a second Content-Length is two)
    big_header=N       add one header line of N bytes (X-Big: aaa...)
    many_headers=N     add N header lines of 1 KiB each
    bare_304=1         a 304 carries the ETag alone (no Cache-Control, Expires or Last-Modified); =expires: and
                       the Expires of expires=S
    early_hints=N      send N interim responses (103 Early Hints, 58 bytes each)
                       before the response
    gzip=1             gzip the body (Content-Encoding: gzip, whatever the
                       request's Accept-Encoding; no ranges)
    zeros=1            a body of size zero bytes (with gzip=1: a gzip bomb)
    cut_first=K        the first request for this path gets K bytes of its body
                       (full Content-Length), then the connection closes
    cut_headers_first=1 the first request for this path gets its status line and one header line, then
                       the connection closes
    changed=1          from the second request for this path on, another version
                       of the generated body (another ETag)
    changed_size=N     with changed=1: that other version is N bytes long
    ignore_if_range=1  a Range is served whatever If-Range says
    gzip_later=1       gzip=1 from the second request for this path on
    gzip_trailer=S     with gzip=1: the bytes S after the end of the gzip stream
    bare_206=1         a 206 carries neither ETag nor Last-Modified
    no_etag=1          no ETag
    modified_now=1     Last-Modified is now (as Date: a weak validator, RFC 9110 section 8.8.2.2)
    etag_304=TAG       a 304 carries ETag TAG instead of the body's
    modified_304=DATE  a 304 carries Last-Modified DATE instead of the body's
    lie_range=A        a request with a Range header gets 206 with the bytes
                       from A to the end (and a Content-Range saying so),
                       whatever range it asked for
    range_unasked=A    a request without a Range header gets 206 with the
                       bytes from A to the end
    auth=USER:PASS     401 unless the request carries Basic credentials
                       USER:PASS (the URL's userinfo)
    crlf_after=1       50 ms after the response, an empty line more (CRLF)
    idle_408=S         without a next request within S seconds of the
                       response, a 408 and the end of the connection
    unasked=S          S seconds after the response, a second whole 200
                       response on the same connection, unasked (the JPEG
                       of /unasked.jpg)

Conditional / range requests: single ``Range: bytes=A-``, ``A-B`` or ``-N``
-> 206 + Content-Range (unsatisfiable -> 416); If-Range (ETag or date) that
does not match -> full 200; If-None-Match matching the ETag -> 304;
If-Modified-Since >= Last-Modified (and no If-None-Match) -> 304.
HEAD behaves like GET without a body.
"""

import argparse
import base64
import bisect
import email.utils
import functools
import gzip
import hashlib
import io
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

BLOCK_SIZE = 64 * 1024
CHUNK_SIZE = 64 * 1024
DEFAULT_SIZE = 2048
# A real 8x8 baseline JPEG. Generated .jpg bodies are this image with comment (COM) segments of
# path-derived bytes between its SOI marker and the rest, so any size is a valid, decodable JPEG.
TINY_JPEG = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb0043000302020302020303030304030304050805050404050a07070608"
    "0c0a0c0c0b0a0b0b0d0e12100d0e110e0b0b1016101113141515150c0f171816141812141514ffdb004301030404050405090505"
    "09140d0b0d1414141414141414141414141414141414141414141414141414141414141414141414141414141414141414141414"
    "141414ffc00011080008000803011100021101031101ffc40014000100000000000000000000000000000007ffc4001410010000"
    "0000000000000000000000000000ffc4001501010100000000000000000000000000000708ffc40014110100000000000000000000"
    "000000000000ffda000c03010002110311003f002f540247ffd9")
JPEG_HEADER = TINY_JPEG[:2]
JPEG_TRAILER = TINY_JPEG[2:]
COM_SEGMENT = 65536  # bytes per comment segment: FF FE, a 2-byte length, 65532 bytes of payload
LAST_MODIFIED_TS = 1577836800  # Wed, 01 Jan 2020 00:00:00 GMT
LAST_MODIFIED = email.utils.formatdate(LAST_MODIFIED_TS, usegmt=True)
DEFAULT_CACHE_CONTROL = "max-age=3600"
LOGGED_HEADERS = ("Range", "If-Range", "If-None-Match", "If-Modified-Since",
                  "User-Agent", "Accept", "Accept-Encoding")
CONTROL_PATHS = ("/__stats", "/__reset", "/__config", "/__release")
EXT_TYPES = {
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".svg": "image/svg+xml",
}
HTML_BODY = (b"<!DOCTYPE html>\n<html><head><title>Not an image</title></head>"
             b"<body><h1>This is HTML, not a JPEG</h1>"
             b"<p>Served with Content-Type image/jpeg on purpose.</p>"
             b"</body></html>\n")
CONNECTION_ERRORS = (ConnectionError, TimeoutError)  # BrokenPipe/Reset/Aborted


class BadRequest(Exception):
    pass


# --------------------------------------------------------------------------
# Shared state


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.log = []
        self.delay = 0.0
        self.released = threading.Event()
        self.extension_bytes = 0  # sent by endless_extension=1

    def begin(self, path, method, query, headers, client, resumed=None):
        entry = {
            "path": path,
            "method": method,
            "query": query,
            "status": None,
            "start": time.monotonic(),
            "end": None,
            "headers": {h: headers[h] for h in LOGGED_HEADERS if headers.get(h) is not None},
            "client": "%s:%s" % client[:2],
        }
        if resumed is not None:
            entry["tls_resumed"] = resumed
        with self.lock:
            n = self.counts.get(path, 0) + 1
            self.counts[path] = n
            self.log.append(entry)
        return entry, n

    def end(self, entry, status):
        with self.lock:
            entry["status"] = status
            entry["end"] = time.monotonic()

    def snapshot(self):
        with self.lock:
            return {
                "counts": dict(self.counts),
                "log": [dict(e, headers=dict(e["headers"])) for e in self.log],
                "config": {"delay": self.delay},
                "extension_bytes": self.extension_bytes,
            }

    def reset(self):
        with self.lock:
            self.counts.clear()
            self.log.clear()


STATE = State()
ROOT = None  # set from --root


# --------------------------------------------------------------------------
# Bodies


@functools.lru_cache(maxsize=1024)
def pattern_block(seed, length):
    """`length` (multiple of 32, <= 64 KiB) deterministic bytes: sha256 chaining
    seeded by the path.  Shorter blocks are prefixes of longer ones."""
    h = hashlib.sha256(seed.encode("utf-8", "surrogateescape")).digest()
    parts = []
    for _ in range(length // 32):
        h = hashlib.sha256(h).digest()
        parts.append(h)
    return b"".join(parts)


class BytesBody:
    def __init__(self, data):
        self.data = data
        self.size = len(data)

    def iter_range(self, start, end):
        for pos in range(start, end, CHUNK_SIZE):
            yield self.data[pos:min(end, pos + CHUNK_SIZE)]

    def cache_key(self):
        return None


class GeneratedBody:
    def __init__(self, seed, size, jpeg):
        self.seed = seed
        self.jpeg = jpeg
        self.headers = []  # (offset, 4 header bytes) of each comment segment
        if jpeg:
            minimum = len(JPEG_HEADER) + len(JPEG_TRAILER)
            filler = max(0, size - minimum)
            if 0 < filler < 4:
                filler = 4
            self.size = minimum + filler
            offset = len(JPEG_HEADER)
            while filler > 0:
                take = min(COM_SEGMENT, filler)
                if 0 < filler - take < 4:
                    take -= 4
                self.headers.append((offset, b"\xff\xfe" + struct.pack(">H", take - 2)))
                offset += take
                filler -= take
        else:
            self.size = size
        # Only generate as much of the pattern as the body needs (cheap for
        # small bodies); bodies over 64 KiB repeat the 64 KiB block.
        self.block_len = min(BLOCK_SIZE, max(32, (self.size + 31) // 32 * 32))

    def iter_range(self, start, end):
        block_len = self.block_len
        block = pattern_block(self.seed, block_len)
        pos = start
        tail = self.size - len(JPEG_TRAILER)
        while pos < end:
            n = min(CHUNK_SIZE, end - pos)
            off = pos % block_len
            if off + n <= block_len:
                piece = block[off:off + n]
            else:
                piece = block[off:] + block[:n - (block_len - off)]
            if self.jpeg:
                piece = bytearray(piece)
                for i in range(pos, min(pos + n, len(JPEG_HEADER))):
                    piece[i - pos] = JPEG_HEADER[i]
                first = max(0, bisect.bisect_right(self.headers, (pos, b"\xff" * 4)) - 1)
                for offset, header in self.headers[first:]:
                    if offset >= pos + n:
                        break
                    for i in range(max(pos, offset), min(pos + n, offset + 4)):
                        piece[i - pos] = header[i - offset]
                for i in range(max(pos, tail), pos + n):
                    piece[i - pos] = JPEG_TRAILER[i - tail]
                piece = bytes(piece)
            yield piece
            pos += n

    def cache_key(self):
        return ("gen", self.seed, self.size, self.jpeg)


class FileBody:
    def __init__(self, path, st):
        self.path = path
        self.size = st.st_size
        self.mtime = st.st_mtime_ns

    def iter_range(self, start, end):
        with open(self.path, "rb") as f:
            f.seek(start)
            remaining = end - start
            while remaining > 0:
                data = f.read(min(CHUNK_SIZE, remaining))
                if not data:
                    break
                remaining -= len(data)
                yield data

    def cache_key(self):
        return ("file", self.path, self.size, self.mtime)


_etag_cache = {}
_etag_lock = threading.Lock()


def etag_for(body):
    key = body.cache_key()
    if key is not None:
        with _etag_lock:
            cached = _etag_cache.get(key)
        if cached is not None:
            return cached
    h = hashlib.sha256()
    for chunk in body.iter_range(0, body.size):
        h.update(chunk)
    tag = '"%s"' % h.hexdigest()[:16]
    if key is not None:
        with _etag_lock:
            if len(_etag_cache) > 4096:
                _etag_cache.clear()
            _etag_cache[key] = tag
    return tag


def root_file(raw_path):
    """Return (abs_path, stat) for DIR/<path> if it is a regular file inside ROOT."""
    if ROOT is None:
        return None
    rel = unquote(raw_path).lstrip("/")
    if not rel:
        return None
    candidate = os.path.realpath(os.path.join(ROOT, rel))
    if candidate != ROOT and not candidate.startswith(ROOT + os.sep):
        return None
    try:
        st = os.stat(candidate)
    except OSError:
        return None
    if not os.path.isfile(candidate):
        return None
    return candidate, st


def ext_of(path):
    return os.path.splitext(path.lower())[1]


# --------------------------------------------------------------------------
# Helpers


def parse_int(q, name, default=None, minimum=0):
    if name not in q:
        return default
    try:
        v = int(q[name])
    except ValueError:
        raise BadRequest("bad integer for %s: %r" % (name, q[name]))
    if v < minimum:
        raise BadRequest("%s must be >= %d" % (name, minimum))
    return v


def parse_float(q, name, default=None):
    if name not in q:
        return default
    try:
        v = float(q[name])
    except ValueError:
        raise BadRequest("bad number for %s: %r" % (name, q[name]))
    if v < 0 or v != v:
        raise BadRequest("%s must be >= 0" % name)
    return v


def truthy(q, name):
    return q.get(name, "0") not in ("", "0", "false", "no")


def parse_range(value, size):
    """Return (start, end_exclusive), 'unsatisfiable', or None (ignore header)."""
    if not value:
        return None
    value = value.strip()
    if not value.lower().startswith("bytes="):
        return None
    spec = value[6:].strip()
    if "," in spec or "-" not in spec:
        return None
    first, last = (s.strip() for s in spec.split("-", 1))
    try:
        if first == "":
            if not last.isdigit():
                return None
            n = int(last)
            if n == 0:
                return "unsatisfiable"
            return (max(0, size - n), size)
        if not first.isdigit() or (last and not last.isdigit()):
            return None
        a = int(first)
        b = int(last) if last else size - 1
    except ValueError:
        return None
    if last and b < a:
        return None
    if a >= size:
        return "unsatisfiable"
    return (a, min(b, size - 1) + 1)


def etag_matches(header, etag, weak=True):
    if header is None:
        return False
    header = header.strip()
    if header == "*":
        return True
    bare = etag[2:] if etag.startswith("W/") else etag
    for cand in header.split(","):
        cand = cand.strip()
        if weak and cand.startswith("W/"):
            cand = cand[2:]
        if cand == bare:
            return True
    return False


def parse_http_date(value):
    try:
        dt = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    return dt.timestamp()


# --------------------------------------------------------------------------
# Handler


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "prefetchd-test-origin/1.0"
    # Headers and body are separate writes; without TCP_NODELAY, Nagle plus
    # delayed ACK adds ~40 ms to every keep-alive response.
    disable_nagle_algorithm = True

    def version_string(self):
        return self.server_version

    # ---- quiet & robust plumbing -------------------------------------
    def log_message(self, format, *args):  # noqa: A002
        pass

    def handle(self):
        try:
            super().handle()
        except CONNECTION_ERRORS:
            self.close_connection = True

    def finish(self):
        try:
            super().finish()
        except (OSError, ValueError):
            pass

    _status_line = None

    def send_response(self, code, message=None):
        self._status = code
        if self._status_line is not None:  # status_line=S
            self.log_request(code)
            if not hasattr(self, "_headers_buffer"):
                self._headers_buffer = []
            self._headers_buffer.append(self._status_line.encode("latin-1") + b"\r\n")
            return
        super().send_response(code, message)

    # ---- methods ----------------------------------------------------------
    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_OPTIONS(self):
        self._dispatch("OPTIONS")

    def _read_request_body(self):
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
        except ValueError:
            self.close_connection = True
            return b""
        return self.rfile.read(n) if n > 0 else b""

    def _dispatch(self, method):
        self._status = None
        try:
            parts = urlsplit(self.path)
            raw_path = parts.path or "/"
            query = parts.query
            if raw_path in CONTROL_PATHS:
                self._control(method, raw_path)
                return
            entry, count = STATE.begin(raw_path, method, query, self.headers, self.client_address,
                                       getattr(self.connection, "session_reused", None))
            try:
                self._read_request_body()
                self._serve(method, raw_path, query, count)
            finally:
                STATE.end(entry, self._status)
        except CONNECTION_ERRORS:
            self.close_connection = True

    # ---- control endpoints ---------------------------------------------
    def _control(self, method, path):
        body = self._read_request_body()
        if path == "/__stats" and method in ("GET", "HEAD"):
            self._send_json(200, STATE.snapshot(), head=(method == "HEAD"))
        elif path == "/__reset" and method in ("POST", "GET"):
            STATE.reset()
            self._send_json(200, {"ok": True})
        elif path == "/__config" and method == "POST":
            try:
                cfg = json.loads(body.decode("utf-8") or "{}")
                if not isinstance(cfg, dict):
                    raise ValueError("config must be an object")
                if "delay" in cfg:
                    d = float(cfg["delay"] or 0)
                    if d < 0:
                        raise ValueError("delay must be >= 0")
                    STATE.delay = d
            except (ValueError, TypeError, UnicodeDecodeError) as e:
                self._send_json(400, {"error": str(e)})
                return
            self._send_json(200, {"ok": True, "config": {"delay": STATE.delay}})
        elif path == "/__release" and method == "POST":
            STATE.released.set()
            self._send_json(200, {"ok": True})
        else:
            self._send_json(405, {"error": "method not allowed"})

    def _send_json(self, code, obj, head=False):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(data)

    # ---- simple responses -------------------------------------------------
    def _send_text(self, code, text, head=False, extra=()):
        data = text.encode()
        self.send_response(code)
        no_body = code in (204, 304) or 100 <= code < 200
        for k, v in extra:
            self.send_header(k, v)
        if self.endless_body and not no_body and not head:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.close_connection = True
            chunk = b"4000\r\n" + b"x" * 0x4000 + b"\r\n"
            try:
                while True:
                    self.wfile.write(chunk)
            except OSError:
                return
        if not no_body:
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head and not no_body:
            self.wfile.write(data)

    def _redirect(self, location, code, head, extra=()):
        self._send_text(code, "Redirecting to %s\n" % location, head,
                        extra=[("Location", location)] + list(extra))

    def _self_url(self, raw_path, params):
        host = self.headers.get("Host") or "127.0.0.1:%d" % self.server.server_address[1]
        qs = urlencode(params)
        return "http://%s%s%s" % (host, raw_path, "?" + qs if qs else "")

    # ---- main logic --------------------------------------------------------
    def _serve(self, method, raw_path, query, count):
        head = method == "HEAD"
        pairs = parse_qsl(query, keep_blank_values=True)
        q = {}
        self.endless_body = False
        for k, v in pairs:
            q.setdefault(k, v)
        self.endless_body = truthy(q, "endless_body")
        try:
            self._serve_inner(method, head, raw_path, pairs, q, count)
        except BadRequest as e:
            self.close_connection = True
            self._send_text(400, "bad request: %s\n" % e, head)

    def _serve_inner(self, method, head, raw_path, pairs, q, count):
        delay = parse_float(q, "delay", STATE.delay)
        if delay:
            time.sleep(delay)
        if q.get("hold") == "1":
            STATE.released.wait(120)

        self._status_line = q.get("status_line")
        extra = []
        if "retry_after" in q:
            extra.append(("Retry-After", q["retry_after"]))
        for k, v in pairs:
            if k == "header":
                name, sep, value = v.partition(":")
                if not sep or not name.strip():
                    raise BadRequest("header must be NAME:VALUE, not %r" % v)
                extra.append((name.strip(), value.strip()))
        big_header = parse_int(q, "big_header", 0)
        if big_header:
            extra.append(("X-Big", "a" * big_header))
        for n in range(parse_int(q, "many_headers", 0)):
            extra.append(("X-Many-%d" % n, "m" * 1024))
        if truthy(q, "cut_headers_first") and count == 1:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\n")
            self.close_connection = True
            return
        hints = parse_int(q, "early_hints", 0)
        if hints:
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </hint.css>; rel=preload\r\n\r\n" * hints)

        if method not in ("GET", "HEAD"):
            self._send_text(405, "method not allowed\n", extra=[("Allow", "GET, HEAD")])
            return

        redirect_status = parse_int(q, "redirect_status", 302)

        if truthy(q, "endless_extension"):
            self.send_response(parse_int(q, "status", 200, minimum=100))
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.close_connection = True
            block = b"a" * 65536
            try:
                self.wfile.write(b"1;x=")
                while True:
                    self.wfile.write(block)
                    with STATE.lock:
                        STATE.extension_bytes += len(block)
            except OSError:
                return

        # --- redirects ---
        if truthy(q, "redirect_loop"):
            hop = parse_int(q, "hop", 0)
            params = [(k, v) for k, v in pairs if k != "hop"] + [("hop", str(hop + 1))]
            self._redirect(self._self_url(raw_path, params), redirect_status, head)
            return
        chain = parse_int(q, "redirect_chain", 0)
        if chain > 0:
            params = [(k, (str(chain - 1) if k == "redirect_chain" else v)) for k, v in pairs]
            self._redirect(self._self_url(raw_path, params), redirect_status, head)
            return
        if "redirect" in q and "redirect_length" in q:
            self.send_response(redirect_status)
            self.send_header("Location", q["redirect"])
            self.send_header("Content-Length", q["redirect_length"])
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"Redirecting\n")
            self.close_connection = True
            return
        if "redirect" in q:
            self._redirect(q["redirect"], redirect_status, head)
            return

        # --- failures ---
        if truthy(q, "hangup"):
            self.close_connection = True
            return
        fail_first = parse_int(q, "fail_first", 0)
        if count <= fail_first:
            fail_status = parse_int(q, "fail_status", 500, minimum=100)
            self._send_text(fail_status, "%d (fail_first %d/%d)\n"
                            % (fail_status, count, fail_first), head, extra)
            return
        if "auth" in q:
            given = self.headers.get("Authorization", "")
            if given != "Basic " + base64.b64encode(q["auth"].encode()).decode():
                self._send_text(401, "401 Unauthorized\n", head, extra)
                return
        status = parse_int(q, "status", None, minimum=100)
        if status is not None and status != 200:
            if status > 999:
                raise BadRequest("status must be < 1000")
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = "Status"
            self._send_text(status, "%d %s\n" % (status, phrase), head, extra)
            return

        # --- body selection ---
        found = root_file(raw_path)
        if truthy(q, "html"):
            body = BytesBody(HTML_BODY)
            ctype = "image/jpeg"
        elif truthy(q, "zeros"):
            body = BytesBody(bytes(parse_int(q, "size", DEFAULT_SIZE)))
            ctype = "image/jpeg"
        elif found is not None:
            body = FileBody(*found)
            ctype = EXT_TYPES.get(ext_of(found[0]), "application/octet-stream")
        else:
            changed = truthy(q, "changed") and count > 1
            size = parse_int(q, "changed_size" if changed and "changed_size" in q else "size", DEFAULT_SIZE)
            jpeg = ext_of(raw_path) in (".jpg", ".jpeg")
            # changed=1: a new version of the file (another seed, so another ETag) from the second request on.
            seed = raw_path + ("#2" if changed else "")
            body = GeneratedBody(seed, size, jpeg)
            ctype = "image/jpeg" if jpeg else "application/octet-stream"
        if "ctype" in q:
            ctype = q["ctype"]
        gzipped = truthy(q, "gzip") or (truthy(q, "gzip_later") and count > 1)
        if gzipped:
            body = BytesBody(gzip.compress(b"".join(body.iter_range(0, body.size)))
                             + q.get("gzip_trailer", "").encode())

        etag = etag_for(body)
        ranges_on = q.get("ranges", "1") != "0" and not gzipped
        common = [
            ("ETag", etag),
            ("Last-Modified", self.date_time_string() if truthy(q, "modified_now") else LAST_MODIFIED),
            ("Accept-Ranges", "bytes" if ranges_on else "none"),
        ]
        if truthy(q, "no_etag"):
            common = common[1:]
        cache_control = q["cc"] if "cc" in q else DEFAULT_CACHE_CONTROL
        if cache_control:
            common.append(("Cache-Control", cache_control))
        if "expires" in q:
            common.append(("Expires", email.utils.formatdate(time.time() + float(q["expires"]), usegmt=True)))
        if gzipped:
            common.append(("Content-Encoding", "gzip"))
        common += extra

        # --- conditionals ---
        inm = self.headers.get("If-None-Match")
        if inm is not None:
            not_modified = etag_matches(inm, etag)
        else:
            ims = self.headers.get("If-Modified-Since")
            ts = parse_http_date(ims) if ims else None
            not_modified = ts is not None and ts >= LAST_MODIFIED_TS
        if not_modified:
            self.send_response(304)
            if "etag_304" in q:
                common = [(k, q["etag_304"] if k == "ETag" else v) for k, v in common]
            if "modified_304" in q:
                common = [(k, q["modified_304"] if k == "Last-Modified" else v) for k, v in common]
            kept = common
            if truthy(q, "bare_304"):
                kept = [(k, v) for k, v in common if k == "ETag" or (k == "Expires" and q["bare_304"] == "expires")]
            for k, v in kept:
                self.send_header(k, v)
            self.end_headers()
            return

        # --- range ---
        start, end, code = 0, body.size, 200
        content_range = None
        if ranges_on and self.headers.get("Range"):
            r = parse_range(self.headers.get("Range"), body.size)
            if_range = self.headers.get("If-Range")
            if r is not None and if_range is not None and not truthy(q, "ignore_if_range"):
                if_range = if_range.strip()
                if if_range.startswith('"') or if_range.startswith("W/"):
                    ok = if_range == etag  # strong comparison
                else:
                    ok = if_range == LAST_MODIFIED
                if not ok:
                    r = None
            if r == "unsatisfiable":
                self._send_text(416, "416 Range Not Satisfiable\n", head,
                                extra=[("Content-Range", "bytes */%d" % body.size)]
                                + [kv for kv in common if kv[0] != "Cache-Control"])
                return
            if r is not None:
                start, end = r
                code = 206
                if "lie_range" in q:
                    start, end = min(parse_int(q, "lie_range"), body.size - 1), body.size
                content_range = "bytes %d-%d/%d" % (start, end - 1, body.size)
        elif "range_unasked" in q:
            start, end, code = min(parse_int(q, "range_unasked"), body.size - 1), body.size, 206
            content_range = "bytes %d-%d/%d" % (start, end - 1, body.size)

        length = end - start
        no_length = truthy(q, "no_length")
        chunked = parse_int(q, "chunked", None)
        short = parse_int(q, "short", None)
        reset_after = parse_int(q, "reset_after", None)
        drip = parse_float(q, "drip", None)

        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for k, v in common:
            if not (code == 206 and truthy(q, "bare_206") and k in ("ETag", "Last-Modified")):
                self.send_header(k, v)
        if content_range:
            self.send_header("Content-Range", content_range)
        if no_length:
            self.send_header("Connection", "close")
            self.close_connection = True
        elif chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()
        if head:
            return

        limit = None
        if short is not None:
            limit = min(short, length)
        cut_first = parse_int(q, "cut_first", None)
        if cut_first is not None and count == 1:
            limit = min(cut_first, length)
            short = limit
        if reset_after is not None:
            limit = reset_after if limit is None else min(limit, reset_after)
            limit = min(limit, length)
        if chunked:
            data = b"".join(body.iter_range(start, end))
            sizes = [b"%x" % len(data[i:i + chunked]) for i in range(0, len(data), chunked)]
            if "chunk_line" in q and len(sizes) > 1:
                sizes[1] = q["chunk_line"].encode("latin-1")
            self.wfile.write(b"".join(b"%s\r\n%s\r\n" % (size, data[i * chunked:(i + 1) * chunked])
                                      for i, size in enumerate(sizes)) + b"0\r\n\r\n")
        else:
            self._write_body(body, start, end, limit, drip)

        if reset_after is not None:
            time.sleep(0.05)  # let the client read the bytes before the RST
            self._reset_connection()
        elif short is not None and short < length:
            self.close_connection = True
        elif "unasked" in q:
            self._send_unasked(parse_float(q, "unasked"))
        elif "idle_408" in q:
            self._close_idle(parse_float(q, "idle_408"))
        elif truthy(q, "crlf_after"):
            self.wfile.flush()
            time.sleep(0.05)
            self.wfile.write(b"\r\n")

    def _close_idle(self, seconds):
        """Without a next request within `seconds`, a 408 and the end of the connection, as servers do at their
        keep-alive timeout."""
        self.wfile.flush()
        if select.select([self.connection], [], [], seconds)[0]:
            return
        self.wfile.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True

    def _send_unasked(self, seconds):
        """After `seconds`, a whole 200 response nobody asked for (the JPEG of /unasked.jpg), on this connection."""
        time.sleep(seconds)
        body = GeneratedBody("/unasked.jpg", DEFAULT_SIZE, True)
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n"
                         b"Cache-Control: max-age=3600\r\n\r\n" % body.size)
        self._write_body(body, 0, body.size, None, None)

    def _write_body(self, body, start, end, limit, bps):
        sent = 0
        t0 = time.monotonic()
        if bps is not None and bps > 0:
            step = max(1, int(bps / 20))  # ~20 writes per second (1 byte if slow)
        else:
            step = None
        for chunk in body.iter_range(start, end):
            if limit is not None:
                if sent >= limit:
                    break
                chunk = chunk[:limit - sent]
            if step is None:
                self.wfile.write(chunk)
                sent += len(chunk)
                continue
            for i in range(0, len(chunk), step):
                piece = chunk[i:i + step]
                self.wfile.write(piece)
                self.wfile.flush()
                sent += len(piece)
                wait = t0 + sent / bps - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
        try:
            self.wfile.flush()
        except ValueError:
            pass

    def _reset_connection(self):
        self.close_connection = True
        conn = self.connection
        try:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        for f in (self.wfile, self.rfile):
            try:
                f.close()
            except (OSError, ValueError):
                pass
        try:
            conn.close()  # makefile refs are gone, so this really closes -> RST
        except OSError:
            pass
        # Harmless stand-ins so the base class' flush/close calls are no-ops.
        self.wfile = io.BytesIO()
        self.rfile = io.BytesIO()


# --------------------------------------------------------------------------
# Server


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, CONNECTION_ERRORS):
            return
        super().handle_error(request, client_address)


def main(argv=None):
    global ROOT
    ap = argparse.ArgumentParser(description="prefetchd test origin server")
    ap.add_argument("--port", type=int, default=0, help="port (0 = ephemeral)")
    ap.add_argument("--root", default=None, help="serve existing files from DIR")
    ap.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate chain (PEM)")
    ap.add_argument("--tls-key", default=None, help="the certificate's private key (PEM)")
    args = ap.parse_args(argv)
    if args.root is not None:
        ROOT = os.path.realpath(args.root)

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # A parent may have spawned us with these blocked (its thread's mask is inherited).
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

    server = Server(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    try:
        sys.stdout.write("PORT %d\n" % server.server_address[1])
        sys.stdout.flush()
        server.serve_forever(poll_interval=0.2)
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
