/* The compute backend ops table: everything the model's forward pass needs, and nothing that knows
 * about requests, tokenizers or HTTP. The CPU backend (backend/cpu/) is plain C with SIMD chosen at run
 * time and is the reference; a CUDA backend (backend/cuda/, `make CUDA=1`) implements the same table
 * and is tested against it. Only backend/registry.c names the implementations.
 *
 * Memory: activations and the KV cache live in backend memory obtained from ops->alloc (host memory for
 * the CPU, device memory for CUDA). The model never dereferences them; it moves data in and out with
 * upload/download. Weights are described by host pointers into the GGUF mapping and "prepared" once:
 * the backend copies what it will read (the CPU repacks quantized matrices for its VNNI kernels and
 * copies the rest into its weight arena, advising the kernel to drop the mapped originals' pages, so
 * memory stays about the file size; CUDA copies them to the device). No op reads the mapping after
 * weight_prepare returns, so the model can unmap the file: a model file truncated or rewritten
 * under a running engine can neither fault it (SIGBUS) nor change its weights.
 *
 * Shapes are row-major, tokens outermost: x (n_tokens, dim) means x[t*dim + i].
 * All ops are called from the one inference thread, or from the lanes it runs (run_lanes); the
 * backend may use its own worker threads.
 * Ops return 0 or a negative err.h code (a CUDA failure becomes an error, never an abort). */
#ifndef CINFER_ENGINE_BACKEND_H
#define CINFER_ENGINE_BACKEND_H

#include "engine/gguf/quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct backend;

/* A weight matrix (rows, cols): y = W x computes `rows` outputs from `cols` inputs. A 1-D weight
 * (norm gains, biases) has rows = 1. `data` (the GGUF mapping, in the file's type) is borrowed for
 * the weight_prepare call only: the prepared weight never reads it again.
 * lookup_only: the weight is only ever read by get_rows (an untied embedding table), so the
 * backend need not prepare it for matmul (the CPU backend then does not repack it); matmul on
 * it still works.
 * lookup: get_rows reads it too (a tied embedding table, also the output matrix); implied by
 * lookup_only. Without either, get_rows may answer ERR_UNSUPPORTED (the CPU backend keeps only
 * the packed copy of a matrix it packs). */
struct backend_weight_desc {
    enum quant_type type;
    int64_t rows, cols;
    const void *data;
    bool lookup_only;
    bool lookup;
};

struct backend_weight; /* prepared weight, opaque; owned by the backend, freed by weight_free */

enum backend_rope_mode { BACKEND_ROPE_NORMAL = 0, BACKEND_ROPE_NEOX = 2 }; /* ggml's mode ids */

/* Rotary embedding as ggml_rope_ext computes it: dimension pair i of a token at position p turns by
 * theta_i = p * freq_base^(-2i/n_rot) / freq_factors[i]; with ext_factor 0 the angle is
 * freq_scale * theta_i, else YaRN's blend of that and theta_i (ramp between the correction dims that
 * beta_fast, beta_slow and n_ctx_orig give), with the magnitude also scaled by
 * 1 + 0.1 ln(1 / freq_scale); cos and sin are multiplied by attn_factor. */
struct backend_rope_params {
    enum backend_rope_mode mode;
    int n_rot;         /* dimensions rotated per head (usually head_dim) */
    float freq_base;   /* theta, e.g. 10000 */
    float freq_scale;  /* 1 / linear (or YaRN) scaling factor */
    float ext_factor;  /* YaRN extrapolation mix: 0 = off (none, linear, longrope), 1 = YaRN */
    float attn_factor; /* cos/sin magnitude: 1 unless YaRN or long-rope ask otherwise */
    float beta_fast, beta_slow; /* YaRN correction range (ggml's defaults 32 and 1) */
    int n_ctx_orig;             /* YaRN: the context the model was trained on */
    /* (n_rot / 2) host floats that divide each pair's frequency (Llama 3 rope_freqs, Phi-3 long or
     * short factors), borrowed for the call; NULL = none */
    const float *freq_factors;
};

/* Attention scores of one layer: s = scale * q.k, then, with softcap > 0, s = softcap *
 * tanh(s / softcap) (Gemma 2); a token at position pos attends to positions p <= pos, and with
 * window > 0 only to p > pos - window (sliding-window layers, llama.cpp's standard SWA mask). */
struct backend_attn_params {
    float scale;
    float softcap;
    int window;
};

/* One step's batch layout for paged attention. Every token belongs to one sequence and sits at a
 * position of that sequence; it attends causally to positions 0..pos of the same sequence, whose K/V
 * are found through that sequence's block table. Host pointers: the backend copies what it needs. */
struct backend_batch {
    int n_tokens;
    const int32_t *pos;          /* (n_tokens) position of each token in its sequence */
    const int32_t *seq;          /* (n_tokens) row of block_tables for each token */
    const int32_t *block_tables; /* (n_seqs, max_blocks) physical KV block ids */
    int n_seqs;
    int max_blocks;
    /* (n_tokens) KV slot to write: block_id * block_size + pos % block_size */
    const int64_t *slots;
};

/* Paged KV cache geometry; one cache per layer holds K and V for n_blocks * block_size tokens. */
struct backend_kv_desc {
    int n_layers;
    int n_blocks;
    int block_size;
    int n_kv_heads;
    int head_dim;
    enum quant_type type; /* QUANT_F32, QUANT_F16 or QUANT_Q8_0 (head_dim a multiple of 32) */
};

/* One lane of run_lanes: lane is 0..n-1; returns 0 or a negative err.h code. */
typedef int (*backend_lane_fn)(void *ctx, int lane);

struct backend_ops {
    const char *name;
    void (*destroy)(struct backend *b);

    /* Backend memory for activations. alloc returns new memory (zeroed) or NULL. */
    void *(*alloc)(struct backend *b, size_t bytes);
    void (*free)(struct backend *b, void *p);
    int (*upload)(struct backend *b, void *dst, const void *src_host, size_t bytes);
    int (*download)(struct backend *b, void *dst_host, const void *src, size_t bytes);

    int (*weight_prepare)(struct backend *b, const struct backend_weight_desc *desc,
                          struct backend_weight **out);
    void (*weight_free)(struct backend *b, struct backend_weight *w);
    /* Whether matmul on `w` converts its rows to floats on every call (the CPU backend's float path:
     * F32/F16/BF16 rows; the model then runs no lanes, each of which would redo that per weight).
     * Optional: NULL means no weight does. Any thread; `w` is borrowed. */
    bool (*weight_float_path)(struct backend *b, const struct backend_weight *w);

    /* KV cache storage for the whole model, committed (resident) before it returns, so that a
     * shortfall shows here rather than under load; kv_free releases it. */
    int (*kv_alloc)(struct backend *b, const struct backend_kv_desc *desc);
    void (*kv_free)(struct backend *b);

    /* out (n, cols) = rows `ids` of the embedding table `w` (rows = vocab), dequantized.
     * ERR_RANGE for an id out of range, ERR_UNSUPPORTED for a weight prepared without lookup. */
    int (*get_rows)(struct backend *b, const struct backend_weight *w, const int32_t *ids_host,
                    int n, float *out);
    /* y (n_tokens, w.rows) = x (n_tokens, w.cols) @ W^T. Every weight type; all tokens in one call.
     * x and y must not overlap. Quantized weights multiply activations quantized as ggml's
     * vec_dot_type (Q8_0 per 32 elements for the 32-element formats, Q8_K per 256 for the K-quants
     * and IQ4_XS), so results differ from a float reference by that rounding. */
    int (*matmul)(struct backend *b, const struct backend_weight *w, const float *x, float *y,
                  int n_tokens);
    /* y[i] = x @ W[i]^T for n weights of equal cols sharing the input (Q/K/V, gate/up), each
     * exactly as matmul computes it; lets a backend prepare x once and run the n as one job.
     * Optional: NULL means callers issue n matmuls. */
    int (*matmul_group)(struct backend *b, const struct backend_weight *const *w, int n,
                        const float *x, float *const *y, int n_tokens);
    /* y (n_tokens, dim) += bias (1, dim) */
    int (*add_bias)(struct backend *b, float *y, const struct backend_weight *bias, int n_tokens);
    /* y (n) += x (n) */
    int (*add)(struct backend *b, float *y, const float *x, size_t n);
    /* y (n_tokens, dim) = x / rms(x) * gain; eps inside the square root. y may equal x. */
    int (*rmsnorm)(struct backend *b, const float *x, const struct backend_weight *gain, float *y,
                   int n_tokens, int dim, float eps);
    /* Per-head RMS norm (qwen3 q/k norms): x (n_tokens * n_heads, head_dim) in place. */
    int (*rmsnorm_heads)(struct backend *b, float *x, const struct backend_weight *gain, int n_rows,
                         int head_dim, float eps);
    /* Rotary embedding in place on x (n_tokens, n_heads, head_dim) at positions pos_host. */
    int (*rope)(struct backend *b, float *x, const int32_t *pos_host, int n_tokens, int n_heads,
                int head_dim, const struct backend_rope_params *p);
    /* gate (n) = silu(gate) * up */
    int (*silu_mul)(struct backend *b, float *gate, const float *up, size_t n);
    /* gate (n) = gelu(gate) * up (GeGLU), gelu the tanh approximation evaluated as ggml's CPU
     * backend does: from an f16 table at gate rounded to f16, 0 below -10, identity above 10. */
    int (*gelu_mul)(struct backend *b, float *gate, const float *up, size_t n);
    /* x (n) *= s (Gemma's embedding scale sqrt(n_embd), query pre-scaling) */
    int (*scale)(struct backend *b, float *x, size_t n, float s);
    /* x (n) = cap * tanh(x * (1 / cap)) (Gemma 2 final logit soft-capping); cap > 0 */
    int (*softcap)(struct backend *b, float *x, size_t n, float cap);
    /* Mixture-of-experts routing (llama.cpp's build_moe_ffn with softmax gating): for each row of
     * logits (n_rows, n_expert) in backend memory, the softmax, the k experts of highest
     * probability in descending order into ids_host (n_rows, k), their probabilities into w_host
     * (n_rows, k), divided by their sum when `norm` (the sum clamped below at 2^-14 as there).
     * 1 <= k <= n_expert. */
    int (*moe_route)(struct backend *b, const float *logits, int n_rows, int n_expert, int k,
                     bool norm, int32_t *ids_host, float *w_host);
    /* out (n_rows, dim) = sum over j < k, in j order, of w_host[r * k + j] * x[r * k + j]: each
     * row's k expert outputs x (n_rows * k, dim) weighted and added as llama.cpp adds them. out
     * must not overlap x. */
    int (*moe_combine)(struct backend *b, const float *x, const float *w_host, int n_rows, int k,
                       int dim, float *out);
    /* x (n_rows, dim): row r *= silu(g[r]) / g[r] (the sigmoid gate of Qwen2-MoE's shared expert,
     * computed as llama.cpp does); g (n_rows) in backend memory. */
    int (*scale_rows_sigmoid)(struct backend *b, float *x, const float *g, int n_rows, int dim);
    /* Writes k, v (n_tokens, n_kv_heads * head_dim) of `layer` into the cache slots of `batch`.
     * ERR_BAD_STATE before kv_alloc, ERR_RANGE for a slot outside the cache (nothing is written then). */
    int (*kv_store)(struct backend *b, int layer, const float *k, const float *v,
                    const struct backend_batch *batch);
    /* out (n_tokens, n_heads, head_dim) = softmax(scores) V over each token's causal context
     * (within p->window) in the paged cache of `layer`, scores as backend_attn_params says (GQA:
     * n_heads / n_kv_heads query heads per KV head).
     * Every position 0..pos of each token's sequence must already be stored (kv_store this batch
     * first). With an F16 cache, q and the normalized probabilities are rounded to f16 before they
     * meet K and V, as llama.cpp's CPU backend does, so logits track its reference outputs. A Q8_0
     * cache holds each head's K/V row as ggml Q8_0 blocks (per 32 elements: an f16 scale and 32
     * int8 quants, quantized by kv_store) and attention reads their exact values d * q.
     * ERR_RANGE for a seq, pos or block id outside the tables or the cache. */
    int (*attention)(struct backend *b, int layer, const float *q, float *out,
                     const struct backend_batch *batch, int n_heads,
                     const struct backend_attn_params *p);
    /* dst (n, dim) = rows `idx_host` of src (n_src, dim); selects the positions whose logits we need.
     * Indices must be < n_src (the caller's invariant; negative ones give ERR_RANGE). */
    int (*gather_rows)(struct backend *b, const float *src, const int32_t *idx_host, int n, int dim,
                       float *dst);
    /* Copies K/V of whole blocks (copy-on-write of a shared partial block); may be NULL if unused. */
    int (*kv_copy_block)(struct backend *b, int src_block, int dst_block);
    /* One block's K/V over every layer as one contiguous host buffer (the offload tiers' unit):
     * for layer 0..n_layers-1, its K then its V rows of the block's block_size slots, each as the
     * cache stores them (kv_alloc's type), so bytes = 2 * n_layers * block_size * n_kv_heads *
     * row bytes of head_dim. read copies the block out, write replaces it; ERR_BAD_STATE before
     * kv_alloc, ERR_RANGE for a block outside the cache, ERR_INVAL when bytes is not that size
     * (nothing copied). Optional (both NULL: no offload). Inference thread. */
    int (*kv_block_read)(struct backend *b, int block, void *dst_host, size_t bytes);
    int (*kv_block_write)(struct backend *b, int block, const void *src_host, size_t bytes);
    /* Waits for queued work (no-op on the CPU). */
    int (*sync)(struct backend *b);
    /* Free and total bytes of the backend's device memory now (after weights and activations
     * allocated so far), from which the engine sizes the KV cache (--gpu-memory-utilization).
     * Optional: NULL for backends whose memory is the host's (the CPU). */
    int (*mem_info)(struct backend *b, size_t *free_bytes, size_t *total_bytes);

    /* Lanes: several forward passes side by side, each on one thread. run_lanes runs fn(ctx, i)
     * for i < n at once (n <= lanes_max) and returns the first lane's error; ops called from
     * inside a lane run on that lane's thread alone, with the lane's own scratch, so lanes must
     * write disjoint activations and KV slots. A thread that misses the job leaves its lanes to
     * the others, so fn may not wait for another lane. Lanes do not nest (ERR_BAD_STATE).
     * Optional (both NULL): every op then runs over all of the backend's threads. */
    int (*lanes_max)(struct backend *b);
    int (*run_lanes)(struct backend *b, int n, backend_lane_fn fn, void *ctx);
};

struct backend {
    const struct backend_ops *ops;
};

struct backend_options {
    int n_threads; /* CPU compute threads; 0 = the CPUs this process may run on (affinity mask) */
    int device;    /* CUDA device index (0 = the first; see CUDA_VISIBLE_DEVICES) */
    /* CPU kernel level: "scalar", "avx2", "avx512", or NULL/"auto" = best the CPU supports; NULL
     * also consults the CINFER_CPU_ISA environment variable. Tests force each level with it. */
    const char *cpu_isa;
};

/* Creates the backend named `name` ("cpu", "cuda"; NULL = best available). *out is new; destroy
 * with b->ops->destroy(b). ERR_UNSUPPORTED when it was not built in or no device is present. */
int backend_create(const char *name, const struct backend_options *opt, struct backend **out);

#endif
