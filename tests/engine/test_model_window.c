/* Sink-window eviction on a real forward pass (engine/model/model_kv_shift.c): with sinks and a
 * window that hold the whole run, nothing is evicted and the logits are bit-identical to a run
 * without eviction. Once blocks are dropped, the kept keys equal the keys a fresh sequence over
 * [sink tokens + window tokens] computes at positions 0.. (StreamingLLM's positions: the defining
 * property of the key re-rotation), compared in layer 0, whose K depend on the token and position
 * only; in a one-layer model that makes every step's logits equal the fresh run's (deeper layers'
 * K/V also carry what the token attended to before the eviction, so a fresh run differs there by
 * design). Within float tolerance, with the run's KV blocks bounded. One-layer generated models
 * with an F32 cache (llama; llama with YaRN, whose magnitude the shift must not apply twice;
 * llama3 rope factors; gemma2 with a sliding-window layer 0, whose keys are compared, and a global
 * layer 1; phi3's long-rope factors) and stories260K from ../shared (5 layers; F32 and F16 caches; skipped when
 * absent). */
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_window.h"
#include "engine/model/model.h"
#include "engine/tools/gen_model.h"

#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VOCAB   512
#define BS      8
#define RUN_LEN 120
#define MAX_BPS 32

struct model_case {
    const char *file; /* ../shared/models/tinyllamas/ file; NULL: generated */
    const char *arch;
    const char *rope_scaling;
    enum quant_type kv_type;
    float tol;  /* max |x - fresh| / max |fresh| of logits and layer-0 keys */
    int layers; /* generated models */
};

static const struct model_case cases[] = {
    {NULL, "llama", "none", QUANT_F32, 1e-4f, 1},
    {NULL, "llama", "yarn", QUANT_F32, 1e-4f, 1},
    {NULL, "llama", "llama3", QUANT_F32, 1e-4f, 1},
    {NULL, "gemma2", "none", QUANT_F32, 1e-4f, 2}, /* layer 0 windowed, layer 1 global */
    {NULL, "phi3", "longrope", QUANT_F32, 1e-4f, 1},
    {"stories260K.gguf", NULL, NULL, QUANT_F32, 1e-4f, 0},
    {"stories260K.gguf", NULL, NULL, QUANT_F16, 2e-2f, 0},
};

struct ctx {
    const struct model_case *mc;
    struct model *m;
    struct kv_cache *kv;
    int vocab;
};

static bool ctx_open(struct ctx *c, const struct model_case *mc)
{
    char path[4096];
    c->mc = mc;
    if (mc->file) {
        char rel[128];
        snprintf(rel, sizeof(rel), "models/tinyllamas/%s", mc->file);
        const char *p = test_shared_path(rel);
        if (!p) return false;
        snprintf(path, sizeof(path), "%s", p);
    } else {
        snprintf(path, sizeof(path), "%s/cinfer_test_model_window_%ld.gguf", test_tmpdir(),
                 (long)getpid());
        struct gen_model_opts g;
        gen_model_defaults(&g);
        g.arch = mc->arch;
        g.rope_scaling = mc->rope_scaling;
        g.rope_factor = 4.0f;
        g.rope_orig_ctx = 64;
        g.std = 0.05f;
        g.norm_std = 0.1f;
        if (strcmp(g.arch, "gemma2") == 0) {
            g.sliding_window = 16;
            g.swa_pattern = 2;
        }
        g.dim = 128;
        g.layers = mc->layers;
        g.heads = 4;
        g.kv_heads = 2;
        g.ffn = 256;
        g.context_length = 256;
        g.vocab_size = VOCAB;
        char err[256];
        ck_assert_msg(gen_model_write(&g, path, err, sizeof(err)) == 0, "%s", err);
    }
    struct model_options o;
    model_options_default(&o);
    o.n_threads = 2;
    o.kv_type = mc->kv_type;
    char err[256];
    ck_assert_msg(model_load(path, &o, &c->m, err, sizeof(err)) == 0, "%s", err);
    if (!mc->file) unlink(path);
    c->vocab = model_hparams(c->m)->n_vocab;
    struct kv_cache_config kc = {4 * MAX_BPS, BS, 4, MAX_BPS};
    ck_assert_int_eq(kv_cache_new(&kc, &c->kv), 0);
    ck_assert_int_eq(model_kv_init(c->m, c->kv), 0);
    ck_assert(model_kv_shift_supported(c->m));
    return true;
}

static void ctx_close(struct ctx *c)
{
    kv_cache_free(c->kv);
    model_free(c->m);
}

static void make_tokens(int32_t *t, int n, int vocab)
{
    unsigned x = 2463534242u;
    t[0] = 1;
    for (int i = 1; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        t[i] = (int32_t)(3 + x % (unsigned)(vocab - 3));
    }
}

/* Appends one token to seq and runs it; returns its logits row (borrowed). */
static const float *run_one(struct ctx *c, int seq, const int32_t *tok)
{
    struct kv_cache_copy cp;
    int pos = kv_cache_seq_len(c->kv, seq);
    ck_assert_int_eq(kv_cache_seq_append(c->kv, seq, 1, &cp), 0);
    struct model_batch_entry e = {seq, pos, 1, tok, MODEL_LOGITS_LAST};
    const float *logits;
    int rows;
    ck_assert_int_eq(model_forward(c->m, c->kv, &e, 1, &logits, &rows), 0);
    ck_assert_int_eq(rows, 1);
    return logits;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double maxd = 0.0, maxb = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > maxd) maxd = d;
        if (fabs(b[i]) > maxb) maxb = fabs(b[i]);
    }
    return maxd / maxb;
}

/* Layer 0's keys of block `block` as floats into out (its first elems values of the block). */
static void layer0_keys(struct ctx *c, int32_t block, void *rec, float *out, size_t elems)
{
    size_t bytes = model_kv_block_bytes(c->m);
    ck_assert_int_eq(model_kv_block_read(c->m, block, rec, bytes), 0);
    quant_dequantize_row(c->mc->kv_type, rec, out, elems);
}

/* Runs tokens[0..n) as one fresh prefill at positions 0..n-1 and returns how far (relative) the
 * layer-0 keys of seq, which must hold n tokens, are from the fresh ones, and the fresh run's
 * logits of the last token in out. */
static double fresh_compare(struct ctx *c, int seq, const int32_t *tokens, int n, float *out)
{
    int f;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(c->kv, &f), 0);
    ck_assert_int_eq(kv_cache_seq_append(c->kv, f, n, &cp), 0);
    struct model_batch_entry e = {f, 0, n, tokens, MODEL_LOGITS_LAST};
    const float *logits;
    int rows;
    ck_assert_int_eq(model_forward(c->m, c->kv, &e, 1, &logits, &rows), 0);
    memcpy(out, logits, sizeof(float) * (size_t)c->vocab);
    const struct model_hparams *hp = model_hparams(c->m);
    size_t elems = (size_t)BS * hp->n_head_kv * hp->head_dim;
    void *rec = malloc(model_kv_block_bytes(c->m));
    float *a = malloc(elems * sizeof(float)), *b = malloc(elems * sizeof(float));
    ck_assert(rec && a && b);
    int na, nf;
    const int32_t *ta = kv_cache_seq_blocks(c->kv, seq, &na);
    const int32_t *tf = kv_cache_seq_blocks(c->kv, f, &nf);
    ck_assert_int_eq(na, nf);
    double worst = 0.0;
    for (int i = 0; i < na; i++) {
        layer0_keys(c, ta[i], rec, a, elems);
        layer0_keys(c, tf[i], rec, b, elems);
        size_t used = i == na - 1 && n % BS ? (size_t)(n % BS) : BS; /* filled slots per head */
        for (int h = 0; h < hp->n_head_kv; h++) {
            size_t off = (size_t)h * BS * hp->head_dim; /* CPU layout: heads, then slots */
            double d = rel_diff(a + off, b + off, used * hp->head_dim);
            if (d > worst) worst = d;
        }
    }
    free(rec);
    free(a);
    free(b);
    kv_cache_seq_close(c->kv, f);
    return worst;
}

START_TEST(test_model_window_no_eviction_is_bit_identical)
{
    const struct model_case *mc = &cases[_i];
    struct ctx c;
    if (!ctx_open(&c, mc)) return;
    int32_t tok[RUN_LEN];
    make_tokens(tok, RUN_LEN, c.vocab);
    struct kv_window w = {KV_WINDOW_SINK, 4, RUN_LEN}; /* S + W >= length */
    float *ref = malloc(sizeof(float) * (size_t)c.vocab * RUN_LEN);
    ck_assert_ptr_nonnull(ref);
    int a, b;
    ck_assert_int_eq(kv_cache_seq_open(c.kv, &a), 0);
    for (int i = 0; i < RUN_LEN; i++)
        memcpy(ref + (size_t)i * c.vocab, run_one(&c, a, &tok[i]), sizeof(float) * c.vocab);
    kv_cache_seq_close(c.kv, a);
    ck_assert_int_eq(kv_cache_seq_open(c.kv, &b), 0);
    for (int i = 0; i < RUN_LEN; i++) {
        int ev = -1;
        ck_assert_int_eq(model_kv_window_evict(c.m, c.kv, b, &w, &ev), 0);
        ck_assert_int_eq(ev, 0);
        const float *l = run_one(&c, b, &tok[i]);
        ck_assert_msg(memcmp(l, ref + (size_t)i * c.vocab, sizeof(float) * c.vocab) == 0,
                      "step %d differs", i);
    }
    kv_cache_seq_close(c.kv, b);
    ck_assert_int_eq(kv_cache_blocks_used(c.kv), 0);
    free(ref);
    ctx_close(&c);
}
END_TEST

/* Token by token past the window: after each eviction the kept tokens are the sink block and the
 * window, their layer-0 keys those of a fresh run over exactly them (and in a one-layer model the
 * step's logits too). */
START_TEST(test_model_window_matches_fresh_run_over_kept_tokens)
{
    const struct model_case *mc = &cases[_i];
    struct ctx c;
    if (!ctx_open(&c, mc)) return;
    int32_t tok[RUN_LEN];
    make_tokens(tok, RUN_LEN, c.vocab);
    const struct kv_window windows[] = {{KV_WINDOW_SINK, 4, 20}, {KV_WINDOW_SINK, 0, 13}};
    float *fresh = malloc(sizeof(float) * (size_t)c.vocab);
    ck_assert_ptr_nonnull(fresh);
    const char *name = mc->file ? mc->file : mc->arch;
    for (size_t wi = 0; wi < sizeof(windows) / sizeof(windows[0]); wi++) {
        const struct kv_window *w = &windows[wi];
        int sink = kv_window_sink_blocks(w, BS) * BS;
        long bound_tokens = kv_window_max_tokens(w, BS, 1);
        int bound_blocks = (int)((bound_tokens + BS - 1) / BS);
        int32_t kept[RUN_LEN];
        int n_kept = 0, evictions = 0, seq;
        double worst_k = 0.0, worst_l = 0.0;
        ck_assert_int_eq(kv_cache_seq_open(c.kv, &seq), 0);
        for (int i = 0; i < RUN_LEN; i++) {
            int ev = -1;
            ck_assert_int_eq(model_kv_window_evict(c.m, c.kv, seq, w, &ev), 0);
            if (ev > 0) {
                memmove(kept + sink, kept + sink + ev,
                        sizeof(int32_t) * (size_t)(n_kept - sink - ev));
                n_kept -= ev;
                evictions++;
            }
            ck_assert_int_eq(kv_cache_seq_len(c.kv, seq), n_kept);
            kept[n_kept++] = tok[i];
            const float *l = run_one(&c, seq, &tok[i]);
            ck_assert_int_le(kv_cache_seq_len(c.kv, seq), bound_tokens);
            ck_assert_int_le(kv_cache_blocks_used(c.kv), bound_blocks);
            float *got = malloc(sizeof(float) * (size_t)c.vocab);
            ck_assert_ptr_nonnull(got);
            memcpy(got, l, sizeof(float) * (size_t)c.vocab);
            double dk = fresh_compare(&c, seq, kept, n_kept, fresh);
            double dl = rel_diff(got, fresh, (size_t)c.vocab);
            free(got);
            if (dk > worst_k) worst_k = dk;
            ck_assert_msg(dk <= mc->tol, "%s %s window %zu step %d: layer-0 keys differ by %g",
                          name, mc->rope_scaling ? mc->rope_scaling : "", wi, i, dk);
            if (model_hparams(c.m)->n_layer == 1) {
                if (dl > worst_l) worst_l = dl;
                ck_assert_msg(dl <= mc->tol, "%s %s window %zu step %d: logits differ by %g", name,
                              mc->rope_scaling ? mc->rope_scaling : "", wi, i, dl);
            }
        }
        ck_assert_int_gt(evictions, 5);
        printf("%s %s kv %d window (%d, %d): %d evictions, worst relative diff: keys %.3g, "
               "logits %.3g\n",
               name, mc->rope_scaling ? mc->rope_scaling : "", (int)mc->kv_type, w->sink_tokens,
               w->window_tokens, evictions, worst_k, worst_l);
        kv_cache_seq_close(c.kv, seq);
        ck_assert_int_eq(kv_cache_blocks_used(c.kv), 0);
    }
    free(fresh);
    ctx_close(&c);
}
END_TEST

/* A block shared with another sequence (a fork) is never rotated: eviction refuses to move it and
 * changes nothing, and goes ahead once the other owner is gone. */
START_TEST(test_model_window_refuses_shared_moved_blocks)
{
    struct ctx c;
    if (!ctx_open(&c, &cases[0])) return;
    int32_t tok[40];
    make_tokens(tok, 40, c.vocab);
    int a, f;
    ck_assert_int_eq(kv_cache_seq_open(c.kv, &a), 0);
    for (int i = 0; i < 40; i++) run_one(&c, a, &tok[i]);
    ck_assert_int_eq(kv_cache_seq_fork(c.kv, a, &f), 0);
    struct kv_window w = {KV_WINDOW_SINK, 4, 8};
    int ev = -1;
    ck_assert_int_eq(model_kv_window_evict(c.m, c.kv, a, &w, &ev), ERR_INVAL);
    ck_assert_int_eq(ev, 0);
    ck_assert_int_eq(kv_cache_seq_len(c.kv, a), 40);
    kv_cache_seq_close(c.kv, f);
    ck_assert_int_eq(model_kv_window_evict(c.m, c.kv, a, &w, &ev), 0);
    ck_assert_int_eq(ev, 24); /* 40 - 8 sink - 24 = 8 left */
    kv_cache_seq_close(c.kv, a);
    ck_assert_int_eq(kv_cache_blocks_used(c.kv), 0);
    ck_assert_int_eq(model_kv_shift(c.m, NULL, 0, 8), 0);
    ctx_close(&c);
}
END_TEST

Suite *model_window_suite(void);
Suite *model_window_suite(void)
{
    Suite *s = suite_create("model_window");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    int n = (int)(sizeof(cases) / sizeof(cases[0]));
    tcase_add_loop_test(tc, test_model_window_no_eviction_is_bit_identical, 0, n);
    tcase_add_loop_test(tc, test_model_window_matches_fresh_run_over_kept_tokens, 0, n);
    tcase_add_test(tc, test_model_window_refuses_shared_moved_blocks);
    suite_add_tcase(s, tc);
    return s;
}
