"""Behaviour of `cinfer-engine serve` seen from raw HTTP clients (run by engine_serve.sh).

Usage: engine_serve_behaviour.py SECTION NAME=PORT[:PID]...
Sections (the servers each needs and the flags engine_serve.sh gives them):
  metrics           main, nocompat (--metrics-compat none --spec ngram)
  greedy            main (outputs vs `cinfer-engine generate`)
  concurrency       main (64 concurrent streams vs the same requests one at a time)
  prefix            main, nocache (--no-prefix-caching)
  preemption        preempt (--kv-cache-bytes for 1.5 contexts of 256 tokens)
  speculation       main, ngram (--spec ngram --ngram-pool-bytes 1M), draft (--speculative draft
                    with the model's Q8_0 copy, --kv-cache-bytes for 1.5 contexts in each pool),
                    both --no-spec-adaptive
  disconnect        main, queue (--max-num-seqs 1 --max-queue 1)
  malformed         bad (--max-body-bytes 65536)
  sigterm           drain:PID (the script reaps it and checks the exit status)
  shutdown_timeout  cut:PID (--shutdown-timeout 1)
Prints `ok - NAME` / `not ok - NAME: DETAIL` per check.
"""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from engine_serve_lib import (
    SLOW,
    Checks,
    completion_text,
    error_shape,
    finish,
    idle_detail,
    metric_names,
    metrics,
    post,
    quiet_metrics,
    raw_exchange,
    read_to_close,
    parse_response,
    request,
    servers_from_argv,
    stream_result,
    token_prompt,
    wait_idle,
    wait_metrics,
)

checks = Checks()
MODEL = os.environ["ENGINE_SERVE_MODEL_NAME"]

PROMPTS = [
    "Once upon a time",
    "The little dog",
    "Lily and Tom went to the park",
    "One day, a big bird",
    "The sun was hot and",
    "Sam had a red ball.",
    "In the forest there lived",
    "Mom said",
]


def run_parallel(fn, items):
    """fn(item) for every item on its own thread; returns the results in order (an exception is
    returned in place of its result)."""
    results = [None] * len(items)

    def one(i, item):
        try:
            results[i] = fn(item)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            results[i] = e

    threads = [threading.Thread(target=one, args=(i, it)) for i, it in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def check_idle(port, what):
    m, idle = wait_idle(port)
    checks.check(
        f"{what}: afterwards no request running or waiting and KV usage 0 (native and vLLM names)",
        idle and m.get("vllm:num_requests_running") == 0 and m.get("vllm:kv_cache_usage_perc") == 0,
        idle_detail(m),
    )
    return m


# ---- 9. /metrics ----


def section_metrics(s):
    native, vllm = metric_names(os.environ["ENGINE_SERVE_ROOT"])
    checks.check("metric_names.h lists native and vLLM names", len(native) >= 10 and len(vllm) >= 10,
                 f"{native} {vllm}")
    for name, port, want_vllm in (("vllm", s["main"][0], True), ("none", s["nocompat"][0], False)):
        text = request(port, "GET", "/metrics").body.decode("utf-8")
        try:
            m = metrics(port)
        except ValueError as e:
            checks.not_ok(f"--metrics-compat {name}: /metrics is valid exposition format", e)
            continue
        checks.ok(f"--metrics-compat {name}: /metrics is valid exposition format")
        bare = sorted(f for f in m.families_of_samples if f not in m.help or f not in m.type)
        checks.check(f"--metrics-compat {name}: every family has HELP and TYPE", not bare, f"missing for {bare}")
        hist_bad = []
        for fam in (f for f, t in m.type.items() if t == "histogram"):
            series = {}
            for (n, ls), v in m.samples.items():
                if n == fam + "_bucket":
                    d = dict(ls)
                    le = d.pop("le")
                    series.setdefault(frozenset(d.items()), []).append((float(le), v))
            for labels, buckets in series.items():
                buckets.sort()
                counts = [v for _, v in buckets]
                total = m.samples.get((fam + "_count", labels))
                if buckets[-1][0] != float("inf") or counts != sorted(counts) or counts[-1] != total:
                    hist_bad.append((fam, dict(labels), buckets[-3:], total))
        checks.check(f"--metrics-compat {name}: histogram buckets cumulative, +Inf bucket == _count",
                     not hist_bad, f"{hist_bad[:2]}")
        # Speculative decoding's series exist only with --spec (the nocompat server runs ngram).
        spec_on = not want_vllm
        want = [n for n in native if spec_on or "spec_decode" not in n]
        missing = [n for n in want if n not in m.type]
        checks.check(f"--metrics-compat {name}: every native metric present", not missing, f"missing {missing}")
        extra = [n for n in native if n not in want and n in m.type]
        checks.check(f"--metrics-compat {name}: spec_decode series only with --spec", not extra, f"{extra}")
        vnames = sorted({n for n in list(m.type) + list(m.help) + list(m.names()) if n.startswith("vllm:")})
        if want_vllm:
            missing = [n for n in vllm if n not in m.type and "spec_decode" not in n]
            checks.check("--metrics-compat vllm: every vLLM twin present", not missing, f"missing {missing}")
            checks.check(
                "--metrics-compat vllm: twins have the same values",
                m.get("vllm:num_requests_running") == m.get("cinfer_requests_running")
                and m.get("vllm:prompt_tokens_total") == m.get("cinfer_prompt_tokens_total"),
                "values differ",
            )
            checks.check(
                "/metrics: requests_total has stop, length and abort series with the model_name label",
                all(
                    m.get("cinfer_requests_total", model_name=MODEL, finished_reason=r) is not None
                    for r in ("stop", "length", "abort")
                ),
                text[:200],
            )
        else:
            checks.check("--metrics-compat none: no vllm: name anywhere", not vnames and "vllm:" not in text,
                         f"{vnames}")


# ---- 2. greedy outputs equal `cinfer-engine generate` ----


def section_greedy(s):
    port = s["main"][0]
    binary, model = os.environ["ENGINE_SERVE_BIN"], os.environ["ENGINE_SERVE_MODEL"]
    for i, (prompt, n) in enumerate(zip(PROMPTS[:5], (40, 25, 60, 33, 50))):
        gen = subprocess.run(
            [binary, "generate", "--model", model, "--prompt", prompt, "--max-tokens", str(n), "--temperature", "0",
             "--threads", "1", "--log-format", "text"],
            capture_output=True,
            timeout=60 * SLOW,
        )
        if gen.returncode != 0:
            checks.not_ok(f"greedy p{i}: generate ran", gen.stderr.decode(errors="replace")[-300:])
            continue
        want = gen.stdout.decode("utf-8")
        text, fin = completion_text(port, {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0})
        checks.check(f"greedy p{i} ({n} tokens): HTTP text == generate", text == want and fin == "length",
                     f"http {text!r} ({fin}) vs generate {want!r}")
        text, fin = completion_text(
            port, {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True}
        )
        checks.check(f"greedy p{i} streamed: text == generate", text == want, f"http {text!r} vs {want!r}")


# ---- 3. 64 concurrent streams ----


def stream_body(i):
    """Request i of the concurrency test: every third one a chat request, the rest completions."""
    body = {
        "model": MODEL,
        "max_tokens": 6 + (i * 7) % 30,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    text = PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS) % 2) + ("and" if i >= 32 else "")
    if i % 3 == 2:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return body


def stream_one(port, body, timeout=120.0):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    r = stream_result(post(port, path, body, timeout))
    if not r["done"]:
        raise ValueError("no [DONE]")
    return r["texts"].get(0, ""), r["finish"].get(0), (r["usage"] or {}).get("completion_tokens")


def section_concurrency(s):
    # "lanes=PORT": a random-weight model, which may sample EOS; ignore_eos keeps every request to
    # its max_tokens, as the checks below expect.
    port = s["main"][0] if "main" in s else s["lanes"][0]
    bodies = [stream_body(i) for i in range(64)]
    if "lanes" in s:
        for b in bodies:
            b["ignore_eos"] = True
    alone = [stream_one(port, b) for b in bodies]
    m0 = quiet_metrics(port)
    together = run_parallel(lambda b: stream_one(port, b), bodies)
    errors = [r for r in together if isinstance(r, Exception)]
    checks.check("64 concurrent streams: all complete with [DONE]", not errors, f"{len(errors)} failed: {errors[:3]}")
    diff = [i for i, (a, t) in enumerate(zip(alone, together)) if a != t]
    checks.check(
        "64 concurrent streams: every output identical to the same request alone",
        not diff,
        f"{len(diff)} differ, first #{diff[0] if diff else ''}: "
        f"{alone[diff[0]] if diff else ''} vs {together[diff[0]] if diff else ''}",
    )
    lengths_ok = all(a[1] == "length" and a[2] == b["max_tokens"] for a, b in zip(alone, bodies))
    checks.check("streams: finish_reason length and usage.completion_tokens == max_tokens", lengths_ok,
                 f"{[(a[1], a[2], b['max_tokens']) for a, b in zip(alone, bodies)][:5]}")
    check_idle(port, "64 concurrent streams")
    gen = sum(b["max_tokens"] for b in bodies)
    want = {"generation_tokens": gen, "length": 64, "abort": 0, "e2e_count": 64, "ttft_count": 64,
            "queue_count": 64, "itl_count": gen - 64}

    def accounted(m1):
        def delta(name, **labels):
            return m1.get(name, **labels) - m0.get(name, **labels)

        return {
            "generation_tokens": delta("cinfer_generation_tokens_total"),
            "length": delta("cinfer_requests_total", finished_reason="length"),
            "abort": delta("cinfer_requests_total", finished_reason="abort"),
            "e2e_count": delta("cinfer_e2e_request_latency_seconds_count"),
            "ttft_count": delta("cinfer_time_to_first_token_seconds_count"),
            "queue_count": delta("cinfer_request_queue_time_seconds_count"),
            "itl_count": delta("cinfer_inter_token_latency_seconds_count"),
        }

    m1, _ = wait_metrics(port, lambda m1: accounted(m1) == want, timeout=5)
    checks.check("64 concurrent streams: metrics account for exactly these requests and tokens",
                 accounted(m1) == want, f"got {accounted(m1)}, want {want}")


# ---- 4. prefix cache ----


def usage_of(port, body):
    resp = post(port, "/v1/completions", body)
    if resp.status != 200:
        raise ValueError(f"status {resp.status}: {resp.body[:300]!r}")
    j = resp.json()
    return j["choices"][0]["text"], j["usage"]["prompt_tokens_details"]["cached_tokens"], j["usage"]


def section_prefix(s):
    port, nocache = s["main"][0], s["nocache"][0]
    prefix = token_prompt(7, 80)

    def body(suffix_seed, **kw):
        return dict(model=MODEL, prompt=prefix + token_prompt(suffix_seed, 5), max_tokens=12, temperature=0, **kw)

    hits0 = quiet_metrics(port).get("cinfer_prefix_cache_hits_total")
    t1, c1, _ = usage_of(port, body(101))
    checks.check("prefix: first request of a new 80-token prefix has cached_tokens 0", c1 == 0, f"cached {c1}")
    t2, c2, u2 = usage_of(port, body(102))
    checks.check(
        "prefix: a request sharing the 80-token prefix reports cached_tokens >= 64 (< prompt)",
        64 <= c2 < u2["prompt_tokens"],
        f"cached {c2} of {u2['prompt_tokens']}",
    )
    t2b, c2b, u2b = usage_of(port, body(102))
    checks.check(
        "prefix: an identical repeat is cached up to (not including) its last token",
        c2b >= c2 and c2b < u2b["prompt_tokens"] and t2b == t2,
        f"cached {c2b} of {u2b['prompt_tokens']}, text {t2b!r} vs {t2!r}",
    )
    m, _ = wait_metrics(port, lambda m: m.get("cinfer_prefix_cache_hits_total") - hits0 >= c2 + c2b)
    hits1 = m.get("cinfer_prefix_cache_hits_total")
    checks.check(
        "prefix: cinfer_prefix_cache_hits_total rose by the cached tokens (and its vLLM twin with it)",
        hits1 - hits0 >= c2 + c2b and m.get("vllm:prefix_cache_hits_total") == hits1,
        f"hits {hits0} -> {hits1}, cached {c2}+{c2b}",
    )
    ref1, n1, _ = usage_of(nocache, body(101))
    ref2, n2, _ = usage_of(nocache, body(102))
    _, n2b, _ = usage_of(nocache, body(102))
    checks.check("prefix: outputs equal the --no-prefix-caching server's", (t1, t2) == (ref1, ref2),
                 f"{(t1, t2)} vs {(ref1, ref2)}")
    checks.check("--no-prefix-caching: cached_tokens always 0", n1 == n2 == n2b == 0, f"{(n1, n2, n2b)}")
    # cache_salt: a salt sees only blocks cached under the same salt.
    ta, ca, _ = usage_of(port, body(103, cache_salt="alpha"))
    checks.check("cache_salt: first use of a salt gets cached_tokens 0 on a cached prefix", ca == 0, f"cached {ca}")
    tb, cb, _ = usage_of(port, body(104, cache_salt="alpha"))
    checks.check("cache_salt: the same salt then hits", cb >= 64, f"cached {cb}")
    _, cc, _ = usage_of(port, body(105, cache_salt="beta"))
    checks.check("cache_salt: another salt is isolated (cached_tokens 0)", cc == 0, f"cached {cc}")
    ref_a, _, _ = usage_of(nocache, body(103))
    checks.check("cache_salt: a salted output equals the unsalted one", ta == ref_a, f"{ta!r} vs {ref_a!r}")
    check_idle(port, "prefix cache")


# ---- 5. preemption ----


def section_preemption(s):
    port = s["preempt"][0]
    bodies = [
        {"model": MODEL, "prompt": PROMPTS[i % len(PROMPTS)] + (" big" if i >= 8 else ""), "max_tokens": 150,
         "temperature": 0, "ignore_eos": True, "stream": i % 2 == 0}
        for i in range(16)
    ]
    p0 = quiet_metrics(port).get("cinfer_preemptions_total")
    alone = [completion_text(port, b, 120) for b in bodies]
    p1 = quiet_metrics(port).get("cinfer_preemptions_total")
    checks.check("preemption server: one request at a time is never preempted", p1 == p0, f"{p0} -> {p1}")
    together = run_parallel(lambda b: completion_text(port, b, 240), bodies)
    errors = [r for r in together if isinstance(r, Exception)]
    checks.check("preemption: 16 concurrent requests over the KV budget all complete", not errors, f"{errors[:3]}")
    diff = [i for i in range(16) if alone[i] != together[i]]
    checks.check("preemption: every output identical to the same request alone", not diff,
                 f"{len(diff)} differ, e.g. #{diff[0] if diff else ''}: "
                 f"{alone[diff[0]] if diff else ''} vs {together[diff[0]] if diff else ''}")
    checks.check("preemption: every request ran to max_tokens (finish_reason length)",
                 all(a[1] == "length" for a in alone), f"{[a[1] for a in alone]}")
    m, _ = wait_metrics(port, lambda m: m.get("cinfer_preemptions_total") > p1, timeout=3)
    p2 = m.get("cinfer_preemptions_total")
    checks.check(
        "preemption: cinfer_preemptions_total > 0 and vllm:num_preemptions_total equal",
        p2 > p1 and m.get("vllm:num_preemptions_total") == p2,
        f"native {p1} -> {p2}, vllm {m.get('vllm:num_preemptions_total')}",
    )
    check_idle(port, "preemption")


# ---- 5b. speculative decoding served ----


def section_speculation(s):
    """Speculation inside the continuous batch, as served: greedy outputs of concurrent streams
    equal the same requests on a server without speculation, for the n-gram proposer with its
    cross-request pool and for a draft model whose KV pool shares the --kv-cache-bytes budget
    (tight enough that the scheduler preempts, and the draft must stay in step)."""
    ref, ngram, draft = s["main"][0], s["ngram"][0], s["draft"][0]
    bodies = [stream_body(i) for i in range(24)]
    for b in bodies:
        b["max_tokens"] += 40  # long enough for greedy loops the proposers can exploit
    want = [stream_one(ref, b) for b in bodies]
    for name, port in (("ngram", ngram), ("draft", draft)):
        m0 = quiet_metrics(port)
        got = run_parallel(lambda b, port=port: stream_one(port, b, 240), bodies)
        errors = [r for r in got if isinstance(r, Exception)]
        checks.check(f"--speculative {name}: 24 concurrent streams complete", not errors, f"{errors[:3]}")
        diff = [i for i in range(len(bodies)) if got[i] != want[i]]
        checks.check(
            f"--speculative {name}: every greedy stream identical to the server without speculation",
            not diff,
            f"{len(diff)} differ, first #{diff[0] if diff else ''}: "
            f"{want[diff[0]] if diff else ''} vs {got[diff[0]] if diff else ''}",
        )
        m1, _ = wait_metrics(port, lambda m: m.get("cinfer_spec_decode_num_accepted_tokens_total") >
                             m0.get("cinfer_spec_decode_num_accepted_tokens_total"), timeout=3)
        acc = m1.get("cinfer_spec_decode_num_accepted_tokens_total") - m0.get(
            "cinfer_spec_decode_num_accepted_tokens_total")
        checks.check(f"--speculative {name}: proposals were accepted, the vLLM name agrees",
                     acc > 0 and m1.get("vllm:spec_decode_num_accepted_tokens_total") ==
                     m1.get("cinfer_spec_decode_num_accepted_tokens_total"), f"accepted {acc}")
        if name == "draft":
            pre = m1.get("cinfer_preemptions_total") - m0.get("cinfer_preemptions_total")
            checks.check("--speculative draft: the shared KV budget made the scheduler preempt", pre > 0,
                         f"preemptions {pre}")
        check_idle(port, f"--speculative {name}")
    # The n-gram pool: a finished request's tokens are proposals for the next one that repeats them
    # (the same greedy request again: its own early tokens hold no earlier match of their suffix).
    body = {"model": MODEL, "prompt": "Sam had a red ball. He", "max_tokens": 60, "temperature": 0}
    first = completion_text(ngram, body)
    h0 = quiet_metrics(ngram).get("cinfer_spec_decode_ngram_pool_hits_total")
    again = completion_text(ngram, body)
    m, _ = wait_metrics(ngram, lambda m: m.get("cinfer_spec_decode_ngram_pool_hits_total") > h0, timeout=3)
    hits = m.get("cinfer_spec_decode_ngram_pool_hits_total") - h0
    checks.check("--ngram-pool-bytes: a repeated request's proposals come from the pool, output unchanged",
                 hits > 0 and first == again and first == completion_text(ref, body),
                 f"pool hits {hits}, {first!r} vs {again!r}")


# ---- 6. disconnects ----


def raw_stream_socket(port, body):
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30 * SLOW)
    s.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(data)
        + data
    )
    return s


def read_until(s, marker):
    got = b""
    while marker not in got:
        b = s.recv(4096)
        if not b:
            raise ValueError(f"closed before {marker!r}: {got[:200]!r}")
        got += b
    return got


def section_disconnect(s):
    port = s["main"][0]
    aborts0 = quiet_metrics(port).get("cinfer_requests_total", finished_reason="abort")
    long_body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 200, "temperature": 0,
                 "ignore_eos": True, "stream": True}
    socks = [raw_stream_socket(port, dict(long_body, prompt=PROMPTS[i])) for i in range(6)]
    for s_ in socks:
        read_until(s_, b"data: ")
    for i, s_ in enumerate(socks):
        if i % 2:  # half of them reset the connection instead of closing it politely
            s_.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s_.close()
    # Gone before any byte of the answer: streamed and not.
    for stream in (True, False):
        s_ = raw_stream_socket(port, dict(long_body, stream=stream))
        s_.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s_.close()
    check_idle(port, "client disconnects")
    m, _ = wait_metrics(port, lambda m: m.get("cinfer_requests_total", finished_reason="abort") - aborts0 >= 6)
    aborts1 = m.get("cinfer_requests_total", finished_reason="abort")
    checks.check(
        "disconnects: requests_total{finished_reason=abort} rose by the 6 streams cut mid-way",
        aborts1 - aborts0 >= 6 and m.get("vllm:request_success_total", finished_reason="abort") == aborts1,
        f"abort {aborts0} -> {aborts1}",
    )
    text, fin = completion_text(port, {"model": MODEL, "prompt": "Mom said", "max_tokens": 5, "temperature": 0})
    checks.check("disconnects: the server still answers", fin == "length" and text, f"{text!r} {fin}")

    # A client that stops reading a large stream (8 choices with logprobs) for a while: others are
    # served meanwhile, and the stream is still complete when it reads again.
    slow = raw_stream_socket(port, dict(long_body, max_tokens=240, n=8, logprobs=5, temperature=1.0, seed=5))
    got = read_until(slow, b"data: ")
    text, fin = completion_text(port, {"model": MODEL, "prompt": "Mom said", "max_tokens": 5, "temperature": 0})
    checks.check("slow reader: another request is served while a stream is not being read", fin == "length",
                 f"{text!r} {fin}")
    time.sleep(1)
    slow.settimeout(60 * SLOW)
    got += read_to_close(slow)
    slow.close()
    r = stream_result(parse_response(got))
    checks.check("slow reader: the stream is complete when it reads again (8 choices to length, [DONE])",
                 r["done"] and r["finish"] == {i: "length" for i in range(8)},
                 f"{len(got)} bytes, done {r['done']}, finishes {r['finish']}")

    # A client that leaves while its request waits for admission (--max-num-seqs 1 server).
    q = s["queue"][0]
    aborts0 = quiet_metrics(q).get("cinfer_requests_total", finished_reason="abort")
    running = raw_stream_socket(q, dict(long_body, max_tokens=2000))
    read_until(running, b"data: ")

    def drain():  # keep reading so the running stream is never held up by its client
        try:
            while running.recv(65536):
                pass
        except OSError:
            pass

    drainer = threading.Thread(target=drain)
    drainer.start()
    for stream in (True, False):
        waiting = raw_stream_socket(q, dict(long_body, stream=stream, max_tokens=20))
        m, ok = wait_metrics(q, lambda m: m.get("cinfer_requests_waiting") == 1, timeout=5)
        checks.check(f"disconnects: a {'streamed' if stream else 'plain'} request waits behind the running one",
                     ok, idle_detail(m))
        waiting.close()
        m, ok = wait_metrics(q, lambda m: m.get("cinfer_requests_waiting") == 0, timeout=5)
        checks.check(
            f"disconnects: the {'streamed' if stream else 'plain'} request that left while waiting is dropped "
            "from the queue",
            ok and m.get("cinfer_requests_running") == 1,
            idle_detail(m),
        )
    running.shutdown(socket.SHUT_RDWR)
    drainer.join()
    running.close()
    check_idle(q, "disconnects while queued")
    m, _ = wait_metrics(q, lambda m: m.get("cinfer_requests_total", finished_reason="abort") - aborts0 >= 3)
    aborts1 = m.get("cinfer_requests_total", finished_reason="abort")
    checks.check("disconnects while queued: the two queued requests and the running one count as abort",
                 aborts1 - aborts0 == 3, f"abort {aborts0} -> {aborts1}")


# ---- 8. malformed input ----

CT = b"Content-Type: application/json\r\n"


def post_raw(path, body, extra=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + CT + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def expect(name, port, data, status, param=None, timeout=15.0):
    """One raw exchange that must get `status` (or one of a tuple of them) with an OpenAI-shaped
    JSON error (naming `param`)."""
    allowed = status if isinstance(status, tuple) else (status,)
    try:
        raw = raw_exchange(port, data, timeout)
    except OSError as e:
        checks.not_ok(name, f"{type(e).__name__}: {e}")
        return
    if not raw:
        checks.not_ok(name, f"connection closed without a response (want {status})")
        return
    try:
        resp = parse_response(raw)
    except ValueError as e:
        checks.not_ok(name, f"unparseable response: {e}")
        return
    problems = []
    if resp.status not in allowed:
        problems.append(f"status {resp.status}, want {status}")
    shape = error_shape(resp)
    if shape:
        problems.append(shape)
    elif param is not None:
        e = resp.json()["error"]
        if not str(e.get("param") or "").startswith(param) and param not in e["message"]:
            problems.append(f"error does not name {param!r}: {e}")
    if resp.status in (429, 503) and not resp.headers.get("retry-after", "").isdigit():
        problems.append("no Retry-After")
    checks.check(name, not problems, "; ".join(problems) + f" body {resp.body[:200]!r}")
    return resp


def slowloris(port, result, stop):
    """Trickles a request head one byte every 0.3 s until `stop` is set (or 60 s), then stalls;
    records how long after connecting the server closed the connection (a send failing because the
    server closed or reset it counts as closed)."""
    s = socket.create_connection(("127.0.0.1", port))
    start = time.monotonic()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
    try:
        for i in range(200):
            if stop.is_set():
                break
            s.send(head[i : i + 1])
            time.sleep(0.3)
        result["trickled_s"] = round(time.monotonic() - start, 1)
        s.settimeout(60 * SLOW)
        while s.recv(4096):
            pass
        result["closed_after"] = time.monotonic() - start
    except (BrokenPipeError, ConnectionResetError):
        result["closed_after"] = time.monotonic() - start
    except OSError as e:
        result["error"] = f"{type(e).__name__}: {e} after {time.monotonic() - start:.1f}s"
    finally:
        s.close()


def section_malformed(s):
    port = s["bad"][0]
    slow_result = {}
    stop_trickle = threading.Event()
    slow_thread = threading.Thread(target=slowloris, args=(port, slow_result, stop_trickle))
    slow_thread.start()
    stalled_body = {}

    def stalled():  # a body that stops short of its Content-Length and never finishes
        c = socket.create_connection(("127.0.0.1", port))
        start = time.monotonic()
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + CT + b"Content-Length: 100\r\n\r\n{\"prompt\"")
        c.settimeout(60 * SLOW)
        try:
            got = c.recv(4096)
            stalled_body["after"] = time.monotonic() - start
            stalled_body["got"] = got
        except OSError as e:
            stalled_body["error"] = str(e)
        c.close()

    stall_thread = threading.Thread(target=stalled)
    stall_thread.start()
    time.sleep(1)  # a few bytes trickled
    # While the slow client trickles, others are served.
    t0 = time.monotonic()
    text, fin = completion_text(port, {"model": MODEL, "prompt": "Once", "max_tokens": 4, "temperature": 0})
    checks.check("malformed: a normal request is served while a slowloris client trickles",
                 fin == "length" and slow_thread.is_alive() and "closed_after" not in slow_result,
                 f"fin {fin}, slowloris {slow_result} ({time.monotonic() - t0:.1f}s)")
    stop_trickle.set()

    P = b"/v1/completions"
    C = b"/v1/chat/completions"
    cases = [
        ("bad JSON", post_raw(P, b'{"prompt": "x",'), 400, None),
        ("JSON not an object", post_raw(P, b"[1, 2]"), 400, None),
        ("empty body", post_raw(P, b""), 400, None),
        ("prompt of a wrong type", post_raw(P, b'{"prompt": {"a": 1}}'), 400, "prompt"),
        ("prompt missing", post_raw(P, b'{"max_tokens": 3}'), 400, "prompt"),
        ("max_tokens as a string", post_raw(P, b'{"prompt": "x", "max_tokens": "5"}'), 400, "max_tokens"),
        ("temperature as a string", post_raw(P, b'{"prompt": "x", "temperature": "hot"}'), 400, "temperature"),
        ("stop as a number", post_raw(P, b'{"prompt": "x", "stop": 5}'), 400, "stop"),
        ("n as a string", post_raw(P, b'{"prompt": "x", "n": "3"}'), 400, "n"),
        ("stream as a string", post_raw(P, b'{"prompt": "x", "stream": "yes"}'), 400, "stream"),
        ("seed as a float", post_raw(P, b'{"prompt": "x", "seed": 1.5}'), 400, "seed"),
        ("max_tokens 1e30", post_raw(P, b'{"prompt": "x", "max_tokens": 1e30}'), 400, "max_tokens"),
        ("max_tokens beyond int64", post_raw(P, b'{"prompt": "x", "max_tokens": 99999999999999999999999}'), 400, None),
        ("max_tokens negative", post_raw(P, b'{"prompt": "x", "max_tokens": -1}'), 400, "max_tokens"),
        ("n 1e9", post_raw(P, b'{"prompt": "x", "n": 1e9}'), 400, "n"),
        ("n 1000000000", post_raw(P, b'{"prompt": "x", "n": 1000000000}'), 400, "n"),
        ("n 0", post_raw(P, b'{"prompt": "x", "n": 0}'), 400, "n"),
        ("top_logprobs 1e9",
         post_raw(C, b'{"messages": [{"role": "user", "content": "x"}], "logprobs": true, '
                     b'"top_logprobs": 1000000000}'),
         400, "top_logprobs"),
        ("token id out of the vocabulary", post_raw(P, b'{"prompt": [1, 99999]}'), 400, "prompt"),
        ("negative token id", post_raw(P, b'{"prompt": [1, -5]}'), 400, "prompt"),
        ("token ids of a wrong type", post_raw(P, b'{"prompt": [1, "a"]}'), 400, "prompt"),
        ("invalid UTF-8 in prompt", post_raw(P, b'{"prompt": "ab\xff\xfe"}'), 400, None),
        ("overlong UTF-8 in prompt", post_raw(P, b'{"prompt": "\xc0\xaf"}'), 400, None),
        ("lone surrogate escape", post_raw(P, b'{"prompt": "\\ud800x"}'), 400, None),
        ("NUL byte in the JSON", post_raw(P, b'{"prompt": "a\x00b"}'), 400, None),
        ("escaped NUL in prompt", post_raw(P, b'{"prompt": "a\\u0000b"}'), 400, None),
        ("NUL after the JSON", post_raw(P, b'{"prompt": "x"}\x00'), 400, None),
        ("messages not an array", post_raw(C, b'{"messages": "hi"}'), 400, "messages"),
        ("message without content", post_raw(C, b'{"messages": [{"role": "user"}]}'), 400, "messages"),
        ("message with a bad role", post_raw(C, b'{"messages": [{"role": "wizard", "content": "x"}]}'), 400, "role"),
        ("empty messages", post_raw(C, b'{"messages": []}'), 400, "messages"),
        ("unknown model", post_raw(P, b'{"model": "other", "prompt": "x"}'), 404, "model"),
        ("body over --max-body-bytes", post_raw(P, b'{"prompt": "' + b"a" * 70000 + b'"}'), 413, None),
        ("Content-Length far over the limit, no body",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + CT + b"Content-Length: 1000000000000\r\n\r\n", 413, None),
        ("unknown route", b"GET /v2/nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404, None),
        ("unknown route (POST)", post_raw(b"/v1/embeddings", b"{}"), 404, None),
        ("wrong method on /v1/completions", b"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405, None),
        ("wrong method on /v1/chat/completions", b"DELETE /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405, None),
        ("wrong method on /v1/models", post_raw(b"/v1/models", b"{}"), 405, None),
        ("wrong method on /health", post_raw(b"/health", b"{}"), 405, None),
        # No Content-Length and no Transfer-Encoding: the body is empty (RFC 9112 6.3), so either
        # "length required" or the empty body's 400.
        ("POST without Content-Length or body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + CT + b"\r\n",
         (400, 411), None),
        ("POST without Content-Length, JSON sent anyway",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + CT + b"\r\n" + b'{"prompt": "x", "max_tokens": 2}',
         (400, 411), None),
        ("POST with Content-Length: 0 on /health", post_raw(b"/health", b""), 405, None),
        ("garbage request line", b"HELLO\r\n\r\n", 400, None),
    ]
    for name, data, status, param in cases:
        want = "/".join(map(str, status)) if isinstance(status, tuple) else status
        expect(f"malformed: {name} -> {want}", port, data, status, param)

    # A chunked body: decoded and served, or refused with a JSON error, never dropped silently.
    body = b'{"prompt": "Once", "max_tokens": 2, "temperature": 0}'
    data = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + CT + b"Transfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % 10 + body[:10] + b"\r\n" + b"%x\r\n" % (len(body) - 10) + body[10:] + b"\r\n0\r\n\r\n")
    raw = raw_exchange(port, data)
    try:
        resp = parse_response(raw)
        good = resp.status == 200 and resp.json()["choices"][0]["finish_reason"] == "length"
        good = good or (resp.status in (400, 411, 501) and error_shape(resp) is None)
        checks.check("malformed: chunked request body served or refused with a JSON error", good, repr(resp))
    except ValueError as e:
        checks.not_ok("malformed: chunked request body served or refused with a JSON error", f"{e} ({raw[:100]!r})")

    # A request head over the header limit.
    big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n"
    try:
        raw = raw_exchange(port, big)
        st = parse_response(raw).status if raw else None
        checks.check("malformed: 40 kB header refused (4xx or closed)", st is None or 400 <= st < 500, f"status {st}")
    except OSError as e:  # the server may reset while we are still sending: also a refusal
        checks.ok(f"malformed: 40 kB header refused (connection reset: {type(e).__name__})")

    # 1000 connections at once, some with half a request, all dropped (half of them reset).
    conns = []
    try:
        for i in range(1000):
            c = socket.create_connection(("127.0.0.1", port), timeout=10 * SLOW)
            if i % 3 == 0:
                c.send(b"POST /v1/completions HTTP/1.1\r\nContent-Le")
            elif i % 3 == 1:
                c.send(post_raw(P, b'{"prompt": "x", "max_tokens": 3}')[:-5])
            conns.append(c)
        checks.ok("malformed: 1000 concurrent connections accepted")
    except OSError as e:
        checks.not_ok("malformed: 1000 concurrent connections accepted", f"after {len(conns)}: {e}")
    for i, c in enumerate(conns):
        if i % 2:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()

    slow_thread.join()
    stall_thread.join()
    limit = 45 * SLOW
    after = slow_result.get("closed_after")
    checks.check(f"malformed: the slowloris connection is eventually closed by the server (after {after or 0:.1f}s)",
                 after is not None and after < limit, f"{slow_result}")
    after = stalled_body.get("after")
    checks.check(
        f"malformed: a body stalled short of its Content-Length is closed (or refused) by the server "
        f"(after {after or 0:.1f}s)",
        after is not None and after < limit and (not stalled_body["got"] or b" 400 " in stalled_body["got"][:20]
                                                  or b" 408 " in stalled_body["got"][:20]),
        f"{stalled_body}",
    )

    resp = request(port, "GET", "/health")
    checks.check("malformed: /health is 200 after all of it", resp.status == 200, repr(resp))
    text, fin = completion_text(port, {"model": MODEL, "prompt": "Once", "max_tokens": 4, "temperature": 0})
    checks.check("malformed: a normal request still works", fin == "length" and text, f"{text!r} {fin}")
    check_idle(port, "malformed input")


# ---- 7. SIGTERM under load ----


def process_gone(pid):
    """True when pid has exited (gone, or a zombie waiting for the shell to reap it)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except (FileNotFoundError, ProcessLookupError):  # gone, or being reaped while we read
        return True


def wait_gone(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        time.sleep(0.1)
    return False


class Streamer(threading.Thread):
    """One raw streaming request read to the end; `started` is set at the first data event."""

    def __init__(self, port, body):
        super().__init__()
        self.port, self.body = port, body
        self.started = threading.Event()
        self.result = None
        self.error = None

    def run(self):
        try:
            s = raw_stream_socket(self.port, self.body)
            s.settimeout(120 * SLOW)
            got = read_until(s, b"data: ")
            self.started.set()
            got += read_to_close(s)
            s.close()
            self.result = stream_result(parse_response(got))
        except Exception as e:  # noqa: BLE001 - reported by the section
            self.error = e
        finally:
            self.started.set()


def streams_in_flight(port, n, max_tokens):
    ts = [
        Streamer(port, {"model": MODEL, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
                        "temperature": 0, "ignore_eos": True, "stream": True,
                        "stream_options": {"include_usage": True}})
        for i in range(n)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.started.wait(60 * SLOW)
    return ts


# Tokens of each stream in the SIGTERM section: enough that 12 of them keep the drain busy past the
# checks made after the signal (at 200 a faster engine finished all of them and exited first, and the
# checks met a closed port), few enough to finish inside --shutdown-timeout under the sanitizers.
DRAIN_TOKENS = 800


def section_sigterm(s):
    port, pid = s["drain"]
    ts = streams_in_flight(port, 8, DRAIN_TOKENS)
    running = [t for t in ts if t.error is None and t.is_alive()]
    checks.check("sigterm: 8 streams in flight before the signal", len(running) == 8,
                 f"{len(running)} running, errors {[t.error for t in ts if t.error]}")
    # Four more wait for admission (the server runs --max-num-seqs 8): accepted requests that have
    # not started must be served too.
    queued = [
        Streamer(port, {"model": MODEL, "prompt": PROMPTS[i], "max_tokens": DRAIN_TOKENS, "temperature": 0,
                        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
        for i in range(4)
    ]
    for t in queued:
        t.start()
    deadline = time.monotonic() + 10 * SLOW
    while metrics(port).get("cinfer_requests_waiting") != 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    waiting = metrics(port).get("cinfer_requests_waiting")
    checks.check("sigterm: 4 more requests waiting for admission before the signal", waiting == 4,
                 f"waiting {waiting}")
    ts += queued
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.2)
    h = request(port, "GET", "/health")
    checks.check("sigterm: /health is 503 at once", h.status == 503, repr(h))
    live = request(port, "GET", "/live")
    checks.check("sigterm: /live stays 200 while draining", live.status == 200, repr(live))
    r = post(port, "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 2})
    problems = error_shape(r) if r.status == 503 else f"status {r.status}"
    if not problems and not r.headers.get("retry-after", "").isdigit():
        problems = f"no Retry-After in {r.headers}"
    checks.check("sigterm: a new request gets 503 with Retry-After and a JSON error", not problems,
                 f"{problems}: {r!r}")
    still = sum(1 for t in ts if t.is_alive())
    for t in ts:
        t.join(120 * SLOW)
    bad = [
        (t.error, t.result and (t.result["done"], t.result["finish"], t.result["usage"]))
        for t in ts
        if t.error or not t.result["done"] or t.result["finish"].get(0) != "length"
        or (t.result["usage"] or {}).get("completion_tokens") != DRAIN_TOKENS
    ]
    checks.check(
        f"sigterm: every accepted stream (running or waiting; {still} of 12 unfinished at the 503 checks) completes: "
        f"all {DRAIN_TOKENS} tokens, finish_reason length, [DONE]",
        not bad and still > 0,
        f"{bad[:3]}",
    )
    checks.check("sigterm: the process exits within the drain timeout", wait_gone(pid, 35 * SLOW), f"pid {pid}")


# Tokens of each stream the shutdown deadline must cut: far more than 1 s of decoding (1800 was not:
# on a quiet machine stories260K wrote all three streams' 1800 within the second after SIGTERM).
CUT_TOKENS = 15000


def section_shutdown_timeout(s):
    port, pid = s["cut"]
    ts = streams_in_flight(port, 3, CUT_TOKENS)
    checks.check("shutdown-timeout: 3 long streams in flight", all(t.is_alive() for t in ts),
                 f"errors {[t.error for t in ts if t.error]}")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    for t in ts:
        t.join(60 * SLOW)
    took = time.monotonic() - t0
    bad = [
        (t.error, t.result and (t.result["done"], t.result["finish"], t.result["usage"]))
        for t in ts
        if t.error or not t.result["done"] or t.result["finish"].get(0) != "length"
        or not 0 < (t.result["usage"] or {}).get("completion_tokens", 0) < CUT_TOKENS
    ]
    checks.check(
        "shutdown-timeout 1: long streams are cut with finish_reason length, usage and [DONE]",
        not bad,
        f"{bad[:3]} after {took:.1f}s",
    )
    checks.check("shutdown-timeout 1: the streams end within a few seconds of SIGTERM", took < 10 * SLOW,
                 f"{took:.1f}s")
    checks.check("shutdown-timeout 1: the process exits", wait_gone(pid, 15 * SLOW), f"pid {pid}")


SECTIONS = {
    "metrics": section_metrics,
    "greedy": section_greedy,
    "concurrency": section_concurrency,
    "prefix": section_prefix,
    "preemption": section_preemption,
    "speculation": section_speculation,
    "disconnect": section_disconnect,
    "malformed": section_malformed,
    "sigterm": section_sigterm,
    "shutdown_timeout": section_shutdown_timeout,
}

if __name__ == "__main__":
    section = sys.argv[1]
    checks.run(section, SECTIONS[section], servers_from_argv(sys.argv[2:]))
    sys.exit(finish(checks))
