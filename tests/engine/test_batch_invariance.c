/* Batch invariance of the forward step: 8 different prompts run together (one prefill step for all,
 * then one decode step for all per token; and a staggered schedule mixing prefill chunks with decode
 * tokens of other sequences) give the same greedy tokens, and bit-identical logits, as 8 separate
 * runs. Uses the stories260K models from ../shared (skipped when absent). */
#include "engine/kv_cache.h"
#include "engine/model.h"

#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SEQ   8
#define N_GEN   24
#define MAX_LEN 64
#define VOCAB   512

struct prompt {
    int n;
    int32_t ids[MAX_LEN];
};

/* 8 prompts of different lengths (1..23 tokens), BOS first. */
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

static bool ctx_open(struct ctx *c, const char *file)
{
    char rel[128];
    snprintf(rel, sizeof(rel), "models/tinyllamas/%s", file);
    const char *path = test_shared_path(rel);
    if (!path) return false;
    struct model_options o;
    model_options_default(&o);
    o.n_threads = 2;
    char err[256];
    ck_assert_msg(model_load(path, &o, &c->m, err, sizeof(err)) == 0, "%s", err);
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

/* All sequences together; sequence s joins at step `start[s]` and feeds its prompt in chunks. */
static void run_together(struct ctx *c, const struct prompt *p, const int *start, int chunk,
                         struct result *res)
{
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
    }
    for (int s = 0; s < N_SEQ; s++) kv_cache_seq_close(c->kv, r[s].seq);
    ck_assert_int_eq(kv_cache_blocks_used(c->kv), 0);
}

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

static const char *const models[] = {"stories260K.gguf", "stories260K-F16.gguf",
                                     "stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf"};

START_TEST(test_model_forward_batch_invariant)
{
    struct ctx c;
    if (!ctx_open(&c, models[_i])) return;
    struct prompt p[N_SEQ];
    make_prompts(p);
    struct result *alone = calloc(N_SEQ, sizeof(*alone));
    struct result *together = calloc(N_SEQ, sizeof(*together));
    ck_assert(alone && together);

    for (int s = 0; s < N_SEQ; s++) run_alone(&c, p, s, alone);
    /* The eight sequences' outputs are not all the same (the test would be vacuous). */
    ck_assert(memcmp(alone[0].tokens, alone[3].tokens, sizeof(alone[0].tokens)) != 0);

    int same_start[N_SEQ] = {0};
    run_together(&c, p, same_start, MAX_LEN, together);
    compare(alone, together, "one prefill step for all");

    /* Staggered: sequences join on different steps and prefill in chunks of 5, so steps mix
     * prompt chunks with decode tokens of other sequences. */
    int staggered[N_SEQ] = {0, 1, 1, 3, 4, 4, 7, 9};
    memset(together, 0, N_SEQ * sizeof(*together));
    run_together(&c, p, staggered, 5, together);
    compare(alone, together, "staggered chunked prefill + decode");

    free(alone);
    free(together);
    ctx_close(&c);
}
END_TEST

Suite *batch_invariance_suite(void);
Suite *batch_invariance_suite(void)
{
    Suite *s = suite_create("batch_invariance");
    TCase *tc = tcase_create("stories260K");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_model_forward_batch_invariant, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}
