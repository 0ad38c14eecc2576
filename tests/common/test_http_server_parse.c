/* Tests for common/http_server_parse: request heads (complete, incomplete, refused with the right
 * status), field lookup, target decoding and the chunked decoder, without sockets. */
#include "common/err.h"
#include "common/http_server_parse.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static long parse(const char *s, struct http_head *h, struct http_parse_err *err)
{
    return http_parse_head(s, strlen(s), 1024, h, err);
}

START_TEST(test_http_parse_head_complete)
{
    struct http_head h;
    struct http_parse_err err;
    const char *s = "\r\nPOST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length:  12 \r\n"
                    "Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
                    "Expect: 100-continue\r\nX-Empty:\r\n\r\nBODY";
    long n = parse(s, &h, &err);
    ck_assert_int_eq(n, (long)(strstr(s, "BODY") - s));
    ck_assert_int_eq(h.method, HTTP_POST);
    ck_assert_int_eq(h.minor, 1);
    ck_assert_int_eq(h.form, HTTP_TARGET_ORIGIN);
    ck_assert(h.has_length);
    ck_assert_uint_eq(h.length, 12);
    ck_assert(h.conn_keep_alive && !h.conn_close && h.upgrade && h.expect_continue && !h.chunked);
    ck_assert_uint_eq(h.n_fields, 6);
    char v[64];
    ck_assert_int_eq(http_head_field(&h, s, "content-length", v, sizeof(v)), 2);
    ck_assert_str_eq(v, "12");
    ck_assert_int_eq(http_head_field(&h, s, "X-EMPTY", v, sizeof(v)), 0);
    ck_assert_str_eq(v, "");
    ck_assert_int_eq(http_head_field(&h, s, "x-absent", v, sizeof(v)), ERR_NOT_FOUND);
    ck_assert_int_eq(http_head_field(&h, s, "connection", v, 4), ERR_TOO_BIG);

    /* Repeated fields join with ", "; HTTP/1.0; "close" wins. */
    s = "GET / HTTP/1.0\r\nAccept: a\r\nAccept: b\r\nConnection: close\r\n\r\n";
    ck_assert_int_gt(parse(s, &h, &err), 0);
    ck_assert_int_eq(h.minor, 0);
    ck_assert(h.conn_close);
    ck_assert_int_eq(http_head_field(&h, s, "accept", v, sizeof(v)), 4);
    ck_assert_str_eq(v, "a, b");
    /* chunked; a higher 1.x minor reads as 1.1; asterisk and absolute forms. */
    s = "PUT /x HTTP/1.7\r\nTransfer-Encoding: CHUNKED\r\n\r\n";
    ck_assert_int_gt(parse(s, &h, &err), 0);
    ck_assert(h.chunked && h.minor == 1);
    ck_assert_int_gt(parse("OPTIONS * HTTP/1.1\r\n\r\n", &h, &err), 0);
    ck_assert_int_eq(h.form, HTTP_TARGET_ASTERISK);
    ck_assert_int_gt(parse("GET HTTP://h/a HTTP/1.1\r\n\r\n", &h, &err), 0);
    ck_assert_int_eq(h.form, HTTP_TARGET_ABSOLUTE);
}
END_TEST

START_TEST(test_http_parse_head_incomplete)
{
    static const char *const partial[] = {
        "",
        "\r",
        "\r\n",
        "G",
        "GET",
        "GET ",
        "GET /",
        "GET / HTTP/1",
        "GET / HTTP/1.1\r",
        "GET / HTTP/1.1\r\n",
        "GET / HTTP/1.1\r\nHost: x",
        "GET / HTTP/1.1\r\nHost: x\r\n\r",
        "PRI * HTTP/2",
    };
    for (size_t i = 0; i < sizeof(partial) / sizeof(partial[0]); i++) {
        struct http_head h;
        struct http_parse_err err;
        ck_assert_msg(parse(partial[i], &h, &err) == 0, "%zu: %s", i, err.message);
    }
}
END_TEST

START_TEST(test_http_parse_head_refused)
{
    static const struct {
        const char *s;
        int status;
    } bad[] = {
        {"\x16\x03\x01", 400},
        {" GET / HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\n", 400},
        {"\n", 400},
        {"GET /\r\n\r\n", 400},
        {"GET / HTTP/1.1 x\r\n\r\n", 400},
        {"GET / http/1.1\r\n\r\n", 400},
        {"GET /a\x7f HTTP/1.1\r\n\r\n", 400},
        {"FOO / HTTP/1.1\r\n\r\n", 501},
        {"get / HTTP/1.1\r\n\r\n", 501}, /* methods are case-sensitive */
        {"HELLO\r\n\r\n", 400},
        {"hello", 400},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"GET / HTTP/0.9\r\n\r\n", 505},
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505},
        {"GET * HTTP/1.1\r\n\r\n", 400},
        {"GET a HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA : b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: b\nc: d\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: \x01\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400},
        {"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked,chunked\r\n\r\n", 501},
        {"GET / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct http_head h;
        struct http_parse_err err = {0, NULL};
        long n = parse(bad[i].s, &h, &err);
        ck_assert_msg(n == -1 && err.status == bad[i].status, "%zu: %ld %d", i, n, err.status);
        ck_assert_ptr_nonnull(err.message);
    }
    /* Size limits: the request line (414) and the whole head (431), complete or not. */
    char big[3000];
    memset(big, 'a', sizeof(big));
    memcpy(big, "GET /", 5);
    struct http_head h;
    struct http_parse_err err;
    ck_assert_int_eq(http_parse_head(big, sizeof(big), 1024, &h, &err), -1);
    ck_assert_int_eq(err.status, 414);
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    ck_assert_int_eq(http_parse_head(big, sizeof(big), 1024, &h, &err), -1);
    ck_assert_int_eq(err.status, 431);
    char many[4096];
    size_t mn = (size_t)snprintf(many, sizeof(many), "GET / HTTP/1.1\r\n");
    for (int i = 0; i < HTTP_PARSE_MAX_FIELDS + 1; i++) {
        memcpy(many + mn, "A: b\r\n", 6);
        mn += 6;
    }
    memcpy(many + mn, "\r\n", 2);
    mn += 2;
    ck_assert_int_eq(http_parse_head(many, mn, sizeof(many), &h, &err), -1);
    ck_assert_int_eq(err.status, 431);
}
END_TEST

START_TEST(test_http_parse_path_forms)
{
    char out[32];
    struct http_parse_err err;
    ck_assert_int_eq(
        http_parse_path("/a%20b%2Fc?q=%zz", 16, HTTP_TARGET_ORIGIN, out, sizeof(out), &err), 0);
    ck_assert_str_eq(out, "/a b/c");
    ck_assert_int_eq(
        http_parse_path("http://h:1/x?y", 14, HTTP_TARGET_ABSOLUTE, out, sizeof(out), &err), 0);
    ck_assert_str_eq(out, "/x");
    ck_assert_int_eq(http_parse_path("https://h", 9, HTTP_TARGET_ABSOLUTE, out, sizeof(out), &err),
                     0);
    ck_assert_str_eq(out, "/");
    static const char *const bad[] = {"/%zz", "/%2", "/%", "/a%00", "/a#b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(
            http_parse_path(bad[i], strlen(bad[i]), HTTP_TARGET_ORIGIN, out, sizeof(out), &err),
            -1);
        ck_assert_int_eq(err.status, 400);
    }
    ck_assert_int_eq(http_parse_path("http:///x", 9, HTTP_TARGET_ABSOLUTE, out, sizeof(out), &err),
                     -1);
    const char *lng = "/0123456789012345678901234567890123456789";
    ck_assert_int_eq(http_parse_path(lng, strlen(lng), HTTP_TARGET_ORIGIN, out, sizeof(out), &err),
                     -1);
    ck_assert_int_eq(err.status, 414);
}
END_TEST

/* Feeds `s` at once and a byte at a time; both must give `want_rc` and `want_body`. */
static void chunked_case(const char *s, int want_rc, int want_status, const char *want_body,
                         size_t max)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        struct http_chunked d;
        memset(&d, 0, sizeof(d));
        struct buf out;
        buf_init(&out, max);
        struct http_parse_err err = {0, NULL};
        size_t n = strlen(s), off = 0, used = 0;
        int rc = 0;
        while (off < n) {
            size_t len = bytewise ? 1 : n - off;
            rc = http_chunked_feed(&d, s + off, len, &used, &out, &err);
            off += used;
            if (rc) break;
        }
        ck_assert_msg(rc == want_rc, "%s (bytewise %d): rc %d", s, bytewise, rc);
        if (rc < 0) ck_assert_int_eq(err.status, want_status);
        if (want_body) ck_assert_str_eq(buf_cstr(&out), want_body);
        buf_fini(&out);
    }
}

START_TEST(test_http_chunked_decoding)
{
    chunked_case("5\r\nhello\r\n0\r\n\r\n", 1, 0, "hello", 100);
    chunked_case("2;a=b;c\r\nhe\r\n3 ; x=\"y\"\r\nllo\r\n0\r\nT: 1\r\nU: 2\r\n\r\n", 1, 0, "hello",
                 100);
    chunked_case("A\r\n0123456789\r\n0\r\n\r\n", 1, 0, "0123456789", 100);
    chunked_case("5\r\nhel", 0, 0, "hel", 100);  /* more needed */
    chunked_case("0\r\n\r\nGET", 1, 0, "", 100); /* stops at the end of the body */
    chunked_case("zz\r\n", -1, 400, NULL, 100);
    chunked_case("\r\n", -1, 400, NULL, 100);
    chunked_case("5x\r\n", -1, 400, NULL, 100);
    chunked_case("5\nhello\r\n", -1, 400, NULL, 100);
    chunked_case("5\r\nhello\n0\r\n\r\n", -1, 400, NULL, 100);
    chunked_case("5\r\nhelloX", -1, 400, NULL, 100);
    chunked_case("10000000000000000\r\n", -1, 400, NULL, 100);
    chunked_case("0\r\nT\x01\r\n\r\n", -1, 400, NULL, 100);
    chunked_case("0\r\n\n", -1, 400, NULL, 100);
    chunked_case("65\r\n", -1, 413, NULL, 100); /* 101 bytes > 100 */
    chunked_case("32\r\n01234567890123456789012345678901234567890123456789\r\n33\r\n", -1, 413,
                 NULL, 100);
    /* The returned `used` leaves what follows the body. */
    struct http_chunked d;
    memset(&d, 0, sizeof(d));
    struct buf out;
    buf_init(&out, 100);
    struct http_parse_err err;
    size_t used = 0;
    const char *s = "1\r\nx\r\n0\r\n\r\nNEXT";
    ck_assert_int_eq(http_chunked_feed(&d, s, strlen(s), &used, &out, &err), 1);
    ck_assert_uint_eq(used, strlen(s) - 4);
    buf_fini(&out);
}
END_TEST

Suite *http_server_parse_suite(void)
{
    Suite *s = suite_create("http_server_parse");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_http_parse_head_complete);
    tcase_add_test(tc, test_http_parse_head_incomplete);
    tcase_add_test(tc, test_http_parse_head_refused);
    tcase_add_test(tc, test_http_parse_path_forms);
    tcase_add_test(tc, test_http_chunked_decoding);
    suite_add_tcase(s, tc);
    return s;
}
