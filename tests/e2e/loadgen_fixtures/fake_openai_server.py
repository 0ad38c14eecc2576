#!/usr/bin/env python3
"""A tiny stand-in for `cinfer-engine serve`, for tests/e2e/loadgen_selftest.sh.

POST /v1/completions streams max_tokens SSE chunks (the first after --ttft-ms, the others --chunk-delay-ms
apart) in chunked transfer encoding, then a usage chunk and [DONE], one request per connection. Its prefix
cache counts, for each prompt, the leading --block-sized blocks whose whole prefix an earlier prompt had,
so the hit rate of a workload is known exactly. GET /metrics exposes the engine's counter names.

A request can be told to misbehave by its "seed": --misbehave SEED:MODE (repeatable), MODE one of
  429 | 503   an OpenAI error answer with Retry-After
  drop        close the connection after two content chunks
  stall       send the response head, then nothing
  badchunk    an invalid chunk-size line
  badjson     an SSE event whose data is not JSON
  badstatus   a garbage status line
  errorevent  an SSE error event after one content chunk
  nousage     no usage chunk (the client counts tokens by chunk)

--log PATH appends every completion request body as one JSON line, for checks of what the client sent.
The chosen port is written to --port-file once the server listens. Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

MODES = ("429", "503", "drop", "stall", "badchunk", "badjson", "badstatus", "errorevent", "nousage")


class State:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.misbehave: dict[int, str] = {}
        for spec in args.misbehave:
            seed, _, mode = spec.partition(":")
            self.misbehave[int(seed)] = mode
        self.prefixes: set[tuple[int, ...]] = set()
        self.counters = {"requests": 0, "hits": 0, "queries": 0}

    def cached_tokens(self, prompt: list[int]) -> int:
        """Tokens of the leading full blocks already seen; every block prefix of this prompt is recorded."""
        block = self.args.block
        cached, matching = 0, True
        for end in range(block, len(prompt) + 1, block):
            key = tuple(prompt[:end])
            if matching and key in self.prefixes:
                cached = end
            else:
                matching = False
                self.prefixes.add(key)
        return cached


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj: object) -> bytes:
    return chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


def text_chunk(i: int, finish: str | None = None) -> dict:
    text = "" if finish else f" tok{i}"
    return {"id": "cmpl-fake", "object": "text_completion",
            "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


async def send_error(writer: asyncio.StreamWriter, status: int, etype: str, message: str,
                     retry_after: int | None = None) -> None:
    body = json.dumps({"error": {"message": message, "type": etype, "param": None, "code": None}}).encode()
    reason = {400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 503: "Service Unavailable"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    if retry_after is not None:
        head += f"Retry-After: {retry_after}\r\n"
    writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)


async def stream(state: State, writer: asyncio.StreamWriter, req: dict, mode: str | None) -> None:
    prompt, max_tokens = req["prompt"], req["max_tokens"]
    args = state.args
    if mode == "badstatus":
        writer.write(b"HTTX/9 nonsense\r\n\r\n")
        return
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                 b"Connection: close\r\n\r\n")
    await writer.drain()
    if mode == "stall":
        await asyncio.sleep(3600)
    cached = state.cached_tokens(prompt)
    state.counters["hits"] += cached
    state.counters["queries"] += len(prompt)
    await asyncio.sleep(args.ttft_ms / 1000)
    for i in range(max_tokens):
        if i:
            await asyncio.sleep(args.chunk_delay_ms / 1000)
        if mode == "drop" and i == 2:
            return
        if mode == "errorevent" and i == 1:
            writer.write(sse({"error": {"message": "the model fell over", "type": "server_error"}}))
            return
        if mode == "badjson" and i == 1:
            writer.write(chunk(b"data: {not json\n\n"))
            continue
        if mode == "badchunk" and i == 1:
            writer.write(b"zz\r\n")
            return
        writer.write(sse(text_chunk(i)))
        await writer.drain()
    writer.write(sse(text_chunk(max_tokens, "length")))
    if mode != "nousage":
        usage = {"prompt_tokens": len(prompt), "completion_tokens": max_tokens,
                 "total_tokens": len(prompt) + max_tokens, "prompt_tokens_details": {"cached_tokens": cached}}
        writer.write(sse({"id": "cmpl-fake", "object": "text_completion", "choices": [], "usage": usage}))
    writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


async def completions(state: State, writer: asyncio.StreamWriter, body: bytes) -> None:
    try:
        req = json.loads(body)
        ok = (isinstance(req, dict) and isinstance(req.get("prompt"), list) and req["prompt"]
              and all(isinstance(t, int) for t in req["prompt"]) and isinstance(req.get("max_tokens"), int)
              and req.get("stream") is True)
    except ValueError:
        ok = False
    if not ok:
        await send_error(writer, 400, "invalid_request_error", "expected a streaming token-id request")
        return
    state.counters["requests"] += 1
    if state.args.log:
        with open(state.args.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(req) + "\n")
    mode = state.misbehave.get(req.get("seed"))
    if mode in ("429", "503"):
        etype = "rate_limit_error" if mode == "429" else "server_error"
        await send_error(writer, int(mode), etype, f"fake {mode} for seed {req.get('seed')}", retry_after=1)
        return
    await stream(state, writer, req, mode)


def metrics_text(state: State) -> bytes:
    c = state.counters
    return (
        "# HELP cinfer_requests_total Requests answered.\n# TYPE cinfer_requests_total counter\n"
        f'cinfer_requests_total{{model_name="fake",status="200"}} {c["requests"]}\n'
        "# TYPE cinfer_prefix_cache_hits_total counter\n"
        f'cinfer_prefix_cache_hits_total{{model_name="fake"}} {c["hits"]}\n'
        "# TYPE cinfer_prefix_cache_queries_total counter\n"
        f'cinfer_prefix_cache_queries_total{{model_name="fake"}} {c["queries"]}\n'
        "# TYPE cinfer_preemptions_total counter\n"
        'cinfer_preemptions_total{model_name="fake"} 0\n'
    ).encode()


async def handle(state: State, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, path, _ = head[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        if method == "POST" and path == "/v1/completions":
            await completions(state, writer, body)
        elif method == "GET" and path == "/metrics":
            text = metrics_text(state)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(text), text))
        else:
            await send_error(writer, 404, "not_found_error", f"no route {method} {path}")
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass  # the client went away or sent garbage: nothing to answer
    finally:
        writer.close()


async def serve(args: argparse.Namespace) -> None:
    state = State(args)
    server = await asyncio.start_server(lambda r, w: handle(state, r, w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{port}\n")
    os.replace(tmp, args.port_file)  # the test polls for the file: it must never see it half written
    async with server:
        await server.serve_forever()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log")
    p.add_argument("--ttft-ms", type=float, default=5.0)
    p.add_argument("--chunk-delay-ms", type=float, default=2.0)
    p.add_argument("--block", type=int, default=16)
    p.add_argument("--misbehave", action="append", default=[], metavar="SEED:MODE")
    args = p.parse_args()
    for spec in args.misbehave:
        seed, _, mode = spec.partition(":")
        if not seed.isdigit() or mode not in MODES:
            p.error(f"--misbehave {spec!r}: expected SEED:MODE with MODE in {', '.join(MODES)}")
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
