/* Batch invariance of the forward step: 16 different prompts run together (one prefill step for
 * all, then one decode step for all per token, as two lanes where the weights allow; staggered
 * schedules mixing prefills and prefill chunks with decode tokens of other sequences) give the same
 * greedy tokens as 16 separate runs, and bit-identical logits, also when a sequence's prompt is
 * split into chunks differently. Also prefix sharing with copy-on-write. Uses the stories260K models
 * from ../shared (skipped when absent; their 8-wide heads take the backend's per-row llama.cpp
 * attention path) and generated models with 64-wide heads and grouped KV heads (the vector
 * attention kernels), in F32 and in Q8_0 (whose decode steps split into lanes): llama, and the
 * architectures with more per-token state: gemma2 and gemma3 (sliding windows of 8 positions, so
 * windowed and full-context tokens share steps; soft-caps), qwen2moe (each step's routing, experts
 * run over the rows routed to them, the shared expert), phi3 (fused projections, long-rope). */
#include "engine/kv/kv_cache.h"
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

#define N_SEQ   16
#define N_GEN   24
#define MAX_LEN 64
#define VOCAB   512

struct prompt {
    int n;
    int32_t ids[MAX_LEN];
};

/* 16 prompts of different lengths (1..25 tokens), BOS first. */
static void make_prompts(struct prompt *p)
{
    unsigned x = 2463534242u;
    for (int s = 0; s < N_SEQ; s++) {
        p[s].n = 1 + (s * 3) % 23 + (s == 5 ? 9 : 0);
        p[s].ids[0] = 1;
        for (int i = 1; i < p[s].n; i++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            p[s].ids[i] = (int32_t)(3 + x % (VOCAB - 3));
        }
    }
}

struct result {
    int32_t tokens[N_GEN];
    float logits[N_GEN][VOCAB]; /* the row each token was chosen from */
};

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

struct ctx {
    struct model *m;
    struct kv_cache *kv;
};

/* A model of ../shared (file), or generated with weights of gen_type (file NULL) and architecture
 * `arch` (NULL: llama). */
struct model_case {
    const char *file;
    enum quant_type gen_type;
    bool splits; /* its 16-way decode steps run as lanes (model_lanes.c) */
    const char *arch;
};

/* A random-weight model of VOCAB tokens with 64-wide heads, 2 query heads per KV head, weights of
 * the case's type; run with an F32 cache, so no f16 or q8 rounding of K/V absorbs a difference
 * before the logits (F32 weights add none either; Q8_0 ones take the integer kernels and lanes). */
static const char *gen_model_path(const struct model_case *mc)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/cinfer_test_batch_inv_%ld.gguf", test_tmpdir(),
             (long)getpid());
    struct gen_model_opts g;
    gen_model_defaults(&g);
    g.type = mc->gen_type;
    g.arch = mc->arch ? mc->arch : "llama";
    g.std = 0.05f;
    g.norm_std = 0.1f;
    if (strcmp(g.arch, "qwen2moe") == 0) {
        g.experts = 4;
        g.experts_used = 2;
        g.expert_ffn = 128;
    }
    if (strncmp(g.arch, "gemma", 5) == 0) {
        g.sliding_window = 8;
        g.swa_pattern = 2;
        g.attn_softcap = 5.0f;
        g.final_softcap = 10.0f;
    }
    if (strcmp(g.arch, "phi3") == 0) {
        g.rope_scaling = "longrope";
        g.rope_factor = 4.0f;
        g.rope_orig_ctx = 64;
    }
    g.dim = 256;
    g.layers = 2;
    g.heads = 4;
    g.kv_heads = 2;
    g.ffn = 512;
    g.context_length = 256;
    g.vocab_size = VOCAB;
    char err[256];
    ck_assert_msg(gen_model_write(&g, path, err, sizeof(err)) == 0, "%s", err);
    return path;
}

static bool ctx_open(struct ctx *c, const struct model_case *mc)
{
    char rel[128];
    snprintf(rel, sizeof(rel), "models/tinyllamas/%s", mc->file ? mc->file : "");
    bool generated = mc->file == NULL;
    const char *path = generated ? gen_model_path(mc) : test_shared_path(rel);
    if (!path) return false;
    struct model_options o;
    model_options_default(&o);
    o.n_threads = 2;
    if (generated) o.kv_type = QUANT_F32;
    char err[256];
    ck_assert_msg(model_load(path, &o, &c->m, err, sizeof(err)) == 0, "%s", err);
    if (generated) unlink(path); /* the mapping stays valid */
    ck_assert_int_eq(model_hparams(c->m)->n_vocab, VOCAB);
    struct kv_cache_config kc = {N_SEQ * 8, 16, N_SEQ, 8};
    ck_assert_int_eq(kv_cache_new(&kc, &c->kv), 0);
    ck_assert_int_eq(model_kv_init(c->m, c->kv), 0);
    return true;
}

static void ctx_close(struct ctx *c)
{
    kv_cache_free(c->kv);
    model_free(c->m);
}

/* Per-sequence progress of a scheduled run. */
struct seq_run {
    int seq;
    int fed;   /* prompt tokens already run */
    int n_gen; /* tokens generated */
    int32_t next;
};

/* Runs the sequences in `active` one step: each contributes a prompt chunk of up to `chunk` tokens
 * or its next decode token. Records the generated tokens. */
static void step(struct ctx *c, const struct prompt *p, struct seq_run *r, const int *active,
                 int n_active, int chunk, struct result *res)
{
    struct model_batch_entry e[N_SEQ];
    for (int i = 0; i < n_active; i++) {
        int s = active[i];
        struct kv_cache_copy cp;
        int pos = kv_cache_seq_len(c->kv, r[s].seq);
        if (r[s].fed < p[s].n) {
            int n = p[s].n - r[s].fed < chunk ? p[s].n - r[s].fed : chunk;
            ck_assert_int_eq(kv_cache_seq_append(c->kv, r[s].seq, n, &cp), 0);
            e[i] = (struct model_batch_entry){r[s].seq, pos, n, p[s].ids + r[s].fed,
                                              MODEL_LOGITS_LAST};
            r[s].fed += n;
        } else {
            ck_assert_int_eq(kv_cache_seq_append(c->kv, r[s].seq, 1, &cp), 0);
            e[i] = (struct model_batch_entry){r[s].seq, pos, 1, &r[s].next, MODEL_LOGITS_LAST};
        }
    }
    const float *logits;
    int rows;
    ck_assert_int_eq(model_forward(c->m, c->kv, e, n_active, &logits, &rows), 0);
    ck_assert_int_eq(rows, n_active);
    for (int i = 0; i < n_active; i++) {
        int s = active[i];
        if (r[s].fed < p[s].n) continue; /* mid-prompt chunk: its logits are not used */
        const float *row = logits + (size_t)i * VOCAB;
        r[s].next = (int32_t)argmax(row, VOCAB);
        res[s].tokens[r[s].n_gen] = r[s].next;
        memcpy(res[s].logits[r[s].n_gen], row, sizeof(res[s].logits[0]));
        r[s].n_gen++;
    }
}

/* One sequence alone: prompt in one step, then one token per step. */
static void run_alone(struct ctx *c, const struct prompt *p, int s, struct result *res)
{
    struct seq_run r[N_SEQ];
    memset(r, 0, sizeof(r));
    ck_assert_int_eq(kv_cache_seq_open(c->kv, &r[s].seq), 0);
    int active[1] = {s};
    while (r[s].n_gen < N_GEN) step(c, p, r, active, 1, MAX_LEN, res);
    kv_cache_seq_close(c->kv, r[s].seq);
}

/* All sequences together; sequence s joins at step `start[s]` and feeds its prompt in chunks.
 * Returns how many steps ran split into lanes (model_forward_lanes). */
static int run_together(struct ctx *c, const struct prompt *p, const int *start, int chunk,
                        struct result *res)
{
    int split = 0;
    struct seq_run r[N_SEQ];
    memset(r, 0, sizeof(r));
    for (int s = 0; s < N_SEQ; s++) ck_assert_int_eq(kv_cache_seq_open(c->kv, &r[s].seq), 0);
    for (int t = 0;; t++) {
        int active[N_SEQ], n = 0;
        for (int s = 0; s < N_SEQ; s++)
            if (t >= start[s] && r[s].n_gen < N_GEN) active[n++] = s;
        if (n == 0) {
            bool done = true;
            for (int s = 0; s < N_SEQ; s++) done = done && r[s].n_gen == N_GEN;
            if (done) break;
            continue;
        }
        step(c, p, r, active, n, chunk, res);
        split += model_forward_lanes(c->m) > 1;
    }
    for (int s = 0; s < N_SEQ; s++) kv_cache_seq_close(c->kv, r[s].seq);
    ck_assert_int_eq(kv_cache_blocks_used(c->kv), 0);
    return split;
}

/* Tokens and logits must match bit for bit. */
static void compare(const struct result *a, const struct result *b, const char *what)
{
    for (int s = 0; s < N_SEQ; s++) {
        for (int i = 0; i < N_GEN; i++)
            ck_assert_msg(a[s].tokens[i] == b[s].tokens[i], "%s: sequence %d token %d: %d vs %d",
                          what, s, i, a[s].tokens[i], b[s].tokens[i]);
        ck_assert_msg(memcmp(a[s].logits, b[s].logits, sizeof(a[s].logits)) == 0,
                      "%s: sequence %d: logits not bit-identical", what, s);
    }
}

/* Steps split into lanes only when every matrix takes the integer kernels (every quantized type):
 * the stories260K Q8_0 and Q4_0 files keep their ffn_down in F32 (172 columns, no multiple of 32).
 * The generated Q4_K and Q5_0 models cover the K-quant (Q8_K activations) and the other 32-element
 * kernels. */
static const struct model_case models[] = {
    {"stories260K.gguf", QUANT_F32, false, NULL},
    {"stories260K-F16.gguf", QUANT_F32, false, NULL},
    {"stories260K-Q8_0.gguf", QUANT_F32, false, NULL},
    {"stories260K-Q4_0.gguf", QUANT_F32, false, NULL},
    {NULL, QUANT_F32, false, NULL},
    {NULL, QUANT_Q8_0, true, NULL},
    {NULL, QUANT_Q4_K, true, NULL},
    {NULL, QUANT_Q5_0, true, NULL},
    {NULL, QUANT_Q8_0, true, "gemma2"},
    {NULL, QUANT_F32, false, "gemma3"},
    {NULL, QUANT_Q8_0, true, "qwen2moe"},
    {NULL, QUANT_Q8_0, true, "phi3"},
};

START_TEST(test_model_forward_batch_invariant)
{
    struct ctx c;
    if (!ctx_open(&c, &models[_i])) return;
    struct prompt p[N_SEQ];
    make_prompts(p);
    struct result *alone = calloc(N_SEQ, sizeof(*alone));
    struct result *together = calloc(N_SEQ, sizeof(*together));
    ck_assert(alone && together);

    for (int s = 0; s < N_SEQ; s++) run_alone(&c, p, s, alone);
    /* The sequences' outputs are not all the same (the test would be vacuous). */
    ck_assert(memcmp(alone[0].tokens, alone[3].tokens, sizeof(alone[0].tokens)) != 0);

    /* All at once: one prefill step for every prompt, then one decode step for all. */
    int same_start[N_SEQ] = {0};
    /* Its decode steps (16 alike tokens on 2 threads) run as two lanes where the weights take
     * the integer kernels (any quantized type), and never split otherwise. */
    int split = run_together(&c, p, same_start, MAX_LEN, together);
    if (models[_i].splits)
        ck_assert_int_gt(split, 0);
    else
        ck_assert_int_eq(split, 0);
    compare(alone, together, "one prefill step for all");

    /* Staggered: sequences join on different steps, so steps mix whole-prompt prefills with decode
     * tokens of other sequences. Batch composition alone must not change a bit. */
    int staggered[N_SEQ] = {0, 1, 1, 3, 4, 4, 7, 9, 0, 2, 2, 5, 6, 8, 8, 10};
    memset(together, 0, N_SEQ * sizeof(*together));
    run_together(&c, p, staggered, MAX_LEN, together);
    compare(alone, together, "staggered prefill + decode");

    /* Chunked prefill mixed with decode tokens of other sequences: a token's attention rows share
     * work items with different neighbours (5 per step; 1 per step, decode-shaped), and the results
     * must not change a bit (a preempted sequence's recompute relies on it). */
    static const int chunks[] = {5, 1};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        memset(together, 0, N_SEQ * sizeof(*together));
        run_together(&c, p, staggered, chunks[i], together);
        compare(alone, together, "staggered chunked prefill + decode");
    }

    free(alone);
    free(together);
    ctx_close(&c);
}
END_TEST

/* Prefix sharing: a sequence forked mid-block shares its K/V blocks; each branch's first append
 * copies the shared partial block (copy-on-write), so both branches continue exactly as fresh runs
 * of prompt + their own tokens would, and the shared full blocks are never written. */
START_TEST(test_model_forward_fork_copy_on_write)
{
    struct ctx c;
    const struct model_case stories = {"stories260K.gguf", QUANT_F32, false, NULL};
    if (!ctx_open(&c, &stories)) return;
    struct prompt p[N_SEQ];
    make_prompts(p);
    const struct prompt *base = &p[6]; /* 19 tokens: one full block + 3 in the second */
    ck_assert_int_eq(base->n % 16 != 0, 1);
    int32_t branch_tok[2] = {300, 17};

    /* Fresh runs of base + branch token, then 8 greedy tokens. */
    int32_t fresh[2][8];
    for (int b = 0; b < 2; b++) {
        struct prompt q = *base;
        q.ids[q.n++] = branch_tok[b];
        struct result *res = calloc(N_SEQ, sizeof(*res));
        ck_assert_ptr_nonnull(res);
        struct seq_run r[N_SEQ];
        memset(r, 0, sizeof(r));
        ck_assert_int_eq(kv_cache_seq_open(c.kv, &r[0].seq), 0);
        int active[1] = {0};
        struct prompt qs[N_SEQ];
        qs[0] = q;
        while (r[0].n_gen < 8) step(&c, qs, r, active, 1, MAX_LEN, res);
        memcpy(fresh[b], res[0].tokens, sizeof(fresh[b]));
        kv_cache_seq_close(c.kv, r[0].seq);
        free(res);
    }

    /* Shared prefix: run the base once, fork, then feed each branch its token. */
    int a, b2;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(c.kv, &a), 0);
    ck_assert_int_eq(kv_cache_seq_append(c.kv, a, base->n, &cp), 0);
    struct model_batch_entry e = {a, 0, base->n, base->ids, MODEL_LOGITS_NONE};
    const float *logits;
    int rows;
    ck_assert_int_eq(model_forward(c.m, c.kv, &e, 1, &logits, &rows), 0);
    ck_assert_int_eq(rows, 0);
    ck_assert_int_eq(kv_cache_seq_fork(c.kv, a, &b2), 0);
    int used_shared = kv_cache_blocks_used(c.kv);
    int seqs[2] = {a, b2};
    int32_t next[2] = {branch_tok[0], branch_tok[1]};
    for (int i = 0; i < 8; i++) {
        struct model_batch_entry es[2];
        for (int s = 0; s < 2; s++) {
            int pos = kv_cache_seq_len(c.kv, seqs[s]);
            ck_assert_int_eq(kv_cache_seq_append(c.kv, seqs[s], 1, &cp), 0);
            if (cp.n) ck_assert_int_eq(model_kv_copy_block(c.m, cp.src, cp.dst), 0);
            /* The first append of the first branch copies; the second then owns the original. */
            if (i == 0) ck_assert_int_eq(cp.n, s == 0 ? 1 : 0);
            es[s] = (struct model_batch_entry){seqs[s], pos, 1, &next[s], MODEL_LOGITS_LAST};
        }
        ck_assert_int_eq(model_forward(c.m, c.kv, es, 2, &logits, &rows), 0);
        for (int s = 0; s < 2; s++) {
            next[s] = (int32_t)argmax(logits + (size_t)s * VOCAB, VOCAB);
            ck_assert_msg(next[s] == fresh[s][i], "branch %d step %d: %d vs fresh %d", s, i,
                          next[s], fresh[s][i]);
        }
    }
    ck_assert_int_eq(kv_cache_blocks_used(c.kv), used_shared + 1); /* one copied block */
    kv_cache_seq_close(c.kv, a);
    kv_cache_seq_close(c.kv, b2);
    ck_assert_int_eq(kv_cache_blocks_used(c.kv), 0);
    ctx_close(&c);
}
END_TEST

Suite *batch_invariance_suite(void);
Suite *batch_invariance_suite(void)
{
    Suite *s = suite_create("batch_invariance");
    TCase *tc = tcase_create("stories260K");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_model_forward_batch_invariant, 0,
                        (int)(sizeof(models) / sizeof(models[0])));
    tcase_add_test(tc, test_model_forward_fork_copy_on_write);
    suite_add_tcase(s, tc);
    return s;
}
