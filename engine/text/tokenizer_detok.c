/* Detokenization: every token's output bytes ("piece") are computed once at load time, so decoding
 * is a table lookup any thread may do; tokenizer_decode concatenates pieces, and the streaming
 * detokenizer re-assembles UTF-8 characters split across tokens so it only ever emits valid UTF-8. */
#include "engine/text/tokenizer_priv.h"

#include "common/err.h"
#include "common/utf8.h"
#include "engine/text/unicode.h"

#include <stdlib.h>
#include <string.h>

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Writes token id's piece (rendering control text) into out (room for 3 * text_len bytes). */
static size_t make_piece(const struct tokenizer *t, int32_t id, char *out)
{
    const struct tokenizer_token *tk = &t->tokens[id];
    const char *s = tokenizer_text_of(t, id);
    size_t n = tk->text_len, o = 0;

    switch (tk->type) {
    case TOKENIZER_TOKEN_UNUSED: return 0;
    case TOKENIZER_TOKEN_CONTROL:
    case TOKENIZER_TOKEN_UNKNOWN:
    case TOKENIZER_TOKEN_USER_DEFINED: memcpy(out, s, n); return n;
    case TOKENIZER_TOKEN_BYTE:
        if (t->kind == TOKENIZER_SPM && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
            hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0) {
            out[0] = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
            return 1;
        }
        return 0;
    default: break;
    }
    if (t->kind == TOKENIZER_SPM) { /* U+2581 -> ' ' */
        for (size_t i = 0; i < n;) {
            if (n - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                out[o++] = ' ';
                i += 3;
            } else {
                out[o++] = s[i++];
            }
        }
        return o;
    }
    /* Byte-level BPE: each code point stands for one byte; others (not produced by the mapping)
     * are kept as they are. */
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cpt = unicode_decode(s, n, &i);
        int b = unicode_cpt_to_byte(cpt);
        if (b >= 0) {
            out[o++] = (char)b;
        } else {
            memcpy(out + o, s + start, i - start);
            o += i - start;
        }
    }
    return o;
}

int tokenizer_detok_build_pieces(struct tokenizer *t)
{
    size_t max_len = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tokens[id].text_len > max_len) max_len = t->tokens[id].text_len;
    char *tmp = malloc(max_len * 3 + 1);
    if (!tmp) return ERR_NOMEM;
    int rc = 0;
    for (int32_t id = 0; id < t->n_vocab && rc == 0; id++) {
        size_t n = make_piece(t, id, tmp);
        uint32_t off = 0;
        /* The arena may move here: make_piece reads it, so the piece is built in tmp first. */
        rc = n ? tokenizer_arena_add(t, tmp, n, &off) : 0;
        t->tokens[id].piece_off = off;
        t->tokens[id].piece_len = (uint32_t)n;
    }
    free(tmp);
    return rc;
}

const char *tokenizer_token_piece(const struct tokenizer *t, int32_t id, bool special, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    const struct tokenizer_token *tk = &t->tokens[id];
    if (!special && (tk->type == TOKENIZER_TOKEN_CONTROL || tk->type == TOKENIZER_TOKEN_UNKNOWN)) {
        *len = 0;
        return t->arena + tk->piece_off;
    }
    *len = tk->piece_len;
    return t->arena + tk->piece_off;
}

int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, bool special,
                     struct buf *out)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_vocab) return ERR_RANGE;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *p = tokenizer_token_piece(t, ids[i], special, &len);
        if (i == 0 && t->add_space_prefix && len > 0 && p[0] == ' ') p++, len--;
        int rc = len ? buf_append(out, p, len) : 0;
        if (rc) return rc;
    }
    return 0;
}

void tokenizer_detok_init(struct tokenizer_detok *d, const struct tokenizer *t, bool special)
{
    memset(d, 0, sizeof(*d));
    d->t = t;
    d->special = special;
}

static int put_replacement(struct buf *out)
{
    return buf_append(out, "\xef\xbf\xbd", 3);
}

int tokenizer_detok_push(struct tokenizer_detok *d, int32_t id, struct buf *out)
{
    size_t len;
    const uint8_t *p = (const uint8_t *)tokenizer_token_piece(d->t, id, d->special, &len);
    size_t i = 0;
    int rc;

    if (!p) return ERR_RANGE;
    /* First complete (or reject) the character held back from earlier tokens. */
    while (d->n_pending) {
        int k = utf8_seq_check(d->pending, d->n_pending);
        if (k == 0) {
            if (i == len) return 0;
            d->pending[d->n_pending++] = p[i++];
        } else if (k > 0) {
            if ((rc = buf_append(out, d->pending, (size_t)k))) return rc;
            d->n_pending = 0;
        } else {
            if ((rc = put_replacement(out))) return rc;
            memmove(d->pending, d->pending + 1, --d->n_pending);
        }
    }
    size_t start = i;
    while (i < len) {
        int k = utf8_seq_check(p + i, len - i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        if (i > start && (rc = buf_append(out, p + start, i - start))) return rc;
        if (k == 0) { /* an incomplete tail (at most 3 bytes) waits for the next token */
            memcpy(d->pending, p + i, len - i);
            d->n_pending = len - i;
            return 0;
        }
        if ((rc = put_replacement(out))) return rc;
        start = ++i;
    }
    return i > start ? buf_append(out, p + start, i - start) : 0;
}

int tokenizer_detok_flush(struct tokenizer_detok *d, struct buf *out)
{
    if (!d->n_pending) return 0;
    d->n_pending = 0;
    return put_replacement(out);
}
