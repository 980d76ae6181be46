#!/usr/bin/env python3
"""A small prefetchd client that uses only Python's standard library.

It shows the v1 wire protocol (docs/protocol.md) end to end:

1. connect to the daemon's Unix socket and read the greeting;
2. send one `queue` request for every URL but the first (background prefetch);
3. send a `get` request for every URL, several in flight on one connection,
   and match the replies to the requests by their `id`;
4. print one line per URL, in the order given:
       URL PATH                  the URL is in the cache at PATH
       URL ERROR_CODE: message   the daemon could not get it

Usage:
    python3 examples/client.py [--socket PATH] [--timeout SEC] [-v] URL...

Exit status:
    0  every `get` succeeded
    1  at least one `get` failed, or the time ran out
    2  usage error
    3  the daemon is unreachable: no socket, no greeting, not protocol 1,
       or it went away (closed the connection, or is shutting down)
       before every URL was answered
"""

import argparse
import json
import math
import os
import socket
import sys
import time

PROTOCOL = 1
# The daemon rejects a request line longer than this (newline excluded) with
# `line_too_long` and then closes the connection, so we never send one.
MAX_LINE = 65536
# At most this many URLs in one batch request (`queue`, `demote`, ...).
MAX_BATCH = 10_000
# `get` requests in flight at once. Many are fine; a bound keeps memory and
# the daemon's per-connection output buffer small for very long URL lists.
WINDOW = 32

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class Unreachable(Exception):
    """The daemon cannot be reached or stopped talking to us."""


def default_socket():
    """The socket prefetchctl would use: $PREFETCHD_SOCKET, else the daemon's default path."""
    path = os.environ.get("PREFETCHD_SOCKET")
    if path:
        return path
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        return runtime + "/prefetchd/ctl.sock"
    # Any user may make this directory first and answer in the daemon's place: it must be this user's own, and
    # neither its group nor others may write to it (as prefetchctl checks).
    directory = "/tmp/prefetchd-%d" % os.getuid()
    try:
        link, info = os.lstat(directory), os.stat(directory)
    except OSError:
        return directory + "/ctl.sock"  # connecting says what is wrong
    if os.getuid() != link.st_uid or os.getuid() != info.st_uid or info.st_mode & 0o022:
        raise SystemExit("not using %s/ctl.sock: the directory is not yours alone; remove it, or set "
                         "XDG_RUNTIME_DIR or --socket" % directory)
    return directory + "/ctl.sock"


class Connection:
    """One connection to prefetchd: newline-delimited JSON in both directions."""

    def __init__(self, path, deadline):
        self.deadline = deadline
        self.buffer = b""
        self.broken = False       # a send failed: the daemon closed the connection
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(self.remaining())
            self.sock.connect(path)
        except (OSError, ValueError) as error:
            self.sock.close()
            raise Unreachable("cannot connect to %s: %s (is prefetchd running?)" % (path, error))

        # The daemon speaks first: {"hello":"prefetchd","version":"…","protocol":1}.
        try:
            greeting = self.read_message()
            if greeting is None:
                raise Unreachable("%s closed the connection without a greeting" % path)
            if greeting.get("hello") != "prefetchd":
                error = greeting.get("error") or {}   # a daemon refusing us may say why
                reason = " (%s: %s)" % (error.get("code"), error.get("message")) if error else ""
                raise Unreachable("%s did not greet like prefetchd%s" % (path, reason))
            if greeting.get("protocol") != PROTOCOL:
                raise Unreachable("prefetchd %s speaks protocol %r; this client speaks %d"
                                  % (greeting.get("version"), greeting.get("protocol"), PROTOCOL))
        except TimeoutError:
            self.sock.close()
            raise Unreachable("%s sent no greeting in time" % path)
        except Unreachable:
            self.sock.close()
            raise
        self.version = greeting.get("version")

    def remaining(self):
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def send(self, request):
        """Sends one request object as one line; False when the daemon has gone away.

        A daemon that closes the connection may still have sent replies we have
        not read, so a failed send is not fatal: the caller goes on reading."""
        if self.remaining() <= 0:
            raise TimeoutError()
        line = encoded(request)
        assert len(line) <= MAX_LINE, "caller must keep request lines short"
        try:
            self.sock.settimeout(self.remaining())
            self.sock.sendall(line + b"\n")
            return True
        except socket.timeout:
            raise TimeoutError()
        except OSError:           # EPIPE, ECONNRESET (Python ignores SIGPIPE)
            self.broken = True
            return False

    def read_message(self):
        """The next JSON object the daemon sends; None at end of stream; TimeoutError at the deadline.

        Reply lines are not limited to 64 KiB (a batch reply for many URLs can be
        longer), so we buffer whatever arrives until a newline."""
        while b"\n" not in self.buffer:
            timeout = self.remaining()
            if timeout <= 0:
                raise TimeoutError()
            try:
                self.sock.settimeout(timeout)
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise TimeoutError()
            except OSError as error:
                raise Unreachable("the daemon closed the connection (%s)" % error)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            raise Unreachable("the daemon sent a line that is not JSON: %r" % line[:200])
        if not isinstance(message, dict):
            raise Unreachable("the daemon sent a line that is not a JSON object: %r" % line[:200])
        return message

    def close(self):
        self.sock.close()


def encoded(value):
    """The bytes of `value` as this client writes JSON (compact, UTF-8)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def fits(request):
    """True when the request fits on one protocol line."""
    return len(encoded(request)) <= MAX_LINE


def queue_requests(urls, first_id):
    """`queue` requests for `urls`: normally one; split only where one line would pass the
    64 KiB line limit or the 10,000-URL batch limit."""
    requests, batch, size = [], [], 0
    for url in urls:
        # The line is the envelope plus each URL's JSON string and a comma between them.
        envelope = len(encoded({"id": first_id + len(requests), "op": "queue", "urls": []}))
        item = len(encoded(url)) + 1
        if envelope + item > MAX_LINE:
            continue  # too long to send at all; its `get` reports the problem
        if batch and (len(batch) >= MAX_BATCH or envelope + size + item > MAX_LINE):
            requests.append({"id": first_id + len(requests), "op": "queue", "urls": batch})
            batch, size = [], 0
        batch.append(url)
        size += item
    if batch:
        requests.append({"id": first_id + len(requests), "op": "queue", "urls": batch})
    return requests


def run(socket_path, urls, timeout, verbose):
    deadline = time.monotonic() + timeout
    conn = Connection(socket_path, deadline)
    if verbose:
        print("client: connected to prefetchd %s at %s" % (conn.version, socket_path), file=sys.stderr)

    # Request ids are ours to choose; the daemon echoes them. Numbers 1..n are the
    # gets (id i is urls[i - 1]); the queue requests take the ids after them.
    answers = [None] * len(urls)          # per URL: ("ok", path) or ("error", code, message)
    pending_queue = set()                 # ids of queue requests not answered yet
    printed = 0                           # URLs printed so far
    status = EXIT_OK
    lost = False                          # the daemon went away before answering every get

    try:
        # 1. Background prefetch for all but the first URL, sent before the gets.
        #    The daemon replies once the URLs are durable. Like every reply, it may
        #    arrive after replies to later requests, so we match it by id too.
        for request in queue_requests(urls[1:], first_id=len(urls) + 1):
            if conn.send(request):
                pending_queue.add(request["id"])

        # 2. Pipelined gets: keep up to WINDOW in flight and read replies as they come.
        #    A get that needs a fetch is answered when the fetch ends, so replies
        #    come back in any order.
        next_get = 0                      # index of the next URL to send a get for
        in_flight = set()                 # ids of gets sent and not answered
        while next_get < len(urls) or in_flight:
            # Print the answers that are ready, keeping the order the URLs were given in.
            while printed < len(urls) and answers[printed] is not None:
                status = worse(status, report(urls[printed], answers[printed]))
                printed += 1
            while next_get < len(urls) and len(in_flight) < WINDOW and not conn.broken:
                request = {"id": next_get + 1, "op": "get", "url": urls[next_get]}
                if not fits(request):
                    answers[next_get] = ("error", "line_too_long", "the URL is too long to send")
                elif conn.send(request):
                    in_flight.add(request["id"])
                else:
                    break                 # the daemon is gone; read what it said before leaving
                next_get += 1
            if not in_flight:
                lost = conn.broken
                break
            message = conn.read_message()
            if message is None:
                lost = True
                break
            handle(message, answers, in_flight, pending_queue, verbose)
        # Once every get is answered the daemon has read the queue request too (it
        # handles a connection's lines in order) and will commit it even if we leave
        # now; its reply usually has arrived already. We do not wait for it.
    except TimeoutError:
        pass
    except Unreachable as error:
        print("client: %s" % error, file=sys.stderr)
        lost = True
    finally:
        conn.close()

    # Print the rest; whatever is still unanswered failed.
    for url, answer in zip(urls[printed:], answers[printed:]):
        if answer is None and lost:
            answer = ("error", "unreachable", "the daemon closed the connection before answering")
        elif answer is None:
            answer = ("error", "timeout", "no answer within %g s; the fetch goes on in the daemon" % timeout)
        status = worse(status, report(url, answer))
    if pending_queue and verbose:
        print("client: the queue reply had not arrived when we left (it is committed anyway)", file=sys.stderr)
    return status


def handle(message, answers, in_flight, pending_queue, verbose):
    """Files one reply under the request it answers."""
    request_id = message.get("id")
    error = message.get("error") or {}
    if request_id is None:
        # Only protocol errors (bad_request, line_too_long) come without an id.
        # Our requests are well formed, so this should not happen; say so.
        print("client: daemon error without id: %s: %s" % (error.get("code"), error.get("message")), file=sys.stderr)
        return
    if request_id in in_flight:
        in_flight.discard(request_id)
        index = request_id - 1
        path = (message.get("result") or {}).get("path")
        if message.get("ok") and path:
            answers[index] = ("ok", path)
        else:
            # `http_status` errors also carry "status" (the HTTP status); the message names it.
            answers[index] = ("error", error.get("code", "internal"), error.get("message", "a reply without a path"))
    elif request_id in pending_queue:
        pending_queue.discard(request_id)
        if not message.get("ok"):
            # e.g. disk_full: nothing of this request was queued. The gets still run.
            print("client: queue failed: %s: %s" % (error.get("code"), error.get("message")), file=sys.stderr)
        elif verbose:
            counts = {}
            for item in (message.get("result") or {}).get("results", []):
                counts[item.get("status")] = counts.get(item.get("status"), 0) + 1
            summary = ", ".join("%d %s" % (n, status) for status, n in sorted(counts.items()))
            print("client: queue: %s" % summary, file=sys.stderr)


def report(url, answer):
    """Prints one URL's line and returns the exit status it calls for."""
    if answer[0] == "ok":
        print("%s %s" % (url, answer[1]), flush=True)
        return EXIT_OK
    print("%s %s: %s" % (url, answer[1], answer[2]), flush=True)
    # A daemon that is going away is "unreachable", as prefetchctl reports it.
    return EXIT_UNREACHABLE if answer[1] in ("unreachable", "shutting_down") else EXIT_FAILED


def worse(a, b):
    """The exit status that says more: unreachable (3) over failed (1) over ok (0)."""
    return max(a, b)


def main():
    parser = argparse.ArgumentParser(
        description="Fetch URLs through prefetchd and print where each one is cached.",
        epilog="Prints `URL PATH` or `URL ERROR_CODE: message` per URL, in the order given. "
               "Exit status: 0 all fetched, 1 some failed or timed out, 2 usage, 3 daemon unreachable.")
    parser.add_argument("--socket", help="the daemon's socket (default: $PREFETCHD_SOCKET, else "
                                         "$XDG_RUNTIME_DIR/prefetchd/ctl.sock, else /tmp/prefetchd-$UID/ctl.sock)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="give up after this many seconds in all (default 30)")
    parser.add_argument("-v", "--verbose", action="store_true", help="say more on stderr")
    parser.add_argument("urls", nargs="+", metavar="URL")
    args = parser.parse_args()          # exits 2 on a usage error
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        parser.error("--timeout must be a positive number of seconds")

    try:
        return run(args.socket or default_socket(), args.urls, args.timeout, args.verbose)
    except Unreachable as error:
        print("client: %s" % error, file=sys.stderr)
        return EXIT_UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
