/* Tokenizer vectors made by llama.cpp itself (hack/gen-tokenizer-vectors.py, through the oracle):
 * llama.cpp's test strings plus corner cases for each pre-tokenizer, tokenized with cut-down copies
 * of real vocabularies (llama-bpe, qwen2, qwen35, command-r, refact, mpt; llama-bpe's merges under
 * the gpt-4o and tekken pre-tokenizers; SentencePiece without the space prefix, as Gemma's is),
 * and the SmolLM2 model's whole tokenizer from ../shared with its chat prompts (special tokens
 * parsed). Every id must match. */
#include "common/err.h"
#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/testutil.h"

#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define VECTOR_GLOB "tests/testdata/tokenizer/*.json"

static glob_t vectors;

/* NULL (after a SKIP line) when the file holds tensors this build cannot read: the tokenizer
 * needs only the metadata, but the GGUF reader checks every tensor's type. */
static struct tokenizer *load(const char *path)
{
    struct gguf *g;
    struct tokenizer *t;
    char err[256];
    int rc = gguf_open(path, &g, err, sizeof(err));
    if (rc == ERR_UNSUPPORTED) {
        printf("SKIP: %s: %s\n", path, err);
        return NULL;
    }
    ck_assert_msg(rc == 0, "%s: %s", path, err);
    ck_assert_msg(tokenizer_load(g, &t, err, sizeof(err)) == 0, "%s: %s", path, err);
    gguf_close(g);
    return t;
}

/* Encodes every case of `doc` with t; returns the number that differ (each one printed). */
static int check_cases(struct tokenizer *t, const json_t *doc, const char *name)
{
    size_t i, bad = 0, n = 0;
    json_t *c;
    bool default_special = json_is_true(json_object_get(doc, "parse_special"));
    json_array_foreach(json_object_get(doc, "cases"), i, c)
    {
        const json_t *text = json_object_get(c, "text"), *want = json_object_get(c, "ids");
        const json_t *ps = json_object_get(c, "parse_special");
        bool special = ps ? json_is_true(ps) : default_special;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        ck_assert_int_eq(tokenizer_encode(t, json_string_value(text), json_string_length(text),
                                          false, special, &ids, &n_ids),
                         0);
        bool same = n_ids == json_array_size(want);
        for (size_t k = 0; same && k < n_ids; k++)
            same = ids[k] == json_integer_value(json_array_get(want, k));
        if (!same) {
            fprintf(stderr, "%s case %zu: %.80s\n  want:", name, i, json_string_value(text));
            for (size_t k = 0; k < json_array_size(want); k++)
                fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, k)));
            fprintf(stderr, "\n  got: ");
            for (size_t k = 0; k < n_ids; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n");
            bad++;
        }
        free(ids);
        n++;
    }
    printf("%s: %zu/%zu vectors match\n", name, n - bad, n);
    return (int)bad;
}

START_TEST(test_tokenizer_vectors_match_llama_cpp)
{
    const char *path = vectors.gl_pathv[_i];
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    ck_assert_msg(doc, "%s: %s", path, je.text);
    struct tokenizer *t;
    const char *vocab = json_string_value(json_object_get(doc, "vocab"));
    if (vocab) {
        char gpath[512];
        snprintf(gpath, sizeof(gpath), "tests/testdata/tokenizer/%s", vocab);
        t = load(gpath);
        ck_assert_ptr_nonnull(t);
    } else { /* a model from ../shared */
        const char *p = test_shared_path(json_string_value(json_object_get(doc, "model")));
        if (!p) {
            json_decref(doc);
            return;
        }
        t = load(p);
    }
    if (!t) {
        json_decref(doc);
        return;
    }
    int bad = check_cases(t, doc, path);
    ck_assert_msg(bad == 0, "%s: %d strings tokenize differently from llama.cpp", path, bad);
    tokenizer_free(t);
    json_decref(doc);
}
END_TEST

Suite *tokenizer_vectors_suite(void)
{
    Suite *s = suite_create("tokenizer_vectors");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    if (glob(VECTOR_GLOB, 0, NULL, &vectors) != 0) vectors.gl_pathc = 0;
    if (vectors.gl_pathc == 0) fprintf(stderr, "no vectors match %s\n", VECTOR_GLOB);
    tcase_add_loop_test(tc, test_tokenizer_vectors_match_llama_cpp, 0, (int)vectors.gl_pathc);
    suite_add_tcase(s, tc);
    return s;
}
