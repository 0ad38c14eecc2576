/* The vocabulary as a byte trie in depth-first preorder (the layout of llguidance's toktrie): a
 * node's subtree is one contiguous range, so a walk skips a rejected subtree with one jump. Built
 * once per served model from the tokens' output bytes, sorted. */
#include "engine/grammar/grammar_priv.h"

#include "common/err.h"
#include "engine/text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* Orders token ids by their bytes, then by id (qsort_r's context: the vocabulary). */
static int piece_cmp(const void *a, const void *b, void *ctx)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const struct grammar_vocab *v = ctx;
    size_t lx = v->piece_len[x], ly = v->piece_len[y];
    int c = memcmp(v->piece[x], v->piece[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

/* Builds the preorder trie from ids sorted by bytes. Iterative: a path of open nodes, one per
 * depth, closed (their `end` written) when the next token leaves them. */
static int vocab_build(struct grammar_vocab *v, int32_t *ids, int32_t n)
{
    size_t total = 1;
    for (int32_t i = 0; i < n; i++) total += v->piece_len[ids[i]];
    if (total > INT32_MAX / 2) return ERR_TOO_BIG;
    v->byte = malloc(total);
    v->end = malloc(total * sizeof(int32_t));
    v->tok0 = malloc((total + 1) * sizeof(int32_t));
    v->depth = malloc(total);
    v->toks = malloc(((size_t)n + 1) * sizeof(int32_t));
    size_t max_len = 1;
    for (int32_t i = 0; i < n; i++)
        if (v->piece_len[ids[i]] > max_len) max_len = v->piece_len[ids[i]];
    v->max_len = max_len;
    int32_t *path = malloc((max_len + 1) * sizeof(int32_t));
    if (!v->byte || !v->end || !v->tok0 || !v->depth || !v->toks || !path) {
        free(path);
        return ERR_NOMEM;
    }
    int32_t nodes = 1, ntok = 0;
    v->byte[0] = 0;
    v->depth[0] = 0;
    v->tok0[0] = 0;
    path[0] = 0;
    size_t open = 1;    /* nodes on the path: path[0..open) at depths 0..open-1 */
    int32_t filled = 0; /* tok0[0..filled] written */
    const char *prev = "";
    size_t prev_len = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *s = v->piece[ids[i]];
        size_t len = v->piece_len[ids[i]];
        size_t common = 0;
        while (common < len && common < prev_len && s[common] == prev[common]) common++;
        /* close nodes deeper than the common prefix */
        while (open > common + 1) {
            open--;
            v->end[path[open]] = nodes;
        }
        for (size_t d = common; d < len; d++) {
            int32_t nd = nodes++;
            v->byte[nd] = (uint8_t)s[d];
            v->depth[nd] = d + 1 > 255 ? 255 : (uint8_t)(d + 1);
            path[open++] = nd;
        }
        /* The token lives at the node of its last byte. Sorted order visits token nodes in
         * preorder, so the ranges fill forwards. */
        int32_t node = path[open - 1];
        while (filled < node) v->tok0[++filled] = ntok;
        v->toks[ntok++] = ids[i];
        prev = s;
        prev_len = len;
    }
    while (open > 0) {
        open--;
        v->end[path[open]] = nodes;
    }
    free(path);
    v->n_nodes = nodes;
    while (filled < nodes) v->tok0[++filled] = ntok;
    return 0;
}

static int vocab_finish(struct grammar_vocab *v)
{
    int32_t *ids = malloc((size_t)v->n_vocab * sizeof(int32_t));
    if (!ids) return ERR_NOMEM;
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_vocab; i++)
        if (v->piece_len[i] > 0) ids[n++] = i;
    qsort_r(ids, (size_t)n, sizeof(*ids), piece_cmp, v);
    int rc = vocab_build(v, ids, n);
    free(ids);
    return rc;
}

int grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens, int32_t n,
                              const int32_t *eog, int n_eog, struct grammar_vocab **out)
{
    if (n <= 0 || n_eog < 0) return ERR_INVAL;
    struct grammar_vocab *v = calloc(1, sizeof(*v));
    if (!v) return ERR_NOMEM;
    int rc = ERR_NOMEM;
    v->n_vocab = n;
    v->piece = malloc((size_t)n * sizeof(*v->piece));
    v->piece_len = malloc((size_t)n * sizeof(*v->piece_len));
    v->eog = malloc(((size_t)n_eog + 1) * sizeof(*v->eog));
    if (!v->piece || !v->piece_len || !v->eog) goto fail;
    for (int32_t i = 0; i < n; i++) {
        v->piece[i] = pieces[i] ? pieces[i] : "";
        v->piece_len[i] = pieces[i] ? lens[i] : 0;
    }
    for (int i = 0; i < n_eog; i++) {
        if (eog[i] < 0 || eog[i] >= n) {
            rc = ERR_INVAL;
            goto fail;
        }
        v->eog[i] = eog[i];
        v->piece_len[eog[i]] = 0; /* never part of the text */
    }
    v->n_eog = n_eog;
    if ((rc = vocab_finish(v))) goto fail;
    *out = v;
    return 0;
fail:
    grammar_vocab_free(v);
    return rc;
}

int grammar_vocab_new(const struct tokenizer *tok, struct grammar_vocab **out)
{
    int32_t n = tokenizer_vocab_size(tok);
    if (n <= 0) return ERR_INVAL;
    const char **pieces = malloc((size_t)n * sizeof(*pieces));
    size_t *lens = malloc((size_t)n * sizeof(*lens));
    int32_t *eog = malloc((size_t)n * sizeof(*eog));
    int n_eog = 0, rc = ERR_NOMEM;
    if (!pieces || !lens || !eog) goto out;
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        enum tokenizer_token_type t = tokenizer_token_type(tok, i);
        const char *p = tokenizer_token_piece(tok, i, false, &len);
        /* Control tokens have no output bytes; unused ones can never be produced. */
        pieces[i] = t == TOKENIZER_TOKEN_UNUSED ? NULL : p;
        lens[i] = pieces[i] ? len : 0;
        if (tokenizer_is_eog(tok, i)) eog[n_eog++] = i;
    }
    rc = grammar_vocab_from_pieces(pieces, lens, n, eog, n_eog, out);
out:
    free(pieces);
    free(lens);
    free(eog);
    return rc;
}

void grammar_vocab_free(struct grammar_vocab *v)
{
    if (!v) return;
    free(v->byte);
    free(v->end);
    free(v->tok0);
    free(v->toks);
    free(v->depth);
    free(v->piece);
    free(v->piece_len);
    free(v->eog);
    free(v);
}

int32_t grammar_vocab_size(const struct grammar_vocab *v)
{
    return v->n_vocab;
}

size_t grammar_vocab_nodes(const struct grammar_vocab *v)
{
    return (size_t)v->n_nodes;
}

size_t grammar_mask_words(const struct grammar_vocab *v)
{
    return ((size_t)v->n_vocab + 31) / 32;
}
