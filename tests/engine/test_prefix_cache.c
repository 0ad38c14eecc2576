/* Unit tests of the block-hash prefix cache over a real kv_cache pool: chained hashes, longest-chain
 * lookup, refusal of partial blocks, duplicates, reference counts, LRU eviction, salt isolation,
 * attach round trips, stranded entries, and a randomized scheduler run that checks every hit against
 * the prefix its block was really computed on. Pure logic: no model. */
#include "engine/kv/prefix_cache.h"

#include "common/err.h"
#include "engine/kv/kv_cache.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define BS 4 /* block size of every pool here */

static struct kv_cache *make_kv(int n_blocks, int max_seqs, int max_bps)
{
    struct kv_cache_config cfg = {n_blocks, BS, max_seqs, max_bps};
    struct kv_cache *kv = NULL;
    ck_assert_int_eq(kv_cache_new(&cfg, &kv), 0);
    return kv;
}

static struct prefix_cache *make_pc(struct kv_cache *kv)
{
    struct prefix_cache *pc = NULL;
    ck_assert_int_eq(prefix_cache_new(kv, &pc), 0);
    ck_assert_int_eq(prefix_cache_size(pc), 0);
    return pc;
}

/* A sequence holding n_tokens freshly reserved slots. */
static int seq_new(struct kv_cache *kv, int n_tokens)
{
    int s;
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_open(kv, &s), 0);
    ck_assert_int_eq(kv_cache_seq_append(kv, s, n_tokens, &cp), 0);
    ck_assert_int_eq(cp.n, 0);
    return s;
}

static int32_t seq_block(const struct kv_cache *kv, int s, int i)
{
    int n;
    const int32_t *bt = kv_cache_seq_blocks(kv, s, &n);
    ck_assert_int_lt(i, n);
    return bt[i];
}

/* Offers the sequence's full blocks in order, as the scheduler does; returns the last chain hash. */
static uint64_t offer_all(struct prefix_cache *pc, struct kv_cache *kv, int s, uint64_t root,
                          const int32_t *tokens)
{
    uint64_t h = root;
    int full = kv_cache_seq_len(kv, s) / BS;
    for (int i = 0; i < full; i++)
        ck_assert_int_eq(prefix_cache_insert(pc, h, tokens + i * BS, seq_block(kv, s, i), &h), 0);
    return h;
}

START_TEST(test_prefix_cache_block_hash_chains)
{
    const int32_t a[BS] = {1, 2, 3, 4}, b[BS] = {1, 2, 3, 5}, c[BS] = {2, 1, 3, 4};
    uint64_t root = prefix_cache_root(NULL, 0);
    /* Pinned: stable across runs and builds (SHA-256("") for the root; the mixer for blocks). */
    ck_assert_uint_eq(root, UINT64_C(0xe3b0c44298fc1c14));
    ck_assert_uint_eq(prefix_cache_root("", 0), root);
    ck_assert_uint_eq(prefix_cache_root("tenant-a", 8), UINT64_C(0x80a707af7dc77ee1));
    ck_assert_uint_eq(prefix_cache_block_hash(root, a, BS), UINT64_C(0x12be3884f42f8e8f));
    ck_assert_uint_eq(prefix_cache_block_hash(root, a, BS), prefix_cache_block_hash(root, a, BS));

    uint64_t ha = prefix_cache_block_hash(root, a, BS);
    ck_assert_uint_ne(ha, prefix_cache_block_hash(root, b, BS));     /* one token */
    ck_assert_uint_ne(ha, prefix_cache_block_hash(root, c, BS));     /* order */
    ck_assert_uint_ne(ha, prefix_cache_block_hash(root ^ 1, a, BS)); /* parent */
    ck_assert_uint_ne(ha, prefix_cache_block_hash(ha, a, BS));       /* chained */
    ck_assert_uint_ne(ha, prefix_cache_block_hash(root, a, BS - 1)); /* length */
    ck_assert_uint_ne(root, prefix_cache_root("tenant-a", 8));       /* salt */
    ck_assert_uint_ne(prefix_cache_root("a", 1), prefix_cache_root("b", 1));
    ck_assert_uint_eq(prefix_cache_root("ab", 1), prefix_cache_root("a", 1)); /* len is honoured */
    /* Roots and block hashes live in disjoint halves: a block can never pose as a chain root. */
    ck_assert(root >> 63);
    ck_assert(prefix_cache_root("x", 1) >> 63);
    ck_assert(!(ha >> 63));
    const int32_t neg[BS] = {-1, INT32_MIN, INT32_MAX, 0};
    ck_assert(!(prefix_cache_block_hash(ha, neg, BS) >> 63));
}
END_TEST

START_TEST(test_prefix_cache_lookup_longest_chain)
{
    struct kv_cache *kv = make_kv(16, 4, 8);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0);
    int32_t toks[16] = {10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32, 33, 40, 41};
    int s = seq_new(kv, 14); /* 3 full blocks + 2 tokens */
    offer_all(pc, kv, s, root, toks);
    ck_assert_int_eq(prefix_cache_size(pc), 3);

    int32_t got[4];
    ck_assert_int_eq(prefix_cache_lookup(pc, root, toks, 3, got), 3);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(got[i], seq_block(kv, s, i));
    ck_assert_int_eq(prefix_cache_lookup(pc, root, toks, 2, got), 2);
    ck_assert_int_eq(prefix_cache_lookup(pc, root, toks, 0, got), 0);
    /* The fourth block was never cached: the run stops there. */
    toks[14] = 42;
    toks[15] = 43;
    ck_assert_int_eq(prefix_cache_lookup(pc, root, toks, 4, got), 3);

    /* Stops at the first miss even when later blocks are cached. */
    int32_t other[12];
    memcpy(other, toks, sizeof(other));
    other[5] = 99;
    ck_assert_int_eq(prefix_cache_lookup(pc, root, other, 3, got), 1);
    ck_assert_int_eq(got[0], seq_block(kv, s, 0));
    other[0] = 99;
    ck_assert_int_eq(prefix_cache_lookup(pc, root, other, 3, got), 0);

    kv_cache_seq_close(kv, s);
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 16);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_insert_refuses_partial_and_free_blocks)
{
    struct kv_cache *kv = make_kv(8, 2, 4);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0), h = 7;
    const int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int s = seq_new(kv, 6);
    int32_t partial = seq_block(kv, s, 1);
    ck_assert_int_eq(prefix_cache_insert(pc, root, toks + 4, partial, &h), ERR_INVAL);
    ck_assert_uint_eq(h, 7); /* untouched on error */
    ck_assert_int_eq(prefix_cache_insert(pc, root, toks, 5, &h), ERR_INVAL); /* free block */
    ck_assert_int_eq(prefix_cache_insert(pc, root, toks, -1, &h), ERR_INVAL);
    ck_assert_int_eq(prefix_cache_insert(pc, root, toks, 8, &h), ERR_INVAL);
    ck_assert_int_eq(prefix_cache_insert(pc, root, toks, INT32_MAX, &h), ERR_INVAL);
    ck_assert_int_eq(prefix_cache_size(pc), 0);
    ck_assert_int_eq(kv_cache_block_refcount(kv, partial), 1);

    /* Once the block fills it is accepted. */
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_append(kv, s, 2, &cp), 0);
    offer_all(pc, kv, s, root, toks);
    ck_assert_int_eq(prefix_cache_size(pc), 2);
    ck_assert_int_eq(kv_cache_block_refcount(kv, partial), 2);
    kv_cache_seq_close(kv, s);
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 8);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_insert_needs_a_verifiable_parent)
{
    struct kv_cache *kv = make_kv(8, 2, 4);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0), h;
    const int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8}, elsewhere[4] = {9, 9, 9, 9};
    int s = seq_new(kv, 8);
    int32_t b0 = seq_block(kv, s, 0), b1 = seq_block(kv, s, 1);
    /* Block 1 offered as if it were a first block: its sequence says otherwise. */
    ck_assert_int_eq(prefix_cache_insert(pc, root, toks + 4, b1, &h), 0);
    ck_assert_int_eq(prefix_cache_size(pc), 0);
    /* Block 1 before block 0 was offered: its parent is unknown, so it could never be found. */
    uint64_t h0 = prefix_cache_block_hash(root, toks, BS);
    ck_assert_int_eq(prefix_cache_insert(pc, h0, toks + 4, b1, &h), 0);
    ck_assert_uint_eq(h, prefix_cache_block_hash(h0, toks + 4, BS));
    ck_assert_int_eq(prefix_cache_size(pc), 0);
    /* Block 1 chained after a cached block that is not the one before it in its sequence. */
    int t = seq_new(kv, 4);
    uint64_t ht;
    ck_assert_int_eq(prefix_cache_insert(pc, root, elsewhere, seq_block(kv, t, 0), &ht), 0);
    ck_assert_int_eq(prefix_cache_size(pc), 1);
    ck_assert_int_eq(prefix_cache_insert(pc, ht, toks + 4, b1, &h), 0);
    ck_assert_int_eq(prefix_cache_size(pc), 1);
    ck_assert_int_eq(kv_cache_block_refcount(kv, b1), 1);
    /* In order, both are taken. */
    offer_all(pc, kv, s, root, toks);
    ck_assert_int_eq(prefix_cache_size(pc), 3);
    ck_assert_int_eq(kv_cache_block_refcount(kv, b0), 2);
    ck_assert_int_eq(kv_cache_block_refcount(kv, b1), 2);
    kv_cache_seq_close(kv, s);
    kv_cache_seq_close(kv, t);
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 8);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_insert_duplicate_keeps_one_ref)
{
    struct kv_cache *kv = make_kv(16, 4, 8);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0);
    const int32_t a[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const int32_t b[12] = {1, 2, 3, 4, 5, 6, 7, 8, 50, 51, 52, 53}; /* a's first two blocks */
    int sa = seq_new(kv, 12);
    uint64_t ha = offer_all(pc, kv, sa, root, a);
    ck_assert_uint_eq(offer_all(pc, kv, sa, root, a), ha); /* same blocks again: no change */
    ck_assert_int_eq(prefix_cache_size(pc), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(kv_cache_block_refcount(kv, seq_block(kv, sa, i)), 2);

    /* A second sequence computed the same first two blocks itself (no lookup): its copies are
     * not indexed, but its own third block is, chained after the cached second block. */
    int sb = seq_new(kv, 12);
    offer_all(pc, kv, sb, root, b);
    ck_assert_int_eq(prefix_cache_size(pc), 4);
    ck_assert_int_eq(kv_cache_block_refcount(kv, seq_block(kv, sb, 0)), 1);
    ck_assert_int_eq(kv_cache_block_refcount(kv, seq_block(kv, sb, 1)), 1);
    ck_assert_int_eq(kv_cache_block_refcount(kv, seq_block(kv, sb, 2)), 2);
    int32_t got[3];
    ck_assert_int_eq(prefix_cache_lookup(pc, root, b, 3, got), 3);
    ck_assert_int_eq(got[0], seq_block(kv, sa, 0));
    ck_assert_int_eq(got[1], seq_block(kv, sa, 1));
    ck_assert_int_eq(got[2], seq_block(kv, sb, 2));

    kv_cache_seq_close(kv, sa);
    kv_cache_seq_close(kv, sb);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 16 - 4);
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 16);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_lookup_other_tokens_miss)
{
    struct kv_cache *kv = make_kv(8, 2, 4);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0);
    const int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int s = seq_new(kv, 8);
    offer_all(pc, kv, s, root, a);
    int32_t got[2];
    for (int pos = 0; pos < 8; pos++) {
        int32_t t[8];
        memcpy(t, a, sizeof(t));
        t[pos] += 1000;
        ck_assert_int_eq(prefix_cache_lookup(pc, root, t, 2, got), pos / BS);
    }
    kv_cache_seq_close(kv, s);
    prefix_cache_free(pc);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_seq_close_leaves_evictable_blocks)
{
    struct kv_cache *kv = make_kv(8, 2, 4);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0);
    const int32_t a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int s = seq_new(kv, 10);
    offer_all(pc, kv, s, root, a);
    ck_assert_int_eq(prefix_cache_evictable(pc), 0); /* in use */
    int32_t b0 = seq_block(kv, s, 0), b1 = seq_block(kv, s, 1);
    kv_cache_seq_close(kv, s);
    ck_assert_int_eq(kv_cache_block_refcount(kv, b0), 1);
    ck_assert_int_eq(kv_cache_block_refcount(kv, b1), 1);
    ck_assert(kv_cache_block_is_full(kv, b0));
    ck_assert_int_eq(kv_cache_blocks_free(kv), 6); /* the partial third block went back */
    ck_assert_int_eq(prefix_cache_evictable(pc), 2);
    ck_assert_int_eq(prefix_cache_size(pc), 2);
    int32_t got[2];
    ck_assert_int_eq(prefix_cache_lookup(pc, root, a, 2, got), 2); /* K/V survives the sequence */
    prefix_cache_clear(pc);
    ck_assert_int_eq(prefix_cache_size(pc), 0);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 8);
    ck_assert_int_eq(prefix_cache_lookup(pc, root, a, 2, got), 0);
    prefix_cache_free(pc);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_evict_lru_order)
{
    struct kv_cache *kv = make_kv(16, 4, 4);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0);
    const int32_t p[4] = {1, 1, 1, 1}, q[4] = {2, 2, 2, 2}, r[4] = {3, 3, 3, 3};
    const int32_t *prompts[3] = {p, q, r};
    int32_t blk[3];
    for (int i = 0; i < 3; i++) {
        int s = seq_new(kv, 4);
        offer_all(pc, kv, s, root, prompts[i]);
        blk[i] = seq_block(kv, s, 0);
        kv_cache_seq_close(kv, s);
    }
    int32_t got[1];
    ck_assert_int_eq(prefix_cache_lookup(pc, root, p, 1, got), 1); /* p becomes most recent */
    ck_assert_int_eq(prefix_cache_evict(pc, 1), 1);
    ck_assert_int_eq(kv_cache_block_refcount(kv, blk[1]), 0); /* q was least recently used */
    ck_assert_int_eq(kv_cache_block_refcount(kv, blk[0]), 1);
    ck_assert_int_eq(kv_cache_block_refcount(kv, blk[2]), 1);
    ck_assert_int_eq(prefix_cache_evict(pc, 1), 1);
    ck_assert_int_eq(kv_cache_block_refcount(kv, blk[2]), 0);
    ck_assert_int_eq(prefix_cache_lookup(pc, root, p, 1, got), 1);
    ck_assert_int_eq(prefix_cache_evict(pc, 5), 1);
    ck_assert_int_eq(prefix_cache_evict(pc, 5), 0);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 16);

    /* A chain goes tail first, so what stays is still a reachable prefix. */
    const int32_t chain[12] = {5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7};
    int s = seq_new(kv, 12);
    offer_all(pc, kv, s, root, chain);
    int32_t tail = seq_block(kv, s, 2);
    kv_cache_seq_close(kv, s);
    ck_assert_int_eq(prefix_cache_evict(pc, 1), 1); /* straight after insertion, too */
    ck_assert_int_eq(kv_cache_block_refcount(kv, tail), 0);
    int32_t three[3];
    ck_assert_int_eq(prefix_cache_lookup(pc, root, chain, 3, three), 2);
    for (int left = 2; left > 0; left--) {
        ck_assert_int_eq(prefix_cache_lookup(pc, root, chain, 3, three), left);
        ck_assert_int_eq(prefix_cache_evict(pc, 1), 1);
        ck_assert_int_eq(prefix_cache_size(pc), left - 1);
    }
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 16);
    kv_cache_free(kv);
}
END_TEST

/* prefix_cache_match finds what prefix_cache_lookup finds and changes nothing: the least recently
 * used block is still evicted first, and a parked block stays parked (offered as parked). */
static int parked_evictions;
static void count_parked(void *ctx, const struct prefix_cache_evicted *ev)
{
    (void)ctx;
    parked_evictions += ev->parked;
}

START_TEST(test_prefix_cache_match_changes_nothing)
{
    struct kv_cache *kv = make_kv(16, 4, 4);
    struct prefix_cache *pc = make_pc(kv);
    prefix_cache_set_observer(pc, &(struct prefix_cache_observer){NULL, count_parked, NULL, NULL});
    uint64_t root = prefix_cache_root(NULL, 0);
    const int32_t p[8] = {1, 1, 1, 1, 4, 4, 4, 4}, q[4] = {2, 2, 2, 2};
    int sp = seq_new(kv, 8);
    offer_all(pc, kv, sp, root, p);
    int32_t bp = seq_block(kv, sp, 0);
    prefix_cache_mark_parked(pc, bp);
    prefix_cache_mark_parked(pc, seq_block(kv, sp, 1));
    kv_cache_seq_close(kv, sp);
    int sq = seq_new(kv, 4);
    offer_all(pc, kv, sq, root, q);
    int32_t bq = seq_block(kv, sq, 0);
    kv_cache_seq_close(kv, sq);
    int32_t got[2], want[2];
    ck_assert_int_eq(prefix_cache_match(pc, root, p, 2, got), 2);
    ck_assert_int_eq(got[0], bp);
    ck_assert_int_eq(prefix_cache_evict(pc, 2), 2); /* p's chain: still the least recent */
    ck_assert_int_eq(kv_cache_block_refcount(kv, bp), 0);
    ck_assert_int_eq(kv_cache_block_refcount(kv, bq), 1);
    ck_assert_int_eq(parked_evictions, 2);
    ck_assert_int_eq(prefix_cache_match(pc, root, q, 1, got), 1);
    ck_assert_int_eq(prefix_cache_lookup(pc, root, q, 1, want), 1);
    ck_assert_int_eq(got[0], want[0]);
    prefix_cache_free(pc);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_evict_skips_blocks_in_use)
{
    struct kv_cache *kv = make_kv(8, 2, 4);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0);
    const int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[4] = {9, 9, 9, 9};
    int sa = seq_new(kv, 8), sb = seq_new(kv, 4);
    offer_all(pc, kv, sa, root, a); /* inserted first: least recently used */
    offer_all(pc, kv, sb, root, b);
    kv_cache_seq_close(kv, sb);
    ck_assert_int_eq(prefix_cache_evictable(pc), 1);
    ck_assert_int_eq(prefix_cache_evict(pc, 8), 1); /* only b; a's blocks are skipped */
    ck_assert_int_eq(prefix_cache_size(pc), 2);
    ck_assert_int_eq(kv_cache_block_refcount(kv, seq_block(kv, sa, 0)), 2);
    ck_assert_int_eq(kv_cache_block_refcount(kv, seq_block(kv, sa, 1)), 2);
    prefix_cache_clear(pc);
    ck_assert_int_eq(prefix_cache_size(pc), 2);
    ck_assert_int_eq(prefix_cache_evict(pc, 8), 0);
    int32_t got[2];
    ck_assert_int_eq(prefix_cache_lookup(pc, root, a, 2, got), 2);
    /* Freeing the cache while a sequence still uses its blocks leaves them to the sequence. */
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_block_refcount(kv, seq_block(kv, sa, 0)), 1);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 6);
    kv_cache_seq_close(kv, sa);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 8);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_salt_isolation)
{
    struct kv_cache *kv = make_kv(8, 2, 4);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t ra = prefix_cache_root("tenant-a", 8), rb = prefix_cache_root("tenant-b", 8);
    uint64_t none = prefix_cache_root(NULL, 0);
    const int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int s = seq_new(kv, 8);
    offer_all(pc, kv, s, ra, a);
    int32_t got[2];
    ck_assert_int_eq(prefix_cache_lookup(pc, ra, a, 2, got), 2);
    ck_assert_int_eq(prefix_cache_lookup(pc, rb, a, 2, got), 0);
    ck_assert_int_eq(prefix_cache_lookup(pc, none, a, 2, got), 0);
    /* The same tokens under another salt are a separate chain of their own blocks. */
    int t = seq_new(kv, 8);
    offer_all(pc, kv, t, rb, a);
    ck_assert_int_eq(prefix_cache_size(pc), 4);
    ck_assert_int_eq(prefix_cache_lookup(pc, rb, a, 2, got), 2);
    ck_assert_int_eq(got[0], seq_block(kv, t, 0));
    ck_assert_int_eq(got[1], seq_block(kv, t, 1));
    kv_cache_seq_close(kv, s);
    kv_cache_seq_close(kv, t);
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 8);
    kv_cache_free(kv);
}
END_TEST

START_TEST(test_prefix_cache_attach_round_trip)
{
    struct kv_cache *kv = make_kv(16, 4, 8);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0);
    const int32_t a[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    int s = seq_new(kv, 14);
    offer_all(pc, kv, s, root, a);
    kv_cache_seq_close(kv, s);

    /* A new request with the same first 12 tokens and a longer tail. */
    int32_t b[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 60, 61, 62, 63, 64, 65};
    int32_t hits[4];
    int n = prefix_cache_lookup(pc, root, b, (18 - 1) / BS, hits);
    ck_assert_int_eq(n, 3);
    int t;
    ck_assert_int_eq(kv_cache_seq_open(kv, &t), 0);
    ck_assert_int_eq(kv_cache_seq_attach(kv, t, hits, n), 0);
    ck_assert_int_eq(kv_cache_seq_len(kv, t), 12);
    for (int i = 0; i < n; i++) ck_assert_int_eq(kv_cache_block_refcount(kv, hits[i]), 2);
    ck_assert_int_eq(prefix_cache_evictable(pc), 0);
    ck_assert_int_eq(kv_cache_seq_slot(kv, t, 5), (int64_t)hits[1] * BS + 1);

    /* Prefill the rest; the new full block chains after the hits. */
    struct kv_cache_copy cp;
    ck_assert_int_eq(kv_cache_seq_append(kv, t, 6, &cp), 0);
    ck_assert_int_eq(cp.n, 0);
    offer_all(pc, kv, t, root, b);
    ck_assert_int_eq(prefix_cache_size(pc), 4);
    kv_cache_seq_close(kv, t);
    int32_t again[4];
    ck_assert_int_eq(prefix_cache_lookup(pc, root, b, 4, again), 4);
    ck_assert_int_eq(memcmp(again, hits, sizeof(int32_t) * 3), 0);
    ck_assert_int_eq(prefix_cache_evictable(pc), 4);
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 16);
    kv_cache_free(kv);
}
END_TEST

/* A block indexed after an entry that was later evicted is stranded: the same tokens under the same
 * chain hash must not reach it through the parent's new incarnation, and it is replaced once no
 * sequence can chain on it any more. */
START_TEST(test_prefix_cache_stranded_entry_never_hits)
{
    struct kv_cache *kv = make_kv(16, 4, 4);
    struct prefix_cache *pc = make_pc(kv);
    uint64_t root = prefix_cache_root(NULL, 0);
    const int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8}, first[4] = {1, 2, 3, 4};
    int sa = seq_new(kv, 4);
    offer_all(pc, kv, sa, root, first); /* A0 */
    int sb = seq_new(kv, 8);
    offer_all(pc, kv, sb, root, p); /* B0 duplicates A0; B1 indexed after A0 */
    int32_t b1 = seq_block(kv, sb, 1);
    ck_assert_int_eq(prefix_cache_size(pc), 2);
    kv_cache_seq_close(kv, sa);
    ck_assert_int_eq(prefix_cache_evict(pc, 8), 1); /* A0 goes; B1 is in use */
    ck_assert_int_eq(kv_cache_block_refcount(kv, b1), 2);
    int32_t got[2];
    ck_assert_int_eq(prefix_cache_lookup(pc, root, p, 2, got), 0);

    /* C recomputes the prompt: C0 is indexed anew, C1 cannot take B1's hash while B uses it. */
    int sc = seq_new(kv, 8);
    offer_all(pc, kv, sc, root, p);
    ck_assert_int_eq(prefix_cache_size(pc), 2);
    ck_assert_int_eq(prefix_cache_lookup(pc, root, p, 2, got), 1); /* B1 is not C0's child */
    ck_assert_int_eq(got[0], seq_block(kv, sc, 0));

    /* Once B is gone, the next offer replaces the stranded entry. */
    kv_cache_seq_close(kv, sb);
    offer_all(pc, kv, sc, root, p);
    ck_assert_int_eq(kv_cache_block_refcount(kv, b1), 0);
    ck_assert_int_eq(prefix_cache_lookup(pc, root, p, 2, got), 2);
    ck_assert_int_eq(got[1], seq_block(kv, sc, 1));
    kv_cache_seq_close(kv, sc);
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), 16);
    kv_cache_free(kv);
}
END_TEST

/* ---- randomized scheduler run ------------------------------------------------------------- */

#define R_BLOCKS  24
#define R_SEQS    6
#define R_MAXBPS  6
#define R_MAXTOK  (R_MAXBPS * BS)
#define R_PROMPTS 4

struct rseq {
    bool open;
    int len;
    int32_t tok[R_MAXTOK];
    uint64_t root;
};

/* Per physical block: the exact token prefix (up to the block's end) its K/V was computed on. */
struct truth {
    int len;
    int32_t tok[R_MAXTOK];
};

static uint32_t rng_next(uint64_t *s)
{
    *s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return (uint32_t)(*s >> 33);
}

/* Opens a request the way a scheduler would: look up, attach the hits, prefill the rest (evicting
 * cached blocks when the free list is short), record what each new block holds, offer full blocks. */
static void r_admit(struct prefix_cache *pc, struct kv_cache *kv, struct rseq *seqs,
                    struct truth *truth, uint64_t *rng, const uint64_t roots[2])
{
    int s;
    if (kv_cache_seq_open(kv, &s) != 0) return;
    struct rseq *r = &seqs[s];
    r->root = roots[rng_next(rng) % 2];
    r->len = 1 + (int)(rng_next(rng) % R_MAXTOK);
    /* Prompts share prefixes: a few base prompts over a 2-letter alphabet, random tails. */
    uint32_t base = rng_next(rng) % R_PROMPTS;
    int shared = (int)(rng_next(rng) % (uint32_t)(r->len + 1));
    for (int i = 0; i < r->len; i++)
        r->tok[i] = i < shared ? (int32_t)((base >> (i % 2)) & 1) : (int32_t)(rng_next(rng) % 2);

    int32_t hits[R_MAXBPS];
    int n = prefix_cache_lookup(pc, r->root, r->tok, (r->len - 1) / BS, hits);
    for (int i = 0; i < n; i++) {
        /* The property under test: a hit's K/V was computed on exactly this prefix. */
        ck_assert_int_eq(truth[hits[i]].len, (i + 1) * BS);
        ck_assert_int_eq(memcmp(truth[hits[i]].tok, r->tok, sizeof(int32_t) * (i + 1) * BS), 0);
    }
    ck_assert_int_eq(kv_cache_seq_attach(kv, s, hits, n), 0);
    int rest = r->len - n * BS, need = kv_cache_seq_blocks_needed(kv, s, rest);
    if (need > kv_cache_blocks_free(kv)) prefix_cache_evict(pc, need - kv_cache_blocks_free(kv));
    struct kv_cache_copy cp;
    if (kv_cache_seq_append(kv, s, rest, &cp) != 0) {
        kv_cache_seq_close(kv, s);
        return;
    }
    ck_assert_int_eq(cp.n, 0);
    r->open = true;
    int nb;
    const int32_t *bt = kv_cache_seq_blocks(kv, s, &nb);
    for (int i = n; i < nb; i++) {
        int end = (i + 1) * BS < r->len ? (i + 1) * BS : r->len;
        truth[bt[i]].len = end;
        memcpy(truth[bt[i]].tok, r->tok, sizeof(int32_t) * (size_t)end);
    }
    offer_all(pc, kv, s, r->root, r->tok);
}

START_TEST(test_prefix_cache_random_run_hits_are_exact)
{
    struct kv_cache *kv = make_kv(R_BLOCKS, R_SEQS, R_MAXBPS);
    struct prefix_cache *pc = make_pc(kv);
    const uint64_t roots[2] = {prefix_cache_root(NULL, 0), prefix_cache_root("s", 1)};
    struct rseq seqs[R_SEQS] = {0};
    static struct truth truth[R_BLOCKS];
    memset(truth, 0, sizeof(truth));
    uint64_t rng = 42;
    int hits_total = 0;
    for (int step = 0; step < 20000; step++) {
        uint32_t op = rng_next(&rng) % 10;
        if (op < 5) {
            r_admit(pc, kv, seqs, truth, &rng, roots);
        } else if (op < 9) {
            int s = (int)(rng_next(&rng) % R_SEQS);
            if (!seqs[s].open) continue;
            kv_cache_seq_close(kv, s);
            seqs[s].open = false;
        } else {
            prefix_cache_evict(pc, 1 + (int)(rng_next(&rng) % 3));
        }
        /* Accounting: every cached block is referenced; the cache never holds more than the pool. */
        int ev = prefix_cache_evictable(pc), size = prefix_cache_size(pc);
        ck_assert_int_le(ev, size);
        ck_assert_int_le(size, R_BLOCKS);
        ck_assert_int_le(kv_cache_blocks_free(kv) + ev, R_BLOCKS);
        /* Every open sequence's own prompt is found at least as deep as its indexed chain allows,
         * and every hit is exact (checked in r_admit, here for a replayed prompt). */
        int s = (int)(rng_next(&rng) % R_SEQS);
        if (seqs[s].open) {
            int32_t hits[R_MAXBPS];
            int n = prefix_cache_lookup(pc, seqs[s].root, seqs[s].tok, seqs[s].len / BS, hits);
            for (int i = 0; i < n; i++) {
                ck_assert_int_eq(truth[hits[i]].len, (i + 1) * BS);
                ck_assert_int_eq(
                    memcmp(truth[hits[i]].tok, seqs[s].tok, sizeof(int32_t) * (i + 1) * BS), 0);
            }
            hits_total += n;
        }
    }
    ck_assert_int_gt(hits_total, 1000); /* the run exercised sharing, not only misses */
    for (int s = 0; s < R_SEQS; s++)
        if (seqs[s].open) kv_cache_seq_close(kv, s);
    ck_assert_int_eq(kv_cache_blocks_free(kv) + prefix_cache_evictable(pc), R_BLOCKS);
    prefix_cache_free(pc);
    ck_assert_int_eq(kv_cache_blocks_free(kv), R_BLOCKS);
    kv_cache_free(kv);
}
END_TEST

Suite *prefix_cache_suite(void)
{
    Suite *s = suite_create("prefix_cache");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_prefix_cache_block_hash_chains);
    tcase_add_test(tc, test_prefix_cache_lookup_longest_chain);
    tcase_add_test(tc, test_prefix_cache_insert_refuses_partial_and_free_blocks);
    tcase_add_test(tc, test_prefix_cache_insert_needs_a_verifiable_parent);
    tcase_add_test(tc, test_prefix_cache_insert_duplicate_keeps_one_ref);
    tcase_add_test(tc, test_prefix_cache_lookup_other_tokens_miss);
    tcase_add_test(tc, test_prefix_cache_seq_close_leaves_evictable_blocks);
    tcase_add_test(tc, test_prefix_cache_evict_lru_order);
    tcase_add_test(tc, test_prefix_cache_match_changes_nothing);
    tcase_add_test(tc, test_prefix_cache_evict_skips_blocks_in_use);
    tcase_add_test(tc, test_prefix_cache_salt_isolation);
    tcase_add_test(tc, test_prefix_cache_attach_round_trip);
    tcase_add_test(tc, test_prefix_cache_stranded_entry_never_hits);
    tcase_add_test(tc, test_prefix_cache_random_run_hits_are_exact);
    suite_add_tcase(s, tc);
    return s;
}
