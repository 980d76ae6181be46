#!/usr/bin/env python3
"""B5's load: N concurrent clients, each on its own connection, each sending `get`s one after another (the next
once the previous is answered) for URLs drawn at random from a list. Speaks docs/protocol.md directly with
asyncio; standard library only. Prints one JSON object: counts, errors by code, latency percentiles (ms),
and which URLs were asked for.

Usage: b5_clients.py --socket PATH --urls FILE [--clients 500] [--gets 100] [--seed 1] [--cached N]
"""

import argparse
import asyncio
import json
import random
import socket
import sys
import time


def percentile(ordered, p):
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


async def client(index, sock, urls, gets, seed, latencies, errors, asked, start_gate, cached, by_class):
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
    greeting = json.loads(await reader.readline())
    assert greeting.get("hello") == "prefetchd", greeting
    rng = random.Random(seed * 100003 + index)
    await start_gate.wait()
    for request in range(gets):
        i = rng.randrange(len(urls))
        asked.add(i)
        line = json.dumps({"id": request, "op": "get", "url": urls[i]}).encode() + b"\n"
        started = time.perf_counter()
        writer.write(line)
        await writer.drain()
        reply = await reader.readline()
        elapsed = time.perf_counter() - started
        latencies.append(elapsed)
        by_class["cached" if i < cached else "uncached"].append(elapsed)
        if not reply:
            errors["connection_closed"] = errors.get("connection_closed", 0) + 1
            return
        reply = json.loads(reply)
        if reply.get("id") != request:
            errors["wrong_id"] = errors.get("wrong_id", 0) + 1
        elif not reply.get("ok"):
            code = reply.get("error", {}).get("code", "?")
            errors[code] = errors.get(code, 0) + 1
    writer.close()
    await writer.wait_closed()


async def main_async(args, urls):
    latencies, errors, asked = [], {}, set()
    by_class = {"cached": [], "uncached": []}
    start_gate = asyncio.Event()
    # Connect with blocking sockets first (a Unix connect waits for room in the listen queue), then hand them to
    # asyncio: every client is connected before the first request goes out.
    socks = []
    connect_started = time.perf_counter()
    for _ in range(args.clients):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(args.socket)
        s.setblocking(False)
        socks.append(s)
    connect_seconds = time.perf_counter() - connect_started
    tasks = [asyncio.create_task(client(i, s, urls, args.gets, args.seed, latencies, errors, asked, start_gate,
                                        args.cached, by_class))
             for i, s in enumerate(socks)]
    await asyncio.sleep(0.2)
    started = time.perf_counter()
    start_gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.perf_counter() - started
    for result in results:
        if isinstance(result, Exception):
            key = "client_exception:" + type(result).__name__
            errors[key] = errors.get(key, 0) + 1
    ordered = sorted(latencies)
    return {
        "clients": args.clients,
        "gets_per_client": args.gets,
        "answered": len(latencies),
        "errors": errors,
        "connect_s": connect_seconds,
        "wall_s": wall,
        "gets_per_s": len(latencies) / wall if wall else None,
        "latency_ms": {
            "p50": percentile(ordered, 50) * 1000,
            "p95": percentile(ordered, 95) * 1000,
            "p99": percentile(ordered, 99) * 1000,
            "max": ordered[-1] * 1000,
        } if ordered else None,
        "latency_ms_by_url": {
            name: {"n": len(v), "p50": percentile(sorted(v), 50) * 1000, "p99": percentile(sorted(v), 99) * 1000}
            for name, v in by_class.items() if v
        },
        "asked": sorted(asked),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--urls", required=True)
    ap.add_argument("--clients", type=int, default=500)
    ap.add_argument("--gets", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cached", type=int, default=0, help="the first N URLs of the list were cached beforehand")
    args = ap.parse_args()
    with open(args.urls) as f:
        urls = [line.strip() for line in f if line.strip()]
    json.dump(asyncio.run(main_async(args, urls)), sys.stdout)
    print()


if __name__ == "__main__":
    main()
