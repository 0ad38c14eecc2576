#!/usr/bin/env python3
"""Quantizes a GGUF with llama.cpp's own quantizer (llama_model_quantize, no importance matrix), e.g.
to the Q4_K_M mixture people download, for side-by-side benchmarks and references:

    $(hack/oracle.sh) hack/llamacpp-quantize.py IN.gguf OUT.gguf Q4_K_M [--threads 2]

The file type is a llama_ftype name without MOSTLY_ (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_M,
Q4_K_S, Q4_K_M, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, F16, BF16, ...)."""
import argparse
import ctypes
import sys

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("ftype")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    name = "LLAMA_FTYPE_MOSTLY_" + a.ftype.upper()
    if not hasattr(llama_cpp, name):
        sys.exit(f"llamacpp-quantize: unknown file type {a.ftype}")
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, name)
    p.nthread = a.threads
    if llama_cpp.llama_model_quantize(a.src.encode(), a.dst.encode(), ctypes.byref(p)) != 0:
        sys.exit(f"llamacpp-quantize: llama_model_quantize failed for {a.src}")


if __name__ == "__main__":
    main()
