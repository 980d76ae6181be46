"""Group 1, chaos: kill -9 the daemon at random moments during a large prefetch, restart it each time; at the end
every URL is cached with the origin's SHA-256, nothing acknowledged is lost, the index matches the disk. Then a
poisoned URL (`PREFETCHD_TEST_DIE_ON`: the daemon crashes, a stack overflow, when that URL's response is about to
be interpreted) in a prefetch: it kills the daemon twice, is `quarantined`, and every other URL is served."""
import concurrent.futures
import os
import random
import re
import threading
import time

from lib import Daemon, Failed, Origin, log, outcome, scratch, wait_until

GROUP = "chaos"



def check_cached(client, origin, urls):
    """Offline gets of `urls` (no network): the ones not cached, with their outcome (path shown), and the ones whose
    file is gone or whose SHA-256 is not the origin's."""
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        want = dict(pool.map(lambda url: (url, origin.sha256(url[len(origin.base):])), urls))
    ids = {client.send({"op": "get", "url": url, "offline": True}): url for url in want}
    replies = client.wait(ids.keys(), timeout=300)
    missing, wrong = [], []
    for i, url in ids.items():
        reply = replies[i]
        if not reply.get("ok"):
            missing.append((url[len(origin.base):], outcome(reply)))
        elif reply["result"]["sha256"] != want[url] or not os.path.exists(reply["result"]["path"]):
            wrong.append(url)
    return missing, wrong

def run(args, table, processes, scratch_dirs):
    rng = random.Random(9)
    if args.quick:
        small, large, kills, large_size, drip = 200, 1, 5, 3_000_000, 1_500_000
    else:
        small, large, kills, large_size, drip = 2995, 5, 30, 20_000_000, 3_000_000
    work = scratch(GROUP)
    scratch_dirs.append(work)
    origin = Origin(processes)
    paths = [f"/c/{n}.jpg?size={rng.randrange(1000, 40000)}" for n in range(small)]
    paths += [f"/big/{n}.jpg?size={large_size}&drip={drip}" for n in range(large)]
    rng.shuffle(paths)
    urls = [origin.url(p) for p in paths]
    daemon = Daemon(processes, args.binary, work, "--slow-width", "4", "--max-attempts", "10").start()
    state = {"acked": set(), "rejected": [], "batches_resent": 0, "done": False, "error": None}
    up = threading.Event()
    up.set()
    acked_now = threading.Event()  # set by the queuer on each acknowledgement
    # Spread the queueing over the first kills, so that some land between a request and its reply.
    pause = 0.1 if args.quick else 0.3
    thread = threading.Thread(target=queue_all, args=(daemon, urls, up, state, pause, acked_now), daemon=True)
    thread.start()
    restarts = []
    right_after_ack = 0
    for n in range(kills):
        if n % 2 == 0 and not state["done"]:
            # Kill the moment a `queue` was acknowledged: what was acknowledged must already be durable.
            acked_now.clear()
            if acked_now.wait(3):
                right_after_ack += 1
        else:
            time.sleep(rng.uniform(0.2, 1.8))
        restarts.append(daemon.restart_after_kill9(up))
    log(f"chaos: {kills} kills done; queuer done={state['done']}")
    thread.join(600)
    table.add(GROUP, f"kill -9 x{kills}, restart each time", f"{kills} restarts, each greets",
              f"{len(restarts)} restarts ({right_after_ack} right after an ack), slowest {max(restarts):.1f}s",
              len(restarts) == kills)
    table.add(GROUP, "queue requests during the kills", f"{len(urls)} URLs acknowledged",
              f"{len(state['acked'])} acknowledged, {state['batches_resent']} batch sends retried, "
              f"rejects {state['rejected'][:3]}, error {state['error']}",
              len(state["acked"]) == len(urls) and not state["rejected"] and state["error"] is None)

    client = daemon.client(timeout=30)

    def drained():
        status = client.call({"op": "status"})["result"]
        busy = (status["fast"]["waiting"] + status["fast"]["running"] + status["slow"]["waiting"]
                + status["slow"]["running"] + status["backlog"] + status["delayed"])
        daemon.sample()
        return status if busy == 0 else None

    began = time.monotonic()
    status = wait_until(drained, 900 if not args.quick else 180, interval=0.5, what="the backlog to drain")
    log(f"chaos: drained in {time.monotonic() - began:.0f}s after the last restart")

    # Every acknowledged URL is cached (offline get: no network) with the origin's SHA-256.
    want = sorted(state["acked"])
    missing, wrong = check_cached(client, origin, want)
    table.add(GROUP, "every acknowledged URL cached", f"{len(want)} cached (offline get), none lost",
              f"{len(want) - len(missing)} cached, {len(missing)} missing {missing[:2]}", not missing)
    table.add(GROUP, "cached bodies match the origin's SHA-256", "0 mismatches", f"{len(wrong)} mismatches",
              not wrong and not missing)
    big = [u for u in want if "/big/" in u]
    stats = origin.stats()
    ranged = sum(1 for entry in stats["log"] if entry["path"].startswith("/big/") and entry["headers"].get("Range"))
    table.add(GROUP, "large files resumed with Range", f"{len(big)} large files cached, Range requests > 0",
              f"{sum(1 for u in big if u not in dict(missing))} cached, {ranged} Range requests",
              ranged > 0 and all(u not in dict(missing) for u in big))

    status = client.call({"op": "status"})["result"]
    client.close()
    daemon.stop()
    ok, problems = daemon.check_index()
    table.add(GROUP, "index vs files (check_index.py)", "no dangling row, no orphan, no temp file", problems, ok)
    files = [os.path.join(d, f) for d, _, names in os.walk(os.path.join(daemon.cache, "files")) for f in names]
    on_disk = sum(os.stat(f).st_blocks * 512 for f in files)  # cache.bytes is disk use, as `du` counts
    table.add(GROUP, "status consistent with disk",
              f"entries {len(files)} files, bytes {on_disk} allocated",
              f"entries {status['cache']['entries']}, bytes {status['cache']['bytes']}",
              status["cache"]["entries"] == len(files) and status["cache"]["bytes"] == on_disk)
    table.peak(GROUP, daemon.peak)

    poisoned(args, table, processes, origin, work)


def queue_all(daemon, urls, up, state, pause=0.0, acked_now=None):
    """Queues `urls` in batches of 50, each sent again until acknowledged (the daemon may die before it answers);
    fills `state` (acked, rejected, batches_resent, done, error). Waits for `up` before each send, sets `acked_now`
    on each acknowledgement and sleeps `pause` after it."""
    try:
        for start in range(0, len(urls), 50):
            batch = urls[start:start + 50]
            while True:
                up.wait()
                try:
                    client = daemon.client(timeout=10)
                    try:
                        reply = client.call({"op": "queue", "urls": batch}, timeout=10)
                    finally:
                        client.close()
                except (OSError, ValueError, Failed):
                    state["batches_resent"] += 1
                    time.sleep(0.05)
                    continue
                if not reply.get("ok"):
                    state["rejected"].append(outcome(reply))
                    time.sleep(0.1)
                    continue
                for item in reply["result"]["results"]:
                    if item["status"] in ("queued", "already", "cached"):
                        state["acked"].add(item["url"])
                    else:
                        state["rejected"].append(item["status"])
                if acked_now is not None:
                    acked_now.set()
                break
            time.sleep(pause)
    except Exception as error:  # noqa: BLE001
        state["error"] = error
    finally:
        state["done"] = True


def poisoned(args, table, processes, origin, work):
    """A prefetch with one poisoned URL: the daemon crashes (SIGSEGV, the test hook's stack overflow) each time that
    URL's response is about to be interpreted, and is restarted whenever it dies. The second start-up after two crashes
    in a row quarantines the URL; from then on the daemon stays up and serves everything else."""
    small = 100 if args.quick else 1000
    paths = [f"/p/{n}.jpg?size={2000 + 37 * n}" for n in range(small)]
    poison_path = "/poison/0.jpg?size=5000"
    paths.insert(10, poison_path)  # early in the list, with most of the prefetch behind it
    urls = [origin.url(p) for p in paths]
    poison = origin.url(poison_path)
    daemon = Daemon(processes, args.binary, work, "--slow-width", "4", "--max-attempts", "10",
                    cache_dir=os.path.join(work, "poison-cache"), socket_path=os.path.join(work, "run", "poison.sock"),
                    log_name="poison.log")
    deaths = []  # exit status of each death (the test hook's stack overflow is SIGSEGV, -11)
    max_deaths = 5  # a crash loop: quarantine did not happen

    def forget_dead_process():
        deaths.append(daemon.process.returncode)
        processes.stop(daemon.process)  # already gone: only forgotten

    def start():
        """Starts the daemon, again when it dies before it greets; False once it died `max_deaths` times."""
        while len(deaths) < max_deaths:
            try:
                daemon.start(timeout=60)
                return True
            except Failed:
                if daemon.alive():
                    raise
                forget_dead_process()
        return False

    state = {"acked": set(), "rejected": [], "batches_resent": 0, "done": False, "error": None}
    up = threading.Event()
    previous = os.environ.get("PREFETCHD_TEST_DIE_ON")
    os.environ["PREFETCHD_TEST_DIE_ON"] = "/poison/"  # only the daemons started below inherit it
    try:
        started = start()
        up.set()
        thread = threading.Thread(target=queue_all, args=(daemon, urls, up, state, 0.1), daemon=True)
        thread.start()

        def settled():
            """The daemon is up, every batch was sent and nothing is left to do; restarts it when it died."""
            if not daemon.alive():
                up.clear()
                forget_dead_process()
                if not start():
                    raise Failed(f"the daemon died {len(deaths)} times: no quarantine")
                up.set()
                return False
            if not state["done"]:
                return False
            try:
                client = daemon.client(timeout=10)
                try:
                    status = client.call({"op": "status"}, timeout=10)["result"]
                finally:
                    client.close()
            except (OSError, ValueError, Failed):
                return False
            daemon.sample()
            busy = (status["fast"]["waiting"] + status["fast"]["running"] + status["slow"]["waiting"]
                    + status["slow"]["running"] + status["backlog"] + status["delayed"])
            return busy == 0

        crash_loop = None
        try:
            if started:
                wait_until(settled, 600 if not args.quick else 180, interval=0.1, what="the poisoned prefetch to settle")
        except Failed as error:
            crash_loop = error
        up.set()
        thread.join(60)
    finally:
        if previous is None:
            os.environ.pop("PREFETCHD_TEST_DIE_ON", None)
        else:
            os.environ["PREFETCHD_TEST_DIE_ON"] = previous

    with open(daemon.log_path, errors="replace") as logfile:
        lines = logfile.read().splitlines()
    hook_lines = [line for line in lines if "PREFETCHD_TEST_DIE_ON matched" in line]
    quarantined = [m.group(1) for m in map(re.compile(r"error: quarantined (\S+): ").search, lines) if m]
    quarantine_lines = [line for line in lines if f"error: quarantined {poison}: " in line]
    # Other URLs set aside: being handled at the moment the poisoned one killed the daemon, at both deaths.
    collateral = [url.replace(origin.base, "") for url in quarantined if url != poison]
    killed_by_poison = sum(1 for line in hook_lines if poison in line)
    table.add(GROUP, "poisoned URL (PREFETCHD_TEST_DIE_ON), restarted on each death",
              "2 deaths (SIGSEGV: crashes weigh 2 of the 4 that quarantine), both at the poisoned URL; then the daemon "
              "stays up",
              f"{len(deaths)} deaths, exit {deaths}, hook fired {len(hook_lines)}x ({killed_by_poison}x at the poisoned "
              f"URL), {'crash loop: ' + str(crash_loop) if crash_loop else 'up and idle'}",
              deaths == [-11, -11] and len(hook_lines) == 2 and killed_by_poison == 2 and crash_loop is None)
    if crash_loop is not None or not daemon.alive():
        table.add(GROUP, "poisoned URL quarantined", "info, get, queue and the log say quarantined",
                  "not checked: the daemon is not up", False)
        return

    client = daemon.client(timeout=60)
    info = client.call({"op": "info", "url": poison})
    failure = info.get("result", {}).get("failure") or {}
    got = client.call({"op": "get", "url": poison}, timeout=60)
    again = client.call({"op": "queue", "urls": [poison]})
    again_status = (again.get("result", {}).get("results") or [{}])[0]
    alive_after = daemon.alive() and daemon.ping_ok()
    table.add(GROUP, "poisoned URL quarantined",
              "info failure quarantined; get answers quarantined; queue skipped; one log line; no third death",
              f"info {failure.get('code')}; get {outcome(got)}; queue {again_status.get('status')} "
              f"({(again_status.get('error') or {}).get('code')}); {len(quarantine_lines)} log line(s) "
              f"{quarantine_lines[0].split(': ', 1)[-1][:60] + '…' if quarantine_lines else ''}; "
              f"{'up' if alive_after else 'DEAD'}",
              failure.get("code") == "quarantined" and outcome(got) == "quarantined"
              and again_status.get("status") == "skipped" and len(quarantine_lines) == 1 and alive_after)

    # Every other acknowledged URL is cached (offline get: no network) with the origin's bytes.
    want = sorted(state["acked"] - {poison})
    missing, wrong = check_cached(client, origin, want)
    client.close()
    table.add(GROUP, "poisoned prefetch: every other URL cached",
              f"{len(urls) - 1} acknowledged, all cached (offline get) with the origin's SHA-256",
              f"{len(state['acked'] - {poison})} acknowledged ({state['batches_resent']} batch sends retried, rejects "
              f"{state['rejected'][:3]}, error {state['error']}), {len(want) - len(missing)} cached, "
              f"{len(missing)} missing {missing[:2]}, {len(wrong)} mismatches, {len(collateral)} others quarantined "
              f"{collateral[:2]}",
              len(want) == len(urls) - 1 and not missing and not wrong and not state["rejected"]
              and state["error"] is None and not collateral)

    daemon.stop()
    table.peak(GROUP, daemon.peak)
    ok, problems = daemon.check_index()
    table.add(GROUP, "poisoned prefetch: index vs files", "no dangling row, no orphan, no temp file", problems, ok)
