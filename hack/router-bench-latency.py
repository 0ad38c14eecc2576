#!/usr/bin/env python3
"""Latency of one request at a time to a server, in microseconds (hack/router-bench.sh runs it to
compare the trivial upstream reached directly with the same upstream behind cinfer-router).

Usage: router-bench-latency.py ROUNDS N BODY_FILE PATH NAME=PORT...
Each round sends N requests to every NAME in turn (one connection per request, as the servers
close after each answer unless keep-alive is negotiated; the answer is read to its end) and prints,
per NAME, p50/p90/p99/p99.9 over all rounds, plus the differences to the first NAME.
"""

import socket
import sys
import time


def one(port, head, body):
    t0 = time.perf_counter_ns()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(head + body)
        buf = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            buf += b
    t = time.perf_counter_ns() - t0
    if not buf.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"port {port}: {buf[:200]!r}")
    return t / 1000.0


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    rounds, n, body_file, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    targets = [(a.split("=")[0], int(a.split("=")[1])) for a in sys.argv[5:]]
    body = open(body_file, "rb").read()
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    lat = {name: [] for name, _ in targets}
    for _ in range(rounds):
        for name, port in targets:
            for _ in range(20):  # warm caches and the connection paths
                one(port, head, body)
            lat[name] += [one(port, head, body) for _ in range(n)]
    base = None
    for name, _ in targets:
        p = [pct(lat[name], q) for q in (0.5, 0.9, 0.99, 0.999)]
        line = f"{name:>10}: p50 {p[0]:8.1f} us  p90 {p[1]:8.1f}  p99 {p[2]:8.1f}  p99.9 {p[3]:8.1f}  (n={len(lat[name])})"
        if base is None:
            base = p
        else:
            line += f"   added: p50 {p[0] - base[0]:+.1f} us  p99 {p[2] - base[2]:+.1f} us"
        print(line, flush=True)


main()
