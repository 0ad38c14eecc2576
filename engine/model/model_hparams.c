/* Hyper-parameters from GGUF keys, per architecture as llama.cpp reads them (llama-model.cpp's
 * load_hparams, src/models/<arch>.cpp's load_arch_hparams, llama-context.cpp's rope parameters).
 * Tensors are validated against them in model_load.c. */
#include "engine/model/model.h"
#include "engine/model/model_priv.h"

#include "common/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MODEL_MAX_DIM (1 << 20)

int model_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(err, errlen, rc, fmt, ap);
    va_end(ap);
    return rc;
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
    if (rc == ERR_NOT_FOUND) return model_fail(err, errlen, ERR_INVAL, "missing key %s", full);
    if (rc)
        return model_fail(err, errlen, ERR_INVAL, "key %s: not an unsigned 32-bit integer", full);
    if (v == 0 || v > max)
        return model_fail(err, errlen, ERR_INVAL, "key %s: value %u outside [1, %lld]", full, v,
                          (long long)max);
    *out = (int)v;
    return 0;
}

/* Reads "<arch>.<key>" as an int in [0, max], `def` when absent (0 allowed, unlike arch_int). */
static int arch_count(const struct gguf *g, const char *arch, const char *key, int def, int max,
                      int *out, char *err, size_t errlen)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    uint32_t v;
    int rc = gguf_get_u32(g, full, &v);
    if (rc == ERR_NOT_FOUND) {
        *out = def;
        return 0;
    }
    if (rc)
        return model_fail(err, errlen, ERR_INVAL, "key %s: not an unsigned 32-bit integer", full);
    if (v > (uint32_t)max)
        return model_fail(err, errlen, ERR_INVAL, "key %s: value %u above %d", full, v, max);
    *out = (int)v;
    return 0;
}

/* Reads "<arch>.<key>" as a finite float, positive unless `nonneg`; NAN `def` means required. */
static int arch_float_ext(const struct gguf *g, const char *arch, const char *key, float def,
                          bool nonneg, float *out, char *err, size_t errlen)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    float v;
    int rc = gguf_get_f32(g, full, &v);
    if (rc == ERR_NOT_FOUND && !isnan(def)) {
        *out = def;
        return 0;
    }
    if (rc == ERR_NOT_FOUND) return model_fail(err, errlen, ERR_INVAL, "missing key %s", full);
    if (rc || !isfinite(v) || v < 0.0f || (!nonneg && v == 0.0f))
        return model_fail(err, errlen, ERR_INVAL, "key %s: not a %s finite float", full,
                          nonneg ? "non-negative" : "positive");
    *out = v;
    return 0;
}

static int arch_float(const struct gguf *g, const char *arch, const char *key, float def,
                      float *out, char *err, size_t errlen)
{
    return arch_float_ext(g, arch, key, def, false, out, err, errlen);
}

/* Rope scaling as llama.cpp reads it (llama_model_base::load_hparams, llama_context): the type
 * defaults to linear; the factor comes from rope.scaling.factor (or the older rope.scale_linear),
 * 0 or absent meaning none, freq_scale = 1 / factor (1 with type none); YaRN sets ext_factor 1 and
 * pre-cancels the magnitude correction ggml's rope applies; rope.scaling.attn_factor multiplies
 * every type's cos/sin. Types llama.cpp does not know (e.g. "llama3", "dynamic") are refused. */
static int parse_rope(const struct gguf *g, struct model_hparams *hp, char *err, size_t errlen)
{
    const char *a = hp->arch_name;
    char key[128], type[32] = "linear";
    snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
    int rc = gguf_get_cstr(g, key, type, sizeof(type));
    if (rc && rc != ERR_NOT_FOUND)
        return model_fail(err, errlen, ERR_INVAL, "key %s: not a short string", key);
    static const struct {
        const char *name;
        enum model_rope_scaling type;
    } types[] = {{"none", MODEL_ROPE_SCALING_NONE},
                 {"linear", MODEL_ROPE_SCALING_LINEAR},
                 {"yarn", MODEL_ROPE_SCALING_YARN},
                 {"longrope", MODEL_ROPE_SCALING_LONGROPE}};
    size_t i = 0;
    while (i < sizeof(types) / sizeof(types[0]) && strcmp(type, types[i].name) != 0) i++;
    if (i == sizeof(types) / sizeof(types[0]))
        return model_fail(err, errlen, ERR_UNSUPPORTED,
                          "rope scaling type \"%s\" is not supported (none, linear, yarn, "
                          "longrope; Llama 3.x files carry rope_freqs.weight instead)",
                          type);
    hp->rope_scaling = types[i].type;

    float factor = 0.0f;
    snprintf(key, sizeof(key), "%s.rope.scaling.factor", a);
    rc = gguf_get_f32(g, key, &factor);
    if (rc == ERR_NOT_FOUND) {
        snprintf(key, sizeof(key), "%s.rope.scale_linear", a);
        rc = gguf_get_f32(g, key, &factor);
    }
    if (rc == ERR_NOT_FOUND)
        factor = 0.0f;
    else if (rc || !isfinite(factor) || factor < 0.0f)
        return model_fail(err, errlen, ERR_INVAL, "key %s: not a finite float >= 0", key);
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    if (hp->rope_scaling == MODEL_ROPE_SCALING_NONE) hp->rope_freq_scale = 1.0f;

    float attn = 1.0f;
    if ((rc = arch_float(g, a, "rope.scaling.attn_factor", 1.0f, &attn, err, errlen)) ||
        (rc = arch_int(g, a, "rope.scaling.original_context_length", hp->n_ctx_train, INT32_MAX,
                       &hp->n_ctx_orig, err, errlen)))
        return rc;
    hp->rope_beta_fast = 32.0f; /* llama.cpp reads these keys for none of these architectures */
    hp->rope_beta_slow = 1.0f;
    hp->rope_ext_factor = hp->rope_scaling == MODEL_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    hp->rope_attn_factor = 1.0f;
    if (hp->rope_ext_factor != 0.0f) {
        float f = 1.0f / hp->rope_freq_scale;
        hp->rope_attn_factor = f <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(f) + 1.0f;
        hp->rope_attn_factor *= 1.0f / (1.0f + 0.1f * logf(f));
    }
    hp->rope_attn_factor *= attn;
    return 0;
}

/* Sliding-window layers as llama_model_base::load_swa_pattern sets them: from a per-layer bool
 * array <arch>.attention.sliding_window_pattern, or from a period n (that key as an integer, else
 * `def_pattern`): layer il slides unless il % n == n - 1 (n 0: every layer). */
static int parse_swa_pattern(const struct gguf *g, struct model_hparams *hp, int def_pattern,
                             char *err, size_t errlen)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", hp->arch_name);
    memset(hp->swa_layers, 0, sizeof(hp->swa_layers));
    const struct gguf_kv *kv = gguf_find(g, key);
    if (kv && kv->type == GGUF_ARRAY) {
        const struct gguf_array *arr = &kv->v.arr;
        if (arr->n > MODEL_MAX_LAYERS)
            return model_fail(err, errlen, ERR_INVAL, "key %s: %llu entries", key,
                              (unsigned long long)arr->n);
        for (uint64_t il = 0; il < arr->n; il++) {
            int64_t v;
            if (gguf_arr_get_i64(arr, il, &v))
                return model_fail(err, errlen, ERR_INVAL, "key %s: not a bool array", key);
            if (v && (int64_t)il < hp->n_layer) hp->swa_layers[il / 64] |= 1ull << (il % 64);
        }
        return 0;
    }
    int n = def_pattern, rc;
    if ((rc = arch_count(g, hp->arch_name, "attention.sliding_window_pattern", def_pattern,
                         MODEL_MAX_LAYERS, &n, err, errlen)))
        return rc;
    for (int il = 0; il < hp->n_layer; il++)
        if (n == 0 || il % n < n - 1) hp->swa_layers[il / 64] |= 1ull << (il % 64);
    return 0;
}

/* gemma2 / gemma3 (src/models/gemma2.cpp, gemma3.cpp). */
static int parse_gemma(const struct gguf *g, struct model_hparams *hp, char *err, size_t errlen)
{
    const char *a = hp->arch_name;
    bool g2 = hp->arch == MODEL_ARCH_GEMMA2;
    int rc;
    hp->embd_scale = true;
    hp->gelu = true;
    hp->post_norms = true;
    /* gemma_pytorch's query_pre_attn_scalar: n_embd / n_head for the 27B models, else head_dim */
    bool is_27b = hp->n_layer == (g2 ? 46 : 62);
    hp->q_scale =
        is_27b ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head)) : 1.0f / sqrtf((float)hp->head_dim);
    hp->rope_freq_base_swa = g2 ? hp->rope_freq_base : 10000.0f;
    hp->rope_freq_scale_swa = g2 ? hp->rope_freq_scale : 1.0f;
    if ((rc = arch_count(g, a, "attention.sliding_window", g2 ? 4096 : 0, INT32_MAX, &hp->n_swa,
                         err, errlen)))
        return rc;
    if (hp->n_swa > 0) {
        if ((rc = parse_swa_pattern(g, hp, g2 ? 2 : 6, err, errlen)) ||
            (rc = arch_float(g, a, "rope.freq_base_swa", hp->rope_freq_base_swa,
                             &hp->rope_freq_base_swa, err, errlen)))
            return rc;
    }
    if (g2 &&
        (rc = arch_float(g, a, "attn_logit_softcapping", 50.0f, &hp->attn_softcap, err, errlen)))
        return rc;
    return arch_float_ext(g, a, "final_logit_softcapping", g2 ? 30.0f : 0.0f, true,
                          &hp->final_softcap, err, errlen);
}

/* Expert counts and widths (llama-model.cpp and src/models/{llama,qwen2moe,qwen3moe}.cpp). */
static int parse_experts(const struct gguf *g, struct model_hparams *hp, char *err, size_t errlen)
{
    const char *a = hp->arch_name;
    bool moe_arch = hp->arch == MODEL_ARCH_QWEN2MOE || hp->arch == MODEL_ARCH_QWEN3MOE;
    int rc;
    if ((rc = arch_count(g, a, "expert_count", 0, MODEL_MAX_EXPERTS, &hp->n_expert, err, errlen)) ||
        (rc = arch_count(g, a, "expert_used_count", 0, MODEL_MAX_EXPERTS, &hp->n_expert_used, err,
                         errlen)))
        return rc;
    if (hp->n_expert == 0 && hp->n_expert_used == 0 && !moe_arch) return 0;
    if (hp->arch != MODEL_ARCH_LLAMA && !moe_arch)
        return model_fail(err, errlen, ERR_UNSUPPORTED,
                          "%s.expert_count %d: experts are not supported for %s", a, hp->n_expert,
                          a);
    if (hp->n_expert == 0 || hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
        return model_fail(err, errlen, ERR_INVAL,
                          "%s.expert_count %d / expert_used_count %d: need 1 <= used <= count", a,
                          hp->n_expert, hp->n_expert_used);
    int def = hp->arch == MODEL_ARCH_LLAMA ? hp->n_ff : hp->n_ff / hp->n_expert_used;
    if ((rc = arch_count(g, a, "expert_feed_forward_length", def, MODEL_MAX_DIM, &hp->n_ff_exp, err,
                         errlen)))
        return rc;
    if (hp->n_ff_exp == 0)
        return model_fail(err, errlen, ERR_INVAL, "missing key %s.expert_feed_forward_length", a);
    hp->expert_norm = hp->arch != MODEL_ARCH_QWEN2MOE;
    if (hp->arch == MODEL_ARCH_QWEN2MOE) {
        hp->shared_expert = true;
        if ((rc = arch_count(g, a, "expert_shared_feed_forward_length", hp->n_ff, MODEL_MAX_DIM,
                             &hp->n_ff_shexp, err, errlen)))
            return rc;
        if (hp->n_ff_shexp == 0)
            return model_fail(err, errlen, ERR_INVAL,
                              "missing key %s.expert_shared_feed_forward_length", a);
    }
    return 0;
}

/* The head geometry: GQA, key/value lengths, rotated dimensions. */
static int parse_heads(const struct gguf *g, struct model_hparams *hp, char *err, size_t errlen)
{
    const char *a = hp->arch_name;
    int rc;
    if ((rc = arch_int(g, a, "attention.head_count_kv", hp->n_head, hp->n_head, &hp->n_head_kv, err,
                       errlen)))
        return rc;
    if (hp->n_head % hp->n_head_kv != 0)
        return model_fail(err, errlen, ERR_INVAL,
                          "%s.attention.head_count %d is not a multiple of head_count_kv %d", a,
                          hp->n_head, hp->n_head_kv);
    int def_hd = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : -1;
    if ((rc = arch_int(g, a, "attention.key_length", def_hd, MODEL_MAX_DIM, &hp->head_dim, err,
                       errlen)))
        return rc;
    int vlen, klen_swa, vlen_swa, rot_swa;
    if ((rc = arch_int(g, a, "attention.value_length", hp->head_dim, MODEL_MAX_DIM, &vlen, err,
                       errlen)))
        return rc;
    if (vlen != hp->head_dim)
        return model_fail(err, errlen, ERR_UNSUPPORTED,
                          "%s.attention.value_length %d differs from key_length %d", a, vlen,
                          hp->head_dim);
    if ((rc = arch_int(g, a, "rope.dimension_count", hp->head_dim, hp->head_dim, &hp->n_rot, err,
                       errlen)))
        return rc;
    if (hp->n_rot % 2 != 0)
        return model_fail(err, errlen, ERR_INVAL, "%s.rope.dimension_count %d is odd", a,
                          hp->n_rot);
    /* llama.cpp's llama, qwen and moe graphs assert n_rot == head_dim */
    bool full_rot = hp->arch != MODEL_ARCH_GEMMA2 && hp->arch != MODEL_ARCH_GEMMA3 &&
                    hp->arch != MODEL_ARCH_PHI3;
    if (full_rot && hp->n_rot != hp->head_dim)
        return model_fail(err, errlen, ERR_UNSUPPORTED,
                          "%s.rope.dimension_count %d differs from the head dimension %d", a,
                          hp->n_rot, hp->head_dim);
    if ((rc = arch_int(g, a, "attention.key_length_swa", hp->head_dim, MODEL_MAX_DIM, &klen_swa,
                       err, errlen)) ||
        (rc = arch_int(g, a, "attention.value_length_swa", hp->head_dim, MODEL_MAX_DIM, &vlen_swa,
                       err, errlen)) ||
        (rc = arch_int(g, a, "rope.dimension_count_swa", hp->n_rot, MODEL_MAX_DIM, &rot_swa, err,
                       errlen)))
        return rc;
    if (klen_swa != hp->head_dim || vlen_swa != hp->head_dim || rot_swa != hp->n_rot)
        return model_fail(err, errlen, ERR_UNSUPPORTED,
                          "%s: sliding-window layers with their own head or rope dimensions are "
                          "not supported",
                          a);
    return 0;
}

static const struct {
    const char *name;
    enum model_arch arch;
} model_arches[] = {
    {"llama", MODEL_ARCH_LLAMA},       {"qwen2", MODEL_ARCH_QWEN2},
    {"qwen3", MODEL_ARCH_QWEN3},       {"qwen2moe", MODEL_ARCH_QWEN2MOE},
    {"qwen3moe", MODEL_ARCH_QWEN3MOE}, {"gemma2", MODEL_ARCH_GEMMA2},
    {"gemma3", MODEL_ARCH_GEMMA3},     {"phi3", MODEL_ARCH_PHI3},
};

int model_hparams_parse(const struct gguf *g, struct model_hparams *out, char *err, size_t errlen)
{
    struct model_hparams hp;
    memset(&hp, 0, sizeof(hp));
    int rc = gguf_get_cstr(g, "general.architecture", hp.arch_name, sizeof(hp.arch_name));
    if (rc == ERR_NOT_FOUND)
        return model_fail(err, errlen, ERR_INVAL, "missing key general.architecture");
    if (rc)
        return model_fail(err, errlen, ERR_INVAL, "key general.architecture: not a short string");
    size_t ai = 0, n_arch = sizeof(model_arches) / sizeof(model_arches[0]);
    while (ai < n_arch && strcmp(hp.arch_name, model_arches[ai].name) != 0) ai++;
    if (ai == n_arch)
        return model_fail(err, errlen, ERR_UNSUPPORTED,
                          "architecture \"%s\" is not supported (" MODEL_ARCH_NAMES ")",
                          hp.arch_name);
    hp.arch = model_arches[ai].arch;
    hp.rope_mode = hp.arch == MODEL_ARCH_LLAMA ? BACKEND_ROPE_NORMAL : BACKEND_ROPE_NEOX;
    bool moe_arch = hp.arch == MODEL_ARCH_QWEN2MOE || hp.arch == MODEL_ARCH_QWEN3MOE;
    const char *a = hp.arch_name;
    if ((rc = arch_int(g, a, "context_length", -1, INT32_MAX, &hp.n_ctx_train, err, errlen)) ||
        (rc = arch_int(g, a, "embedding_length", -1, MODEL_MAX_DIM, &hp.n_embd, err, errlen)) ||
        (rc = arch_int(g, a, "block_count", -1, MODEL_MAX_LAYERS, &hp.n_layer, err, errlen)) ||
        (rc = arch_int(g, a, "feed_forward_length", moe_arch ? 0 : -1, MODEL_MAX_DIM, &hp.n_ff, err,
                       errlen)) ||
        (rc = arch_int(g, a, "attention.head_count", -1, MODEL_MAX_DIM, &hp.n_head, err, errlen)) ||
        (rc = parse_heads(g, &hp, err, errlen)))
        return rc;
    if ((rc =
             arch_float(g, a, "attention.layer_norm_rms_epsilon", NAN, &hp.rms_eps, err, errlen)) ||
        (rc = arch_float(g, a, "rope.freq_base", 10000.0f, &hp.rope_freq_base, err, errlen)) ||
        (rc = parse_rope(g, &hp, err, errlen)) || (rc = parse_experts(g, &hp, err, errlen)))
        return rc;
    hp.rope_freq_base_swa = hp.rope_freq_base;
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    if (hp.arch == MODEL_ARCH_GEMMA2 || hp.arch == MODEL_ARCH_GEMMA3) {
        if ((rc = parse_gemma(g, &hp, err, errlen))) return rc;
    } else if (hp.arch == MODEL_ARCH_PHI3) {
        /* phi3.cpp scales q by 1 / sqrt(head_dim) after rope; its sliding window is ignored
         * (llama.cpp turns Phi SWA off) */
        hp.q_scale = 1.0f / sqrtf((float)hp.head_dim);
    }

    const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb) return model_fail(err, errlen, ERR_NOT_FOUND, "missing tensor token_embd.weight");
    if (emb->n_dims != 2 || emb->ne[1] == 0 || emb->ne[1] > INT32_MAX)
        return model_fail(err, errlen, ERR_INVAL,
                          "tensor token_embd.weight: expected 2 dimensions (%d, n_vocab)",
                          hp.n_embd);
    hp.n_vocab = (int)emb->ne[1];
    /* gemma2 always reuses the embedding (llama.cpp ignores an output.weight there) */
    hp.tied_output = hp.arch == MODEL_ARCH_GEMMA2 || gguf_find_tensor(g, "output.weight") == NULL;
    *out = hp;
    return 0;
}
