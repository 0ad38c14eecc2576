/* Random-weight GGUF models for tests and benchmarks, of every architecture the engine reads
 * (llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma2, gemma3, phi3; experts, sliding windows, rope
 * scaling included): llama.cpp's tensor names and metadata keys, weights drawn from normal(0, std)
 * (0.02 by default) by a seeded PRNG (the same options give the same file), RMS norm gains 1.0
 * unless norm_std spreads them. The tokenizer is copied from a vocabulary-only GGUF, or a
 * byte-level llama (SentencePiece-style) vocabulary is generated so no shared data is needed.
 * Not a trained model: its output is noise, but its shapes and formats are real. */
#ifndef CINFER_ENGINE_TOOLS_GEN_MODEL_H
#define CINFER_ENGINE_TOOLS_GEN_MODEL_H

#include "engine/gguf/quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gen_model_opts {
    enum quant_type type;    /* any known type: 2-D weights incl. token_embd (F32 where a row
                              * is not a multiple of its block) */
    uint32_t dim;            /* embedding length */
    uint32_t layers;         /* block count */
    uint32_t heads;          /* attention heads; dim % heads == 0, head dim even */
    uint32_t kv_heads;       /* heads % kv_heads == 0 */
    uint32_t ffn;            /* feed-forward length */
    uint32_t context_length; /* llama.context_length */
    uint32_t vocab_size;     /* generated vocabulary only (>= 259); ignored with vocab_from */
    bool tied_output;        /* no output.weight: the output reuses token_embd (always: gemma2) */
    uint64_t seed;
    const char *vocab_from; /* borrowed path of a GGUF whose tokenizer.* keys are copied, or NULL */
    /* generated vocabulary only: texts (borrowed, non-empty) that replace its last filler tokens,
     * typed user-defined (added tokens such as "<tool_call>": one token whose text is output) */
    const char *const *user_tokens;
    uint32_t n_user_tokens;

    const char *arch;  /* general.architecture (GEN_MODEL_ARCHS); borrowed */
    uint32_t head_dim; /* 0 = dim / heads; else written as attention.key_length */
    float std;         /* weight and bias spread; 0 = 0.02 */
    float norm_std;    /* norm gains 1 + normal(0, norm_std); 0 = exactly 1 */
    /* experts: llama (0 = dense), qwen2moe, qwen3moe (> 0 required) */
    uint32_t experts, experts_used;
    uint32_t expert_ffn; /* qwen*moe expert_feed_forward_length; 0 = ffn */
    uint32_t shared_ffn; /* qwen2moe expert_shared_feed_forward_length; 0 = ffn */
    /* gemma: attention.sliding_window (0: gemma2 writes llama.cpp's 4096, gemma3 none) and
     * sliding_window_pattern (0: key absent); gemma2's soft-caps (0: llama.cpp's 50 and 30) */
    uint32_t sliding_window, swa_pattern;
    float attn_softcap, final_softcap;
    /* rope scaling (GEN_MODEL_ROPE_SCALINGS): "none", "linear" or "yarn" (rope.scaling.* keys),
     * "llama3" (rope_freqs.weight from Llama 3.1's formula, llama only), "longrope" (phi3's
     * long/short factors and attn_factor); factor and original context (0 = context / 4) */
    const char *rope_scaling;
    float rope_factor;
    uint32_t rope_orig_ctx;
};

#define GEN_MODEL_ARCHS         "llama|qwen2|qwen3|qwen2moe|qwen3moe|gemma2|gemma3|phi3"
#define GEN_MODEL_ROPE_SCALINGS "none|linear|yarn|llama3|longrope"

/* The default shape: llama, dim 768, 12 layers, 12 heads and KV heads, ffn 2048, context 2048, a
 * 32000-token vocabulary, F32, seed 42 (134M parameters), no rope scaling. */
void gen_model_defaults(struct gen_model_opts *o);

/* Total parameter count of the dense llama shape `o` describes, for a vocabulary of `vocab`
 * tokens. */
uint64_t gen_model_param_count(const struct gen_model_opts *o, uint64_t vocab);

/* Writes the model to `path` (borrowed). Returns 0, ERR_INVAL (bad shape or type, message in
 * `err`), ERR_IO, ERR_PARSE/ERR_NOT_FOUND (unreadable vocabulary file) or ERR_NOMEM. Needs memory
 * for the whole output file. Any thread; uses no globals. */
int gen_model_write(const struct gen_model_opts *o, const char *path, char *err, size_t errlen);

#endif
