"""Helpers shared by the engine_serve_*.py checks (tests/e2e/engine_serve.sh runs them).

Plain standard library on purpose: the raw-socket client here is what the malformed-input and
behaviour checks use, so they see exactly the bytes the server sends (the SDK file uses the OpenAI
SDK instead). Each check prints one TAP-like line, `ok - NAME` or `not ok - NAME: DETAIL`, which the
shell script counts; nothing else in the output starts with "ok - " or "not ok - ".
"""

import json
import os
import re
import socket
import sys
import time
import traceback

# Timeouts are multiplied by this (the shell script sets 4 for the ASan build, which is slower).
SLOW = float(os.environ.get("ENGINE_SERVE_SLOW", "1"))


class Checks:
    """Counts and prints the check lines."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, name):
        self.passed += 1
        print(f"ok - {name}", flush=True)

    def not_ok(self, name, detail):
        self.failed += 1
        detail = " ".join(str(detail).split())  # one line, whatever the detail holds
        print(f"not ok - {name}: {detail[:600]}", flush=True)

    def check(self, name, cond, detail=""):
        """Records `cond` as one check; returns it so callers can skip dependent work."""
        if cond:
            self.ok(name)
        else:
            self.not_ok(name, detail or "condition false")
        return bool(cond)

    def run(self, name, fn, *args):
        """Runs fn(*args), which does its own check() calls; an exception is one failed check."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - any failure of a check group is reported, not fatal
            tb = traceback.format_exc().strip().splitlines()
            self.not_ok(name, f"{type(e).__name__}: {e} ({tb[-3].strip() if len(tb) > 2 else ''})")


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case name -> value (last one wins)
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<HTTP {self.status} {self.body[:300]!r}>"


def _dechunk(data):
    """Decodes a chunked transfer-encoded body; raises ValueError on a malformed one."""
    out = bytearray()
    pos = 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            raise ValueError("chunk size line not terminated")
        size = int(data[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            return bytes(out)
        if pos + size + 2 > len(data) or data[pos + size : pos + size + 2] != b"\r\n":
            raise ValueError("chunk shorter than its size")
        out += data[pos : pos + size]
        pos += size + 2


def parse_response(raw):
    """Parses a whole HTTP/1.x response read until EOF. Returns a Response or raises ValueError."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError(f"no end of headers in {raw[:200]!r}")
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    if not m:
        raise ValueError(f"bad status line {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    elif "content-length" in headers and len(body) != int(headers["content-length"]):
        raise ValueError(f"body has {len(body)} bytes, content-length {headers['content-length']}")
    return Response(int(m.group(1)), headers, body)


def read_to_close(s):
    """Everything socket `s` receives until the peer closes it (b"" when nothing came). Raises
    socket.timeout on a stall."""
    chunks = []
    while True:
        b = s.recv(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def response_end(raw):
    """The length of the first complete final response at the start of `raw` (interim 1xx answers
    skipped), or 0 while it is incomplete or framed by the end of the connection. (Not for answers
    to HEAD, whose Content-Length has no body behind it.)"""
    pos = 0
    while True:
        end = raw.find(b"\r\n\r\n", pos)
        if end < 0:
            return 0
        head = raw[pos:end].decode("latin-1").lower()
        if not re.match(r"http/1\.[01] 1\d\d", head):
            break
        pos = end + 4
    body = end + 4
    if re.match(r"http/1\.[01] (204|304)", head):
        return body
    if re.search(r"\ntransfer-encoding:[^\n]*chunked", head):
        while True:
            eol = raw.find(b"\r\n", body)
            if eol < 0:
                return 0
            try:
                size = int(raw[body:eol].split(b";")[0], 16)
            except ValueError:
                return 0
            body = eol + 2
            if size == 0:
                return body + 2 if raw[body : body + 2] == b"\r\n" else 0
            body += size + 2
            if body > len(raw):
                return 0
    m = re.search(r"\ncontent-length:\s*(\d+)", head)
    if m is None:
        return 0
    n = body + int(m.group(1))
    return n if len(raw) >= n else 0


def raw_exchange(port, data, timeout=10.0):
    """Sends `data` on a new connection and reads one response: until the server closes the
    connection, or until a complete response has arrived (the server keeps connections alive).
    Returns the bytes received (b"" when the server closed without answering). Raises
    socket.timeout on a stall."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout * SLOW) as s:
        s.sendall(data)
        got = b""
        while True:
            b = s.recv(65536)
            if not b:
                return got
            got += b
            if response_end(got):
                return got


def request(port, method, path, body=None, headers=None, timeout=30.0):
    """One HTTP request (body: bytes, str or a JSON-able object). Returns a Response."""
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body is not None:
        lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(body)}")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")
    return parse_response(raw_exchange(port, data, timeout))


def post(port, path, obj, timeout=30.0):
    return request(port, "POST", path, obj, timeout=timeout)


def sse_events(body):
    """The data payloads of an SSE body, in order (the "[DONE]" sentinel included verbatim)."""
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        data = [ln[5:].lstrip(" ") for ln in block.split("\n") if ln.startswith("data:")]
        if data:
            events.append("\n".join(data))
    return events


def stream_result(resp):
    """Folds a streamed completion/chat response into {"texts": {index: text}, "finish":
    {index: reason}, "usage": obj|None, "done": bool, "chunks": [obj]}. Raises on malformed events."""
    if resp.status != 200:
        raise ValueError(f"stream status {resp.status}: {resp.body[:300]!r}")
    out = {"texts": {}, "finish": {}, "usage": None, "done": False, "chunks": []}
    for ev in sse_events(resp.body):
        if ev == "[DONE]":
            out["done"] = True
            continue
        if out["done"]:
            raise ValueError("event after [DONE]")
        obj = json.loads(ev)
        out["chunks"].append(obj)
        if obj.get("usage"):
            out["usage"] = obj["usage"]
        for c in obj["choices"]:
            i = c["index"]
            piece = c.get("text")
            if piece is None:
                piece = (c.get("delta") or {}).get("content") or ""
            out["texts"][i] = out["texts"].get(i, "") + piece
            if c.get("finish_reason"):
                out["finish"][i] = c["finish_reason"]
    return out


def completion_text(port, body, timeout=60.0):
    """Greedy helper: POST /v1/completions (streamed when body says so); returns (text, finish)."""
    resp = post(port, "/v1/completions", body, timeout)
    if body.get("stream"):
        r = stream_result(resp)
        if not r["done"]:
            raise ValueError("stream without [DONE]")
        return r["texts"].get(0, ""), r["finish"].get(0)
    if resp.status != 200:
        raise ValueError(f"status {resp.status}: {resp.body[:300]!r}")
    c = resp.json()["choices"][0]
    return c["text"], c["finish_reason"]


# ---- Prometheus text exposition format ----

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE_RE = re.compile(
    rf"^({_NAME})(\{{(?:{_LABEL}(?:,{_LABEL})*,?)?\}})? "
    r"([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))( -?[0-9]+)?$"
)
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class Metrics:
    """A parsed /metrics page: samples[(name, frozenset(labels.items()))] = value, plus the HELP
    and TYPE of each family. parse() raises ValueError naming the first invalid line."""

    def __init__(self, text):
        self.samples = {}
        self.help = {}
        self.type = {}
        self.families_of_samples = set()
        for n, line in enumerate(text.split("\n"), 1):
            if line == "":
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    if not re.fullmatch(_NAME, parts[2]):
                        raise ValueError(f"line {n}: bad metric name in {line!r}")
                    if parts[1] == "HELP":
                        self.help[parts[2]] = parts[3] if len(parts) > 3 else ""
                    else:
                        if len(parts) != 4 or parts[3] not in _TYPES:
                            raise ValueError(f"line {n}: bad TYPE line {line!r}")
                        if parts[2] in self.type:
                            raise ValueError(f"line {n}: second TYPE for {parts[2]}")
                        self.type[parts[2]] = parts[3]
                continue
            m = _SAMPLE_RE.match(line)
            if not m:
                raise ValueError(f"line {n}: not a valid sample {line!r}")
            labels = frozenset(_LABEL_RE.findall(m.group(2) or ""))
            key = (m.group(1), labels)
            if key in self.samples:
                raise ValueError(f"line {n}: duplicate series {line!r}")
            self.samples[key] = float(m.group(3))
            self.families_of_samples.add(self.family(m.group(1)))

    def family(self, name):
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and self.type.get(base) in ("histogram", "summary"):
                return base
        return name

    def get(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels` (None when there is none)."""
        want = set(labels.items())
        vals = [v for (n, ls), v in self.samples.items() if n == name and want <= set(ls)]
        return sum(vals) if vals else None

    def names(self):
        return {n for (n, _) in self.samples}


def metrics(port):
    resp = request(port, "GET", "/metrics")
    if resp.status != 200:
        raise ValueError(f"/metrics status {resp.status}")
    return Metrics(resp.body.decode("utf-8"))


def wait_metrics(port, pred, timeout=10.0):
    """Polls /metrics until pred(Metrics) holds (the inference thread updates the series just after
    it hands a response over, so a scrape right after a response may not show it yet). Returns the
    last Metrics and whether pred held."""
    deadline = time.monotonic() + timeout * SLOW
    while True:
        m = metrics(port)
        if pred(m):
            return m, True
        if time.monotonic() > deadline:
            return m, False
        time.sleep(0.05)


def quiet_metrics(port, timeout=10.0):
    """/metrics once the engine is idle and its cinfer_* series have stopped changing (two scrapes
    0.2 s apart agree), so that deltas from here count only what comes next."""
    deadline = time.monotonic() + timeout * SLOW
    prev = None
    while True:
        m = metrics(port)
        own = {k: v for k, v in m.samples.items() if k[0].startswith("cinfer_")}
        if prev == own and m.get("cinfer_requests_running") == 0 or time.monotonic() > deadline:
            return m
        prev = own
        time.sleep(0.2)


def wait_idle(port, timeout=20.0):
    """Polls /metrics until no request runs or waits and the KV usage is 0. Returns the last
    Metrics and whether it got there."""
    deadline = time.monotonic() + timeout * SLOW
    while True:
        m = metrics(port)
        idle = (
            m.get("cinfer_requests_running") == 0
            and m.get("cinfer_requests_waiting") == 0
            and m.get("cinfer_kv_cache_usage_ratio") == 0
        )
        if idle or time.monotonic() > deadline:
            return m, idle
        time.sleep(0.1)


def idle_detail(m):
    return (
        f"running={m.get('cinfer_requests_running')} waiting={m.get('cinfer_requests_waiting')} "
        f"kv={m.get('cinfer_kv_cache_usage_ratio')} vllm_running={m.get('vllm:num_requests_running')}"
    )


def error_shape(resp):
    """None when `resp` is an OpenAI-shaped JSON error, else what is wrong with it."""
    if resp.headers.get("content-type", "").split(";")[0] != "application/json":
        return f"content-type {resp.headers.get('content-type')!r}"
    try:
        e = resp.json()["error"]
    except (ValueError, KeyError, TypeError) as ex:
        return f"not an error object ({ex}): {resp.body[:200]!r}"
    if not isinstance(e.get("message"), str) or not e["message"] or not isinstance(e.get("type"), str):
        return f"error without message/type: {e}"
    return None


def metric_names(root):
    """Every engine metric name common/metric_names.h defines, as (native, vllm) name lists (the
    router's names, METRIC_ROUTER_*, are not the engine's)."""
    with open(os.path.join(root, "common", "metric_names.h"), encoding="utf-8") as f:
        text = f.read()
    native, vllm = [], []
    for macro, value in re.findall(r'#define\s+(METRIC_\w+)\s+"([^"]*)"', text):
        if macro.startswith(
            ("METRIC_LABEL_", "METRIC_FINISHED_", "METRIC_TIER_", "METRIC_HELP_", "METRIC_BUCKETS_",
             "METRIC_ROUTER_")
        ):
            continue
        (vllm if macro.startswith("METRIC_VLLM_") else native).append(value)
    return native, vllm


def token_prompt(seed, n):
    """A deterministic token-id prompt of n ids in the stories260K vocabulary (3..511)."""
    x = seed * 2654435761 % 2**32 or 1
    out = []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(3 + x % 509)
    return out


def servers_from_argv(argv):
    """Parses NAME=PORT[:PID] arguments into {name: (port, pid|None)}."""
    out = {}
    for a in argv:
        name, _, rest = a.partition("=")
        port, _, pid = rest.partition(":")
        out[name] = (int(port), int(pid) if pid else None)
    return out


def finish(checks):
    sys.stdout.flush()
    return 0 if checks.failed == 0 else 1
