/* Byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's llm_tokenizer_bpe: the text is
 * split into words by the pre-tokenizer, each word's bytes are mapped to GPT-2's printable code points,
 * and within a word the adjacent pair with the lowest merge rank is merged first (ties: leftmost)
 * until no pair is in tokenizer.ggml.merges. Invalid UTF-8 input becomes U+FFFD first, as in
 * llama.cpp. */
#include "engine/text/tokenizer_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <stdlib.h>
#include <string.h>

struct bpe {
    const struct tokenizer *t;
    const char *w; /* the byte-encoded word */
    struct tokenizer_sym *syms;
    size_t syms_cap;
    struct tokenizer_heap heap;
};

static int add_bigram(struct bpe *st, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return 0;
    const struct tokenizer_sym *l = &st->syms[left], *r = &st->syms[right];
    int32_t rank = tokenizer_merge_rank(st->t, st->w + l->off, l->len, st->w + r->off, r->len);
    if (rank < 0) return 0;
    struct tokenizer_bigram b = {(double)rank, left, right, l->len + r->len};
    return tokenizer_heap_push(&st->heap, b);
}

static int emit_symbol(const struct bpe *st, const struct tokenizer_sym *sym,
                       struct tokenizer_ids *ids)
{
    int32_t id = tokenizer_find(st->t, st->w + sym->off, sym->len);
    if (id >= 0) return tokenizer_ids_push(ids, id);
    /* Not in the vocabulary (a broken vocabulary): single-byte entries, as llama.cpp does. */
    for (uint32_t k = 0; k < sym->len; k++) {
        int32_t b = tokenizer_find(st->t, st->w + sym->off + k, 1);
        int rc = b >= 0 ? tokenizer_ids_push(ids, b) : 0;
        if (rc) return rc;
    }
    return 0;
}

static int merge_word(struct bpe *st, const char *w, size_t n, struct tokenizer_ids *ids)
{
    int rc;
    st->w = w;
    if (st->t->ignore_merges) {
        int32_t id = tokenizer_find(st->t, w, n);
        if (id >= 0) return tokenizer_ids_push(ids, id);
    }
    if (n > st->syms_cap) {
        struct tokenizer_sym *s = realloc(st->syms, n * sizeof(*s));
        if (!s) return ERR_NOMEM;
        st->syms = s;
        st->syms_cap = n;
    }
    size_t n_syms = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = unicode_utf8_len((uint8_t)w[off]);
        if (cl > n - off) cl = n - off;
        st->syms[n_syms] = (struct tokenizer_sym){(uint32_t)off, (uint32_t)cl, (int32_t)n_syms - 1,
                                                  off + cl == n ? -1 : (int32_t)n_syms + 1};
        n_syms++;
        off += cl;
    }
    st->heap.n = 0;
    for (size_t i = 1; i < n_syms; i++)
        if ((rc = add_bigram(st, (int32_t)i - 1, (int32_t)i))) return rc;
    while (st->heap.n) {
        struct tokenizer_bigram b = tokenizer_heap_pop(&st->heap);
        struct tokenizer_sym *l = &st->syms[b.left], *r = &st->syms[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) st->syms[r->next].prev = b.left;
        if ((rc = add_bigram(st, l->prev, b.left))) return rc;
        if ((rc = add_bigram(st, b.left, l->next))) return rc;
    }
    for (int32_t i = n_syms ? 0 : -1; i >= 0; i = st->syms[i].next)
        if ((rc = emit_symbol(st, &st->syms[i], ids))) return rc;
    return 0;
}

/* Word w[0..n): from the cache, or merged and then cached. */
static int encode_word(struct bpe *st, const char *w, size_t n, struct tokenizer_ids *ids)
{
    struct tokenizer_cache *c = st->t->cache;
    if (!c || n > TOKENIZER_CACHE_KEY_MAX) return merge_word(st, w, n, ids);
    int32_t got[TOKENIZER_CACHE_IDS_MAX];
    uint64_t h = tokenizer_hash(TOKENIZER_HASH_SEED, w, n);
    int k = tokenizer_cache_get(c, h, w, n, got), rc;
    if (k >= 0) {
        for (int i = 0; i < k; i++)
            if ((rc = tokenizer_ids_push(ids, got[i]))) return rc;
        return 0;
    }
    size_t before = ids->n;
    if ((rc = merge_word(st, w, n, ids))) return rc;
    tokenizer_cache_put(c, h, w, n, ids->n > before ? ids->v + before : NULL, ids->n - before);
    return 0;
}

int tokenizer_bpe_encode(const struct tokenizer *t, const char *text, size_t len,
                         struct tokenizer_ids *ids)
{
    struct bpe st = {.t = t};
    uint32_t *cpts = NULL, *lens = NULL;
    char *word = NULL;
    size_t n = 0, n_words = 0;
    int rc = ERR_NOMEM;

    if (len > UINT32_MAX / 8) {
        rc = ERR_TOO_BIG;
        goto out;
    }
    cpts = malloc((len ? len : 1) * sizeof(*cpts));
    if (!cpts) goto out;
    for (size_t pos = 0; pos < len;) /* ASCII is its own code point */
        cpts[n++] =
            (uint8_t)text[pos] < 0x80 ? (uint8_t)text[pos++] : unicode_decode(text, len, &pos);
    if ((rc = tokenizer_pretok_split(t->pre, cpts, n, &lens, &n_words))) goto out;

    /* A code point is at most 4 UTF-8 bytes, each of which maps to a 2-byte character. */
    rc = ERR_NOMEM;
    size_t max_word = 0;
    for (size_t i = 0; i < n_words; i++)
        if (lens[i] > max_word) max_word = lens[i];
    if (!(word = malloc(max_word * 8 + 1))) goto out;

    size_t at = 0;
    for (size_t i = 0; i < n_words; i++) {
        size_t wn = 0;
        for (size_t k = at; k < at + lens[i]; k++) {
            char u8[4];
            size_t ul = unicode_encode(cpts[k], u8);
            for (size_t j = 0; j < ul; j++)
                wn += unicode_encode(unicode_byte_to_cpt((uint8_t)u8[j]), word + wn);
        }
        at += lens[i];
        if ((rc = encode_word(&st, word, wn, ids))) goto out;
    }
    rc = 0;
out:
    free(cpts);
    free(lens);
    free(word);
    free(st.syms);
    free(st.heap.v);
    return rc;
}
