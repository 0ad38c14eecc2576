"""The HTTP layer under a real engine (run by engine_http.sh).

Usage: engine_http.py main=PORT small=PORT
  main:  default connection limits, --allowed-origins "http://app.example, https://ui.example"
  small: --max-connections 64 --max-connections-per-client 32 --http-header-timeout 3
Prints `ok - NAME` / `not ok - NAME: DETAIL` per check; latencies are printed in the names.
"""

import json
import os
import socket
import sys
import threading
import time

import httpx2
from openai import DefaultHttpxClient, OpenAI

from engine_serve_lib import (
    SLOW,
    Checks,
    error_shape,
    finish,
    parse_response,
    raw_exchange,
    read_to_close,
    response_end,
    servers_from_argv,
)

checks = Checks()
servers = servers_from_argv(sys.argv[1:])
MODEL = os.environ["ENGINE_SERVE_MODEL_NAME"]
MAIN = servers["main"][0]
SMALL = servers["small"][0]
BODY = {"model": MODEL, "prompt": "hello there", "max_tokens": 4, "temperature": 0}


def connect(port, timeout=10.0):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout * SLOW)


def read_response(s, buf=b""):
    """Reads one response from socket `s` (kept open); returns (Response, bytes left over)."""
    while not response_end(buf):
        b = s.recv(65536)
        if not b:
            break
        buf += b
    n = response_end(buf) or len(buf)
    return parse_response(buf[:n]), buf[n:]


def completion_request(body=BODY, extra=b"", version=b"1.1"):
    data = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/" + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra + b"Content-Length: %d\r\n\r\n" % len(data) + data)


# ---- keep-alive with the official SDK ----


def test_sdk_keep_alive():
    ports = []

    def on_response(resp):
        stream = resp.extensions.get("network_stream")
        ports.append(stream.get_extra_info("client_addr")[1] if stream else None)

    http = DefaultHttpxClient(event_hooks={"response": [on_response]})
    client = OpenAI(base_url=f"http://127.0.0.1:{MAIN}/v1", api_key="x", max_retries=0,
                    timeout=60 * SLOW, http_client=http)
    t0 = time.monotonic()
    texts = []
    for i in range(8):
        r = client.completions.create(model=MODEL, prompt=f"story {i}", max_tokens=4, temperature=0)
        texts.append(r.choices[0].text)
    chunks = list(client.completions.create(model=MODEL, prompt="stream", max_tokens=4, temperature=0,
                                            stream=True))
    models = client.models.list()
    dt = time.monotonic() - t0
    checks.check(f"SDK: 8 completions, a stream and models.list on keep-alive ({dt * 1000:.0f} ms)",
                 len(texts) == 8 and chunks and [m.id for m in models.data] == [MODEL], f"{texts} {chunks}")
    # The SDK closes a stream's response as soon as it reads [DONE] (before the terminating chunk), so
    # httpx may open a new connection after a stream; everything else must reuse the first one.
    checks.check(f"SDK: 8 completions reused one connection (client ports of all 10 requests: {ports})",
                 len(ports) == 10 and None not in ports and len(set(ports[:9])) == 1
                 and len(set(ports)) <= 2, f"{ports}")
    http.close()


# ---- protocol details on the engine's routes ----


def test_protocol():
    # Two completions and a /health pipelined in one write: answered in order on one connection.
    s = connect(MAIN)
    s.sendall(completion_request(dict(BODY, prompt="first")) + completion_request(dict(BODY, prompt="second"))
              + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    r1, rest = read_response(s)
    r2, rest = read_response(s, rest)
    r3, rest = read_response(s, rest)
    s.close()
    checks.check("pipelined: two completions and /health answered in order on one connection",
                 r1.status == 200 and r2.status == 200 and r3.status == 200
                 and r1.json()["id"] != r2.json()["id"] and b"ok" in r3.body, f"{r1} {r2} {r3}")

    # Expect: 100-continue: the interim answer, then the completion.
    s = connect(MAIN)
    data = json.dumps(BODY).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n" % len(data))
    first = s.recv(4096)
    s.sendall(data)
    resp, _ = read_response(s)
    s.close()
    checks.check("Expect: 100-continue answered before the body is sent",
                 first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n") and resp.status == 200, f"{first!r} {resp}")

    # HTTP/1.0: a streamed completion is not chunked; the end of the connection frames it.
    raw = raw_exchange(MAIN, completion_request(dict(BODY, stream=True), version=b"1.0"), 60)
    head = raw.partition(b"\r\n\r\n")[0].lower()
    checks.check("HTTP/1.0: a streamed completion is framed by the close, not chunked",
                 raw.startswith(b"HTTP/1.1 200") and b"chunked" not in head and raw.endswith(b"data: [DONE]\n\n"),
                 f"{raw[:300]!r}")

    # A chunked request body is decoded.
    data = json.dumps(BODY).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % 7 + data[:7] + b"\r\n"
           + b"%x\r\n" % (len(data) - 7) + data[7:] + b"\r\n0\r\n\r\n")
    resp = parse_response(raw_exchange(MAIN, req, 60))
    checks.check("chunked request body decoded and served", resp.status == 200 and resp.json()["choices"],
                 repr(resp))

    # Malformed heads get the OpenAI error shape; odd but valid ones are served.
    for name, data, status in [
        ("GET /%zz", b"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("NUL in a header", b"GET /health HTTP/1.1\r\nAuthorization: Bearer k\x00junk\r\n\r\n", 400),
        ("unknown method", b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
        ("TLS ClientHello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),
        ("head cut by a half-close", None, 400),
    ]:
        if data is None:
            s = connect(MAIN)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            s.shutdown(socket.SHUT_WR)
            raw = read_to_close(s)
            s.close()
        else:
            raw = raw_exchange(MAIN, data)
        try:
            resp = parse_response(raw)
            shape = error_shape(resp)
            checks.check(f"malformed: {name} -> {status} with a JSON error", resp.status == status and shape is None,
                         f"{resp} {shape}")
        except ValueError as e:
            checks.not_ok(f"malformed: {name} -> {status} with a JSON error", f"{e}: {raw[:100]!r}")
    for name, data, status in [
        ("absolute-form target", b"GET http://x/health HTTP/1.1\r\nHost: x\r\n\r\n", 200),
        ("OPTIONS *", b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 204),
        ("stray CRLF before a request", b"\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n", 200),
    ]:
        resp = parse_response(raw_exchange(MAIN, data))
        checks.check(f"odd but valid: {name} -> {status}", resp.status == status, repr(resp))
    raw = raw_exchange(MAIN, b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    checks.check("odd but valid: HEAD /health -> 200 with the GET answer's length and no body",
                 raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"\r\n\r\n") and b"Content-Length: 15" in raw,
                 f"{raw!r}")
    # Half-closed after a whole request: still answered.
    s = connect(MAIN)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    s.shutdown(socket.SHUT_WR)
    resp = parse_response(read_to_close(s))
    s.close()
    checks.check("a client that half-closes after its request gets the answer", resp.status == 200, repr(resp))


def test_cors():
    pre = (b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: https://ui.example\r\n"
           b"Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n\r\n")
    resp = parse_response(raw_exchange(MAIN, pre))
    checks.check("CORS: preflight from an allowed origin is granted",
                 resp.status == 204 and resp.headers.get("access-control-allow-origin") == "https://ui.example"
                 and "POST" in resp.headers.get("access-control-allow-methods", "")
                 and resp.headers.get("access-control-allow-headers") == "authorization, content-type",
                 f"{resp.status} {resp.headers}")
    resp = parse_response(raw_exchange(MAIN, completion_request(extra=b"Origin: http://app.example\r\n"), 60))
    checks.check("CORS: a completion from an allowed origin carries Access-Control-Allow-Origin",
                 resp.status == 200 and resp.headers.get("access-control-allow-origin") == "http://app.example",
                 f"{resp.status} {resp.headers}")
    resp = parse_response(raw_exchange(MAIN, completion_request(extra=b"Origin: http://evil.example\r\n"), 60))
    checks.check("CORS: another origin gets no Access-Control-Allow-Origin",
                 resp.status == 200 and "access-control-allow-origin" not in resp.headers, f"{resp.headers}")
    resp = parse_response(raw_exchange(SMALL, pre))
    checks.check("CORS: without --allowed-origins a preflight is not granted (default none)",
                 resp.status == 204 and "access-control-allow-origin" not in resp.headers, f"{resp.headers}")


# ---- the denial-of-service shapes of issue 24 ----


def hold_attack(port, n_upgrade, n_heads):
    """Opens n_upgrade connections that each send a WebSocket or h2c upgrade request and then sit
    idle, and n_heads that send half a request head and stall. Returns (sockets, statuses of the
    upgrade answers)."""
    socks, statuses = [], []
    for i in range(n_upgrade):
        try:
            s = connect(port)
            if i % 2:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            else:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                          b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
            socks.append(s)
        except OSError:
            statuses.append(None)
    for s in socks:
        try:
            s.settimeout(10 * SLOW)
            head = s.recv(64)
            statuses.append(int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else head[:20])
        except OSError as e:
            statuses.append(type(e).__name__)
    for _ in range(n_heads):
        try:
            s = connect(port)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: ")
            socks.append(s)
        except OSError:
            pass
    return socks, statuses


def timed(fn):
    t0 = time.monotonic()
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - reported as the failure
        out = e
    return out, time.monotonic() - t0


def health(port):
    return parse_response(raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 10)).status


def completion(port):
    resp = parse_response(raw_exchange(port, completion_request(), 30))
    return resp.status


def test_attack(port, label):
    socks, statuses = hold_attack(port, 300, 300)
    no101 = all(st != 101 for st in statuses)
    checks.check(f"{label}: 300 upgrade attempts (WebSocket, h2c) never get 101 "
                 f"(statuses {sorted(set(map(str, statuses)))})", no101 and len(statuses) == 300, f"{statuses[:10]}")
    lat_h, lat_c = [], []
    ok = True
    for _ in range(5):
        st, dt = timed(lambda: health(port))
        lat_h.append(dt)
        ok = ok and st == 200
        st2, dt2 = timed(lambda: completion(port))
        lat_c.append(dt2)
        ok = ok and st2 == 200
    checks.check(f"{label}: /health and a completion answer while 300 upgraded and 300 unfinished connections "
                 f"are held (/health max {max(lat_h) * 1000:.1f} ms, completion max {max(lat_c) * 1000:.1f} ms)",
                 ok and max(lat_h) < 10 * SLOW and max(lat_c) < 30 * SLOW, f"health {lat_h} completion {lat_c}")
    return socks


def test_attacks():
    socks = test_attack(MAIN, "default limits")
    for s in socks:
        s.close()
    time.sleep(0.5)
    socks = test_attack(SMALL, "small limits (64, 32 per client: new connections evict idle ones)")
    # The unfinished heads still open end with 408 (header timeout 3 s) or were closed to make room.
    time.sleep(4)
    answers = {}
    for s in socks[-20:]:
        try:
            s.settimeout(5 * SLOW)
            b = s.recv(64)
            key = b[9:12].decode() if b.startswith(b"HTTP/1.1 ") else ("closed" if not b else repr(b[:12]))
        except OSError as e:
            key = type(e).__name__
        answers[key] = answers.get(key, 0) + 1
    checks.check(f"small limits: unfinished heads are answered 408/503 or closed, never left hanging ({answers})",
                 set(answers) <= {"408", "503", "closed", "ConnectionResetError"}, f"{answers}")
    for s in socks:
        s.close()
    st, dt = timed(lambda: health(SMALL))
    checks.check(f"small limits: /health after the attack ({dt * 1000:.1f} ms)", st == 200, f"{st}")


# ---- a keep-alive soak with disconnects (the ASan soak under `make asan`) ----


def soak_client(seed, stats):
    import random
    import struct

    rng = random.Random(seed)
    s, buf = None, b""
    for _ in range(150):
        if s is None:
            s, buf = connect(MAIN, 30), b""
        act = rng.randrange(6)
        try:
            if act == 0:  # a completion, streamed or not, on the kept connection
                s.sendall(completion_request(dict(BODY, stream=rng.random() < 0.5, max_tokens=rng.randrange(1, 12))))
                r, buf = read_response(s, buf)
                stats["ok" if r.status == 200 else f"status {r.status}"] += 1
            elif act == 1:  # two pipelined probes
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /live HTTP/1.1\r\nHost: x\r\n\r\n")
                r1, buf = read_response(s, buf)
                r2, buf = read_response(s, buf)
                stats["ok" if (r1.status, r2.status) == (200, 200) else f"probe {r1.status}/{r2.status}"] += 1
            elif act == 2:  # leaves in the middle of a stream
                s.sendall(completion_request(dict(BODY, stream=True, max_tokens=64)))
                while b"data: " not in buf:
                    b = s.recv(4096)
                    if not b:
                        break
                    buf += b
                s.close()
                s = None
                stats["left mid-stream"] += 1
            elif act == 3:  # resets with half a body sent
                s.sendall(completion_request()[:-3])
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
                s = None
                stats["reset mid-body"] += 1
            elif act == 4:  # garbage: an error answer and the close
                s.sendall(b"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n")
                r, buf = read_response(s, buf)
                stats["ok" if r.status == 400 else f"garbage {r.status}"] += 1
                s.close()
                s = None
            else:  # says Connection: close
                s.sendall(completion_request(extra=b"Connection: close\r\n"))
                r, buf = read_response(s, buf)
                stats["ok" if r.status == 200 else f"status {r.status}"] += 1
                s.close()
                s = None
        except (OSError, ValueError) as e:
            stats[f"error {type(e).__name__}"] += 1
            if s is not None:
                s.close()
            s = None
    if s is not None:
        s.close()


def test_soak():
    from collections import Counter

    stats = Counter()
    t0 = time.monotonic()
    threads = [threading.Thread(target=soak_client, args=(i, stats)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.monotonic() - t0
    bad = {k: v for k, v in stats.items() if k not in ("ok", "left mid-stream", "reset mid-body")}
    checks.check(f"soak: 8 keep-alive clients x 150 actions with disconnects in {dt:.1f} s ({dict(stats)})",
                 not bad and stats["ok"] > 400, f"{dict(stats)}")
    # Nothing left running, and the server still answers.
    deadline = time.monotonic() + 20 * SLOW
    running = None
    while time.monotonic() < deadline:
        m = parse_response(raw_exchange(MAIN, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")).body.decode()
        running = [ln for ln in m.splitlines() if ln.startswith("cinfer_requests_running")]
        if running and running[0].split()[-1] == "0":
            break
        time.sleep(0.2)
    checks.check(f"soak: no request left running afterwards ({running})",
                 running and running[0].split()[-1] == "0" and health(MAIN) == 200, f"{running}")


checks.run("SDK keep-alive", test_sdk_keep_alive)
checks.run("protocol", test_protocol)
checks.run("CORS", test_cors)
checks.run("soak", test_soak)
checks.run("attacks", test_attacks)
sys.exit(finish(checks))
