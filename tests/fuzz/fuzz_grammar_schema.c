/* Fuzz target for JSON Schema -> GBNF (engine/grammar/grammar_schema.c): arbitrary bytes parsed as
 * a schema and compiled over a small vocabulary. A refusal must come with a message; a compiled
 * grammar is walked a few steps under its mask, and a walk that ends must have written JSON that
 * parses (the converter's promise: only instances). A violation aborts. */
#include "engine/grammar/grammar_schema.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/grammar/grammar.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_grammar_schema: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char *const pieces[] = {"a", "b", "0",     "1",   "{",    "}",     "\"",   ":",
                                     ",", " ", "[",     "]",   "true", "false", "null", "-",
                                     ".", "e", "\"a\"", "{\"", "\":",  "\\",    "u",    "</s>"};
#define N_PIECES ((int32_t)(sizeof(pieces) / sizeof(pieces[0])))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t lens[N_PIECES];
    for (int32_t i = 0; i < N_PIECES; i++) lens[i] = strlen(pieces[i]);
    int32_t eos = N_PIECES - 1;
    struct grammar_vocab *v = NULL;
    CHECK(grammar_vocab_from_pieces(pieces, lens, N_PIECES, &eos, 1, &v) == 0);
    struct grammar *g = NULL;
    char err[320];
    err[0] = 0;
    int rc = grammar_schema_compile_text((const char *)data, size, v, &g, err, sizeof(err));
    if (rc != 0) {
        CHECK(g == NULL && err[0] != 0);
        grammar_vocab_free(v);
        return 0;
    }
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    uint32_t mask[(N_PIECES + 31) / 32];
    struct buf out;
    buf_init(&out, 0);
    CHECK(a != NULL);
    if (grammar_matcher_new(g, a, &m) != 0) goto done;
    for (int step = 0; step < 64; step++) {
        int n = grammar_matcher_mask(m, a, mask);
        if (n <= 0) break;
        if ((mask[eos >> 5] >> (eos & 31)) & 1) { /* the grammar accepts: what we wrote is JSON */
            json_t *j = json_loadb(out.data ? out.data : "", out.len,
                                   JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            if (!j) fprintf(stderr, "fuzz_grammar_schema: not JSON: %s\n", buf_cstr(&out));
            CHECK(j != NULL);
            json_decref(j);
            break;
        }
        int32_t pick = -1;
        for (int32_t t = 0; t < N_PIECES && pick < 0; t++)
            if ((mask[t >> 5] >> (t & 31)) & 1 && (t + step) % 3 == 0) pick = t;
        for (int32_t t = 0; t < N_PIECES && pick < 0; t++)
            if ((mask[t >> 5] >> (t & 31)) & 1) pick = t;
        if (grammar_matcher_accept(m, a, pick) != 0) break;
        buf_puts(&out, pieces[pick]);
    }
done:
    buf_fini(&out);
    grammar_matcher_free(m);
    grammar_arena_free(a);
    grammar_unref(g);
    grammar_vocab_free(v);
    return 0;
}
