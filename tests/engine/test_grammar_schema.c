/* Unit tests of JSON Schema -> GBNF (engine/grammar/grammar_schema.h): instances of each supported
 * keyword match and non-instances do not, unsupported keywords and malformed schemas are refused
 * naming the keyword, and random walks under the token mask (a stand-in for a random-weight model)
 * always end in JSON that parses and has the schema's shape. */
#include "engine/grammar/grammar_schema.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/grammar/grammar.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Suite *grammar_schema_suite(void);

static const char *const pieces[] = {
    "a",     "b",    "z",  "0",        "1",    "5",    "9",   "-",    ".",   "e",   "+",
    " ",     "\"",   "\\", "{",        "}",    "[",    "]",   ":",    ",",   "n",   "u",
    "l",     "t",    "r",  "f",        "s",    "x",    "{\"", "\":",  "\",", "\"}", "true",
    "false", "null", "12", "\xc3\xa9", "\xc3", "\xa9", "\n",  "</s>",
};
#define N_PIECES ((int32_t)(sizeof(pieces) / sizeof(pieces[0])))

static struct grammar_vocab *vocab(void)
{
    size_t lens[N_PIECES];
    for (int32_t i = 0; i < N_PIECES; i++) lens[i] = strlen(pieces[i]);
    int32_t eos = N_PIECES - 1;
    struct grammar_vocab *v = NULL;
    ck_assert_int_eq(grammar_vocab_from_pieces(pieces, lens, N_PIECES, &eos, 1, &v), 0);
    return v;
}

static int compile(const char *schema, struct grammar_vocab *v, struct grammar **g, char *err)
{
    return grammar_schema_compile_text(schema, strlen(schema), v, g, err, 256);
}

/* Whether `doc` is a complete sentence of the schema's grammar. */
static bool valid(const char *schema, const char *doc)
{
    struct grammar_vocab *v = vocab();
    struct grammar *g = NULL;
    char err[256];
    int rc = compile(schema, v, &g, err);
    ck_assert_msg(rc == 0, "%s: %s", schema, err);
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    ck_assert_int_eq(grammar_matcher_new(g, a, &m), 0);
    bool ok =
        grammar_matcher_accept_bytes(m, a, doc, strlen(doc)) == 0 && grammar_matcher_accepting(m);
    grammar_matcher_free(m);
    grammar_arena_free(a);
    grammar_unref(g);
    grammar_vocab_free(v);
    return ok;
}

static int refused(const char *schema, const char *want)
{
    struct grammar_vocab *v = vocab();
    struct grammar *g = NULL;
    char err[256] = "";
    int rc = compile(schema, v, &g, err);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err, want), "error '%s' lacks '%s'", err, want);
    grammar_vocab_free(v);
    return rc;
}

START_TEST(test_grammar_schema_types)
{
    ck_assert(valid("{\"type\":\"integer\"}", "-12"));
    ck_assert(!valid("{\"type\":\"integer\"}", "1.5"));
    ck_assert(!valid("{\"type\":\"integer\"}", "012"));
    ck_assert(valid("{\"type\":\"number\"}", "1.5e+12"));
    ck_assert(valid("{\"type\":\"boolean\"}", "false"));
    ck_assert(valid("{\"type\":[\"string\",\"null\"]}", "null"));
    ck_assert(valid("{\"type\":[\"string\",\"null\"]}", "\"a\\n\\u00e9\xc3\xa9\""));
    ck_assert(!valid("{\"type\":\"string\"}", "\"a\nb\""));
    ck_assert(valid("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"ab\""));
    ck_assert(!valid("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\""));
    ck_assert(!valid("{\"type\":\"string\",\"minLength\":2}", "\"a\""));
    ck_assert(valid("{\"enum\":[\"x\",1,null]}", "1"));
    ck_assert(!valid("{\"enum\":[\"x\",1,null]}", "\"y\""));
    ck_assert(valid("{\"const\":{\"a\":[1]}}", "{\"a\":[1]}"));
    ck_assert(valid("{}", "[1, {\"a\": null}]"));
    ck_assert(valid("true", "\"anything\""));
    ck_assert(valid("{\"type\":\"string\",\"nullable\":true}", "null"));
}
END_TEST

START_TEST(test_grammar_schema_objects)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                    "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"}},"
                    "\"required\":[\"b\"],\"additionalProperties\":false}";
    ck_assert(valid(s, "{\"b\":\"x\"}"));
    ck_assert(valid(s, "{ \"b\": \"x\", \"c\": true }"));
    ck_assert(valid(s, "{\"a\":1,\"b\":\"x\"}") == false); /* order: required first */
    ck_assert(!valid(s, "{}"));
    ck_assert(!valid(s, "{\"b\":\"x\",\"d\":1}"));
    /* no required property: any in-order subset */
    const char *o = "{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
                    "\"c\":{\"type\":\"integer\"}}}";
    ck_assert(valid(o, "{}"));
    ck_assert(valid(o, "{\"b\":1}"));
    ck_assert(valid(o, "{\"a\":1,\"c\":2}"));
    ck_assert(!valid(o, "{\"c\":1,\"a\":2}"));
    ck_assert(!valid(o, "{,\"a\":1}"));
    ck_assert(valid("{\"type\":\"object\"}", "{\"z\": [true]}"));
    ck_assert(valid("{\"type\":\"object\",\"additionalProperties\":false}", "{}"));
    ck_assert(valid("{\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":1,\"y\":2}"));
    ck_assert(!valid("{\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":\"1\"}"));
}
END_TEST

START_TEST(test_grammar_schema_arrays_refs)
{
    const char *a = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,"
                    "\"maxItems\":2}";
    ck_assert(valid(a, "[1]"));
    ck_assert(valid(a, "[1, 2]"));
    ck_assert(!valid(a, "[]"));
    ck_assert(!valid(a, "[1,2,3]"));
    ck_assert(valid("{\"type\":\"array\",\"maxItems\":0}", "[]"));
    ck_assert(valid("{\"type\":\"array\"}", "[\"a\",1]"));
    /* pydantic's shape: $defs, anyOf with null for Optional, a recursive model */
    const char *r = "{\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
                    "\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/Node\"},{\"type\":"
                    "\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/Node\"}";
    ck_assert(valid(r, "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"));
    ck_assert(!valid(r, "{\"v\":1,\"next\":{\"v\":2}}"));
    ck_assert(valid("{\"definitions\":{\"e\":{\"enum\":[\"a\",\"b\"]}},\"items\":{\"$ref\":"
                    "\"#/definitions/e\"}}",
                    "[\"a\",\"b\"]"));
}
END_TEST

START_TEST(test_grammar_schema_refused)
{
    ck_assert_int_eq(refused("{\"type\":\"string\",\"pattern\":\"^a$\"}", "'pattern'"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(
        refused("{\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":0}}}", "#/properties/x"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"string\",\"format\":\"date-time\"}", "'format'"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"$ref\":\"http://x/y\"}", "$ref"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"$ref\":\"#/$defs/missing\"}", "names nothing"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"strin\"}", "unknown type"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":7}", "'type'"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"required\":[\"q\"],\"properties\":{}}", "'q'"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"array\",\"minItems\":-1}", "minItems"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"array\",\"maxItems\":100000}", "maxItems"), ERR_TOO_BIG);
    ck_assert_int_eq(refused("{\"enum\":[]}", "enum"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"anyOf\":7}", "anyOf"), ERR_INVAL);
    ck_assert_int_eq(refused("false", "nothing"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("[1]", "object"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":", "JSON"), ERR_PARSE);
    /* nesting beyond the bound */
    struct buf b;
    buf_init(&b, 0);
    for (int i = 0; i < 100; i++) buf_puts(&b, "{\"items\":");
    buf_puts(&b, "{}");
    for (int i = 0; i < 100; i++) buf_putc(&b, '}');
    ck_assert_int_eq(refused(buf_cstr(&b), "deeper"), ERR_TOO_BIG);
    buf_fini(&b);
    /* a grammar over the text bound */
    struct buf big;
    buf_init(&big, 64);
    json_t *s = json_loads("{\"properties\":{\"aaaa\":{},\"bbbb\":{},\"cccc\":{}}}", 0, NULL);
    char err[256];
    ck_assert_int_eq(grammar_schema_gbnf(s, &big, err, sizeof(err)), ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "larger"));
    json_decref(s);
    buf_fini(&big);
}
END_TEST

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random walks under the mask: whatever tokens a model picks, the text ends as valid JSON. */
START_TEST(test_grammar_schema_random_walks_valid)
{
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\"},"
                         "\"s\":{\"type\":\"string\",\"maxLength\":4},\"l\":{\"type\":\"array\","
                         "\"items\":{\"enum\":[\"a\",true]},\"maxItems\":3},\"u\":{\"anyOf\":["
                         "{\"type\":\"null\"},{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
                         "\"integer\"}},\"required\":[\"x\"]}]}},\"required\":[\"n\",\"s\",\"l\","
                         "\"u\"]}";
    struct grammar_vocab *v = vocab();
    struct grammar *g = NULL;
    char err[256];
    ck_assert_int_eq(compile(schema, v, &g, err), 0);
    struct grammar_arena *a = grammar_arena_new();
    uint32_t mask[(N_PIECES + 31) / 32];
    uint64_t seed = 88172645463325252ull;
    int finished = 0;
    for (int w = 0; w < 200; w++) {
        struct grammar_matcher *m = NULL;
        ck_assert_int_eq(grammar_matcher_new(g, a, &m), 0);
        struct buf out;
        buf_init(&out, 0);
        bool eos = false;
        for (int step = 0; step < 400 && !eos; step++) {
            int n = grammar_matcher_mask(m, a, mask);
            ck_assert_msg(n > 0, "dead end after: %s", buf_cstr(&out));
            /* prefer ending when allowed, half the time, so walks finish */
            int32_t t = -1;
            if ((mask[(N_PIECES - 1) >> 5] >> ((N_PIECES - 1) & 31)) & 1 && rng(&seed) % 2)
                t = N_PIECES - 1;
            for (int pick = (int)(rng(&seed) % (uint64_t)n); t < 0;)
                for (int32_t i = 0; i < N_PIECES && t < 0; i++)
                    if ((mask[i >> 5] >> (i & 31)) & 1 && pick-- == 0) t = i;
            ck_assert_int_eq(grammar_matcher_accept(m, a, t), 0);
            if (t == N_PIECES - 1)
                eos = true;
            else
                buf_puts(&out, pieces[t]);
        }
        if (eos) {
            finished++;
            json_error_t je;
            json_t *j = json_loads(buf_cstr(&out), 0, &je);
            ck_assert_msg(j != NULL, "not JSON: %s (%s)", buf_cstr(&out), je.text);
            ck_assert(json_is_number(json_object_get(j, "n")));
            ck_assert(json_is_string(json_object_get(j, "s")));
            ck_assert_int_le(json_string_length(json_object_get(j, "s")), 8); /* 4 chars */
            ck_assert(json_array_size(json_object_get(j, "l")) <= 3);
            const json_t *o = json_object_get(j, "u");
            ck_assert(json_is_null(o) || json_is_integer(json_object_get(o, "x")));
            ck_assert_int_eq(json_object_size(j), 4);
            json_decref(j);
        }
        buf_fini(&out);
        grammar_matcher_free(m);
    }
    ck_assert_int_gt(finished, 50);
    grammar_arena_free(a);
    grammar_unref(g);
    grammar_vocab_free(v);
}
END_TEST

Suite *grammar_schema_suite(void)
{
    Suite *s = suite_create("grammar_schema");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_grammar_schema_types);
    tcase_add_test(tc, test_grammar_schema_objects);
    tcase_add_test(tc, test_grammar_schema_arrays_refs);
    tcase_add_test(tc, test_grammar_schema_refused);
    tcase_add_test(tc, test_grammar_schema_random_walks_valid);
    suite_add_tcase(s, tc);
    return s;
}
