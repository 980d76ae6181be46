"""Group 5, access and egress: link-local refused before connecting and on the address connected (also behind a redirect),
socket and directory modes in user mode, a non-member user refused."""
import json
import os
import stat
import subprocess
import sys
import urllib.parse

from hostile_server import HostileServer
from lib import Daemon, Origin, get_many, outcome, scratch

GROUP = "access"
LINK_LOCAL = "169.254.77.1"  # added to lo for the test, removed after


def mode(path):
    return oct(stat.S_IMODE(os.stat(path).st_mode))


CONNECT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(json.dumps({"connect": type(e).__name__})); sys.exit(0)
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
    if b"\n" in data:
        # The first line; then whether the daemon closes.
        try:
            s.sendall(b'{"id":1,"op":"status"}\n')
            more = s.recv(4096)
        except OSError:
            more = b""
        print(json.dumps({"first": json.loads(data.split(b"\n")[0]), "then": more.decode(errors="replace")[:80]}))
        sys.exit(0)
print(json.dumps({"first": None}))
"""


def as_nobody(socket_path):
    result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                             CONNECT, socket_path], capture_output=True, text=True, timeout=30)
    try:
        return json.loads(result.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": result.stderr.strip()[-120:]}


def run(args, table, processes, scratch_dirs):
    work = scratch(GROUP)
    scratch_dirs.append(work)
    os.chmod(work, 0o755)  # so that user nobody can reach a world-connectable socket below it
    origin = Origin(processes)

    # --- modes in user mode ---
    daemon = Daemon(processes, args.binary, work, socket_path=os.path.join(work, "run", "ctl.sock"),
                    cache_dir=os.path.join(work, "cache")).start()
    client = daemon.client()
    reply = get_many(client, [origin.url("/mode.jpg")])
    client.close()
    path = next(iter(reply.values())).get("result", {}).get("path", "")
    modes = {
        "socket": (mode(daemon.socket), "0o600"),
        "socket dir": (mode(os.path.dirname(daemon.socket)), "0o700"),
        "cache dir": (mode(daemon.cache), "0o700"),
    }
    if path:
        # docs/configuration.md: inside the cache, files 0640 and directories 0750 (private via the 0700 root).
        modes["cached file's dir"] = (mode(os.path.dirname(path)), "0o750")
        modes["cached file"] = (mode(path), "0o640")
    for name, (got, want) in modes.items():
        table.add(GROUP, f"user mode: {name} mode", want, got, got == want)

    if os.geteuid() != 0:
        table.skip(GROUP, "non-member user, link-local egress", "not root: no setpriv to another uid, no ip addr")
        daemon.stop()
        table.peak(GROUP, daemon.peak)
        return
    # --- a non-member user against a world-connectable socket ---
    shared = Daemon(processes, args.binary, work, "--socket-mode", "0666",
                    socket_path=os.path.join(work, "shared", "ctl.sock"), cache_dir=os.path.join(work, "cache2"),
                    log_name="shared.log").start()
    seen = as_nobody(shared.socket)
    first = seen.get("first") or {}
    code = first.get("error", {}).get("code") if isinstance(first, dict) else None
    table.add(GROUP, "non-member (uid 65534) on a 0666 socket", "unauthorized, then closed",
              f"{code or seen}, then {seen.get('then')!r}", code == "unauthorized" and not seen.get("then"))
    table.add(GROUP, "socket dir of a 0666 socket", "0o711 (search only)",
              mode(os.path.dirname(shared.socket)), mode(os.path.dirname(shared.socket)) == "0o711")
    shared.stop()
    # Positive control: the same user listed in --allowed-users is greeted.
    member = Daemon(processes, args.binary, work, "--socket-mode", "0666", "--allowed-users", "65534",
                    socket_path=os.path.join(work, "member", "ctl.sock"), cache_dir=os.path.join(work, "cache3"),
                    log_name="member.log").start()
    seen = as_nobody(member.socket)
    first = seen.get("first") or {}
    table.add(GROUP, "control: uid 65534 in --allowed-users", "greeted", json.dumps(first)[:60],
              isinstance(first, dict) and first.get("hello") == "prefetchd")
    member.stop()

    # --- egress: link-local, on the address actually connected ---
    client = daemon.client(timeout=120)
    added = subprocess.run(["ip", "addr", "add", f"{LINK_LOCAL}/32", "dev", "lo"], capture_output=True).returncode == 0
    try:
        if not added:
            table.add(GROUP, f"link-local {LINK_LOCAL} on lo", "added (root, CAP_NET_ADMIN)", "ip addr add failed",
                      False)
        else:
            server = HostileServer(host=LINK_LOCAL)
            target = server.url("/ok.jpg")
            decimal = f"http://{int.from_bytes(bytes(map(int, LINK_LOCAL.split('.'))), 'big')}:{server.port}/ok.jpg"
            cases = [
                ("direct get of a link-local URL", target),
                ("redirect to a link-local URL", origin.url("/r.jpg?redirect=" + urllib.parse.quote(target, safe=""))),
                ("link-local as a decimal IPv4 host", decimal),
                ("link-local as IPv4-mapped IPv6", f"http://[::ffff:{LINK_LOCAL}]:{server.port}/ok.jpg"),
            ]
            replies = get_many(client, [u for _, u in cases], timeout=60)
            for name, url in cases:
                got = outcome(replies[url])
                # invalid_url is an honest refusal too, for host forms the canonicaliser rejects.
                good = got == "address_not_allowed" or (got == "invalid_url" and "decimal" in name)
                table.add(GROUP, name, "address_not_allowed", got, good)
            table.add(GROUP, "link-local server saw no connection", "0 connections, 0 requests (refused before connecting)",
                      f"{server.connections} connections, {len(server.requests)} requests",
                      server.connections == 0 and len(server.requests) == 0)
            server.close()
    finally:
        if added:
            subprocess.run(["ip", "addr", "del", f"{LINK_LOCAL}/32", "dev", "lo"])
    # IPv6 link-local (fe80::/10, so fe90:: too), reached through a redirect with the zone (curl follows it; the
    # canonicaliser is not asked). Before the fix in Transfer.swift only fe80: was refused.
    for address in ("fe80::77", "fe90::77", "febf::77"):
        added6 = subprocess.run(["ip", "-6", "addr", "add", f"{address}/128", "dev", "lo", "nodad"],
                                capture_output=True).returncode == 0
        try:
            if not added6:
                table.add(GROUP, f"IPv6 link-local {address} on lo", "added", "ip -6 addr add failed", False)
                continue
            server = HostileServer(host=address)
            target = server.url("/ok.jpg")
            via = origin.url("/r6.jpg?redirect=" + urllib.parse.quote(target, safe="") + "&n=" + address)
            got = outcome(next(iter(get_many(client, [via], timeout=60).values())))
            table.add(GROUP, f"redirect to IPv6 link-local [{address}%lo]", "address_not_allowed, no request",
                      f"{got}, {server.connections} connections, {len(server.requests)} requests",
                      got == "address_not_allowed" and not server.requests)
            server.close()
        finally:
            if added6:
                subprocess.run(["ip", "-6", "addr", "del", f"{address}/128", "dev", "lo"])
    reply = get_many(client, [origin.url("/redirect-metadata.jpg?redirect=" +
                                         urllib.parse.quote("http://169.254.169.254/latest/meta-data/", safe=""))])
    got = outcome(next(iter(reply.values())))
    table.add(GROUP, "redirect to 169.254.169.254 (reachable here)", "address_not_allowed", got,
              got == "address_not_allowed")
    client.close()
    daemon.stop()
    table.peak(GROUP, daemon.peak)
