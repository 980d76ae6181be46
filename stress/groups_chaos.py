"""Group 1, chaos: kill -9 the daemon at random moments during a large prefetch, restart it each time; at the end
every URL is cached with the origin's SHA-256, nothing acknowledged is lost, the index matches the disk."""
import concurrent.futures
import os
import random
import threading
import time

from lib import Daemon, Failed, Origin, log, outcome, scratch, wait_until

GROUP = "chaos"


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
    lock = threading.Lock()
    up = threading.Event()
    up.set()
    acked_now = threading.Event()  # set by the queuer on each acknowledgement

    pause = 0.1 if args.quick else 0.3

    def queuer():
        batch_size = 50
        try:
            for start in range(0, len(urls), batch_size):
                batch = urls[start:start + batch_size]
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
                    with lock:
                        for item in reply["result"]["results"]:
                            if item["status"] in ("queued", "already", "cached"):
                                state["acked"].add(item["url"])
                            else:
                                state["rejected"].append(item["status"])
                    acked_now.set()
                    break
                # Spread the queueing over the first kills, so that some land between a request and its reply.
                time.sleep(pause)
        except Exception as error:  # noqa: BLE001
            state["error"] = error
        finally:
            state["done"] = True

    thread = threading.Thread(target=queuer, daemon=True)
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
        up.clear()
        daemon.kill9()
        began = time.monotonic()
        daemon.start(timeout=120)
        restarts.append(time.monotonic() - began)
        up.set()
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
    def expected_sha(url):
        return url, origin.sha256(url[len(origin.base):])

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        want = dict(pool.map(expected_sha, sorted(state["acked"])))
    ids = {client.send({"op": "get", "url": url, "offline": True}): url for url in want}
    replies = client.wait(ids.keys(), timeout=300)
    missing, wrong = [], []
    for i, url in ids.items():
        reply = replies[i]
        if not reply.get("ok"):
            missing.append((url, outcome(reply)))
        elif reply["result"]["sha256"] != want[url] or not os.path.exists(reply["result"]["path"]):
            wrong.append(url)
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
    on_disk = sum(os.path.getsize(f) for f in files)
    table.add(GROUP, "status consistent with disk",
              f"entries {len(files)} files, bytes {on_disk}",
              f"entries {status['cache']['entries']}, bytes {status['cache']['bytes']}",
              status["cache"]["entries"] == len(files) and status["cache"]["bytes"] == on_disk)
    table.peak(GROUP, daemon.peak)
