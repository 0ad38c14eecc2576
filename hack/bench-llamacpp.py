#!/usr/bin/env python3
"""llama.cpp's prefill and decode throughput on a GGUF file, measured the way `cinfer-engine bench`
measures ours (llama-bench's definitions), through llama-cpp-python (the oracle venv):

    $(hack/oracle.sh) hack/bench-llamacpp.py MODEL.gguf [--threads 2] [--prompt-tokens 512]
        [--gen-tokens 128] [--repetitions 3]

pp: one sequence's prompt of --prompt-tokens synthetic tokens evaluated in batches of 512 from an
empty context (logits of the last token only). tg: --gen-tokens tokens decoded one at a time from an
empty context after one start token (batch 1: llama-cpp-python runs one sequence). Each is the
median of --repetitions runs after a warm-up; one JSON line per model. The Python per-token overhead
(one call and a copy of the logits row) is included in tg: about 20 us per token, under 1% of a
134M model's decode step here."""
import argparse
import json
import statistics
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--repetitions", type=int, default=3)
    a = ap.parse_args()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=max(1024, a.prompt_tokens + a.gen_tokens + 8),
                          n_batch=512, n_ubatch=512, n_threads=a.threads,
                          n_threads_batch=a.threads, verbose=False)
    n_vocab = llm.n_vocab()
    prompt = [(i * 7919 + 13) % (n_vocab - 3) + 3 for i in range(a.prompt_tokens)]

    # reset() rewinds to position 0; eval then drops the cache from there (kv_cache_seq_rm)
    # Each run returns (tokens per wall second, tokens per CPU second of the process times the thread
    # count: an estimate of the quiet-machine rate on a loaded one, as cinfer-engine bench's
    # *_cpu_tok_s; ggml's workers spin while waiting, so it is an optimistic one).
    def timed(fn, n):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        w, c = time.perf_counter() - w0, time.process_time() - c0
        return n / w, n / (c / a.threads)

    def pp():
        llm.reset()
        return timed(lambda: llm.eval(prompt), a.prompt_tokens)

    def tg():
        llm.reset()
        llm.eval([llm.token_bos()])

        def loop():
            for i in range(a.gen_tokens):
                llm.eval([prompt[i % len(prompt)]])

        return timed(loop, a.gen_tokens)

    pp(), tg()  # warm-up
    pps = [pp() for _ in range(a.repetitions)]
    tgs = [tg() for _ in range(a.repetitions)]
    med = lambda runs, i: round(statistics.median(r[i] for r in runs), 1)
    print(json.dumps({"engine": "llama.cpp", "model": a.model, "threads": a.threads,
                      "pp_tokens": a.prompt_tokens, "pp_tok_s": med(pps, 0),
                      "pp_cpu_tok_s": med(pps, 1), "pp_runs": [round(v[0], 1) for v in pps],
                      "tg_tokens": a.gen_tokens, "tg_tok_s": med(tgs, 0), "tg_cpu_tok_s": med(tgs, 1),
                      "tg_runs": [round(v[0], 1) for v in tgs]}), flush=True)


if __name__ == "__main__":
    main()
