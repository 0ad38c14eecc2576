/* Random-weight GGUF generation (see gen_model.h; the architectures' keys and tensors are in
 * gen_model_arch.c). Each tensor draws from its own PRNG stream,
 * seeded from the model seed and the tensor's index, so a file is a pure function of its options.
 * Normals come from xoshiro256** + Box-Muller; rows are quantized one at a time into the buffer the
 * writer borrows, so peak memory is the output file plus one row. */
#include "engine/tools/gen_model.h"
#include "engine/tools/gen_model_priv.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/gguf/gguf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_GEN_STD          0.02f
#define MODEL_GEN_ROUTER_SCALE 10.0f /* routers spread wider, so top-k picks are clear-cut */
#define MODEL_GEN_BYTE_VOCAB   259   /* <unk>, <s>, </s> and 256 byte tokens */

/* llama.cpp's llama_token_type values. */
enum {
    MODEL_GEN_TOK_NORMAL = 1,
    MODEL_GEN_TOK_UNKNOWN = 2,
    MODEL_GEN_TOK_CONTROL = 3,
    MODEL_GEN_TOK_USER_DEFINED = 4,
    MODEL_GEN_TOK_BYTE = 6
};

struct gen_model_rng {
    uint64_t s[4];
};

static uint64_t gen_model_splitmix(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static void gen_model_rng_seed(struct gen_model_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * UINT64_C(0xD1B54A32D192ED03));
    for (int i = 0; i < 4; i++) r->s[i] = gen_model_splitmix(&x);
}

static inline uint64_t gen_model_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman & Vigna). */
static inline uint64_t gen_model_next(struct gen_model_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = gen_model_rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = gen_model_rotl(s[3], 45);
    return result;
}

/* Fills x[0..n) with normal(0, std) values: Box-Muller, two per pair of uniforms. */
static void gen_model_normals(struct gen_model_rng *r, float *x, size_t n, float std)
{
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n; i += 2) {
        uint64_t a = gen_model_next(r), b = gen_model_next(r);
        double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53; /* (0, 1]: log never sees 0 */
        double u2 = (double)(b >> 11) * 0x1.0p-53;
        double rad = sqrt(-2.0 * log(u1)) * std;
        x[i] = (float)(rad * cos(two_pi * u2));
        if (i + 1 < n) x[i + 1] = (float)(rad * sin(two_pi * u2));
    }
}

int gen_model_fail(struct gen_model_ctx *c, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(c->err, c->errlen, rc, fmt, ap);
    va_end(ap);
    return rc;
}

/* Takes ownership of tensor data for the writer to borrow. */
static int gen_model_keep(struct gen_model_ctx *c, void *data)
{
    if (c->n_bufs == c->cap_bufs) {
        free(data);
        return ERR_NOMEM;
    }
    c->bufs[c->n_bufs++] = data;
    return 0;
}

int gen_model_tensor(struct gen_model_ctx *c, const char *name, uint64_t cols, uint64_t rows,
                     uint64_t n3, enum gen_model_kind kind)
{
    const struct gen_model_opts *o = c->o;
    bool f32 = kind == GEN_MODEL_NORM || kind == GEN_MODEL_BIAS || rows == 0;
    enum quant_type t = f32 ? QUANT_F32 : o->type;
    if (quant_row_bytes(t, cols) == 0) t = QUANT_F32;
    size_t row_bytes = quant_row_bytes(t, cols);
    uint64_t nrows = (rows ? rows : 1) * (n3 ? n3 : 1);
    uint64_t ne[3] = {cols, rows, n3};
    float std = o->std > 0.0f ? o->std : MODEL_GEN_STD;
    if (kind == GEN_MODEL_ROUTER) std *= MODEL_GEN_ROUTER_SCALE;
    float *row = malloc((size_t)cols * sizeof(float));
    uint8_t *data = malloc(row_bytes * (size_t)nrows);
    if (!row || !data || gen_model_keep(c, data)) {
        free(row);
        if (row) free(data);
        return gen_model_fail(c, ERR_NOMEM, "out of memory for tensor %s", name);
    }
    struct gen_model_rng rng;
    gen_model_rng_seed(&rng, o->seed, c->stream++);
    for (uint64_t r = 0; r < nrows; r++) {
        if (kind == GEN_MODEL_NORM) {
            if (o->norm_std > 0.0f) gen_model_normals(&rng, row, (size_t)cols, o->norm_std);
            for (uint64_t j = 0; j < cols; j++) row[j] = o->norm_std > 0.0f ? 1.0f + row[j] : 1.0f;
        } else {
            gen_model_normals(&rng, row, (size_t)cols, std);
        }
        quant_quantize_row(t, row, data + r * row_bytes, (size_t)cols);
    }
    free(row);
    uint32_t n_dims = n3 ? 3 : rows ? 2 : 1;
    int rc = gguf_writer_add_tensor(c->w, name, t, n_dims, ne, data, row_bytes * nrows);
    return rc ? gen_model_fail(c, rc, "cannot add tensor %s", name) : 0;
}

int gen_model_tensor_f32(struct gen_model_ctx *c, const char *name, const float *v, uint64_t n)
{
    float *data = malloc((size_t)n * sizeof(float));
    if (!data || gen_model_keep(c, data))
        return gen_model_fail(c, ERR_NOMEM, "out of memory for tensor %s", name);
    memcpy(data, v, (size_t)n * sizeof(float));
    c->stream++;
    uint64_t ne[1] = {n};
    int rc = gguf_writer_add_tensor(c->w, name, QUANT_F32, 1, ne, data, n * sizeof(float));
    return rc ? gen_model_fail(c, rc, "cannot add tensor %s", name) : 0;
}

/* A SentencePiece-style byte-fallback vocabulary: <unk>, <s>, </s>, <0x00>..<0xFF>, then filler
 * pieces "▁t<N>" up to vocab_size so the embedding has a realistic size, the last ones replaced by
 * the options' user-defined tokens. */
static int gen_model_byte_vocab(struct gen_model_ctx *c, uint32_t n)
{
    uint32_t user0 = n - c->o->n_user_tokens;
    int rc = ERR_NOMEM;
    char **toks = calloc(n, sizeof(*toks));
    float *scores = calloc(n, sizeof(*scores));
    int32_t *types = calloc(n, sizeof(*types));
    if (!toks || !scores || !types) goto out;
    for (uint32_t i = 0; i < n; i++) {
        struct buf b;
        buf_init(&b, 64);
        if (i == 0)
            rc = buf_puts(&b, "<unk>");
        else if (i == 1)
            rc = buf_puts(&b, "<s>");
        else if (i == 2)
            rc = buf_puts(&b, "</s>");
        else if (i < MODEL_GEN_BYTE_VOCAB)
            rc = buf_printf(&b, "<0x%02X>", i - 3);
        else if (i >= user0)
            rc = buf_puts(&b, c->o->user_tokens[i - user0]);
        else
            rc = buf_printf(&b, "\xe2\x96\x81t%u", i);
        if (rc || !(toks[i] = buf_steal(&b))) {
            buf_fini(&b);
            rc = ERR_NOMEM;
            goto out;
        }
        types[i] = i == 0                     ? MODEL_GEN_TOK_UNKNOWN
                   : i < 3                    ? MODEL_GEN_TOK_CONTROL
                   : i < MODEL_GEN_BYTE_VOCAB ? MODEL_GEN_TOK_BYTE
                   : i >= user0               ? MODEL_GEN_TOK_USER_DEFINED
                                              : MODEL_GEN_TOK_NORMAL;
        scores[i] = i < MODEL_GEN_BYTE_VOCAB ? 0.0f : -(float)(i - MODEL_GEN_BYTE_VOCAB);
    }
    struct gguf_writer *w = c->w;
    if ((rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, n)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, n)) ||
        (rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, n)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true)) ||
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false)))
        goto out;
    rc = 0;
out:
    for (uint32_t i = 0; toks && i < n; i++) free(toks[i]);
    free(toks);
    free(scores);
    free(types);
    return rc;
}

/* Copies every tokenizer.* key of the vocabulary file; returns its token count in *vocab. */
static int gen_model_copy_vocab(struct gen_model_ctx *c, uint64_t *vocab)
{
    struct gguf *g = NULL;
    char gerr[256];
    int rc = gguf_open(c->o->vocab_from, &g, gerr, sizeof(gerr));
    if (rc) return gen_model_fail(c, rc, "%s", gerr);
    const struct gguf_array *toks;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) != 0 || toks->type != GGUF_STRING ||
        toks->n == 0) {
        rc = gen_model_fail(c, ERR_NOT_FOUND, "%s has no tokenizer.ggml.tokens string array",
                            c->o->vocab_from);
        goto out;
    }
    *vocab = toks->n;
    for (size_t i = 0; i < gguf_kv_count(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        if (strncmp(kv->key, "tokenizer.", 10) != 0) continue;
        if ((rc = gguf_writer_set_kv(c->w, kv))) {
            rc = gen_model_fail(c, rc, "cannot copy %s", kv->key);
            goto out;
        }
    }
    rc = 0;
out:
    gguf_close(g);
    return rc;
}

static int gen_model_check(struct gen_model_ctx *c)
{
    const struct gen_model_opts *o = c->o;
    if (!quant_type_known((uint32_t)o->type))
        return gen_model_fail(c, ERR_INVAL, "type %d is not one of %s", (int)o->type,
                              quant_type_names());
    if (o->dim == 0 || o->layers == 0 || o->heads == 0 || o->kv_heads == 0 || o->ffn == 0 ||
        o->context_length == 0)
        return gen_model_fail(c, ERR_INVAL, "every dimension must be positive");
    if (o->layers > 4096 || o->dim > 65536 || o->ffn > 262144)
        return gen_model_fail(c, ERR_INVAL, "shape too large (layers <= 4096, dim <= 65536)");
    if (o->heads % o->kv_heads != 0)
        return gen_model_fail(c, ERR_INVAL, "heads %u must be a multiple of kv-heads %u", o->heads,
                              o->kv_heads);
    if (!o->vocab_from && (o->vocab_size < MODEL_GEN_BYTE_VOCAB || o->vocab_size > 1000000))
        return gen_model_fail(c, ERR_INVAL, "vocab size %u outside [%d, 1000000]", o->vocab_size,
                              MODEL_GEN_BYTE_VOCAB);
    if (o->n_user_tokens && (o->vocab_from || !o->user_tokens ||
                             o->n_user_tokens > o->vocab_size - MODEL_GEN_BYTE_VOCAB))
        return gen_model_fail(c, ERR_INVAL,
                              "%u user-defined tokens need a generated vocabulary "
                              "with that many filler tokens",
                              o->n_user_tokens);
    for (uint32_t i = 0; i < o->n_user_tokens; i++)
        if (!o->user_tokens[i] || !o->user_tokens[i][0])
            return gen_model_fail(c, ERR_INVAL, "user-defined token %u is empty", i);
    return gen_model_arch_check(c);
}

static int gen_model_metadata(struct gen_model_ctx *c)
{
    const struct gen_model_opts *o = c->o;
    struct gguf_writer *w = c->w;
    char key[96];
    snprintf(key, sizeof(key), "%s.vocab_size", o->arch);
    int rc;
    if ((rc = gguf_writer_set_str(w, "general.architecture", o->arch)) ||
        (rc = gguf_writer_set_str(w, "general.name", "cinfer-random")) ||
        (rc = gguf_writer_set_u32(w, "general.file_type", quant_type_file_type(o->type))) ||
        (rc = gguf_writer_set_u32(w, "general.quantization_version", 2)) ||
        (rc = gguf_writer_set_u32(w, key, 0))) /* fixes the key's place; set once known */
        return gen_model_fail(c, rc, "cannot set metadata");
    return gen_model_arch_metadata(c);
}

void gen_model_defaults(struct gen_model_opts *o)
{
    *o = (struct gen_model_opts){.type = QUANT_F32,
                                 .dim = 768,
                                 .layers = 12,
                                 .heads = 12,
                                 .kv_heads = 12,
                                 .ffn = 2048,
                                 .context_length = 2048,
                                 .vocab_size = 32000,
                                 .tied_output = false,
                                 .seed = 42,
                                 .vocab_from = NULL,
                                 .arch = "llama"};
}

uint64_t gen_model_param_count(const struct gen_model_opts *o, uint64_t vocab)
{
    uint64_t dim = o->dim, kv_dim = o->heads ? (uint64_t)o->dim / o->heads * o->kv_heads : 0;
    uint64_t layer = 2 * dim + 2 * dim * dim + 2 * dim * kv_dim + 3 * dim * o->ffn;
    return vocab * dim * (o->tied_output ? 1 : 2) + dim + o->layers * layer;
}

int gen_model_write(const struct gen_model_opts *o, const char *path, char *err, size_t errlen)
{
    struct gen_model_ctx c = {.o = o, .err = err, .errlen = errlen};
    uint64_t vocab = o->vocab_size;
    int rc = gen_model_check(&c);
    if (rc) return rc;
    rc = ERR_NOMEM;
    c.w = gguf_writer_new();
    c.cap_bufs = gen_model_arch_max_tensors(o);
    c.bufs = calloc(c.cap_bufs, sizeof(*c.bufs));
    if (!c.w || !c.bufs) {
        gen_model_fail(&c, rc, "out of memory");
        goto out;
    }
    if ((rc = gen_model_metadata(&c))) goto out;
    rc = o->vocab_from ? gen_model_copy_vocab(&c, &vocab) : gen_model_byte_vocab(&c, o->vocab_size);
    if (rc) {
        if (!o->vocab_from) gen_model_fail(&c, rc, "cannot build the byte vocabulary");
        goto out;
    }
    if (vocab > UINT32_MAX) {
        rc = gen_model_fail(&c, ERR_INVAL, "vocabulary of %llu tokens", (unsigned long long)vocab);
        goto out;
    }
    char key[96];
    snprintf(key, sizeof(key), "%s.vocab_size", o->arch);
    if ((rc = gguf_writer_set_u32(c.w, key, (uint32_t)vocab))) goto out;
    if ((rc = gen_model_arch_tensors(&c, vocab))) goto out;
    if ((rc = gguf_writer_write(c.w, path))) gen_model_fail(&c, rc, "cannot write %s", path);
out:
    for (size_t i = 0; i < c.n_bufs; i++) free(c.bufs[i]);
    free(c.bufs);
    gguf_writer_free(c.w);
    return rc;
}
