/* Correctness against llama.cpp: the stories260K models (F32/F16/Q8_0/Q4_0) against reference logits
 * and greedy continuations recorded with llama.cpp (see ../shared/testdata/README.md). Prompt tokens
 * come from the JSON, so this does not depend on the tokenizer. Also the model loader's validation:
 * hparams from an in-memory GGUF, unknown architectures, missing and mis-shaped tensors. */
#include "engine/cmd/cmd.h"
#include "engine/gguf/gguf.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/text/tokenizer.h"
#include "engine/tools/gen_model.h"

#include "common/err.h"
#include "common/sha256.h"
#include "tests/testutil.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

struct golden {
    json_t *root;
    int n_prompt;
    int32_t prompt[64];
    int32_t greedy[100];
    int n_greedy;
};

static bool golden_load(const char *type, int p, struct golden *g)
{
    char rel[128];
    snprintf(rel, sizeof(rel), "testdata/llamacpp/stories260K-%s.p%d.json", type, p);
    const char *path = test_shared_path(rel);
    if (!path) return false;
    json_error_t je;
    g->root = json_load_file(path, 0, &je);
    ck_assert_msg(g->root != NULL, "%s: %s", path, je.text);
    json_t *pt = json_object_get(g->root, "prompt_tokens");
    json_t *gt = json_object_get(g->root, "greedy_tokens");
    ck_assert(json_is_array(pt) && json_is_array(gt));
    g->n_prompt = (int)json_array_size(pt);
    ck_assert(g->n_prompt > 0 && g->n_prompt <= 64);
    for (int i = 0; i < g->n_prompt; i++)
        g->prompt[i] = (int32_t)json_integer_value(json_array_get(pt, (size_t)i));
    g->n_greedy = (int)json_array_size(gt);
    ck_assert(g->n_greedy > 0 && g->n_greedy <= 100);
    for (int i = 0; i < g->n_greedy; i++)
        g->greedy[i] = (int32_t)json_integer_value(json_array_get(gt, (size_t)i));
    return true;
}

struct runner {
    struct model *m;
    struct kv_cache *kv;
    int seq;
    int n_vocab;
};

static bool runner_open(const char *file, enum quant_type kv_type, struct runner *r)
{
    char rel[128];
    snprintf(rel, sizeof(rel), "models/tinyllamas/%s", file);
    const char *path = test_shared_path(rel);
    if (!path) return false;
    struct model_options opt;
    model_options_default(&opt);
    opt.n_threads = 2;
    opt.kv_type = kv_type;
    char err[256] = "";
    int rc = model_load(path, &opt, &r->m, err, sizeof(err));
    ck_assert_msg(rc == 0, "model_load %s: %s", path, err);
    r->n_vocab = model_hparams(r->m)->n_vocab;
    struct kv_cache_config cfg = {64, 16, 1, 64};
    ck_assert_int_eq(kv_cache_new(&cfg, &r->kv), 0);
    ck_assert_int_eq(model_kv_init(r->m, r->kv), 0);
    ck_assert_int_eq(kv_cache_seq_open(r->kv, &r->seq), 0);
    return true;
}

static void runner_close(struct runner *r)
{
    kv_cache_free(r->kv);
    model_free(r->m);
}

/* Appends tokens to the sequence and runs them; returns the logits rows (borrowed). */
static const float *runner_step(struct runner *r, const int32_t *tokens, int n, bool all)
{
    struct kv_cache_copy cp;
    int pos = kv_cache_seq_len(r->kv, r->seq);
    ck_assert_int_eq(kv_cache_seq_append(r->kv, r->seq, n, &cp), 0);
    struct model_batch_entry e = {r->seq, pos, n, tokens,
                                  all ? MODEL_LOGITS_ALL : MODEL_LOGITS_LAST};
    const float *logits;
    int rows;
    ck_assert_int_eq(model_forward(r->m, r->kv, &e, 1, &logits, &rows), 0);
    ck_assert_int_eq(rows, all ? n : 1);
    return logits;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Top-2 margin of greedy step i in greedy_top10. */
static double greedy_margin(const struct golden *g, int i)
{
    json_t *top = json_array_get(json_object_get(g->root, "greedy_top10"), (size_t)i);
    double a = json_number_value(json_array_get(json_array_get(top, 0), 1));
    double b = json_number_value(json_array_get(json_array_get(top, 1), 1));
    return a - b;
}

struct tolerance {
    const char *type;
    const char *file;
    double logit_tol;
    bool exact_greedy; /* free-running greedy must match all tokens; else teacher-forced argmax */
    double mean_tol;   /* mean absolute logit difference over all prompt positions */
};

static const struct tolerance tolerances[] = {
    /* F32: the spec's 1e-3 (measured: 5e-5, 5e-5, 2.4e-4, 1e-4). With llama.cpp's F16 KV cache an ulp
     * of difference can round a cached K/V value or a probability to the neighbouring f16 and move
     * every later logit of a position, so the CPU attention reproduces ggml's arithmetic for F16
     * caches (cpu_attention.c). */
    {"F32", "stories260K.gguf", 1e-3, true, 5e-4},
    {"F16", "stories260K-F16.gguf", 2e-2, true, 5e-3},
    {"Q8_0", "stories260K-Q8_0.gguf", 0.3, false, 0.01},
    {"Q4_0", "stories260K-Q4_0.gguf", 0.3, false, 0.01},
};

static void check_golden(const struct tolerance *tol, int p, enum quant_type kv_type)
{
    struct golden g;
    struct runner r;
    if (!golden_load(tol->type, p, &g)) return;
    if (!runner_open(tol->file, kv_type, &r)) {
        json_decref(g.root);
        return;
    }
    ck_assert_int_eq(r.n_vocab, 512);

    /* The tokenizer turns the prompt text into llama.cpp's prompt tokens (BOS added). */
    struct tokenizer *tk = NULL;
    char err[256] = "";
    ck_assert_msg(tokenizer_load(model_gguf(r.m), &tk, err, sizeof(err)) == 0, "%s", err);
    const char *text = json_string_value(json_object_get(g.root, "prompt"));
    ck_assert_ptr_nonnull(text);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    ck_assert_int_eq(tokenizer_encode(tk, text, strlen(text), true, true, &ids, &n_ids), 0);
    ck_assert_int_eq((int)n_ids, g.n_prompt);
    for (size_t i = 0; i < n_ids; i++) ck_assert_int_eq(ids[i], g.prompt[i]);
    free(ids);
    tokenizer_free(tk);

    /* Prompt logits at every position. */
    const float *lg = runner_step(&r, g.prompt, g.n_prompt, true);
    json_t *pl = json_object_get(g.root, "prompt_logits");
    ck_assert_int_eq((int)json_array_size(pl), g.n_prompt);
    double worst = 0, sum_abs = 0;
    for (int t = 0; t < g.n_prompt; t++) {
        json_t *row = json_array_get(pl, (size_t)t);
        ck_assert_int_eq((int)json_array_size(row), r.n_vocab);
        int ref_best = 0;
        double ref_max = -INFINITY;
        for (int i = 0; i < r.n_vocab; i++) {
            double ref = json_number_value(json_array_get(row, (size_t)i));
            double d = fabs(ref - lg[(size_t)t * r.n_vocab + i]);
            if (d > worst) worst = d;
            sum_abs += d;
            if (ref > ref_max) {
                ref_max = ref;
                ref_best = i;
            }
        }
        ck_assert_msg(argmax(lg + (size_t)t * r.n_vocab, r.n_vocab) == ref_best,
                      "%s p%d: argmax differs at prompt position %d", tol->type, p, t);
    }
    ck_assert_msg(worst <= tol->logit_tol, "%s p%d: prompt logits differ by %g (tolerance %g)",
                  tol->type, p, worst, tol->logit_tol);
    double mean = sum_abs / ((double)g.n_prompt * r.n_vocab);
    ck_assert_msg(mean <= tol->mean_tol, "%s p%d: mean logit difference %g (tolerance %g)",
                  tol->type, p, mean, tol->mean_tol);

    /* Greedy continuation. */
    int32_t tok = (int32_t)argmax(lg + (size_t)(g.n_prompt - 1) * r.n_vocab, r.n_vocab);
    int checked = 0;
    for (int i = 0; i < g.n_greedy; i++) {
        if (tol->exact_greedy) {
            ck_assert_msg(tok == g.greedy[i], "%s p%d: greedy token %d is %d, llama.cpp %d",
                          tol->type, p, i, tok, g.greedy[i]);
        } else if (greedy_margin(&g, i) > 0.1) {
            ck_assert_msg(tok == g.greedy[i],
                          "%s p%d: greedy step %d argmax %d, llama.cpp %d "
                          "(margin %.3f)",
                          tol->type, p, i, tok, g.greedy[i], greedy_margin(&g, i));
            checked++;
        }
        /* Quantized types are teacher-forced with llama.cpp's tokens so every step sees the
         * reference context even after a near-tie. */
        int32_t next = tol->exact_greedy ? tok : g.greedy[i];
        if (i + 1 < g.n_greedy) tok = (int32_t)argmax(runner_step(&r, &next, 1, false), r.n_vocab);
    }
    if (!tol->exact_greedy) ck_assert_int_gt(checked, g.n_greedy / 2);
    runner_close(&r);
    json_decref(g.root);
}

/* llama.cpp's default KV cache is F16, so the references were computed with one: compare like with
 * like. _i is tolerance index * 4 + prompt index. */
START_TEST(test_model_forward_matches_llamacpp)
{
    check_golden(&tolerances[_i / 4], _i % 4, QUANT_F16);
}
END_TEST

/* ---- Synthetic models: loader validation and a host reference forward for every architecture ---- */

#define S_EMBD  32
#define S_FF    48
#define S_VOCAB 40
#define S_LAYER 2
#define S_HEAD  4
#define S_KV    2

struct synth_opts {
    const char *arch;         /* general.architecture */
    int head_dim;             /* key_length (written only when != S_EMBD / S_HEAD) */
    bool tied;                /* omit output.weight */
    const char *skip;         /* tensor name to leave out */
    const char *bad_shape;    /* tensor name written with one extra column */
    const char *skip_key;     /* key suffix to leave out */
    const char *rope_scaling; /* rope.scaling.type, or NULL */
    float rope_factor;
    bool flat_logits; /* zero output_norm gains: every logit is 0, greedy picks token 0 */
    int eos;          /* tokenizer.ggml.eos_token_id + 1 (0: key absent) */
};

/* All weights of a synthetic model, kept for the reference forward. */
struct synth {
    struct synth_opts o;
    int hd, qd, kvd;
    float *emb, *out, *out_norm;
    struct {
        float *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *qn, *kn, *ffn_norm, *wg, *wu, *wd;
    } l[S_LAYER];
    float *pool;
    size_t used, cap;
    unsigned rng;
};

static float *synth_alloc(struct synth *s, size_t n, float base, float spread)
{
    ck_assert(s->used + n <= s->cap);
    float *p = s->pool + s->used;
    s->used += n;
    for (size_t i = 0; i < n; i++) {
        s->rng = s->rng * 1103515245u + 12345u;
        p[i] = base + spread * ((float)((s->rng >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
    return p;
}

static bool synth_is_qwen2(const struct synth *s)
{
    return strcmp(s->o.arch, "qwen2") == 0;
}

static bool synth_is_qwen3(const struct synth *s)
{
    return strcmp(s->o.arch, "qwen3") == 0;
}

static void synth_build(struct synth *s, const struct synth_opts *o)
{
    memset(s, 0, sizeof(*s));
    s->o = *o;
    s->hd = o->head_dim ? o->head_dim : S_EMBD / S_HEAD;
    s->qd = S_HEAD * s->hd;
    s->kvd = S_KV * s->hd;
    s->cap = 200000;
    s->pool = malloc(s->cap * sizeof(float));
    ck_assert_ptr_nonnull(s->pool);
    s->rng = 99;
    s->emb = synth_alloc(s, (size_t)S_VOCAB * S_EMBD, 0, 1.0f);
    s->out = synth_alloc(s, (size_t)S_VOCAB * S_EMBD, 0, 0.5f);
    s->out_norm = synth_alloc(s, S_EMBD, 1, 0.2f);
    if (o->flat_logits) memset(s->out_norm, 0, S_EMBD * sizeof(float));
    for (int i = 0; i < S_LAYER; i++) {
        s->l[i].attn_norm = synth_alloc(s, S_EMBD, 1, 0.2f);
        s->l[i].wq = synth_alloc(s, (size_t)s->qd * S_EMBD, 0, 0.4f);
        s->l[i].wk = synth_alloc(s, (size_t)s->kvd * S_EMBD, 0, 0.4f);
        s->l[i].wv = synth_alloc(s, (size_t)s->kvd * S_EMBD, 0, 0.4f);
        s->l[i].wo = synth_alloc(s, (size_t)S_EMBD * s->qd, 0, 0.3f);
        s->l[i].bq = synth_alloc(s, (size_t)s->qd, 0, 0.5f);
        s->l[i].bk = synth_alloc(s, (size_t)s->kvd, 0, 0.5f);
        s->l[i].bv = synth_alloc(s, (size_t)s->kvd, 0, 0.5f);
        s->l[i].qn = synth_alloc(s, (size_t)s->hd, 1, 0.3f);
        s->l[i].kn = synth_alloc(s, (size_t)s->hd, 1, 0.3f);
        s->l[i].ffn_norm = synth_alloc(s, S_EMBD, 1, 0.2f);
        s->l[i].wg = synth_alloc(s, (size_t)S_FF * S_EMBD, 0, 0.4f);
        s->l[i].wu = synth_alloc(s, (size_t)S_FF * S_EMBD, 0, 0.4f);
        s->l[i].wd = synth_alloc(s, (size_t)S_EMBD * S_FF, 0, 0.3f);
    }
}

static void synth_tensor(struct gguf_writer *w, const struct synth *s, const char *name,
                         int64_t rows, int64_t cols, const float *data)
{
    if (s->o.skip && strcmp(s->o.skip, name) == 0) return;
    static float wide[200000];
    if (s->o.bad_shape && strcmp(s->o.bad_shape, name) == 0) {
        /* One extra column: same data, shifted rows, plus zeros. */
        for (int64_t r = 0; r < rows; r++) {
            memcpy(wide + r * (cols + 1), data + r * cols, (size_t)cols * sizeof(float));
            wide[r * (cols + 1) + cols] = 0;
        }
        data = wide;
        cols++;
    }
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    ck_assert_int_eq(gguf_writer_add_tensor(w, name, QUANT_F32, rows == 1 ? 1 : 2, ne, data,
                                            (uint64_t)(rows * cols) * sizeof(float)),
                     0);
}

static void synth_key_u32(struct gguf_writer *w, const struct synth *s, const char *suffix,
                          uint32_t v)
{
    if (s->o.skip_key && strcmp(s->o.skip_key, suffix) == 0) return;
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", s->o.arch, suffix);
    ck_assert_int_eq(gguf_writer_set_u32(w, key, v), 0);
}

static void synth_write(const struct synth *s, const char *path)
{
    struct gguf_writer *w = gguf_writer_new();
    ck_assert_ptr_nonnull(w);
    char key[128];
    ck_assert_int_eq(gguf_writer_set_str(w, "general.architecture", s->o.arch), 0);
    synth_key_u32(w, s, "context_length", 128);
    if (s->o.eos)
        ck_assert_int_eq(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", s->o.eos - 1), 0);
    synth_key_u32(w, s, "embedding_length", S_EMBD);
    synth_key_u32(w, s, "block_count", S_LAYER);
    synth_key_u32(w, s, "feed_forward_length", S_FF);
    synth_key_u32(w, s, "attention.head_count", S_HEAD);
    synth_key_u32(w, s, "attention.head_count_kv", S_KV);
    if (s->hd != S_EMBD / S_HEAD) synth_key_u32(w, s, "attention.key_length", (uint32_t)s->hd);
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", s->o.arch);
    ck_assert_int_eq(gguf_writer_set_f32(w, key, 1e-5f), 0);
    snprintf(key, sizeof(key), "%s.rope.freq_base", s->o.arch);
    ck_assert_int_eq(gguf_writer_set_f32(w, key, 1000.0f), 0);
    if (s->o.rope_scaling) {
        snprintf(key, sizeof(key), "%s.rope.scaling.type", s->o.arch);
        ck_assert_int_eq(gguf_writer_set_str(w, key, s->o.rope_scaling), 0);
        snprintf(key, sizeof(key), "%s.rope.scaling.factor", s->o.arch);
        ck_assert_int_eq(gguf_writer_set_f32(w, key, s->o.rope_factor), 0);
    }
    synth_tensor(w, s, "token_embd.weight", S_VOCAB, S_EMBD, s->emb);
    synth_tensor(w, s, "output_norm.weight", 1, S_EMBD, s->out_norm);
    if (!s->o.tied) synth_tensor(w, s, "output.weight", S_VOCAB, S_EMBD, s->out);
    for (int i = 0; i < S_LAYER; i++) {
        struct {
            const char *n;
            int64_t rows, cols;
            const float *d;
            bool on;
        } t[] = {
            {"attn_norm.weight", 1, S_EMBD, s->l[i].attn_norm, true},
            {"attn_q.weight", s->qd, S_EMBD, s->l[i].wq, true},
            {"attn_k.weight", s->kvd, S_EMBD, s->l[i].wk, true},
            {"attn_v.weight", s->kvd, S_EMBD, s->l[i].wv, true},
            {"attn_output.weight", S_EMBD, s->qd, s->l[i].wo, true},
            {"attn_q.bias", 1, s->qd, s->l[i].bq, synth_is_qwen2(s)},
            {"attn_k.bias", 1, s->kvd, s->l[i].bk, synth_is_qwen2(s)},
            {"attn_v.bias", 1, s->kvd, s->l[i].bv, synth_is_qwen2(s)},
            {"attn_q_norm.weight", 1, s->hd, s->l[i].qn, synth_is_qwen3(s)},
            {"attn_k_norm.weight", 1, s->hd, s->l[i].kn, synth_is_qwen3(s)},
            {"ffn_norm.weight", 1, S_EMBD, s->l[i].ffn_norm, true},
            {"ffn_gate.weight", S_FF, S_EMBD, s->l[i].wg, true},
            {"ffn_up.weight", S_FF, S_EMBD, s->l[i].wu, true},
            {"ffn_down.weight", S_EMBD, S_FF, s->l[i].wd, true},
        };
        for (size_t j = 0; j < sizeof(t) / sizeof(t[0]); j++) {
            if (!t[j].on) continue;
            char name[96];
            snprintf(name, sizeof(name), "blk.%d.%s", i, t[j].n);
            synth_tensor(w, s, name, t[j].rows, t[j].cols, t[j].d);
        }
    }
    ck_assert_int_eq(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
}

/* y (rows) = W (rows, cols) x (cols), in double. */
static void ref_matvec(const float *w, const float *x, int rows, int cols, double *y)
{
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int c = 0; c < cols; c++) acc += (double)w[(size_t)r * cols + c] * x[c];
        y[r] = acc;
    }
}

static void ref_rmsnorm(const double *x, const float *g, int n, double *y)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double scale = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * g[i];
}

static void ref_rope(double *x, int n_heads, int hd, int pos, bool neox, double freq_scale)
{
    for (int h = 0; h < n_heads; h++) {
        double *v = x + (size_t)h * hd;
        for (int i = 0; i < hd / 2; i++) {
            double th = pos * freq_scale * pow(1000.0, -2.0 * i / hd);
            int a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
            double x0 = v[a], x1 = v[b];
            v[a] = x0 * cos(th) - x1 * sin(th);
            v[b] = x0 * sin(th) + x1 * cos(th);
        }
    }
}

/* Logits of every position of `toks` by a straightforward double-precision implementation. */
static void ref_forward(const struct synth *s, const int32_t *toks, int n, double freq_scale,
                        double *logits)
{
    enum { MAXT = 16 };
    ck_assert_int_le(n, MAXT);
    static double x[MAXT][S_EMBD], K[S_LAYER][MAXT][256], V[S_LAYER][MAXT][256];
    bool neox = strcmp(s->o.arch, "llama") != 0;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < S_EMBD; i++) x[t][i] = s->emb[(size_t)toks[t] * S_EMBD + i];
    for (int il = 0; il < S_LAYER; il++) {
        for (int t = 0; t < n; t++) {
            double xn[S_EMBD], q[256], att[256] = {0}, o[S_EMBD], g[S_FF], u[S_FF], d[S_EMBD];
            float xf[256];
            ref_rmsnorm(x[t], s->l[il].attn_norm, S_EMBD, xn);
            for (int i = 0; i < S_EMBD; i++) xf[i] = (float)xn[i];
            ref_matvec(s->l[il].wq, xf, s->qd, S_EMBD, q);
            ref_matvec(s->l[il].wk, xf, s->kvd, S_EMBD, K[il][t]);
            ref_matvec(s->l[il].wv, xf, s->kvd, S_EMBD, V[il][t]);
            if (synth_is_qwen2(s)) {
                for (int i = 0; i < s->qd; i++) q[i] += s->l[il].bq[i];
                for (int i = 0; i < s->kvd; i++) K[il][t][i] += s->l[il].bk[i];
                for (int i = 0; i < s->kvd; i++) V[il][t][i] += s->l[il].bv[i];
            }
            if (synth_is_qwen3(s)) {
                for (int h = 0; h < S_HEAD; h++)
                    ref_rmsnorm(q + h * s->hd, s->l[il].qn, s->hd, q + h * s->hd);
                for (int h = 0; h < S_KV; h++)
                    ref_rmsnorm(K[il][t] + h * s->hd, s->l[il].kn, s->hd, K[il][t] + h * s->hd);
            }
            ref_rope(q, S_HEAD, s->hd, t, neox, freq_scale);
            ref_rope(K[il][t], S_KV, s->hd, t, neox, freq_scale);
            for (int h = 0; h < S_HEAD; h++) {
                int kh = h / (S_HEAD / S_KV);
                double sc[MAXT], mx = -INFINITY, sum = 0;
                for (int p = 0; p <= t; p++) {
                    double dot = 0;
                    for (int i = 0; i < s->hd; i++)
                        dot += q[h * s->hd + i] * K[il][p][kh * s->hd + i];
                    sc[p] = dot / sqrt((double)s->hd);
                    mx = sc[p] > mx ? sc[p] : mx;
                }
                for (int p = 0; p <= t; p++) sum += (sc[p] = exp(sc[p] - mx));
                for (int p = 0; p <= t; p++)
                    for (int i = 0; i < s->hd; i++)
                        att[h * s->hd + i] += sc[p] / sum * V[il][p][kh * s->hd + i];
            }
            for (int i = 0; i < s->qd; i++) xf[i] = (float)att[i];
            ref_matvec(s->l[il].wo, xf, S_EMBD, s->qd, o);
            for (int i = 0; i < S_EMBD; i++) x[t][i] += o[i];
            ref_rmsnorm(x[t], s->l[il].ffn_norm, S_EMBD, xn);
            for (int i = 0; i < S_EMBD; i++) xf[i] = (float)xn[i];
            ref_matvec(s->l[il].wg, xf, S_FF, S_EMBD, g);
            ref_matvec(s->l[il].wu, xf, S_FF, S_EMBD, u);
            for (int i = 0; i < S_FF; i++) xf[i] = (float)(g[i] / (1 + exp(-g[i])) * u[i]);
            ref_matvec(s->l[il].wd, xf, S_EMBD, S_FF, d);
            for (int i = 0; i < S_EMBD; i++) x[t][i] += d[i];
        }
    }
    const float *out = s->o.tied ? s->emb : s->out;
    for (int t = 0; t < n; t++) {
        double xn[S_EMBD];
        float xf[S_EMBD];
        ref_rmsnorm(x[t], s->out_norm, S_EMBD, xn);
        for (int i = 0; i < S_EMBD; i++) xf[i] = (float)xn[i];
        ref_matvec(out, xf, S_VOCAB, S_EMBD, logits + (size_t)t * S_VOCAB);
    }
}

static void synth_path(char *buf, size_t len)
{
    snprintf(buf, len, "%s/cinfer-test-model-%d.gguf", test_tmpdir(), (int)getpid());
}

/* Writes a synthetic model with `o` and loads it; returns the load status and message. */
static int synth_load(const struct synth_opts *o, struct model **m, char *err, size_t errlen)
{
    struct synth s;
    synth_build(&s, o);
    char path[512];
    synth_path(path, sizeof(path));
    synth_write(&s, path);
    struct model_options opt;
    model_options_default(&opt);
    opt.n_threads = 1;
    int rc = model_load(path, &opt, m, err, errlen);
    unlink(path);
    free(s.pool);
    return rc;
}

START_TEST(test_model_load_hparams_and_defaults)
{
    struct synth_opts o = {.arch = "llama", .tied = true};
    struct model *m = NULL;
    char err[256] = "";
    ck_assert_msg(synth_load(&o, &m, err, sizeof(err)) == 0, "%s", err);
    const struct model_hparams *hp = model_hparams(m);
    ck_assert_int_eq(hp->arch, MODEL_ARCH_LLAMA);
    ck_assert_str_eq(hp->arch_name, "llama");
    ck_assert_int_eq(hp->n_vocab, S_VOCAB);
    ck_assert_int_eq(hp->n_ctx_train, 128);
    ck_assert_int_eq(hp->n_embd, S_EMBD);
    ck_assert_int_eq(hp->n_layer, S_LAYER);
    ck_assert_int_eq(hp->n_ff, S_FF);
    ck_assert_int_eq(hp->n_head, S_HEAD);
    ck_assert_int_eq(hp->n_head_kv, S_KV);
    ck_assert_int_eq(hp->head_dim, S_EMBD / S_HEAD);
    ck_assert_int_eq(hp->n_rot, S_EMBD / S_HEAD);
    ck_assert(hp->tied_output);
    ck_assert_int_eq(hp->rope_mode, BACKEND_ROPE_NORMAL);
    ck_assert_float_eq(hp->rope_freq_base, 1000.0f);
    ck_assert_float_eq(hp->rope_freq_scale, 1.0f);
    ck_assert_float_eq_tol(hp->rms_eps, 1e-5f, 1e-12f);
    ck_assert_int_eq(model_kv_bytes_per_token(m, QUANT_F16), 2 * S_LAYER * S_KV * 8 * 2);
    ck_assert_int_eq(model_kv_bytes_per_token(m, QUANT_F32), 2 * S_LAYER * S_KV * 8 * 4);
    model_free(m);

    o = (struct synth_opts){
        .arch = "qwen3", .head_dim = 16, .rope_scaling = "linear", .rope_factor = 4.0f};
    ck_assert_msg(synth_load(&o, &m, err, sizeof(err)) == 0, "%s", err);
    hp = model_hparams(m);
    ck_assert_int_eq(hp->arch, MODEL_ARCH_QWEN3);
    ck_assert_int_eq(hp->head_dim, 16);
    ck_assert_int_eq(hp->rope_mode, BACKEND_ROPE_NEOX);
    ck_assert_float_eq(hp->rope_freq_scale, 0.25f);
    ck_assert(!hp->tied_output);
    model_free(m);
}
END_TEST

START_TEST(test_model_load_rejects_bad_models)
{
    static const struct {
        struct synth_opts o;
        int rc;
        const char *needle; /* must appear in the message */
    } cases[] = {
        {{.arch = "gpt2"}, ERR_UNSUPPORTED, "gpt2"},
        {{.arch = "llama", .skip = "blk.1.ffn_up.weight"}, ERR_NOT_FOUND, "blk.1.ffn_up.weight"},
        {{.arch = "llama", .skip = "token_embd.weight"}, ERR_NOT_FOUND, "token_embd.weight"},
        {{.arch = "llama", .skip = "output_norm.weight"}, ERR_NOT_FOUND, "output_norm.weight"},
        {{.arch = "qwen3moe"}, ERR_INVAL, "expert_count"}, /* a MoE file without its experts */
        {{.arch = "qwen3", .skip = "blk.1.attn_q_norm.weight"},
         ERR_NOT_FOUND,
         "blk.1.attn_q_norm.weight"},
        {{.arch = "llama", .bad_shape = "blk.0.attn_k.weight"}, ERR_INVAL, "blk.0.attn_k.weight"},
        {{.arch = "llama", .bad_shape = "blk.1.ffn_norm.weight"},
         ERR_INVAL,
         "blk.1.ffn_norm.weight"},
        {{.arch = "llama", .bad_shape = "output.weight"}, ERR_INVAL, "output.weight"},
        {{.arch = "llama", .skip_key = "block_count"}, ERR_INVAL, "llama.block_count"},
        {{.arch = "llama", .skip_key = "embedding_length"}, ERR_INVAL, "embedding_length"},
        {{.arch = "llama", .rope_scaling = "dynamic", .rope_factor = 2},
         ERR_UNSUPPORTED,
         "dynamic"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct model *m = NULL;
        char err[256] = "";
        int rc = synth_load(&cases[i].o, &m, err, sizeof(err));
        ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d (%s), want %d", i, rc, err, cases[i].rc);
        ck_assert_msg(strstr(err, cases[i].needle) != NULL, "case %zu: message \"%s\" lacks %s", i,
                      err, cases[i].needle);
        ck_assert_ptr_null(m);
    }
    struct model *m = NULL;
    char err[256] = "";
    ck_assert_int_ne(model_load("/nonexistent/model.gguf", NULL, &m, err, sizeof(err)), 0);
    ck_assert(err[0] != '\0');
}
END_TEST

/* An edit of a generated model: one key set to a u32 or a string (or dropped with both NULL),
 * one tensor dropped, or one tensor replaced by an F32 one of another first dimension. */
struct model_edit {
    const char *key;
    const char *str; /* the key's new string value; NULL: u32 */
    uint32_t u32;
    bool drop_key;
    const char *drop_tensor;
    const char *reshape_tensor; /* ne[0] becomes reshape_ne0, data F32 zeros */
    uint64_t reshape_ne0;
};

/* gen-model `args` (NULL-terminated) into a temporary file, then the edit applied; loads it and
 * returns the status with its message in err. */
static int load_edited(const char *const *args, const struct model_edit *ed, char *err,
                       size_t errlen)
{
    char src[512], dst[512];
    snprintf(src, sizeof(src), "%s/cinfer-test-edit-src-%d.gguf", test_tmpdir(), (int)getpid());
    snprintf(dst, sizeof(dst), "%s/cinfer-test-edit-%d.gguf", test_tmpdir(), (int)getpid());
    char *argv[40] = {"gen-model", "--out", src, "--log-level", "error"};
    int argc = 5;
    while (args[argc - 5]) {
        argv[argc] = (char *)args[argc - 5];
        argc++;
    }
    argv[argc] = NULL;
    ck_assert_int_eq(cmd_gen_model_main(argc, argv), 0);
    struct gguf *g = NULL;
    ck_assert_int_eq(gguf_open(src, &g, err, errlen), 0);
    struct gguf_writer *w = gguf_writer_new();
    bool set = false;
    for (size_t i = 0; i < gguf_kv_count(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        if (ed->key && strcmp(kv->key, ed->key) == 0) continue;
        ck_assert_int_eq(gguf_writer_set_kv(w, kv), 0);
    }
    if (ed->key && !ed->drop_key) {
        set = true;
        ck_assert_int_eq(ed->str ? gguf_writer_set_str(w, ed->key, ed->str)
                                 : gguf_writer_set_u32(w, ed->key, ed->u32),
                         0);
    }
    (void)set;
    float *zeros = NULL;
    for (size_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (ed->drop_tensor && strcmp(t->name, ed->drop_tensor) == 0) continue;
        if (ed->reshape_tensor && strcmp(t->name, ed->reshape_tensor) == 0) {
            uint64_t ne[4] = {ed->reshape_ne0, t->ne[1], t->ne[2], t->ne[3]}, n = 1;
            for (uint32_t d = 0; d < t->n_dims; d++) n *= ne[d];
            zeros = calloc(n, sizeof(float));
            ck_assert_int_eq(gguf_writer_add_tensor(w, t->name, QUANT_F32, t->n_dims, ne, zeros,
                                                    n * sizeof(float)),
                             0);
            continue;
        }
        ck_assert_int_eq(
            gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size), 0);
    }
    ck_assert_int_eq(gguf_writer_write(w, dst), 0);
    gguf_writer_free(w);
    free(zeros);
    gguf_close(g);
    unlink(src);
    struct model_options opt;
    model_options_default(&opt);
    opt.n_threads = 1;
    struct model *m = NULL;
    int rc = model_load(dst, &opt, &m, err, errlen);
    unlink(dst);
    if (rc == 0) model_free(m);
    return rc;
}

#define TINY_SHAPE                                                                                 \
    "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "64",              \
        "--vocab-size", "300"

/* The newer architectures' keys and tensors: each unsupported or inconsistent one is refused with
 * a message naming it (llama.cpp would assert on several of these). */
START_TEST(test_model_load_rejects_bad_architectures)
{
    static const char *const llama[] = {TINY_SHAPE, NULL};
    static const char *const qwen2[] = {"--arch", "qwen2", TINY_SHAPE, NULL};
    static const char *const gemma3[] = {"--arch", "gemma3",   "--sliding-window",
                                         "8",      TINY_SHAPE, NULL};
    static const char *const gemma2[] = {"--arch", "gemma2", TINY_SHAPE, NULL};
    static const char *const phi3[] = {"--arch", "phi3", TINY_SHAPE, NULL};
    static const char *const moe[] = {"--arch",         "qwen3moe", "--experts", "8",
                                      "--experts-used", "2",        TINY_SHAPE,  NULL};
    static const char *const llama3[] = {"--rope-scaling", "llama3", TINY_SHAPE, NULL};
    static const struct {
        const char *const *args;
        struct model_edit ed;
        int rc;
        const char *needle;
    } cases[] = {
        {qwen2, {.key = "qwen2.expert_count", .u32 = 4}, ERR_UNSUPPORTED, "qwen2.expert_count"},
        {moe, {.key = "qwen3moe.expert_used_count", .u32 = 9}, ERR_INVAL, "expert_used_count"},
        {moe,
         {.reshape_tensor = "blk.1.ffn_down_exps.weight", .reshape_ne0 = 65},
         ERR_INVAL,
         "blk.1.ffn_down_exps.weight"},
        {moe, {.drop_tensor = "blk.0.ffn_gate_inp.weight"}, ERR_NOT_FOUND, "ffn_gate_inp"},
        {gemma3,
         {.key = "gemma3.attention.key_length_swa", .u32 = 8},
         ERR_UNSUPPORTED,
         "sliding-window"},
        {gemma3,
         {.key = "gemma3.attention.sliding_window_pattern", .str = "every"},
         ERR_INVAL,
         "sliding_window_pattern"},
        {gemma3, {.drop_tensor = "blk.1.attn_k_norm.weight"}, ERR_NOT_FOUND, "attn_k_norm"},
        {gemma2, {.drop_tensor = "blk.0.post_ffw_norm.weight"}, ERR_NOT_FOUND, "post_ffw_norm"},
        {phi3, {.drop_tensor = "blk.1.attn_qkv.weight"}, ERR_NOT_FOUND, "blk.1.attn_q.weight"},
        {phi3,
         {.reshape_tensor = "blk.0.ffn_up.weight", .reshape_ne0 = 32},
         ERR_INVAL,
         "blk.0.ffn_up.weight"},
        {llama, {.key = "llama.rope.scaling.type", .str = "llama3"}, ERR_UNSUPPORTED, "llama3"},
        {llama,
         {.key = "llama.rope.dimension_count", .u32 = 8},
         ERR_UNSUPPORTED,
         "dimension_count"},
        {llama3,
         {.reshape_tensor = "rope_freqs.weight", .reshape_ne0 = 4},
         ERR_INVAL,
         "rope_freqs.weight"},
        {llama, {.key = "general.architecture", .str = "mamba"}, ERR_UNSUPPORTED, "mamba"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[256] = "";
        int rc = load_edited(cases[i].args, &cases[i].ed, err, sizeof(err));
        ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d (%s), want %d", i, rc, err, cases[i].rc);
        ck_assert_msg(strstr(err, cases[i].needle) != NULL, "case %zu: message \"%s\" lacks %s", i,
                      err, cases[i].needle);
    }
    /* the unedited files load */
    struct model_edit none = {0};
    char err[256] = "";
    const char *const *ok[] = {llama, qwen2, gemma2, gemma3, phi3, moe, llama3};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        ck_assert_msg(load_edited(ok[i], &none, err, sizeof(err)) == 0, "%s", err);
}
END_TEST

/* Loading logs its progress (bytes read of the file's, percent, rate) every progress_s seconds,
 * then a line when it is done; a quick load with the default interval logs none of it. */
START_TEST(test_model_load_logs_progress)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/cinfer-test-progress-%d.gguf", test_tmpdir(), (int)getpid());
    char *argv[] = {"gen-model", "--out",  path,    "--log-level", "error",
                    TINY_SHAPE,  "--arch", "llama", NULL};
    ck_assert_int_eq(cmd_gen_model_main((int)(sizeof(argv) / sizeof(argv[0])) - 1, argv), 0);
    struct gguf *g = NULL;
    char err[256];
    ck_assert_int_eq(gguf_open(path, &g, err, sizeof(err)), 0);
    uint64_t total = 0;
    for (size_t i = 0; i < gguf_tensor_count(g); i++) total += gguf_tensor_at(g, i)->size;
    size_t n_tensors = gguf_tensor_count(g);
    gguf_close(g);
    log_setup("engine", LOG_INFO, LOG_FORMAT_JSON); /* gen-model set "error" */
    for (int every = 0; every <= 1; every++) {
        struct model_options opt;
        model_options_default(&opt);
        opt.n_threads = 1;
        opt.progress_s = every ? 1e-9 : 0;
        struct test_log_capture cap;
        ck_assert_ptr_nonnull(test_log_capture_start(&cap));
        struct model *m = NULL;
        int rc = model_load(path, &opt, &m, err, sizeof(err));
        const char *log = test_log_capture_end(&cap);
        ck_assert_msg(rc == 0, "%s", err);
        size_t lines = 0;
        for (const char *p = log; p && (p = strstr(p, "loading weights")); p++) lines++;
        if (!every) {
            ck_assert_uint_eq(lines, 0);
            ck_assert_ptr_null(strstr(log ? log : "", "weights loaded"));
        } else {
            ck_assert_uint_eq(lines, n_tensors); /* every tensor is read: one line each */
            ck_assert_ptr_nonnull(strstr(log, "percent"));
            ck_assert_ptr_nonnull(strstr(log, "mb_per_s"));
            char want[64];
            snprintf(want, sizeof(want), "%llu", (unsigned long long)total);
            const char *done = strstr(log, "weights loaded");
            ck_assert_ptr_nonnull(done);
            ck_assert_msg(strstr(done, want) != NULL, "final line lacks %s: %s", want, done);
        }
        test_log_capture_free(&cap);
        model_free(m);
    }
    unlink(path);
}
END_TEST

/* Every architecture against the double-precision reference (F32 weights and KV cache). */
START_TEST(test_model_forward_matches_reference)
{
    static const struct synth_opts variants[] = {
        {.arch = "llama"},
        {.arch = "llama", .tied = true, .rope_scaling = "linear", .rope_factor = 2.0f},
        {.arch = "qwen2"},
        {.arch = "qwen3", .head_dim = 16},
    };
    const struct synth_opts *o = &variants[_i];
    struct synth s;
    synth_build(&s, o);
    char path[512];
    synth_path(path, sizeof(path));
    synth_write(&s, path);
    struct model_options opt;
    model_options_default(&opt);
    opt.n_threads = 2;
    opt.kv_type = QUANT_F32;
    struct model *m = NULL;
    char err[256] = "";
    ck_assert_msg(model_load(path, &opt, &m, err, sizeof(err)) == 0, "%s", err);
    unlink(path);

    struct kv_cache_config kc = {4, 4, 1, 4};
    struct kv_cache *kv;
    ck_assert_int_eq(kv_cache_new(&kc, &kv), 0);
    ck_assert_int_eq(model_kv_init(m, kv), 0);
    int seq;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &seq), 0);
    int32_t toks[11] = {1, 5, 9, 33, 2, 17, 39, 0, 12, 7, 21};
    /* Two steps (7 + 4 tokens) crossing KV block boundaries. */
    const float *lg;
    int rows;
    static float got[11][S_VOCAB];
    ck_assert_int_eq(kv_cache_seq_append(kv, seq, 7, &cp), 0);
    struct model_batch_entry e = {seq, 0, 7, toks, MODEL_LOGITS_ALL};
    ck_assert_int_eq(model_forward(m, kv, &e, 1, &lg, &rows), 0);
    ck_assert_int_eq(rows, 7);
    memcpy(got, lg, 7 * sizeof(got[0]));
    ck_assert_int_eq(kv_cache_seq_append(kv, seq, 4, &cp), 0);
    e = (struct model_batch_entry){seq, 7, 4, toks + 7, MODEL_LOGITS_ALL};
    /* the second step profiled: the same numbers (checked below), every op kind counted */
    struct model_profile prof = {0};
    model_profile_attach(m, &prof);
    ck_assert_int_eq(model_forward(m, kv, &e, 1, &lg, &rows), 0);
    model_profile_attach(m, NULL);
    ck_assert_int_eq(rows, 4);
    memcpy(got[7], lg, 4 * sizeof(got[0]));
    int n_layer = model_hparams(m)->n_layer;
    ck_assert_int_eq(prof.steps, 1);
    ck_assert_int_eq(prof.calls[MODEL_OP_ATTENTION], n_layer);
    ck_assert_int_eq(prof.calls[MODEL_OP_KV_STORE], n_layer);
    ck_assert_int_eq(prof.calls[MODEL_OP_RESIDUAL], 2 * n_layer);
    ck_assert_int_eq(prof.calls[MODEL_OP_OUTPUT], 1);
    ck_assert_int_eq(prof.calls[MODEL_OP_EMBED], 1);
    double ops = 0;
    for (int k = 0; k < MODEL_OP_COUNT; k++) {
        ck_assert(prof.seconds[k] >= 0);
        ops += prof.seconds[k];
    }
    ck_assert(ops > 0 && ops <= prof.step_seconds);
    ck_assert_str_eq(model_op_name(MODEL_OP_ATTENTION), "attention");
    ck_assert_str_eq(model_op_name(MODEL_OP_COUNT), "?");

    static double want[11 * S_VOCAB];
    ref_forward(&s, toks, 11, o->rope_scaling ? 1.0 / o->rope_factor : 1.0, want);
    double worst = 0;
    for (int t = 0; t < 11; t++)
        for (int i = 0; i < S_VOCAB; i++) {
            double d = fabs(want[t * S_VOCAB + i] - got[t][i]);
            worst = d > worst ? d : worst;
        }
    ck_assert_msg(worst < 2e-3, "%s: logits differ from the reference by %g", o->arch, worst);

    /* Bad steps are refused without side effects. */
    int32_t bad = S_VOCAB;
    e = (struct model_batch_entry){seq, 10, 1, &bad, MODEL_LOGITS_LAST};
    ck_assert_int_eq(model_forward(m, kv, &e, 1, &lg, &rows), ERR_INVAL); /* token id */
    e = (struct model_batch_entry){seq, 11, 1, toks, MODEL_LOGITS_LAST};
    ck_assert_int_eq(model_forward(m, kv, &e, 1, &lg, &rows), ERR_INVAL); /* slot not reserved */
    struct model_batch_entry two[2] = {{seq, 10, 1, toks, MODEL_LOGITS_LAST},
                                       {seq, 9, 1, toks, MODEL_LOGITS_LAST}};
    ck_assert_int_eq(model_forward(m, kv, two, 2, &lg, &rows), ERR_INVAL); /* seq twice */
    ck_assert_int_eq(model_forward(m, kv, two, 0, &lg, &rows), ERR_INVAL);
    ck_assert_int_eq(prof.steps, 1); /* detached: nothing more counted */

    kv_cache_free(kv);
    model_free(m);
    free(s.pool);
}
END_TEST

/* Logits of every token of a fixed 6-token prompt in a fresh sequence (n_vocab * 6 floats, new). */
static float *file_change_logits(struct model *m)
{
    struct kv_cache_config kc = {4, 4, 1, 4};
    struct kv_cache *kv;
    ck_assert_int_eq(kv_cache_new(&kc, &kv), 0);
    ck_assert_int_eq(model_kv_init(m, kv), 0);
    int seq;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &seq), 0);
    const int32_t toks[6] = {1, 5, 9, 33, 2, 17};
    ck_assert_int_eq(kv_cache_seq_append(kv, seq, 6, &cp), 0);
    struct model_batch_entry e = {seq, 0, 6, toks, MODEL_LOGITS_ALL};
    const float *lg;
    int rows;
    ck_assert_int_eq(model_forward(m, kv, &e, 1, &lg, &rows), 0);
    ck_assert_int_eq(rows, 6);
    size_t n = (size_t)model_hparams(m)->n_vocab * 6;
    float *out = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(out);
    memcpy(out, lg, n * sizeof(float));
    kv_cache_free(kv);
    return out;
}

/* A model file truncated or rewritten in place under a loaded model changes nothing: the loader
 * keeps copies of the weights and unmaps the file, so the next forward neither faults (SIGBUS on a
 * truncated mapping) nor reads the new bytes; the logits are the same bits. F32 (row copies), Q8_0
 * and Q4_0 (packed matmul copies) with a tied embedding (get_rows and matmul on the same table),
 * and an untied one (lookup-only). */
START_TEST(test_model_survives_file_change)
{
    static const struct {
        enum quant_type type;
        bool tied;
    } cases[] = {{QUANT_F32, false}, {QUANT_Q8_0, true}, {QUANT_Q4_0, false}, {QUANT_F16, true}};
    char path[512];
    synth_path(path, sizeof(path));
    struct gen_model_opts o;
    gen_model_defaults(&o);
    o.type = cases[_i].type;
    o.tied_output = cases[_i].tied;
    o.dim = 64;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.ffn = 96;
    o.vocab_size = 300;
    o.context_length = 64;
    o.std = 0.2f;
    char err[256] = "";
    ck_assert_msg(gen_model_write(&o, path, err, sizeof(err)) == 0, "%s", err);
    struct model_options opt;
    model_options_default(&opt);
    opt.n_threads = 1;
    opt.kv_type = QUANT_F32;
    struct model *m = NULL;
    ck_assert_msg(model_load(path, &opt, &m, err, sizeof(err)) == 0, "%s", err);
    float *want = file_change_logits(m);
    size_t n = (size_t)model_hparams(m)->n_vocab * 6;

    /* rewritten in place (same inode, same size, every byte changed) */
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    off_t size = lseek(fd, 0, SEEK_END);
    ck_assert_int_gt(size, 0);
    char junk[4096];
    memset(junk, 0x7f, sizeof(junk));
    ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
    for (off_t done = 0; done < size;) {
        size_t k = (size_t)(size - done) < sizeof(junk) ? (size_t)(size - done) : sizeof(junk);
        ck_assert_int_eq(write(fd, junk, k), (ssize_t)k);
        done += (off_t)k;
    }
    ck_assert_int_eq(fsync(fd), 0);
    float *got = file_change_logits(m);
    ck_assert_msg(memcmp(got, want, n * sizeof(float)) == 0, "%s: logits changed (rewritten)",
                  quant_type_name(o.type));
    free(got);

    /* truncated to nothing: a read through a mapping would be SIGBUS */
    ck_assert_int_eq(ftruncate(fd, 0), 0);
    close(fd);
    got = file_change_logits(m);
    ck_assert_msg(memcmp(got, want, n * sizeof(float)) == 0, "%s: logits changed (truncated)",
                  quant_type_name(o.type));
    /* the metadata stays readable too (a copy, not the mapping) */
    char arch[16];
    ck_assert_int_eq(gguf_get_cstr(model_gguf(m), "general.architecture", arch, sizeof(arch)), 0);
    ck_assert_str_eq(arch, "llama");
    ck_assert_int_gt(model_hparams(m)->n_vocab, 0);
    free(got);
    free(want);
    model_free(m);
    unlink(path);
}
END_TEST

/* model_options.sha256: the right digest loads (upper-case is the caller's to normalise), a wrong
 * one fails with both digests in the message and nothing loaded. */
START_TEST(test_model_load_checks_sha256)
{
    char path[512];
    synth_path(path, sizeof(path));
    struct gen_model_opts o;
    gen_model_defaults(&o);
    o.dim = 64;
    o.layers = 1;
    o.heads = 4;
    o.kv_heads = 2;
    o.ffn = 96;
    o.vocab_size = 300;
    o.context_length = 64;
    char err[512] = "";
    ck_assert_msg(gen_model_write(&o, path, err, sizeof(err)) == 0, "%s", err);
    char hex[SHA256_HEX_LEN];
    ck_assert_int_eq(sha256_file_hex(path, hex), 0);
    struct model_options opt;
    model_options_default(&opt);
    opt.n_threads = 1;
    opt.sha256 = hex;
    struct model *m = NULL;
    ck_assert_msg(model_load(path, &opt, &m, err, sizeof(err)) == 0, "%s", err);
    model_free(m);
    m = NULL;
    char bad[SHA256_HEX_LEN];
    memcpy(bad, hex, sizeof(bad));
    bad[10] = bad[10] == '0' ? '1' : '0';
    opt.sha256 = bad;
    ck_assert_int_eq(model_load(path, &opt, &m, err, sizeof(err)), ERR_BAD_STATE);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, "sha256 mismatch") && strstr(err, bad) && strstr(err, hex), "%s",
                  err);
    unlink(path);
}
END_TEST

/* Runs `cinfer-engine generate` (argv, NULL-terminated) with stdout captured into `out`. */
static int run_generate(const char *const *args, char *out, size_t outlen)
{
    char *argv[32];
    int argc = 0;
    while (args[argc]) {
        argv[argc] = (char *)args[argc];
        argc++;
    }
    argv[argc] = NULL;
    char path[512];
    snprintf(path, sizeof(path), "%s/cinfer-test-gen-%d.out", test_tmpdir(), (int)getpid());
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    FILE *f = fopen(path, "w+");
    ck_assert(saved >= 0 && f);
    ck_assert_int_ge(dup2(fileno(f), STDOUT_FILENO), 0);
    int status = cmd_generate_main(argc, argv);
    fflush(stdout);
    ck_assert_int_ge(dup2(saved, STDOUT_FILENO), 0);
    close(saved);
    rewind(f);
    size_t n = fread(out, 1, outlen - 1, f);
    out[n] = '\0';
    fclose(f);
    unlink(path);
    return status;
}

/* generate stops at the end-of-generation token (here from tokenizer.ggml.eos_token_id: the
 * synthetic model has no vocabulary) unless --ignore-eos, and honours --max-tokens. */
START_TEST(test_generate_stops_at_eos)
{
    static const struct {
        int eos; /* id + 1 */
        bool ignore;
        const char *want;
    } cases[] = {
        {1, false, ""},          /* greedy picks 0 == EOS at once: nothing printed */
        {1, true, "0,0,0,0,0"},  /* --ignore-eos */
        {8, false, "0,0,0,0,0"}, /* EOS is 7: never chosen */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct synth_opts o = {.arch = "llama", .flat_logits = true, .eos = cases[i].eos};
        struct synth s;
        synth_build(&s, &o);
        char path[512];
        synth_path(path, sizeof(path));
        synth_write(&s, path);
        free(s.pool);
        const char *args[] = {"generate",
                              "--model",
                              path,
                              "--prompt-tokens",
                              "1,2,3",
                              "--max-tokens",
                              "5",
                              "--temperature",
                              "0",
                              "--output-ids",
                              "--threads",
                              "1",
                              "--log-level",
                              "error",
                              cases[i].ignore ? "--ignore-eos" : "--no-ignore-eos",
                              NULL};
        char out[256];
        ck_assert_int_eq(run_generate(args, out, sizeof(out)), 0);
        ck_assert_msg(strcmp(out, cases[i].want) == 0, "case %zu: printed \"%s\", want \"%s\"", i,
                      out, cases[i].want);
        /* Without a vocabulary, text output is refused (exit 1), ids are the only output. */
        const char *text_args[] = {"generate", "--model",     path,    "--prompt-tokens",
                                   "1",        "--log-level", "error", NULL};
        ck_assert_int_eq(run_generate(text_args, out, sizeof(out)), 1);
        ck_assert_str_eq(out, "");
        unlink(path);
    }
}
END_TEST

Suite *model_golden_suite(void);
Suite *model_golden_suite(void)
{
    Suite *s = suite_create("model_golden");
    TCase *tc = tcase_create("llamacpp");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_model_forward_matches_llamacpp, 0, 16);
    suite_add_tcase(s, tc);
    TCase *load = tcase_create("synthetic");
    tcase_set_timeout(load, 60);
    tcase_add_test(load, test_model_load_hparams_and_defaults);
    tcase_add_test(load, test_model_load_rejects_bad_models);
    tcase_add_test(load, test_model_load_rejects_bad_architectures);
    tcase_add_test(load, test_model_load_logs_progress);
    tcase_add_loop_test(load, test_model_forward_matches_reference, 0, 4);
    tcase_add_loop_test(load, test_model_survives_file_change, 0, 4);
    tcase_add_test(load, test_model_load_checks_sha256);
    tcase_add_test(load, test_generate_stops_at_eos);
    suite_add_tcase(s, load);
    return s;
}
