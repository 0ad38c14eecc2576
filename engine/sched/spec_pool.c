/* The cross-request n-gram pool (see spec.h): a ring of finished sequences' tokens and a direct-
 * mapped hash table of where each of their n-grams last ended. It only proposes: every proposal
 * is verified by the target like any n-gram proposal, so what the pool holds can make speculation
 * pay more or less but never changes an output. */
#include "engine/sched/spec.h"

#include "common/err.h"

#include <stdlib.h>

#define SPEC_POOL_SEP (-1) /* ends a run in the ring: token ids are >= 0 */

struct spec_pool {
    int32_t *ring;   /* (cap) tokens; position i (counted since creation) is ring[i % cap] */
    uint64_t cap;    /* tokens the ring holds */
    uint64_t head;   /* positions written since creation */
    uint64_t *slots; /* (n_slots) 1 + the position where an n-gram ended; 0: empty */
    uint64_t n_slots;
    int ngram_min, ngram_max;
};

/* FNV-1a over the n-gram's tokens and its length (lengths share the table). */
static uint64_t pool_hash(const int32_t *t, int len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)len;
    for (int i = 0; i < len; i++) {
        h ^= (uint32_t)t[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

int spec_pool_new(uint64_t max_bytes, int ngram_min, int ngram_max, struct spec_pool **out)
{
    if (max_bytes < SPEC_POOL_MIN_BYTES || ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64)
        return ERR_INVAL;
    /* R ring tokens and 2 x L x R slots (L lengths of n-gram per token): the n-grams of the tokens
     * the ring holds fill half the table, so most keep their slot until the ring drops them */
    uint64_t lengths = (uint64_t)(ngram_max - ngram_min + 1);
    uint64_t cap =
        (max_bytes - sizeof(struct spec_pool)) / (sizeof(int32_t) + 2 * lengths * sizeof(uint64_t));
    uint64_t n_slots = 2 * lengths * cap;
    struct spec_pool *p = calloc(1, sizeof(*p));
    if (!p) return ERR_NOMEM;
    p->ring = malloc((size_t)cap * sizeof(int32_t));
    p->slots = calloc((size_t)n_slots, sizeof(uint64_t));
    if (!p->ring || !p->slots) {
        spec_pool_free(p);
        return ERR_NOMEM;
    }
    p->cap = cap;
    p->n_slots = n_slots;
    p->ngram_min = ngram_min;
    p->ngram_max = ngram_max;
    *out = p;
    return 0;
}

void spec_pool_free(struct spec_pool *p)
{
    if (!p) return;
    free(p->ring);
    free(p->slots);
    free(p);
}

uint64_t spec_pool_bytes(const struct spec_pool *p)
{
    return sizeof(*p) + p->cap * sizeof(int32_t) + p->n_slots * sizeof(uint64_t);
}

void spec_pool_insert(struct spec_pool *p, const int32_t *tokens, int n)
{
    if (n <= 0) return;
    if ((uint64_t)n >= p->cap) { /* the run and its separator must fit: keep its end */
        tokens += (uint64_t)n - (p->cap - 1);
        n = (int)(p->cap - 1);
    }
    for (int i = 0; i < n; i++) {
        p->ring[p->head % p->cap] = tokens[i];
        uint64_t pos = p->head++;
        for (int len = p->ngram_min; len <= p->ngram_max && len <= i + 1; len++)
            p->slots[pool_hash(tokens + i + 1 - len, len) % p->n_slots] = pos + 1;
    }
    p->ring[p->head++ % p->cap] = SPEC_POOL_SEP;
}

/* True when the len tokens ending at ring position `end` are still in the ring and equal t. */
static bool pool_match(const struct spec_pool *p, uint64_t end, const int32_t *t, int len)
{
    if (end >= p->head || end + 1 < (uint64_t)len) return false;
    uint64_t first = end + 1 - (uint64_t)len;
    if (p->head - first > p->cap) return false; /* overwritten since */
    for (int i = 0; i < len; i++)
        if (p->ring[(first + (uint64_t)i) % p->cap] != t[i]) return false;
    return true;
}

int spec_pool_propose(const struct spec_pool *p, const int32_t *tokens, int n, int k, int32_t *out)
{
    if (!p || k <= 0) return 0;
    int top = p->ngram_max < n ? p->ngram_max : n;
    for (int len = top; len >= p->ngram_min; len--) {
        const int32_t *tail = tokens + n - len;
        uint64_t slot = p->slots[pool_hash(tail, len) % p->n_slots];
        if (slot == 0 || !pool_match(p, slot - 1, tail, len)) continue;
        int m = 0;
        for (uint64_t q = slot; m < k && q < p->head; q++) {
            int32_t t = p->ring[q % p->cap];
            if (t == SPEC_POOL_SEP) break;
            out[m++] = t;
        }
        if (m > 0) return m;
    }
    return 0;
}
