/* Tokenizer front end: splits the input around special-token texts (longest first, like llama.cpp's
 * tokenizer_st_partition), hands each raw fragment to the SentencePiece or byte-level BPE encoder,
 * and adds BOS/EOS. Also the read-only accessors. */
#include "engine/text/tokenizer_priv.h"

#include "common/buf.h"
#include "common/err.h"

#include <stdlib.h>
#include <string.h>

/* A piece of the input: raw text still to tokenize, or an already-recognized special token. */
struct fragment {
    size_t off, len; /* raw text; len 0 for a token */
    int32_t token;   /* TOKENIZER_NULL for raw text */
};

struct fragments {
    struct fragment *v;
    size_t n, cap;
};

static int frag_push(struct fragments *f, struct fragment x)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct fragment *v = realloc(f->v, cap * sizeof(*v));
        if (!v) return ERR_NOMEM;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = x;
    return 0;
}

static bool is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r'); /* C isspace in the "C" locale */
}

#define MARK_LEN (sizeof(TOKENIZER_TEXT_MARK) - 1)

/* Whether the special-token text at `hit` (inside text) comes right after a TOKENIZER_TEXT_MARK:
 * escaped, so text (tokenizer_escape_special). */
static bool escaped_at(const char *text, const char *hit)
{
    return (size_t)(hit - text) >= MARK_LEN &&
           memcmp(hit - MARK_LEN, TOKENIZER_TEXT_MARK, MARK_LEN) == 0;
}

/* The first occurrence of tok in text[off, off + len) that is not escaped (escapes: parse_special
 * only), or NULL. */
static const char *find_special(const char *text, size_t off, size_t len, const char *tok,
                                size_t tok_len, bool escapes)
{
    const char *p = text + off, *end = text + off + len;
    while ((size_t)(end - p) >= tok_len) {
        const char *hit = memmem(p, (size_t)(end - p), tok, tok_len);
        if (!hit || !escapes || !escaped_at(text, hit)) return hit;
        p = hit + 1;
    }
    return NULL;
}

/* Copies text[0..len) to out without any TOKENIZER_TEXT_MARK; returns the length written. */
static size_t drop_marks(const char *text, size_t len, char *out)
{
    size_t n = 0;
    for (size_t k = 0; k < len;) {
        if (len - k >= MARK_LEN && memcmp(text + k, TOKENIZER_TEXT_MARK, MARK_LEN) == 0) {
            k += MARK_LEN;
            continue;
        }
        out[n++] = text[k++];
    }
    return n;
}

/* Writes `in` to `out` with every raw fragment split at each occurrence of special token `id`
 * (whitespace around it dropped as its strip flags ask), and sets *changed. Nothing is copied until
 * the first occurrence, so the common no-match case costs only the searches; the work is linear in
 * the fragments and occurrences. */
static int split_on(const struct fragments *in, struct fragments *out, bool *changed,
                    const char *text, const struct tokenizer_token *tk, const char *tok, int32_t id,
                    bool escapes)
{
    size_t tok_len = tk->text_len;
    int rc;
    out->n = 0;
    *changed = false;
    for (size_t i = 0; i < in->n; i++) {
        struct fragment fr = in->v[i];
        const char *hit = NULL;
        if (fr.token == TOKENIZER_NULL && fr.len >= tok_len)
            hit = find_special(text, fr.off, fr.len, tok, tok_len, escapes);
        if (!hit) {
            if (*changed && (rc = frag_push(out, fr))) return rc;
            continue;
        }
        if (!*changed) {
            for (size_t k = 0; k < i; k++)
                if ((rc = frag_push(out, in->v[k]))) return rc;
            *changed = true;
        }
        size_t off = fr.off, len = fr.len;
        while (hit) {
            size_t pre = (size_t)(hit - (text + off));
            size_t rest_off = off + pre + tok_len, rest_len = len - pre - tok_len;
            if (tk->strip & TOKENIZER_STRIP_LEFT)
                while (pre && is_space(text[off + pre - 1])) pre--;
            if (tk->strip & TOKENIZER_STRIP_RIGHT)
                while (rest_len && is_space(text[rest_off])) rest_off++, rest_len--;
            if (pre && (rc = frag_push(out, (struct fragment){off, pre, TOKENIZER_NULL})))
                return rc;
            if ((rc = frag_push(out, (struct fragment){0, 0, id}))) return rc;
            off = rest_off;
            len = rest_len;
            hit = find_special(text, off, len, tok, tok_len, escapes);
        }
        if (len && (rc = frag_push(out, (struct fragment){off, len, TOKENIZER_NULL}))) return rc;
    }
    return 0;
}

/* Splits the text around special tokens, longest token text first. On success *f holds the
 * fragments in order. */
static int partition(const struct tokenizer *t, const char *text, size_t len, bool parse_special,
                     struct fragments *f)
{
    struct fragments other = {0};
    int rc = frag_push(f, (struct fragment){0, len, TOKENIZER_NULL});
    for (size_t k = 0; rc == 0 && k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        const struct tokenizer_token *tk = &t->tokens[id];
        /* Without parse_special only user-defined tokens are pre-split (as Hugging Face does). */
        if (!parse_special && tk->type != TOKENIZER_TOKEN_USER_DEFINED) continue;
        bool changed;
        rc = split_on(f, &other, &changed, text, tk, tokenizer_text_of(t, id), id, parse_special);
        if (rc == 0 && changed) {
            struct fragments tmp = *f;
            *f = other;
            other = tmp;
        }
    }
    free(other.v);
    return rc;
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **ids_out, size_t *n_out)
{
    struct fragments f = {0};
    struct tokenizer_ids ids = {0};
    char *buf = NULL, *plain = NULL;
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
        const char *frag = text + fr->off;
        size_t frag_len = fr->len;
        if (parse_special && frag_len >= MARK_LEN &&
            memmem(frag, frag_len, TOKENIZER_TEXT_MARK, MARK_LEN)) {
            free(plain); /* the escapes are not text: drop them */
            if (!(plain = malloc(frag_len))) {
                rc = ERR_NOMEM;
                goto out;
            }
            size_t n = 0;
            for (size_t k = 0; k < frag_len;) {
                if (frag_len - k >= MARK_LEN &&
                    memcmp(frag + k, TOKENIZER_TEXT_MARK, MARK_LEN) == 0) {
                    k += MARK_LEN;
                    continue;
                }
                plain[n++] = frag[k++];
            }
            frag = plain;
            frag_len = n;
            if (!frag_len) continue;
        }
        if (t->kind == TOKENIZER_BPE) {
            rc = tokenizer_bpe_encode(t, frag, frag_len, &ids);
        } else if (t->add_space_prefix && prev_special) {
            free(buf);
            if (!(buf = malloc(frag_len + 1))) {
                rc = ERR_NOMEM;
                goto out;
            }
            buf[0] = ' ';
            memcpy(buf + 1, frag, frag_len);
            rc = tokenizer_spm_encode(t, buf, frag_len + 1, &ids);
        } else {
            rc = tokenizer_spm_encode(t, frag, frag_len, &ids);
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
    free(plain);
    return rc;
}

int tokenizer_escape_special(const struct tokenizer *t, const char *text, size_t len,
                             struct buf *out)
{
    if (len == 0) return 0;
    /* The text's own marks go first: one left at its end would escape the control token a
     * template puts after it, and one inside a token's text would hide it from the scan. */
    char *plain = malloc(len);
    unsigned char *starts = calloc(len, 1);
    int rc = ERR_NOMEM;
    if (!plain || !starts) goto out;
    len = drop_marks(text, len, plain);
    for (size_t k = 0; k < t->n_specials; k++) { /* every start of every control token's text */
        int32_t id = t->specials[k];
        if (t->tokens[id].type == TOKENIZER_TOKEN_USER_DEFINED) continue; /* text either way */
        const char *tok = tokenizer_text_of(t, id);
        size_t tl = t->tokens[id].text_len;
        if (tl == 0 || tl > len) continue;
        for (const char *p = plain, *hit; (size_t)(plain + len - p) >= tl &&
                                          (hit = memmem(p, (size_t)(plain + len - p), tok, tl));
             p = hit + 1)
            starts[hit - plain] = 1;
    }
    rc = 0;
    size_t from = 0;
    for (size_t i = 0; i < len && rc == 0; i++)
        if (starts[i]) {
            if ((rc = buf_append(out, plain + from, i - from)) == 0)
                rc = buf_append(out, TOKENIZER_TEXT_MARK, MARK_LEN);
            from = i;
        }
    if (rc == 0) rc = buf_append(out, plain + from, len - from);
out:
    free(plain);
    free(starts);
    return rc;
}

const char *tokenizer_token_text(const struct tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->tokens[id].text_len;
    return tokenizer_text_of(t, id);
}

enum tokenizer_token_type tokenizer_token_type(const struct tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab) return TOKENIZER_TOKEN_UNUSED;
    return (enum tokenizer_token_type)t->tokens[id].type;
}

float tokenizer_token_score(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->tokens[id].score : 0.0f;
}

enum tokenizer_kind tokenizer_kind(const struct tokenizer *t)
{
    return t->kind;
}

const char *tokenizer_pre_name(const struct tokenizer *t)
{
    return t->pre_name;
}

int32_t tokenizer_vocab_size(const struct tokenizer *t)
{
    return t->n_vocab;
}

int32_t tokenizer_bos(const struct tokenizer *t)
{
    return t->bos;
}

int32_t tokenizer_eos(const struct tokenizer *t)
{
    return t->eos;
}

int32_t tokenizer_eot(const struct tokenizer *t)
{
    return t->eot;
}

bool tokenizer_add_bos(const struct tokenizer *t)
{
    return t->add_bos;
}

bool tokenizer_add_eos(const struct tokenizer *t)
{
    return t->add_eos;
}

bool tokenizer_is_eog(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->tokens[id].eog;
}
