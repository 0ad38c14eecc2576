/* The serving core's own error replies (engine/serve/serve_error.c): each serve_fail's status,
 * type, code and Retry-After, and the OpenAI shape of the formatted body, notably for a faulted
 * engine. */
#include "engine/serve/serve_error.h"

#include <check.h>
#include <jansson.h>
#include <string.h>

/* Parses an error reply's body and checks the OpenAI shape: {"error":{message,type,param,code}}.
 * Returns the message (valid until json_decref of *root). */
static const char *assert_error_body(const struct serve_error_reply *x, const char *type,
                                     const char *code, json_t **root)
{
    json_error_t je;
    json_t *j = json_loadb(x->body.data, x->body.len, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", je.text, x->body.data);
    json_t *err = json_object_get(j, "error");
    ck_assert(json_is_object(err));
    ck_assert_str_eq(json_string_value(json_object_get(err, "type")), type);
    if (code) ck_assert_str_eq(json_string_value(json_object_get(err, "code")), code);
    ck_assert(json_is_null(json_object_get(err, "param")));
    const char *msg = json_string_value(json_object_get(err, "message"));
    ck_assert_ptr_nonnull(msg);
    *root = j;
    return msg;
}

START_TEST(test_serve_error_faulted_running_is_500)
{
    struct api_error e;
    serve_error_set(&e, SERVE_FAIL_FAULTED_RUNNING);
    ck_assert_int_eq(e.status, 500);
    ck_assert_int_eq(e.retry_after_s, 0);
    struct serve_error_reply x;
    ck_assert_int_eq(serve_error_reply_init(&x, &e), 0);
    ck_assert_uint_eq(x.n_headers, 0); /* no Retry-After for a response cut short */
    json_t *j;
    const char *msg = assert_error_body(&x, "server_error", "engine_faulted", &j);
    ck_assert_msg(strstr(msg, "faulted") && strstr(msg, "restarted"), "%s", msg);
    json_decref(j);
    serve_error_reply_fini(&x);
}
END_TEST

START_TEST(test_serve_error_faulted_refused_is_503_with_retry_after)
{
    struct api_error e;
    serve_error_set(&e, SERVE_FAIL_FAULTED);
    ck_assert_int_eq(e.status, 503);
    struct serve_error_reply x;
    ck_assert_int_eq(serve_error_reply_init(&x, &e), 0);
    ck_assert_uint_eq(x.n_headers, 1);
    ck_assert_str_eq(x.headers[0].name, "Retry-After");
    ck_assert_str_eq(x.headers[0].value, "1");
    json_t *j;
    const char *msg = assert_error_body(&x, "server_error", "engine_faulted", &j);
    ck_assert_msg(strstr(msg, "faulted") && strstr(msg, "restarted"), "%s", msg);
    json_decref(j);
    serve_error_reply_fini(&x);
}
END_TEST

/* Every reason the core refuses or cuts a request: status, type and Retry-After as clients (and
 * the e2e scripts) rely on them. */
START_TEST(test_serve_error_set_every_reason)
{
    static const struct {
        enum serve_fail why;
        int status;
        const char *type;
        const char *retry_after; /* NULL: no header */
    } cases[] = {
        {SERVE_FAIL_LOADING, 503, "server_error", "5"},
        {SERVE_FAIL_QUEUE_FULL, 429, "rate_limit_error", "1"},
        {SERVE_FAIL_DRAINING, 503, "server_error", "1"},
        {SERVE_FAIL_FAULTED, 503, "server_error", "1"},
        {SERVE_FAIL_FAULTED_RUNNING, 500, "server_error", NULL},
        {SERVE_FAIL_INTERNAL, 500, "server_error", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct api_error e;
        serve_error_set(&e, cases[i].why);
        ck_assert_int_eq(e.status, cases[i].status);
        struct serve_error_reply x;
        ck_assert_int_eq(serve_error_reply_init(&x, &e), 0);
        ck_assert_uint_eq(x.n_headers, cases[i].retry_after ? 1 : 0);
        if (cases[i].retry_after) ck_assert_str_eq(x.headers[0].value, cases[i].retry_after);
        json_t *j;
        const char *msg = assert_error_body(&x, cases[i].type, NULL, &j);
        ck_assert_int_gt((int)strlen(msg), 10);
        json_decref(j);
        serve_error_reply_fini(&x);
    }
    struct api_error e;
    serve_error_queue_full(&e, 7);
    ck_assert_int_eq(e.status, 429);
    ck_assert_int_eq(e.retry_after_s, 1);
    ck_assert_ptr_nonnull(strstr(e.message, "(7)"));
}
END_TEST

Suite *serve_error_suite(void)
{
    Suite *s = suite_create("serve_error");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_serve_error_faulted_running_is_500);
    tcase_add_test(tc, test_serve_error_faulted_refused_is_503_with_retry_after);
    tcase_add_test(tc, test_serve_error_set_every_reason);
    suite_add_tcase(s, tc);
    return s;
}
