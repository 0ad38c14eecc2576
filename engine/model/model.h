/* Transformer model: hyper-parameters and weights from a GGUF file, and the batched forward pass.
 * Architectures (general.architecture), with llama.cpp's tensor names, metadata keys and
 * semantics (src/models/<arch>.cpp, llama-graph.cpp):
 *  - llama: Llama 2/3 (Llama 3.1 rope_freqs.weight), Mistral, TinyLlama, SmolLM; Mixtral-style
 *    mixture of experts when llama.expert_count > 0 (ffn_*_exps, softmax top-k, renormalised);
 *  - qwen2 (QKV biases), qwen3 (per-head q/k RMS norms);
 *  - qwen2moe (experts with unnormalised softmax weights plus a shared expert behind a sigmoid
 *    gate), qwen3moe (q/k norms, renormalised top-k);
 *  - gemma2, gemma3: embeddings scaled by sqrt(n_embd), GeGLU, post-attention and post-FFN norms,
 *    sliding-window layers interleaved with global ones (their own rope base), gemma2's attention
 *    and final logit soft-capping, gemma3's q/k norms;
 *  - phi3: fused attn_qkv and gate/up (ffn_up of 2 * n_ff rows), long-rope factors.
 * Rope scaling: none, linear, YaRN, long-rope. Anything else is refused with its name.
 * Weights borrow the GGUF mapping and are prepared once by the backend; the K/V data lives in the
 * backend, addressed through the block tables of an engine/kv/kv_cache.h pool.
 * Not the tokenizer, the sampler or the scheduler. Owned and called by one inference thread. */
#ifndef CINFER_ENGINE_MODEL_H
#define CINFER_ENGINE_MODEL_H

#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_window.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum model_arch {
    MODEL_ARCH_LLAMA = 0,
    MODEL_ARCH_QWEN2,
    MODEL_ARCH_QWEN3,
    MODEL_ARCH_QWEN2MOE,
    MODEL_ARCH_QWEN3MOE,
    MODEL_ARCH_GEMMA2,
    MODEL_ARCH_GEMMA3,
    MODEL_ARCH_PHI3,
};

/* The general.architecture names this engine reads, for messages and --help. */
#define MODEL_ARCH_NAMES "llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma2, gemma3, phi3"

/* <arch>.rope.scaling.type (llama.cpp's llama_rope_scaling_type); absent means linear. */
enum model_rope_scaling {
    MODEL_ROPE_SCALING_NONE = 0,
    MODEL_ROPE_SCALING_LINEAR,
    MODEL_ROPE_SCALING_YARN,
    MODEL_ROPE_SCALING_LONGROPE,
};

#define MODEL_MAX_LAYERS  4096
#define MODEL_MAX_EXPERTS 512 /* llama.cpp's LLAMA_MAX_EXPERTS */

struct model_hparams {
    enum model_arch arch;
    char arch_name[32];    /* general.architecture */
    int n_vocab;           /* rows of token_embd.weight */
    int n_ctx_train;       /* <arch>.context_length */
    int n_embd;            /* <arch>.embedding_length */
    int n_layer;           /* <arch>.block_count */
    int n_ff;              /* <arch>.feed_forward_length (dense FFN width; 0 if absent in MoE) */
    int n_head;            /* <arch>.attention.head_count */
    int n_head_kv;         /* <arch>.attention.head_count_kv (GQA), default n_head */
    int head_dim;          /* <arch>.attention.key_length, default n_embd / n_head */
    int n_rot;             /* <arch>.rope.dimension_count, default head_dim */
    float rms_eps;         /* <arch>.attention.layer_norm_rms_epsilon */
    float rope_freq_base;  /* <arch>.rope.freq_base, default 10000 */
    float rope_freq_scale; /* 1 / <arch>.rope.scaling.factor (linear or YaRN), else 1 */
    enum backend_rope_mode rope_mode; /* llama: NORMAL; the others: NEOX (as llama.cpp) */
    bool tied_output; /* the output projection is token_embd.weight (no output.weight; gemma2) */

    enum model_rope_scaling rope_scaling;
    int n_ctx_orig; /* <arch>.rope.scaling.original_context_length, default n_ctx_train */
    /* What every rope call passes (backend_rope_params): YaRN's ext_factor (1 with YaRN, else 0)
     * and betas (ggml's 32 and 1), attn_factor as llama_context computes it (YaRN's magnitude
     * pre-cancelled, times <arch>.rope.scaling.attn_factor). */
    float rope_ext_factor, rope_attn_factor, rope_beta_fast, rope_beta_slow;

    /* Sliding-window attention (gemma2, gemma3): layers whose bit is set in swa_layers attend to
     * the last n_swa positions only and rotate with the _swa rope base and scale. */
    int n_swa; /* <arch>.attention.sliding_window; 0 = no sliding window */
    uint64_t swa_layers[MODEL_MAX_LAYERS / 64];
    float rope_freq_base_swa, rope_freq_scale_swa;

    bool embd_scale;     /* gemma: the embeddings are multiplied by sqrt(n_embd) */
    float q_scale;       /* > 0: q *= q_scale after rope and attention scores are not scaled again
                          * (gemma, phi3); 0: scores scaled by 1 / sqrt(head_dim) */
    float attn_softcap;  /* > 0: attention scores soft-capped (gemma2's attn_logit_softcapping) */
    float final_softcap; /* > 0: logits soft-capped (<arch>.final_logit_softcapping) */
    bool gelu;           /* GeGLU feed-forward (gemma) instead of SwiGLU */
    bool post_norms;     /* post_attention_norm and post_ffw_norm (gemma) */

    /* Mixture of experts: n_expert > 0 makes every layer's FFN routed (qwen2moe, qwen3moe,
     * llama with expert_count). */
    int n_expert;       /* <arch>.expert_count */
    int n_expert_used;  /* <arch>.expert_used_count: k of top-k */
    int n_ff_exp;       /* <arch>.expert_feed_forward_length; default n_ff (llama) or n_ff / k */
    int n_ff_shexp;     /* qwen2moe: <arch>.expert_shared_feed_forward_length, default n_ff */
    bool expert_norm;   /* top-k weights renormalised to sum 1 (llama, qwen3moe; not qwen2moe) */
    bool shared_expert; /* qwen2moe's gated shared expert */
};

/* Whether layer il is a sliding-window layer. */
static inline bool model_hparams_layer_swa(const struct model_hparams *hp, int il)
{
    return hp->n_swa > 0 && il >= 0 && il < MODEL_MAX_LAYERS &&
           ((hp->swa_layers[il / 64] >> (il % 64)) & 1u);
}

/* Reads and validates the hyper-parameters of `g` (borrowed). The vocabulary size comes from
 * token_embd.weight. ERR_UNSUPPORTED for an unknown architecture or rope scaling, ERR_INVAL for a
 * missing or inconsistent key, with a message naming it in `err`. */
int model_hparams_parse(const struct gguf *g, struct model_hparams *out, char *err, size_t errlen);

struct model_options {
    const char *backend;     /* backend_create name; NULL = best available */
    int device;              /* CUDA device index (backend_options.device); 0 = the first */
    int n_threads;           /* 0 = all online cores */
    enum quant_type kv_type; /* QUANT_F16 (llama.cpp's default), QUANT_F32 or QUANT_Q8_0 */
    bool no_lanes;           /* never split a step into lanes (model_forward): A/B runs, tests */
    /* The longest sequence the caller will run (tokens); 0 = the model's context_length. Picks
     * long-rope models' long or short frequency factors as llama.cpp does with its n_ctx. */
    int n_ctx_seq;
    /* Seconds between "loading weights" progress lines (bytes read, total, percent, MB/s) while
     * model_load reads the tensors; 0 = 2 s. A load shorter than that logs none. */
    double progress_s;
    /* Expected SHA-256 of the file (64 lowercase hex digits; borrowed for the load call), or NULL.
     * The load hashes the mapped file before it copies the weights and fails with ERR_BAD_STATE
     * on a mismatch, and also when the file changed (inode, size, mtime) while it was loading. */
    const char *sha256;
};

/* The `--kv-type` names: "f16", "f32", "q8_0" (ggml's Q8_0 blocks of 32: about half the bytes of
 * f16; needs a head dimension that is a multiple of 32). Returns false for any other name. */
#define MODEL_KV_TYPE_NAMES "f16|f32|q8_0"
bool model_kv_type_parse(const char *name, enum quant_type *out);

/* Defaults: best backend, all cores, F16 KV cache. */
void model_options_default(struct model_options *opt);

struct model;

/* Opens the GGUF at `path` (borrowed), validates every tensor (presence, loadable type, shape
 * against the hparams) and prepares the weights on a new backend. *out is new (model_free).
 * Errors: those of gguf_open, ERR_UNSUPPORTED / ERR_INVAL / ERR_NOT_FOUND with a message naming the
 * architecture or tensor in `err`, ERR_BAD_STATE (opt->sha256 does not match, or the file changed
 * while loading), or the backend's error. */
int model_load(const char *path, const struct model_options *opt, struct model **out, char *err,
               size_t errlen);
/* Same from an already parsed file, which the model takes (closed by model_free, or on failure). */
int model_load_gguf(struct gguf *g, const struct model_options *opt, struct model **out, char *err,
                    size_t errlen);
void model_free(struct model *m); /* NULL-safe */

/* Borrowed views, valid until model_free. The GGUF is what the tokenizer loads from. */
const struct model_hparams *model_hparams(const struct model *m);
const struct gguf *model_gguf(const struct model *m);
struct backend *model_backend(struct model *m);
/* Bytes of weights read per forward step (every matrix once): the decode memory traffic. */
uint64_t model_weight_bytes(const struct model *m);

/* K and V bytes of one token over all layers for a cache of `kv_type`. */
uint64_t model_kv_bytes_per_token(const struct model *m, enum quant_type kv_type);
/* Allocates backend K/V storage matching the geometry of `kv` (borrowed; the model does not keep it)
 * in the options' kv_type, replacing any previous storage. 0 or the backend's error. */
int model_kv_init(struct model *m, const struct kv_cache *kv);
/* Copies K/V of block src into block dst (a kv_cache_copy from kv_cache_seq_append). */
int model_kv_copy_block(struct model *m, int32_t src, int32_t dst);
/* Bytes of one block's K/V over all layers (backend_ops.kv_block_read's layout) for the storage
 * model_kv_init allocated; 0 before it. */
size_t model_kv_block_bytes(const struct model *m);
/* Copies block `block`'s K/V out to / in from a host buffer of model_kv_block_bytes bytes
 * (borrowed). ERR_BAD_STATE before model_kv_init; ERR_UNSUPPORTED when the backend has no block
 * I/O; ERR_RANGE, ERR_INVAL as the backend says. Inference thread. */
int model_kv_block_read(struct model *m, int32_t block, void *dst, size_t bytes);
int model_kv_block_write(struct model *m, int32_t block, const void *src, size_t bytes);

/* Sink-window eviction (engine/kv/kv_window.h; model_kv_shift.c). Whether this model's backend
 * can re-rotate stored keys (it needs kv_block_read and kv_block_write: the CPU backend, not yet
 * CUDA); a sink-window request on one that cannot is refused with ERR_UNSUPPORTED. */
bool model_kv_shift_supported(const struct model *m);
/* Re-rotates the stored keys of blocks[0..n) (every layer, with that layer's rope base) by
 * -delta positions, in place: a key stored at position p becomes the key at p - delta, as rope
 * composes (each angle is linear in the position; YaRN's and long-rope's per-dimension
 * frequencies and Llama 3's factors included, the magnitude kept). The blocks must have no other
 * owner. An f16 or q8_0 cache rounds the result again. ERR_BAD_STATE before model_kv_init,
 * ERR_UNSUPPORTED (see above), ERR_NOMEM, or the backend's error. Inference thread. */
int model_kv_shift(struct model *m, const int32_t *blocks, int n, int delta);
/* Applies w to sequence seq of kv before the caller appends more tokens to it: drops the blocks
 * kv_window_plan names (kv_cache_seq_evict) and re-rotates the blocks that moved, so the
 * sequence is exactly a shorter one whose keys sit at their new positions. *evicted = tokens
 * dropped (0 when nothing was). Errors as model_kv_shift and kv_cache_seq_evict (ERR_INVAL when a
 * moved block is shared); the table is already shortened when the shift fails, so the caller
 * abandons the sequence then. */
int model_kv_window_evict(struct model *m, struct kv_cache *kv, int seq, const struct kv_window *w,
                          int *evicted);

enum model_logits {
    MODEL_LOGITS_NONE = 0, /* a prefill chunk that is not the last one */
    MODEL_LOGITS_LAST,     /* the last token of the entry (the usual case) */
    MODEL_LOGITS_ALL,      /* every token of the entry (tests, prompt logprobs) */
};

/* One entry of a step: n_tokens consecutive tokens of sequence `seq` at positions pos..pos+n-1. */
struct model_batch_entry {
    int seq;               /* kv_cache sequence id */
    int pos;               /* position of tokens[0] */
    int n_tokens;          /* >= 1 */
    const int32_t *tokens; /* borrowed */
    enum model_logits logits;
};

/* Runs one step over all entries (prefill chunks and decode tokens of different sequences mixed):
 * every layer does one matmul over all tokens of the step. K/V are written through the block tables
 * of `kv`, whose sequences must already hold the slots (kv_cache_seq_append up to pos + n_tokens);
 * each token attends to positions 0..its own of its sequence. Logits rows (n_vocab floats each) are
 * returned in entry order, token order within an entry, in *logits (borrowed from the model, valid
 * until the next forward) with their count in *n_rows. Each row depends only on its own sequence's
 * tokens, not on what else is in the step. A step of many alike decodes may run as lanes, runs of
 * its entries each on one thread of the backend (model_lanes_plan in model_priv.h); the logits
 * are the same bits either way. ERR_INVAL for a token out of the vocabulary, a sequence listed twice
 * or slots not reserved; ERR_NOMEM; backend errors. */
int model_forward(struct model *m, const struct kv_cache *kv,
                  const struct model_batch_entry *entries, int n_entries, const float **logits,
                  int *n_rows);
/* Lanes the last successful model_forward ran as: 1 unless it split (tests, benchmarks). */
int model_forward_lanes(const struct model *m);

/* Where a forward step's time goes, by kind of op (`cinfer-engine bench --profile`). */
enum model_op {
    MODEL_OP_EMBED,     /* token embedding rows */
    MODEL_OP_NORM,      /* RMS norms (layers, q/k, post-norms, final), embedding and q scaling */
    MODEL_OP_QKV,       /* Q/K/V projections and their biases */
    MODEL_OP_ROPE,      /* rotary embedding of q and k */
    MODEL_OP_KV_STORE,  /* writing k and v into the cache */
    MODEL_OP_ATTENTION, /* softmax(q K^T) V over the cache */
    MODEL_OP_ATTN_OUT,  /* attention output projection */
    MODEL_OP_RESIDUAL,  /* residual adds */
    MODEL_OP_FFN_UP,    /* gate and up projections */
    MODEL_OP_SILU,      /* silu(gate) * up, or gelu(gate) * up */
    MODEL_OP_FFN_DOWN,  /* down projection */
    MODEL_OP_MOE,       /* expert routing: router matmul, top-k, row gathers, weighted sums */
    MODEL_OP_OUTPUT,    /* classifier (with its bias and soft-capping) */
    MODEL_OP_OTHER,     /* row gathers, logits download */
    MODEL_OP_COUNT
};

struct model_profile {
    double seconds[MODEL_OP_COUNT]; /* wall time per kind, the sync after each op included */
    long calls[MODEL_OP_COUNT];
    double step_seconds; /* whole model_forward calls */
    long steps;
    int lanes; /* lanes of the last step; a split step's ops are timed in lane 0 only */
};

/* Attaches `p` (borrowed until detached with NULL): from then on forward steps add their time to
 * it, each op followed by a backend sync so that its time is its own (which also removes any
 * overlap an asynchronous backend would have). Caller thread. */
void model_profile_attach(struct model *m, struct model_profile *p);

/* A short lowercase name ("attention"). */
const char *model_op_name(enum model_op op);

#endif
