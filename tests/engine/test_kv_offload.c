/* The offload store (engine/kv/kv_offload.h) on its own: tier 2 keeps records under its byte
 * budget (LRU) through churn; tier 3 writes whole files atomically, finds files another store
 * wrote in the same directory, detects corrupted and truncated files (removed, never served),
 * ignores a crashed writer's temporary file, keeps its byte budget, and degrades to reading only on
 * a read-only directory. Records are synthetic; the model-level round trip is in
 * test_kv_offload_sched.c. */
#include "engine/kv/kv_offload.h"

#include "common/err.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "tests/testutil.h"

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BS      4
#define PAYLOAD 256
#define NS      UINT64_C(0x0123456789abcdef)

static size_t rec_bytes(void)
{
    return kv_block_record_bytes(BS, PAYLOAD);
}

/* Block i: tokens and payload derived from i, parent a root. */
static void block_meta(int i, int32_t *tokens, struct kv_block_meta *m)
{
    for (int t = 0; t < BS; t++) tokens[t] = i * 10 + t;
    *m = (struct kv_block_meta){NS, (uint64_t)(1000 + i), UINT64_C(1) << 63, BS, tokens, PAYLOAD};
}

/* Offers block i; durable: known to be reused (tier 3 takes it on its first offer). 1 when a tier
 * took the record. */
static int offer_as(struct kv_offload *o, int i, bool durable)
{
    int32_t tokens[BS];
    struct kv_block_meta m;
    block_meta(i, tokens, &m);
    uint8_t *p = kv_offload_job_new(o, &m, durable);
    if (!p) return 0;
    for (int b = 0; b < PAYLOAD; b++) p[b] = (uint8_t)(i + b);
    kv_offload_job_submit(o, p);
    return 1;
}

static void offer(struct kv_offload *o, int i)
{
    (void)offer_as(o, i, true);
}

/* 1 when block i loads back now with its payload (tier in *tier), 0 on a miss; no read ahead. */
static int load_now(struct kv_offload *o, int i, enum kv_offload_tier *tier)
{
    int32_t tokens[BS];
    struct kv_block_meta m;
    uint8_t buf[PAYLOAD];
    block_meta(i, tokens, &m);
    enum kv_offload_tier t;
    if (kv_offload_load(o, &m, buf, &t) != 0) return 0;
    for (int b = 0; b < PAYLOAD; b++) ck_assert_uint_eq(buf[b], (uint8_t)(i + b));
    if (tier) *tier = t;
    return 1;
}

/* Reads the chain of blocks ids[0..n) ahead and waits for the reads; the prefetch (0: nothing was
 * to be read). */
static uint64_t prefetch(struct kv_offload *o, const int *ids, int n)
{
    int32_t tokens[16][BS];
    struct kv_block_meta m[16];
    ck_assert_int_le(n, 16);
    for (int k = 0; k < n; k++) block_meta(ids[k], tokens[k], &m[k]);
    uint64_t id = 12345;
    ck_assert_int_eq(kv_offload_prefetch(o, m, n, &id), 0);
    if (id) ck_assert(kv_offload_prefetch_wait(o, id, 30.0));
    ck_assert(!kv_offload_prefetch_pending(o, id, NULL));
    return id;
}

/* load_now after a prefetch of the block alone (what the scheduler does before admission). */
static int load(struct kv_offload *o, int i, enum kv_offload_tier *tier)
{
    uint64_t id = prefetch(o, &i, 1);
    int hit = load_now(o, i, tier);
    kv_offload_prefetch_end(o, id);
    return hit;
}

static char *make_dir(void)
{
    char *d = strdup("/tmp/cinfer-kvoff-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static void remove_dir(char *d)
{
    DIR *dd = opendir(d);
    if (dd) {
        for (struct dirent *de; (de = readdir(dd));) {
            if (de->d_name[0] == '.' && (!de->d_name[1] || de->d_name[1] == '.')) continue;
            char p[512];
            snprintf(p, sizeof(p), "%s/%s", d, de->d_name);
            unlink(p);
        }
        closedir(dd);
    }
    chmod(d, 0700);
    rmdir(d);
    free(d);
}

static void block_path(const char *dir, int i, char *out, size_t n)
{
    snprintf(out, n, "%s/%016" PRIx64 "-%016" PRIx64 ".kvb", dir, NS, (uint64_t)(1000 + i));
}

static int count_files(const char *dir)
{
    int n = 0;
    DIR *dd = opendir(dir);
    for (struct dirent *de; dd && (de = readdir(dd));)
        if (strstr(de->d_name, ".kvb") && de->d_name[0] != '.') n++;
    if (dd) closedir(dd);
    return n;
}

static struct kv_offload *open_store(uint64_t host, const char *dir, uint64_t dir_bytes)
{
    struct kv_offload_config c = {NS, BS, PAYLOAD, host, dir, dir_bytes, 0, NULL, NULL, 0};
    struct kv_offload *o = NULL;
    ck_assert_int_eq(kv_offload_new(&c, &o), 0);
    return o;
}

START_TEST(test_kv_offload_bad_config)
{
    struct kv_offload *o = NULL;
    struct kv_offload_config c = {NS, BS, PAYLOAD, 0, NULL, 0, 0, NULL, NULL, 0};
    ck_assert_int_eq(kv_offload_new(&c, &o), ERR_INVAL); /* no tier */
    c = (struct kv_offload_config){0, BS, PAYLOAD, 4096, NULL, 0, 0, NULL, NULL, 0};
    ck_assert_int_eq(kv_offload_new(&c, &o), ERR_INVAL); /* no namespace */
    c = (struct kv_offload_config){NS, BS, PAYLOAD, 0, "/tmp", 0, 0, NULL, NULL, 0};
    ck_assert_int_eq(kv_offload_new(&c, &o), ERR_INVAL); /* a directory without a budget */
    ck_assert_ptr_null(o);
}
END_TEST

/* One long prompt evicts a context's blocks in one step: the default queue holds a burst of
 * them while the thread writes to the directory (64 records dropped most of a 4k-token prompt's
 * 256 blocks, and a chain is only usable up to its first gap). */
START_TEST(test_kv_offload_default_queue_takes_a_burst)
{
    char *dir = make_dir();
    struct kv_offload *o = open_store(0, dir, UINT64_C(1) << 30);
    int taken = 0;
    for (int i = 0; i < 1000; i++) taken += offer_as(o, i, true);
    kv_offload_flush(o);
    struct kv_offload_stats st;
    kv_offload_stats(o, &st);
    ck_assert_int_eq(taken, 1000);
    ck_assert_uint_eq(st.dropped, 0);
    ck_assert_uint_eq(st.stored[KV_OFFLOAD_DISK], 1000);
    ck_assert_int_eq(count_files(dir), 1000);
    for (int i = 0; i < 1000; i += 97) ck_assert_int_eq(load(o, i, NULL), 1);
    kv_offload_free(o);
    remove_dir(dir);
}
END_TEST

START_TEST(test_kv_offload_host_lru_budget_under_churn)
{
    uint64_t budget = 8 * rec_bytes();
    struct kv_offload *o = open_store(budget, NULL, 0);
    struct kv_offload_stats st;
    for (int i = 0; i < 200; i++) {
        offer(o, i);
        if (i % 7 == 0) {
            kv_offload_flush(o);
            kv_offload_stats(o, &st);
            ck_assert_uint_le(st.bytes[KV_OFFLOAD_HOST], budget);
            (void)load(o, i, NULL); /* keep the newest hot */
        }
    }
    kv_offload_flush(o);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_HOST], 8);
    ck_assert_uint_eq(st.bytes[KV_OFFLOAD_HOST], budget);
    ck_assert_uint_eq(st.stored[KV_OFFLOAD_HOST], 200 - st.dropped);
    ck_assert_uint_eq(st.evicted[KV_OFFLOAD_HOST], st.stored[KV_OFFLOAD_HOST] - 8);
    enum kv_offload_tier t = KV_OFFLOAD_DISK;
    ck_assert_int_eq(load(o, 199, &t), 1); /* the most recent are kept, the oldest gone */
    ck_assert_int_eq(t, KV_OFFLOAD_HOST);
    ck_assert_int_eq(load(o, 0, NULL), 0);
    /* A block already held is not offered again. */
    int32_t tokens[BS];
    struct kv_block_meta m;
    block_meta(199, tokens, &m);
    ck_assert_ptr_null(kv_offload_job_new(o, &m, true));
    /* Another block under a stored block's hash (a collision) is a miss. */
    tokens[0]++;
    uint8_t buf[PAYLOAD];
    enum kv_offload_tier tt;
    ck_assert_int_eq(kv_offload_load(o, &m, buf, &tt), ERR_NOT_FOUND);
    kv_offload_free(o);
}
END_TEST

START_TEST(test_kv_offload_disk_shared_between_stores)
{
    char *dir = make_dir();
    struct kv_offload *a = open_store(0, dir, 1 << 20);
    for (int i = 0; i < 5; i++) offer(a, i);
    kv_offload_flush(a);
    ck_assert_int_eq(count_files(dir), 5);
    /* A second engine on the same directory finds the blocks, at start-up and written later. */
    struct kv_offload *b = open_store(4 * rec_bytes(), dir, 1 << 20);
    struct kv_offload_stats st;
    kv_offload_stats(b, &st);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_DISK], 5);
    offer(a, 7);
    kv_offload_flush(a);
    kv_offload_flush(b); /* b's index catches up with the directory (its thread: once a second) */
    enum kv_offload_tier t = KV_OFFLOAD_HOST;
    ck_assert_int_eq(load(b, 7, &t), 1);
    ck_assert_int_eq(t, KV_OFFLOAD_DISK);
    ck_assert_int_eq(load(b, 7, &t), 1); /* promoted to tier 2 */
    ck_assert_int_eq(t, KV_OFFLOAD_HOST);
    ck_assert_int_eq(load(b, 3, &t), 1);
    /* Both writing the same block is harmless: one whole file. */
    offer(a, 9);
    offer(b, 9);
    kv_offload_flush(a);
    kv_offload_flush(b);
    ck_assert_int_eq(load(a, 9, NULL), 1);
    ck_assert_int_eq(count_files(dir), 7);
    kv_offload_stats(b, &st);
    ck_assert_uint_eq(st.hits[KV_OFFLOAD_DISK], 2);
    ck_assert_uint_eq(st.corrupt, 0);
    kv_offload_free(a);
    kv_offload_free(b);
    remove_dir(dir);
}
END_TEST

/* Tier 3's gate: a block offered once (not known to be reused) costs no file, and without tier 2
 * not even a copy; offered again, or loaded back from tier 2, it is written. */
START_TEST(test_kv_offload_disk_gate_writes_blocks_seen_twice)
{
    char *dir = make_dir();
    struct kv_offload *o = open_store(0, dir, 1 << 20);
    ck_assert_int_eq(offer_as(o, 1, false), 0); /* declined before any copy */
    kv_offload_flush(o);
    ck_assert_int_eq(count_files(dir), 0);
    ck_assert_int_eq(load(o, 1, NULL), 0);
    ck_assert_int_eq(offer_as(o, 1, false), 1); /* seen twice */
    kv_offload_flush(o);
    ck_assert_int_eq(count_files(dir), 1);
    ck_assert_int_eq(load(o, 1, NULL), 1);
    kv_offload_free(o);
    struct kv_offload_stats st;
    struct kv_offload *h = open_store(4 * rec_bytes(), dir, 1 << 20);
    ck_assert_int_eq(offer_as(h, 2, false), 1); /* tier 2 takes it, tier 3 not yet */
    kv_offload_flush(h);
    kv_offload_stats(h, &st);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_HOST], 1);
    ck_assert_uint_eq(st.stored[KV_OFFLOAD_DISK], 0);
    ck_assert_int_eq(count_files(dir), 1);
    enum kv_offload_tier t = KV_OFFLOAD_DISK;
    ck_assert_int_eq(load(h, 2, &t), 1); /* a tier-2 hit: reused, so written through */
    ck_assert_int_eq(t, KV_OFFLOAD_HOST);
    kv_offload_flush(h);
    kv_offload_stats(h, &st);
    ck_assert_uint_eq(st.stored[KV_OFFLOAD_DISK], 1);
    ck_assert_int_eq(count_files(dir), 2);
    kv_offload_free(h);
    remove_dir(dir);
}
END_TEST

/* Lookups consult the index; the offload thread relists a directory another store changed:
 * files it wrote are found, files it removed are forgotten. */
START_TEST(test_kv_offload_disk_index_follows_a_shared_directory)
{
    char *dir = make_dir();
    struct kv_offload *a = open_store(0, dir, 1 << 20);
    struct kv_offload *b = open_store(0, dir, 1 << 20);
    for (int i = 0; i < 4; i++) offer(a, i);
    kv_offload_flush(a);
    kv_offload_flush(b);
    struct kv_offload_stats st;
    kv_offload_stats(b, &st);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_DISK], 4);
    ck_assert_uint_eq(st.bytes[KV_OFFLOAD_DISK], 4 * rec_bytes());
    char p[512];
    block_path(dir, 2, p, sizeof(p));
    ck_assert_int_eq(unlink(p), 0); /* as a's budget would */
    kv_offload_flush(b);
    kv_offload_stats(b, &st);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_DISK], 3);
    ck_assert_int_eq(load(b, 2, NULL), 0);
    ck_assert_int_eq(load(b, 3, NULL), 1);
    kv_offload_stats(b, &st);
    ck_assert_uint_eq(st.corrupt, 0);
    kv_offload_free(a);
    kv_offload_free(b);
    remove_dir(dir);
}
END_TEST

START_TEST(test_kv_offload_disk_corrupt_and_truncated_files_are_misses)
{
    char *dir = make_dir();
    struct kv_offload *a = open_store(0, dir, 1 << 20);
    for (int i = 0; i < 3; i++) offer(a, i);
    kv_offload_flush(a);
    char p[512];
    /* Block 0: one payload byte flipped. */
    block_path(dir, 0, p, sizeof(p));
    int fd = open(p, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t c;
    off_t at = (off_t)rec_bytes() - 10;
    ck_assert_int_eq(pread(fd, &c, 1, at), 1);
    c ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &c, 1, at), 1);
    close(fd);
    /* Block 1: truncated. */
    block_path(dir, 1, p, sizeof(p));
    ck_assert_int_eq(truncate(p, (off_t)rec_bytes() / 2), 0);
    /* A crashed writer's temporary file is never read as a block. */
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s/.tmp-1-1.kvb", dir);
    FILE *f = fopen(tmp, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("partial", f);
    fclose(f);
    struct kv_offload *b = open_store(0, dir, 1 << 20);
    ck_assert_int_eq(load(b, 0, NULL), 0);
    ck_assert_int_eq(load(b, 1, NULL), 0);
    ck_assert_int_eq(load(b, 2, NULL), 1);
    struct kv_offload_stats st;
    kv_offload_stats(b, &st);
    ck_assert_uint_eq(st.corrupt, 2);
    for (int i = 0; i < 2; i++) {
        block_path(dir, i, p, sizeof(p));
        ck_assert_int_ne(access(p, F_OK), 0); /* removed */
    }
    /* The writer forgets its files that are gone. */
    ck_assert_int_eq(load(a, 1, NULL), 0);
    kv_offload_stats(a, &st);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_DISK], 2);
    /* Rewritten after the damage (a miss first: the writer learns its file is gone), it is
     * served again. */
    ck_assert_int_eq(load(a, 0, NULL), 0);
    offer(a, 0);
    kv_offload_flush(a);
    kv_offload_flush(b); /* b relists the directory */
    ck_assert_int_eq(load(b, 0, NULL), 1);
    kv_offload_free(a);
    kv_offload_free(b);
    remove_dir(dir);
}
END_TEST

/* What an observer is told, replayed into one held set per tier (as a router's index would be). */
struct seen {
    pthread_mutex_t mu;
    uint64_t held[KV_OFFLOAD_N_TIERS][64];
    int n[KV_OFFLOAD_N_TIERS];
    int events, bad; /* bad: a store of a held block or a drop of one not held */
};

static void observed(void *ctx, enum kv_offload_tier t, bool stored, uint64_t hash)
{
    struct seen *sn = ctx;
    pthread_mutex_lock(&sn->mu);
    sn->events++;
    int at = -1;
    for (int i = 0; i < sn->n[t]; i++)
        if (sn->held[t][i] == hash) at = i;
    if (stored && at < 0 && sn->n[t] < 64)
        sn->held[t][sn->n[t]++] = hash;
    else if (!stored && at >= 0)
        sn->held[t][at] = sn->held[t][--sn->n[t]];
    else
        sn->bad++;
    pthread_mutex_unlock(&sn->mu);
}

static bool seen_has(struct seen *sn, enum kv_offload_tier t, int block)
{
    pthread_mutex_lock(&sn->mu);
    bool has = false;
    for (int i = 0; i < sn->n[t]; i++) has |= sn->held[t][i] == (uint64_t)(1000 + block);
    pthread_mutex_unlock(&sn->mu);
    return has;
}

static struct kv_offload *open_observed(uint64_t host, const char *dir, struct seen *sn)
{
    struct kv_offload_config c = {NS, BS,       PAYLOAD, host, dir, dir ? 1 << 20 : 0,
                                  0,  observed, sn,      0};
    struct kv_offload *o = NULL;
    ck_assert_int_eq(kv_offload_new(&c, &o), 0);
    return o;
}

/* The observer sees every change of both tiers (what cinfer-engine turns into block events for
 * routers): replayed, its sets are exactly what the store holds, through tier-2 evictions, tier-3
 * writes, files found at start-up, a damaged file removed, and a tier-3 hit kept in tier 2. */
START_TEST(test_kv_offload_observer_follows_both_tiers)
{
    char *dir = make_dir();
    struct seen a = {.mu = PTHREAD_MUTEX_INITIALIZER}, b = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct kv_offload *oa = open_observed(2 * rec_bytes(), dir, &a);
    for (int i = 0; i < 4; i++) offer(oa, i); /* durable: tier 3 too */
    kv_offload_flush(oa);
    struct kv_offload_stats st;
    kv_offload_stats(oa, &st);
    ck_assert_int_eq(a.n[KV_OFFLOAD_HOST], (int)st.blocks[KV_OFFLOAD_HOST]);
    ck_assert_int_eq(a.n[KV_OFFLOAD_HOST], 2);
    ck_assert(seen_has(&a, KV_OFFLOAD_HOST, 2) && seen_has(&a, KV_OFFLOAD_HOST, 3));
    ck_assert_int_eq(a.n[KV_OFFLOAD_DISK], 4);
    ck_assert_int_eq(a.bad, 0);
    /* Another store on the directory reports the files it finds. */
    struct kv_offload *ob = open_observed(0, dir, &b);
    ck_assert_int_eq(b.n[KV_OFFLOAD_DISK], 4);
    for (int i = 0; i < 4; i++) ck_assert(seen_has(&b, KV_OFFLOAD_DISK, i));
    /* Block 0 damaged: b's read removes it and says so; a learns at its next miss. */
    char p[512];
    block_path(dir, 0, p, sizeof(p));
    ck_assert_int_eq(truncate(p, 10), 0);
    ck_assert_int_eq(load(ob, 0, NULL), 0);
    ck_assert(!seen_has(&b, KV_OFFLOAD_DISK, 0));
    ck_assert_int_eq(load(oa, 0, NULL), 0);
    ck_assert(!seen_has(&a, KV_OFFLOAD_DISK, 0));
    /* A tier-3 hit in a is kept in tier 2, which drops its least recent record for it. */
    enum kv_offload_tier t;
    ck_assert_int_eq(load(oa, 1, &t), 1);
    ck_assert_int_eq(t, KV_OFFLOAD_DISK);
    ck_assert(seen_has(&a, KV_OFFLOAD_HOST, 1));
    kv_offload_stats(oa, &st);
    ck_assert_int_eq(a.n[KV_OFFLOAD_HOST], (int)st.blocks[KV_OFFLOAD_HOST]);
    ck_assert_int_eq(a.n[KV_OFFLOAD_DISK], (int)st.blocks[KV_OFFLOAD_DISK]);
    ck_assert_int_eq(a.bad + b.bad, 0);
    kv_offload_free(oa);
    kv_offload_free(ob);
    remove_dir(dir);
}
END_TEST

START_TEST(test_kv_offload_disk_budget_under_churn)
{
    char *dir = make_dir();
    uint64_t budget = 6 * rec_bytes() + rec_bytes() / 2;
    struct kv_offload *o = open_store(2 * rec_bytes(), dir, budget);
    struct kv_offload_stats st;
    for (int i = 0; i < 120; i++) {
        offer(o, i);
        if (i % 5 == 0) {
            kv_offload_flush(o);
            kv_offload_stats(o, &st);
            ck_assert_uint_le(st.bytes[KV_OFFLOAD_DISK], budget);
            ck_assert_int_le(count_files(dir), 6);
            ck_assert_uint_le(st.bytes[KV_OFFLOAD_HOST], 2 * rec_bytes());
        }
    }
    kv_offload_flush(o);
    kv_offload_stats(o, &st);
    ck_assert_int_eq(count_files(dir), 6);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_DISK], 6);
    ck_assert_uint_eq(st.evicted[KV_OFFLOAD_DISK], st.stored[KV_OFFLOAD_DISK] - 6);
    kv_offload_free(o);
    /* A restart indexes what is there and keeps to a smaller budget. */
    o = open_store(0, dir, 3 * rec_bytes());
    ck_assert_int_eq(count_files(dir), 3);
    kv_offload_free(o);
    remove_dir(dir);
}
END_TEST

START_TEST(test_kv_offload_read_only_dir_degrades)
{
    if (geteuid() == 0) {
        test_skip("running as root: permissions do not make a directory read only");
        return;
    }
    char *dir = make_dir();
    struct kv_offload *a = open_store(0, dir, 1 << 20);
    offer(a, 1);
    kv_offload_flush(a);
    kv_offload_free(a);
    ck_assert_int_eq(chmod(dir, 0500), 0);
    struct kv_offload *b = open_store(4 * rec_bytes(), dir, 1 << 20);
    struct kv_offload_stats st;
    kv_offload_stats(b, &st);
    ck_assert(!st.disk_writable);
    ck_assert_int_eq(load(b, 1, NULL), 1); /* still read */
    offer(b, 2);                           /* kept in tier 2 only, no error */
    kv_offload_flush(b);
    ck_assert_int_eq(load(b, 2, NULL), 1);
    ck_assert_int_eq(count_files(dir), 1);
    kv_offload_free(b);
    /* A directory that cannot be created turns tier 3 off; tier 2 still works. */
    char sub[512];
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    struct kv_offload *c = open_store(4 * rec_bytes(), sub, 1 << 20);
    offer(c, 3);
    kv_offload_flush(c);
    ck_assert_int_eq(load(c, 3, NULL), 1);
    kv_offload_free(c);
    remove_dir(dir);
}
END_TEST

START_TEST(test_kv_offload_full_or_read_only_disk_degrades)
{
    char *dir = make_dir();
    struct kv_offload *o = open_store(8 * rec_bytes(), dir, 1 << 20);
    struct kv_offload_stats st;
    ck_assert_int_eq(failpoint_configure("kv_offload.enospc=error"), 0);
    offer(o, 1);
    kv_offload_flush(o);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.write_errors, 1);
    ck_assert(!st.disk_writable);          /* paused for a while */
    ck_assert_int_eq(load(o, 1, NULL), 1); /* the block is still in tier 2 */
    ck_assert_int_eq(count_files(dir), 0); /* and no partial file is left */
    offer(o, 2);                           /* no further write is tried while paused */
    kv_offload_flush(o);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.write_errors, 1);
    kv_offload_free(o);
    ck_assert_int_eq(failpoint_configure("kv_offload.erofs=error"), 0);
    o = open_store(0, dir, 1 << 20);
    offer(o, 3);
    kv_offload_flush(o);
    offer(o, 4);
    kv_offload_flush(o);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.write_errors, 1); /* read only from then on */
    ck_assert(!st.disk_writable);
    ck_assert_int_eq(load(o, 3, NULL), 0); /* a miss, never an error */
    failpoint_configure(NULL);
    kv_offload_free(o);
    remove_dir(dir);
}
END_TEST

/* A writer killed (SIGKILL) in the middle of its writes leaves only whole, valid blocks under
 * block names: every file a new store indexes loads back, none fails its check. */
START_TEST(test_kv_offload_sigkill_during_writes_leaves_no_bad_block)
{
    char *dir = make_dir();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct kv_offload_config c = {NS, BS, PAYLOAD, 0, dir, 1 << 30, 0, NULL, NULL, 0};
        struct kv_offload *o = NULL;
        if (kv_offload_new(&c, &o) != 0) _exit(1);
        for (int i = 0;; i = (i + 1) % 100000) offer(o, i); /* until killed */
    }
    /* Let it write for a while, then kill it wherever it is. */
    for (int tries = 0; tries < 200 && count_files(dir) < 50; tries++) usleep(10000);
    usleep(20000);
    kill(pid, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status));
    int files = count_files(dir);
    ck_assert_int_gt(files, 0);
    struct kv_offload *o = open_store(0, dir, 1 << 30);
    struct kv_offload_stats st;
    kv_offload_stats(o, &st);
    ck_assert_int_eq((int)st.blocks[KV_OFFLOAD_DISK], files);
    /* Every file under a block name loads back as its block. */
    int loaded = 0;
    DIR *dd = opendir(dir);
    ck_assert_ptr_nonnull(dd);
    for (struct dirent *de; (de = readdir(dd));) {
        const char *dash = strchr(de->d_name, '-');
        if (de->d_name[0] == '.' || !dash || !strstr(de->d_name, ".kvb")) continue;
        unsigned long long h = strtoull(dash + 1, NULL, 16);
        loaded += load(o, (int)(h - 1000), NULL);
    }
    closedir(dd);
    ck_assert_int_eq(loaded, files);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.corrupt, 0);
    kv_offload_free(o);
    remove_dir(dir);
}
END_TEST

/* A chain of tier-3 blocks read ahead, without tier 2: staged (verified) until loaded with a
 * memcpy, counted as tier-3 hits; the chain ends at the first block no tier holds. Without a
 * prefetch, a block only tier 3 holds is a miss: kv_offload_load reads no file (the slow-read
 * failpoint counts every read of one, and counts none). */
START_TEST(test_kv_offload_prefetch_stages_tier3_blocks)
{
    char *dir = make_dir();
    struct kv_offload *o = open_store(0, dir, 1 << 20);
    for (int i = 0; i < 4; i++) offer(o, i);
    kv_offload_flush(o);
    ck_assert_int_eq(failpoint_configure("kv_offload.slow_read=error@1000000"), 0);
    enum kv_offload_tier t;
    ck_assert_int_eq(load_now(o, 0, &t), 0);
    ck_assert_int_eq(failpoint_hits("kv_offload.slow_read"), 0); /* no file was read */
    struct kv_offload_stats st;
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_DISK], 4); /* still known: the next prefetch reads it */
    ck_assert_uint_eq(st.hits[KV_OFFLOAD_DISK], 0);
    int chain[] = {0, 1, 2, 3, 77, 2};
    uint64_t id = prefetch(o, chain, 6);
    ck_assert_uint_ne(id, 0);
    ck_assert_int_eq(failpoint_hits("kv_offload.slow_read"), 4); /* 77: no tier, chain ends */
    failpoint_configure(NULL);
    struct kv_offload_prefetch_info info;
    ck_assert(!kv_offload_prefetch_pending(o, id, &info));
    ck_assert_int_eq(info.blocks, 4);
    ck_assert_int_eq(info.reads, 4);
    ck_assert_int_eq(info.staged, 4);
    ck_assert(info.read_s > 0);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.prefetches, 1);
    ck_assert_uint_eq(st.prefetched, 4);
    ck_assert_uint_eq(st.staged_bytes, 4 * rec_bytes());
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(load_now(o, i, &t), 1);
        ck_assert_int_eq(t, KV_OFFLOAD_DISK);
    }
    ck_assert_int_eq(load_now(o, 2, &t), 0); /* no tier 2: a staged record is loaded once */
    kv_offload_prefetch_end(o, id);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.hits[KV_OFFLOAD_DISK], 4);
    ck_assert_uint_eq(st.staged_bytes, 0);
    ck_assert_uint_eq(st.prefetch_unused, 0);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_HOST], 0);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_DISK], 4);
    /* Metas of another layout are refused. */
    int32_t tokens[BS];
    struct kv_block_meta m;
    block_meta(0, tokens, &m);
    m.ns++;
    ck_assert_int_eq(kv_offload_prefetch(o, &m, 1, &id), ERR_INVAL);
    kv_offload_free(o);
    remove_dir(dir);
}
END_TEST

/* With tier 2: blocks tier 2 holds are not read again (a chain mixing both reads only the
 * others), and a staged record loaded moves into tier 2 (the next load is a tier-2 hit). */
START_TEST(test_kv_offload_prefetch_with_tier2)
{
    char *dir = make_dir();
    struct kv_offload *a = open_store(0, dir, 1 << 20);
    for (int i = 0; i < 4; i++) offer(a, i);
    kv_offload_flush(a);
    kv_offload_free(a);
    struct kv_offload *o = open_store(8 * rec_bytes(), dir, 1 << 20); /* tier 2 cold */
    enum kv_offload_tier t;
    ck_assert_int_eq(load(o, 1, &t), 1);
    ck_assert_int_eq(t, KV_OFFLOAD_DISK);
    ck_assert_int_eq(load_now(o, 1, &t), 1);
    ck_assert_int_eq(t, KV_OFFLOAD_HOST); /* promoted */
    int chain[] = {0, 1, 2, 3};
    int32_t tokens[4][BS];
    struct kv_block_meta m[4];
    for (int k = 0; k < 4; k++) block_meta(chain[k], tokens[k], &m[k]);
    uint64_t id = 0;
    ck_assert_int_eq(kv_offload_prefetch(o, m, 4, &id), 0);
    ck_assert(kv_offload_prefetch_wait(o, id, 30.0));
    struct kv_offload_prefetch_info info;
    (void)kv_offload_prefetch_pending(o, id, &info);
    ck_assert_int_eq(info.blocks, 4);
    ck_assert_int_eq(info.reads, 3); /* 1 is in tier 2 */
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(load_now(o, i, &t), 1);
        ck_assert_int_eq(t, i == 1 ? KV_OFFLOAD_HOST : KV_OFFLOAD_DISK);
    }
    kv_offload_prefetch_end(o, id);
    /* All in tier 2 now: nothing to read. */
    ck_assert_int_eq(kv_offload_prefetch(o, m, 4, &id), 0);
    ck_assert_uint_eq(id, 0);
    struct kv_offload_stats st;
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_HOST], 4);
    ck_assert_uint_eq(st.hits[KV_OFFLOAD_DISK], 4);
    ck_assert_uint_eq(st.hits[KV_OFFLOAD_HOST], 2);
    ck_assert_uint_eq(st.staged_bytes, 0);
    kv_offload_free(o);
    remove_dir(dir);
}
END_TEST

/* A damaged file met by a prefetch: removed, counted as corrupt, a miss, and the chain ends there
 * (the blocks after it are not read: they could not be attached). */
START_TEST(test_kv_offload_prefetch_corrupt_file_is_a_miss)
{
    char *dir = make_dir();
    struct kv_offload *o = open_store(0, dir, 1 << 20);
    for (int i = 0; i < 3; i++) offer(o, i);
    kv_offload_flush(o);
    char p[512];
    block_path(dir, 1, p, sizeof(p));
    int fd = open(p, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t c;
    off_t at = (off_t)rec_bytes() - 3;
    ck_assert_int_eq(pread(fd, &c, 1, at), 1);
    c ^= 1;
    ck_assert_int_eq(pwrite(fd, &c, 1, at), 1);
    close(fd);
    int chain[] = {0, 1, 2};
    uint64_t id = prefetch(o, chain, 3);
    struct kv_offload_prefetch_info info;
    (void)kv_offload_prefetch_pending(o, id, &info);
    ck_assert_int_eq(info.reads, 2);
    ck_assert_int_eq(info.staged, 1);
    ck_assert_int_eq(load_now(o, 0, NULL), 1);
    ck_assert_int_eq(load_now(o, 1, NULL), 0);
    ck_assert_int_eq(load_now(o, 2, NULL), 0);
    ck_assert_int_ne(access(p, F_OK), 0); /* removed */
    kv_offload_prefetch_end(o, id);
    struct kv_offload_stats st;
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.corrupt, 1);
    ck_assert_uint_eq(st.blocks[KV_OFFLOAD_DISK], 2);
    ck_assert_uint_eq(st.hits[KV_OFFLOAD_DISK], 1);
    kv_offload_free(o);
    remove_dir(dir);
}
END_TEST

/* Staging is bounded and owned: a prefetch stops where stage_bytes is full; one ended without
 * loads frees its records (counted unused); one ended during a read drops that read's record; one
 * never ended is freed with the store (no leak under make asan). */
START_TEST(test_kv_offload_prefetch_unused_is_freed)
{
    char *dir = make_dir();
    struct kv_offload *a = open_store(0, dir, 1 << 20);
    for (int i = 0; i < 6; i++) offer(a, i);
    kv_offload_flush(a);
    kv_offload_free(a);
    struct kv_offload_config c = {NS, BS, PAYLOAD, 0, dir, 1 << 20, 0, NULL, NULL, 3 * rec_bytes()};
    struct kv_offload *o = NULL;
    ck_assert_int_eq(kv_offload_new(&c, &o), 0);
    int chain[] = {0, 1, 2, 3, 4, 5};
    uint64_t id = prefetch(o, chain, 6);
    struct kv_offload_prefetch_info info;
    (void)kv_offload_prefetch_pending(o, id, &info);
    ck_assert_int_eq(info.staged, 3); /* the staging's bound */
    struct kv_offload_stats st;
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.staged_bytes, 3 * rec_bytes());
    ck_assert_int_eq(load_now(o, 0, NULL), 1);
    kv_offload_prefetch_end(o, id);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.prefetch_unused, 2);
    ck_assert_uint_eq(st.staged_bytes, 0);
    ck_assert(!kv_offload_prefetch_pending(o, id, &info));
    ck_assert_int_eq(info.blocks, 0); /* gone */
    kv_offload_prefetch_end(o, id);   /* twice: a no-op */
    /* Ended while the offload thread is in a (slow) read: the read's record is dropped. */
    ck_assert_int_eq(failpoint_configure("kv_offload.slow_read=error"), 0);
    int32_t tokens[BS];
    struct kv_block_meta m;
    block_meta(4, tokens, &m);
    ck_assert_int_eq(kv_offload_prefetch(o, &m, 1, &id), 0);
    ck_assert_uint_ne(id, 0);
    for (int i = 0; i < 500 && failpoint_hits("kv_offload.slow_read") < 1; i++) usleep(1000);
    kv_offload_prefetch_end(o, id);
    kv_offload_flush(o);
    failpoint_configure(NULL);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.staged_bytes, 0);
    ck_assert_int_eq(load_now(o, 4, NULL), 0);
    /* Never ended: the store frees it. */
    (void)prefetch(o, chain + 4, 2);
    kv_offload_stats(o, &st);
    ck_assert_uint_eq(st.staged_bytes, 2 * rec_bytes());
    kv_offload_free(o);
    remove_dir(dir);
}
END_TEST

Suite *kv_offload_suite(void);
Suite *kv_offload_suite(void)
{
    log_setup("test", LOG_ERROR, LOG_FORMAT_TEXT);
    Suite *s = suite_create("kv_offload");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_kv_offload_bad_config);
    tcase_add_test(tc, test_kv_offload_default_queue_takes_a_burst);
    tcase_add_test(tc, test_kv_offload_host_lru_budget_under_churn);
    tcase_add_test(tc, test_kv_offload_disk_shared_between_stores);
    tcase_add_test(tc, test_kv_offload_disk_gate_writes_blocks_seen_twice);
    tcase_add_test(tc, test_kv_offload_disk_index_follows_a_shared_directory);
    tcase_add_test(tc, test_kv_offload_disk_corrupt_and_truncated_files_are_misses);
    tcase_add_test(tc, test_kv_offload_disk_budget_under_churn);
    tcase_add_test(tc, test_kv_offload_observer_follows_both_tiers);
    tcase_add_test(tc, test_kv_offload_read_only_dir_degrades);
    tcase_add_test(tc, test_kv_offload_full_or_read_only_disk_degrades);
    tcase_add_test(tc, test_kv_offload_sigkill_during_writes_leaves_no_bad_block);
    tcase_add_test(tc, test_kv_offload_prefetch_stages_tier3_blocks);
    tcase_add_test(tc, test_kv_offload_prefetch_with_tier2);
    tcase_add_test(tc, test_kv_offload_prefetch_corrupt_file_is_a_miss);
    tcase_add_test(tc, test_kv_offload_prefetch_unused_is_freed);
    suite_add_tcase(s, tc);
    return s;
}
