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
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"multipleOf\":0.5}", "'multipleOf' 0.5"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"properties\":{\"x\":{\"type\":\"string\",\"pattern\":\"(?=a)\"}}}",
                             "#/properties/x"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"$ref\":\"http://x/y\"}", "$ref"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"$ref\":\"#/$defs/missing\"}", "names nothing"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"strin\"}", "unknown type"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":7}", "'type'"), ERR_INVAL);
    /* a required property not declared is an additional one */
    ck_assert(valid("{\"required\":[\"q\"],\"properties\":{}}", "{\"q\":[1]}"));
    ck_assert(!valid("{\"required\":[\"q\"],\"properties\":{}}", "{}"));
    ck_assert(valid("{\"required\":[\"q\"],\"additionalProperties\":{\"type\":\"integer\"}}",
                    "{\"q\":1}"));
    ck_assert(!valid("{\"required\":[\"q\"],\"additionalProperties\":{\"type\":\"integer\"}}",
                     "{\"q\":\"x\"}"));
    ck_assert_int_eq(
        refused("{\"required\":[\"q\"],\"properties\":{},\"additionalProperties\":false}", "'q'"),
        ERR_UNSUPPORTED);
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

START_TEST(test_grammar_schema_pattern)
{
    const char *s = "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}";
    ck_assert(valid(s, "\"AB-123\""));
    ck_assert(!valid(s, "\"AB-12\""));
    ck_assert(!valid(s, "\"ab-123\""));
    ck_assert(!valid(s, "AB-123"));
    /* unanchored patterns are generated as whole-string matches (a subset of their instances) */
    ck_assert(valid("{\"type\":\"string\",\"pattern\":\"ab+\"}", "\"abbb\""));
    ck_assert(!valid("{\"type\":\"string\",\"pattern\":\"ab+\"}", "\"xabbb\""));
    /* characters JSON must escape are written escaped */
    const char *q = "{\"type\":\"string\",\"pattern\":\"^[\\\"\\\\\\\\a]+$\"}"; /* ["\\a]+ */
    ck_assert(valid(q, "\"a\\\"\\\\\""));
    ck_assert(!valid(q, "\"a\"\""));
    /* with minLength / maxLength */
    const char *l = "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":3}";
    ck_assert(valid(l, "\"abc\""));
    ck_assert(!valid(l, "\"abcd\""));
    ck_assert(!valid(l, "\"\""));
    ck_assert(valid("{\"type\":[\"string\",\"null\"],\"pattern\":\"^x$\"}", "null"));
    ck_assert(valid("{\"type\":[\"string\",\"null\"],\"pattern\":\"^x$\"}", "\"x\""));
    /* pattern applies to strings only */
    ck_assert(valid("{\"type\":\"integer\",\"pattern\":\"^x$\"}", "12"));
    ck_assert_int_eq(
        refused("{\"type\":\"string\",\"pattern\":\"a+b\",\"maxLength\":3}", "minLength/maxLength"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"string\",\"pattern\":\"(a\"}", "'pattern'"), ERR_PARSE);
    ck_assert_int_eq(refused("{\"type\":\"string\",\"pattern\":\"\\\\1\"}", "backreference"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"string\",\"pattern\":\"a{20000}\"}", "10000"),
                     ERR_TOO_BIG);
    ck_assert_int_eq(refused("{\"type\":\"string\",\"pattern\":7}", "'pattern' must be"),
                     ERR_INVAL);
    ck_assert_int_eq(refused("{\"pattern\":\"a\"}", "needs a 'type'"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"string\",\"pattern\":\"a\",\"enum\":[\"a\"]}", "'enum'"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(
        refused("{\"type\":\"string\",\"pattern\":\"a\",\"format\":\"date\"}", "'format'"),
        ERR_UNSUPPORTED);
}
END_TEST

/* "<3 labels of n>.<one of last>" as a JSON string, into out. */
static const char *host_of(char *out, int n, int last)
{
    int k = 0;
    out[k++] = '"';
    for (int l = 0; l < 3; l++) {
        for (int i = 0; i < n; i++) out[k++] = 'a';
        out[k++] = '.';
    }
    for (int i = 0; i < last; i++) out[k++] = 'b';
    out[k++] = '"';
    out[k] = 0;
    return out;
}

START_TEST(test_grammar_schema_format)
{
    const char *d = "{\"type\":\"string\",\"format\":\"date\"}";
    ck_assert(valid(d, "\"2024-02-28\""));
    ck_assert(valid(d, "\"1999-12-31\""));
    ck_assert(!valid(d, "\"2024-02-30\""));
    ck_assert(!valid(d, "\"2024-04-31\""));
    ck_assert(!valid(d, "\"2024-13-01\""));
    ck_assert(!valid(d, "\"24-01-01\""));
    const char *dt = "{\"type\":\"string\",\"format\":\"date-time\"}";
    ck_assert(valid(dt, "\"2024-05-01T12:30:59Z\""));
    ck_assert(valid(dt, "\"2024-05-01T23:00:00.123+05:30\""));
    ck_assert(!valid(dt, "\"2024-05-01T24:00:00Z\""));
    ck_assert(!valid(dt, "\"2024-05-01 12:30:59Z\""));
    ck_assert(!valid(dt, "\"2024-05-01T12:30:59\"")); /* RFC 3339 needs an offset */
    ck_assert(valid("{\"type\":\"string\",\"format\":\"time\"}", "\"08:15:00-01:00\""));
    const char *u = "{\"type\":\"string\",\"format\":\"uuid\"}";
    ck_assert(valid(u, "\"123e4567-e89b-12d3-a456-426614174000\""));
    ck_assert(!valid(u, "\"123e4567e89b12d3a456426614174000\""));
    const char *e = "{\"type\":\"string\",\"format\":\"email\"}";
    ck_assert(valid(e, "\"a.b+c@ex-ample.co\""));
    ck_assert(!valid(e, "\"a@b\""));
    ck_assert(!valid(e, "\"a..b@ex.com\""));
    ck_assert(!valid(e, "\"@ex.com\""));
    const char *v4 = "{\"type\":\"string\",\"format\":\"ipv4\"}";
    ck_assert(valid(v4, "\"192.168.0.255\""));
    ck_assert(!valid(v4, "\"256.1.1.1\""));
    ck_assert(!valid(v4, "\"01.1.1.1\""));
    ck_assert(!valid(v4, "\"1.1.1\""));
    ck_assert(valid("{\"type\":\"string\",\"format\":\"ipv6\"}", "\"2001:db8:0:0:0:0:0:1\""));
    const char *uri = "{\"type\":\"string\",\"format\":\"uri\"}";
    ck_assert(valid(uri, "\"https://example.com/a/b?x=1&y=%20#top\""));
    ck_assert(valid(uri, "\"http://localhost:8080\""));
    ck_assert(!valid(uri, "\"https://exa mple.com\""));
    ck_assert(!valid(uri, "\"https://x.com/%zz\""));
    ck_assert(valid("{\"type\":\"string\",\"format\":\"hostname\"}", "\"api.example.org\""));
    /* length limits: a hostname of 253 characters at most, email domain labels of 32 */
    const char *h = "{\"type\":\"string\",\"format\":\"hostname\"}";
    char host[300], mail[80];
    ck_assert(valid(h, host_of(host, 63, 61)));  /* 3 * 64 + 61 = 253 characters */
    ck_assert(!valid(h, host_of(host, 63, 62))); /* 254 */
    ck_assert(!valid(h, host_of(host, 64, 10))); /* a label of 64 */
    snprintf(mail, sizeof(mail), "\"x@%.32s.com\"", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    ck_assert(valid(e, mail));
    snprintf(mail, sizeof(mail), "\"x@%.33s.com\"", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
    ck_assert(!valid(e, mail));
    /* other formats are annotations: not enforced, not refused */
    ck_assert(valid("{\"type\":\"string\",\"format\":\"binary\"}", "\"anything\""));
    ck_assert(valid("{\"type\":\"integer\",\"format\":\"int64\"}", "-7"));
    ck_assert(valid("{\"format\":\"whatever\"}", "[1]"));
    /* a format with lengths: the format's strings must fit them */
    ck_assert(
        valid("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":10}", "\"2024-01-01\""));
    ck_assert_int_eq(
        refused("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":8}", "'format'"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"format\":\"date\"}", "needs a 'type'"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"string\",\"format\":7}", "'format'"), ERR_INVAL);
}
END_TEST

START_TEST(test_grammar_schema_integer_range)
{
    const char *s = "{\"type\":\"integer\",\"minimum\":1,\"maximum\":5}"; /* Field(ge=1, le=5) */
    ck_assert(valid(s, "1"));
    ck_assert(valid(s, "5"));
    ck_assert(!valid(s, "0"));
    ck_assert(!valid(s, "6"));
    ck_assert(!valid(s, "05"));
    ck_assert(!valid(s, "-1"));
    const char *w = "{\"type\":\"integer\",\"minimum\":-1234,\"maximum\":98765}";
    for (int i = -1300; i <= 99000; i += 7) {
        char doc[32];
        snprintf(doc, sizeof(doc), "%d", i);
        ck_assert_msg(valid(w, doc) == (i >= -1234 && i <= 98765), "%d", i);
    }
    ck_assert(!valid(w, "-0"));
    ck_assert(!valid(w, "007"));
    /* exclusive (2020-12 numbers and draft 4 booleans), one-sided, negative ranges */
    const char *x = "{\"type\":\"integer\",\"exclusiveMinimum\":-10,\"exclusiveMaximum\":-3}";
    ck_assert(valid(x, "-9"));
    ck_assert(valid(x, "-4"));
    ck_assert(!valid(x, "-10"));
    ck_assert(!valid(x, "-3"));
    ck_assert(!valid(x, "0"));
    const char *d4 = "{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true}";
    ck_assert(!valid(d4, "0"));
    ck_assert(valid(d4, "1"));
    ck_assert(valid(d4, "123456789012"));
    const char *ge = "{\"type\":\"integer\",\"minimum\":100}";
    ck_assert(valid(ge, "100"));
    ck_assert(valid(ge, "99999999"));
    ck_assert(!valid(ge, "99"));
    ck_assert(!valid(ge, "-100"));
    const char *le = "{\"type\":\"integer\",\"maximum\":-20}";
    ck_assert(valid(le, "-20"));
    ck_assert(valid(le, "-1000000"));
    ck_assert(!valid(le, "-19"));
    ck_assert(!valid(le, "5"));
    /* real bounds on an integer round inward; the tighter of two bounds wins */
    ck_assert(valid("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "2"));
    ck_assert(!valid("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "1"));
    ck_assert(!valid("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", "4"));
    ck_assert(!valid("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":5}", "5"));
    ck_assert(valid("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":5}", "6"));
    ck_assert(valid("{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", "7"));
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no value"),
                     ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"minimum\":\"1\"}", "'minimum' must be"),
                     ERR_INVAL);
    ck_assert_int_eq(
        refused("{\"type\":\"integer\",\"maximum\":9223372036854775807}", "supported range"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"minimum\":1}", "needs a 'type'"), ERR_UNSUPPORTED);
    /* bounds beside anyOf apply to every branch (grammar_schema_merge.c) */
    ck_assert(valid("{\"type\":\"integer\",\"minimum\":1,\"anyOf\":[{}]}", "5"));
    ck_assert(!valid("{\"type\":\"integer\",\"minimum\":1,\"anyOf\":[{}]}", "0"));
}
END_TEST

/* allOf, and keywords beside anyOf / oneOf / $ref: every instance must satisfy both (the Schema
 * Store patterns hack/schema-coverage.py found generating invalid instances before). */
START_TEST(test_grammar_schema_combined)
{
    const char *all =
        "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
        "\"required\":[\"a\"]},{\"properties\":{\"b\":{\"type\":\"string\"}},"
        "\"required\":[\"b\"]}]}";
    ck_assert(valid(all, "{\"a\":1,\"b\":\"x\"}"));
    ck_assert(!valid(all, "{\"a\":1}"));
    ck_assert(!valid(all, "{\"b\":\"x\"}"));
    /* one of the properties required: the branches alone would admit any value */
    const char *one =
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":"
        "{\"type\":\"string\"}},\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}";
    ck_assert(valid(one, "{\"a\":1}"));
    ck_assert(valid(one, "{\"b\":\"x\"}"));
    ck_assert(!valid(one, "\"\""));
    ck_assert(!valid(one, "15"));
    ck_assert(!valid(one, "{}"));
    /* oneOf made exclusive by `required`: a branch writes nothing another branch requires */
    ck_assert(!valid(one, "{\"a\":1,\"b\":\"x\"}"));
    ck_assert(
        valid("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
              "\"string\"}},\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}",
              "{\"a\":1,\"b\":\"x\"}"));
    const char *refs =
        "{\"$defs\":{\"A\":{\"type\":\"object\",\"properties\":{\"a\":{},\"c\":{}},"
        "\"required\":[\"a\"]},\"B\":{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":"
        "{}},\"required\":[\"b\"]}},\"oneOf\":[{\"$ref\":\"#/$defs/A\"},{\"$ref\":"
        "\"#/$defs/B\"}]}";
    ck_assert(valid(refs, "{\"a\":1,\"c\":2}"));
    ck_assert(!valid(refs, "{\"b\":1,\"a\":2}")); /* B without A's required a */
    ck_assert(valid(refs, "{\"b\":1}"));
    /* nothing tells these apart: generated as anyOf */
    ck_assert(valid("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "3"));
    /* a branch's property without a type narrows the parent's */
    const char *narrow =
        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"array\",\"items\":{\"type\":"
        "\"integer\"}}},\"anyOf\":[{\"properties\":{\"x\":{\"maxItems\":0}}}]}";
    ck_assert(valid(narrow, "{\"x\":[]}"));
    ck_assert(!valid(narrow, "{\"x\":[1]}"));
    ck_assert(!valid(narrow, "{\"x\":0}"));
    /* $ref beside a constraint */
    const char *ref =
        "{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/n\",\"minimum\":3}";
    ck_assert(valid(ref, "3"));
    ck_assert(!valid(ref, "2"));
    /* a property one side forbids (additionalProperties false) is dropped */
    const char *closed = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                         "\"additionalProperties\":"
                         "false,\"allOf\":[{\"properties\":{\"b\":{\"type\":\"integer\"}}}]}";
    ck_assert(valid(closed, "{\"a\":1}"));
    ck_assert(!valid(closed, "{\"a\":1,\"b\":2}"));
    /* types meet (integer is a number), enums intersect */
    ck_assert(valid("{\"allOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "3"));
    ck_assert(!valid("{\"allOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "3.5"));
    const char *en = "{\"allOf\":[{\"enum\":[\"a\",\"b\",\"c\"]},{\"enum\":[\"b\",\"c\",\"d\"]}]}";
    ck_assert(valid(en, "\"b\""));
    ck_assert(!valid(en, "\"a\""));
    ck_assert(!valid(en, "\"d\""));
    /* literals must fit the type and enum merged beside them */
    const char *lit = "{\"allOf\":[{\"type\":\"string\"},{\"enum\":[\"a\",1,null,\"b\"]}]}";
    ck_assert(valid(lit, "\"a\""));
    ck_assert(!valid(lit, "1"));
    ck_assert(!valid(lit, "null"));
    ck_assert(valid("{\"type\":\"number\",\"enum\":[1,2.5,\"x\"]}", "2.5"));
    ck_assert(!valid("{\"type\":\"integer\",\"enum\":[1,2.5]}", "2.5"));
    ck_assert(valid("{\"type\":[\"string\",\"null\"],\"enum\":[\"a\",null,3]}", "null"));
    ck_assert(!valid("{\"type\":[\"string\",\"null\"],\"enum\":[\"a\",null,3]}", "3"));
    ck_assert_int_eq(
        refused("{\"allOf\":[{\"enum\":[\"a\",\"b\"]},{\"const\":\"c\"}]}", "no value"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"string\",\"const\":5}", "no 'const'"), ERR_UNSUPPORTED);
    ck_assert(valid("{\"enum\":[\"a\",\"b\"],\"const\":\"b\"}", "\"b\""));
    /* a branch whose type no enum value fits admits nothing: dropped, not refused (Schema
     * Store's {"$ref":"#/definitions/property","enum":["key","sas"]}, property = string|object) */
    const char *drop_lit =
        "{\"definitions\":{\"p\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":"
        "\"object\"}]}},\"$ref\":\"#/definitions/p\",\"enum\":[\"key\",\"sas\"]}";
    ck_assert(valid(drop_lit, "\"sas\""));
    ck_assert(!valid(drop_lit, "{}"));
    /* a branch nothing satisfies is dropped; when none is left, refused */
    const char *drop = "{\"type\":\"string\",\"anyOf\":[{\"type\":\"integer\"},{\"maxLength\":1}]}";
    ck_assert(valid(drop, "\"q\""));
    ck_assert(!valid(drop, "\"qq\""));
    ck_assert(!valid(drop, "1"));
    ck_assert_int_eq(
        refused("{\"type\":\"string\",\"anyOf\":[{\"type\":\"integer\"}]}", "no branch of 'anyOf'"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(
        refused("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "no value"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(
        refused("{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":"
                "false,\"allOf\":[{\"required\":[\"b\"]}]}",
                "no value"),
        ERR_UNSUPPORTED);
    /* what cannot be intersected is refused, never relaxed */
    ck_assert_int_eq(refused("{\"allOf\":[{\"type\":\"string\",\"pattern\":\"a\"},{\"type\":"
                             "\"string\",\"pattern\":\"b\"}]}",
                             "'pattern' differs"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(
        refused("{\"allOf\":[{\"anyOf\":[{\"type\":\"string\"}]},{\"anyOf\":[{\"type\":"
                "\"integer\"}]}]}",
                "both sides"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"allOf\":[]}", "'allOf' must be"), ERR_INVAL);
    ck_assert_int_eq(refused("{\"allOf\":[{\"$ref\":\"http://x/y\"}]}", "$ref"), ERR_UNSUPPORTED);
    /* a schema that is all of itself: bounded, refused */
    ck_assert_int_eq(refused("{\"$defs\":{\"a\":{\"allOf\":[{\"$ref\":\"#/$defs/a\"}],\"type\":"
                             "\"object\"}},\"$ref\":\"#/$defs/a\"}",
                             "32 deep"),
                     ERR_UNSUPPORTED);
    /* $ref: any JSON pointer into the schema (escaped), and the schema's own $id */
    const char *deep =
        "{\"$id\":\"https://example.com/s/conf.json\",\"definitions\":{\"a/b\":{\"properties\":"
        "{\"n~x\":{\"type\":\"integer\"}}},\"list\":[{\"type\":\"boolean\"}]},\"type\":"
        "\"object\",\"properties\":{\"p\":{\"$ref\":\"#/definitions/a~1b/properties/n~0x\"},\"q\":"
        "{\"$ref\":\"conf.json#/definitions/list/0\"},\"r\":{\"$ref\":\"https://example.com/s/"
        "conf.json#/properties/p\"},\"s\":{\"$ref\":\"#/definitions/a%7E1b/properties/n~0x\"}},"
        "\"required\":[\"p\",\"q\",\"r\",\"s\"]}";
    ck_assert(valid(deep, "{\"p\":1,\"q\":true,\"r\":2,\"s\":3}"));
    ck_assert(!valid(deep, "{\"p\":\"x\",\"q\":true,\"r\":2,\"s\":3}"));
    ck_assert_int_eq(refused("{\"$ref\":\"other.json#/x\"}", "not supported"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"$ref\":\"#anchor\"}", "not supported"), ERR_UNSUPPORTED);
    ck_assert_int_eq(
        refused("{\"definitions\":{},\"$ref\":\"#/definitions/%zz\"}", "not supported"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"definitions\":{},\"$ref\":\"#/definitions/~2\"}", "not supported"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"$ref\":\"#/properties/x\"}", "names nothing"), ERR_INVAL);
    /* patternProperties: JSON Schema's patterns search, keys generated from them */
    const char *pk = "{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},"
                     "\"additionalProperties\":false}";
    ck_assert(valid(pk, "{\"x-a\":1,\"x-\":2}"));
    ck_assert(valid(pk, "{}"));
    ck_assert(!valid(pk, "{\"y\":1}"));
    ck_assert(!valid(pk, "{\"x-a\":\"s\"}"));
    const char *pd =
        "{\"type\":\"object\",\"properties\":{\"x-n\":{},\"m\":{\"type\":\"string\"},"
        "\"xaby\":{}},\"patternProperties\":{\"^x-\":{\"type\":\"integer\"},\"ab\":{\"type\":"
        "\"boolean\"}}}";
    ck_assert(valid(pd, "{\"x-n\":5,\"m\":\"q\",\"xaby\":true}"));
    ck_assert(!valid(pd, "{\"x-n\":\"s\"}"));
    ck_assert(!valid(pd, "{\"xaby\":1}"));
    ck_assert(valid(pd, "{\"m\":\"q\"}"));
    const char *two = "{\"patternProperties\":{\"^a\":{\"type\":\"integer\"},\"b$\":{\"type\":"
                      "\"integer\",\"minimum\":0}}}";
    ck_assert(valid(two, "{\"ab\":3}"));
    ck_assert(!valid(two, "{\"ab\":-1}"));
    ck_assert(!valid(two, "{\"c\":1}"));
    ck_assert_int_eq(
        refused("{\"properties\":{\"x-n\":{\"type\":\"string\"}},\"required\":[\"x-n\"],"
                "\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}}}",
                "contradicts"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(
        refused("{\"properties\":{\"a\":{}},\"patternProperties\":{\"^a|b\":{}}}", "'|'"),
        ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"patternProperties\":{\"(?=a)\":{}}}", "lookahead"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"patternProperties\":[]}", "'patternProperties' must be"),
                     ERR_INVAL);
    /* keywords of one type without a type: a value of that type, never an unconstrained one */
    ck_assert(!valid("{\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", "{}"));
    ck_assert(valid("{\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", "{\"b\":0}"));
    ck_assert(!valid("{\"maxItems\":0}", "[1]"));
    ck_assert(valid("{\"maxItems\":0}", "[]"));
    ck_assert(!valid("{\"maxLength\":1}", "\"ab\""));
    ck_assert(valid("{\"maxLength\":1}", "\"a\""));
    /* editor annotations and vendor extensions do not constrain */
    ck_assert(valid("{\"type\":\"string\",\"markdownDescription\":\"x\",\"x-taplo\":{\"a\":1},"
                    "\"id\":\"http://x\",\"defaultSnippets\":[]}",
                    "\"q\""));
}
END_TEST

START_TEST(test_grammar_schema_number_range)
{
    const char *s = "{\"type\":\"number\",\"minimum\":0,\"maximum\":100}";
    ck_assert(valid(s, "0"));
    ck_assert(valid(s, "0.5"));
    ck_assert(valid(s, "99.999"));
    ck_assert(valid(s, "100"));
    ck_assert(!valid(s, "100.5"));
    ck_assert(!valid(s, "-0.5"));
    ck_assert(!valid(s, "101"));
    ck_assert(!valid(s, "1e3"));
    const char *p = "{\"type\":\"number\",\"exclusiveMinimum\":0}"; /* Field(gt=0) */
    ck_assert(valid(p, "0.001"));
    ck_assert(valid(p, "12.5"));
    ck_assert(!valid(p, "0"));
    ck_assert(!valid(p, "0.000"));
    ck_assert(!valid(p, "-1"));
    const char *n = "{\"type\":\"number\",\"minimum\":-5,\"exclusiveMaximum\":-2}";
    ck_assert(valid(n, "-5"));
    ck_assert(valid(n, "-4.75"));
    ck_assert(valid(n, "-2.01"));
    ck_assert(!valid(n, "-2"));
    ck_assert(!valid(n, "-5.5"));
    ck_assert(!valid(n, "-1.5"));
    const char *m = "{\"type\":\"number\",\"minimum\":-1,\"maximum\":1}";
    ck_assert(valid(m, "-1"));
    ck_assert(valid(m, "-0.5"));
    ck_assert(valid(m, "0"));
    ck_assert(valid(m, "0.25"));
    ck_assert(!valid(m, "-1.5"));
    ck_assert(!valid(m, "1.5"));
    ck_assert(valid("{\"type\":\"number\",\"maximum\":10.0}", "-3.5"));
    ck_assert_int_eq(
        refused("{\"type\":\"number\",\"exclusiveMinimum\":3,\"maximum\":3}", "no value"),
        ERR_INVAL);
}
END_TEST

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A schema compiled once, for many documents. */
struct checker {
    struct grammar_vocab *v;
    struct grammar *g;
    struct grammar_arena *a;
};

static void checker_init(struct checker *c, const char *schema)
{
    char err[256];
    c->v = vocab();
    ck_assert_msg(compile(schema, c->v, &c->g, err) == 0, "%s: %s", schema, err);
    c->a = grammar_arena_new();
}

static void checker_fini(struct checker *c)
{
    grammar_arena_free(c->a);
    grammar_unref(c->g);
    grammar_vocab_free(c->v);
}

static bool checker_accepts(struct checker *c, const char *doc)
{
    struct grammar_matcher *m = NULL;
    ck_assert_int_eq(grammar_matcher_new(c->g, c->a, &m), 0);
    bool ok = grammar_matcher_accept_bytes(m, c->a, doc, strlen(doc)) == 0 &&
              grammar_matcher_accepting(m);
    grammar_matcher_free(m);
    return ok;
}

/* A random decimal: integer part 0..(int_max), then 0..frac_max fraction digits (maybe ending in
 * zeros), negative half the time. */
static void random_decimal(uint64_t *seed, int int_max, int frac_max, char *out, size_t n)
{
    int k = snprintf(out, n, "%s%d", rng(seed) % 2 ? "-" : "",
                     (int)(rng(seed) % (uint64_t)(int_max + 1)));
    int f = (int)(rng(seed) % (uint64_t)(frac_max + 1));
    if (f) out[k++] = '.';
    for (int i = 0; i < f; i++) out[k++] = (char)('0' + rng(seed) % 10);
    out[k] = 0;
}

/* Number ranges with fractional bounds admit exactly the spellings (no exponent, no "-0",
 * fraction up to 16 digits) whose value is in range: fixed cases, then random bounds against
 * random spellings, checked with a direct numeric comparison. */
START_TEST(test_grammar_schema_number_fraction)
{
    const char *unit = "{\"type\":\"number\",\"minimum\":0,\"maximum\":1}"; /* Field(ge=0, le=1) */
    static const char *const unit_in[] = {"0", "1", "1.0", "1.0000", "0.5", "0.999", "0.0"};
    static const char *const unit_out[] = {"1.0001", "-0", "-0.0", "1.5", "01", ".5", "2", "-0.5"};
    for (size_t i = 0; i < sizeof(unit_in) / sizeof(unit_in[0]); i++)
        ck_assert_msg(valid(unit, unit_in[i]), "%s", unit_in[i]);
    for (size_t i = 0; i < sizeof(unit_out) / sizeof(unit_out[0]); i++)
        ck_assert_msg(!valid(unit, unit_out[i]), "%s", unit_out[i]);
    const char *x = "{\"type\":\"number\",\"exclusiveMinimum\":-1.5,\"exclusiveMaximum\":2.25}";
    static const char *const x_in[] = {"-1.49", "-1.4999999", "-1",      "0",
                                       "2",     "2.2",        "2.24999", "-0.5"};
    static const char *const x_out[] = {"-1.5",  "-1.50",     "-1.51", "2.25",
                                        "2.250", "2.2500001", "3"};
    for (size_t i = 0; i < sizeof(x_in) / sizeof(x_in[0]); i++)
        ck_assert_msg(valid(x, x_in[i]), "%s", x_in[i]);
    for (size_t i = 0; i < sizeof(x_out) / sizeof(x_out[0]); i++)
        ck_assert_msg(!valid(x, x_out[i]), "%s", x_out[i]);
    /* draft 4's boolean, a bound written 0.1 (the double 0.1000000000000000055...), both kinds */
    const char *d4 = "{\"type\":\"number\",\"maximum\":0.25,\"exclusiveMaximum\":true}";
    ck_assert(valid(d4, "0.2499"));
    ck_assert(!valid(d4, "0.25"));
    const char *tenth = "{\"type\":\"number\",\"minimum\":0.1,\"exclusiveMinimum\":0.05}";
    ck_assert(valid(tenth, "0.1"));
    ck_assert(valid(tenth, "0.10"));
    ck_assert(!valid(tenth, "0.0999"));
    ck_assert(valid("{\"type\":\"number\",\"minimum\":-0.001}", "-0.0005"));
    ck_assert(valid("{\"type\":\"number\",\"maximum\":1e-16}", "0.0000000000000001"));
    ck_assert(!valid("{\"type\":\"number\",\"maximum\":1e-16}", "0.0000000000000002"));

    uint64_t seed = 0x5eed5eed1234ull;
    int n_in = 0, n_out = 0, n_schemas = 0;
    for (int sc = 0; sc < 120; sc++) {
        char lo[32], hi[32], schema[160];
        random_decimal(&seed, 30, 3, lo, sizeof(lo));
        random_decimal(&seed, 30, 3, hi, sizeof(hi));
        double l = strtod(lo, NULL), h = strtod(hi, NULL);
        if (l > h) {
            char t[32];
            memcpy(t, lo, sizeof(t)), memcpy(lo, hi, sizeof(t)), memcpy(hi, t, sizeof(t));
            double td = l;
            l = h, h = td;
        }
        int form = (int)(rng(&seed) % 6); /* which sides, which kinds */
        bool has_lo = form != 4, has_hi = form != 5, lx = form & 1, hx = form & 2;
        if (has_lo && has_hi && l == h && (lx || hx)) continue; /* empty: refused, tested below */
        int n = snprintf(schema, sizeof(schema), "{\"type\":\"number\"");
        if (has_lo)
            n += snprintf(schema + n, sizeof(schema) - (size_t)n, ",\"%s\":%s",
                          lx ? "exclusiveMinimum" : "minimum", lo);
        if (has_hi)
            n += snprintf(schema + n, sizeof(schema) - (size_t)n, ",\"%s\":%s",
                          hx ? "exclusiveMaximum" : "maximum", hi);
        snprintf(schema + n, sizeof(schema) - (size_t)n, "}");
        struct checker c;
        checker_init(&c, schema);
        for (int d = 0; d < 150; d++) {
            char doc[48];
            int kind = (int)(rng(&seed) % 4);
            if (kind == 0 && (has_lo || has_hi)) { /* a bound itself, maybe with zeros after */
                const char *b = has_lo && (!has_hi || rng(&seed) % 2) ? lo : hi;
                snprintf(doc, sizeof(doc), "%s%s", b,
                         rng(&seed) % 2 ? "" : (strchr(b, '.') ? "00" : ".0"));
            } else {
                random_decimal(&seed, kind == 1 ? 3 : 40, kind == 2 ? 6 : 3, doc, sizeof(doc));
            }
            double v = strtod(doc, NULL);
            bool negzero = doc[0] == '-' && v == 0;
            bool in = !negzero && (!has_lo || (lx ? v > l : v >= l)) &&
                      (!has_hi || (hx ? v < h : v <= h));
            n_in += in, n_out += !in;
            ck_assert_msg(checker_accepts(&c, doc) == in, "%s: \"%s\" should be %s", schema, doc,
                          in ? "accepted" : "refused");
        }
        checker_fini(&c);
        n_schemas++;
    }
    fprintf(stderr, "number ranges: %d schemas, %d spellings in range, %d out\n", n_schemas, n_in,
            n_out);
    ck_assert_int_ge(n_schemas, 100);
    ck_assert_int_ge(n_in, 3000);
    ck_assert_int_ge(n_out, 3000);
    /* refused: no spelling in range, bounds the grammar cannot hold */
    ck_assert_int_eq(refused("{\"type\":\"number\",\"minimum\":2.5,\"maximum\":2.25}", "no value"),
                     ERR_INVAL);
    ck_assert_int_eq(
        refused("{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1e-16}",
                "no value"),
        ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"number\",\"minimum\":1e-20}", "'minimum' 1e-20"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"number\",\"maximum\":1.5e16}", "'maximum'"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"number\",\"minimum\":\"0.5\"}", "must be a number"),
                     ERR_INVAL);
}
END_TEST

/* multipleOf k (an integer) on integers, and on numbers (their integral values): exactly the
 * multiples in range, against a direct test, bounded or not; a real k, k <= 0, a range with no
 * multiple and a k whose grammar would be too large are refused naming the keyword. */
START_TEST(test_grammar_schema_multiple_of)
{
    const char *five = "{\"type\":\"integer\",\"multipleOf\":5}";
    static const char *const five_in[] = {"0", "5", "10", "-5", "-100", "1234567890123455"};
    static const char *const five_out[] = {"3", "-7", "11", "05", "-0", "1234567890123456"};
    for (size_t i = 0; i < sizeof(five_in) / sizeof(five_in[0]); i++)
        ck_assert_msg(valid(five, five_in[i]), "%s", five_in[i]);
    for (size_t i = 0; i < sizeof(five_out) / sizeof(five_out[0]); i++)
        ck_assert_msg(!valid(five, five_out[i]), "%s", five_out[i]);
    const char *num = "{\"type\":\"number\",\"multipleOf\":10,\"minimum\":-15.5,\"maximum\":20.5}";
    static const char *const num_in[] = {"-10", "0", "10.0", "20.00", "0.0"};
    static const char *const num_out[] = {"-20", "30", "10.5", "5", "-0", "-0.0", "1e1"};
    for (size_t i = 0; i < sizeof(num_in) / sizeof(num_in[0]); i++)
        ck_assert_msg(valid(num, num_in[i]), "%s", num_in[i]);
    for (size_t i = 0; i < sizeof(num_out) / sizeof(num_out[0]); i++)
        ck_assert_msg(!valid(num, num_out[i]), "%s", num_out[i]);
    ck_assert(valid("{\"type\":\"integer\",\"multipleOf\":3.0}", "9"));
    ck_assert(valid("{\"type\":\"integer\",\"multipleOf\":1,\"maximum\":3}", "-8"));
    ck_assert(valid("{\"type\":\"number\",\"multipleOf\":1}", "-8.000"));
    ck_assert(!valid("{\"type\":\"number\",\"multipleOf\":1}", "-8.5"));

    static const long long ks[] = {2, 3, 5, 7, 10, 12, 25, 37, 100, 1000, 4096};
    uint64_t seed = 0xabcdef987ull;
    int n_in = 0, n_out = 0;
    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
        for (int form = 0; form < 4; form++) {
            long long k = ks[ki];
            long long lo = (long long)(rng(&seed) % 8000) - 5000;
            long long hi = lo + (long long)(rng(&seed) % 9000);
            bool has_lo = form & 1, has_hi = form & 2, lx = rng(&seed) % 2, hx = rng(&seed) % 2;
            char schema[200];
            int n =
                snprintf(schema, sizeof(schema), "{\"type\":\"integer\",\"multipleOf\":%lld", k);
            if (has_lo)
                n += snprintf(schema + n, sizeof(schema) - (size_t)n, ",\"%s\":%lld",
                              lx ? "exclusiveMinimum" : "minimum", lo);
            if (has_hi)
                n += snprintf(schema + n, sizeof(schema) - (size_t)n, ",\"%s\":%lld",
                              hx ? "exclusiveMaximum" : "maximum", hi);
            snprintf(schema + n, sizeof(schema) - (size_t)n, "}");
            long long first_lo = lx ? lo + 1 : lo, last_hi = hx ? hi - 1 : hi;
            bool any = !has_lo || !has_hi || first_lo <= last_hi;
            long long m0 = first_lo + ((k - first_lo % k) % k);
            if (has_lo && has_hi && (!any || m0 > last_hi)) continue; /* no multiple: refused */
            struct checker c;
            checker_init(&c, schema);
            for (int d = 0; d < 300; d++) {
                long long v;
                int kind = (int)(rng(&seed) % 3);
                if (kind == 0)
                    v = (long long)(rng(&seed) % 14000) - 7000;
                else if (kind == 1)
                    v = ((long long)(rng(&seed) % 3000) - 1500) * k;
                else
                    v = (long long)(rng(&seed) % 9000000000000000ull) * (rng(&seed) % 2 ? 1 : -1);
                char doc[32];
                snprintf(doc, sizeof(doc), "%lld", v);
                bool in = v % k == 0 && (!has_lo || (lx ? v > lo : v >= lo)) &&
                          (!has_hi || (hx ? v < hi : v <= hi));
                n_in += in, n_out += !in;
                ck_assert_msg(checker_accepts(&c, doc) == in, "%s: %s should be %s", schema, doc,
                              in ? "accepted" : "refused");
            }
            checker_fini(&c);
        }
    fprintf(stderr, "multiples: %d integers accepted, %d refused\n", n_in, n_out);
    ck_assert_int_ge(n_in, 2000);
    ck_assert_int_ge(n_out, 5000);
    ck_assert_int_eq(refused("{\"type\":\"number\",\"multipleOf\":0.1}", "'multipleOf' 0.1"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"multipleOf\":0}", "greater than 0"),
                     ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"multipleOf\":-5}", "greater than 0"),
                     ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"multipleOf\":\"5\"}", "greater than 0"),
                     ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":1,\"maximum\":4}",
                             "no multiple"),
                     ERR_INVAL);
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"multipleOf\":9973}", "more than 4096 rules"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"multipleOf\":1e30}", "'multipleOf'"),
                     ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"multipleOf\":5}", "needs a 'type'"), ERR_UNSUPPORTED);
    ck_assert_int_eq(refused("{\"type\":\"integer\",\"multipleOf\":5,\"enum\":[5]}", "'enum'"),
                     ERR_UNSUPPORTED);
}
END_TEST

/* Random walks under the mask: whatever tokens a model picks, the text ends as valid JSON (and
 * never dead-ends: every alternative of a range or multiples grammar can be completed). */
START_TEST(test_grammar_schema_random_walks_valid)
{
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\"},"
                         "\"s\":{\"type\":\"string\",\"maxLength\":4},\"l\":{\"type\":\"array\","
                         "\"items\":{\"enum\":[\"a\",true]},\"maxItems\":3},\"u\":{\"anyOf\":["
                         "{\"type\":\"null\"},{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
                         "\"integer\"}},\"required\":[\"x\"]}]},\"f\":{\"type\":\"number\","
                         "\"exclusiveMinimum\":-1.5,\"maximum\":2.25},\"z\":{\"type\":\"integer\","
                         "\"multipleOf\":5,\"maximum\":90}},\"required\":[\"n\",\"s\",\"l\","
                         "\"u\",\"f\",\"z\"]}";
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
            json_t *j = json_loadb(buf_cstr(&out), out.len, JSON_ALLOW_NUL, &je);
            ck_assert_msg(j != NULL, "not JSON: %s (%s)", buf_cstr(&out), je.text);
            ck_assert(json_is_number(json_object_get(j, "n")));
            ck_assert(json_is_string(json_object_get(j, "s")));
            ck_assert_int_le(json_string_length(json_object_get(j, "s")), 8); /* 4 chars */
            ck_assert(json_array_size(json_object_get(j, "l")) <= 3);
            const json_t *o = json_object_get(j, "u");
            ck_assert(json_is_null(o) || json_is_integer(json_object_get(o, "x")));
            double f = json_number_value(json_object_get(j, "f"));
            json_int_t mv = json_integer_value(json_object_get(j, "z"));
            ck_assert_msg(f > -1.5 && f <= 2.25, "%s", buf_cstr(&out));
            ck_assert_msg(json_is_integer(json_object_get(j, "z")) && mv % 5 == 0 && mv <= 90, "%s",
                          buf_cstr(&out));
            ck_assert_int_eq(json_object_size(j), 6);
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
    tcase_add_test(tc, test_grammar_schema_pattern);
    tcase_add_test(tc, test_grammar_schema_format);
    tcase_add_test(tc, test_grammar_schema_integer_range);
    tcase_add_test(tc, test_grammar_schema_number_range);
    tcase_add_test(tc, test_grammar_schema_combined);
    tcase_add_test(tc, test_grammar_schema_number_fraction);
    tcase_add_test(tc, test_grammar_schema_multiple_of);
    tcase_add_test(tc, test_grammar_schema_random_walks_valid);
    suite_add_tcase(s, tc);
    return s;
}
