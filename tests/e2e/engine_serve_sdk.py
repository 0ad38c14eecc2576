"""`cinfer-engine serve` through the official OpenAI Python SDK (run by engine_serve.sh).

Usage: engine_serve_sdk.py main=PORT queue=PORT auth=PORT
  main:  --context-length 256, served as $ENGINE_SERVE_MODEL_NAME
  queue: --max-num-seqs 1 --max-queue 1 (a burst must get 429)
  auth:  CINFER_ENGINE_API_KEY=s3cret-key (the /v1 routes need it)
Prints `ok - NAME` / `not ok - NAME: DETAIL` per check.
"""

import math
import os
import sys
import threading

import openai
from openai import OpenAI

from engine_serve_lib import SLOW, Checks, finish, servers_from_argv, token_prompt

checks = Checks()
servers = servers_from_argv(sys.argv[1:])
MODEL = os.environ["ENGINE_SERVE_MODEL_NAME"]
PROMPT = "Once upon a time"


def client(port):
    # No retries: a 429 or 503 must surface as an exception, not be retried away.
    return OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60 * SLOW)


main = client(servers["main"][0])


def greedy_completion(prompt, n, **kw):
    r = main.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0, **kw)
    return r


def test_models():
    ids = [m.id for m in main.models.list().data]
    checks.check("models.list shows the served name", ids == [MODEL], f"got {ids}")


def test_completions():
    r = greedy_completion(PROMPT, 24)
    c = r.choices[0]
    checks.check(
        "completions: text, finish_reason length, usage",
        len(r.choices) == 1
        and c.text
        and c.finish_reason == "length"
        and r.usage.completion_tokens == 24
        and r.usage.prompt_tokens > 0
        and r.usage.total_tokens == r.usage.prompt_tokens + 24
        and r.model == MODEL
        and r.object == "text_completion",
        f"{r}",
    )
    chunks = list(
        main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0, stream=True)
    )
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    checks.check(
        "completions stream: same text as non-streamed, one finish_reason at the end",
        text == c.text and finishes == ["length"] and chunks[-1].choices[0].finish_reason == "length",
        f"stream {text!r} finishes {finishes} vs {c.text!r}",
    )
    checks.check(
        "completions stream without include_usage: no usage",
        all(ch.usage is None for ch in chunks),
        f"{[ch.usage for ch in chunks if ch.usage]}",
    )


def test_chat():
    msgs = [{"role": "user", "content": "Tell me a story about a cat."}]
    r = main.chat.completions.create(model=MODEL, messages=msgs, max_tokens=20, temperature=0)
    m = r.choices[0].message
    checks.check(
        "chat: assistant message, finish_reason length, usage",
        r.object == "chat.completion"
        and m.role == "assistant"
        and m.content
        and r.choices[0].finish_reason == "length"
        and r.usage.completion_tokens == 20,
        f"{r}",
    )
    chunks = list(
        main.chat.completions.create(model=MODEL, messages=msgs, max_tokens=20, temperature=0, stream=True)
    )
    text = "".join((ch.choices[0].delta.content or "") for ch in chunks if ch.choices)
    roles = [ch.choices[0].delta.role for ch in chunks if ch.choices and ch.choices[0].delta.role]
    checks.check(
        "chat stream: same content as non-streamed, role assistant, finish length",
        text == m.content
        and roles[:1] == ["assistant"]
        and chunks[-1].choices[0].finish_reason == "length"
        and all(ch.object == "chat.completion.chunk" for ch in chunks),
        f"stream {text!r} roles {roles} vs {m.content!r}",
    )


def test_include_usage():
    for kind in ("completions", "chat"):
        if kind == "completions":
            chunks = list(
                main.completions.create(
                    model=MODEL,
                    prompt=PROMPT,
                    max_tokens=10,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
        else:
            chunks = list(
                main.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "Hi"}],
                    max_tokens=10,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
        last = chunks[-1]
        checks.check(
            f"{kind} include_usage: final chunk has usage and empty choices, others none",
            last.choices == []
            and last.usage is not None
            and last.usage.completion_tokens == 10
            and last.usage.total_tokens == last.usage.prompt_tokens + 10
            and all(ch.usage is None for ch in chunks[:-1])
            and all(ch.choices for ch in chunks[:-1]),
            f"last {last}",
        )


def test_stop():
    full = greedy_completion(PROMPT, 48).choices[0].text
    # Stop strings taken from the greedy text itself, so the stop is known to be reached.
    words = [w for w in full.split() if len(w) >= 3]
    if not checks.check("stop: greedy text has words to stop on", len(words) >= 4, repr(full)):
        return
    w1, w2 = words[2], words[3]
    cut1 = full[: full.index(w1)]
    r = greedy_completion(PROMPT, 48, stop=w1)
    c = r.choices[0]
    checks.check(
        "stop (string): text ends before it, never emitted, finish_reason stop",
        c.text == cut1 and w1 not in c.text and c.finish_reason == "stop",
        f"stop {w1!r}: got {c.text!r} ({c.finish_reason}), want {cut1!r}",
    )
    cut = min(full.index(w1), full.index(w2))
    r = greedy_completion(PROMPT, 48, stop=[w2, w1])
    c = r.choices[0]
    checks.check(
        "stop (list): the earliest one ends the text, finish_reason stop",
        c.text == full[:cut] and c.finish_reason == "stop",
        f"stop {[w2, w1]!r}: got {c.text!r} ({c.finish_reason}), want {full[:cut]!r}",
    )
    chunks = list(
        main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=48, temperature=0, stop=[w1], stream=True)
    )
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    checks.check(
        "stop (stream): streamed text never contains the stop string, finish_reason stop",
        text == cut1 and chunks[-1].choices[0].finish_reason == "stop",
        f"got {text!r}, want {cut1!r}",
    )
    rc = main.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=40, temperature=0
    )
    ctext = rc.choices[0].message.content
    cwords = [w for w in ctext.split() if len(w) >= 3]
    if cwords:
        w = cwords[len(cwords) // 2]
        r = main.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=40, temperature=0, stop=[w]
        )
        checks.check(
            "chat stop: content ends before the stop string, finish_reason stop",
            r.choices[0].message.content == ctext[: ctext.index(w)] and r.choices[0].finish_reason == "stop",
            f"stop {w!r}: got {r.choices[0].message.content!r}",
        )


def test_request_fields():
    msgs = [{"role": "user", "content": "Hi"}]
    r = main.chat.completions.create(model=MODEL, messages=msgs, max_completion_tokens=7, temperature=0)
    checks.check("chat max_completion_tokens bounds the output", r.usage.completion_tokens == 7
                 and r.choices[0].finish_reason == "length", f"{r.usage}")
    a = main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=1.0, seed=42)
    b = main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=1.0, seed=42)
    checks.check("seed: the same seed gives the same sampled text", a.choices[0].text == b.choices[0].text,
                 f"{a.choices[0].text!r} vs {b.choices[0].text!r}")
    # Accepted optional fields change nothing in a greedy answer.
    base = greedy_completion(PROMPT, 12).choices[0].text
    r = greedy_completion(PROMPT, 12, user="e2e", top_p=0.9, extra_body={"top_k": 40, "min_p": 0.0, "priority": 0})
    checks.check("user, top_k, min_p, priority accepted; greedy text unchanged", r.choices[0].text == base,
                 f"{r.choices[0].text!r} vs {base!r}")
    # A token-id prompt (BOS and five ids of the vocabulary) is taken as is.
    ids = [1, 403, 407, 261, 378, 49]
    r1 = main.completions.create(model=MODEL, prompt=ids, max_tokens=10, temperature=0)
    chunks = list(main.completions.create(model=MODEL, prompt=ids, max_tokens=10, temperature=0, stream=True))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    checks.check("token-id prompt: prompt_tokens counts the ids, streamed text equals non-streamed",
                 r1.usage.prompt_tokens == len(ids) and text == r1.choices[0].text and text,
                 f"{r1.usage} {text!r} vs {r1.choices[0].text!r}")
    r = greedy_completion(PROMPT, 30, extra_body={"ignore_eos": True})
    checks.check("ignore_eos: runs to max_tokens", r.usage.completion_tokens == 30, f"{r.usage}")
    plain = greedy_completion(PROMPT, 40).choices[0].text
    r = greedy_completion(PROMPT, 40, presence_penalty=2.0, frequency_penalty=2.0)
    checks.check("presence/frequency penalties change the greedy text (stories repeat words)",
                 r.usage.completion_tokens == 40 and r.choices[0].text != plain,
                 f"{r.choices[0].text!r} vs {plain!r}")


def test_n():
    r = main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=1.0, seed=3, n=3)
    idx = sorted(c.index for c in r.choices)
    checks.check(
        "n=3: three choices, indices 0..2, usage counts all",
        idx == [0, 1, 2] and all(c.text for c in r.choices) and r.usage.completion_tokens == 36,
        f"indices {idx} usage {r.usage}",
    )
    chunks = list(
        main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=1.0, seed=3, n=3, stream=True)
    )
    texts = {}
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    checks.check(
        "n=3 stream: choices 0..2, same texts as non-streamed with the same seed",
        texts == {c.index: c.text for c in r.choices},
        f"stream {texts} vs {[c.text for c in r.choices]}",
    )
    rc = main.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=1.0, n=3
    )
    checks.check(
        "chat n=3: three choices, indices 0..2",
        sorted(c.index for c in rc.choices) == [0, 1, 2],
        f"{[c.index for c in rc.choices]}",
    )


def test_logprobs():
    r = greedy_completion(PROMPT, 10, logprobs=2)
    c = r.choices[0]
    lp = c.logprobs
    ok = (
        lp is not None
        and len(lp.tokens) == 10
        and len(lp.token_logprobs) == 10
        and len(lp.top_logprobs) == 10
        and "".join(lp.tokens) == c.text
        and all(isinstance(x, float) and x <= 0 and math.isfinite(x) for x in lp.token_logprobs)
        and all(1 <= len(t) <= 2 for t in lp.top_logprobs)
        # greedy: the chosen token is the most likely one
        and all(abs(max(t.values()) - x) < 1e-6 for t, x in zip(lp.top_logprobs, lp.token_logprobs))
    )
    checks.check("completions logprobs=2: tokens, token_logprobs, top_logprobs consistent", ok, f"{lp}")
    rc = main.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=10,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    content = rc.choices[0].logprobs.content if rc.choices[0].logprobs else None
    ok = (
        content is not None
        and len(content) == 10
        and "".join(t.token for t in content) == rc.choices[0].message.content
        and all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in content)
        and all(abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6 for t in content)
        and all(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in content)
    )
    checks.check("chat logprobs + top_logprobs=2: one entry per token, 2 alternatives", ok, f"{content}")


def expect_error(name, exc_type, param, fn):
    try:
        r = fn()
    except exc_type as e:
        msg = str(e)
        checks.check(
            name,
            e.status_code in (400, 401, 404, 429) and (param is None or param in msg),
            f"status {e.status_code} message {msg!r} (want it to name {param!r})",
        )
        return e
    except openai.APIError as e:
        checks.not_ok(name, f"got {type(e).__name__}: {e}")
        return None
    checks.not_ok(name, f"no error, got {r}")
    return None


def test_errors():
    expect_error(
        "bad temperature: BadRequestError naming temperature",
        openai.BadRequestError,
        "temperature",
        lambda: main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=5),
    )
    expect_error(
        "bad top_p in chat: BadRequestError naming top_p",
        openai.BadRequestError,
        "top_p",
        lambda: main.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, top_p=7
        ),
    )
    expect_error(
        "prompt over --context-length 256: BadRequestError naming the prompt",
        openai.BadRequestError,
        "prompt",
        lambda: main.completions.create(model=MODEL, prompt=token_prompt(1, 300), max_tokens=4),
    )
    expect_error(
        "max_tokens over the context: BadRequestError naming max_tokens",
        openai.BadRequestError,
        "max_tokens",
        lambda: main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=100000),
    )
    expect_error(
        "unknown model: NotFoundError naming the model",
        openai.NotFoundError,
        "nope-model",
        lambda: main.completions.create(model="nope-model", prompt=PROMPT, max_tokens=4),
    )
    expect_error(
        "unknown model in chat: NotFoundError",
        openai.NotFoundError,
        "nope-model",
        lambda: main.chat.completions.create(
            model="nope-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        ),
    )


def test_rate_limit():
    q = client(servers["queue"][0])
    results = []
    lock = threading.Lock()

    def one(i):
        try:
            r = q.completions.create(
                model=MODEL,
                prompt=f"Once upon a time {i}",
                max_tokens=60,
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            out = ("ok", r.choices[0].finish_reason)
        except openai.RateLimitError as e:
            out = ("429", e)
        except openai.APIError as e:
            out = ("other", e)
        with lock:
            results.append(out)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    limited = [e for k, e in results if k == "429"]
    served = [e for k, e in results if k == "ok"]
    others = [e for k, e in results if k == "other"]
    checks.check(
        "--max-queue 1 flooded: RateLimitError for the overflow, the rest served",
        limited and served and not others and all(f == "length" for f in served),
        f"{len(limited)} limited, {len(served)} served, others {others[:2]}",
    )
    if limited:
        e = limited[0]
        ra = e.response.headers.get("retry-after", "")
        checks.check(
            "429 carries Retry-After (whole seconds) and an OpenAI error body",
            ra.isdigit() and int(ra) >= 1 and isinstance(e.body, dict) and e.body.get("message"),
            f"retry-after {ra!r} body {e.body}",
        )
    # The queue server recovers: one request alone is served.
    r = q.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0)
    checks.check("queue server serves again after the burst", r.choices[0].finish_reason == "length", f"{r}")


def test_api_key():
    import urllib.request

    port = servers["auth"][0]
    expect_error(
        "wrong API key: AuthenticationError (401, invalid_api_key)",
        openai.AuthenticationError,
        "Incorrect API key",
        lambda: client(port).completions.create(model=MODEL, prompt=PROMPT, max_tokens=4),
    )
    expect_error(
        "wrong API key on models.list: AuthenticationError",
        openai.AuthenticationError,
        None,
        lambda: client(port).models.list(),
    )
    good = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="s3cret-key", max_retries=0)
    r = good.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0)
    checks.check("the right API key is served", r.choices[0].finish_reason == "length", f"{r}")
    for path in ("/health", "/live", "/metrics"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10 * SLOW) as resp:
            checks.check(f"{path} needs no API key", resp.status == 200, f"status {resp.status}")


for name, fn in [
    ("models", test_models),
    ("completions", test_completions),
    ("chat", test_chat),
    ("include_usage", test_include_usage),
    ("stop", test_stop),
    ("request fields", test_request_fields),
    ("n", test_n),
    ("logprobs", test_logprobs),
    ("errors", test_errors),
    ("rate limit", test_rate_limit),
    ("api key", test_api_key),
]:
    checks.run(name, fn)

sys.exit(finish(checks))
