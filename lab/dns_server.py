#!/usr/bin/env python3
"""A tiny DNS resolver for the network lab (stress group `network`, issue 20): run it in the server namespace and
point the client namespace's /etc/netns/<name>-client/resolv.conf at it.

    python3 lab/dns_server.py --bind 10.77.0.2 --control DIR/dns.sock --log DIR/dns.jsonl dns.lab=10.77.0.2 ...

It answers A queries for the names given (NAME=IPv4, TTL 1 s), NODATA for their other types, and NXDOMAIN for
every other name. Each query is one JSON line in --log: {"t": Unix seconds, "name", "type", "answer"}.

Its control socket (a file, reachable from any namespace) takes one line and answers "ok ...":

    answer     serve as above (the start)
    drop       read and log every query, answer none: a resolver that is down (clients time out)
    servfail   answer SERVFAIL to everything

Python standard library only; UDP only (the lab's answers are small).
"""

import argparse
import json
import os
import socket
import struct
import sys
import threading
import time

TYPES = {1: "A", 28: "AAAA", 5: "CNAME", 15: "MX", 16: "TXT", 33: "SRV", 65: "HTTPS"}
NOERROR, SERVFAIL, NXDOMAIN = 0, 2, 3


def parse_question(packet):
    """(id, flags, name, qtype, end of the question) of a query; ValueError when it is not one."""
    if len(packet) < 12:
        raise ValueError("shorter than a DNS header")
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if flags & 0x8000 or qdcount != 1:
        raise ValueError("not a query with one question")
    labels, offset = [], 12
    while True:
        if offset >= len(packet):
            raise ValueError("name runs past the packet")
        length = packet[offset]
        offset += 1
        if length == 0:
            break
        if length > 63 or offset + length > len(packet):
            raise ValueError("bad label")
        labels.append(packet[offset:offset + length].decode("ascii", "replace").lower())
        offset += length
    if offset + 4 > len(packet):
        raise ValueError("no type and class")
    qtype, _ = struct.unpack("!HH", packet[offset:offset + 4])
    return ident, flags, ".".join(labels), qtype, offset + 4


def reply(packet, records, mode):
    """The answer to `packet` and what it said, or (None, "dropped")."""
    ident, flags, name, qtype, end = parse_question(packet)
    if mode == "drop":
        return None, name, qtype, "dropped"
    question = packet[12:end]
    if mode == "servfail":
        rcode, answers = SERVFAIL, []
    elif name not in records:
        rcode, answers = NXDOMAIN, []
    elif qtype == 1:
        rcode, answers = NOERROR, [socket.inet_aton(records[name])]
    else:
        rcode, answers = NOERROR, []  # NODATA: the name exists, not with this type
    header = struct.pack("!HHHHHH", ident, 0x8000 | (flags & 0x7900) | 0x0080 | rcode, 1, len(answers), 0, 0)
    body = b"".join(struct.pack("!HHHIH", 0xC00C, 1, 1, 1, 4) + address for address in answers)
    said = {NOERROR: "NOERROR", SERVFAIL: "SERVFAIL", NXDOMAIN: "NXDOMAIN"}[rcode]
    if answers:
        said += " " + records[name]
    return header + question + body, name, qtype, said


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bind", required=True, help="the address to listen on (UDP port 53 unless --port)")
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--control", required=True, help="the control socket's path")
    parser.add_argument("--log", required=True, help="one JSON line per query")
    parser.add_argument("records", nargs="*", metavar="NAME=IPV4")
    args = parser.parse_args()
    records = {}
    for record in args.records:
        name, _, address = record.partition("=")
        socket.inet_aton(address)  # an IPv4 address, or this fails at start
        records[name.lower().rstrip(".")] = address
    state = {"mode": "answer"}
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind((args.bind, args.port))
    try:
        os.unlink(args.control)
    except FileNotFoundError:
        pass
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.bind(args.control)
    control.listen(8)

    def serve_control():
        while True:
            connection, _ = control.accept()
            with connection:
                line = connection.makefile("rb").readline().decode().strip()
                if line in ("answer", "drop", "servfail"):
                    state["mode"] = line
                    connection.sendall(b"ok mode %s\n" % line.encode())
                else:
                    connection.sendall(b"error: answer, drop or servfail, not %r\n" % line.encode())

    threading.Thread(target=serve_control, daemon=True).start()
    print("dns: listening on %s:%d, %d names" % (args.bind, args.port, len(records)), flush=True)
    with open(args.log, "a", buffering=1) as log:
        while True:
            packet, peer = server.recvfrom(4096)
            try:
                answer, name, qtype, said = reply(packet, records, state["mode"])
            except ValueError as error:
                log.write(json.dumps({"t": time.time(), "error": str(error)}) + "\n")
                continue
            log.write(json.dumps({"t": time.time(), "name": name, "type": TYPES.get(qtype, str(qtype)),
                                  "answer": said}) + "\n")
            if answer is not None:
                server.sendto(answer, peer)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
