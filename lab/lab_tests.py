#!/usr/bin/env python3
"""Short tests of the lane transport on the network lab (issue 16, part 5; part of `make test`).

They assert order and connections from nginx's access log (its `$connection` id per request), never timings:

  1  an urgent get made while background transfers are held never shares their connection (HTTP/2 and HTTP/1.1)
  2  a background drain of 20 files opens at most 2 connections (HTTP/2 and HTTP/1.1); at the default width of 1,
     on HTTP/2 most files start while the one before nears its end (never more than 2 at once,
     from the daemon's `watch` events), on HTTP/1.1 none is asked for before the one before was served (nginx's
     log), though it starts as soon as the transfer before ends; 2b: on HTTP/2 one connection even at --slow-width 4;
     2c: on HTTP/2 a 1 MB file's successor starts only once the file has two background windows left (`list`)
  3  promotion in place over HTTP/2 resumes without a lost byte (one request, no Range, the origin's SHA-256)
  4  an origin behind a private CA works with ca_file and fails with `tls` without it
  5  an urgent get right after another meets no background bytes: the hold outlasts urgent work by 1.5 round
     trips, so a released connection does not fill its window while the next get's response arrives (the lab's
     byte counter, HTTP/2 and HTTP/1.1)
  6  on a path smaller than background_window (30 ms, 10 Mbit/s: 37.5 KB), the window the background connection
     announces follows the path, not the buffer (the server's `snd_wnd` in `ss`), while the download goes on
  7  after urgent work the background connection announces a quarter of its window, and its whole window again
     once no urgent work came for 3 s (the server's `snd_wnd`), while the download goes on (HTTP/2 and HTTP/1.1);
     7b: after two gets 2.5 s apart it stays a quarter for twice that: 4 s after the second, whole by 6.2 s (HTTP/1.1)

Brings up one lab (lab/README.md) named `labtest`, starts a fresh daemon per test in its client namespace (a
directory of its own under one temporary directory), prints one line per test with what was expected and what was
observed, and exits 1 when any test fails. The lab, every daemon (stopped by pid) and the temporary directory go
at the end, also after an exception, Ctrl-C or SIGTERM.

Usage: lab_tests.py [--bin-dir .build/debug] [--only 1,3] [--daemon-args "--slow-width 4"] [--keep]  (needs root)
"""

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "bench"))

import lab  # noqa: E402
from benchlib import Client  # noqa: E402

LAB_NAME = "labtest"
LINK = dict(delay_ms=25, rate_mbit=20, buffer_bytes=64 * 1024)
IMAGES = 40
ORIGINS = {"h2": ("https", "HTTPS + HTTP/2 (:443)"), "h1": ("https_h1", "HTTPS HTTP/1.1 (:8443)")}
BACKLOG = 200  # test 1: background URLs queued before the urgent gets
URGENT_GETS = 5  # test 1: urgent gets, GET_GAP apart
GET_GAP = 0.3
DRAIN = 20  # test 2
DRAIN_CONNECTIONS = 2
TAIL_FILE = "/large/1M.bin"  # test 2c: a body several background windows long
TAIL_FILES = 6
TAIL_BYTES = 2 * 128 * 1024  # test 2c: two windows of the default background_window
LARGE = "/large/20M.bin"  # test 3: about 8 s on the lab's link, so the promotion lands mid-transfer
PROMOTE_AFTER = 256 * 1024  # test 3: bytes the background transfer has received before the urgent get
SMALL_PATH = dict(delay_ms=15, rate_mbit=10)  # test 6: 37.5 KB in flight fill it
SMALL_PATH_WINDOW = 96 * 1024  # test 6: at most, against about 160 KB announced for the default 128K
RECENCY = 3.0  # test 7: seconds after urgent work that HTTP/1.1 background connections keep a small window
QUARTER_WINDOW = 48 * 1024  # test 7: at most, against about 40 KB announced for a quarter of the default 128K
WHOLE_WINDOW = 96 * 1024  # test 7: at least, against about 160 KB announced for the default 128K
RHYTHM = 2.5  # test 7b: seconds between two gets; the small window then lasts twice that
WAIT = 60  # seconds any one step may take before the test gives up (a failure, not a timing assertion)
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                   "NO_PROXY")


class TestFailure(Exception):
    """A step of a test could not be done (the daemon did not start, a poll ran out); the test fails with it."""


class Daemon:
    """One prefetchd in the lab's client namespace with a socket, cache and empty configuration file of its own
    (a host's /etc/prefetchd/prefetchd.conf and proxy variables do not apply), trusting the lab's CA unless
    `lab_ca` is false; stopped by pid."""

    def __init__(self, run, name, args=(), lab_ca=True):
        self.run = run
        self.dir = os.path.join(run.work, name)
        os.makedirs(self.dir)
        self.socket = os.path.join(self.dir, "ctl.sock")
        config = os.path.join(self.dir, "empty.conf")
        open(config, "w").close()
        env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
        self.log_path = os.path.join(self.dir, "daemon.log")
        with open(self.log_path, "wb") as log:
            self.process = run.net.popen("client", [os.path.join(run.bins, "prefetchd"), "--config", config,
                                                    "--socket", self.socket,
                                                    "--cache-dir", os.path.join(self.dir, "cache"),
                                                    *(["--ca-file", run.net.ca_file] if lab_ca else []),
                                                    *run.daemon_args, *args],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        self.pid = self.process.pid
        run.daemons.append(self)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise TestFailure("prefetchd exited with %s: %s" % (self.process.returncode, self.log_tail()))
            try:
                self.call("status")
                return
            except (OSError, ValueError, RuntimeError):
                if time.monotonic() > deadline:
                    raise TestFailure("prefetchd did not answer within 30 s: %s" % self.log_tail())
            time.sleep(0.02)

    def call(self, op, **fields):
        """The result of one request on a connection of its own; an error answer fails the test."""
        client = Client(self.socket, timeout=10)
        try:
            reply = client.call(op, **fields)
        finally:
            client.close()
        if not reply.get("ok"):
            raise TestFailure("%s answered %s" % (op, reply.get("error")))
        return reply["result"]

    def ctl(self, *args):
        return [os.path.join(self.run.bins, "prefetchctl"), "--socket", self.socket, *args]

    def ctl_run(self, *args, stdin_text=None):
        """prefetchctl ARGS: (exit status, stdout, stderr)."""
        result = subprocess.run(self.ctl(*args), input=stdin_text or "", capture_output=True, text=True,
                                timeout=WAIT + 30)
        return result.returncode, result.stdout, result.stderr

    def get_json(self, url, *extra):
        """`prefetchctl --json get URL`: (exit status, the CacheEntry or {"error": ...} object, stderr)."""
        rc, out, err = self.ctl_run("--json", "get", "--timeout", str(WAIT), *extra, url)
        try:
            answer = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        except ValueError:
            answer = {"unparsed": out.strip()}
        return rc, answer, err.strip()

    def stop(self):
        if self.process is not None:
            self.run.net.stop_process(self.process)
            self.process = None

    def log_tail(self, lines=15):
        try:
            with open(self.log_path, errors="replace") as f:
                return "\n      ".join(["daemon log (%s):" % self.log_path] + f.read().splitlines()[-lines:])
        except OSError:
            return "(no daemon log)"


class Watcher:
    """A `watch` connection to a daemon, read on a thread of its own: the `started`, `finished` and `failed` events,
    each also handed to `on_event` (on that thread) as it comes."""

    def __init__(self, daemon, on_event=lambda event: None):
        self.client = Client(daemon.socket, timeout=WAIT)
        self.client.call("watch")
        self.events = []
        self.on_event = on_event
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        try:
            while True:
                event = self.client.receive()
                if event.get("event") in ("started", "finished", "failed"):
                    self.events.append(event)
                    self.on_event(event)
        except (OSError, ValueError, ConnectionError, TestFailure):
            pass

    def stop(self):
        self.client.close()
        self.thread.join(5)

    def slow_overlaps(self):
        """(how many background transfers started while another ran, the most that ran at once)."""
        running, overlapped, most = set(), 0, 0
        for event in self.events:
            if event["lane"] != "slow":
                continue
            if event["event"] == "started":
                overlapped += bool(running)
                running.add(event["url"])
                most = max(most, len(running))
            else:
                running.discard(event["url"])
        return overlapped, most


def fetched_without_failure(daemon):
    """The daemon's `fetched` counter; a TestFailure at the first failed fetch (the tests' fetches all succeed)."""
    status = daemon.call("status")
    if status["failed"]:
        raise TestFailure("%d fetches failed: %s" % (status["failed"], daemon.log_tail(3)))
    return status["fetched"]


class Run:
    def __init__(self, bins, keep, daemon_args):
        self.bins = bins
        self.daemon_args = daemon_args
        self.keep = keep
        self.work = tempfile.mkdtemp(prefix="prefetchd-labtest-")
        self.net = None
        self.daemons = []
        self.results = []  # (name, ok)

    # ---- plumbing

    def url(self, origin, tag, number):
        """An image of the lab under a query unique to `tag`, so that nginx's log splits by test and nothing is
        cached from an earlier test."""
        return self.net.url(lab.IMAGE_PATH % (number % self.net.images), origin) + "?%s-%d" % (tag, number)

    def requests(self, tag):
        return self.net.tagged_requests(tag)

    def poll(self, what, check, timeout=WAIT, interval=0.05):
        """Calls check() until it returns something true; a TestFailure naming `what` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TestFailure("%s: not within %d s" % (what, timeout))
            time.sleep(interval)

    def stop_daemons(self):
        for daemon in self.daemons:
            try:
                daemon.stop()
            except Exception as error:  # keep stopping the others
                print("could not stop prefetchd pid %d: %s" % (daemon.pid, error), file=sys.stderr)
        self.daemons = []

    def record(self, name, started, checks, details=""):
        """One result line. `checks`: [(what was expected, what was observed, ok)]."""
        ok = all(passed for _, _, passed in checks)
        expected = "; ".join(e for e, _, _ in checks)
        observed = "; ".join(o if passed else "**%s**" % o for _, o, passed in checks)
        seconds = time.monotonic() - started
        self.results.append((name, ok))
        print("%-4s %s (%.1f s)\n     expected: %s\n     observed: %s" % ("ok" if ok else "FAIL", name, seconds,
                                                                           expected, observed), flush=True)
        if not ok and details:
            print("     " + details, flush=True)

    def attempt(self, name, test, *args):
        """Runs one test with daemons of its own; a step that cannot be done fails the test, not the run."""
        started = time.monotonic()
        try:
            test(name, started, *args)
        except (TestFailure, OSError, ValueError, RuntimeError, KeyError, subprocess.SubprocessError) as error:
            details = " | ".join(d.log_tail() for d in self.daemons)
            self.record(name, started, [("the test runs to its end", "%s: %s" % (type(error).__name__, error), False)],
                        details)
        finally:
            self.stop_daemons()

    def large_download(self, tag, url):
        """A fresh daemon that may fetch the /large files, with `url` queued; and a function giving the bytes its task
        has received while it runs (0 otherwise), which fails the test once the task is gone."""
        daemon = Daemon(self, tag, ["--allow-non-images", "yes", "--max-bytes", "64M"])
        rc, _, err = daemon.ctl_run("queue", url)
        if rc != 0:
            raise TestFailure("queue exited %d: %s" % (rc, err.strip()))

        def received():
            t = next((t for t in daemon.call("list")["tasks"] if t["url"] == url), None)
            if t is None:
                raise TestFailure("the download ended before the test: %s" % daemon.log_tail())
            return t.get("bytes", 0) if t["state"] == "running" else 0
        return daemon, received

    # ---- 1: urgent and background connections are disjoint

    def test_urgent_connections(self, name, started, origin):
        tag = "t1%s" % origin
        daemon = Daemon(self, tag)
        backlog = "".join(self.url(ORIGINS[origin][0], tag + "bg", i) + "\n" for i in range(BACKLOG))
        rc, _, err = daemon.ctl_run("queue", "-", stdin_text=backlog)
        if rc != 0:
            raise TestFailure("queue - exited %d: %s" % (rc, err.strip()))
        # The background connection is open and busy before the first urgent get.
        self.poll("a first background file", lambda: fetched_without_failure(daemon) >= 1)
        failures = []
        window_start = time.time()
        for i in range(URGENT_GETS):
            if i:
                time.sleep(GET_GAP)
            rc, answer, err = daemon.get_json(self.url(ORIGINS[origin][0], tag + "u", i))
            if rc != 0 or "path" not in answer:
                failures.append("get %d: exit %d %s %s" % (i, rc, answer.get("error", ""), err))
        window_end = time.time()
        daemon.stop()
        urgent, background = self.requests(tag + "u"), self.requests(tag + "bg")
        urgent_ids = {e["connection"] for e in urgent}
        background_ids = {e["connection"] for e in background}
        shared = sorted(urgent_ids & background_ids)
        meanwhile = [e for e in background if window_start <= e["msec"] <= window_end and e["status"] == 200]
        protocols = sorted({e["protocol"] for e in urgent + background})
        self.record(name, started, [
            ("%d gets succeed" % URGENT_GETS, "%d of %d succeeded%s" % (
                URGENT_GETS - len(failures), URGENT_GETS, " (%s)" % "; ".join(failures) if failures else ""),
             not failures),
            ("%d urgent requests logged" % URGENT_GETS, "%d (%s)" % (len(urgent), ", ".join(protocols)),
             len(urgent) == URGENT_GETS),
            ("urgent and background connection ids disjoint",
             "urgent %s, background %s, shared %s" % (sorted(urgent_ids), sorted(background_ids), shared or "none"),
             not shared and bool(background_ids)),
            ("background files served while the gets ran >= 1",
             "%d (of %d background requests so far)" % (len(meanwhile), len(background)), len(meanwhile) >= 1),
        ], daemon.log_tail())

    # ---- 2: a background drain uses at most 2 connections

    def test_drain_connections(self, name, started, origin, slow_width=1, limit=DRAIN_CONNECTIONS):
        tag = "t2%sw%d" % (origin, slow_width)
        daemon = Daemon(self, tag, ["--slow-width", str(slow_width)])
        watcher = Watcher(daemon)
        urls = [self.url(ORIGINS[origin][0], tag, i) for i in range(DRAIN)]
        rc, _, err = daemon.ctl_run("queue", "--wait", "--timeout", str(WAIT), "-", stdin_text="\n".join(urls) + "\n")
        fetched = daemon.call("status")["fetched"]
        watcher.stop()
        daemon.stop()
        overlapped, most = watcher.slow_overlaps()
        entries = self.requests(tag)
        if slow_width > 1:
            overlap = ("at most %d background transfers at once (width + those near their end)" % (2 * slow_width),
                       "%d" % most, most <= 2 * slow_width)
        elif origin == "h2":
            # Each file is about 205 KB: its successor starts within its first bytes (two windows of 128 KiB from its end).
            overlap = ("at least %d of %d files start before the one before ends; never more than 2 at "
                       "once" % (DRAIN // 2, DRAIN), "%d; at most %d" % (overlapped, most),
                       overlapped >= DRAIN // 2 and most == 2)
        else:
            # One request at a time on the wire; the next starts when a transfer ends, while that body is checked,
            # moved into place and reported, so two tasks at most (nginx logs the time it handed over the last byte).
            spans = sorted((e["msec"] - e["request_time"], e["msec"]) for e in entries)
            early = sum(1 for (_, end), (start, _) in zip(spans, spans[1:]) if start < end)
            overlap = ("one background request at a time (HTTP/1.1 does not multiplex); at most 2 tasks at once",
                       "%d requests began before the one before was served; at most %d" % (early, most),
                       early == 0 and most <= 2)
        served = {e["request"].split(" ")[1] for e in entries if e["status"] == 200}
        connections = sorted({e["connection"] for e in entries})
        self.record(name, started, [
            ("queue --wait exits 0, %d fetched" % DRAIN,
             "exit %d, %d fetched%s" % (rc, fetched, (" (%s)" % err.strip().splitlines()[-1]) if rc and err.strip()
                                        else ""),
             rc == 0 and fetched == DRAIN),
            ("nginx served each of the %d once" % DRAIN, "%d requests, %d distinct URLs with 200"
             % (len(entries), len(served)), len(entries) == DRAIN and len(served) == DRAIN),
            ("connections <= %d" % limit, "%d %s" % (len(connections), connections),
             1 <= len(connections) <= limit),
            overlap,
        ], daemon.log_tail())

    def test_drain_multiplexed(self, name, started):
        self.test_drain_connections(name, started, "h2", slow_width=4, limit=1)

    def test_tail_threshold(self, name, started):
        tag = "t2c"
        daemon = Daemon(self, tag, ["--allow-non-images", "yes", "--max-bytes", "64M"])
        size = os.path.getsize(os.path.join(self.net.docroot, TAIL_FILE.lstrip("/")))
        urls = [self.net.url(TAIL_FILE, "https") + "?%s-%d" % (tag, i) for i in range(TAIL_FILES)]
        # When each background transfer starts, what the one before it has received (None: it had ended). Bytes only
        # grow between the event and the `list` answer, so a successor started too early still shows as one.
        left_at_start = []

        def note_left(event):
            if event["event"] == "started" and event.get("url") in urls[1:]:
                before = urls[urls.index(event["url"]) - 1]
                task = next((t for t in daemon.call("list")["tasks"] if t["url"] == before), None)
                running = task is not None and task["state"] == "running"
                left_at_start.append(size - task.get("bytes", 0) if running else None)
        watcher = Watcher(daemon, on_event=note_left)
        rc, _, err = daemon.ctl_run("queue", "--wait", "--timeout", str(WAIT), "-", stdin_text="\n".join(urls) + "\n")
        watcher.stop()
        daemon.stop()
        overlapped = [left for left in left_at_start if left is not None]
        self.record(name, started, [
            ("queue --wait of %d x %s exits 0" % (TAIL_FILES, TAIL_FILE), "exit %d%s" % (
                rc, (" (%s)" % err.strip().splitlines()[-1]) if rc and err.strip() else ""), rc == 0),
            ("at least %d of the %d later files start before the one before ends" % (TAIL_FILES // 2, TAIL_FILES - 1),
             "%d of %d" % (len(overlapped), len(left_at_start)), len(overlapped) >= TAIL_FILES // 2),
            ("and only in its last two background windows (%d bytes)" % TAIL_BYTES,
             "bytes left then: %s" % (overlapped or "none"), all(left <= TAIL_BYTES for left in overlapped)),
        ], daemon.log_tail())

    # ---- 3: promotion in place

    def test_promotion(self, name, started):
        tag = "t3"
        url = self.net.url(LARGE) + "?%s-0" % tag
        with open(os.path.join(self.net.docroot, LARGE.lstrip("/")), "rb") as f:
            origin_sha = hashlib.sha256(f.read()).hexdigest()
        size = os.path.getsize(os.path.join(self.net.docroot, LARGE.lstrip("/")))
        daemon = Daemon(self, tag, ["--allow-non-images", "yes", "--max-bytes", "64M"])
        rc, _, err = daemon.ctl_run("queue", url)
        if rc != 0:
            raise TestFailure("queue exited %d: %s" % (rc, err.strip()))

        def task():
            tasks = daemon.call("list")["tasks"]
            return next((t for t in tasks if t["url"] == url), None)

        def running_slow():
            t = task()
            if t is None:
                raise TestFailure("the task of %s is gone before it was promoted (finished or failed): %s"
                                  % (url, daemon.log_tail()))
            return t if t["lane"] == "slow" and t["state"] == "running" and t.get("bytes", 0) >= PROMOTE_AFTER else None
        before = self.poll("%s running in the slow lane with %d bytes" % (LARGE, PROMOTE_AFTER), running_slow)
        get = subprocess.Popen(daemon.ctl("--json", "get", "--timeout", str(WAIT), url), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            def promoted():
                t = task()
                return {"gone": True} if t is None else t if t["lane"] == "fast" else None
            after = self.poll("the task in the fast lane", promoted)
            after = None if after.get("gone") else after
            out, err = get.communicate(timeout=WAIT + 30)
        finally:
            if get.poll() is None:
                get.kill()
                get.wait()
        daemon.stop()
        try:
            answer = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = {}
        cached_sha = None
        if answer.get("path") and os.path.exists(answer["path"]):
            with open(answer["path"], "rb") as f:
                cached_sha = hashlib.sha256(f.read()).hexdigest()
        entries = self.requests(tag)
        logged = ["status %s, %s bytes sent, range %r, connection %s" % (e["status"], e["bytes_sent"],
                                                                        e["range"], e["connection"]) for e in entries]
        self.record(name, started, [
            ("promoted while running in the slow lane", "slow lane at %d of %s bytes, then %s" % (
                before.get("bytes", 0), before.get("total", "?"),
                "fast lane at %d bytes" % after.get("bytes", 0) if after else "gone before it was seen in the fast lane"),
             after is not None and after["state"] == "running" and after.get("bytes", 0) >= before.get("bytes", 0)),
            ("the get succeeds (not from the cache)", "exit %d, from_cache %s%s" % (
                get.returncode, answer.get("from_cache"), (" " + err.strip()[-200:]) if get.returncode else ""),
             get.returncode == 0 and answer.get("from_cache") is False),
            ("nginx logged one request, no Range, HTTP/2", "%d: %s (%s)" % (
                len(entries), "; ".join(logged), ", ".join(sorted({e["protocol"] for e in entries}))),
             len(entries) == 1 and entries[0]["range"] == "" and entries[0]["status"] == 200
             and entries[0]["protocol"] == "HTTP/2.0"),
            ("cached SHA-256 = origin's (%s…, %d bytes)" % (origin_sha[:12], size),
             "%s… (%s bytes)" % ((cached_sha or "no file")[:12], answer.get("bytes")), cached_sha == origin_sha),
        ], daemon.log_tail())

    # ---- 4: a private CA

    def test_private_ca(self, name, started):
        tag = "t4"
        without = Daemon(self, tag + "-system-ca", lab_ca=False)
        rc_without, answer_without, _ = without.get_json(self.url("https", tag + "no", 0))
        without.stop()
        with_ca = Daemon(self, tag + "-lab-ca")
        rc_with, answer_with, err_with = with_ca.get_json(self.url("https", tag + "ca", 0))
        with_ca.stop()
        code = (answer_without.get("error") or {}).get("code")
        self.record(name, started, [
            ("without --ca-file: exit 1, error code tls", "exit %d, %s" % (
                rc_without, json.dumps(answer_without.get("error") or answer_without)),
             rc_without == 1 and code == "tls"),
            ("with --ca-file: the get succeeds", "exit %d%s" % (rc_with, "" if rc_with == 0 else ", %s %s" % (
                json.dumps(answer_with.get("error") or answer_with), err_with)),
             rc_with == 0 and bool(answer_with.get("path"))),
            ("nginx served only the second", "%d and %d requests" % (len(self.requests(tag + "no")),
                                                                     len(self.requests(tag + "ca"))),
             not self.requests(tag + "no") and len(self.requests(tag + "ca")) == 1),
        ], without.log_tail() + " | " + with_ca.log_tail())

    # ---- the run

    # ---- 5: urgent gets back to back

    def test_back_to_back(self, name, started, origin):
        tag = "t5" + origin
        scheme = ORIGINS[origin][0]
        background = self.net.url(LARGE, scheme) + "?%s-bg" % tag
        daemon, received = self.large_download(tag, background)
        self.poll("%s running in the slow lane with %d bytes" % (LARGE, PROMOTE_AFTER),
                  lambda: received() >= PROMOTE_AFTER)
        # Both gets on one connection of this process, the second sent as soon as the first is answered: a few
        # milliseconds apart, well within the grace (1.5 round trips, 75 ms on this link).
        client = Client(daemon.socket, timeout=WAIT)
        try:
            answer1 = client.call("get", url=self.url(scheme, tag, 0))
            before = self.net.stats()["s2c"]["delivered_bytes"]
            answer2 = client.call("get", url=self.url(scheme, tag, 1))
            delivered = self.net.stats()["s2c"]["delivered_bytes"] - before
        finally:
            client.close()
        daemon.stop()
        # The second image and what carries it (TLS records, TCP/IP headers: under 6 %); a background window
        # released between the gets would add about 160 KB.
        image = os.path.getsize(os.path.join(self.net.docroot, lab.IMAGE_PATH.lstrip("/") % (1 % IMAGES)))
        extra = delivered - int(image * 1.06)
        self.record(name, started, [
            ("both gets succeed", "%s, %s" % tuple("ok" if a.get("ok") else a.get("error") for a in (answer1, answer2)),
             answer1.get("ok") and answer2.get("ok")),
            ("during the second get the link carries its %d-byte image and less than 48 KB more" % image,
             "%d bytes, %d more" % (delivered, extra), extra < 48 * 1024),
        ], daemon.log_tail())

    # ---- 6: a window that follows the path

    def test_small_path(self, name, started):
        tag = "t6"
        url = self.net.url(LARGE) + "?%s-0" % tag
        self.net.set_link(**SMALL_PATH)
        try:
            daemon, received = self.large_download(tag, url)
            # About 2 s at the path's rate: the connection left slow start, and its window had samples to follow.
            self.poll("%s 2.5 MB into its download" % LARGE, lambda: received() >= 2500 * 1024)
            windows = []
            for _ in range(5):
                out = self.net.run("server", ["ss", "-tni", "state", "established", "( sport = :443 )"],
                                   capture_output=True, text=True).stdout
                windows += [int(w) for w in re.findall(r"snd_wnd:(\d+)", out)]
                time.sleep(0.2)
            before = received()
            time.sleep(1)
            grew = received() - before
        finally:
            self.net.set_link(delay_ms=LINK["delay_ms"], rate_mbit=LINK["rate_mbit"])
        daemon.stop()
        self.record(name, started, [
            ("one connection, announcing at most %d bytes (the path: 37,500)" % SMALL_PATH_WINDOW,
             "snd_wnd %s" % windows, len(windows) == 5 and max(windows) <= SMALL_PATH_WINDOW),
            ("the download goes on", "%d bytes in 1 s (the path: 1.25 MB/s)" % grew, grew > 0),
        ], daemon.log_tail())

    # ---- 7: HTTP/1.1 keeps a small window while urgent work is recent

    def server_windows(self, port, peer=None, samples=5):
        """The `snd_wnd` of the server's established connections on `port` (only the one to client port `peer`),
        sampled `samples` times 0.1 s apart; also the client ports seen."""
        windows, peers = [], set()
        for _ in range(samples):
            out = self.net.run("server", ["ss", "-tniH", "state", "established", "( sport = :%d )" % port],
                               capture_output=True, text=True).stdout
            for connection, info in re.findall(r"^\s*\S+\s+\S+\s+\S+\s+\S+:(\d+)\s*\n(.*)$", out, re.M):
                peers.add(int(connection))
                window = re.search(r"snd_wnd:(\d+)", info)
                if window and (peer is None or int(connection) == peer):
                    windows.append(int(window.group(1)))
            time.sleep(0.1)
        return windows, peers

    def windowed_download(self, tag, origin):
        """Tests 7 and 7b: a fresh daemon downloading LARGE in the slow lane, 2 MB in (about 1 s: an HTTP/2
        connection's window has followed its path by then, and it is lowered only once it has). Returns the daemon,
        its `received` function, the server's port, the background connection's client port and its `snd_wnd`s."""
        scheme = ORIGINS[origin][0]
        port = lab.PORTS[scheme]
        daemon, received = self.large_download(tag, self.net.url(LARGE, scheme) + "?%s-bg" % tag)
        self.poll("%s 2 MB into its download" % LARGE, lambda: received() >= 2 * 1024 * 1024)
        before, peers = self.server_windows(port)
        if len(peers) != 1:
            raise TestFailure("expected one background connection before urgent work, saw client ports %s" % peers)
        return daemon, received, port, peers.pop(), before

    def test_recent_urgency(self, name, started, origin):
        tag = "t7" + origin
        scheme = ORIGINS[origin][0]
        daemon, received, port, background, before = self.windowed_download(tag, origin)
        rc, answer, err = daemon.get_json(self.url(scheme, tag, 0))
        ended = time.monotonic()
        time.sleep(0.5)  # the hold's grace (75 ms) and a few round trips
        bytes_before = received()
        recent, _ = self.server_windows(port, background)
        moved = received() - bytes_before
        time.sleep(max(0, ended + RECENCY + 0.7 - time.monotonic()))
        later, _ = self.server_windows(port, background)
        daemon.stop()
        self.record(name, started, [
            ("the get succeeds", "exit %d %s" % (rc, answer.get("error", "") or err.strip()), rc == 0 and "path" in answer),
            ("before it, the background connection announces >= %d bytes" % WHOLE_WINDOW, "snd_wnd %s" % before,
             len(before) == 5 and max(before) >= WHOLE_WINDOW),
            ("within %g s after it, <= %d, and the download goes on" % (RECENCY, QUARTER_WINDOW),
             "snd_wnd %s, %d bytes meanwhile" % (recent, moved), len(recent) == 5 and max(recent) <= QUARTER_WINDOW
             and moved > 0),
            ("%g s after it, >= %d again" % (RECENCY, WHOLE_WINDOW), "snd_wnd %s" % later,
             len(later) == 5 and max(later) >= WHOLE_WINDOW),
        ], daemon.log_tail())

    def test_rhythm(self, name, started, origin):
        """Two gets RHYTHM s apart: the window stays small for twice that after the second, then is whole again."""
        tag = "t7b" + origin
        scheme = ORIGINS[origin][0]
        daemon, _, port, background, before = self.windowed_download(tag, origin)
        first_rc, _, first_err = daemon.get_json(self.url(scheme, tag, 0))
        time.sleep(RHYTHM - 0.1)  # from the end of the first get to the start of the second: about RHYTHM s apart
        rc, answer, err = daemon.get_json(self.url(scheme, tag, 1))
        ended = time.monotonic()
        # Beyond the shortest recency, within twice the interval.
        time.sleep(max(0, ended + RECENCY + 1.0 - time.monotonic()))
        kept, _ = self.server_windows(port, background)
        time.sleep(max(0, ended + 2 * RHYTHM + 1.2 - time.monotonic()))
        later, _ = self.server_windows(port, background)
        daemon.stop()
        self.record(name, started, [
            ("both gets succeed", "exit %d %s, exit %d %s" % (first_rc, first_err.strip(), rc,
                                                           answer.get("error", "") or err.strip()),
             first_rc == 0 and rc == 0 and "path" in answer),
            ("before them, the background connection announces >= %d bytes" % WHOLE_WINDOW, "snd_wnd %s" % before,
             len(before) == 5 and max(before) >= WHOLE_WINDOW),
            ("%g s after the second (beyond %g s), <= %d still" % (RECENCY + 1.0, RECENCY, QUARTER_WINDOW),
             "snd_wnd %s" % kept, len(kept) == 5 and max(kept) <= QUARTER_WINDOW),
            ("%g s after it, >= %d again" % (2 * RHYTHM + 1.2, WHOLE_WINDOW), "snd_wnd %s" % later,
             len(later) == 5 and max(later) >= WHOLE_WINDOW),
        ], daemon.log_tail())

    def main(self, only):
        tests = [
            ("1", "an urgent get made while background transfers are held never shares their connection",
             self.test_urgent_connections, list(ORIGINS)),
            ("2", "a background drain of %d files opens at most %d connections; on HTTP/2 a file starts before the "
             "end of the one before" % (DRAIN, DRAIN_CONNECTIONS),
             self.test_drain_connections, list(ORIGINS)),
            ("2b", "on HTTP/2 a drain at --slow-width 4 multiplexes its %d files on one connection" % DRAIN,
             self.test_drain_multiplexed, [None]),
            ("2c", "on HTTP/2 a background file of 1 MB has its successor start only in its last two windows",
             self.test_tail_threshold, [None]),
            ("3", "promotion in place over HTTP/2 resumes without a lost byte", self.test_promotion, [None]),
            ("4", "an origin behind a private CA works with ca_file and fails with tls without it",
             self.test_private_ca, [None]),
            ("5", "an urgent get right after another meets no background bytes", self.test_back_to_back,
             list(ORIGINS)),
            ("6", "on a path smaller than background_window the background window follows the path",
             self.test_small_path, [None]),
            ("7", "the background window is a quarter while urgent work is recent",
             self.test_recent_urgency, list(ORIGINS)),
            ("7b", "after gets %g s apart the background window stays a quarter for twice that" % RHYTHM,
             self.test_rhythm, ["h1"]),
        ]
        started = time.monotonic()
        self.net = lab.Lab(name=LAB_NAME, images=IMAGES, **LINK)
        with self.net:
            print("lab %r up in %.1f s: %g ms one way, %g Mbit/s, %d-byte buffer; binaries %s" % (
                LAB_NAME, time.monotonic() - started, LINK["delay_ms"], LINK["rate_mbit"], LINK["buffer_bytes"],
                os.path.relpath(self.bins, REPO)), flush=True)
            tests_started = time.monotonic()
            for number, title, test, origins in tests:
                if only and number not in only:
                    continue
                for origin in origins:
                    label = "%s. %s%s" % (number, title, " — %s" % ORIGINS[origin][1] if origin else "")
                    self.attempt(label, test, *([origin] if origin else []))
            if self.keep:
                shutil.copy(os.path.join(self.net.dir, "access.log"), os.path.join(self.work, "access.log"))
            failed = [n for n, ok in self.results if not ok]
            print("%d of %d passed in %.1f s (lab setup %.1f s)%s" % (
                len(self.results) - len(failed), len(self.results), time.monotonic() - tests_started,
                tests_started - started, "" if not failed else "; FAILED: " + "; ".join(failed)), flush=True)
        return 1 if failed else 0


def interrupted(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


def main():
    parser = argparse.ArgumentParser(description="Short tests of the lane transport on the network lab (issue 16). "
                                                 "Needs root.")
    parser.add_argument("--bin-dir", default=os.path.join(REPO, ".build", "debug"),
                        help="where prefetchd and prefetchctl are (default .build/debug)")
    parser.add_argument("--only", help="tests to run, e.g. 1,3 (default: all)")
    parser.add_argument("--daemon-args", default="", help="extra prefetchd options for every daemon (to see a "
                                                          "test fail: --only 2 --daemon-args '--slow-width 4')")
    parser.add_argument("--keep", action="store_true", help="keep the daemons' directories and nginx's log")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("the lab needs root")
    bins = os.path.abspath(args.bin_dir)
    for binary in ("prefetchd", "prefetchctl"):
        if not os.access(os.path.join(bins, binary), os.X_OK):
            parser.error("%s is missing (build first, or give --bin-dir)" % os.path.join(bins, binary))
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    run = Run(bins, args.keep, shlex.split(args.daemon_args))
    status = 1
    try:
        status = run.main({t.strip() for t in args.only.split(",")} if args.only else None)
    except lab.LabError as error:
        print("lab: %s" % error, file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = 130
    finally:
        run.stop_daemons()  # normally done per test; here after an interruption (the lab stops them too)
        if args.keep:
            print("kept %s" % run.work, file=sys.stderr)
        else:
            shutil.rmtree(run.work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
