#!/usr/bin/env python3
"""Servers that misbehave in ways nginx does not, for the network lab (stress group `network`, issue 20). Run one
in the server namespace (`net.popen("server", [...])`); each logs one JSON line per event to --log.

    fault_servers.py silent --bind 10.77.0.2 --port 9448 --log F
        accepts TCP connections and never sends a byte (a TLS client waits for the server's hello)
    fault_servers.py tls-silent --bind 10.77.0.2 --port 9449 --cert C --key K --log F
        completes the TLS handshake (HTTP/1.1 by ALPN), reads the request, never answers
    fault_servers.py cutting --bind 127.0.0.1 --port 9450 --root DIR --cut 2 --cut-at 3000000 --log F
        an HTTP/1.1 origin for nginx's proxy_pass: serves files under DIR with ETag, Last-Modified and Range
        (If-Range honoured), and closes the connection after --cut-at body bytes in each of its first --cut
        responses. Behind an HTTP/2 nginx `proxy_buffering off` location, a cut becomes an RST_STREAM of that
        one stream (nginx: "upstream prematurely closed connection").

Python standard library only.
"""

import argparse
import email.utils
import json
import os
import socket
import ssl
import sys
import threading
import time


class Log:
    def __init__(self, path):
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, **fields):
        with self.lock:
            self.file.write(json.dumps(dict(fields, t=time.time())) + "\n")


def listen(address, port):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(128)
    return server


def hold(connection, log, peer):
    """Reads until the client gives up; never writes."""
    received = 0
    try:
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += len(chunk)
    except OSError:
        pass
    finally:
        log.write(event="closed", peer=peer, received=received)
        connection.close()


def serve_silent(args, log):
    server = listen(args.bind, args.port)
    print("silent: listening on %s:%d" % (args.bind, args.port), flush=True)
    while True:
        connection, peer = server.accept()
        log.write(event="accepted", peer="%s:%d" % peer)
        threading.Thread(target=hold, args=(connection, log, "%s:%d" % peer), daemon=True).start()


def serve_tls_silent(args, log):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["http/1.1"])
    server = listen(args.bind, args.port)
    print("tls-silent: listening on %s:%d" % (args.bind, args.port), flush=True)

    def handshake(connection, peer):
        try:
            connection.settimeout(30)
            tls = context.wrap_socket(connection, server_side=True)
            tls.settimeout(None)
        except (OSError, ssl.SSLError) as error:
            log.write(event="handshake failed", peer=peer, error=str(error))
            connection.close()
            return
        log.write(event="handshake done", peer=peer, alpn=tls.selected_alpn_protocol())
        hold(tls, log, peer)

    while True:
        connection, peer = server.accept()
        log.write(event="accepted", peer="%s:%d" % peer)
        threading.Thread(target=handshake, args=(connection, "%s:%d" % peer), daemon=True).start()


def serve_cutting(args, log):
    server = listen(args.bind, args.port)
    root = os.path.realpath(args.root)
    state = {"served": 0}
    lock = threading.Lock()
    print("cutting: listening on %s:%d" % (args.bind, args.port), flush=True)

    def respond(connection, peer):
        reader = connection.makefile("rb")
        try:
            while True:
                request = reader.readline(8192).decode("latin-1").strip()
                if not request:
                    return
                headers = {}
                while True:
                    line = reader.readline(8192).decode("latin-1").strip()
                    if not line:
                        break
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                path = request.split(" ")[1].split("?")[0] if len(request.split(" ")) > 1 else "/"
                full = os.path.realpath(os.path.join(root, path.lstrip("/")))
                if not full.startswith(root + os.sep) or not os.path.isfile(full):
                    connection.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    log.write(event="request", peer=peer, path=path, status=404)
                    continue
                stat = os.stat(full)
                size = stat.st_size
                etag = '"%x-%x"' % (int(stat.st_mtime), size)
                start = 0
                wanted = headers.get("range", "")
                if wanted.startswith("bytes=") and headers.get("if-range", etag) == etag:
                    first = wanted[6:].split("-")[0]
                    if first.isdigit() and int(first) < size:
                        start = int(first)
                with lock:
                    state["served"] += 1
                    cut = state["served"] <= args.cut
                status = "206 Partial Content" if start else "200 OK"
                head = ["HTTP/1.1 " + status, "Content-Length: %d" % (size - start), "ETag: " + etag,
                        "Last-Modified: " + email.utils.formatdate(stat.st_mtime, usegmt=True),
                        "Content-Type: application/octet-stream", "Accept-Ranges: bytes"]
                if start:
                    head.append("Content-Range: bytes %d-%d/%d" % (start, size - 1, size))
                connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
                log.write(event="request", peer=peer, path=path, status=int(status[:3]), range=wanted,
                          start=start, cut=args.cut_at if cut else None)
                limit = size - start if not cut else min(args.cut_at, size - start)
                with open(full, "rb") as f:
                    f.seek(start)
                    left = limit
                    while left > 0:
                        chunk = f.read(min(65536, left))
                        if not chunk:
                            break
                        connection.sendall(chunk)
                        left -= len(chunk)
                if cut:
                    connection.shutdown(socket.SHUT_RDWR)
                    return
        except OSError:
            return
        finally:
            connection.close()

    while True:
        connection, peer = server.accept()
        threading.Thread(target=respond, args=(connection, "%s:%d" % peer), daemon=True).start()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("silent", "tls-silent", "cutting"))
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--root")
    parser.add_argument("--cut", type=int, default=1, help="cutting: how many responses to cut")
    parser.add_argument("--cut-at", type=int, default=1 << 20, help="cutting: body bytes sent before the cut")
    args = parser.parse_args()
    log = Log(args.log)
    {"silent": serve_silent, "tls-silent": serve_tls_silent, "cutting": serve_cutting}[args.kind](args, log)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
