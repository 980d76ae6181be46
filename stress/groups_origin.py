"""Group 2, hostile origin: each behaviour with its expected error code or outcome; memory bounded; still serving."""
import threading
import time
import urllib.parse

from hostile_server import HostileServer
from lib import Daemon, Origin, get_many, outcome, scratch

GROUP = "origin"


def run(args, table, processes, scratch_dirs):
    work = scratch(GROUP)
    scratch_dirs.append(work)
    # The daemon's circuit breaker pauses a host (host:port) for 60 s after 5 consecutive transient failures. Each
    # behaviour that fails transiently (and is retried) therefore gets a server of its own, so that every row shows
    # that behaviour alone; the permanent ones share `origin` and `hostile`.
    origin = Origin(processes)
    hostile = HostileServer()
    servers = [hostile]

    down = Origin(processes)
    low_speed = 2
    attempts = 3

    def own_origin(path):  # started only when the case runs (the quick subset skips some)
        return lambda: Origin(processes).url(path)

    def own_hostile(path):
        def start():
            server = HostileServer()
            servers.append(server)
            return server.url(path)
        return start

    daemon = Daemon(processes, args.binary, work, "--fast-width", "64", "--max-bytes", "4M",
                    "--low-speed-time", str(low_speed), "--max-attempts", str(attempts),
                    "--connect-timeout", "5").start()
    # Sample the peak while the behaviours run (VmHWM is a high-water mark; sampling keeps it if the daemon dies).
    sampling = {"on": True}

    def sampler():
        while sampling["on"] and daemon.alive():
            daemon.sample()
            time.sleep(0.2)

    threading.Thread(target=sampler, daemon=True).start()
    o, h = origin.url, hostile.url
    q = urllib.parse.quote

    def same_file(path):  # the reply's file is the origin's body for `path`, byte for byte
        return lambda r: r["result"]["sha256"] == origin.sha256(path)

    def fresh_for(seconds):
        return lambda r: abs(r["result"]["fresh_until"] - r["result"]["fetched_at"] - seconds) <= 1

    # (scenario, url, expected outcome, extra check on the reply or None)
    cases = [
        ("404", o("/a404.jpg?status=404"), "http_status", lambda r: r["error"].get("status") == 404),
        ("410", o("/a410.jpg?status=410"), "http_status", lambda r: r["error"].get("status") == 410),
        ("500 then 200", own_origin("/flaky.jpg?fail_first=1"), "ok", None),
        ("429 Retry-After: 2 then 200", own_origin("/busy.jpg?fail_first=1&fail_status=429&retry_after=2"), "ok", None),
        ("endless 503", down.url("/down.jpg?status=503"), "http_status", lambda r: r["error"].get("status") == 503),
        ("redirect loop", o("/loop.jpg?redirect_loop=1"), "too_many_redirects", None),
        ("redirect to file://", o("/f.jpg?redirect=" + q("file:///etc/passwd", safe="")), "scheme_not_allowed",
         None),
        ("redirect to gopher://", o("/g.jpg?redirect=" + q("gopher://127.0.0.1:70/1", safe="")),
         "scheme_not_allowed", None),
        ("redirect to 169.254.169.254", o("/m.jpg?redirect=" + q("http://169.254.169.254/latest/meta-data/",
                                                                   safe="")), "address_not_allowed", None),
        ("body over cap, no Content-Length", o("/big.jpg?no_length=1&size=6000000"), "too_large", None),
        ("Content-Length 1 TB", h("/huge-length.jpg"), "too_large", None),
        ("body shorter than Content-Length", own_origin("/short.jpg?size=100000&short=5000"), "network", None),
        ("gzip bomb (Content-Encoding: gzip)", h("/gzip-bomb.jpg"), "too_large", None),
        ("gzip-encoded JPEG", o("/gz.jpg?gzip=1&size=50000"), "ok", same_file("/gz.jpg?size=50000")),
        ("1 byte/s (low-speed-time 2)", own_origin("/drip.jpg?size=100000&drip=1"), "timeout", None),
        ("headers that never end", own_hostile("/slow-headers.jpg"), "timeout", None),
        ("endless header line", own_hostile("/endless-header.jpg"), "too_large", None),
        ("broken chunked encoding", own_hostile("/broken-chunked.jpg"), "network", None),
        ("reset mid-body", own_origin("/reset.jpg?size=200000&reset_after=50000"), "network", None),
        ("garbage status line", own_hostile("/garbage-status.jpg"), "network", None),
        ("connection closed before a byte", own_hostile("/close-at-once.jpg"), "network", None),
        ("empty 200", h("/empty.jpg"), "not_an_image", None),
        ("HTML served as image/jpeg", o("/page.jpg?html=1"), "not_an_image", None),
        ("truncated JPEG (in a segment)", h("/truncated.jpg"), "not_an_image", None),
        ("truncated JPEG (no end-of-image marker)", h("/truncated-tail.jpg"), "not_an_image", None),
        ("PNG declaring 100000x100000", h("/huge.png"), "pixel_limit", None),
        ("SVG", h("/image.svg"), "format_not_allowed", None),
        # Numbers a server sends (issue 14): clamped, never an overflow.
        ("Cache-Control: max-age=9223372036854775807 (fresh for 2^31 s)", o("/max-age.jpg?cc=max-age%3D9223372036854775807"),
         "ok", fresh_for(2 ** 31)),
        ("Age: 9223372036854775807", o("/age.jpg?header=Age:%209223372036854775807"), "ok", fresh_for(0)),
        ("two different Content-Length headers", o("/two-lengths.jpg?header=Content-Length:%205"), "network", None),
        ("a 200 KB header line", o("/big-header.jpg?big_header=200000"), "too_large", None),
        ("200 header lines of 1 KiB", o("/many-headers.jpg?many_headers=200"), "too_large", None),
        # A resume (the first response is cut after 5,000 bytes) answered with other bytes than asked for.
        ("resume answered with the whole file (206 bytes 0-)",
         own_origin("/lie-whole.jpg?size=19419&cut_first=5000&lie_range=0"), "ok", same_file("/lie-whole.jpg?size=19419")),
        ("resume answered from another offset (206 bytes 5100-)",
         own_origin("/lie-offset.jpg?size=19419&cut_first=5000&lie_range=5100"), "ok",
         same_file("/lie-offset.jpg?size=19419")),
        ("206 to a request without Range", own_origin("/unasked.jpg?size=19419&range_unasked=5100"), "network", None),
    ]
    if args.quick:
        # The slow ones (attempts x timeouts) stay in the full run.
        slow = {"1 byte/s (low-speed-time 2)", "headers that never end"}
        cases = [c for c in cases if c[0] not in slow]
    cases = [(name, url() if callable(url) else url, expected, check) for name, url, expected, check in cases]
    client = daemon.client(timeout=300)
    started = time.monotonic()
    ids = {client.send({"op": "get", "url": url}): (name, url, expected, check) for name, url, expected, check in cases}
    sent_at = {i: time.monotonic() for i in ids}
    answered_at = {}
    replies = {}
    try:
        pending = set(ids)
        while pending:
            got = client.wait([next(iter(pending))], timeout=240)
            for i, reply in list(got.items()) + list(client.pending.items()):
                if i in pending:
                    replies[i] = reply
                    answered_at[i] = time.monotonic()
                    pending.discard(i)
            client.pending = {k: v for k, v in client.pending.items() if k in pending}
    except Exception as error:  # noqa: BLE001
        for i in ids:
            replies.setdefault(i, {"ok": False, "error": {"code": f"no reply ({error})"}})
    for i, (name, url, expected, check) in ids.items():
        reply = replies[i]
        got = outcome(reply)
        passed = got == expected and (check is None or check(reply))
        detail = got
        if not reply.get("ok"):
            message = reply.get("error", {}).get("message", "")
            detail += f" ({message[:60]})" if message else ""
        if name.startswith("429"):
            waited = answered_at.get(i, started) - sent_at[i]
            passed = passed and 2.0 <= waited < 10
            detail += f", after {waited:.1f}s"
        table.add(GROUP, name, expected, detail, passed)
    stats = origin.stats()["counts"]
    if True:
        made = down.stats()["counts"].get("/down.jpg")
        table.add(GROUP, "endless 503: requests made", f"{attempts} (--max-attempts)", made, made == attempts)
    table.add(GROUP, "redirect loop: hops followed", "6 requests (5 redirects)", stats.get("/loop.jpg"),
              stats.get("/loop.jpg") == 6)
    # Still serving: ping, and a good image fetched and cached afterwards.
    good = get_many(client, [own_origin("/after.jpg?size=50000")()], timeout=60)
    after = next(iter(good.values()))
    table.add(GROUP, "still serving afterwards", "ping ok, fresh get ok",
              f"ping {daemon.ping_ok()}, get {outcome(after)}", daemon.ping_ok() and outcome(after) == "ok")
    ok, problems = daemon.check_index()
    table.add(GROUP, "index consistent (check_index.py)", "ok", problems, ok)
    client.close()
    sampling["on"] = False
    daemon.stop()
    for server in servers:
        server.close()
    table.peak(GROUP, daemon.peak)
    table.add(GROUP, "daemon peak RSS bounded", "< 200 MiB", f"{daemon.peak / 1024:.1f} MiB", daemon.peak < 200 * 1024)
