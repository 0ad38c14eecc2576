/* Model loading: every tensor validated against the hyper-parameters (model_hparams.c) and
 * prepared on the backend, fused and stacked tensors as zero-copy row slices (phi3's attn_qkv and
 * gate/up halves, one matrix per expert). The forward pass is in model_forward.c. */
#include "engine/model/model.h"
#include "engine/model/model_priv.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void model_options_default(struct model_options *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->kv_type = QUANT_F16;
}

/* One spec line of a layer: blk.<il>.<suffix> as (rows, cols); need 0: skip, 1: required,
 * 2: optional. */
struct layer_tensor {
    const char *suffix;
    int64_t rows, cols;
    int need;
    struct backend_weight **dst;
};

static int load_specs(struct model *m, int il, const struct layer_tensor *spec, size_t n, char *err,
                      size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (spec[i].need == 0) continue;
        char name[96];
        snprintf(name, sizeof(name), "blk.%d.%s", il, spec[i].suffix);
        int rc = model_tensor_load(m, name, spec[i].rows, spec[i].cols,
                                   spec[i].need == 2 ? MODEL_WEIGHT_OPTIONAL : 0, spec[i].dst, err,
                                   errlen);
        if (rc) return rc;
    }
    return 0;
}

/* Q, K, V: a fused attn_qkv (phi3, or any file that fuses them) split by rows, else three
 * tensors; biases optional either way (llama.cpp's create_tensor_qkv). */
static int load_qkv(struct model *m, int il, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    struct model_layer *l = &m->layers[il];
    int64_t e = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim,
            kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t parts[3] = {q, kvd, kvd};
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.attn_qkv.weight", il);
    if (gguf_find_tensor(m->gguf, name)) {
        struct backend_weight *w[3], *bias[3];
        int rc = model_tensor_load_split(m, name, parts, 3, e, 0, w, err, errlen);
        l->wq = w[0];
        l->wk = w[1];
        l->wv = w[2];
        if (rc) return rc;
        snprintf(name, sizeof(name), "blk.%d.attn_qkv.bias", il);
        rc =
            model_tensor_load_split(m, name, parts, 3, 0, MODEL_WEIGHT_OPTIONAL, bias, err, errlen);
        l->bq = bias[0];
        l->bk = bias[1];
        l->bv = bias[2];
        if (rc || l->bq) return rc;
        const struct layer_tensor spec[] = {
            {"attn_q.bias", 1, q, 2, &l->bq},
            {"attn_k.bias", 1, kvd, 2, &l->bk},
            {"attn_v.bias", 1, kvd, 2, &l->bv},
        };
        return load_specs(m, il, spec, 3, err, errlen);
    }
    const struct layer_tensor spec[] = {
        {"attn_q.weight", q, e, 1, &l->wq},   {"attn_k.weight", kvd, e, 1, &l->wk},
        {"attn_v.weight", kvd, e, 1, &l->wv}, {"attn_q.bias", 1, q, 2, &l->bq},
        {"attn_k.bias", 1, kvd, 2, &l->bk},   {"attn_v.bias", 1, kvd, 2, &l->bv},
    };
    return load_specs(m, il, spec, sizeof(spec) / sizeof(spec[0]), err, errlen);
}

/* The routed FFN: router, stacked experts, qwen2moe's shared expert. */
static int load_moe(struct model *m, int il, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    struct model_layer *l = &m->layers[il];
    int64_t e = hp->n_embd, f = hp->n_ff_exp, fs = hp->n_ff_shexp;
    struct model_experts *x = calloc(1, sizeof(*x));
    if (!x) return model_fail(err, errlen, ERR_NOMEM, "out of memory");
    l->moe = x;
    char name[96];
    int rc;
    snprintf(name, sizeof(name), "blk.%d.ffn_gate_inp.weight", il);
    if ((rc = model_tensor_load(m, name, hp->n_expert, e, 0, &x->gate_inp, err, errlen))) return rc;
    snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.weight", il);
    if ((rc = model_tensor_load_experts(m, name, f, e, &x->gate, err, errlen))) return rc;
    snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.weight", il);
    if ((rc = model_tensor_load_experts(m, name, f, e, &x->up, err, errlen))) return rc;
    snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.weight", il);
    if ((rc = model_tensor_load_experts(m, name, e, f, &x->down, err, errlen))) return rc;
    if (!hp->shared_expert) return 0;
    const struct layer_tensor spec[] = {
        {"ffn_gate_inp_shexp.weight", 1, e, 1, &x->sh_gate_inp},
        {"ffn_gate_shexp.weight", fs, e, 1, &x->sh_gate},
        {"ffn_up_shexp.weight", fs, e, 1, &x->sh_up},
        {"ffn_down_shexp.weight", e, fs, 1, &x->sh_down},
    };
    return load_specs(m, il, spec, sizeof(spec) / sizeof(spec[0]), err, errlen);
}

static int load_layer(struct model *m, int il, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    struct model_layer *l = &m->layers[il];
    int64_t e = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, ff = hp->n_ff;
    enum model_arch a = hp->arch;
    bool llama = a == MODEL_ARCH_LLAMA;
    int qk_norm = a == MODEL_ARCH_QWEN3 || a == MODEL_ARCH_QWEN3MOE || a == MODEL_ARCH_GEMMA3;
    int post = hp->post_norms ? 1 : 0, dense = hp->n_expert == 0 && a != MODEL_ARCH_PHI3;
    int ffn_bias = llama && dense ? 2 : 0;
    l->swa = model_hparams_layer_swa(hp, il);
    int rc = load_qkv(m, il, err, errlen);
    if (rc) return rc;
    const struct layer_tensor spec[] = {
        {"attn_norm.weight", 1, e, 1, &l->attn_norm},
        {"attn_output.weight", e, q, 1, &l->wo},
        {"attn_output.bias", 1, e, llama ? 2 : 0, &l->bo},
        {"attn_q_norm.weight", 1, hp->head_dim, qk_norm, &l->q_norm},
        {"attn_k_norm.weight", 1, hp->head_dim, qk_norm, &l->k_norm},
        {"post_attention_norm.weight", 1, e, post, &l->attn_post_norm},
        {"ffn_norm.weight", 1, e, 1, &l->ffn_norm},
        {"post_ffw_norm.weight", 1, e, post, &l->ffn_post_norm},
        {"ffn_gate.weight", ff, e, dense, &l->w_gate},
        {"ffn_up.weight", ff, e, dense, &l->w_up},
        {"ffn_down.weight", e, ff, dense || a == MODEL_ARCH_PHI3, &l->w_down},
        {"ffn_gate.bias", 1, ff, ffn_bias, &l->b_gate},
        {"ffn_up.bias", 1, ff, ffn_bias, &l->b_up},
        {"ffn_down.bias", 1, e, ffn_bias, &l->b_down},
    };
    if ((rc = load_specs(m, il, spec, sizeof(spec) / sizeof(spec[0]), err, errlen))) return rc;
    if (a == MODEL_ARCH_PHI3) { /* ffn_up holds gate (first half, silu'd) and up */
        char name[96];
        const int64_t halves[2] = {ff, ff};
        struct backend_weight *w[2];
        snprintf(name, sizeof(name), "blk.%d.ffn_up.weight", il);
        rc = model_tensor_load_split(m, name, halves, 2, e, 0, w, err, errlen);
        l->w_gate = w[0];
        l->w_up = w[1];
        return rc;
    }
    return hp->n_expert > 0 ? load_moe(m, il, err, errlen) : 0;
}

/* The rope frequency factors llama.cpp's get_rope_factors picks: rope_freqs.weight (Llama 3.1),
 * else with long-rope (phi3 always, llama when the scaling type says so) rope_factors_long when
 * the sequences may be longer than the original context, rope_factors_short otherwise. F32,
 * n_rot / 2 values, copied out of the mapping (model.rope_factors). */
static int load_rope_factors(struct model *m, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    bool longrope =
        hp->arch == MODEL_ARCH_PHI3 ||
        (hp->arch == MODEL_ARCH_LLAMA && hp->rope_scaling == MODEL_ROPE_SCALING_LONGROPE);
    const char *name = NULL;
    if (hp->arch == MODEL_ARCH_LLAMA && !longrope)
        name = "rope_freqs.weight";
    else if (longrope) {
        int n_ctx = m->opt.n_ctx_seq > 0 ? m->opt.n_ctx_seq : hp->n_ctx_train;
        name = n_ctx > hp->n_ctx_orig ? "rope_factors_long.weight" : "rope_factors_short.weight";
    }
    const struct gguf_tensor *t;
    int rc;
    if (!name ||
        (rc = model_tensor_find(m, name, 1, hp->n_rot / 2, 0, MODEL_WEIGHT_OPTIONAL, &t, err,
                                errlen)) ||
        !t)
        return name ? rc : 0;
    if (t->type != QUANT_F32)
        return model_fail(err, errlen, ERR_UNSUPPORTED, "tensor %s: type %s, expected F32", name,
                          quant_type_name(t->type));
    model_tensor_progress(m, t);
    if (!(m->rope_factors = malloc(t->size)))
        return model_fail(err, errlen, ERR_NOMEM, "out of memory");
    memcpy(m->rope_factors, t->data, t->size);
    return 0;
}

static void free_weight(struct model *m, struct backend_weight *w)
{
    if (w) m->be->ops->weight_free(m->be, w);
}

static void free_experts(struct model *m, struct model_experts *x)
{
    if (!x) return;
    for (int e = 0; e < m->hp.n_expert; e++) {
        if (x->gate) free_weight(m, x->gate[e]);
        if (x->up) free_weight(m, x->up[e]);
        if (x->down) free_weight(m, x->down[e]);
    }
    free(x->gate);
    free(x->up);
    free(x->down);
    struct backend_weight *ws[] = {x->gate_inp, x->sh_gate_inp, x->sh_gate, x->sh_up, x->sh_down};
    for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++) free_weight(m, ws[j]);
    free(x);
}

void model_free(struct model *m)
{
    if (!m) return;
    if (m->be) {
        model_scratch_release(m);
        if (m->layers) {
            for (int i = 0; i < m->hp.n_layer; i++) {
                struct model_layer *l = &m->layers[i];
                struct backend_weight *ws[] = {l->attn_norm, l->wq,
                                               l->wk,        l->wv,
                                               l->wo,        l->bq,
                                               l->bk,        l->bv,
                                               l->bo,        l->q_norm,
                                               l->k_norm,    l->attn_post_norm,
                                               l->ffn_norm,  l->ffn_post_norm,
                                               l->w_gate,    l->w_up,
                                               l->w_down,    l->b_gate,
                                               l->b_up,      l->b_down};
                for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++) free_weight(m, ws[j]);
                free_experts(m, l->moe);
            }
        }
        if (m->output != m->tok_embd) free_weight(m, m->output);
        free_weight(m, m->tok_embd);
        free_weight(m, m->out_norm);
        free_weight(m, m->out_bias);
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
    free(m->rope_factors);
    gguf_close(m->gguf);
    free(m);
}

/* The output projection and its optional bias (qwen2, phi3); gemma2 always reuses token_embd. */
static int load_output(struct model *m, char *err, size_t errlen)
{
    const struct model_hparams *hp = &m->hp;
    int rc;
    if ((rc = model_tensor_load(m, "token_embd.weight", hp->n_vocab, hp->n_embd,
                                hp->tied_output ? MODEL_WEIGHT_LOOKUP : MODEL_WEIGHT_LOOKUP_ONLY,
                                &m->tok_embd, err, errlen)) ||
        (rc = model_tensor_load(m, "output_norm.weight", 1, hp->n_embd, 0, &m->out_norm, err,
                                errlen)))
        return rc;
    if (!hp->tied_output && (rc = model_tensor_load(m, "output.weight", hp->n_vocab, hp->n_embd, 0,
                                                    &m->output, err, errlen)))
        return rc;
    if (!m->output) m->output = m->tok_embd;
    bool out_bias = hp->arch == MODEL_ARCH_QWEN2 || hp->arch == MODEL_ARCH_PHI3;
    if (out_bias && (rc = model_tensor_load(m, "output.bias", 1, hp->n_vocab, MODEL_WEIGHT_OPTIONAL,
                                            &m->out_bias, err, errlen)))
        return rc;
    return 0;
}

int model_load_gguf(struct gguf *g, const struct model_options *opt, struct model **out, char *err,
                    size_t errlen)
{
    int rc = ERR_NOMEM;
    struct model *m = calloc(1, sizeof(*m));
    if (!m) {
        gguf_close(g);
        return model_fail(err, errlen, ERR_NOMEM, "out of memory");
    }
    m->gguf = g;
    if (opt)
        m->opt = *opt;
    else
        model_options_default(&m->opt);
    if (m->opt.kv_type != QUANT_F16 && m->opt.kv_type != QUANT_F32 &&
        m->opt.kv_type != QUANT_Q8_0) {
        rc = model_fail(err, errlen, ERR_INVAL, "KV cache type must be f16, f32 or q8_0");
        goto out;
    }
    if ((rc = model_hparams_parse(g, &m->hp, err, errlen))) goto out;
    const struct model_hparams *hp = &m->hp;
    if (m->opt.kv_type == QUANT_Q8_0 && hp->head_dim % QUANT_QK8_0 != 0) {
        rc = model_fail(
            err, errlen, ERR_UNSUPPORTED,
            "KV cache type q8_0 needs a head dimension that is a multiple of %d (this model's "
            "is %d); use f16",
            QUANT_QK8_0, hp->head_dim);
        goto out;
    }

    if (m->opt.sha256) {
        char hex[SHA256_HEX_LEN];
        double t0 = clock_mono_s();
        if ((rc = gguf_sha256_hex(g, hex))) {
            model_fail(err, errlen, rc, "cannot hash the model file to verify it (%s)",
                       err_str(rc));
            goto out;
        }
        if (strcmp(hex, m->opt.sha256) != 0) {
            rc = model_fail(err, errlen, ERR_BAD_STATE, "sha256 mismatch: expected %s, got %s",
                            m->opt.sha256, hex);
            goto out;
        }
        log_info("model verified", LOG_S("sha256", hex), LOG_F("seconds", clock_mono_s() - t0));
    }
    m->opt.sha256 = NULL; /* borrowed for this call only */

    struct backend_options bo = {.n_threads = m->opt.n_threads, .device = m->opt.device};
    if ((rc = backend_create(m->opt.backend, &bo, &m->be))) {
        model_fail(err, errlen, rc, "cannot create backend \"%s\" (%s)",
                   m->opt.backend ? m->opt.backend : "default", err_str(rc));
        goto out;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers) {
        rc = model_fail(err, errlen, ERR_NOMEM, "out of memory");
        goto out;
    }
    m->load_t0 = m->load_logged = clock_mono_s();
    for (size_t i = 0; i < gguf_tensor_count(g); i++) m->load_total += gguf_tensor_at(g, i)->size;
    if ((rc = load_output(m, err, errlen)) || (rc = load_rope_factors(m, err, errlen))) goto out;
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = load_layer(m, il, err, errlen))) goto out;
    if (m->load_logged != m->load_t0) /* it took long enough to say so: say when it is done */
        log_info("weights loaded", LOG_I("bytes", (long long)m->load_done),
                 LOG_I("total", (long long)m->load_total),
                 LOG_F("seconds", clock_mono_s() - m->load_t0));
    /* Lanes (model_lanes.c) where the backend runs them and no matrix is on the float path. */
    m->lanes_max = 1;
    if (!m->opt.no_lanes && !m->float_matmuls && m->be->ops->run_lanes)
        m->lanes_max = m->be->ops->lanes_max(m->be);
    m->s = calloc((size_t)m->lanes_max, sizeof(*m->s));
    m->st.lane_first = calloc((size_t)m->lanes_max + 1, sizeof(*m->st.lane_first));
    if (!m->s || !m->st.lane_first) {
        rc = model_fail(err, errlen, ERR_NOMEM, "out of memory");
        goto out;
    }
    if (opt && opt->sha256 && gguf_file_changed(g, NULL, 0)) {
        rc = model_fail(err, errlen, ERR_BAD_STATE,
                        "the model file changed while it was verified and loaded");
        goto out;
    }
    /* The backend and the rope factors hold copies of everything the forward pass reads
     * (backend.h): unmap the file, so that truncating or rewriting it under the running engine
     * can neither fault it (SIGBUS) nor change its weights. The key/values stay readable. */
    gguf_release_data(g);
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
    if (rc == 0) {
        m->kv_ready = true;
        m->kv_block_size = d.block_size;
    }
    return rc;
}

size_t model_kv_block_bytes(const struct model *m)
{
    if (!m->kv_ready) return 0;
    return (size_t)model_kv_bytes_per_token(m, m->opt.kv_type) * (size_t)m->kv_block_size;
}

int model_kv_block_read(struct model *m, int32_t block, void *dst, size_t bytes)
{
    if (!m->kv_ready) return ERR_BAD_STATE;
    if (!m->be->ops->kv_block_read) return ERR_UNSUPPORTED;
    return m->be->ops->kv_block_read(m->be, block, dst, bytes);
}

int model_kv_block_write(struct model *m, int32_t block, const void *src, size_t bytes)
{
    if (!m->kv_ready) return ERR_BAD_STATE;
    if (!m->be->ops->kv_block_write) return ERR_UNSUPPORTED;
    return m->be->ops->kv_block_write(m->be, block, src, bytes);
}

int model_kv_copy_block(struct model *m, int32_t src, int32_t dst)
{
    if (!m->kv_ready || !m->be->ops->kv_copy_block) return ERR_BAD_STATE;
    return m->be->ops->kv_copy_block(m->be, src, dst);
}
