#!/usr/bin/env python3
"""Measures what the lab's link really does, with curl from the client's namespace, and fails when it is not what
was set (`make lab-check`). For each link: round trip, throughput, an outage, 5 % loss, HTTP/2 over TLS with the lab's
CA, and nginx's connection ids in its log. Prints a table of set against measured, and the delay line's CPU use."""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lab  # noqa: E402

# TCP carries at most 1448 payload bytes (MSS 1460 less 12 of timestamps) in every 1500-byte packet.
GOODPUT_SHARE = 1448 / 1500
FIELDS = ("http_code", "time_namelookup", "time_connect", "time_total", "size_download", "http_version")


class Check:
    def __init__(self):
        self.rows = []

    def row(self, what, expected, measured, ok, note=""):
        self.rows.append((what, expected, measured, "ok" if ok else "FAIL", note))

    def failed(self):
        return [row for row in self.rows if row[3] != "ok"]

    def print(self, title):
        print("\n" + title)
        widths = [max(len(str(row[i])) for row in self.rows + [("check", "set", "measured", "", "")])
                  for i in range(4)]
        for row in [("check", "set", "measured", "", "")] + self.rows:
            print("  " + "  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])


def curl(net, *args, timeout=120):
    """curl in the client's namespace; returns its exit code, a dict of FIELDS for each URL (numbers as floats),
    and what it printed on stderr."""
    write_out = " ".join("%%{%s}" % field for field in FIELDS) + "\\n"
    result = net.run("client", ["curl", "-sS", "--max-time", str(timeout), "-w", write_out, *args],
                     capture_output=True, text=True)
    transfers = [dict(zip(FIELDS, [float(value) for value in line.split()[:-1]] + line.split()[-1:]))
                 for line in result.stdout.splitlines() if line.strip()]
    return result.returncode, transfers, result.stderr.strip()


def tcp_counters(net, side):
    """OutSegs and RetransSegs of `side`'s namespace (each namespace has its own /proc/net/snmp)."""
    text = net.run(side, ["cat", "/proc/net/snmp"], capture_output=True, text=True, check=True).stdout
    names, values = [line.split()[1:] for line in text.splitlines() if line.startswith("Tcp:")]
    counters = dict(zip(names, map(int, values)))
    return counters["OutSegs"], counters["RetransSegs"]


def check_round_trip(net, check, delay_ms):
    samples = []
    for _ in range(9):
        code, transfers, error = curl(net, "-o", "/dev/null", net.url("/img/0000.jpg", "http"))
        if code == 0:
            samples.append((transfers[0]["time_connect"] - transfers[0]["time_namelookup"]) * 1000)
    expected = 2 * delay_ms
    measured = statistics.median(samples) if samples else float("nan")
    # never faster than the delay; slower by at most 2 ms or 10 % (timers, a busy machine)
    ok = len(samples) == 9 and expected - 0.5 <= measured <= expected + max(2.0, 0.1 * expected)
    check.row("round trip (TCP connect)", "%.1f ms" % expected, "%.1f ms" % measured, ok,
              "median of 9; min %.1f, max %.1f" % (min(samples), max(samples)) if samples else error)


def check_throughput(net, check, rate_mbit):
    """Times a small and a large file, twice each, on fresh connections: the difference of the best times is the
    steady rate, without the handshakes and the slow start both pay."""
    small, large = ("1M.bin", "5M.bin") if rate_mbit <= 40 else ("5M.bin", "20M.bin")
    sizes = lab.LARGE_FILES
    cpu_before, wall_before = net.delayline_cpu_seconds(), time.monotonic()
    times = {}
    for name in (small, large, small, large):
        code, transfers, error = curl(net, "-o", "/dev/null", net.url("/large/" + name, "http"))
        if code != 0 or transfers[0]["size_download"] != sizes[name]:
            check.row("throughput", "%g Mbit/s" % rate_mbit, "transfer failed", False, error)
            return
        times[name] = min(times.get(name, 1e9), transfers[0]["time_total"])
    cpu = net.delayline_cpu_seconds() - cpu_before
    wall = time.monotonic() - wall_before
    steady = (sizes[large] - sizes[small]) * 8 / (times[large] - times[small]) / 1e6
    expected = rate_mbit * GOODPUT_SHARE
    check.row("throughput (steady)", "%g Mbit/s" % rate_mbit, "%.1f Mbit/s goodput" % steady,
              abs(steady - expected) <= 0.1 * expected,
              "expected %.1f (TCP payload share of the rate); %s in %.2f s = %.1f Mbit/s with slow start"
              % (expected, large, times[large], sizes[large] * 8 / times[large] / 1e6))
    stats = net.stats()
    packets = stats["c2s"]["packets"] + stats["s2c"]["packets"]
    check.row("delay line CPU", "-", "%.0f %% of a core" % (100 * cpu / wall), True,
              "while carrying %g Mbit/s; %.1f us per packet over its life (%d packets)"
              % (rate_mbit, 1e6 * net.delayline_cpu_seconds() / max(packets, 1), packets))


def check_outage(net, check, rate_mbit, outage_s=3.0):
    """The link goes down mid-transfer: the file stops growing, then completes once the link is back."""
    name = "5M.bin" if rate_mbit <= 40 else "20M.bin"
    size = lab.LARGE_FILES[name]
    baseline = size * 8 / (rate_mbit * GOODPUT_SHARE * 1e6)
    scratch = tempfile.mkdtemp(prefix="lab-selfcheck-")
    target = os.path.join(scratch, name)
    try:
        started = time.monotonic()
        transfer = net.popen("client", ["curl", "-sS", "--max-time", "60", "-o", target,
                                        net.url("/large/" + name, "http")], stderr=subprocess.PIPE, text=True)
        while (not os.path.exists(target) or os.path.getsize(target) < size // 10) and transfer.poll() is None:
            time.sleep(0.01)
        net.link_down(outage_s)
        went_down = time.monotonic()
        time.sleep(0.5)  # what was already on the wire lands
        size_early = os.path.getsize(target)
        time.sleep(outage_s - 0.7)
        size_late = os.path.getsize(target)
        error = transfer.communicate()[1].strip()
        finished = time.monotonic()
        complete = transfer.returncode == 0 and os.path.getsize(target) == size
        stalled = size_early == size_late
        total = finished - started
        ok = complete and stalled and baseline + 0.9 * outage_s <= total <= baseline + outage_s + 6
        check.row("outage mid-transfer", "down %g s" % outage_s,
                  "%s, %s" % ("stalled" if stalled else "kept flowing (%d -> %d bytes)" % (size_early, size_late),
                              "recovered" if complete else "did not complete: " + error),
                  ok, "%s took %.1f s (%.1f s without the outage); done %.1f s after the link came back"
                  % (name, total, baseline, finished - went_down - outage_s))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_loss(net, check, loss=0.05):
    """Random loss both ways, the buffer unlimited meanwhile so that every resent segment is one the loss took."""
    buffer_bytes = net.link["buffer_bytes"]
    net.set_link(loss=loss, buffer_bytes=0)
    net.seed(16)
    before = net.stats()
    sent_before, resent_before = tcp_counters(net, "server")
    code, transfers, error = curl(net, "-o", "/dev/null", net.url("/large/1M.bin", "http"))
    sent_after, resent_after = tcp_counters(net, "server")
    after = net.stats()
    net.set_link(loss=0.0, buffer_bytes=buffer_bytes)
    packets = sum(after[d]["packets"] - before[d]["packets"] for d in ("c2s", "s2c"))
    lost = sum(after[d]["lost"] - before[d]["lost"] for d in ("c2s", "s2c"))
    dropped = lost / max(packets, 1)
    resent = (resent_after - resent_before) / max(sent_after - sent_before, 1)
    ok = code == 0 and 0.6 * loss <= dropped <= 1.4 * loss and 0.5 * loss <= resent <= 2 * loss
    rate = transfers[0]["size_download"] * 8 / transfers[0]["time_total"] / 1e6 if code == 0 else 0
    check.row("packet loss", "%g %%" % (100 * loss),
              "%.1f %% dropped, %.1f %% of segments resent" % (100 * dropped, 100 * resent), ok,
              "%d of %d packets; the server resent %d of %d segments; 1M.bin at %.1f Mbit/s %s"
              % (lost, packets, resent_after - resent_before, sent_after - sent_before, rate, error))


def check_origins(net, check):
    """HTTP/2 over TLS with the lab's CA, HTTP/1.1 on :8443 and :80, and nginx's log of connections."""
    log_start = len(net.access_log())
    code, transfers, error = curl(net, "--http2", "--cacert", net.ca_file, "-o", "/dev/null", "-o", "/dev/null",
                                  net.url("/img/0001.jpg"), net.url("/img/0002.jpg"))
    versions = [t["http_version"] for t in transfers]
    check.row("HTTPS, lab CA, HTTP/2", "2, 2", ", ".join(versions) if code == 0 else error,
              code == 0 and versions == ["2", "2"], "two requests, one curl")
    versions = []
    for origin, extra in (("https_h1", ["--cacert", net.ca_file, "--resolve", net.info()["resolve"][1]]),
                          ("http", [])):
        code, transfers, error = curl(net, *extra, "-o", "/dev/null", net.url("/img/0003.jpg", origin))
        versions.append(transfers[0]["http_version"] if code == 0 else error)
    check.row("HTTPS :8443, HTTP :80", "1.1, 1.1", ", ".join(versions), versions == ["1.1", "1.1"],
              ":8443 with curl --resolve")
    code, _, error = curl(net, "-o", "/dev/null", net.url("/img/0001.jpg"))
    check.row("HTTPS without the lab CA", "refused", "curl exit %d" % code, code == 60, error[:60])
    entries = net.access_log()[log_start:]
    ok = (len(entries) == 4 and entries[0]["connection"] == entries[1]["connection"]
          and [e["connection_requests"] for e in entries[:2]] == [1, 2] and entries[0]["http2"] == "h2"
          and len({entries[0]["connection"], entries[2]["connection"], entries[3]["connection"]}) == 3)
    check.row("nginx connection ids", "1 shared, 2 new", "%d requests logged" % len(entries), ok,
              "; ".join("conn %s #%s %s %s" % (e["connection"], e["connection_requests"], e["request"].split()[1],
                                               e["http2"] or e["protocol"]) for e in entries))


def run(delay_ms, rate_mbit, buffer_bytes, name):
    check = Check()
    with lab.Lab(name=name, delay_ms=delay_ms, rate_mbit=rate_mbit, buffer_bytes=buffer_bytes, images=8) as net:
        check_round_trip(net, check, delay_ms)
        check_throughput(net, check, rate_mbit)
        check_outage(net, check, rate_mbit)
        check_loss(net, check)
        check_origins(net, check)
    check.print("link: %g ms one way, %g Mbit/s, %d-byte buffer" % (delay_ms, rate_mbit, buffer_bytes))
    return check.failed()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default="selfcheck", help="the lab's name (default selfcheck)")
    parser.add_argument("--link", action="append", metavar="DELAY_MS/RATE_MBIT/BUFFER",
                        help="a link to check, like 25/20/64K (default: 25/20/64K and 5/100/64K)")
    args = parser.parse_args()
    links = args.link or ["25/20/64K", "5/100/64K"]
    failures = []
    for text in links:
        try:
            delay, rate, buffer = text.split("/")
            failures += run(float(delay), float(rate), lab.byte_count(buffer), args.name)
        except (ValueError, argparse.ArgumentTypeError, lab.LabError) as error:
            print("lab selfcheck: %s: %s" % (text, error), file=sys.stderr)
            return 1
    print("\nlab selfcheck: %s" % ("%d check(s) failed" % len(failures) if failures else "all ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
