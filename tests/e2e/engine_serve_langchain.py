"""`cinfer-engine serve` through LangChain (langchain-openai), run by engine_serve.sh.

Usage: engine_serve_langchain.py main=PORT
  main: --context-length 256, served as $ENGINE_SERVE_MODEL_NAME
LangChain's OpenAI LLM sends its prompts as one batched /v1/completions request (a list of
strings) and maps the choices back by index; ChatOpenAI streams with
stream_options.include_usage. Nothing here needs the network: LangSmith tracing stays off and no
tokenizer is fetched (tiktoken is only used for max_tokens=-1, which this does not set).
Prints `ok - NAME` / `not ok - NAME: DETAIL` per check.
"""

import os
import sys

os.environ["LANGCHAIN_TRACING_V2"] = "false"
os.environ["LANGSMITH_TRACING"] = "false"

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_openai import ChatOpenAI, OpenAI  # noqa: E402
from openai import OpenAI as SDK  # noqa: E402

from engine_serve_lib import SLOW, Checks, finish, servers_from_argv  # noqa: E402

checks = Checks()
servers = servers_from_argv(sys.argv[1:])
MODEL = os.environ["ENGINE_SERVE_MODEL_NAME"]
BASE = f"http://127.0.0.1:{servers['main'][0]}/v1"
PROMPTS = ["Once upon a time", "The little dog", "One day, a girl"]

# The same answers straight from the SDK, one request per prompt, for comparison.
sdk = SDK(base_url=BASE, api_key="x", max_retries=0, timeout=60 * SLOW)


def alone(prompt, max_tokens):
    r = sdk.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0)
    return r.choices[0].text


def test_llm_generate_and_batch():
    llm = OpenAI(base_url=BASE, api_key="x", model=MODEL, temperature=0, max_tokens=12,
                 max_retries=0, timeout=60 * SLOW)
    want = [alone(p, 12) for p in PROMPTS]
    res = llm.generate(PROMPTS)
    got = [g[0].text for g in res.generations]
    checks.check("OpenAI.generate(3 prompts): one generation per prompt, in order, as alone",
                 got == want, f"{got} vs {want}")
    usage = (res.llm_output or {}).get("token_usage", {})
    checks.check("OpenAI.generate: token_usage summed over the batch",
                 usage.get("completion_tokens", 0) > 0
                 and usage.get("total_tokens") == usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
                 f"{res.llm_output}")
    out = llm.batch(PROMPTS)
    checks.check("OpenAI.batch(3 prompts): the same texts", out == want, f"{out} vs {want}")
    two = OpenAI(base_url=BASE, api_key="x", model=MODEL, temperature=1.0, max_tokens=8, n=2,
                 max_retries=0, timeout=60 * SLOW, seed=3)
    res = two.generate(PROMPTS[:2])
    checks.check("OpenAI(n=2).generate(2 prompts): two generations per prompt",
                 [len(g) for g in res.generations] == [2, 2]
                 and all(x.text for g in res.generations for x in g),
                 f"{res.generations}")


def test_chat_invoke_and_stream():
    chat = ChatOpenAI(base_url=BASE, api_key="x", model=MODEL, temperature=0, max_tokens=16,
                      max_retries=0, timeout=60 * SLOW)
    msg = chat.invoke([HumanMessage(content="Tell me a story about a cat.")])
    checks.check("ChatOpenAI.invoke: an AIMessage with content and usage metadata",
                 isinstance(msg, AIMessage) and msg.content
                 and (msg.usage_metadata or {}).get("output_tokens") == 16,
                 f"{msg!r}")
    # stream_usage: LangChain asks for stream_options.include_usage only against api.openai.com
    # unless told to.
    streamer = ChatOpenAI(base_url=BASE, api_key="x", model=MODEL, temperature=0, max_tokens=16,
                          max_retries=0, timeout=60 * SLOW, stream_usage=True)
    chunks = list(streamer.stream([HumanMessage(content="Tell me a story about a cat.")]))
    text = "".join(c.content for c in chunks)
    usage = [c.usage_metadata for c in chunks if c.usage_metadata]
    checks.check("ChatOpenAI.stream: the same content as invoke, usage from the final chunk",
                 text == msg.content and usage and usage[-1].get("output_tokens") == 16,
                 f"{text!r} vs {msg.content!r}, usage {usage}")
    with_lp = chat.bind(logprobs=True, top_logprobs=2)
    m = with_lp.invoke("Hi")
    lp = (m.response_metadata or {}).get("logprobs") or {}
    checks.check("ChatOpenAI with logprobs: response_metadata carries one entry per token",
                 len(lp.get("content") or []) == 16, f"{m.response_metadata}")


checks.run("langchain OpenAI", test_llm_generate_and_batch)
checks.run("langchain ChatOpenAI", test_chat_invoke_and_stream)
sys.exit(finish(checks))
