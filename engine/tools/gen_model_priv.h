/* Internals shared by gen_model.c (PRNG, tensor writer, vocabulary, the write) and
 * gen_model_arch.c (each architecture's keys and tensors). Nothing else includes this header. */
#ifndef CINFER_ENGINE_TOOLS_GEN_MODEL_PRIV_H
#define CINFER_ENGINE_TOOLS_GEN_MODEL_PRIV_H

#include "engine/gguf/gguf.h"
#include "engine/tools/gen_model.h"

struct gen_model_ctx {
    const struct gen_model_opts *o;
    struct gguf_writer *w;
    void **bufs; /* tensor data, owned here, borrowed by the writer */
    size_t n_bufs, cap_bufs;
    uint64_t stream; /* next PRNG stream (tensor index) */
    char *err;
    size_t errlen;
};

int gen_model_fail(struct gen_model_ctx *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What a tensor holds. */
enum gen_model_kind {
    GEN_MODEL_WEIGHT, /* normal(0, std) in the model's type (F32 where a row is not whole blocks) */
    GEN_MODEL_NORM,   /* 1 + normal(0, norm_std), F32 */
    GEN_MODEL_BIAS,   /* normal(0, std), F32 */
    GEN_MODEL_ROUTER, /* normal(0, MODEL_GEN_ROUTER_SCALE * std) in the model's type */
};

/* Adds tensor `name` of ne = {cols, rows, n3}: rows 0 means 1-D, n3 0 means 2-D, n3 > 0 a stack of
 * n3 (rows, cols) matrices. Each tensor draws from its own PRNG stream (the next index). */
int gen_model_tensor(struct gen_model_ctx *c, const char *name, uint64_t cols, uint64_t rows,
                     uint64_t n3, enum gen_model_kind kind);
/* Adds a 1-D F32 tensor of the n given values (copied); it takes a PRNG stream like the others. */
int gen_model_tensor_f32(struct gen_model_ctx *c, const char *name, const float *v, uint64_t n);

/* gen_model_arch.c: the checks, <arch>.* keys (vocab_size aside) and tensors of o->arch, and an
 * upper bound of the tensor count. */
int gen_model_arch_check(struct gen_model_ctx *c);
int gen_model_arch_metadata(struct gen_model_ctx *c);
int gen_model_arch_tensors(struct gen_model_ctx *c, uint64_t vocab);
size_t gen_model_arch_max_tensors(const struct gen_model_opts *o);

#endif
