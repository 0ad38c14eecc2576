/* Model loading: hyper-parameters from GGUF keys, tensor validation against them, and weight
 * preparation on the backend. The forward pass is in model_forward.c. */
#include "engine/model/model.h"
#include "engine/model/model_priv.h"

#include "common/err.h"
#include "common/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_MAX_LAYERS 4096
#define MODEL_MAX_DIM    (1 << 20)

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

void model_options_default(struct model_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->kv_type = QUANT_F16;
}

/* Reads "<arch>.<key>" as a positive int in [1, max]; `def` < 0 means required. */
static int arch_int(const struct gguf *g, const char *arch, const char *key, int64_t def,
                    int64_t max, int *out, char *err, size_t errlen)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    uint32_t v;
    int rc = gguf_get_u32(g, full, &v);
    if (rc == ERR_NOT_FOUND && def >= 0) {
        *out = (int)def;
        return 0;
    }
    if (rc == ERR_NOT_FOUND) return fail(err, errlen, ERR_INVAL, "missing key %s", full);
    if (rc) return fail(err, errlen, ERR_INVAL, "key %s: not an unsigned 32-bit integer", full);
    if (v == 0 || v > max)
        return fail(err, errlen, ERR_INVAL, "key %s: value %u outside [1, %lld]", full, v,
                    (long long)max);
    *out = (int)v;
    return 0;
}

/* Reads "<arch>.<key>" as a finite float; NAN `def` means required. */
static int arch_float(const struct gguf *g, const char *arch, const char *key, float def,
                      float *out, char *err, size_t errlen)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    float v;
    int rc = gguf_get_f32(g, full, &v);
    if (rc == ERR_NOT_FOUND && !isnan(def)) {
        *out = def;
        return 0;
    }
    if (rc == ERR_NOT_FOUND) return fail(err, errlen, ERR_INVAL, "missing key %s", full);
    if (rc || !isfinite(v) || v <= 0.0f)
        return fail(err, errlen, ERR_INVAL, "key %s: not a positive finite float", full);
    *out = v;
    return 0;
}

/* Rope scaling as llama.cpp reads it: the type defaults to linear, the factor comes from
 * rope.scaling.factor (or the older rope.scale_linear), 0 or absent meaning none, and
 * freq_scale = 1 / factor. Types other than none/linear (yarn, longrope) are refused. */
static int parse_rope_scaling(const struct gguf *g, struct model_hparams *hp, char *err,
                              size_t errlen)
{
    char key[128], type[32] = "linear";
    snprintf(key, sizeof(key), "%s.rope.scaling.type", hp->arch_name);
    int rc = gguf_get_cstr(g, key, type, sizeof(type));
    if (rc && rc != ERR_NOT_FOUND) return fail(err, errlen, ERR_INVAL, "key %s: not a string", key);
    if (strcmp(type, "linear") != 0 && strcmp(type, "none") != 0)
        return fail(err, errlen, ERR_UNSUPPORTED,
                    "rope scaling type \"%s\" is not supported (none, linear)", type);
    float factor = 0.0f;
    snprintf(key, sizeof(key), "%s.rope.scaling.factor", hp->arch_name);
    rc = gguf_get_f32(g, key, &factor);
    if (rc == ERR_NOT_FOUND) {
        snprintf(key, sizeof(key), "%s.rope.scale_linear", hp->arch_name);
        rc = gguf_get_f32(g, key, &factor);
    }
    if (rc == ERR_NOT_FOUND)
        factor = 0.0f;
    else if (rc || !isfinite(factor) || factor < 0.0f)
        return fail(err, errlen, ERR_INVAL, "key %s: not a finite float >= 0", key);
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    return 0;
}

int model_hparams_parse(const struct gguf *g, struct model_hparams *out, char *err, size_t errlen)
{
    struct model_hparams hp;
    memset(&hp, 0, sizeof(hp));
    int rc = gguf_get_cstr(g, "general.architecture", hp.arch_name, sizeof(hp.arch_name));
    if (rc == ERR_NOT_FOUND)
        return fail(err, errlen, ERR_INVAL, "missing key general.architecture");
    if (rc) return fail(err, errlen, ERR_INVAL, "key general.architecture: not a short string");
    if (strcmp(hp.arch_name, "llama") == 0) {
        hp.arch = MODEL_ARCH_LLAMA;
        hp.rope_mode = BACKEND_ROPE_NORMAL;
    } else if (strcmp(hp.arch_name, "qwen2") == 0) {
        hp.arch = MODEL_ARCH_QWEN2;
        hp.rope_mode = BACKEND_ROPE_NEOX;
    } else if (strcmp(hp.arch_name, "qwen3") == 0) {
        hp.arch = MODEL_ARCH_QWEN3;
        hp.rope_mode = BACKEND_ROPE_NEOX;
    } else {
        return fail(err, errlen, ERR_UNSUPPORTED,
                    "architecture \"%s\" is not supported (llama, qwen2, qwen3)", hp.arch_name);
    }
    const char *a = hp.arch_name;
    if ((rc = arch_int(g, a, "context_length", -1, INT32_MAX, &hp.n_ctx_train, err, errlen)) ||
        (rc = arch_int(g, a, "embedding_length", -1, MODEL_MAX_DIM, &hp.n_embd, err, errlen)) ||
        (rc = arch_int(g, a, "block_count", -1, MODEL_MAX_LAYERS, &hp.n_layer, err, errlen)) ||
        (rc = arch_int(g, a, "feed_forward_length", -1, MODEL_MAX_DIM, &hp.n_ff, err, errlen)) ||
        (rc = arch_int(g, a, "attention.head_count", -1, MODEL_MAX_DIM, &hp.n_head, err, errlen)))
        return rc;
    if ((rc = arch_int(g, a, "attention.head_count_kv", hp.n_head, hp.n_head, &hp.n_head_kv, err,
                       errlen)))
        return rc;
    if (hp.n_head % hp.n_head_kv != 0)
        return fail(err, errlen, ERR_INVAL,
                    "%s.attention.head_count %d is not a multiple of "
                    "head_count_kv %d",
                    a, hp.n_head, hp.n_head_kv);
    int def_hd = hp.n_embd % hp.n_head == 0 ? hp.n_embd / hp.n_head : -1;
    if ((rc = arch_int(g, a, "attention.key_length", def_hd, MODEL_MAX_DIM, &hp.head_dim, err,
                       errlen)))
        return rc;
    int vlen;
    if ((rc = arch_int(g, a, "attention.value_length", hp.head_dim, MODEL_MAX_DIM, &vlen, err,
                       errlen)))
        return rc;
    if (vlen != hp.head_dim)
        return fail(err, errlen, ERR_UNSUPPORTED,
                    "%s.attention.value_length %d differs from key_length %d", a, vlen,
                    hp.head_dim);
    if ((rc = arch_int(g, a, "rope.dimension_count", hp.head_dim, hp.head_dim, &hp.n_rot, err,
                       errlen)))
        return rc;
    if (hp.n_rot % 2 != 0)
        return fail(err, errlen, ERR_INVAL, "%s.rope.dimension_count %d is odd", a, hp.n_rot);
    if ((rc =
             arch_float(g, a, "attention.layer_norm_rms_epsilon", NAN, &hp.rms_eps, err, errlen)) ||
        (rc = arch_float(g, a, "rope.freq_base", 10000.0f, &hp.rope_freq_base, err, errlen)) ||
        (rc = parse_rope_scaling(g, &hp, err, errlen)))
        return rc;

    const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb) return fail(err, errlen, ERR_NOT_FOUND, "missing tensor token_embd.weight");
    if (emb->n_dims != 2 || emb->ne[1] == 0 || emb->ne[1] > INT32_MAX)
        return fail(err, errlen, ERR_INVAL,
                    "tensor token_embd.weight: expected 2 dimensions "
                    "(%d, n_vocab)",
                    hp.n_embd);
    hp.n_vocab = (int)emb->ne[1];
    hp.tied_output = gguf_find_tensor(g, "output.weight") == NULL;
    *out = hp;
    return 0;
}

static void format_shape(const struct gguf_tensor *t, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < t->n_dims && off < len; i++) {
        int n =
            snprintf(buf + off, len - off, "%s%llu", i ? ", " : "", (unsigned long long)t->ne[i]);
        if (n < 0) break;
        off += (size_t)n;
    }
}

/* How load_weight treats a tensor. */
enum {
    WEIGHT_OPTIONAL = 1,    /* a missing tensor leaves *out NULL */
    WEIGHT_LOOKUP_ONLY = 2, /* only read by get_rows (see backend_weight_desc) */
};

/* Validates tensor `name` as (rows, cols) with ne[0] = cols (a 1-D tensor when rows == 1) and
 * prepares it; `flags` are WEIGHT_* bits. */
static int load_weight(struct model *m, const char *name, int64_t rows, int64_t cols,
                       unsigned flags, struct backend_weight **out, char *err, size_t errlen)
{
    bool optional = flags & WEIGHT_OPTIONAL;
    *out = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t && optional) return 0;
    if (!t) return fail(err, errlen, ERR_NOT_FOUND, "missing tensor %s", name);
    if (!quant_type_known(t->type))
        return fail(err, errlen, ERR_UNSUPPORTED, "tensor %s: type %s (%u) cannot be loaded", name,
                    quant_type_name(t->type), (unsigned)t->type);
    bool ok = t->ne[0] == (uint64_t)cols && t->ne[1] == (uint64_t)rows && t->ne[2] == 1 &&
              t->ne[3] == 1 && (rows == 1 ? t->n_dims <= 2 : t->n_dims == 2);
    if (!ok) {
        char got[96];
        format_shape(t, got, sizeof(got));
        if (rows == 1)
            return fail(err, errlen, ERR_INVAL, "tensor %s: shape [%s], expected [%lld]", name, got,
                        (long long)cols);
        return fail(err, errlen, ERR_INVAL, "tensor %s: shape [%s], expected [%lld, %lld]", name,
                    got, (long long)cols, (long long)rows);
    }
    size_t row_bytes = quant_row_bytes(t->type, (uint64_t)cols);
    if (row_bytes == 0)
        return fail(err, errlen, ERR_INVAL,
                    "tensor %s: row of %lld is not a multiple of the %s "
                    "block size",
                    name, (long long)cols, quant_type_name(t->type));
    if (!t->data || t->size != (uint64_t)rows * row_bytes)
        return fail(err, errlen, ERR_INVAL, "tensor %s: %llu bytes of data, expected %llu", name,
                    (unsigned long long)t->size, (unsigned long long)rows * row_bytes);
    struct backend_weight_desc d = {t->type, rows, cols, t->data,
                                    (flags & WEIGHT_LOOKUP_ONLY) != 0};
    int rc = m->be->ops->weight_prepare(m->be, &d, out);
    if (rc)
        return fail(err, errlen, rc, "tensor %s: backend cannot prepare it (%s)", name,
                    err_str(rc));
    m->weight_bytes += t->size;
    if (rows > 1 && !d.lookup_only && m->be->ops->weight_float_path &&
        m->be->ops->weight_float_path(m->be, *out))
        m->float_matmuls = true;
    return 0;
}

static int load_layer(struct model *m, int il, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    struct model_layer *l = &m->layers[il];
    int64_t e = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim,
            kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    /* 0: not part of the architecture, 1: required, 2: optional (llama.cpp loads llama biases
     * when present). */
    int bias = hp->arch == MODEL_ARCH_QWEN2 ? 1 : hp->arch == MODEL_ARCH_LLAMA ? 2 : 0;
    int qk_norm = hp->arch == MODEL_ARCH_QWEN3 ? 1 : 0;
    struct {
        const char *suffix;
        int64_t rows, cols;
        int need;
        struct backend_weight **dst;
    } spec[] = {
        {"attn_norm.weight", 1, e, 1, &l->attn_norm},
        {"attn_q.weight", q, e, 1, &l->wq},
        {"attn_k.weight", kvd, e, 1, &l->wk},
        {"attn_v.weight", kvd, e, 1, &l->wv},
        {"attn_output.weight", e, q, 1, &l->wo},
        {"attn_q.bias", 1, q, bias, &l->bq},
        {"attn_k.bias", 1, kvd, bias, &l->bk},
        {"attn_v.bias", 1, kvd, bias, &l->bv},
        {"attn_q_norm.weight", 1, hp->head_dim, qk_norm, &l->q_norm},
        {"attn_k_norm.weight", 1, hp->head_dim, qk_norm, &l->k_norm},
        {"ffn_norm.weight", 1, e, 1, &l->ffn_norm},
        {"ffn_gate.weight", hp->n_ff, e, 1, &l->w_gate},
        {"ffn_up.weight", hp->n_ff, e, 1, &l->w_up},
        {"ffn_down.weight", e, hp->n_ff, 1, &l->w_down},
    };
    for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
        if (spec[i].need == 0) continue;
        char name[96];
        snprintf(name, sizeof(name), "blk.%d.%s", il, spec[i].suffix);
        int rc = load_weight(m, name, spec[i].rows, spec[i].cols,
                             spec[i].need == 2 ? WEIGHT_OPTIONAL : 0, spec[i].dst, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

static void free_weight(struct model *m, struct backend_weight *w)
{
    if (w) m->be->ops->weight_free(m->be, w);
}

void model_free(struct model *m)
{
    if (!m) return;
    if (m->be) {
        model_scratch_release(m);
        if (m->layers) {
            for (int i = 0; i < m->hp.n_layer; i++) {
                struct model_layer *l = &m->layers[i];
                struct backend_weight *ws[] = {
                    l->attn_norm, l->wq,     l->wk,     l->wv,       l->wo,     l->bq,   l->bk,
                    l->bv,        l->q_norm, l->k_norm, l->ffn_norm, l->w_gate, l->w_up, l->w_down};
                for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++) free_weight(m, ws[j]);
            }
        }
        if (m->output != m->tok_embd) free_weight(m, m->output);
        free_weight(m, m->tok_embd);
        free_weight(m, m->out_norm);
        if (m->kv_ready) m->be->ops->kv_free(m->be);
        m->be->ops->destroy(m->be);
    }
    free(m->layers);
    free(m->st.tokens);
    free(m->st.pos);
    free(m->st.seq_row);
    free(m->st.out_idx);
    free(m->st.block_tables);
    free(m->st.slots);
    free(m->st.logits);
    free(m->st.lane_first);
    gguf_close(m->gguf);
    free(m);
}

int model_load_gguf(struct gguf *g, const struct model_options *opt, struct model **out, char *err,
                    size_t errlen)
{
    int rc = ERR_NOMEM;
    struct model *m = calloc(1, sizeof(*m));
    if (!m) {
        gguf_close(g);
        return fail(err, errlen, ERR_NOMEM, "out of memory");
    }
    m->gguf = g;
    if (opt)
        m->opt = *opt;
    else
        model_options_default(&m->opt);
    if (m->opt.kv_type != QUANT_F16 && m->opt.kv_type != QUANT_F32 &&
        m->opt.kv_type != QUANT_Q8_0) {
        rc = fail(err, errlen, ERR_INVAL, "KV cache type must be f16, f32 or q8_0");
        goto out;
    }
    if ((rc = model_hparams_parse(g, &m->hp, err, errlen))) goto out;
    const struct model_hparams *hp = &m->hp;
    if (m->opt.kv_type == QUANT_Q8_0 && hp->head_dim % QUANT_QK8_0 != 0) {
        rc =
            fail(err, errlen, ERR_UNSUPPORTED,
                 "KV cache type q8_0 needs a head dimension that is a multiple of %d (this model's "
                 "is %d); use f16",
                 QUANT_QK8_0, hp->head_dim);
        goto out;
    }

    struct backend_options bo = {.n_threads = m->opt.n_threads, .device = 0};
    if ((rc = backend_create(m->opt.backend, &bo, &m->be))) {
        fail(err, errlen, rc, "cannot create backend \"%s\" (%s)",
             m->opt.backend ? m->opt.backend : "default", err_str(rc));
        goto out;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers) {
        rc = fail(err, errlen, ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = load_weight(m, "token_embd.weight", hp->n_vocab, hp->n_embd,
                          hp->tied_output ? 0 : WEIGHT_LOOKUP_ONLY, &m->tok_embd, err, errlen)) ||
        (rc = load_weight(m, "output_norm.weight", 1, hp->n_embd, 0, &m->out_norm, err, errlen)) ||
        (rc = load_weight(m, "output.weight", hp->n_vocab, hp->n_embd, WEIGHT_OPTIONAL, &m->output,
                          err, errlen)))
        goto out;
    if (!m->output) m->output = m->tok_embd;
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = load_layer(m, il, err, errlen))) goto out;
    /* Lanes (model_lanes.c) where the backend runs them and no matrix is on the float path. */
    m->lanes_max = 1;
    if (!m->opt.no_lanes && !m->float_matmuls && m->be->ops->run_lanes)
        m->lanes_max = m->be->ops->lanes_max(m->be);
    m->s = calloc((size_t)m->lanes_max, sizeof(*m->s));
    m->st.lane_first = calloc((size_t)m->lanes_max + 1, sizeof(*m->st.lane_first));
    if (!m->s || !m->st.lane_first) {
        rc = fail(err, errlen, ERR_NOMEM, "out of memory");
        goto out;
    }
    if (gguf_find_tensor(g, "rope_freqs.weight"))
        log_warn("model has rope_freqs.weight (Llama 3.1 long-context rope); it is ignored",
                 LOG_S("arch", hp->arch_name));
    *out = m;
    m = NULL;
    rc = 0;
out:
    model_free(m);
    return rc;
}

int model_load(const char *path, const struct model_options *opt, struct model **out, char *err,
               size_t errlen)
{
    struct gguf *g = NULL;
    int rc = gguf_open(path, &g, err, errlen);
    if (rc) return rc;
    return model_load_gguf(g, opt, out, err, errlen);
}

const struct model_hparams *model_hparams(const struct model *m)
{
    return &m->hp;
}

const struct gguf *model_gguf(const struct model *m)
{
    return m->gguf;
}

struct backend *model_backend(struct model *m)
{
    return m->be;
}

uint64_t model_weight_bytes(const struct model *m)
{
    /* The embedding table is read one row per token, not whole; count it only when tied. */
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, "token_embd.weight");
    uint64_t b = m->weight_bytes;
    if (!m->hp.tied_output && t) b -= t->size;
    return b;
}

uint64_t model_kv_bytes_per_token(const struct model *m, enum quant_type kv_type)
{
    return 2ull * (uint64_t)m->hp.n_layer * (uint64_t)m->hp.n_head_kv *
           (uint64_t)quant_row_bytes(kv_type, (uint64_t)m->hp.head_dim);
}

bool model_kv_type_parse(const char *name, enum quant_type *out)
{
    static const struct {
        const char *name;
        enum quant_type type;
    } names[] = {{"f16", QUANT_F16}, {"f32", QUANT_F32}, {"q8_0", QUANT_Q8_0}};
    for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].type;
            return true;
        }
    }
    return false;
}

int model_kv_init(struct model *m, const struct kv_cache *kv)
{
    if (m->kv_ready) {
        m->be->ops->kv_free(m->be);
        m->kv_ready = false;
    }
    struct backend_kv_desc d = {
        .n_layers = m->hp.n_layer,
        .n_blocks = kv_cache_n_blocks(kv),
        .block_size = kv_cache_block_size(kv),
        .n_kv_heads = m->hp.n_head_kv,
        .head_dim = m->hp.head_dim,
        .type = m->opt.kv_type,
    };
    int rc = m->be->ops->kv_alloc(m->be, &d);
    if (rc == 0) m->kv_ready = true;
    return rc;
}

int model_kv_copy_block(struct model *m, int32_t src, int32_t dst)
{
    if (!m->kv_ready || !m->be->ops->kv_copy_block) return ERR_BAD_STATE;
    return m->be->ops->kv_copy_block(m->be, src, dst);
}
