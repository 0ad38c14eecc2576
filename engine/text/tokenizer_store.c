/* The tokenizer's storage primitives, shared by the loader (tokenizer_vocab.c), the encoders and
 * the detokenizer: the arena every token text, piece and merge lives in, the FNV-1a hash and the
 * two open-addressing lookups (token text -> id, merge -> rank) over tables the loader fills, and
 * the encoders' id vector. A leaf: it calls no other tokenizer file. */
#include "engine/text/tokenizer_priv.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

uint64_t tokenizer_hash(uint64_t h, const void *p, size_t n)
{
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int tokenizer_ids_push(struct tokenizer_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof(*v));
        if (!v) return ERR_NOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

int tokenizer_arena_add(struct tokenizer *t, const void *p, size_t n, uint32_t *off)
{
    if (t->arena_len + n > UINT32_MAX) return ERR_TOO_BIG;
    if (t->arena_len + n > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 4096;
        while (cap < t->arena_len + n) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return ERR_NOMEM;
        t->arena = a;
        t->arena_cap = cap;
    }
    if (n) memcpy(t->arena + t->arena_len, p, n);
    *off = (uint32_t)t->arena_len;
    t->arena_len += n;
    return 0;
}

int32_t tokenizer_find(const struct tokenizer *t, const char *text, size_t len)
{
    size_t i = (size_t)tokenizer_hash(TOKENIZER_HASH_SEED, text, len) & t->tok_hash_mask;
    for (;; i = (i + 1) & t->tok_hash_mask) {
        int32_t id = t->tok_hash[i];
        if (id < 0) return TOKENIZER_NULL;
        const struct tokenizer_token *tk = &t->tokens[id];
        if (tk->text_len == len && memcmp(t->arena + tk->text_off, text, len) == 0) return id;
    }
}

uint64_t tokenizer_merge_hash(const char *left, size_t left_len, const char *right,
                              size_t right_len)
{
    uint64_t h = tokenizer_hash(TOKENIZER_HASH_SEED, left, left_len);
    h = tokenizer_hash(h, " ", 1);
    return tokenizer_hash(h, right, right_len);
}

int32_t tokenizer_merge_rank(const struct tokenizer *t, const char *left, size_t left_len,
                             const char *right, size_t right_len)
{
    if (!t->merge_hash) return -1;
    size_t i = (size_t)tokenizer_merge_hash(left, left_len, right, right_len) & t->merge_hash_mask;
    for (;; i = (i + 1) & t->merge_hash_mask) {
        int32_t r = t->merge_hash[i];
        if (r < 0) return -1;
        const struct tokenizer_merge *m = &t->merges[r];
        const char *s = t->arena + m->off;
        if (m->left_len == left_len && m->right_len == right_len &&
            memcmp(s, left, left_len) == 0 && memcmp(s + left_len + 1, right, right_len) == 0)
            return r;
    }
}
