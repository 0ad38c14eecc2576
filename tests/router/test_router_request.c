/* Unit tests of the router's reading of a request: the top-level "model" member (escapes, nesting,
 * duplicates, every malformed shape, and agreement with jansson on what a JSON object is) and
 * request ids. */
#include "router/router_request.h"

#include "common/err.h"

#include <check.h>
#include <stdio.h>
#include <jansson.h>
#include <string.h>

static int model_of(const char *body, char *out, size_t cap)
{
    return router_request_model(body, strlen(body), out, cap);
}

START_TEST(test_router_request_model_found)
{
    char m[ROUTER_MODEL_MAX];
    ck_assert_int_eq(model_of("{\"model\":\"llama\"}", m, sizeof(m)), 0);
    ck_assert_str_eq(m, "llama");
    ck_assert_int_eq(
        model_of(" \n{ \"prompt\" : [1,2,{\"model\":\"no\"}], \"model\" : \"a b\" } \n", m,
                 sizeof(m)),
        0);
    ck_assert_str_eq(m, "a b");
    /* Escapes in the key and the value: "mo\u0064el" is the key "model". */
    ck_assert_int_eq(
        model_of("{\"mo\\u0064el\":\"x\\\"y\\\\z\\u00e9\\ud83d\\ude00\"}", m, sizeof(m)), 0);
    ck_assert_str_eq(m, "x\"y\\z\xc3\xa9\xf0\x9f\x98\x80");
    ck_assert_int_eq(model_of("{\"messages\":[{\"role\":\"user\",\"content\":\"}{][\\\"\"}],"
                              "\"stream\":true,\"n\":-1.5e3,\"x\":null,\"model\":\"m\"}",
                              m, sizeof(m)),
                     0);
    ck_assert_str_eq(m, "m");
}
END_TEST

START_TEST(test_router_request_model_absent_or_bad)
{
    char m[8];
    ck_assert_int_eq(model_of("{}", m, sizeof(m)), ERR_NOT_FOUND);
    ck_assert_int_eq(model_of("{\"prompt\":\"model\"}", m, sizeof(m)), ERR_NOT_FOUND);
    ck_assert_int_eq(model_of("{\"model\":null}", m, sizeof(m)), ERR_NOT_FOUND);
    ck_assert_int_eq(model_of("{\"models\":\"x\"}", m, sizeof(m)), ERR_NOT_FOUND);
    ck_assert_int_eq(model_of("{\"model\":3}", m, sizeof(m)), ERR_INVAL);
    ck_assert_int_eq(model_of("{\"model\":[\"x\"]}", m, sizeof(m)), ERR_INVAL);
    ck_assert_int_eq(model_of("{\"model\":\"\"}", m, sizeof(m)), ERR_INVAL);
    ck_assert_int_eq(model_of("{\"model\":\"a\\u0000b\"}", m, sizeof(m)), ERR_INVAL);
    ck_assert_int_eq(model_of("{\"model\":\"\xff\"}", m, sizeof(m)), ERR_INVAL);
    ck_assert_int_eq(model_of("{\"model\":\"1234567\"}", m, sizeof(m)), 0); /* 7 + NUL fits */
    ck_assert_int_eq(model_of("{\"model\":\"12345678\"}", m, sizeof(m)), ERR_TOO_BIG);
}
END_TEST

START_TEST(test_router_request_model_malformed)
{
    static const char *const bad[] = {
        "",
        "   ",
        "[]",
        "\"model\"",
        "{",
        "{\"model\"",
        "{\"model\":",
        "{\"model\":\"x\"",
        "{\"model\":\"x\",}",
        "{\"model\":\"x\"}}",
        "{\"model\":\"x\"} x",
        "{\"model\" \"x\"}",
        "{model:\"x\"}",
        "{\"model\":\"x\",\"model\":\"y\"}", /* duplicate keys: the engine refuses them too */
        "{\"model\":\"a\nb\"}",              /* raw control character */
        "{\"model\":\"\\x\"}",               /* bad escape */
        "{\"model\":\"\\u12\"}",
        "{\"model\":\"\\udc00\"}", /* lone low surrogate */
        "{\"model\":\"\\ud800x\"}",
        "{\"a\":[1,2}",
        "{\"a\":]}",
        "{\"a\":,}",
        "{\"a\":}",
        "{\"a\" : 1 2}",
        "{\"a\":\"unterminated}",
    };
    char m[32];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(model_of(bad[i], m, sizeof(m)) == ERR_PARSE, "accepted: %s", bad[i]);
    /* Nesting: 2048 levels are fine (jansson's limit), 2049 are not. */
    static char deep[8192];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof(deep), "{\"a\":");
    for (int i = 0; i < 2048; i++) deep[n++] = '[';
    for (int i = 0; i < 2048; i++) deep[n++] = ']';
    deep[n++] = '}';
    ck_assert_int_eq(router_request_model(deep, n, m, sizeof(m)), ERR_NOT_FOUND);
    n = (size_t)snprintf(deep, sizeof(deep), "{\"a\":");
    for (int i = 0; i < 2049; i++) deep[n++] = '[';
    for (int i = 0; i < 2049; i++) deep[n++] = ']';
    deep[n++] = '}';
    ck_assert_int_eq(router_request_model(deep, n, m, sizeof(m)), ERR_PARSE);
    /* Not NUL-terminated: the length is what counts. */
    ck_assert_int_eq(router_request_model("{\"model\":\"ab\"}xyz", 14, m, sizeof(m)), 0);
    ck_assert_str_eq(m, "ab");
}
END_TEST

/* Whatever the scanner finds as the model, jansson (the engine's parser) reads the same. */
START_TEST(test_router_request_model_agrees_with_jansson)
{
    static const char *const bodies[] = {
        "{\"model\":\"m1\",\"prompt\":\"hi\"}",
        "{\"prompt\":{\"model\":\"inner\"},\"model\":\"outer\"}",
        "{\"m\\u006fdel\":\"esc\"}",
        "{\"model\":\"\\u00fcber\\/x\"}",
        "{\"a\":[[[{}]]],\"b\":-0.5E+3,\"c\":false,\"model\":\"z\"}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        char m[64];
        ck_assert_int_eq(model_of(bodies[i], m, sizeof(m)), 0);
        json_t *o = json_loads(bodies[i], JSON_REJECT_DUPLICATES, NULL);
        ck_assert_ptr_nonnull(o);
        ck_assert_str_eq(json_string_value(json_object_get(o, "model")), m);
        json_decref(o);
    }
}
END_TEST

START_TEST(test_router_request_ids)
{
    ck_assert(router_request_id_valid("abc-123_X.y:z"));
    ck_assert(!router_request_id_valid(""));
    ck_assert(!router_request_id_valid("a b"));
    ck_assert(!router_request_id_valid("a\"b"));
    ck_assert(!router_request_id_valid("\xc3\xa9"));
    char id[ROUTER_REQUEST_ID_MAX + 1];
    memset(id, 'a', sizeof(id));
    id[64] = '\0';
    ck_assert(router_request_id_valid(id));
    id[64] = 'a';
    id[65] = '\0';
    ck_assert(!router_request_id_valid(id));
    char a[ROUTER_REQUEST_ID_MAX], b[ROUTER_REQUEST_ID_MAX];
    router_request_id_new(a);
    router_request_id_new(b);
    ck_assert(router_request_id_valid(a));
    ck_assert_uint_eq(strlen(a), 32);
    ck_assert_str_ne(a, b);
}
END_TEST

Suite *router_request_suite(void)
{
    Suite *s = suite_create("router_request");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_router_request_model_found);
    tcase_add_test(tc, test_router_request_model_absent_or_bad);
    tcase_add_test(tc, test_router_request_model_malformed);
    tcase_add_test(tc, test_router_request_model_agrees_with_jansson);
    tcase_add_test(tc, test_router_request_ids);
    suite_add_tcase(s, tc);
    return s;
}
