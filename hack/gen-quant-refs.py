#!/usr/bin/env python3
"""Reference outputs for the tensor-type tests (tests/engine/test_quant.c), from the oracle: ggml
itself (libggml-base from llama-cpp-python: ggml_quantize_chunk, the type traits' to_float, and
llama_model_quantize) and gguf-py (gguf.quants). `make test` reads the files this writes and never
runs this script.

    $(hack/oracle.sh) hack/gen-quant-refs.py build/bin/cinfer-engine

Writes
  tests/testdata/quant/quant-ref.gguf  (gguf-py's writer)
    input               F32 [512, 24]: rows of different kinds (normal, huge, tiny, zero, constant,
                        spikes, exact ties, NaN, +-inf, subnormal and overflowing scales)
    enc.<type>          <type>: ggml_quantize_chunk(<type>, input) (what llama.cpp's quantizer writes
                        without an importance matrix; Q8_K: quantize_row_q8_K_ref)
    blocks.<type>       <type>: random blocks, some with zero, subnormal, huge, infinite and NaN
                        scales
    dec.<type>          F32: gguf.quants.dequantize(blocks.<type>), checked here to equal ggml's
                        to_float bit for bit (Q8_K, which gguf-py lacks: ggml's only)
    real.<name>.sha256  metadata: sha256 of gguf-py's dequantization (F32, row-major) of each
                        quantized matrix of ../shared/testdata/quant/quant-fixtures-real-tensors.gguf
  tests/testdata/quant/llamacpp-quantize.json
    a tiny random llama written by `cinfer-engine gen-model` (the options are recorded) quantized by
    llama_model_quantize to every file type: per tensor its type and the sha256 of its bytes.
  tests/testdata/quant/llamacpp-logits.gguf
    for the file types of LOGIT_FTYPES (together every tensor type), llama.cpp's run of that file:
    logits.<ftype> F32 [vocab, 8] at every position of an 8-token prompt (F16 KV cache, llama.cpp's
    default), and metadata <ftype>.greedy (16 greedy tokens after it) and <ftype>.margin (each
    step's top-2 logit margin); prompt (the token ids).
Every encoder is also compared with gguf.quants.quantize where gguf-py has one (finite rows)."""
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import warnings

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OUT = os.path.join(ROOT, "tests", "testdata", "quant")
SHARED = os.environ.get("CINFER_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
REAL = os.path.join(SHARED, "testdata", "quant", "quant-fixtures-real-tensors.gguf")

ROWS, COLS = 24, 512
# every type the engine encodes (the order tests report them in)
TYPES = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K,
         T.Q6_K, T.Q8_K, T.IQ4_NL, T.IQ4_XS]
# llama_ftype values llama_model_quantize is asked for (all-type files and the usual mixtures)
FTYPES = {"F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
          "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
          "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32}
# file types whose llama.cpp logits are recorded: every tensor type appears in at least one
LOGIT_FTYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M",
                "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"]
PROMPT = [1, 72, 101, 108, 108, 111, 44, 32]  # <s> then byte-level pieces of the gen-model vocab
N_GREEDY = 16
GEN_MODEL = {"dim": 256, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab_size": 512,
             "context_length": 256, "seed": 7}


class TypeTraits(ctypes.Structure):
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


def ggml():
    import llama_cpp
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    lib.quantize_row_q8_K_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lib


def row_bytes(t, n):
    blck, size = gguf.GGML_QUANT_SIZES[t]
    return n // blck * size


def inputs():
    rng = np.random.default_rng(20261201)
    x = (rng.standard_normal((ROWS, COLS)) * 0.02).astype(np.float32)
    c = np.arange(COLS)
    x[8] *= 1e4                                               # large weights
    x[9] = 0                                                  # all zero
    x[10][c % 37 == 0] = 3.0                                  # outliers
    x[11] = 1.0                                               # constant
    x[12] = np.abs(x[12])                                     # all positive (no negative min)
    x[13] = -np.abs(x[13])                                    # all negative
    x[14] *= 1e-20                                            # below K-quants' zero threshold
    x[15][c % 64 < 32] = 0                                    # half the sub-blocks zero
    x[16][c % 16 == 5] = 60000.0                              # near the f16 maximum
    x[17] = (c % 7) * 0.125 - 0.375                           # few levels: exact ties
    x[18][c % 100 == 3] = np.nan
    x[19][c % 100 == 3] = np.inf
    x[20][c % 50 == 3] = -np.inf
    x[21] *= 1e-5
    x[21][c % 32 == 0] = 1e5                                  # one large value per block
    x[22] *= 1e-36                                            # scales underflow f16
    x[23] *= 1e30                                             # scales overflow f16
    return x


def quantize(lib, t, x):
    out = np.zeros(ROWS * row_bytes(t, COLS), dtype=np.uint8)
    src = np.ascontiguousarray(x, dtype=np.float32)
    if t == T.Q8_K:
        lib.quantize_row_q8_K_ref(src.ctypes.data, out.ctypes.data, src.size)
    else:
        lib.ggml_quantize_chunk(int(t), src.ctypes.data, out.ctypes.data, 0, ROWS, COLS, None)
    return out.reshape(ROWS, row_bytes(t, COLS))


def ggml_dequant(lib, t, raw, n):
    addr = lib.ggml_get_type_traits(int(t)).contents.to_float
    if t == T.Q8_K:  # no to_float in ggml's table: its dequantizer directly
        addr = ctypes.cast(lib.dequantize_row_q8_K, ctypes.c_void_p).value
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(addr)
    y = np.zeros(n, dtype=np.float32)
    raw = np.ascontiguousarray(raw)
    fn(raw.ctypes.data, y.ctypes.data, n)
    return y


def same_bits(a, b):
    a, b = a.ravel(), b.ravel()
    both_nan = np.isnan(a) & np.isnan(b)
    return bool(np.all((a.view(np.uint32) == b.view(np.uint32)) | both_nan))


# Offsets of the f16 scale fields of each block type (d, and dmin / m where they exist).
SCALES = {T.F16: [], T.BF16: [], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2],
          T.Q8_0: [0], T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2],
          T.Q6_K: [208], T.IQ4_NL: [0], T.IQ4_XS: [0]}
SPECIAL = [0x0000, 0x8000, 0x0001, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00]


def random_blocks(t, rng):
    blck, size = gguf.GGML_QUANT_SIZES[t]
    n_blocks = 64 if blck == 32 else 16 if blck == 256 else 256
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    if t in (T.F16, T.BF16):
        return raw.reshape(1, -1)
    if t == T.Q8_K:
        raw[:, 0:4] = np.frombuffer(
            (rng.standard_normal(n_blocks) * 1e-3).astype(np.float32).tobytes(), np.uint8).reshape(-1, 4)
        return raw.reshape(1, -1)
    for i in range(n_blocks):
        for off in SCALES[t]:
            h = SPECIAL[i] if i < len(SPECIAL) else int(np.float16(rng.uniform(-2e-3, 2e-3)).view(np.uint16))
            raw[i, off:off + 2] = [h & 0xFF, h >> 8]
    return raw.reshape(1, -1)


def check_gguf_py_quantize(t, x, enc):
    """gguf-py's encoder, where it has one, must give ggml's bytes on the finite rows."""
    try:
        q = gguf.quants.quantize(x, t)
    except NotImplementedError:
        return None
    q = np.ascontiguousarray(q).view(np.uint8).reshape(ROWS, -1)  # F16 comes back as float16
    finite = [r for r in range(ROWS) if np.all(np.isfinite(x[r])) and r not in (22, 23)]
    bad = [r for r in finite if not np.array_equal(q[r], enc[r])]
    if bad:
        sys.exit(f"gguf-py's {t.name} encoder disagrees with ggml on rows {bad}")
    return len(finite)


def real_hashes(lib):
    out = {}
    if not os.path.exists(REAL):
        sys.exit(f"{REAL} missing: the real-tensor hashes need ../shared")
    r = gguf.GGUFReader(REAL)
    for ten in r.tensors:
        if ten.tensor_type in (T.F32,):
            continue
        deq = gguf.quants.dequantize(ten.data, ten.tensor_type).astype(np.float32)
        n = int(np.prod(ten.shape))
        if not same_bits(deq.ravel(), ggml_dequant(lib, ten.tensor_type, ten.data, n)):
            sys.exit(f"{ten.name}: gguf-py and ggml dequantize differently")
        out[ten.name] = hashlib.sha256(np.ascontiguousarray(deq).tobytes()).hexdigest()
    return out


def llamacpp_logits(path, w, name):
    """llama.cpp's prompt logits and greedy continuation of one file, into the writer."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=64, n_threads=2, logits_all=True,
                          verbose=False)
    llm.eval(PROMPT)
    w.add_tensor(f"logits.{name}", np.ascontiguousarray(llm.scores[:len(PROMPT)], dtype=np.float32))
    greedy, margin = [], []
    for _ in range(N_GREEDY):
        row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        top = np.argsort(row)[::-1]
        greedy.append(int(top[0]))
        margin.append(float(row[top[0]] - row[top[1]]))
        llm.eval([greedy[-1]])
    w.add_array(f"{name}.greedy", greedy)
    w.add_array(f"{name}.margin", margin)
    del llm


def llamacpp_quantize(engine):
    import llama_cpp
    result = {"gen_model": GEN_MODEL, "files": {}}
    lw = gguf.GGUFWriter(os.path.join(OUT, "llamacpp-logits.gguf"), "cinfer-llamacpp-logits")
    lw.add_array("prompt", PROMPT)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "f32.gguf")
        g = GEN_MODEL
        subprocess.run([engine, "gen-model", "--out", src, "--type", "f32", "--dim", str(g["dim"]),
                        "--layers", str(g["layers"]), "--heads", str(g["heads"]), "--kv-heads",
                        str(g["kv_heads"]), "--ffn", str(g["ffn"]), "--vocab-size",
                        str(g["vocab_size"]), "--context-length", str(g["context_length"]),
                        "--seed", str(g["seed"]), "--log-level", "error"], check=True)
        result["source"] = {t.name: hashlib.sha256(t.data.tobytes()).hexdigest()
                            for t in gguf.GGUFReader(src).tensors}
        for name, ftype in FTYPES.items():
            dst = os.path.join(tmp, f"{name}.gguf")
            p = llama_cpp.llama_model_quantize_default_params()
            p.ftype = ftype
            p.nthread = 2
            if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) != 0:
                sys.exit(f"llama_model_quantize {name} failed")
            result["files"][name] = {
                t.name: {"type": t.tensor_type.name, "sha256": hashlib.sha256(t.data.tobytes()).hexdigest()}
                for t in gguf.GGUFReader(dst).tensors}
            if name in LOGIT_FTYPES:
                llamacpp_logits(dst, lw, name)
    lw.write_header_to_file()
    lw.write_kv_data_to_file()
    lw.write_tensors_to_file()
    lw.close()
    return result


def main():
    warnings.simplefilter("ignore", RuntimeWarning)  # the edge rows overflow and NaN on purpose
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    engine = sys.argv[1]
    lib = ggml()
    x = inputs()
    rng = np.random.default_rng(7)
    os.makedirs(OUT, exist_ok=True)
    w = gguf.GGUFWriter(os.path.join(OUT, "quant-ref.gguf"), "cinfer-quant-ref")
    w.add_tensor("input", x)
    matched = {}
    for t in TYPES:
        enc = quantize(lib, t, x)
        w.add_tensor(f"enc.{t.name}", enc, raw_dtype=t)
        n = check_gguf_py_quantize(t, x, enc)
        if n is not None:
            matched[t.name] = n
        if t == T.Q8_K:
            blocks = random_blocks(t, rng)
            n = blocks.size // 292 * 256
            dec = ggml_dequant(lib, t, blocks, n)
        else:
            blocks = random_blocks(t, rng)
            dec = gguf.quants.dequantize(blocks, t).astype(np.float32).ravel()
            if not same_bits(dec, ggml_dequant(lib, t, blocks, dec.size)):
                sys.exit(f"{t.name}: gguf-py and ggml dequantize the random blocks differently")
        w.add_tensor(f"blocks.{t.name}", blocks, raw_dtype=t)
        w.add_tensor(f"dec.{t.name}", dec.reshape(1, -1))
    for name, h in real_hashes(lib).items():
        w.add_string(f"real.{name}.sha256", h)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(OUT, "llamacpp-quantize.json"), "w") as f:
        json.dump(llamacpp_quantize(engine), f, indent=1, sort_keys=True)
        f.write("\n")
    print("gguf-py encoders agreeing with ggml (finite rows):", matched)


if __name__ == "__main__":
    main()
