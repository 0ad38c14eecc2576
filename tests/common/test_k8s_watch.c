/* Tests for common/k8s/watch.c: line reassembly over every possible chunking of a stream, CRLF and
 * empty lines, the line-length bound (inside one chunk and across chunks), a stream cut mid-line,
 * and decoding of watch events including ERROR/410. */
#include "common/err.h"
#include "common/k8s/status.h"
#include "common/k8s/watch.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

struct lines_seen {
    char text[4096]; /* lines joined with '|' */
    int n;
    int stop_at; /* return 42 at this line (1-based); 0 = never */
};

static int on_line(void *ctx, const char *line, size_t len)
{
    struct lines_seen *s = ctx;
    size_t used = strlen(s->text);
    snprintf(s->text + used, sizeof(s->text) - used, "%s%.*s", s->n ? "|" : "", (int)len, line);
    s->n++;
    return s->stop_at && s->n == s->stop_at ? 42 : 0;
}

static const char stream[] = "{\"a\":1}\n\r\n{\"b\":2}\r\n\n\n{\"c\":3}\n";

START_TEST(test_k8s_watch_lines_every_chunk_size)
{
    const size_t len = strlen(stream);
    for (size_t chunk = 1; chunk <= len; chunk++) {
        struct k8s_watch_lines l;
        struct lines_seen s = {.n = 0};
        k8s_watch_lines_init(&l, 64);
        for (size_t off = 0; off < len; off += chunk) {
            size_t n = len - off < chunk ? len - off : chunk;
            ck_assert_int_eq(k8s_watch_lines_feed(&l, stream + off, n, on_line, &s), 0);
        }
        ck_assert_int_eq(k8s_watch_lines_finish(&l), 0);
        ck_assert_msg(strcmp(s.text, "{\"a\":1}|{\"b\":2}|{\"c\":3}") == 0, "chunk %zu: %s", chunk,
                      s.text);
        ck_assert_int_eq(s.n, 3);
        k8s_watch_lines_fini(&l);
    }
}
END_TEST

START_TEST(test_k8s_watch_lines_stop_value_propagates)
{
    struct k8s_watch_lines l;
    struct lines_seen s = {.stop_at = 2};
    k8s_watch_lines_init(&l, 64);
    ck_assert_int_eq(k8s_watch_lines_feed(&l, stream, strlen(stream), on_line, &s), 42);
    ck_assert_int_eq(s.n, 2);
    k8s_watch_lines_fini(&l);
}
END_TEST

START_TEST(test_k8s_watch_lines_over_long)
{
    char big[100];
    memset(big, 'x', sizeof(big));
    struct lines_seen s = {.n = 0};
    struct k8s_watch_lines l;

    /* Exactly at the limit, with and without "\r", in one chunk or split. */
    k8s_watch_lines_init(&l, 16);
    ck_assert_int_eq(k8s_watch_lines_feed(&l, big, 16, on_line, &s), 0);
    ck_assert_int_eq(k8s_watch_lines_feed(&l, "\r\n", 2, on_line, &s), 0);
    ck_assert_int_eq(k8s_watch_lines_feed(&l, "xxxxxxxxxxxxxxxx\n", 17, on_line, &s), 0);
    ck_assert_int_eq(s.n, 2);
    k8s_watch_lines_fini(&l);

    /* One byte over inside a single chunk. */
    k8s_watch_lines_init(&l, 16);
    ck_assert_int_eq(k8s_watch_lines_feed(&l, "xxxxxxxxxxxxxxxxx\n", 18, on_line, &s), ERR_TOO_BIG);
    k8s_watch_lines_fini(&l);

    /* Over the limit across many chunks with no newline: memory stays bounded. */
    k8s_watch_lines_init(&l, 16);
    int rc = 0;
    for (int i = 0; i < 1000 && rc == 0; i++) rc = k8s_watch_lines_feed(&l, big, 7, on_line, &s);
    ck_assert_int_eq(rc, ERR_TOO_BIG);
    ck_assert_uint_le(l.partial.len, 17);
    k8s_watch_lines_fini(&l);
    ck_assert_int_eq(s.n, 2);
}
END_TEST

START_TEST(test_k8s_watch_lines_cut_mid_line)
{
    struct k8s_watch_lines l;
    struct lines_seen s = {.n = 0};
    k8s_watch_lines_init(&l, 0);
    ck_assert_uint_eq(l.max_line, K8S_WATCH_LINE_MAX_DEF);
    ck_assert_int_eq(k8s_watch_lines_feed(&l, "{\"a\":1}\n{\"b\"", 12, on_line, &s), 0);
    ck_assert_int_eq(s.n, 1);
    ck_assert_int_eq(k8s_watch_lines_finish(&l), ERR_IO);
    k8s_watch_lines_fini(&l);
}
END_TEST

static int parse(const char *line, struct k8s_watch_event *ev, struct k8s_status *st)
{
    ev->object = NULL;
    return k8s_watch_event_parse(line, strlen(line), ev, st);
}

START_TEST(test_k8s_watch_event_parse_types)
{
    static const char *const types[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"};
    for (size_t i = 0; i < 4; i++) {
        char line[256];
        struct k8s_watch_event ev;
        struct k8s_status st;
        snprintf(line, sizeof(line),
                 "{\"type\":\"%s\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}",
                 types[i]);
        ck_assert_int_eq(parse(line, &ev, &st), 0);
        ck_assert_int_eq(ev.type, (int)i);
        ck_assert_str_eq(k8s_watch_type_str(ev.type), types[i]);
        ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ev.object, "metadata"),
                                                           "resourceVersion")),
                         "7");
        json_decref(ev.object);
    }
}
END_TEST

START_TEST(test_k8s_watch_event_parse_error_410)
{
    struct k8s_watch_event ev;
    struct k8s_status st;
    const char *line = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                       "\"status\":\"Failure\",\"message\":\"too old resource version: 1 (9)\","
                       "\"reason\":\"Expired\",\"code\":410}}";
    ck_assert_int_eq(parse(line, &ev, &st), 0);
    ck_assert_int_eq(ev.type, K8S_WATCH_ERROR);
    ck_assert_int_eq(st.code, 410);
    ck_assert_str_eq(st.reason, "Expired");
    ck_assert_str_eq(st.message, "too old resource version: 1 (9)");
    ck_assert_int_eq(k8s_status_to_err(st.code, st.reason), ERR_GONE);
    json_decref(ev.object);
}
END_TEST

START_TEST(test_k8s_watch_event_parse_malformed)
{
    static const struct {
        const char *line, *msg;
    } cases[] = {
        {"not json", "not JSON"},
        {"{\"type\":\"ADDED\"", "not JSON"},
        {"[1,2]", "has no type"},
        {"{\"object\":{}}", "has no type"},
        {"{\"type\":7,\"object\":{}}", "has no type"},
        {"{\"type\":\"RENAMED\",\"object\":{}}", "unknown watch event type \"RENAMED\""},
        {"{\"type\":\"ADDED\"}", "ADDED has no object"},
        {"{\"type\":\"ADDED\",\"object\":\"x\"}", "ADDED has no object"},
        {"{\"type\":\"ADDED\",\"type\":\"DELETED\",\"object\":{}}", "not JSON"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct k8s_watch_event ev;
        struct k8s_status st;
        ck_assert_int_eq(parse(cases[i].line, &ev, &st), ERR_PARSE);
        ck_assert_msg(strstr(st.message, cases[i].msg), "%s: %s", cases[i].line, st.message);
        ck_assert_ptr_null(ev.object);
    }
}
END_TEST

Suite *k8s_watch_suite(void)
{
    Suite *s = suite_create("k8s_watch");
    TCase *tc = tcase_create("watch");
    tcase_add_test(tc, test_k8s_watch_lines_every_chunk_size);
    tcase_add_test(tc, test_k8s_watch_lines_stop_value_propagates);
    tcase_add_test(tc, test_k8s_watch_lines_over_long);
    tcase_add_test(tc, test_k8s_watch_lines_cut_mid_line);
    tcase_add_test(tc, test_k8s_watch_event_parse_types);
    tcase_add_test(tc, test_k8s_watch_event_parse_error_410);
    tcase_add_test(tc, test_k8s_watch_event_parse_malformed);
    suite_add_tcase(s, tc);
    return s;
}
