/* Random-weight llama-architecture GGUF models for tests and benchmarks: llama.cpp's tensor names
 * and metadata keys, weights drawn from normal(0, 0.02) by a seeded PRNG (the same seed gives the
 * same file), RMS norms all 1.0. The tokenizer is copied from a vocabulary-only GGUF, or a byte-level
 * llama (SentencePiece-style) vocabulary is generated so no shared data is needed.
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
    bool tied_output;        /* no output.weight: the output reuses token_embd */
    uint64_t seed;
    const char *vocab_from; /* borrowed path of a GGUF whose tokenizer.* keys are copied, or NULL */
};

/* The default shape: dim 768, 12 layers, 12 heads and KV heads, ffn 2048, context 2048, a
 * 32000-token vocabulary, F32, seed 42 (134M parameters). */
void gen_model_defaults(struct gen_model_opts *o);

/* Total parameter count of the shape `o` describes, for a vocabulary of `vocab` tokens. */
uint64_t gen_model_param_count(const struct gen_model_opts *o, uint64_t vocab);

/* Writes the model to `path` (borrowed). Returns 0, ERR_INVAL (bad shape or type, message in
 * `err`), ERR_IO, ERR_PARSE/ERR_NOT_FOUND (unreadable vocabulary file) or ERR_NOMEM. Needs memory
 * for the whole output file. Any thread; uses no globals. */
int gen_model_write(const struct gen_model_opts *o, const char *path, char *err, size_t errlen);

#endif
