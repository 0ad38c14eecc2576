/* Block-hash prefix cache: per-block entries (hash, parent identity, token copy, LRU links), an
 * open-addressing table hash -> block id (linear probing, backward-shift deletion, load <= 1/2) and
 * an LRU list. It holds one kv_cache reference per indexed block. See prefix_cache.h for the model. */
#include "engine/kv/prefix_cache.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/sha256.h"
#include "engine/kv/kv_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PC_NONE     ((int32_t)-1)
#define PC_ROOT_BIT (UINT64_C(1) << 63)

/* One per physical block id. Fields other than alias_* are meaningful only while `cached`. */
struct pc_entry {
    uint64_t hash;        /* chain hash of this block */
    uint64_t parent_hash; /* the chain value it was hashed from (a root for depth 0) */
    uint64_t gen;         /* incarnation: unique per indexing, never reused */
    uint64_t parent_gen;  /* gen of the parent entry when this one was indexed (0 at depth 0) */
    int32_t parent;       /* parent entry's block id; PC_NONE at depth 0 */
    int32_t depth;        /* index of the block in its sequence's block table */
    int32_t prev, next;   /* LRU links: prev towards least, next towards most recently used */
    bool cached;
    bool prompt;     /* computed from prompt tokens (prefix_cache_mark_prompt) */
    bool parked;     /* of a preempted sequence, not looked up since (prefix_cache_mark_parked) */
    uint32_t reuses; /* lookup hits and verified duplicates since it was indexed */
    /* Set when the block was offered as a verified duplicate of the cached entry (alias_block,
     * alias_gen): the next block of its sequence may then chain onto that entry. */
    int32_t alias_block;
    uint64_t alias_gen;
};

struct prefix_cache {
    struct kv_cache *kv; /* borrowed */
    int n_blocks, block_size;
    struct pc_entry *ent; /* (n_blocks) */
    int32_t *tokens;      /* (n_blocks, block_size) token ids of each cached block */
    int32_t *slots;       /* (mask + 1) hash table: block id or PC_NONE */
    size_t mask;
    int32_t lru, mru; /* ends of the LRU list; PC_NONE when empty */
    int size;         /* cached entries */
    uint64_t next_gen;
    struct prefix_cache_observer obs; /* callbacks NULL: none */
};

/* splitmix64's finaliser: a bijection on 64 bits with full avalanche. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t prefix_cache_root(const char *salt, size_t len)
{
    char hex[SHA256_HEX_LEN];
    uint64_t h = 0;
    if (!salt) len = 0;
    if (sha256_hex(len ? salt : "", len, hex) == 0) {
        for (int i = 0; i < 16; i++) {
            char c = hex[i];
            h = h << 4 | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
        }
    } else {
        /* OpenSSL could not allocate its context: fall back to a non-cryptographic hash of the
         * salt. Chains stay disjoint per salt; only resistance to chosen salts is lost. */
        h = mix64(len);
        for (size_t i = 0; i < len; i++) h = mix64(h ^ (unsigned char)salt[i]);
    }
    return h | PC_ROOT_BIT;
}

uint64_t prefix_cache_block_hash(uint64_t parent, const int32_t *tokens, int block_size)
{
    uint64_t h = mix64(parent ^ UINT64_C(0x9e3779b97f4a7c15));
    for (int i = 0; i < block_size; i++)
        h = mix64((h ^ (uint32_t)tokens[i]) + UINT64_C(0x9e3779b97f4a7c15));
    return mix64(h ^ (uint64_t)(uint32_t)block_size) & ~PC_ROOT_BIT;
}

/* ---- hash table ---------------------------------------------------------------------------- */

static size_t table_home(const struct prefix_cache *pc, uint64_t hash)
{
    return (size_t)hash & pc->mask; /* block hashes are already mixed */
}

static int32_t table_find(const struct prefix_cache *pc, uint64_t hash)
{
    for (size_t i = table_home(pc, hash);; i = (i + 1) & pc->mask) {
        int32_t b = pc->slots[i];
        if (b == PC_NONE || pc->ent[b].hash == hash) return b;
    }
}

static void table_add(struct prefix_cache *pc, int32_t b)
{
    size_t i = table_home(pc, pc->ent[b].hash);
    while (pc->slots[i] != PC_NONE) i = (i + 1) & pc->mask;
    pc->slots[i] = b;
}

/* Backward-shift deletion: later members of the probe run move into the hole when their home slot
 * does not lie cyclically in (hole, j], so every remaining key stays reachable without tombstones. */
static void table_del(struct prefix_cache *pc, int32_t b)
{
    size_t i = table_home(pc, pc->ent[b].hash);
    while (pc->slots[i] != b) {
        ASSERT(pc->slots[i] != PC_NONE);
        i = (i + 1) & pc->mask;
    }
    for (size_t j = (i + 1) & pc->mask; pc->slots[j] != PC_NONE; j = (j + 1) & pc->mask) {
        size_t home = table_home(pc, pc->ent[pc->slots[j]].hash);
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        pc->slots[i] = pc->slots[j];
        i = j;
    }
    pc->slots[i] = PC_NONE;
}

/* ---- LRU list ------------------------------------------------------------------------------ */

static void lru_unlink(struct prefix_cache *pc, int32_t b)
{
    struct pc_entry *e = &pc->ent[b];
    if (e->prev != PC_NONE)
        pc->ent[e->prev].next = e->next;
    else
        pc->lru = e->next;
    if (e->next != PC_NONE)
        pc->ent[e->next].prev = e->prev;
    else
        pc->mru = e->prev;
    e->prev = e->next = PC_NONE;
}

static void lru_push_mru(struct prefix_cache *pc, int32_t b)
{
    struct pc_entry *e = &pc->ent[b];
    e->prev = pc->mru;
    e->next = PC_NONE;
    if (pc->mru != PC_NONE)
        pc->ent[pc->mru].next = b;
    else
        pc->lru = b;
    pc->mru = b;
}

/* Links b just less recently used than x, so a new block is evicted before its parent. */
static void lru_insert_before(struct prefix_cache *pc, int32_t b, int32_t x)
{
    struct pc_entry *e = &pc->ent[b];
    e->next = x;
    e->prev = pc->ent[x].prev;
    if (e->prev != PC_NONE)
        pc->ent[e->prev].next = b;
    else
        pc->lru = b;
    pc->ent[x].prev = b;
}

static void lru_touch(struct prefix_cache *pc, int32_t b)
{
    if (pc->mru == b) return;
    lru_unlink(pc, b);
    lru_push_mru(pc, b);
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

int prefix_cache_new(struct kv_cache *kv, struct prefix_cache **out)
{
    int rc = ERR_NOMEM;
    struct prefix_cache *pc = calloc(1, sizeof(*pc));
    if (!pc) goto out;
    pc->kv = kv;
    pc->n_blocks = kv_cache_n_blocks(kv);
    pc->block_size = kv_cache_block_size(kv);
    pc->lru = pc->mru = PC_NONE;
    size_t n = (size_t)pc->n_blocks, bs = (size_t)pc->block_size;
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1; /* n <= INT32_MAX: no overflow on 64-bit size_t */
    pc->mask = cap - 1;
    if (n > SIZE_MAX / sizeof(int32_t) / bs) goto out;
    pc->ent = calloc(n, sizeof(*pc->ent));
    pc->tokens = malloc(n * bs * sizeof(*pc->tokens));
    pc->slots = malloc(cap * sizeof(*pc->slots));
    if (!pc->ent || !pc->tokens || !pc->slots) goto out;
    for (size_t i = 0; i < cap; i++) pc->slots[i] = PC_NONE;
    for (size_t i = 0; i < n; i++) {
        pc->ent[i].parent = pc->ent[i].prev = pc->ent[i].next = PC_NONE;
        pc->ent[i].alias_block = PC_NONE;
    }
    *out = pc;
    pc = NULL;
    rc = 0;
out:
    prefix_cache_free(pc);
    return rc;
}

void prefix_cache_free(struct prefix_cache *pc)
{
    if (!pc) return;
    for (int32_t b = pc->lru; b != PC_NONE; b = pc->ent[b].next) kv_cache_block_release(pc->kv, b);
    free(pc->slots);
    free(pc->tokens);
    free(pc->ent);
    free(pc);
}

void prefix_cache_set_observer(struct prefix_cache *pc, const struct prefix_cache_observer *obs)
{
    pc->obs = obs ? *obs : (struct prefix_cache_observer){0};
}

int prefix_cache_size(const struct prefix_cache *pc)
{
    return pc->size;
}

/* ---- lookup -------------------------------------------------------------------------------- */

static const int32_t *entry_tokens(const struct prefix_cache *pc, int32_t b)
{
    return pc->tokens + (size_t)b * (size_t)pc->block_size;
}

/* True when entry b holds exactly these tokens, hashed from parent_hash after the entry
 * (parent, parent_gen): the whole identity, not just the 64-bit hash. */
static bool entry_matches(const struct prefix_cache *pc, int32_t b, uint64_t parent_hash,
                          int32_t parent, uint64_t parent_gen, const int32_t *tokens)
{
    const struct pc_entry *e = &pc->ent[b];
    return e->parent_hash == parent_hash && e->parent == parent && e->parent_gen == parent_gen &&
           memcmp(entry_tokens(pc, b), tokens, (size_t)pc->block_size * sizeof(*tokens)) == 0;
}

int prefix_cache_match(const struct prefix_cache *pc, uint64_t root, const int32_t *tokens,
                       int max_blocks, int32_t *blocks_out)
{
    size_t bs = (size_t)pc->block_size;
    uint64_t h = root;
    int32_t parent = PC_NONE;
    uint64_t parent_gen = 0;
    int n = 0;
    for (; n < max_blocks; n++) {
        const int32_t *t = tokens + (size_t)n * bs;
        uint64_t bh = prefix_cache_block_hash(h, t, pc->block_size);
        int32_t b = table_find(pc, bh);
        if (b == PC_NONE || !entry_matches(pc, b, h, parent, parent_gen, t)) break;
        blocks_out[n] = b;
        h = bh;
        parent = b;
        parent_gen = pc->ent[b].gen;
    }
    return n;
}

int prefix_cache_lookup(struct prefix_cache *pc, uint64_t root, const int32_t *tokens,
                        int max_blocks, int32_t *blocks_out)
{
    int n = prefix_cache_match(pc, root, tokens, max_blocks, blocks_out);
    for (int i = 0; i < n; i++) {
        struct pc_entry *e = &pc->ent[blocks_out[i]];
        if (e->reuses < UINT32_MAX) e->reuses++;
        e->parked = false;
    }
    /* Deepest first, so the chain's head ends most recently used and its tail is evicted first
     * (evicting a head first would strand the tail: unreachable, yet holding blocks). */
    for (int i = n - 1; i >= 0; i--) lru_touch(pc, blocks_out[i]);
    return n;
}

/* ---- insert -------------------------------------------------------------------------------- */

/* The block before `block` in a sequence whose table holds `block` at index `depth` (PC_NONE when
 * depth is 0). False when no open sequence holds it there. Blocks shared between sequences (fork,
 * attach) sit at the same index after the same prefix, so any holder gives the same answer. */
static bool find_predecessor(const struct prefix_cache *pc, int32_t block, int depth, int32_t *pred)
{
    int max_seqs = kv_cache_max_seqs(pc->kv);
    for (int s = 0; s < max_seqs; s++) {
        if (!kv_cache_seq_is_open(pc->kv, s)) continue;
        int n;
        const int32_t *bt = kv_cache_seq_blocks(pc->kv, s, &n);
        if (depth < n && bt[depth] == block) {
            *pred = depth > 0 ? bt[depth - 1] : PC_NONE;
            return true;
        }
    }
    return false;
}

struct pc_link {
    int32_t parent; /* PC_NONE at depth 0 */
    uint64_t parent_gen;
    int depth;
};

/* Which cached entry a new entry for `block`, hashed from `parent_hash`, would follow. A root
 * parent means depth 0. Otherwise the entry with that hash must be the block right before `block`
 * in its sequence, or the entry that block was verified to duplicate: the hash alone could name
 * another prefix after a collision. False when no such entry is live. */
static bool resolve_parent(const struct prefix_cache *pc, uint64_t parent_hash, int32_t block,
                           struct pc_link *link)
{
    int32_t pred;
    if (parent_hash & PC_ROOT_BIT) {
        *link = (struct pc_link){PC_NONE, 0, 0};
        return find_predecessor(pc, block, 0, &pred);
    }
    int32_t x = table_find(pc, parent_hash);
    if (x == PC_NONE) return false;
    const struct pc_entry *p = &pc->ent[x];
    if (!find_predecessor(pc, block, p->depth + 1, &pred)) return false;
    const struct pc_entry *q = &pc->ent[pred];
    if (pred != x && !(q->alias_block == x && q->alias_gen == p->gen)) return false;
    *link = (struct pc_link){x, p->gen, p->depth + 1};
    return true;
}

/* True when the parent entry that b was indexed after is still the same incarnation. An entry whose
 * parent was evicted can never be reached by a lookup again. */
static bool entry_reachable_parent(const struct prefix_cache *pc, int32_t b)
{
    const struct pc_entry *e = &pc->ent[b];
    if (e->parent == PC_NONE) return true;
    const struct pc_entry *p = &pc->ent[e->parent];
    return p->cached && p->gen == e->parent_gen;
}

/* Removes entry b from the index and drops the cache's reference to its block. */
static void entry_drop(struct prefix_cache *pc, int32_t b)
{
    ASSERT(pc->ent[b].cached);
    table_del(pc, b);
    lru_unlink(pc, b);
    pc->ent[b].cached = false;
    pc->size--;
    kv_cache_block_release(pc->kv, b);
    if (pc->obs.removed) pc->obs.removed(pc->obs.ctx, pc->ent[b].hash);
}

int prefix_cache_insert(struct prefix_cache *pc, uint64_t parent, const int32_t *tokens,
                        int32_t block, uint64_t *hash_out)
{
    if (!kv_cache_block_is_full(pc->kv, block)) return ERR_INVAL;
    uint64_t h = prefix_cache_block_hash(parent, tokens, pc->block_size);
    *hash_out = h;
    struct pc_entry *e = &pc->ent[block];
    if (e->cached) return 0;
    e->alias_block = PC_NONE; /* a stale alias from an earlier use of this block id */
    struct pc_link link;
    if (!resolve_parent(pc, parent, block, &link)) return 0;

    int32_t x = table_find(pc, h);
    if (x != PC_NONE) {
        if (entry_matches(pc, x, parent, link.parent, link.parent_gen, tokens)) {
            e->alias_block = x;
            e->alias_gen = pc->ent[x].gen;
            if (pc->ent[x].reuses < UINT32_MAX) pc->ent[x].reuses++;
            return 0;
        }
        /* Another prefix holds this hash. Replace it only when nothing can use it any more
         * (stranded by its parent's eviction, and held by no sequence that could chain on it). */
        if (entry_reachable_parent(pc, x) || kv_cache_block_refcount(pc->kv, x) != 1) return 0;
        entry_drop(pc, x);
    }
    int rc = kv_cache_block_hold(pc->kv, block);
    ASSERT(rc == 0); /* a full block is allocated */
    e->hash = h;
    e->parent_hash = parent;
    e->gen = ++pc->next_gen;
    e->parent = link.parent;
    e->parent_gen = link.parent_gen;
    e->depth = link.depth;
    e->cached = true;
    e->prompt = false;
    e->parked = false;
    e->reuses = 0;
    memcpy(pc->tokens + (size_t)block * (size_t)pc->block_size, tokens,
           (size_t)pc->block_size * sizeof(*tokens));
    table_add(pc, block);
    /* Invariant: every entry is less recently used than its parent, so eviction takes chains tail
     * first and never strands a reachable tail behind an evicted head. */
    if (link.parent != PC_NONE)
        lru_insert_before(pc, block, link.parent);
    else
        lru_push_mru(pc, block);
    pc->size++;
    if (pc->obs.stored) pc->obs.stored(pc->obs.ctx, h);
    return 0;
}

/* ---- eviction ------------------------------------------------------------------------------ */

int prefix_cache_evict(struct prefix_cache *pc, int n)
{
    int freed = 0;
    for (int32_t b = pc->lru; b != PC_NONE && freed < n;) {
        int32_t next = pc->ent[b].next;
        if (kv_cache_block_refcount(pc->kv, b) == 1) {
            if (pc->obs.evicting) {
                const struct pc_entry *e = &pc->ent[b];
                struct prefix_cache_evicted ev = {
                    b,         e->hash,   e->parent_hash, entry_tokens(pc, b),
                    e->reuses, e->prompt, e->parked};
                pc->obs.evicting(pc->obs.ctx, &ev);
            }
            entry_drop(pc, b);
            freed++;
        }
        b = next;
    }
    return freed;
}

void prefix_cache_mark_prompt(struct prefix_cache *pc, int32_t block)
{
    if (block >= 0 && block < pc->n_blocks && pc->ent[block].cached) pc->ent[block].prompt = true;
}

void prefix_cache_mark_parked(struct prefix_cache *pc, int32_t block)
{
    if (block >= 0 && block < pc->n_blocks && pc->ent[block].cached) pc->ent[block].parked = true;
}

int prefix_cache_evictable(const struct prefix_cache *pc)
{
    return kv_cache_blocks_held_alone(pc->kv); /* the cache holds exactly its entries' blocks */
}

void prefix_cache_clear(struct prefix_cache *pc)
{
    prefix_cache_evict(pc, pc->size);
}
