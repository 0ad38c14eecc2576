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
    m = main.models.retrieve(MODEL)
    checks.check("models.retrieve: the served model", m.id == MODEL and m.object == "model", f"{m}")
    expect_error("models.retrieve of an unknown id: NotFoundError", openai.NotFoundError, None,
                 lambda: main.models.retrieve("nope-model"))


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
        # up to logprobs + 1: the chosen token is always listed (OpenAI's rule)
        and all(1 <= len(t) <= 3 and tok in t for t, tok in zip(lp.top_logprobs, lp.tokens))
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


def test_batched_prompts():
    prompts = [PROMPT, "The little dog", "One day"]
    alone = [greedy_completion(p, 12, extra_body={"ignore_eos": True}) for p in prompts]
    r = main.completions.create(model=MODEL, prompt=prompts, max_tokens=12, temperature=0, n=2,
                                extra_body={"ignore_eos": True})
    idx = [c.index for c in r.choices]
    checks.check(
        "batched prompts x n=2: 6 choices numbered prompt * n + j, each the prompt's text alone",
        sorted(idx) == list(range(6))
        and all(c.text == alone[c.index // 2].choices[0].text for c in r.choices),
        f"indexes {idx}: {[c.text for c in r.choices]} vs {[a.choices[0].text for a in alone]}",
    )
    checks.check(
        "batched prompts: usage sums prompts (each once) and every choice's tokens",
        r.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
        and r.usage.completion_tokens == 6 * 12,
        f"{r.usage} vs {[a.usage for a in alone]}",
    )
    ids = [[1, 403, 407, 261, 378, 49], [1, 403, 407]]
    r = main.completions.create(model=MODEL, prompt=ids, max_tokens=8, temperature=0)
    checks.check("batched token-id prompts: one choice each, prompt_tokens counts all ids",
                 [c.index for c in r.choices] == [0, 1] and r.usage.prompt_tokens == 9, f"{r}")
    chunks = list(main.completions.create(model=MODEL, prompt=prompts, max_tokens=12, temperature=0,
                                          stream=True, extra_body={"ignore_eos": True}))
    texts = {}
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    checks.check("batched prompts streamed: chunks carry each prompt's index and text",
                 texts == {i: a.choices[0].text for i, a in enumerate(alone)}, f"{texts}")


def test_logprobs_chunk_shapes():
    chunks = list(main.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=6, temperature=0,
        logprobs=True, top_logprobs=2, stream=True, extra_body={"ignore_eos": True}))
    first, last = chunks[0].choices[0], chunks[-1].choices[0]
    middle = [ch.choices[0] for ch in chunks[1:-1]]
    checks.check(
        "chat stream with logprobs: the role chunk has logprobs.content == [] (not null)",
        first.delta.role == "assistant" and first.logprobs is not None and first.logprobs.content == [],
        f"{first}",
    )
    checks.check(
        "chat stream with logprobs: content chunks carry their tokens, the closing chunk null",
        all(c.logprobs is not None and c.logprobs.content is not None for c in middle)
        and sum(len(c.logprobs.content) for c in middle) == 6
        and last.finish_reason == "length" and last.logprobs is None,
        f"{middle[:2]} ... {last}",
    )
    chunks = list(main.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0,
                                          logprobs=1, stream=True))
    checks.check(
        "completions stream with logprobs: every chunk has a logprobs object",
        all(ch.choices[0].logprobs is not None for ch in chunks)
        and sum(len(ch.choices[0].logprobs.tokens) for ch in chunks) == 6,
        f"{[ch.choices[0].logprobs for ch in chunks]}",
    )


def test_echo():
    r = main.completions.create(model=MODEL, prompt=PROMPT, echo=True, max_tokens=0, logprobs=1)
    c = r.choices[0]
    lp = c.logprobs
    checks.check(
        "echo with max_tokens 0: the prompt itself, its first token's logprob null, the rest scored",
        c.text == PROMPT and r.usage.completion_tokens == 0 and lp.token_logprobs[0] is None
        and lp.top_logprobs[0] is None and len(lp.tokens) == r.usage.prompt_tokens
        and all(x is not None and x <= 0 for x in lp.token_logprobs[1:]),
        f"{r}",
    )
    # lm-eval's loglikelihood request: batched token-id prompts, echo, logprobs 1, max_tokens 1.
    # The continuation's prompt logprobs must equal what generation reported for those tokens:
    # generate greedily, then score prompt + generated text.
    g = greedy_completion(PROMPT, 8, logprobs=1, extra_body={"ignore_eos": True})
    gen = g.choices[0]
    s = main.completions.create(model=MODEL, prompt=[PROMPT + gen.text, PROMPT], echo=True,
                                max_tokens=1, logprobs=1, temperature=0)
    sc = sorted(s.choices, key=lambda c: c.index)[0]
    tail_tokens = sc.logprobs.tokens[-9:-1]
    tail_lps = sc.logprobs.token_logprobs[-9:-1]
    checks.check(
        "echo + logprobs (lm-eval's loglikelihood): the continuation's prompt logprobs equal "
        "the generated tokens' logprobs",
        tail_tokens == gen.logprobs.tokens
        and all(abs(a - b) < 1e-3 for a, b in zip(tail_lps, gen.logprobs.token_logprobs))
        and sc.text.startswith(PROMPT + gen.text) and len(s.choices) == 2,
        f"{tail_tokens} {tail_lps} vs {gen.logprobs.tokens} {gen.logprobs.token_logprobs}",
    )
    chunks = list(main.completions.create(model=MODEL, prompt=PROMPT, echo=True, max_tokens=5,
                                          temperature=0, stream=True))
    checks.check("echo streamed: the first chunk is the prompt",
                 chunks[0].choices[0].text == PROMPT, f"{chunks[:2]}")


def test_logit_bias():
    r = greedy_completion(PROMPT, 6, logprobs=0, logit_bias={"403": 100})
    toks = r.choices[0].logprobs.tokens
    checks.check("logit_bias +100 forces token 403 every time", len(toks) == 6 and len(set(toks)) == 1,
                 f"{toks}")
    plain = greedy_completion(PROMPT, 6, logprobs=0).choices[0].logprobs.tokens
    banned = greedy_completion(PROMPT, 6, logprobs=0, logit_bias={"403": -100}).choices[0].logprobs.tokens
    checks.check("logit_bias -100 bans it (a different first token when it was the greedy one)",
                 toks[0] not in banned and (plain[0] != toks[0] or banned[0] != plain[0]),
                 f"{banned} vs {plain}")
    expect_error("logit_bias with an id outside the vocabulary: BadRequestError naming logit_bias",
                 openai.BadRequestError, "logit_bias",
                 lambda: greedy_completion(PROMPT, 4, logit_bias={"99999": 1}))
    expect_error("logit_bias over 100: BadRequestError naming logit_bias", openai.BadRequestError,
                 "logit_bias", lambda: greedy_completion(PROMPT, 4, logit_bias={"5": 101}))


def test_best_of():
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=1.0, seed=5,
              extra_body={"ignore_eos": True})
    every = main.completions.create(n=3, logprobs=0, **kw)
    means = {c.index: sum(c.logprobs.token_logprobs) / 8 for c in every.choices}
    best = max(means, key=lambda i: (means[i], -i))
    r = main.completions.create(best_of=3, **kw)
    checks.check(
        "best_of=3: the candidate with the highest mean logprob (candidates as n=3, same seed)",
        len(r.choices) == 1 and r.choices[0].text == every.choices[best].text
        and r.usage.completion_tokens == 24,
        f"{r.choices[0].text!r} vs {[c.text for c in every.choices]} means {means}",
    )
    expect_error("best_of > n streamed: BadRequestError naming best_of", openai.BadRequestError,
                 "best_of", lambda: list(main.completions.create(best_of=2, stream=True, **kw)))
    expect_error("best_of < n: BadRequestError naming best_of", openai.BadRequestError, "best_of",
                 lambda: main.completions.create(best_of=1, n=2, **kw))


def test_continuous_usage():
    chunks = list(main.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"ignore_eos": True}))
    used = [ch.usage.completion_tokens for ch in chunks if ch.usage]
    checks.check(
        "continuous_usage_stats: usage on every chunk, non-decreasing, 8 at the end",
        len(used) == len(chunks) and used == sorted(used) and used[-1] == 8
        and chunks[-1].choices == [],
        f"{used}",
    )


def test_suffix():
    expect_error("suffix on a model without fill-in-the-middle tokens: BadRequestError naming suffix",
                 openai.BadRequestError, "suffix",
                 lambda: main.completions.create(model=MODEL, prompt="def f(", suffix="return 1",
                                                 max_tokens=4))


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
    ("batched prompts", test_batched_prompts),
    ("logprobs chunk shapes", test_logprobs_chunk_shapes),
    ("echo", test_echo),
    ("logit_bias", test_logit_bias),
    ("best_of", test_best_of),
    ("continuous usage", test_continuous_usage),
    ("suffix", test_suffix),
    ("errors", test_errors),
    ("rate limit", test_rate_limit),
    ("api key", test_api_key),
]:
    checks.run(name, fn)

sys.exit(finish(checks))
