/* Fuzz target for regular expressions -> GBNF (engine/grammar/grammar_regex.c): arbitrary bytes as
 * a pattern, written as JSON string content between quotes. A refusal must come with a message;
 * an accepted pattern must give GBNF the grammar compiler accepts (the regex compiler never writes
 * a grammar it cannot compile, nor a repetition of something empty), and a walk under its mask
 * that reaches an accepting state must have written a JSON string that parses. A violation
 * aborts. */
#include "engine/grammar/grammar_regex.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/grammar/grammar.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_grammar_regex: check failed: %s (line %d)\n", #cond, __LINE__);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static const char *const pieces[] = {"a", "b", "0", "1",   "\"",    "\\",       "\\\"", "-",   ".",
                                     " ", "u", "n", "\\n", "\\u00", "\xc3\xa9", "x",    "</s>"};
#define N_PIECES ((int32_t)(sizeof(pieces) / sizeof(pieces[0])))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t lens[N_PIECES];
    for (int32_t i = 0; i < N_PIECES; i++) lens[i] = strlen(pieces[i]);
    int32_t eos = N_PIECES - 1;
    struct grammar_vocab *v = NULL;
    CHECK(grammar_vocab_from_pieces(pieces, lens, N_PIECES, &eos, 1, &v) == 0);
    struct buf gb;
    buf_init(&gb, 1u << 20);
    char err[256];
    err[0] = 0;
    struct grammar_regex_opts o = {.json_string = true, .min_chars = -1, .max_chars = -1};
    if (size > 2 && data[0] == '#') /* "#<n>" first: a maxLength bound, as a schema gives */
        o.max_chars = data[1] % 16, data += 2, size -= 2;
    int rc = buf_puts(&gb, "root ::= \"\\\"\" ");
    if (!rc) rc = grammar_regex_gbnf((const char *)data, size, &o, &gb, err, sizeof(err));
    if (rc != 0) {
        CHECK(err[0] != 0);
        buf_fini(&gb);
        grammar_vocab_free(v);
        return 0;
    }
    CHECK(buf_puts(&gb, " \"\\\"\"\n") == 0);
    struct grammar *g = NULL;
    rc = grammar_compile(buf_cstr(&gb), gb.len, v, &g, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "fuzz_grammar_regex: %s\n%s\n", err, buf_cstr(&gb));
    CHECK(rc == 0 || rc == ERR_TOO_BIG);
    buf_fini(&gb);
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    uint32_t mask[(N_PIECES + 31) / 32];
    struct buf out;
    buf_init(&out, 0);
    CHECK(a != NULL);
    if (!g || grammar_matcher_new(g, a, &m) != 0) goto done;
    for (int step = 0; step < 48; step++) {
        int n = grammar_matcher_mask(m, a, mask);
        if (n <= 0) break;
        if ((mask[eos >> 5] >> (eos & 31)) & 1) { /* accepting: a JSON string was written */
            json_t *j = json_loadb(out.data ? out.data : "", out.len, JSON_DECODE_ANY, NULL);
            if (!j) fprintf(stderr, "fuzz_grammar_regex: not a JSON string: %s\n", buf_cstr(&out));
            CHECK(j != NULL && json_is_string(j));
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
