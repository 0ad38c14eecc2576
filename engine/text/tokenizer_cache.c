/* The tokenizer's word cache (tokenizer_priv.h): word bytes -> token ids, a fixed array of inline
 * slots (no allocation after creation, so the memory is bounded by construction), direct-mapped by
 * the word's FNV-1a hash, a colliding word overwriting the slot (eviction). The slots are split into
 * shards, each under its own mutex, so concurrent encoders rarely wait for one another. */
#include "engine/text/tokenizer_priv.h"

#include "common/err.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct tokenizer_cache_slot {
    uint64_t hash;
    uint8_t key_len; /* 0: empty */
    uint8_t n_ids;
    char key[TOKENIZER_CACHE_KEY_MAX];
    int32_t ids[TOKENIZER_CACHE_IDS_MAX];
};

struct tokenizer_cache_shard {
    pthread_mutex_t mu;
    uint64_t hits, misses, inserts, evictions;
    struct tokenizer_cache_slot *slots; /* (slot_mask + 1), in the cache's one allocation */
} __attribute__((aligned(64)));

struct tokenizer_cache {
    size_t n_shards, slot_mask; /* slots per shard - 1 */
    struct tokenizer_cache_shard *shards;
    struct tokenizer_cache_slot *slots;
};

static size_t pow2_at_least(size_t n)
{
    size_t p = 1;
    while (p < n) p *= 2;
    return p;
}

int tokenizer_cache_new(size_t n_words, struct tokenizer_cache **out)
{
    *out = NULL;
    if (n_words == 0) return 0;
    if (n_words > ((size_t)1 << 24)) return ERR_TOO_BIG;
    size_t total = pow2_at_least(n_words);
    size_t n_shards = total >= 16 * 64 ? 16 : 1; /* tiny caches (tests): one shard */
    struct tokenizer_cache *c = calloc(1, sizeof(*c));
    if (!c) return ERR_NOMEM;
    c->n_shards = n_shards;
    c->slot_mask = total / n_shards - 1;
    c->shards = aligned_alloc(64, n_shards * sizeof(*c->shards));
    c->slots = calloc(total, sizeof(*c->slots));
    if (!c->shards || !c->slots) {
        free(c->shards);
        free(c->slots);
        free(c);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < n_shards; i++) {
        c->shards[i] = (struct tokenizer_cache_shard){.slots = c->slots + i * (c->slot_mask + 1)};
        pthread_mutex_init(&c->shards[i].mu, NULL);
    }
    *out = c;
    return 0;
}

void tokenizer_cache_free(struct tokenizer_cache *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n_shards; i++) pthread_mutex_destroy(&c->shards[i].mu);
    free(c->shards);
    free(c->slots);
    free(c);
}

/* The shard from the hash's top bits, the slot from its low bits: independent for 16 shards. */
static struct tokenizer_cache_shard *shard_of(const struct tokenizer_cache *c, uint64_t h)
{
    return &c->shards[c->n_shards == 1 ? 0 : (size_t)(h >> 60)];
}

int tokenizer_cache_get(struct tokenizer_cache *c, uint64_t h, const char *w, size_t n,
                        int32_t ids[TOKENIZER_CACHE_IDS_MAX])
{
    if (n == 0 || n > TOKENIZER_CACHE_KEY_MAX) return -1;
    struct tokenizer_cache_shard *sh = shard_of(c, h);
    const struct tokenizer_cache_slot *s = &sh->slots[h & c->slot_mask];
    int got = -1;
    pthread_mutex_lock(&sh->mu);
    if (s->key_len == n && s->hash == h && memcmp(s->key, w, n) == 0) {
        got = s->n_ids;
        memcpy(ids, s->ids, (size_t)got * sizeof(*ids));
        sh->hits++;
    } else {
        sh->misses++;
    }
    pthread_mutex_unlock(&sh->mu);
    return got;
}

void tokenizer_cache_put(struct tokenizer_cache *c, uint64_t h, const char *w, size_t n,
                         const int32_t *ids, size_t n_ids)
{
    if (n == 0 || n > TOKENIZER_CACHE_KEY_MAX || n_ids > TOKENIZER_CACHE_IDS_MAX) return;
    struct tokenizer_cache_shard *sh = shard_of(c, h);
    struct tokenizer_cache_slot *s = &sh->slots[h & c->slot_mask];
    pthread_mutex_lock(&sh->mu);
    sh->evictions += s->key_len != 0;
    sh->inserts++;
    s->hash = h;
    s->key_len = (uint8_t)n;
    s->n_ids = (uint8_t)n_ids;
    memcpy(s->key, w, n);
    if (n_ids) memcpy(s->ids, ids, n_ids * sizeof(*ids)); /* ids may be NULL when 0 */
    pthread_mutex_unlock(&sh->mu);
}

void tokenizer_cache_stats(const struct tokenizer *t, struct tokenizer_cache_stats *st)
{
    *st = (struct tokenizer_cache_stats){0};
    struct tokenizer_cache *c = t->cache;
    if (!c) return;
    st->words = c->n_shards * (c->slot_mask + 1);
    st->bytes = sizeof(*c) + c->n_shards * sizeof(*c->shards) + st->words * sizeof(*c->slots);
    for (size_t i = 0; i < c->n_shards; i++) {
        struct tokenizer_cache_shard *sh = &c->shards[i];
        pthread_mutex_lock(&sh->mu);
        st->hits += sh->hits;
        st->misses += sh->misses;
        st->inserts += sh->inserts;
        st->evictions += sh->evictions;
        pthread_mutex_unlock(&sh->mu);
    }
}

int tokenizer_set_cache(struct tokenizer *t, size_t n_words)
{
    struct tokenizer_cache *c;
    int rc = tokenizer_cache_new(n_words, &c);
    if (rc) return rc;
    tokenizer_cache_free(t->cache);
    t->cache = c;
    return 0;
}
