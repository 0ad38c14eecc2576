/* The architecture-specific part of gen-model (gen_model.h): each architecture's metadata keys and
 * tensors as llama.cpp's converter writes them (names from llama-arch.cpp, shapes from
 * src/models/<arch>.cpp), so llama.cpp loads the files and the engine's tests compare with it. */
#include "engine/tools/gen_model_priv.h"

#include "common/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool arch_is(const struct gen_model_opts *o, const char *a)
{
    return strcmp(o->arch, a) == 0;
}

static bool arch_gemma(const struct gen_model_opts *o)
{
    return arch_is(o, "gemma2") || arch_is(o, "gemma3");
}

static bool arch_moe(const struct gen_model_opts *o)
{
    return arch_is(o, "qwen2moe") || arch_is(o, "qwen3moe") || o->experts > 0;
}

static uint32_t head_dim(const struct gen_model_opts *o)
{
    return o->head_dim ? o->head_dim : o->dim / o->heads;
}

static bool rope_is(const struct gen_model_opts *o, const char *s)
{
    return o->rope_scaling && strcmp(o->rope_scaling, s) == 0;
}

static uint32_t rope_orig(const struct gen_model_opts *o)
{
    uint32_t n = o->rope_orig_ctx ? o->rope_orig_ctx : o->context_length / 4;
    return n ? n : 1;
}

int gen_model_arch_check(struct gen_model_ctx *c)
{
    const struct gen_model_opts *o = c->o;
    static const char *const arches[] = {"llama",    "qwen2",  "qwen3",  "qwen2moe",
                                         "qwen3moe", "gemma2", "gemma3", "phi3"};
    size_t i = 0, n = sizeof(arches) / sizeof(arches[0]);
    while (o->arch && i < n && strcmp(o->arch, arches[i]) != 0) i++;
    if (!o->arch || i == n)
        return gen_model_fail(c, ERR_INVAL, "architecture \"%s\" is not one of " GEN_MODEL_ARCHS,
                              o->arch ? o->arch : "");
    uint32_t hd = head_dim(o);
    if (hd == 0 || hd % 2 != 0 || hd > 4096)
        return gen_model_fail(c, ERR_INVAL, "head dimension %u must be even (and <= 4096)", hd);
    if (!o->head_dim && o->dim % o->heads != 0)
        return gen_model_fail(c, ERR_INVAL,
                              "dim %u is not a multiple of heads %u (or give a head "
                              "dimension)",
                              o->dim, o->heads);
    bool qmoe = arch_is(o, "qwen2moe") || arch_is(o, "qwen3moe");
    if (qmoe && o->experts == 0)
        return gen_model_fail(c, ERR_INVAL, "%s needs experts (--experts, --experts-used)",
                              o->arch);
    if (o->experts > 0 && !qmoe && !arch_is(o, "llama"))
        return gen_model_fail(c, ERR_INVAL, "experts are for llama, qwen2moe and qwen3moe");
    if (o->experts > 512 ||
        (o->experts > 0 && (o->experts_used == 0 || o->experts_used > o->experts)))
        return gen_model_fail(c, ERR_INVAL, "experts %u, used %u: need 1 <= used <= experts <= 512",
                              o->experts, o->experts_used);
    if ((o->sliding_window || o->swa_pattern || o->attn_softcap > 0 || o->final_softcap > 0) &&
        !arch_gemma(o))
        return gen_model_fail(c, ERR_INVAL, "sliding windows and soft-caps are for gemma2/gemma3");
    if (o->rope_scaling && !rope_is(o, "none") && !rope_is(o, "linear") && !rope_is(o, "yarn") &&
        !rope_is(o, "llama3") && !rope_is(o, "longrope"))
        return gen_model_fail(c, ERR_INVAL,
                              "rope scaling \"%s\" is not one of " GEN_MODEL_ROPE_SCALINGS,
                              o->rope_scaling);
    if (rope_is(o, "llama3") && !arch_is(o, "llama"))
        return gen_model_fail(c, ERR_INVAL, "llama3 rope scaling is for llama");
    if (rope_is(o, "longrope") && !arch_is(o, "phi3"))
        return gen_model_fail(c, ERR_INVAL, "longrope rope scaling is for phi3");
    if (o->rope_scaling && !rope_is(o, "none") && !(o->rope_factor >= 1.0f))
        return gen_model_fail(c, ERR_INVAL, "rope factor %g must be >= 1", o->rope_factor);
    return 0;
}

size_t gen_model_arch_max_tensors(const struct gen_model_opts *o)
{
    return 5 + 20 * (size_t)o->layers;
}

static int key_u32(struct gen_model_ctx *c, const char *suffix, uint32_t v)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", c->o->arch, suffix);
    int rc = gguf_writer_set_u32(c->w, key, v);
    return rc ? gen_model_fail(c, rc, "cannot set %s", key) : 0;
}

static int key_f32(struct gen_model_ctx *c, const char *suffix, float v)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", c->o->arch, suffix);
    int rc = gguf_writer_set_f32(c->w, key, v);
    return rc ? gen_model_fail(c, rc, "cannot set %s", key) : 0;
}

static int key_str(struct gen_model_ctx *c, const char *suffix, const char *v)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", c->o->arch, suffix);
    int rc = gguf_writer_set_str(c->w, key, v);
    return rc ? gen_model_fail(c, rc, "cannot set %s", key) : 0;
}

/* rope.scaling.* keys: llama3 and longrope write tensors instead (plus longrope's attn_factor). */
static int rope_metadata(struct gen_model_ctx *c)
{
    const struct gen_model_opts *o = c->o;
    int rc = 0;
    if (rope_is(o, "linear") || rope_is(o, "yarn")) {
        if ((rc = key_str(c, "rope.scaling.type", o->rope_scaling)) ||
            (rc = key_f32(c, "rope.scaling.factor", o->rope_factor)))
            return rc;
        if (rope_is(o, "yarn"))
            rc = key_u32(c, "rope.scaling.original_context_length", rope_orig(o));
    } else if (rope_is(o, "longrope")) {
        /* the converter's attn_factor for su/longrope: sqrt(1 + ln(scale) / ln(orig ctx)) */
        double scale = (double)o->context_length / rope_orig(o);
        double af = scale > 1.0 ? sqrt(1.0 + log(scale) / log((double)rope_orig(o))) : 1.0;
        if ((rc = key_u32(c, "rope.scaling.original_context_length", rope_orig(o))) ||
            (rc = key_f32(c, "rope.scaling.attn_factor", (float)af)))
            return rc;
    }
    return rc;
}

int gen_model_arch_metadata(struct gen_model_ctx *c)
{
    const struct gen_model_opts *o = c->o;
    uint32_t hd = head_dim(o);
    bool gemma = arch_gemma(o), g3 = arch_is(o, "gemma3");
    int rc;
    if ((rc = key_u32(c, "context_length", o->context_length)) ||
        (rc = key_u32(c, "embedding_length", o->dim)) ||
        (rc = key_u32(c, "block_count", o->layers)) ||
        (rc = key_u32(c, "feed_forward_length", o->ffn)) ||
        (rc = key_u32(c, "rope.dimension_count", hd)) ||
        (rc = key_f32(c, "rope.freq_base", g3 ? 1000000.0f : 10000.0f)) ||
        (rc = key_u32(c, "attention.head_count", o->heads)) ||
        (rc = key_u32(c, "attention.head_count_kv", o->kv_heads)) ||
        (rc = key_f32(c, "attention.layer_norm_rms_epsilon", gemma ? 1e-6f : 1e-5f)))
        return rc;
    if ((o->head_dim || gemma) && ((rc = key_u32(c, "attention.key_length", hd)) ||
                                   (rc = key_u32(c, "attention.value_length", hd))))
        return rc;
    if ((rc = rope_metadata(c))) return rc;
    if (arch_moe(o)) {
        if ((rc = key_u32(c, "expert_count", o->experts)) ||
            (rc = key_u32(c, "expert_used_count", o->experts_used)))
            return rc;
        if (!arch_is(o, "llama") &&
            (rc = key_u32(c, "expert_feed_forward_length", o->expert_ffn ? o->expert_ffn : o->ffn)))
            return rc;
        if (arch_is(o, "qwen2moe") && (rc = key_u32(c, "expert_shared_feed_forward_length",
                                                    o->shared_ffn ? o->shared_ffn : o->ffn)))
            return rc;
    }
    if (!gemma) return 0;
    uint32_t swa = o->sliding_window ? o->sliding_window : g3 ? 0 : 4096;
    if (swa && (rc = key_u32(c, "attention.sliding_window", swa))) return rc;
    if (o->swa_pattern && (rc = key_u32(c, "attention.sliding_window_pattern", o->swa_pattern)))
        return rc;
    if (g3) {
        if ((rc = key_f32(c, "rope.freq_base_swa", 10000.0f))) return rc;
        if (o->final_softcap > 0 && (rc = key_f32(c, "final_logit_softcapping", o->final_softcap)))
            return rc;
        return 0;
    }
    if ((rc =
             key_f32(c, "attn_logit_softcapping", o->attn_softcap > 0 ? o->attn_softcap : 50.0f)) ||
        (rc = key_f32(c, "final_logit_softcapping",
                      o->final_softcap > 0 ? o->final_softcap : 30.0f)))
        return rc;
    return 0;
}

/* blk.<l>.<part>.weight (or .bias for GEN_MODEL_BIAS). */
static int layer_tensor(struct gen_model_ctx *c, uint32_t l, const char *part, uint64_t cols,
                        uint64_t rows, uint64_t n3, enum gen_model_kind kind)
{
    char name[64];
    snprintf(name, sizeof(name), "blk.%u.%s.%s", l, part,
             kind == GEN_MODEL_BIAS ? "bias" : "weight");
    return gen_model_tensor(c, name, cols, rows, n3, kind);
}

/* The routed FFN: router, stacked experts (ne = {cols, rows, experts}), qwen2moe's shared one. */
static int moe_tensors(struct gen_model_ctx *c, uint32_t l)
{
    const struct gen_model_opts *o = c->o;
    uint64_t dim = o->dim, ne = o->experts;
    uint64_t ef = arch_is(o, "llama") || !o->expert_ffn ? o->ffn : o->expert_ffn;
    uint64_t sf = o->shared_ffn ? o->shared_ffn : o->ffn;
    int rc;
    if ((rc = layer_tensor(c, l, "ffn_gate_inp", dim, ne, 0, GEN_MODEL_ROUTER)) ||
        (rc = layer_tensor(c, l, "ffn_gate_exps", dim, ef, ne, GEN_MODEL_WEIGHT)) ||
        (rc = layer_tensor(c, l, "ffn_up_exps", dim, ef, ne, GEN_MODEL_WEIGHT)) ||
        (rc = layer_tensor(c, l, "ffn_down_exps", ef, dim, ne, GEN_MODEL_WEIGHT)))
        return rc;
    if (!arch_is(o, "qwen2moe")) return 0;
    if ((rc = layer_tensor(c, l, "ffn_gate_inp_shexp", dim, 0, 0, GEN_MODEL_ROUTER)) ||
        (rc = layer_tensor(c, l, "ffn_gate_shexp", dim, sf, 0, GEN_MODEL_WEIGHT)) ||
        (rc = layer_tensor(c, l, "ffn_up_shexp", dim, sf, 0, GEN_MODEL_WEIGHT)) ||
        (rc = layer_tensor(c, l, "ffn_down_shexp", sf, dim, 0, GEN_MODEL_WEIGHT)))
        return rc;
    return 0;
}

static int layer_tensors(struct gen_model_ctx *c, uint32_t l)
{
    const struct gen_model_opts *o = c->o;
    uint64_t dim = o->dim, hd = head_dim(o), qd = o->heads * hd, kvd = o->kv_heads * hd;
    uint64_t ffn = o->ffn;
    bool gemma = arch_gemma(o), phi3 = arch_is(o, "phi3");
    bool bias = arch_is(o, "qwen2") || arch_is(o, "qwen2moe");
    bool qk_norm = arch_is(o, "qwen3") || arch_is(o, "qwen3moe") || arch_is(o, "gemma3");
    int rc;
    if ((rc = layer_tensor(c, l, "attn_norm", dim, 0, 0, GEN_MODEL_NORM))) return rc;
    if (phi3) {
        if ((rc = layer_tensor(c, l, "attn_qkv", dim, qd + 2 * kvd, 0, GEN_MODEL_WEIGHT)))
            return rc;
    } else if ((rc = layer_tensor(c, l, "attn_q", dim, qd, 0, GEN_MODEL_WEIGHT)) ||
               (rc = layer_tensor(c, l, "attn_k", dim, kvd, 0, GEN_MODEL_WEIGHT)) ||
               (rc = layer_tensor(c, l, "attn_v", dim, kvd, 0, GEN_MODEL_WEIGHT))) {
        return rc;
    }
    if (bias && ((rc = layer_tensor(c, l, "attn_q", qd, 0, 0, GEN_MODEL_BIAS)) ||
                 (rc = layer_tensor(c, l, "attn_k", kvd, 0, 0, GEN_MODEL_BIAS)) ||
                 (rc = layer_tensor(c, l, "attn_v", kvd, 0, 0, GEN_MODEL_BIAS))))
        return rc;
    if (qk_norm && ((rc = layer_tensor(c, l, "attn_q_norm", hd, 0, 0, GEN_MODEL_NORM)) ||
                    (rc = layer_tensor(c, l, "attn_k_norm", hd, 0, 0, GEN_MODEL_NORM))))
        return rc;
    if ((rc = layer_tensor(c, l, "attn_output", qd, dim, 0, GEN_MODEL_WEIGHT))) return rc;
    if (gemma && (rc = layer_tensor(c, l, "post_attention_norm", dim, 0, 0, GEN_MODEL_NORM)))
        return rc;
    if ((rc = layer_tensor(c, l, "ffn_norm", dim, 0, 0, GEN_MODEL_NORM))) return rc;
    if (arch_moe(o)) {
        if ((rc = moe_tensors(c, l))) return rc;
    } else if (phi3) { /* gate and up fused: 2 * ffn rows, the gate first */
        if ((rc = layer_tensor(c, l, "ffn_up", dim, 2 * ffn, 0, GEN_MODEL_WEIGHT)) ||
            (rc = layer_tensor(c, l, "ffn_down", ffn, dim, 0, GEN_MODEL_WEIGHT)))
            return rc;
    } else if ((rc = layer_tensor(c, l, "ffn_gate", dim, ffn, 0, GEN_MODEL_WEIGHT)) ||
               (rc = layer_tensor(c, l, "ffn_up", dim, ffn, 0, GEN_MODEL_WEIGHT)) ||
               (rc = layer_tensor(c, l, "ffn_down", ffn, dim, 0, GEN_MODEL_WEIGHT))) {
        return rc;
    }
    if (gemma && (rc = layer_tensor(c, l, "post_ffw_norm", dim, 0, 0, GEN_MODEL_NORM))) return rc;
    return 0;
}

/* Rope frequency factors: Llama 3.1's rope_freqs (convert_hf_to_gguf's llama3 formula, low and
 * high frequency factors 1 and 4), or phi3's long and short factors (deterministic ramps). */
static int rope_tensors(struct gen_model_ctx *c)
{
    const struct gen_model_opts *o = c->o;
    uint32_t half = head_dim(o) / 2;
    float *v = malloc(2 * (size_t)half * sizeof(float));
    if (!v) return gen_model_fail(c, ERR_NOMEM, "out of memory");
    int rc = 0;
    if (rope_is(o, "llama3")) {
        double base = 10000.0, old = rope_orig(o), lo = old / 1.0, hi = old / 4.0;
        for (uint32_t i = 0; i < half; i++) {
            double freq = 1.0 / pow(base, 2.0 * i / (2.0 * half));
            double wavelen = 2.0 * 3.141592653589793 / freq;
            if (wavelen < hi)
                v[i] = 1.0f;
            else if (wavelen > lo)
                v[i] = o->rope_factor;
            else {
                double smooth = (old / wavelen - 1.0) / (4.0 - 1.0);
                v[i] = (float)(1.0 / ((1.0 - smooth) / o->rope_factor + smooth));
            }
        }
        rc = gen_model_tensor_f32(c, "rope_freqs.weight", v, half);
    } else if (rope_is(o, "longrope")) {
        for (uint32_t i = 0; i < half; i++) {
            v[i] = 1.0f + (o->rope_factor - 1.0f) * (float)i / (float)half;
            v[half + i] = 1.0f + 0.25f * (float)i / (float)half;
        }
        if (!(rc = gen_model_tensor_f32(c, "rope_factors_long.weight", v, half)))
            rc = gen_model_tensor_f32(c, "rope_factors_short.weight", v + half, half);
    }
    free(v);
    return rc;
}

int gen_model_arch_tensors(struct gen_model_ctx *c, uint64_t vocab)
{
    const struct gen_model_opts *o = c->o;
    int rc;
    if ((rc = gen_model_tensor(c, "token_embd.weight", o->dim, vocab, 0, GEN_MODEL_WEIGHT)))
        return rc;
    for (uint32_t l = 0; l < o->layers; l++)
        if ((rc = layer_tensors(c, l))) return rc;
    if ((rc = gen_model_tensor(c, "output_norm.weight", o->dim, 0, 0, GEN_MODEL_NORM))) return rc;
    bool tied = o->tied_output || arch_is(o, "gemma2");
    if (!tied && (rc = gen_model_tensor(c, "output.weight", o->dim, vocab, 0, GEN_MODEL_WEIGHT)))
        return rc;
    return rope_tensors(c);
}
