"""Structured outputs and tool calling through the official OpenAI Python SDK (run by engine_serve.sh).

Usage: engine_serve_structured.py main=PORT
  main: stories260K (a story model that has never seen JSON) with --context-length 256.
The grammar mask, not the model, must make every answer valid: client.beta.chat.completions.parse
with pydantic models (nested, optional, enum, array, ge/gt/le/lt ranges, fractional bounds on
floats, multiple_of, pattern, date / datetime / UUID formats), guided_regex, streamed and not, several seeds; tools with
tool_choice required / named / auto / none, streamed tool-call deltas (content as it comes, a
call's name then its argument fragments) assembled by hand and by the SDK to the non-streamed answer, a
multi-turn conversation with a tool result, logprobs with tools (the content's tokens, streamed
and not), and 400s for schemas the engine cannot honour.
Prints `ok - NAME` / `not ok - NAME: DETAIL` per check.
"""

import datetime
import enum
import json
import os
import re
import sys
import uuid
from typing import List, Optional

import openai
from openai import OpenAI
from pydantic import BaseModel, Field

from engine_serve_lib import SLOW, Checks, finish, servers_from_argv

checks = Checks()
servers = servers_from_argv(sys.argv[1:])
MODEL = os.environ["ENGINE_SERVE_MODEL_NAME"]
client = OpenAI(
    base_url=f"http://127.0.0.1:{servers['main'][0]}/v1", api_key="x", max_retries=0, timeout=60 * SLOW
)
ASK = [{"role": "user", "content": "Tell me about a pet."}]


class Kind(str, enum.Enum):
    cat = "cat"
    dog = "dog"


class Owner(BaseModel):
    name: str = Field(max_length=6)
    age: int


class Pet(BaseModel):
    kind: Kind
    name: str = Field(max_length=6)
    owner: Owner
    nickname: Optional[str] = Field(max_length=4)
    weight: float
    tricks: List[bool] = Field(max_length=3)


def test_parse():
    for seed in (1, 2, 3):
        r = client.beta.chat.completions.parse(
            model=MODEL, messages=ASK, response_format=Pet, max_tokens=200, seed=seed
        )
        m = r.choices[0].message
        checks.check(
            f"parse (seed {seed}): a Pet instance",
            isinstance(m.parsed, Pet) and r.choices[0].finish_reason == "stop",
            f"{r}",
        )


def test_parse_stream():
    with client.beta.chat.completions.stream(
        model=MODEL, messages=ASK, response_format=Pet, max_tokens=200, seed=4
    ) as s:
        final = s.get_final_completion()
    checks.check(
        "stream: the assembled message parses to a Pet",
        isinstance(final.choices[0].message.parsed, Pet),
        f"{final}",
    )


def test_json_object_and_n():
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, response_format={"type": "json_object"}, max_tokens=200, n=2, seed=5
    )
    ok = True
    for c in r.choices:
        if c.finish_reason == "stop":
            ok = ok and isinstance(json.loads(c.message.content), dict)
        else:
            ok = ok and c.finish_reason == "length"
    checks.check("json_object, n=2: each choice a JSON object (or cut at length)", ok, f"{r}")


class Reading(BaseModel):
    stars: int = Field(ge=1, le=5)
    temp: int = Field(gt=-40, lt=125)
    score: float = Field(ge=0, le=100)
    code: str = Field(pattern=r"^[A-Z]{2}-\d{3}$")
    day: datetime.date


class Stamp(BaseModel):
    at: datetime.datetime
    id: uuid.UUID


def test_ranges_patterns_formats():
    # number-range schemas, pattern and formats: pydantic validates what the mask let through
    for model in (Reading, Stamp):
        for seed in (1, 2):
            r = client.beta.chat.completions.parse(
                model=MODEL, messages=ASK, response_format=model, max_tokens=200, seed=seed
            )
            m = r.choices[0].message
            checks.check(
                f"{model.__name__} (seed {seed}): ranges, pattern and formats validate",
                isinstance(m.parsed, model) and r.choices[0].finish_reason == "stop",
                f"{r.choices[0].finish_reason}: {m.content!r}",
            )
    want = re.compile(r"(yes|no)-[0-9]{2,4}")
    texts = []
    bodies = ({"guided_regex": r"^(yes|no)-\d{2,4}$"}, {"structured_outputs": {"regex": r"(yes|no)-\d{2,4}"}})
    for body in bodies:
        r = client.completions.create(model=MODEL, prompt="Answer:", max_tokens=20, seed=4, extra_body=body)
        texts.append((r.choices[0].text, r.choices[0].finish_reason))
    checks.check(
        "guided_regex and structured_outputs.regex: the whole answer matches",
        all(want.fullmatch(t) and f == "stop" for t, f in texts),
        f"{texts}",
    )


class Fractions(BaseModel):
    unit: float = Field(ge=0, le=1)
    delta: float = Field(gt=-1.5, lt=2.25)
    step: int = Field(multiple_of=5)
    tens: int = Field(multiple_of=10, ge=-30, le=90)
    half: float = Field(multiple_of=3, ge=0.5, le=20.5)


def test_fraction_bounds_multiples():
    # fractional bounds on floats and integer multiple_of: pydantic validates what the mask allowed
    for seed in (1, 2, 3):
        r = client.beta.chat.completions.parse(
            model=MODEL, messages=ASK, response_format=Fractions, max_tokens=200, seed=seed
        )
        m = r.choices[0].message
        checks.check(
            f"Fractions (seed {seed}): Field(ge=0, le=1) floats and multiple_of validate",
            isinstance(m.parsed, Fractions) and r.choices[0].finish_reason == "stop",
            f"{r.choices[0].finish_reason}: {m.content!r}",
        )


def test_bad_schemas():
    class Tenths(BaseModel):
        x: float = Field(multiple_of=0.1)

    try:
        client.beta.chat.completions.parse(model=MODEL, messages=ASK, response_format=Tenths, max_tokens=20)
        checks.not_ok("multipleOf 0.1: 400", "no error")
    except openai.BadRequestError as e:
        checks.check("multipleOf 0.1: 400 naming the keyword", "'multipleOf' 0.1 is not supported" in str(e), str(e))
    try:
        client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            max_tokens=20,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "^(a)\\1$"}},
            },
        )
        checks.not_ok("pattern with a backreference: 400", "no error")
    except openai.BadRequestError as e:
        checks.check(
            "pattern with a backreference: 400 with param response_format.json_schema.schema",
            e.body
            and e.body.get("param") == "response_format.json_schema.schema"
            and "backreference" in str(e),
            str(e),
        )
    try:
        client.completions.create(model=MODEL, prompt="x", max_tokens=5, extra_body={"guided_regex": "a(?=b)"})
        checks.not_ok("guided_regex with lookahead: 400", "no error")
    except openai.BadRequestError as e:
        checks.check("guided_regex with lookahead: 400 naming it", "lookahead" in str(e), str(e))


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


class GetTime(BaseModel):
    tz: str = Field(max_length=6)


TOOLS = [WEATHER, openai.pydantic_function_tool(GetTime)]


def test_tool_required():
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=200, seed=6
    )
    c = r.choices[0]
    calls = c.message.tool_calls or []
    # Parallel calls: a story model may keep adding calls until max_tokens ("length": the calls
    # begun, the last one's arguments cut off, as OpenAI's); a finished answer must be valid calls.
    ok = (c.finish_reason == "tool_calls" and len(calls) >= 1) or c.finish_reason == "length"
    if c.finish_reason == "length":
        calls = calls[:-1]
    for t in calls:
        args = json.loads(t.function.arguments)
        ok = ok and t.id and t.type == "function" and t.function.name in ("get_weather", "GetTime")
        ok = ok and (set(args) == {"city", "unit"} if t.function.name == "get_weather" else set(args) == {"tz"})
    checks.check("tool_choice required: tool_calls with valid arguments", ok, f"{r}")
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=200, seed=7,
    )
    calls = r.choices[0].message.tool_calls or []
    checks.check(
        "parallel_tool_calls false: exactly one call with valid arguments",
        r.choices[0].finish_reason == "tool_calls"
        and len(calls) == 1
        and isinstance(json.loads(calls[0].function.arguments), dict),
        f"{r}",
    )
    return r


def test_tool_named_stream():
    with client.beta.chat.completions.stream(
        model=MODEL,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "GetTime"}},
        max_tokens=200,
        seed=8,
    ) as s:
        final = s.get_final_completion()
    c = final.choices[0]
    calls = c.message.tool_calls or []
    checks.check(
        "named tool_choice, streamed: the SDK assembles one GetTime call with parsed arguments",
        c.finish_reason == "tool_calls"
        and len(calls) == 1
        and calls[0].function.name == "GetTime"
        and isinstance(calls[0].function.parsed_arguments, GetTime),
        f"{final}",
    )


def stream_deltas(**kw):
    """A streamed chat completion assembled by hand, as simple clients do: content joined, and per
    tool-call index the id, name and the arguments fragments joined; with the content deltas seen
    before the first call and the argument fragments per call."""
    content, calls, finish, content_deltas = "", {}, None, 0
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            d = ch.delta
            if d.content:
                content += d.content
                content_deltas += 0 if calls else 1
            for t in d.tool_calls or []:
                c = calls.setdefault(t.index, {"id": None, "name": None, "arguments": "", "pieces": 0})
                if t.id:
                    c["id"] = t.id
                if t.function and t.function.name:
                    c["name"] = t.function.name
                if t.function and t.function.arguments:
                    c["arguments"] += t.function.arguments
                    c["pieces"] += 1
            finish = ch.finish_reason or finish
    return content, [calls[k] for k in sorted(calls)], finish, content_deltas


def same_as_whole(kw, label):
    """The streamed answer (by hand and through the SDK's stream helper) equals the whole one (the
    calls' ids differ: they carry the response's id)."""
    whole = client.chat.completions.create(**kw).choices[0]
    want = [(t.function.name, t.function.arguments) for t in whole.message.tool_calls or []]
    content, calls, finish, content_deltas = stream_deltas(**kw)
    got = [(c["name"], c["arguments"]) for c in calls]
    ids = [c["id"] for c in calls]
    checks.check(
        f"{label}, streamed: deltas assemble to the non-streamed answer",
        got == want
        and finish == whole.finish_reason
        and content == (whole.message.content or "")
        and all(i and i.startswith("call_") for i in ids)
        and len(set(ids)) == len(ids),
        f"stream {content!r} {got} {ids} {finish} / whole {whole}",
    )
    if whole.finish_reason == "length":  # the SDK's helper refuses cut-off answers by design
        return whole, calls, content_deltas
    with client.beta.chat.completions.stream(**kw) as s:
        final = s.get_final_completion().choices[0]
    sdk = [(t.function.name, t.function.arguments) for t in final.message.tool_calls or []]
    checks.check(
        f"{label}, streamed: the SDK's ChatCompletionStreamState assembles the same calls",
        sdk == want and final.finish_reason == whole.finish_reason,
        f"sdk {final} / whole {whole}",
    )
    return whole, calls, content_deltas


def test_tool_stream_incremental():
    # seeds 6 and 10 keep adding calls until max_tokens; one call (parallel_tool_calls false) ends
    for seed, parallel in ((6, True), (10, True), (7, False), (13, False)):
        kw = dict(
            model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=parallel,
            max_tokens=200, seed=seed,
        )
        label = f"tool_choice required (seed {seed}, parallel {parallel})"
        whole, calls, _ = same_as_whole(kw, label)
        checks.check(
            f"{label}, streamed: arguments arrive in several fragments",
            bool(calls) and all(c["pieces"] > 1 for c in calls),
            f"{calls}",
        )
    for seed in (11, 12):
        kw = dict(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="auto", max_tokens=24, seed=seed)
        whole, calls, content_deltas = same_as_whole(kw, f"tool_choice auto (seed {seed})")
        if whole.message.content and len(whole.message.content) > 4:
            checks.check(
                f"tool_choice auto (seed {seed}), streamed: the text streams (several deltas)",
                content_deltas > 1,
                f"{content_deltas} deltas for {whole.message.content!r}",
            )


def stream_logprobs(**kw):
    """The logprobs.content lists of a streamed answer's chunks joined, as (token, logprob) pairs,
    and whether every chunk that carried a tool call had none."""
    got, calls_bare = [], True
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            if ch.delta.tool_calls:
                calls_bare = calls_bare and ch.logprobs is None
            elif ch.logprobs and ch.logprobs.content:
                got += [(t.token, t.logprob) for t in ch.logprobs.content]
    return got, calls_bare


def test_tool_logprobs():
    # logprobs.content lists the message content's tokens, none of a call's (OpenAI: "message
    # content tokens"); streamed, the chunks' lists join to the same list
    cases = [("auto", dict(tool_choice="auto", max_tokens=24, seed=11)),
             ("required", dict(tool_choice="required", parallel_tool_calls=False, max_tokens=200, seed=7))]
    for label, extra in cases:
        kw = dict(model=MODEL, messages=ASK, tools=TOOLS, logprobs=True, top_logprobs=2, **extra)
        whole = client.chat.completions.create(**kw)
        c = whole.choices[0]
        want = [(t.token, t.logprob) for t in c.logprobs.content or []]
        got, calls_bare = stream_logprobs(**kw)
        tops = all(1 <= len(t.top_logprobs) <= 2 for t in c.logprobs.content or [])
        if c.message.tool_calls:  # the calls' tokens are not listed: only what came before them
            listed_ok = len(want) < whole.usage.completion_tokens
            listed_ok = listed_ok and "".join(t for t, _ in want).startswith(c.message.content or "")
        else:
            listed_ok = len(want) == whole.usage.completion_tokens
        checks.check(
            f"tools ({label}) with logprobs: the content's tokens listed, streamed the same list",
            got == want and calls_bare and tops and listed_ok and (label != "required" or not want),
            f"stream {got} / whole {whole}",
        )


def test_tool_multi_turn(first):
    call = first.choices[0].message.tool_calls[0]
    msgs = ASK + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 degrees"},
    ]
    r = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, max_tokens=16, seed=9)
    checks.check(
        "multi-turn with a tool result: answered",
        r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
        f"{r}",
    )
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=8)
    checks.check(
        "tool_choice none: plain content",
        r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "length",
        f"{r}",
    )
    try:
        client.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, max_tokens=8,
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
        checks.not_ok("unknown named tool: 400", "no error")
    except openai.BadRequestError as e:
        checks.check("unknown named tool: 400", "nope" in str(e), str(e))


def test_tools():
    first = test_tool_required()
    test_tool_named_stream()
    test_tool_stream_incremental()
    test_tool_logprobs()
    test_tool_multi_turn(first)


for name, fn in [
    ("parse", test_parse),
    ("parse stream", test_parse_stream),
    ("json_object", test_json_object_and_n),
    ("ranges, patterns, formats", test_ranges_patterns_formats),
    ("fraction bounds, multiples", test_fraction_bounds_multiples),
    ("bad schemas", test_bad_schemas),
    ("tools", test_tools),
]:
    checks.run(name, fn)

sys.exit(finish(checks))
