/* The offload tiers under the real scheduler and the stories260K model (skipped without
 * ../shared): a prompt whose prefix blocks were evicted from a small KV pool is served from tier 2
 * (host memory) or tier 3 (a directory), counted as cached tokens of that tier, and generates
 * exactly the tokens it generates with the prefix recomputed; a second engine sharing the
 * directory reuses the first one's blocks; a damaged tier-3 file is recomputed, never served; a
 * preempted sequence's blocks parked in tier 2 are loaded back on resume, with the same tokens. */
#include "engine/kv/kv_offload.h"

#include "common/err.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "engine/kv/kv_cache.h"
#include "engine/kv/kv_slots.h"
#include "engine/model/model.h"
#include "engine/sched/scheduler.h"
#include "tests/testutil.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BS       16
#define N_GEN    12
#define N_PROMPT 70 /* four full blocks reusable, the fifth holds the last token */
#define MAX_CTX  128

#define OUT_MAX 64 /* tokens an out keeps */

struct out {
    int32_t tokens[OUT_MAX];
    int n_tokens, n_cached;
    bool admitted;
    enum sched_finish finish;
};

struct eng {
    struct model *m;
    struct kv_cache *kv;
    struct kv_offload *store;
    struct sched *s;
};

static void on_event(void *ctx, const struct sched_event *ev)
{
    struct out *o = ev->ud;
    (void)ctx;
    if (ev->has_token && o->n_tokens < OUT_MAX) o->tokens[o->n_tokens++] = ev->token;
    if (ev->finish != SCHED_FINISH_NONE) o->finish = ev->finish;
    if (!ev->has_token && !ev->prompt_token && ev->finish == SCHED_FINISH_NONE) o->admitted = true;
    o->n_cached = ev->n_cached;
}

/* An engine with a pool of 8 blocks (about one request) and the given tiers; false (skip) without
 * the shared model. */
static int eng_max_seqs = 1; /* max_num_seqs of the next eng_open */
static int eng_blocks = 8;   /* pool blocks of the next eng_open */

static bool eng_open(struct eng *e, bool prefix, uint64_t host_bytes, const char *dir)
{
    memset(e, 0, sizeof(*e));
    const char *path = test_shared_path("models/tinyllamas/stories260K.gguf");
    if (!path) return false;
    struct model_options o;
    model_options_default(&o);
    o.n_threads = 1;
    char err[256];
    ck_assert_msg(model_load(path, &o, &e->m, err, sizeof(err)) == 0, "%s", err);
    struct kv_cache_config kc = {eng_blocks, BS, eng_max_seqs, MAX_CTX / BS};
    ck_assert_int_eq(kv_cache_new(&kc, &e->kv), 0);
    ck_assert_int_eq(model_kv_init(e->m, e->kv), 0);
    if (host_bytes || dir) {
        const struct model_hparams *hp = model_hparams(e->m);
        struct kv_block_layout l = {.kv_type = (int)o.kv_type,
                                    .block_size = BS,
                                    .n_layers = hp->n_layer,
                                    .n_kv_heads = hp->n_head_kv,
                                    .head_dim = hp->head_dim,
                                    .payload_bytes = model_kv_block_bytes(e->m)};
        memset(l.model_digest, '7', KV_BLOCK_DIGEST_HEX);
        struct kv_offload_config c = {kv_block_namespace(&l),
                                      BS,
                                      l.payload_bytes,
                                      host_bytes,
                                      dir,
                                      dir ? 1 << 24 : 0,
                                      0,
                                      NULL,
                                      NULL,
                                      0};
        ck_assert_int_eq(kv_offload_new(&c, &e->store), 0);
    }
    struct sched_config sc = {.max_num_seqs = eng_max_seqs,
                              .max_num_batched_tokens = 256,
                              .chunked_prefill = true,
                              .prefix_caching = prefix,
                              .max_context = MAX_CTX,
                              .offload = e->store,
                              .offload_gate = KV_SLOTS_GATE_PROMPT};
    ck_assert_int_eq(sched_new(&sc, e->m, e->kv, NULL, on_event, NULL, &e->s), 0);
    return true;
}

static void eng_close(struct eng *e)
{
    sched_free(e->s);
    kv_offload_free(e->store);
    ck_assert_int_eq(kv_cache_blocks_used(e->kv), 0);
    kv_cache_free(e->kv);
    model_free(e->m);
}

/* Prompt `seed`: BOS then N_PROMPT-1 ids. */
static void make_prompt(int seed, int32_t *ids)
{
    unsigned x = 2463534242u + (unsigned)seed * 7919u;
    ids[0] = 1;
    for (int i = 1; i < N_PROMPT; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ids[i] = (int32_t)(3 + x % 500);
    }
}

/* Runs prompt `seed` alone to the end; its blocks then wait in the pool's prefix cache. */
static struct out run(struct eng *e, int seed)
{
    int32_t ids[N_PROMPT];
    make_prompt(seed, ids);
    struct out o = {0};
    struct sched_request q = {
        .prompt = ids, .n_prompt = N_PROMPT, .max_tokens = N_GEN, .ignore_eos = true, .ud = &o};
    sampler_params_default(&q.sampling);
    q.sampling.temperature = 0;
    struct sched_seq *seq;
    ck_assert_int_eq(sched_add(e->s, &q, &seq), 0);
    for (int i = 0; i < 1000 && !sched_idle(e->s); i++) ck_assert_int_eq(sched_step(e->s), 0);
    ck_assert(sched_idle(e->s));
    ck_assert_int_eq(o.finish, SCHED_FINISH_LENGTH);
    ck_assert_int_eq(o.n_tokens, N_GEN);
    if (e->store) kv_offload_flush(e->store);
    return o;
}

static void expect_same(const struct out *a, const struct out *b)
{
    ck_assert_mem_eq(a->tokens, b->tokens, sizeof(a->tokens));
}

static struct out reference(int seed)
{
    struct eng e;
    ck_assert(eng_open(&e, false, 0, NULL));
    struct out o = run(&e, seed);
    ck_assert_int_eq(o.n_cached, 0);
    eng_close(&e);
    return o;
}

static char *make_dir(void)
{
    char *d = strdup("/tmp/cinfer-kvoff-sched-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static void remove_dir(char *d)
{
    DIR *dd = opendir(d);
    for (struct dirent *de; dd && (de = readdir(dd));) {
        if (de->d_name[0] == '.' && (!de->d_name[1] || de->d_name[1] == '.')) continue;
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", d, de->d_name);
        unlink(p);
    }
    if (dd) closedir(dd);
    rmdir(d);
    free(d);
}

START_TEST(test_kv_offload_sched_tier1_and_tier2_equal_recompute)
{
    struct eng e;
    if (!eng_open(&e, true, 1 << 20, NULL)) return;
    struct out ref = reference(0);
    struct out first = run(&e, 0);
    expect_same(&first, &ref);
    struct out again = run(&e, 0); /* tier 1: still in the pool */
    ck_assert_int_eq(again.n_cached, 4 * BS);
    expect_same(&again, &ref);
    struct sched_stats st;
    sched_stats(e.s, &st);
    ck_assert_uint_eq(st.prefix_hits_host, 0);
    run(&e, 1); /* two other prompts push prompt 0 out of the 8-block pool */
    run(&e, 2);
    struct kv_offload_stats os;
    kv_offload_stats(e.store, &os);
    ck_assert_uint_ge(os.stored[KV_OFFLOAD_HOST], 4);
    struct out back = run(&e, 0); /* tier 2 */
    ck_assert_int_eq(back.n_cached, 4 * BS);
    expect_same(&back, &ref);
    sched_stats(e.s, &st);
    ck_assert_uint_eq(st.prefix_hits_host, 4 * BS);
    ck_assert_uint_eq(st.prefix_hits_disk, 0);
    eng_close(&e);
}
END_TEST

START_TEST(test_kv_offload_sched_tier3_shared_between_engines)
{
    struct eng a, b;
    char *dir = make_dir();
    if (!eng_open(&a, true, 0, dir)) {
        remove_dir(dir);
        return;
    }
    struct out ref = reference(3);
    expect_same(&ref, (struct out[]){run(&a, 3)});
    run(&a, 4);
    run(&a, 5);
    /* Evicted once, never reused: tier 3's gate wrote no file for it. */
    struct out once = run(&a, 3);
    ck_assert_int_eq(once.n_cached, 0);
    expect_same(&once, &ref);
    run(&a, 4); /* evicted a second time: written */
    run(&a, 5);
    struct out back = run(&a, 3); /* tier 3 of the same engine */
    ck_assert_int_eq(back.n_cached, 4 * BS);
    expect_same(&back, &ref);
    struct sched_stats st;
    sched_stats(a.s, &st);
    ck_assert_uint_eq(st.prefix_hits_disk, 4 * BS);
    /* A cold engine on the same directory computes none of the prefix. */
    ck_assert(eng_open(&b, true, 1 << 20, dir));
    struct out cold = run(&b, 3);
    ck_assert_int_eq(cold.n_cached, 4 * BS);
    expect_same(&cold, &ref);
    sched_stats(b.s, &st);
    ck_assert_uint_eq(st.prefix_hits_disk, 4 * BS);
    eng_close(&b);
    eng_close(&a);
    remove_dir(dir);
}
END_TEST

/* Flips one byte in the middle of every block file of the directory. */
static int damage_files(const char *dir)
{
    int n = 0;
    DIR *dd = opendir(dir);
    for (struct dirent *de; dd && (de = readdir(dd));) {
        if (de->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        FILE *f = fopen(p, "r+b");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, len / 2, SEEK_SET);
        int c = fgetc(f);
        fseek(f, len / 2, SEEK_SET);
        fputc(c ^ 0x10, f);
        fclose(f);
        n++;
    }
    if (dd) closedir(dd);
    return n;
}

START_TEST(test_kv_offload_sched_corrupt_tier3_is_recomputed)
{
    struct eng a, b;
    char *dir = make_dir();
    if (!eng_open(&a, true, 0, dir)) {
        remove_dir(dir);
        return;
    }
    struct out ref = reference(8);
    run(&a, 6);
    run(&a, 7);
    run(&a, 8);
    eng_close(&a); /* a graceful stop writes the pool's blocks (prompt 8's) to tier 3 */
    ck_assert_int_gt(damage_files(dir), 0);
    ck_assert(eng_open(&b, true, 0, dir));
    struct out o = run(&b, 8);
    ck_assert_int_eq(o.n_cached, 0);
    expect_same(&o, &ref);
    struct kv_offload_stats os;
    kv_offload_stats(b.store, &os);
    ck_assert_uint_ge(os.corrupt, 1);
    eng_close(&b);
    remove_dir(dir);
}
END_TEST

/* Preemption: P_SEQS sequences of P_PROMPT prompt and P_GEN generated tokens run together in the
 * 8-block pool (each needs 5 blocks at the end), so the newest is preempted. */
#define P_SEQS   2
#define P_PROMPT 40
#define P_GEN    40

/* Runs prompts seeds[0..n) (their first P_PROMPT ids) together to the end, in the engine. */
static void run_together(struct eng *e, const int *seeds, int n, struct out *outs)
{
    int32_t ids[P_SEQS][N_PROMPT];
    for (int i = 0; i < n; i++) {
        make_prompt(seeds[i], ids[i]);
        outs[i] = (struct out){0};
        struct sched_request q = {.prompt = ids[i],
                                  .n_prompt = P_PROMPT,
                                  .max_tokens = P_GEN,
                                  .ignore_eos = true,
                                  .ud = &outs[i]};
        sampler_params_default(&q.sampling);
        q.sampling.temperature = 0;
        struct sched_seq *seq;
        ck_assert_int_eq(sched_add(e->s, &q, &seq), 0);
    }
    for (int i = 0; i < 10000 && !sched_idle(e->s); i++) {
        ck_assert_int_eq(sched_step(e->s), 0);
        /* The offload thread keeps up with each step: whether a parked block is in tier 2 by the
         * time its sequence tries to resume is otherwise a race the test would lose sometimes
         * (on a busy machine the thread can lag a whole run; the sequence then recomputes). */
        if (e->store) kv_offload_flush(e->store);
    }
    ck_assert(sched_idle(e->s));
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(outs[i].finish, SCHED_FINISH_LENGTH);
        ck_assert_int_eq(outs[i].n_tokens, P_GEN);
    }
}

/* A preempted sequence parks its blocks in tier 2 and loads them back when it resumes: it
 * generates exactly what it generates alone and what it generates when its blocks are
 * recomputed; the pool's blocks all come back; tier 2 stays under its budget. */
START_TEST(test_kv_offload_sched_preempted_blocks_parked_in_tier2)
{
    const int seeds[P_SEQS] = {11, 12};
    struct out ref[P_SEQS], rec[P_SEQS], park[P_SEQS];
    struct eng e;
    eng_max_seqs = 1;
    for (int i = 0; i < P_SEQS; i++) {
        if (!eng_open(&e, false, 0, NULL)) return;
        run_together(&e, &seeds[i], 1, &ref[i]);
        eng_close(&e);
    }
    eng_max_seqs = P_SEQS;
    /* Recompute: prefix caching without tiers. */
    ck_assert(eng_open(&e, true, 0, NULL));
    run_together(&e, seeds, P_SEQS, rec);
    struct sched_stats st;
    sched_stats(e.s, &st);
    ck_assert_uint_ge(st.preemptions, 1);
    uint64_t rec_resume = st.resume_hits;
    eng_close(&e);
    /* Parking: tier 2 of four records. */
    ck_assert(eng_open(&e, false, 0, NULL)); /* to size the budget */
    size_t rb = kv_block_record_bytes(BS, model_kv_block_bytes(e.m));
    eng_close(&e);
    ck_assert(eng_open(&e, true, 4 * rb, NULL));
    run_together(&e, seeds, P_SEQS, park);
    sched_stats(e.s, &st);
    ck_assert_uint_ge(st.preemptions, 1);
    ck_assert_uint_gt(st.resume_hits, rec_resume); /* fewer tokens recomputed on resume */
    struct kv_offload_stats os;
    kv_offload_stats(e.store, &os);
    ck_assert_uint_ge(os.hits[KV_OFFLOAD_HOST], 1);
    ck_assert_uint_le(os.bytes[KV_OFFLOAD_HOST], 4 * rb);
    eng_close(&e); /* every block back in the pool's free list */
    eng_max_seqs = 1;
    for (int i = 0; i < P_SEQS; i++) {
        expect_same(&rec[i], &ref[i]);
        expect_same(&park[i], &ref[i]);
    }
}
END_TEST

/* Preemption with tier 3 only, where every admission and re-admission passes through the
 * read-ahead decision: parked blocks are written to the directory (no tier 2 keeps them), the
 * resumed sequence loads them from there, both sequences generate exactly what they generate
 * alone, and nothing stays staged. */
START_TEST(test_kv_offload_sched_preempted_with_tier3_only)
{
    const int seeds[P_SEQS] = {13, 14};
    struct out ref[P_SEQS], got[P_SEQS];
    struct eng e;
    eng_max_seqs = 1;
    for (int i = 0; i < P_SEQS; i++) {
        if (!eng_open(&e, false, 0, NULL)) return;
        run_together(&e, &seeds[i], 1, &ref[i]);
        eng_close(&e);
    }
    char *dir = make_dir();
    eng_max_seqs = P_SEQS;
    ck_assert(eng_open(&e, true, 0, dir));
    run_together(&e, seeds, P_SEQS, got);
    struct sched_stats st;
    sched_stats(e.s, &st);
    ck_assert_uint_ge(st.preemptions, 1);
    kv_offload_flush(e.store);
    struct kv_offload_stats os;
    kv_offload_stats(e.store, &os);
    ck_assert_uint_eq(os.staged_bytes, 0);
    ck_assert_uint_gt(os.hits[KV_OFFLOAD_DISK], 0); /* resumed from the parked blocks */
    eng_close(&e);
    eng_max_seqs = 1;
    for (int i = 0; i < P_SEQS; i++) expect_same(&got[i], &ref[i]);
    remove_dir(dir);
}
END_TEST

/* Writes prompts seeds[0..n)'s blocks to tier 3 in dir: an engine with room for all of them runs
 * them and stops gracefully (which offers its pool's cached blocks). */
static void seed_dir(const char *dir, const int *seeds, int n)
{
    struct eng a;
    eng_blocks = 16;
    ck_assert(eng_open(&a, true, 0, dir));
    for (int i = 0; i < n; i++) run(&a, seeds[i]);
    eng_close(&a);
}

/* Queues prompt `seed` (its first n_prompt ids) for max_tokens greedy tokens into o. */
static void add(struct eng *e, int seed, int n_prompt, long max_tokens, struct out *o)
{
    int32_t ids[N_PROMPT];
    make_prompt(seed, ids);
    *o = (struct out){0};
    struct sched_request q = {
        .prompt = ids, .n_prompt = n_prompt, .max_tokens = max_tokens, .ignore_eos = true, .ud = o};
    sampler_params_default(&q.sampling);
    q.sampling.temperature = 0;
    struct sched_seq *seq;
    ck_assert_int_eq(sched_add(e->s, &q, &seq), 0);
}

/* A cold engine: a prompt whose prefix is in tier 3 waits for the offload thread's read-ahead (the
 * last block's read made slow) while a running sequence keeps decoding, then attaches all four
 * blocks, counted as cached and as tier-3 hits, and generates what it generates computed. */
START_TEST(test_kv_offload_sched_tier3_prefetch_while_another_decodes)
{
    char *dir = make_dir();
    if (!test_shared_path("models/tinyllamas/stories260K.gguf")) {
        remove_dir(dir);
        return;
    }
    struct out ref = reference(20);
    seed_dir(dir, (int[]){20}, 1);
    struct eng b;
    eng_max_seqs = 2;
    ck_assert(eng_open(&b, true, 0, dir));
    /* A short prompt (under two blocks: no step measures the prefill cost, so the wait is bounded
     * by KV_SLOTS_PREFETCH_WAIT_S, not by this tiny model's recompute time). */
    struct out d, w;
    add(&b, 21, 20, 100, &d);
    for (int i = 0; i < 100 && d.n_tokens < 2; i++) ck_assert_int_eq(sched_step(b.s), 0);
    ck_assert_int_ge(d.n_tokens, 2);
    ck_assert_int_eq(failpoint_configure("kv_offload.slow_read=error@4"), 0);
    add(&b, 20, N_PROMPT, N_GEN, &w);
    int during = 0; /* tokens d decoded while w waited */
    for (int i = 0; i < 100000 && !w.admitted; i++) {
        int before = d.n_tokens;
        ck_assert_int_eq(sched_step(b.s), 0);
        if (!w.admitted) during += d.n_tokens - before;
    }
    ck_assert(w.admitted);
    ck_assert_int_gt(during, 0);
    ck_assert_int_eq(failpoint_hits("kv_offload.slow_read"), 4); /* every block read, off-thread */
    failpoint_configure(NULL);
    for (int i = 0; i < 10000 && !sched_idle(b.s); i++) ck_assert_int_eq(sched_step(b.s), 0);
    ck_assert(sched_idle(b.s));
    ck_assert_int_eq(w.n_cached, 4 * BS);
    expect_same(&w, &ref);
    ck_assert_int_eq(d.finish, SCHED_FINISH_LENGTH);
    struct sched_stats st;
    sched_stats(b.s, &st);
    ck_assert_uint_eq(st.prefix_hits_disk, 4 * BS);
    ck_assert_uint_eq(st.prefetch_waits, 1);
    struct kv_offload_stats os;
    kv_offload_stats(b.store, &os);
    ck_assert_uint_eq(os.hits[KV_OFFLOAD_DISK], 4);
    ck_assert_uint_eq(os.prefetched, 4);
    ck_assert_uint_eq(os.staged_bytes, 0);
    eng_close(&b);
    eng_max_seqs = 1;
    eng_blocks = 8;
    remove_dir(dir);
}
END_TEST

/* A disk slower than recompute: the read-ahead's wait is bounded by the recompute time of the
 * blocks (about a millisecond here, against 200 ms per slow read), so the prompt is recomputed,
 * with the same tokens; the time waited then tells the cost model the disk does not pay, and the
 * next prompt on tier 3 starts no read at all. */
START_TEST(test_kv_offload_sched_slow_disk_is_recomputed)
{
    char *dir = make_dir();
    if (!test_shared_path("models/tinyllamas/stories260K.gguf")) {
        remove_dir(dir);
        return;
    }
    struct out ref = reference(23);
    seed_dir(dir, (int[]){23, 24}, 2);
    struct eng b;
    ck_assert(eng_open(&b, true, 0, dir));
    run(&b, 25); /* a prefill-sized step: the prefill cost is measured */
    ck_assert_int_eq(failpoint_configure("kv_offload.slow_read=error"), 0);
    struct out o = run(&b, 23);
    ck_assert_int_eq(o.n_cached, 0);
    expect_same(&o, &ref);
    struct sched_stats st;
    sched_stats(b.s, &st);
    ck_assert_uint_eq(st.prefetch_waits, 1);
    ck_assert_uint_eq(st.prefix_hits_disk, 0);
    struct kv_offload_stats os;
    kv_offload_stats(b.store, &os);
    ck_assert_uint_eq(os.prefetches, 1);
    struct out o2 = run(&b, 24);
    ck_assert_int_eq(o2.n_cached, 0);
    kv_offload_stats(b.store, &os);
    ck_assert_uint_eq(os.prefetches, 1); /* the cost model skipped tier 3 */
    ck_assert_uint_eq(os.staged_bytes, 0);
    failpoint_configure(NULL);
    eng_close(&b);
    eng_blocks = 8;
    remove_dir(dir);
}
END_TEST

/* A waiting request cancelled while its read-ahead is in flight ends at the next step, and one
 * stopped by sched_stop_all (a drain's end) too; their staged blocks are freed, the pool's blocks
 * all come back (eng_close checks). */
START_TEST(test_kv_offload_sched_cancel_while_prefetching)
{
    char *dir = make_dir();
    if (!test_shared_path("models/tinyllamas/stories260K.gguf")) {
        remove_dir(dir);
        return;
    }
    seed_dir(dir, (int[]){26}, 1);
    struct eng b;
    ck_assert(eng_open(&b, true, 0, dir));
    ck_assert_int_eq(failpoint_configure("kv_offload.slow_read=error@2"), 0);
    struct out w;
    int32_t ids[N_PROMPT];
    make_prompt(26, ids);
    w = (struct out){0};
    struct sched_request q = {
        .prompt = ids, .n_prompt = N_PROMPT, .max_tokens = N_GEN, .ignore_eos = true, .ud = &w};
    sampler_params_default(&q.sampling);
    struct sched_seq *seq;
    ck_assert_int_eq(sched_add(b.s, &q, &seq), 0);
    ck_assert_int_eq(sched_step(b.s), 0); /* starts the read-ahead; waits a little for it */
    ck_assert(!w.admitted);
    sched_cancel(b.s, seq, SCHED_FINISH_ABORT);
    ck_assert_int_eq(sched_step(b.s), 0);
    ck_assert_int_eq(w.finish, SCHED_FINISH_ABORT);
    ck_assert(sched_idle(b.s));
    struct out v;
    add(&b, 26, N_PROMPT, N_GEN, &v);
    ck_assert_int_eq(sched_step(b.s), 0);
    ck_assert(!v.admitted);
    sched_stop_all(b.s, SCHED_FINISH_LENGTH);
    ck_assert_int_eq(v.finish, SCHED_FINISH_LENGTH);
    ck_assert(sched_idle(b.s));
    kv_offload_flush(b.store);
    failpoint_configure(NULL);
    struct kv_offload_stats os;
    kv_offload_stats(b.store, &os);
    ck_assert_uint_eq(os.prefetches, 2);
    ck_assert_uint_eq(os.staged_bytes, 0);
    ck_assert_uint_eq(os.hits[KV_OFFLOAD_DISK], 0);
    eng_close(&b);
    eng_blocks = 8;
    remove_dir(dir);
}
END_TEST

Suite *kv_offload_sched_suite(void);
Suite *kv_offload_sched_suite(void)
{
    log_setup("test", LOG_ERROR, LOG_FORMAT_TEXT);
    Suite *s = suite_create("kv_offload_sched");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_kv_offload_sched_tier1_and_tier2_equal_recompute);
    tcase_add_test(tc, test_kv_offload_sched_tier3_shared_between_engines);
    tcase_add_test(tc, test_kv_offload_sched_corrupt_tier3_is_recomputed);
    tcase_add_test(tc, test_kv_offload_sched_preempted_blocks_parked_in_tier2);
    tcase_add_test(tc, test_kv_offload_sched_preempted_with_tier3_only);
    tcase_add_test(tc, test_kv_offload_sched_tier3_prefetch_while_another_decodes);
    tcase_add_test(tc, test_kv_offload_sched_slow_disk_is_recomputed);
    tcase_add_test(tc, test_kv_offload_sched_cancel_while_prefetching);
    suite_add_tcase(s, tc);
    return s;
}
