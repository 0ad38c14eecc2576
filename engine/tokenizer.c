/* Tokenizer front end: splits the input around special-token texts (longest first, like llama.cpp's
 * tokenizer_st_partition), hands each raw fragment to the SentencePiece or byte-level BPE encoder,
 * and adds BOS/EOS. Also the bigram heap both encoders share. */
#include "engine/tokenizer_impl.h"

#include "common/err.h"

#include <stdlib.h>
#include <string.h>

static bool bigram_less(const struct tokenizer_bigram *a, const struct tokenizer_bigram *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

int tokenizer_heap_push(struct tokenizer_heap *h, struct tokenizer_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct tokenizer_bigram *v = realloc(h->v, cap * sizeof(*v));
        if (!v) return ERR_NOMEM;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_less(&b, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = b;
    return 0;
}

struct tokenizer_bigram tokenizer_heap_pop(struct tokenizer_heap *h)
{
    struct tokenizer_bigram top = h->v[0];
    struct tokenizer_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_less(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_less(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* A piece of the input: raw text still to tokenize, or an already-recognized special token. */
struct fragment {
    size_t off, len; /* raw text; len 0 for a token */
    int32_t token;   /* TOKENIZER_NULL for raw text */
};

struct fragments {
    struct fragment *v;
    size_t n, cap;
};

static int frag_insert(struct fragments *f, size_t at, struct fragment x)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct fragment *v = realloc(f->v, cap * sizeof(*v));
        if (!v) return ERR_NOMEM;
        f->v = v;
        f->cap = cap;
    }
    memmove(&f->v[at + 1], &f->v[at], (f->n - at) * sizeof(*f->v));
    f->v[at] = x;
    f->n++;
    return 0;
}

static bool is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r'); /* C isspace in the "C" locale */
}

/* Splits every raw fragment at each occurrence of special token `id`, dropping whitespace around
 * it as its strip flags ask. */
static int split_on(struct fragments *f, const char *text, const char *tok, size_t tok_len,
                    int32_t id, uint8_t strip)
{
    for (size_t i = 0; i < f->n; i++) {
        struct fragment *fr = &f->v[i];
        if (fr->token != TOKENIZER_NULL || fr->len < tok_len) continue;
        const char *base = text + fr->off;
        const char *hit = memmem(base, fr->len, tok, tok_len);
        if (!hit) continue;
        size_t pre = (size_t)(hit - base);
        struct fragment rest = {fr->off + pre + tok_len, fr->len - pre - tok_len, TOKENIZER_NULL};
        if (strip & TOKENIZER_STRIP_RIGHT)
            while (rest.len && is_space(text[rest.off])) rest.off++, rest.len--;
        if (strip & TOKENIZER_STRIP_LEFT)
            while (pre && is_space(base[pre - 1])) pre--;
        struct fragment special = {0, 0, id};
        int rc;
        if (pre) {
            fr->len = pre;
            i++;
            if ((rc = frag_insert(f, i, special))) return rc;
        } else {
            *fr = special;
        }
        if (rest.len) {
            if ((rc = frag_insert(f, i + 1, rest))) return rc;
        }
        /* The loop continues with `rest`, which may hold more occurrences. */
    }
    return 0;
}

static int partition(const struct tokenizer *t, const char *text, size_t len, bool parse_special,
                     struct fragments *f)
{
    int rc = frag_insert(f, 0, (struct fragment){0, len, TOKENIZER_NULL});
    if (rc) return rc;
    for (size_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        uint8_t ty = t->tokens[id].type;
        /* Without parse_special only user-defined tokens are pre-split (as Hugging Face does). */
        if (!parse_special && ty != TOKENIZER_TOKEN_USER_DEFINED) continue;
        const struct tokenizer_token *tk = &t->tokens[id];
        if ((rc = split_on(f, text, tokenizer_text_of(t, id), tk->text_len, id, tk->strip)))
            return rc;
    }
    return 0;
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **ids_out, size_t *n_out)
{
    struct fragments f = {0};
    struct tokenizer_ids ids = {0};
    char *buf = NULL;
    int rc;

    if (add_special && t->add_bos && (rc = tokenizer_ids_push(&ids, t->bos))) goto out;
    if (len > 0 && (rc = partition(t, text, len, parse_special, &f))) goto out;

    bool prev_special = true; /* SentencePiece: a space prefix before text that starts a segment */
    for (size_t i = 0; i < f.n; i++) {
        const struct fragment *fr = &f.v[i];
        if (fr->token != TOKENIZER_NULL) {
            if ((rc = tokenizer_ids_push(&ids, fr->token))) goto out;
            prev_special = true;
            continue;
        }
        if (t->kind == TOKENIZER_BPE) {
            rc = tokenizer_bpe_encode(t, text + fr->off, fr->len, &ids);
        } else if (t->add_space_prefix && prev_special) {
            free(buf);
            if (!(buf = malloc(fr->len + 1))) {
                rc = ERR_NOMEM;
                goto out;
            }
            buf[0] = ' ';
            memcpy(buf + 1, text + fr->off, fr->len);
            rc = tokenizer_spm_encode(t, buf, fr->len + 1, &ids);
        } else {
            rc = tokenizer_spm_encode(t, text + fr->off, fr->len, &ids);
        }
        if (rc) goto out;
        prev_special = false;
    }
    if (add_special && t->add_eos && (rc = tokenizer_ids_push(&ids, t->eos))) goto out;

    *ids_out = ids.n ? ids.v : NULL;
    *n_out = ids.n;
    if (!ids.n) free(ids.v);
    ids.v = NULL;
    rc = 0;
out:
    free(ids.v);
    free(f.v);
    free(buf);
    return rc;
}
