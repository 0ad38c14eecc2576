/* SentencePiece-style BPE (tokenizer.ggml.model = "llama"), as llama.cpp's llm_tokenizer_spm: spaces
 * become U+2581, the text starts as one symbol per UTF-8 character, and the adjacent pair whose
 * concatenation is the highest-scoring vocabulary entry is merged first (ties: leftmost). A final
 * symbol that is not in the vocabulary falls back to its bytes' <0xXX> tokens. */
#include "engine/text/tokenizer_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <stdlib.h>
#include <string.h>

struct spm {
    const struct tokenizer *t;
    const char *s; /* escaped text */
    struct tokenizer_sym *syms;
    struct tokenizer_heap heap;
};

static int try_bigram(struct spm *st, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return 0;
    const struct tokenizer_sym *l = &st->syms[left], *r = &st->syms[right];
    size_t n = (size_t)l->len + r->len;
    int32_t id = tokenizer_find(st->t, st->s + l->off, n); /* l and r are adjacent in s */
    if (id < 0) return 0;
    struct tokenizer_bigram b = {-(double)st->t->tokens[id].score, left, right, (uint32_t)n};
    return tokenizer_heap_push(&st->heap, b);
}

static int emit_symbol(const struct spm *st, const struct tokenizer_sym *sym,
                       struct tokenizer_ids *ids)
{
    int32_t id = tokenizer_find(st->t, st->s + sym->off, sym->len);
    if (id >= 0) return tokenizer_ids_push(ids, id);
    for (uint32_t k = 0; k < sym->len; k++) { /* byte fallback */
        int32_t b = st->t->byte_tokens[(uint8_t)st->s[sym->off + k]];
        if (b < 0) continue; /* no byte token and no <unk>: nothing to emit */
        int rc = tokenizer_ids_push(ids, b);
        if (rc) return rc;
    }
    return 0;
}

/* The merge loop over symbols a..b-1 (linked to each other, none outside), then their ids. */
static int merge_span(struct spm *st, int32_t a, int32_t b, struct tokenizer_ids *ids)
{
    int rc;
    st->heap.n = 0;
    for (int32_t i = a + 1; i < b; i++)
        if ((rc = try_bigram(st, i - 1, i))) return rc;
    while (st->heap.n) {
        struct tokenizer_bigram bg = tokenizer_heap_pop(&st->heap);
        struct tokenizer_sym *l = &st->syms[bg.left], *r = &st->syms[bg.right];
        /* Stale: one side was merged elsewhere since this pair was queued. */
        if (l->len == 0 || r->len == 0 || (size_t)l->len + r->len != bg.size) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) st->syms[r->next].prev = bg.left;
        if ((rc = try_bigram(st, l->prev, bg.left))) return rc;
        if ((rc = try_bigram(st, bg.left, l->next))) return rc;
    }
    for (int32_t i = a < b ? a : -1; i >= 0; i = st->syms[i].next)
        if ((rc = emit_symbol(st, &st->syms[i], ids))) return rc;
    return 0;
}

/* Links the characters of s[off, end) as symbols 0.. of st->syms; returns how many. The walk is
 * the one the whole text gets: a truncated character at `end` keeps only the bytes before it. */
static int32_t symbolize(struct spm *st, size_t off, size_t end)
{
    int32_t k = 0;
    while (off < end) {
        size_t cl = unicode_utf8_len((uint8_t)st->s[off]);
        if (cl > end - off) cl = end - off;
        st->syms[k] = (struct tokenizer_sym){(uint32_t)off, (uint32_t)cl, k - 1,
                                             off + cl == end ? -1 : k + 1};
        k++;
        off += cl;
    }
    return k;
}

/* Word s[off, off + n) (t->spm_words): from the cache, or merged and then cached. */
static int encode_word(struct spm *st, size_t off, size_t n, struct tokenizer_ids *ids)
{
    int32_t got[TOKENIZER_CACHE_IDS_MAX];
    uint64_t h = 0;
    int k = -1, rc;
    if (n <= TOKENIZER_CACHE_KEY_MAX) {
        h = tokenizer_hash(TOKENIZER_HASH_SEED, st->s + off, n);
        k = tokenizer_cache_get(st->t->cache, h, st->s + off, n, got);
    }
    if (k >= 0) {
        for (int i = 0; i < k; i++)
            if ((rc = tokenizer_ids_push(ids, got[i]))) return rc;
        return 0;
    }
    size_t before = ids->n;
    if ((rc = merge_span(st, 0, symbolize(st, off, off + n), ids))) return rc;
    if (n <= TOKENIZER_CACHE_KEY_MAX)
        tokenizer_cache_put(st->t->cache, h, st->s + off, n,
                            ids->n > before ? ids->v + before : NULL, ids->n - before);
    return 0;
}

int tokenizer_spm_encode(const struct tokenizer *t, const char *text, size_t len,
                         struct tokenizer_ids *ids)
{
    static const char escaped_space[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */
    struct spm st = {.t = t};
    char *s = NULL;
    int rc = ERR_NOMEM;
    size_t n_spaces = 0, n = 0;

    for (size_t i = 0; i < len; i++) n_spaces += text[i] == ' ';
    if (len > (SIZE_MAX - 1) / 3 || len + 2 * n_spaces > UINT32_MAX) {
        rc = ERR_TOO_BIG;
        goto out;
    }
    s = malloc(len + 2 * n_spaces + 1);
    if (!s) goto out;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + n, escaped_space, 3);
            n += 3;
        } else {
            s[n++] = text[i];
        }
    }
    st.s = s;
    st.syms = malloc((n ? n : 1) * sizeof(*st.syms));
    if (!st.syms) goto out;
    if (!t->spm_words || !t->cache) {
        rc = merge_span(&st, 0, symbolize(&st, 0, n), ids);
        goto out;
    }
    /* Word by word: a word ends before a U+2581 that follows another character, found on the
     * whole text's character walk (an invalid lead byte may swallow a U+2581's bytes). */
    size_t word = 0;
    bool prev_space = false;
    for (size_t off = 0; off < n;) {
        uint8_t b = (uint8_t)s[off];
        if (b < 0x80) { /* ASCII: one byte, not U+2581 */
            prev_space = false;
            off++;
            continue;
        }
        size_t cl = unicode_utf8_len(b);
        if (cl > n - off) cl = n - off;
        bool space = cl == 3 && memcmp(s + off, escaped_space, 3) == 0;
        if (space && !prev_space && off > 0) {
            if ((rc = encode_word(&st, word, off - word, ids))) goto out;
            word = off;
        }
        prev_space = space;
        off += cl;
    }
    rc = n > word ? encode_word(&st, word, n - word, ids) : 0;
out:
    free(s);
    free(st.syms);
    free(st.heap.v);
    return rc;
}
