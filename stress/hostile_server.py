"""A raw-socket HTTP server that misbehaves on purpose, for what origin.py cannot do (malformed HTTP, odd bodies).

Runs in a thread of the orchestrator. Paths:
    /gzip-bomb.jpg        200 image/jpeg, Content-Encoding: gzip, 64 MiB of zeros compressed to ~64 KiB
    /slow-headers.jpg     the status line, then one header line a second, never the blank line
    /endless-header.jpg   one header line that never ends (a MiB every 50 ms, up to 256 MiB)
    /broken-chunked.jpg   Transfer-Encoding: chunked with a chunk size that is not hex
    /empty.jpg            200 image/jpeg, Content-Length: 0
    /truncated.jpg        the first 60 % of a real JPEG, with a matching Content-Length
    /truncated-tail.jpg   a real JPEG without its last 3 bytes (the end-of-image marker and a byte of scan data)
    /huge.png             a valid PNG that declares 100,000 x 100,000 pixels
    /image.svg            an SVG served as image/svg+xml
    /garbage-status.jpg   "HTTP/1.1 abc" as the status line
    /close-at-once.jpg    accepts, reads the request, closes without a byte
    /huge-length.jpg      Content-Length: 1 TB, then a few bytes and close
    /ok.jpg               a small real JPEG (for link-local tests through another address)
"""
import gzip
import socket
import struct
import threading
import time
import zlib

TINY_JPEG = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb0043000302020302020303030304030304050805050404050a07070608"
    "0c0a0c0c0b0a0b0b0d0e12100d0e110e0b0b1016101113141515150c0f171816141812141514ffdb004301030404050405090505"
    "09140d0b0d1414141414141414141414141414141414141414141414141414141414141414141414141414141414141414141414"
    "141414ffc00011080008000803011100021101031101ffc40014000100000000000000000000000000000007ffc4001410010000"
    "0000000000000000000000000000ffc4001501010100000000000000000000000000000708ffc40014110100000000000000000000"
    "000000000000ffda000c03010002110311003f002f540247ffd9")


def big_jpeg(comment_bytes=20000):
    payload = bytes((i * 7) & 0xFF for i in range(comment_bytes))
    return TINY_JPEG[:2] + b"\xff\xfe" + struct.pack(">H", len(payload) + 2) + payload + TINY_JPEG[2:]


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def huge_png(width=100_000, height=100_000):
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    # One compressed row of zeros is enough to look like a real file; the rest is never read.
    idat = zlib.compress(b"\x00" * (1 + width * 3), 9)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


SVG = (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64">'
       b'<rect width="64" height="64" fill="red"/></svg>\n')


_bomb = []


def bomb():
    """64 MiB of zeros, gzip-compressed (made once)."""
    if not _bomb:
        _bomb.append(gzip.compress(b"\x00" * (64 << 20), 6))
    return _bomb[0]


class HostileServer:
    def __init__(self, host="127.0.0.1"):
        if ":" in host:  # an IPv6 address on lo (link-local ones need the zone)
            self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((host, 0, 0, socket.if_nametoindex("lo")))
            self.base_host = f"[{host}%25lo]"
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((host, 0))
            self.base_host = host
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.base = f"http://{self.base_host}:{self.port}"
        self.stopping = False
        self.requests = []  # paths seen, in order
        self.connections = 0
        self.bomb = bomb()
        self.jpeg = big_jpeg()
        self.png = huge_png()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def url(self, path):
        return self.base + path

    def close(self):
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def serve(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn):
        try:
            conn.settimeout(120)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            path = data.split(b" ", 2)[1].decode("latin-1").split("?")[0]
            self.requests.append(path)
            self.respond(conn, path)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    @staticmethod
    def head(status, ctype, length=None, extra=""):
        lines = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nConnection: close\r\n"
        if length is not None:
            lines += f"Content-Length: {length}\r\n"
        return (lines + extra + "\r\n").encode()

    def respond(self, conn, path):
        send = conn.sendall
        if path == "/gzip-bomb.jpg":
            send(self.head("200 OK", "image/jpeg", len(self.bomb), "Content-Encoding: gzip\r\n") + self.bomb)
        elif path == "/slow-headers.jpg":
            send(b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\n")
            for n in range(600):
                if self.stopping:
                    return
                time.sleep(1)
                send(f"X-Slow-{n}: still coming\r\n".encode())
        elif path == "/endless-header.jpg":
            send(b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nX-Endless: ")
            block = b"a" * (1 << 20)
            for _ in range(256):
                if self.stopping:
                    return
                send(block)
                time.sleep(0.05)
        elif path == "/broken-chunked.jpg":
            send(b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"4\r\n\xff\xd8\xff\xe0\r\nzz-not-hex\r\n" + b"x" * 1000 + b"\r\n")
            time.sleep(0.5)
        elif path == "/empty.jpg":
            send(self.head("200 OK", "image/jpeg", 0))
        elif path == "/truncated.jpg":
            body = self.jpeg[: len(self.jpeg) * 6 // 10]
            send(self.head("200 OK", "image/jpeg", len(body)) + body)
        elif path == "/truncated-tail.jpg":
            body = self.jpeg[:-3]  # into the entropy-coded data: every header is whole, the end is missing
            send(self.head("200 OK", "image/jpeg", len(body)) + body)
        elif path == "/huge.png":
            send(self.head("200 OK", "image/png", len(self.png)) + self.png)
        elif path == "/image.svg":
            send(self.head("200 OK", "image/svg+xml", len(SVG)) + SVG)
        elif path == "/garbage-status.jpg":
            send(b"HTTP/1.1 abc\r\nContent-Length: 4\r\n\r\nabcd")
        elif path == "/close-at-once.jpg":
            pass
        elif path == "/huge-length.jpg":
            send(self.head("200 OK", "image/jpeg", 10 ** 12) + self.jpeg[:100])
        elif path == "/ok.jpg":
            send(self.head("200 OK", "image/jpeg", len(self.jpeg)) + self.jpeg)
        else:
            send(self.head("404 Not Found", "text/plain", 3) + b"no\n")
