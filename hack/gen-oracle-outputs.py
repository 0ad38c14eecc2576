#!/usr/bin/env python3
"""Reference outputs of llama.cpp (the oracle: llama-cpp-python from hack/oracle.sh) for
tests/engine/test_model_oracle.c, written to tests/testdata/oracle/<case>.json.

Cases are tiny random-weight models of every architecture the engine reads, generated with
`cinfer-engine gen-model` (seeded: the test regenerates the same files, so only these outputs are
committed), and the real models in ../shared/models/. For each case and prompt the file holds:
  - tokens: llama.cpp's tokenization of the prompt text (BOS added, special tokens parsed);
  - logits: per prompt position, the top TOPK (6) [id, logit] pairs, the row's maximum, sum and a signed
    checksum (sum of s_i * logit_i, s_i = +-1 from checksum_sign below) over all n_vocab logits;
  - greedy: N_GREEDY tokens of greedy continuation (argmax of llama.cpp's logits, one token per
    step), with each step's top-2 [id, logit, id, logit], so the test compares tokens only where
    the margin is clear.
llama.cpp runs on the CPU with its defaults otherwise (F16 KV cache, flash attention off, the
context padded to 256, which picks long-rope factors as n_ctx_seq does).

  hack/gen-oracle-outputs.py [--only REGEX] [--engine build/bin/cinfer-engine]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
OUT = os.path.join(ROOT, "tests", "testdata", "oracle")
TOPK = 6
N_GREEDY = 16

# The tiny models' common shape: 2 layers, GQA (4 heads over 2 KV heads), a 512-token byte-level
# vocabulary; weights spread wide enough (std 0.08) that logits are confident, norm gains spread
# (0.1) so a gain applied to the wrong vector shows.
TINY = ["--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "128",
        "--vocab-size", "512", "--context-length", "1024", "--std", "0.08", "--norm-std", "0.1"]

TEXT_PROMPTS = ["Once upon a time", "The quick brown fox jumps over"]

# name -> gen-model arguments (beyond TINY and --type), and llama.cpp's n_ctx
ARCHS = {
    "llama": ([], 256),
    "llama-tied-llama3rope": (["--tied-output", "--rope-scaling", "llama3", "--rope-factor", "8",
                               "--rope-orig-context", "64"], 256),
    "llama-linear": (["--rope-scaling", "linear", "--rope-factor", "2"], 256),
    "llama-moe": (["--experts", "4", "--experts-used", "2"], 256),
    "qwen2": ([], 256),
    "qwen2-yarn": (["--rope-scaling", "yarn", "--rope-factor", "4", "--rope-orig-context", "128"],
                   256),
    "qwen3": (["--head-dim", "32"], 256),
    "qwen2moe": (["--experts", "4", "--experts-used", "2", "--expert-ffn", "64",
                  "--shared-ffn", "96"], 256),
    "qwen3moe": (["--experts", "8", "--experts-used", "3", "--expert-ffn", "32",
                  "--head-dim", "32"], 256),
    "gemma2": (["--head-dim", "32", "--sliding-window", "8", "--attn-softcap", "2",
                "--final-softcap", "3"], 256),
    "gemma3": (["--layers", "3", "--head-dim", "32", "--sliding-window", "8", "--swa-pattern", "2",
                "--rope-scaling", "linear", "--rope-factor", "8"], 256),
    "phi3-short": (["--rope-scaling", "longrope", "--rope-factor", "4",
                    "--rope-orig-context", "256"], 256),
    "phi3-long": (["--rope-scaling", "longrope", "--rope-factor", "4",
                   "--rope-orig-context", "256"], 512),
    # rows of 256 and 512 so the K-quants' 256-element blocks (and IQ4_XS's) apply
    "llama-wide": (["--dim", "256", "--ffn", "512"], 256),
}
# weight types per architecture: every architecture in F32 and Q8_0, llama in every type gen-model
# writes at this shape (rows of 64 or 128: the 256-wide K-quant blocks fall back to F32 there)
TYPES = {"llama": ["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"],
         "llama-wide": ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs"]}
DEFAULT_TYPES = ["f32", "q8_0"]

STORIES_PROMPTS = ["Once upon a time", "", "Lily and Ben went to the park. They",
                   "The cat sat on the mat and"]
SHARED_CASES = {
    "stories260K-f32": ("models/tinyllamas/stories260K.gguf", STORIES_PROMPTS),
    "stories260K-f16": ("models/tinyllamas/stories260K-F16.gguf", STORIES_PROMPTS),
    "stories260K-q8_0": ("models/tinyllamas/stories260K-Q8_0.gguf", STORIES_PROMPTS),
    "stories260K-q4_0": ("models/tinyllamas/stories260K-Q4_0.gguf", STORIES_PROMPTS),
    "stories260K-moe-identical": ("models/moe/stories260K-moe4x-top2-identical.gguf",
                                  STORIES_PROMPTS[:2]),
    "stories260K-moe-noise": ("models/moe/stories260K-moe4x-top2-noise.gguf", STORIES_PROMPTS),
    "smollm2-q4_1": ("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                     ["The capital of France is",
                      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"]),
}


def checksum_sign(n):
    """+1/-1 per vocabulary index: bit 16 of i * 2654435761 (mod 2^32), as the test computes it."""
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    return np.where((h >> np.uint64(16)) & np.uint64(1), -1.0, 1.0)


def row_summary(row, sign):
    row = np.asarray(row, dtype=np.float64)
    top = np.argsort(-row, kind="stable")[:TOPK]
    return {"top": [[int(i), round(float(row[i]), 5)] for i in top],
            "max": round(float(row.max()), 5), "sum": round(float(row.sum()), 4),
            "chk": round(float((row * sign).sum()), 4)}


def run_case(name, path, n_ctx, prompts, model):
    llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=2,
                          logits_all=True, flash_attn=False, verbose=False)
    n_vocab = llm.n_vocab()
    sign = checksum_sign(n_vocab)
    out = {"generator": "hack/gen-oracle-outputs.py",
           "oracle": "llama-cpp-python " + llama_cpp.__version__, "case": name, "model": model,
           "n_ctx": llm.n_ctx(), "n_vocab": n_vocab, "topk": TOPK, "prompts": []}
    for text in prompts:
        llm.reset()
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        llm.eval(toks)
        rows = [row_summary(llm.scores[i], sign) for i in range(len(toks))]
        greedy, top2 = [], []
        for _ in range(N_GREEDY):
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            order = np.argsort(-row, kind="stable")[:2]
            t = int(order[0])
            greedy.append(t)
            top2.append([int(order[0]), round(float(row[order[0]]), 5),
                         int(order[1]), round(float(row[order[1]]), 5)])
            llm.eval([t])
        out["prompts"].append({"text": text, "tokens": [int(t) for t in toks], "logits": rows,
                               "greedy": greedy, "greedy_top2": top2})
    del llm
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("oracle:", name, "->", os.path.relpath(os.path.join(OUT, name + ".json"), ROOT))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="regex of case names")
    ap.add_argument("--engine", default=os.path.join(ROOT, "build", "bin", "cinfer-engine"))
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for arch, (extra, n_ctx) in ARCHS.items():
            for ty in TYPES.get(arch, DEFAULT_TYPES):
                name = "tiny-%s-%s" % (arch, ty)
                if a.only and not re.search(a.only, name):
                    continue
                args = ["--arch", arch.split("-")[0]] + TINY + ["--type", ty] + extra
                path = os.path.join(tmp, name + ".gguf")
                subprocess.run([a.engine, "gen-model", "--out", path, "--log-level", "error"] +
                               args, check=True)
                run_case(name, path, n_ctx, TEXT_PROMPTS, {"gen": args})
                os.unlink(path)
        for name, (rel, prompts) in SHARED_CASES.items():
            if a.only and not re.search(a.only, name):
                continue
            path = os.path.join(SHARED, rel)
            if not os.path.exists(path):
                print("oracle: SKIP", name, "(no", rel + ")", file=sys.stderr)
                continue
            run_case(name, path, 256, prompts, {"shared": rel})


if __name__ == "__main__":
    main()
