#!/usr/bin/env python3
"""A TLS origin that speaks HTTP/2 (python3-h2), for what only HTTP/2 does: many transfers on one connection.

    python3 h2_origin.py --cert CERT --key KEY --log FILE [--port 0]

Binds 127.0.0.1, prints one line ``PORT <n>``, serves until SIGTERM. Each request is logged to FILE as a JSON line
{"path", "connection"} (connections numbered from 1 in the order they were accepted).

    GET /<name>.jpg?size=N&drip=BPS&drop=B

answers a JPEG of N bytes (origin.py's generated body for that path) at BPS bytes a second (no limit without
drip). With drop=B the first request for the path has its whole connection closed after B bytes of its body: a
TCP close without GOAWAY, so every stream on that connection ends unfinished. Later requests for it are answered.
With reset=B the answer has no content-length, and the first request for the path gets B bytes of its body and
then RST_STREAM with NO_ERROR, which RFC 9113 allows only after a whole response: a cut that looks like the end.
With empty=S the answer's first 100 bytes are followed by empty DATA frames, without a pause, for S seconds, then
the rest of the body.
With flood=N the answer is a HEADERS frame followed by N empty CONTINUATION frames, more than nghttp2 accepts (the
client's session fails), and 0.3 s later one more; the connection is left open.
"""

import argparse
import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

import h2.config
import h2.connection
import h2.events

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import origin  # noqa: E402  (the generated JPEG bodies)

CHUNK = 4096


class Log:
    def __init__(self, path):
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.dropped = set()

    def request(self, **fields):
        with self.lock:
            self.file.write(json.dumps(fields) + "\n")

    def first_drop(self, path):
        with self.lock:
            first = path not in self.dropped
            self.dropped.add(path)
            return first


class Connection:
    """One client connection. Only `serve` touches the socket; responders queue their frames in the h2 state."""

    def __init__(self, sock, number, log):
        self.sock = sock
        self.number = number
        self.log = log
        self.lock = threading.Condition()
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.dropping = False
        self.closed = False
        self.raw = b""  # bytes sent as they are, after what the h2 state has to send

    def serve(self):
        self.sock.settimeout(0.005)
        with self.lock:
            self.h2.initiate_connection()
        try:
            while not self.dropping:
                with self.lock:
                    pending = self.h2.data_to_send() + self.raw
                    self.raw = b""
                if pending:
                    self.sock.settimeout(10)
                    self.sock.sendall(pending)
                self.sock.settimeout(0.0001 if self.raw else 0.005)  # a flood waits on nothing
                try:
                    data = self.sock.recv(65536)
                except (socket.timeout, ssl.SSLWantReadError):
                    continue
                if not data:
                    break
                with self.lock:
                    for event in self.h2.receive_data(data):
                        if isinstance(event, h2.events.RequestReceived):
                            threading.Thread(target=self.respond, args=(event.stream_id, dict(event.headers)),
                                             daemon=True).start()
                    self.lock.notify_all()
        except (OSError, ValueError, h2.exceptions.ProtocolError):
            pass
        finally:
            with self.lock:
                self.closed = True
                self.lock.notify_all()
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()

    def send(self, stream, data, end):
        """Queues `data` on `stream` as its flow-control window allows; False once the stream or connection is gone."""
        offset = 0
        with self.lock:
            while offset < len(data):
                if self.closed or self.dropping:
                    return False
                try:
                    window = min(self.h2.local_flow_control_window(stream), self.h2.max_outbound_frame_size)
                except h2.exceptions.StreamClosedError:
                    return False
                if window <= 0:
                    self.lock.wait(0.05)
                    continue
                piece = data[offset:offset + window]
                offset += len(piece)
                self.h2.send_data(stream, piece, end_stream=end and offset == len(data))
        return True

    def respond(self, stream, headers):
        target = urlsplit(headers.get(":path", "/"))
        query = {name: values[0] for name, values in parse_qs(target.query).items()}
        self.log.request(path=target.path, connection=self.number)
        size = int(query.get("size", 2048))
        rate = float(query.get("drip", 0))
        drop = int(query["drop"]) if "drop" in query and self.log.first_drop(target.path) else None
        reset = int(query["reset"]) if "reset" in query and self.log.first_drop("reset " + target.path) else None
        if "flood" in query:
            def frame(kind, stream_id, payload=b""):
                return len(payload).to_bytes(3, "big") + bytes([kind, 0]) + stream_id.to_bytes(4, "big") + payload
            with self.lock:  # HEADERS (":status: 200", no END_HEADERS), then CONTINUATION frames
                self.raw += frame(0x1, stream, b"\x88") + frame(0x9, stream) * int(query["flood"])
            time.sleep(0.3)
            with self.lock:  # and one more later, unread until the client next looks at the connection
                self.raw += frame(0x9, stream)
            return
        body = b"".join(origin.GeneratedBody(target.path, size, True).iter_range(0, size))
        with self.lock:
            if self.closed:
                return
            self.h2.send_headers(stream, [(":status", "200"), ("content-type", "image/jpeg")]
                                 + ([] if "reset" in query else [("content-length", str(len(body)))]))
        started = time.monotonic()
        sent = 0
        if "empty" in query:
            self.send(stream, body[:100], end=False)
            sent = 100
            # 4 MiB of empty frames made once and handed over whole whenever the last went out: appending them in
            # small pieces to what waited copied it each time, and a client could keep up with this side.
            frames = ((0).to_bytes(3, "big") + bytes([0x0, 0]) + stream.to_bytes(4, "big")) * ((4 << 20) // 9)
            while time.monotonic() - started < float(query["empty"]):
                with self.lock:
                    if self.closed:
                        return
                    if not self.raw:
                        self.raw = frames
                        continue
                time.sleep(0.0005)
        while sent < len(body):
            if drop is not None and sent >= drop:
                with self.lock:
                    self.dropping = True
                return
            if reset is not None and sent >= reset:
                time.sleep(0.1)  # the body first, the reset in a later read (in the same one curl sees the cut)
                with self.lock:
                    self.h2.reset_stream(stream, error_code=0)
                return
            piece = body[sent:sent + CHUNK]
            if not self.send(stream, piece, end=sent + len(piece) == len(body)):
                return
            sent += len(piece)
            if rate > 0:
                time.sleep(max(0.0, started + sent / rate - time.monotonic()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["h2"])
    log = Log(args.log)
    listener = socket.create_server(("127.0.0.1", args.port))
    print("PORT %d" % listener.getsockname()[1], flush=True)
    number = 0

    def handshake(client, number):
        try:
            client.settimeout(10)
            tls = context.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError):
            client.close()
            return
        Connection(tls, number, log).serve()

    while True:
        client, _ = listener.accept()
        number += 1
        threading.Thread(target=handshake, args=(client, number), daemon=True).start()


if __name__ == "__main__":
    main()
