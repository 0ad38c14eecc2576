#!/usr/bin/env python3
"""llama.cpp's tokenizer speed on a text, for engine/BENCHMARKS.md's tokenizer section (the other side
of hack/router-hash-bench.c tokenize): llama_tokenize (add BOS, parse special) of TEXT N times
through llama-cpp-python with the vocabulary only, one thread. Run with the oracle's python:

    $(hack/oracle.sh) hack/tokenizer-bench-llamacpp.py MODEL.gguf TEXT.txt N
"""
import sys
import time

import llama_cpp


def main():
    model, text_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    text = open(text_path, "rb").read()
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    ids = llm.tokenize(text, add_bos=True, special=True)
    t0 = time.perf_counter()
    for _ in range(n):
        llm.tokenize(text, add_bos=True, special=True)
    dt = time.perf_counter() - t0
    print(f"llama.cpp: {n} runs, {len(ids)} tokens each, {dt * 1e6 / n:.1f} us per run, "
          f"{len(ids) * n / dt:.0f} tokens/s")


if __name__ == "__main__":
    main()
