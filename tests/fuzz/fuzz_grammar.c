/* Fuzz target for the GBNF compiler and the matcher (engine/grammar/). Compiles arbitrary bytes as
 * a grammar over a small vocabulary; when it compiles, walks a few steps, checking at each that the
 * mask is consistent with the matcher: every allowed token is accepted by a copy of the matcher,
 * an end-of-generation token only where the grammar accepts. A mismatch aborts. */
#include "engine/grammar/grammar.h"

#include "common/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_grammar: check failed: %s (line %d)\n", #cond, __LINE__);        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char *const pieces[] = {"a", "b",  "0",  "1",   "{",    "}",   "\"",   ":",
                                     ",", " ",  "ab", "\"a", "a\"",  "{\"", "\xc3", "\xa9",
                                     "é", "\n", "[",  "]",   "true", "-",   "9.",   "</s>"};
#define N_PIECES ((int32_t)(sizeof(pieces) / sizeof(pieces[0])))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t lens[N_PIECES];
    for (int32_t i = 0; i < N_PIECES; i++) lens[i] = strlen(pieces[i]);
    int32_t eos = N_PIECES - 1;
    struct grammar_vocab *v = NULL;
    CHECK(grammar_vocab_from_pieces(pieces, lens, N_PIECES, &eos, 1, &v) == 0);
    struct grammar *g = NULL;
    char err[256];
    err[0] = 0;
    int rc = grammar_compile((const char *)data, size, v, &g, err, sizeof(err));
    if (rc != 0) {
        CHECK(g == NULL && err[0] != 0);
        grammar_vocab_free(v);
        return 0;
    }
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    uint32_t mask[(N_PIECES + 31) / 32];
    CHECK(a != NULL);
    if (grammar_matcher_new(g, a, &m) != 0) goto out;
    for (int step = 0; step < 16; step++) {
        int n = grammar_matcher_mask(m, a, mask);
        if (n <= 0) break;
        int32_t pick = -1;
        for (int32_t t = 0; t < N_PIECES; t++) {
            if (!((mask[t >> 5] >> (t & 31)) & 1)) continue;
            if (t == eos) CHECK(grammar_matcher_accepting(m));
            struct grammar_matcher *c = NULL;
            if (grammar_matcher_clone(m, &c) != 0) goto out;
            rc = grammar_matcher_accept(c, a, t);
            grammar_matcher_free(c);
            if (rc == ERR_NOMEM || rc == ERR_TOO_BIG) goto out;
            CHECK(rc == 0);
            if (t != eos && (pick < 0 || (size_t)t % 7 == (size_t)step % 7)) pick = t;
        }
        if (pick < 0 || grammar_matcher_accept(m, a, pick) != 0) break;
    }
out:
    grammar_matcher_free(m);
    grammar_arena_free(a);
    grammar_unref(g);
    grammar_vocab_free(v);
    return 0;
}
