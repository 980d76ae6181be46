#!/usr/bin/env python3
"""A terminal thumbnail browser on prefetchd's `view` operation, with Python's standard library only.

A program that shows a long scrolling list of images talks to prefetchd like this (docs/protocol.md):

1. connect to the daemon's Unix socket and read the greeting line;
2. hand over the whole list once: `{"id":1,"op":"view","urls":[…]}` (rows are numbered from 0 in list
   order; longer lists go in chunks of at most 10,000 URLs with `"append":true`, each on one line);
3. after every scroll send the visible rows, `{"id":7,"op":"view","first":46,"last":68,"ahead":23,"behind":11}`:
   the daemon fetches the visible rows urgently and the `ahead`/`behind` rows around them in the background;
4. read the events the daemon pushes on the same connection (lines without `id`) for the visible rows:
       {"event":"view_ready","row":47,"url":…,"path":"/abs/file","width":64,"height":48}
       {"event":"view_failed","row":48,"url":…,"error":{"code":"http_status","message":…}}
   With `size` in the requests, `path` is a resized variant (a thumbnail) made and cached by the daemon.
   Replies to `view` requests arrive among the events; match them by `id`.

The screen shows one line per row in text mode, `ROW [ WxH ] URL` (`[ … ]` while loading, `[ ERR ]` and the
error code when it failed), or a picture drawn by `chafa` when it is installed and --text is not given. Keys:
↑/↓ or k/j a row, PgUp/PgDn (b/space) a screen, Home/End (g/G) the ends, q quits.

Usage:
    python3 examples/thumbs/thumbs.py [--socket PATH] [--text] [--size WxH] LIST|-

LIST is a file of image URLs, one per line (blank lines and `#` comments skipped); `-` reads standard input.

Exit status:
    0  quit with q
    1  the daemon refused a `view` request (e.g. `unknown_op` from a prefetchd without `view`)
    2  usage error (bad option, unreadable or empty list, not on a terminal)
    3  the daemon is unreachable (no socket, no greeting, not protocol 1) or went away
    130 interrupted with Ctrl-C (128 + the signal number after SIGTERM or SIGHUP)
"""

import argparse
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import termios
import time
import tty

PROTOCOL = 1
MAX_LINE = 65536          # the daemon's limit for one request line (newline excluded)
MAX_BATCH = 10_000        # at most this many URLs in one request
MAX_URL = 8192            # longer URLs are invalid (and might not fit on a line): they are left out
REPLY_TIMEOUT = 30.0      # seconds to wait for the replies to the list before giving up
ITEM_LINES, THUMB_COLS = 5, 8   # picture mode: lines per row (one of them a gap), columns of a picture
EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 3, 130   # 2, usage errors: argparse

UTF8 = (sys.stdout.encoding or "").lower().replace("-", "") == "utf8"
ELLIPSIS, DOT, ARROWS = ("…", "·", "↑/↓") if UTF8 else ("...", "|", "Up/Down")
KEYS = {b"\x1b[A": "up", b"\x1bOA": "up", b"k": "up", b"\x1b[B": "down", b"\x1bOB": "down", b"j": "down",
        b"\x1b[5~": "page up", b"b": "page up", b"\x1b[6~": "page down", b" ": "page down",
        b"\x1b[H": "home", b"\x1bOH": "home", b"\x1b[1~": "home", b"\x1b[7~": "home", b"g": "home",
        b"\x1b[F": "end", b"\x1bOF": "end", b"\x1b[4~": "end", b"\x1b[8~": "end", b"G": "end",
        b"q": "quit", b"Q": "quit"}
LONGEST_FIRST = sorted(KEYS, key=len, reverse=True)


class Unreachable(Exception):
    """The daemon cannot be reached or stopped talking to us."""


class Refused(Exception):
    """The daemon answered a request with an error."""
    def __init__(self, error):
        self.code = error.get("code", "internal")
        super().__init__("%s: %s" % (self.code, error.get("message", "no message")))


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


def encoded(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Daemon:
    """One connection: requests go out as lines; `read` takes what arrived, `messages` hands out whole lines."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.buffer, self.next_id = b"", 1
        try:
            self.sock.settimeout(5)
            self.sock.connect(path)
            while b"\n" not in self.buffer:       # the daemon speaks first
                self.read()
        except socket.timeout:
            self.sock.close()
            raise Unreachable("%s sent no greeting in time" % path)
        except OSError as error:
            self.sock.close()
            raise Unreachable("cannot connect to %s: %s (is prefetchd running?)" % (path, error.strerror or error))
        except Unreachable:
            self.sock.close()
            raise Unreachable("%s closed the connection without a greeting" % path)
        greeting = next(self.messages(), {})
        if greeting.get("hello") != "prefetchd":
            error = greeting.get("error") or {}   # e.g. unauthorized
            raise Unreachable("%s did not greet like prefetchd (%s)" % (path, error.get("code", "no greeting")))
        if greeting.get("protocol") != PROTOCOL:
            raise Unreachable("prefetchd %s speaks protocol %r; this client speaks %d"
                              % (greeting.get("version"), greeting.get("protocol"), PROTOCOL))

    def send(self, fields):
        """Sends one `view` request; returns its id."""
        request = dict({"id": self.next_id, "op": "view"}, **fields)
        self.next_id += 1
        try:
            self.sock.sendall(encoded(request) + b"\n")
        except OSError:
            raise Unreachable("prefetchd went away")
        return request["id"]

    def read(self):
        try:
            chunk = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionError:
            chunk = b""
        if not chunk:
            raise Unreachable("prefetchd went away (it closed the connection)")
        self.buffer += chunk

    def messages(self):
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                raise Unreachable("prefetchd sent a line that is not JSON: %r" % line[:200])
            if isinstance(message, dict):
                yield message


def list_requests(urls, variant):
    """The `view` requests that hand over the list: the first replaces the connection's list, the rest append.
    Each has at most 10,000 URLs and fits on one line, with room left for the range fields."""
    batches, batch, size, budget = [], [], 0, MAX_LINE - 1024
    for url in urls:
        item = len(encoded(url)) + 1
        if batch and (len(batch) == MAX_BATCH or size + item > budget):
            batches.append(batch)
            batch, size = [], 0
        batch.append(url)
        size += item
    batches.append(batch)
    return [dict({"urls": b, "append": i > 0}, **variant) for i, b in enumerate(batches)]


def clean(text, width):
    """`text` without control characters, cut to `width` columns with an ellipsis."""
    text = re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text)
    return text if len(text) <= width else text[:max(0, width - len(ELLIPSIS))] + ELLIPSIS[:width]


class Browser:
    """The list, what the daemon said about each row, and the part of it on the screen."""

    def __init__(self, daemon, urls, variant, pictures, out):
        self.daemon, self.urls, self.variant, self.pictures, self.out = daemon, urls, variant, pictures, out
        self.rows = {}          # row -> ("ready", path, width, height) or ("failed", code, message)
        self.pending = set()    # ids of requests not answered yet
        self.thumbnails = {}    # path -> the lines chafa drew (None when it could not)
        self.top, self.sent, self.size = 0, None, None
        self.layout()

    def layout(self):
        """Reads the terminal's size; a new size redraws everything."""
        size = os.get_terminal_size(self.out)
        if size == self.size:
            return
        self.size, (self.columns, self.lines) = size, size
        roomy = self.lines > ITEM_LINES and self.columns > THUMB_COLS + 20
        self.item_lines = ITEM_LINES if self.pictures and roomy else 1
        self.page = max(1, (self.lines - 1) // self.item_lines)
        self.scroll(to=self.top)
        self.clear = True

    def scroll(self, by=0, to=None):
        top = self.top + by if to is None else to
        self.top = max(0, min(top, len(self.urls) - self.page))
        self.dirty = True

    def act(self, action):
        moves = {"up": -1, "down": 1, "page up": -self.page, "page down": self.page}
        if action in moves:
            self.scroll(by=moves[action])
        else:
            self.scroll(to=0 if action == "home" else len(self.urls))

    def visible(self):
        return range(self.top, min(len(self.urls), self.top + self.page))

    def range_fields(self):
        rows = self.visible()
        return {"first": rows.start, "last": rows.stop - 1, "ahead": self.page, "behind": self.page // 2}

    def start(self):
        """Hands the list and the first range to the daemon and waits for the replies (events may come first)."""
        requests = list_requests(self.urls, self.variant)
        self.sent = self.range_fields()
        requests[-1].update(self.sent)
        self.pending.update(self.daemon.send(request) for request in requests)
        deadline = time.monotonic() + REPLY_TIMEOUT
        while self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Unreachable("prefetchd did not answer the list within %d s" % REPLY_TIMEOUT)
            if select.select([self.daemon.sock], [], [], remaining)[0]:
                self.receive()

    def send_range(self):
        """After a scroll or a resize: one `view` request with the new range."""
        fields = self.range_fields()
        if fields != self.sent:
            self.pending.add(self.daemon.send(dict(fields, **self.variant)))
            self.sent = fields

    def receive(self):
        self.daemon.read()
        for message in self.daemon.messages():
            self.handle(message)

    def handle(self, message):
        event, row = message.get("event"), message.get("row")
        if event is None:                         # a reply: to one of ours, or a protocol error (id null)
            self.pending.discard(message.get("id"))
            if not message.get("ok"):
                raise Refused(message.get("error") or {})
            for item in (message.get("result") or {}).get("rejected", []):
                error = item.get("error") or {}
                self.note(item.get("row"), ("failed", error.get("code", "invalid_url"), error.get("message", "")))
        elif event == "view_ready":
            self.note(row, ("ready", message.get("path") or "", message.get("width", 0), message.get("height", 0)))
        elif event == "view_failed":
            error = message.get("error") or {}
            self.note(row, ("failed", error.get("code", "internal"), error.get("message", "")))
        # other events (from a newer daemon) are ignored

    def note(self, row, state):
        if isinstance(row, int) and 0 <= row < len(self.urls) and self.rows.get(row) != state:
            self.rows[row] = state
            self.dirty = self.dirty or row in self.visible()

    def draw(self):
        """Writes the whole screen in one go: every line is overwritten, so nothing flickers."""
        out = ["\x1b[2J" if self.clear else ""]
        y = 1
        for row in self.visible():
            out += self.draw_row(row, y) if self.item_lines == 1 else self.draw_picture(row, y)
            y += self.item_lines
        out += ["\x1b[%d;1H\x1b[K" % line for line in range(y, self.lines)]
        out.append("\x1b[%d;1H\x1b[7m%s\x1b[0m" % (self.lines, clean(self.status(), self.columns).ljust(self.columns)))
        write(self.out, "".join(out))
        self.dirty = self.clear = False

    def label(self, row):
        """What the row's box says, and (code, message) when the row failed."""
        state = self.rows.get(row)
        if state is None:
            return ELLIPSIS, None
        if state[0] == "ready":
            return "%sx%s" % state[2:], None
        return "ERR", state[1:]

    def draw_row(self, row, y):
        label, failure = self.label(row)
        number = str(row).rjust(len(str(len(self.urls) - 1)))
        line = "%s [%s] %s%s" % (number, label.center(9), failure[0] + " " if failure else "", self.urls[row])
        return ["\x1b[%d;1H%s\x1b[K" % (y, clean(line, self.columns))]

    def draw_picture(self, row, y):
        label, failure = self.label(row)
        state = self.rows.get(row)
        picture = self.thumbnail(state[1]) if state and state[0] == "ready" else None
        if picture is None:
            picture = [""] * ((ITEM_LINES - 1) // 2) + [label.center(THUMB_COLS)]
        detail = "%s: %s" % failure if failure else "loading" + ELLIPSIS if label == ELLIPSIS else label
        texts = ["%d  %s" % (row, self.urls[row]), detail]
        out, width = [], self.columns - THUMB_COLS - 2
        for i in range(ITEM_LINES):
            cells = picture[i] if i < len(picture) and i < ITEM_LINES - 1 else ""
            text = clean(texts[i], width) if i < len(texts) else ""
            out.append("\x1b[%d;1H\x1b[2K%s\x1b[0m\x1b[%d;%dH%s" % (y + i, cells, y + i, THUMB_COLS + 3, text))
        return out

    def thumbnail(self, path):
        """The picture of `path` as chafa draws it in THUMB_COLS x (ITEM_LINES - 1) cells, drawn once."""
        if path not in self.thumbnails:
            self.thumbnails[path] = None
            try:
                done = subprocess.run(["chafa", "--format", "symbols", "--animate", "off", "--size",
                                       "%dx%d" % (THUMB_COLS, ITEM_LINES - 1), path], capture_output=True, timeout=5)
                if done.returncode == 0:
                    text = done.stdout.decode("utf-8", "replace").replace("\x1b[?25l", "").replace("\x1b[?25h", "")
                    self.thumbnails[path] = text.rstrip("\n").split("\n")
            except (OSError, subprocess.TimeoutExpired):
                pass
        return self.thumbnails[path]

    def status(self):
        rows = self.visible()
        states = [self.rows.get(row, ("",))[0] for row in rows]
        parts = ["rows %d-%d of %d" % (rows.start, rows.stop - 1, len(self.urls)), "%d ready" % states.count("ready")]
        if "failed" in states:
            parts.append("%d failed" % states.count("failed"))
        full = (" %s " % DOT).join(parts + ["%s PgUp/PgDn Home/End" % ARROWS, "q quits"])
        return full if len(full) <= self.columns else (" %s " % DOT).join(parts + ["q quits"])


def write(fd, text):
    data = text.encode("utf-8")
    while data:
        data = data[os.write(fd, data):]


def keys(data):
    """The actions in the bytes read from the terminal; unknown keys and escape sequences are skipped."""
    actions, i = [], 0
    while i < len(data):
        key = next((k for k in LONGEST_FIRST if data.startswith(k, i)), None)
        if key:
            actions.append(KEYS[key])
            i += len(key)
        else:
            unknown = re.match(rb"\x1b(\[[0-9;]*[~A-Za-z]|O.)?|.", data[i:], re.S)
            i += len(unknown.group(0))
    return actions


class Terminal:
    """Keys one at a time without echo (Ctrl-C still interrupts) and the alternate screen, undone on exit."""

    def __init__(self, keys_fd, out):
        self.keys_fd, self.out = keys_fd, out

    def __enter__(self):
        self.saved = termios.tcgetattr(self.keys_fd)
        tty.setcbreak(self.keys_fd)
        write(self.out, "\x1b[?1049h\x1b[?25l\x1b[2J")

    def __exit__(self, *exception):
        try:
            write(self.out, "\x1b[0m\x1b[?25h\x1b[?1049l")
            termios.tcsetattr(self.keys_fd, termios.TCSADRAIN, self.saved)
        except (OSError, termios.error):
            pass              # the terminal is gone


def browse(browser, keys_fd, wake_fd):
    """The main loop: wait for a key, a message or a resize; redraw only when the screen changed."""
    watched = [keys_fd, browser.daemon.sock, wake_fd]
    while True:
        if browser.dirty:
            browser.draw()
        readable = select.select(watched, [], [])[0]
        if wake_fd in readable:                    # SIGWINCH (see main)
            os.read(wake_fd, 512)
            browser.layout()
        if keys_fd in readable:
            data = os.read(keys_fd, 1024)
            if not data:
                return EXIT_OK                     # the terminal went away
            for action in keys(data):
                if action == "quit":
                    return EXIT_OK
                browser.act(action)
        if browser.daemon.sock in readable:
            browser.receive()
        browser.send_range()                       # once for all the keys read together


def main():
    parser = argparse.ArgumentParser(
        prog="thumbs.py", description="Browse a list of image URLs as thumbnails fetched by prefetchd.",
        epilog="Exit status: 0 quit, 1 a request refused, 2 usage, 3 daemon unreachable or gone, 130 Ctrl-C.")
    parser.add_argument("--socket", help="the daemon's socket (default: $PREFETCHD_SOCKET, else "
                                         "$XDG_RUNTIME_DIR/prefetchd/ctl.sock, else /tmp/prefetchd-$UID/ctl.sock)")
    parser.add_argument("--text", action="store_true", help="text placeholders instead of pictures (chafa)")
    parser.add_argument("--size", default="128x128", help="thumbnail size WxH asked of the daemon (default 128x128)")
    parser.add_argument("list", metavar="LIST|-", help="a file of image URLs, one per line; - for standard input")
    args = parser.parse_args()                      # exits 2 on a usage error
    if not re.fullmatch(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}", args.size):
        parser.error("--size must be WxH, e.g. 128x128")
    try:
        with (sys.stdin if args.list == "-" else open(args.list, encoding="utf-8", errors="replace")) as source:
            lines = [line.strip() for line in source]
    except OSError as error:
        parser.error("cannot read %s: %s" % (args.list, error.strerror))
    urls = [line for line in lines if line and not line.startswith("#")]
    long = [url for url in urls if len(url.encode("utf-8")) > MAX_URL]
    if long:
        print("thumbs: leaving out %d URLs longer than %d bytes" % (len(long), MAX_URL), file=sys.stderr)
        urls = [url for url in urls if len(url.encode("utf-8")) <= MAX_URL]
    if not urls:
        parser.error("%s has no URLs" % ("standard input" if args.list == "-" else args.list))
    out = sys.stdout.fileno()
    if not os.isatty(out):
        parser.error("standard output is not a terminal")
    try:
        keys_on_stdin = args.list != "-" and os.isatty(sys.stdin.fileno())
        keys_fd = sys.stdin.fileno() if keys_on_stdin else os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        parser.error("no terminal to read keys from")

    status, message, daemon = EXIT_OK, None, None
    try:
        daemon = Daemon(args.socket or default_socket())
        browser = Browser(daemon, urls, {"size": args.size}, not args.text and shutil.which("chafa"), out)
        browser.start()        # before the screen changes, so that errors show on the normal screen

        # A resize interrupts select() through a pipe; SIGTERM and SIGHUP leave through the same exit as q.
        wake_fd, wake_write = os.pipe()
        for fd in (wake_fd, wake_write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGWINCH, lambda signum, frame: None)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, lambda signum, frame: sys.exit(128 + signum))
        with Terminal(keys_fd, out):
            status = browse(browser, keys_fd, wake_fd)
    except Unreachable as error:
        status, message = EXIT_UNREACHABLE, str(error)
    except Refused as error:
        status = EXIT_UNREACHABLE if error.code == "shutting_down" else EXIT_REFUSED
        hint = " (this prefetchd has no `view`: update it)" if error.code == "unknown_op" else ""
        message = "prefetchd refused a `view` request: %s%s" % (error, hint)
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    finally:
        if daemon:
            daemon.sock.close()
    if message:
        print("thumbs: %s" % message, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
