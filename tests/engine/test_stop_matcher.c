/* Unit tests of the stop-string matcher: every split position, byte-by-byte feeding, overlapping
 * and prefix-sharing stops, minimal hold-back, multi-byte UTF-8 and bad arguments. Each streamed
 * result is compared with a plain reference: the whole text cut at the earliest stop. */
#include "engine/text/stop_matcher.h"

#include "common/err.h"

#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Reference: the text before the stop occurrence that completes first (earliest end, then
 * earliest start), and which stop (-1: none). */
static size_t ref_cut(const char *text, const char *const *stops, size_t n, int *which)
{
    size_t len = strlen(text), best = len, best_end = (size_t)-1;
    *which = -1;
    for (size_t i = 0; i < n; i++) {
        const char *hit = strstr(text, stops[i]);
        if (!hit) continue;
        size_t at = (size_t)(hit - text), end = at + strlen(stops[i]);
        if (end < best_end || (end == best_end && at < best))
            best = at, best_end = end, *which = (int)i;
    }
    return best;
}

/* Reference hold-back for ASCII text: longest tail that is a proper prefix of a stop. */
static size_t ref_tail(const char *s, size_t len, const char *const *stops, size_t n)
{
    size_t best = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 1; k < strlen(stops[i]) && k <= len; k++)
            if (k > best && memcmp(s + len - k, stops[i], k) == 0) best = k;
    return best;
}

/* Feeds `text` cut at the given positions (sorted, < len) and checks the result and invariants. */
static void run_split(const char *text, const char *const *stops, size_t n, const size_t *cuts,
                      size_t n_cuts, bool check_minimal)
{
    struct stop_matcher *m = NULL;
    ck_assert_int_eq(stop_matcher_new(stops, n, &m), 0);
    struct buf out;
    buf_init(&out, 0);
    int which = -1;
    size_t want = ref_cut(text, stops, n, &which);
    size_t len = strlen(text), pos = 0;
    int rc = 0;
    for (size_t c = 0; c <= n_cuts && rc == 0; c++) {
        size_t end = c < n_cuts ? cuts[c] : len;
        rc = stop_matcher_feed(m, text + pos, end - pos, &out);
        ck_assert_int_ge(rc, 0);
        pos = end;
        /* Never emits anything past the reference cut. */
        ck_assert_uint_le(out.len, want);
        ck_assert_int_eq(memcmp(buf_cstr(&out), text, out.len), 0);
        if (rc == 0 && check_minimal) {
            ck_assert_uint_eq(stop_matcher_held(m), ref_tail(text, pos, stops, n));
            ck_assert_uint_eq(out.len + stop_matcher_held(m), pos);
        }
    }
    ck_assert_int_eq(stop_matcher_flush(m, &out), 0);
    ck_assert_uint_eq(out.len, want);
    ck_assert_int_eq(memcmp(buf_cstr(&out), text, want), 0);
    ck_assert_int_eq(stop_matcher_matched(m), which);
    ck_assert_int_eq(rc, which >= 0 ? 1 : 0);
    buf_fini(&out);
    stop_matcher_free(m);
}

/* Every single cut, every pair of cuts, and one byte at a time. */
static void run_all_splits(const char *text, const char *const *stops, size_t n, bool minimal)
{
    size_t len = strlen(text);
    run_split(text, stops, n, NULL, 0, minimal);
    for (size_t i = 0; i <= len; i++) {
        size_t c1[1] = {i};
        run_split(text, stops, n, c1, 1, minimal);
        for (size_t j = i; j <= len; j++) {
            size_t c2[2] = {i, j};
            run_split(text, stops, n, c2, 2, minimal);
        }
    }
    size_t *each = malloc((len + 1) * sizeof(size_t));
    ck_assert_ptr_nonnull(each);
    for (size_t i = 0; i < len; i++) each[i] = i + 1;
    run_split(text, stops, n, each, len ? len - 1 : 0, minimal);
    free(each);
}

START_TEST(test_stop_matcher_feed_every_split_single_stop)
{
    const char *stops[] = {"STOP"};
    run_all_splits("hello STOP world", stops, 1, true);
    run_all_splits("no stop here, only ST and STO", stops, 1, true);
    run_all_splits("STOP at start", stops, 1, true);
    run_all_splits("ends with STOP", stops, 1, true);
    run_all_splits("SSTSTOSTOP", stops, 1, true);
}
END_TEST

START_TEST(test_stop_matcher_feed_overlapping_stops)
{
    /* "abcd" and "bc": "bc" starts later inside "abcd" but completes first, so it wins whatever
     * the split (generation would have stopped there). */
    const char *s1[] = {"abcd", "bc"};
    run_all_splits("xxabcdyy", s1, 2, true);
    run_all_splits("xxabcyy", s1, 2, true);
    int which = -1;
    ck_assert_uint_eq(ref_cut("xxabcdyy", s1, 2, &which), 3);
    ck_assert_int_eq(which, 1);
    const char *s2[] = {"aab", "ab", "b", "aaaa"};
    run_all_splits("caaaab", s2, 4, true);
    run_all_splits("ccaaac", s2, 4, true);
    const char *s3[] = {"\n\n", "\nUser:"};
    run_all_splits("line one\nline two\nUser: hi", s3, 2, true);
    run_all_splits("para\n\nnext", s3, 2, true);
}
END_TEST

START_TEST(test_stop_matcher_feed_self_overlapping_stop)
{
    const char *stops[] = {"abab"};
    run_all_splits("abaabababx", stops, 1, true);
    run_all_splits("ababa", stops, 1, true);
    run_all_splits("aba", stops, 1, true);
}
END_TEST

START_TEST(test_stop_matcher_feed_holds_minimum)
{
    const char *stops[] = {"</s>", "###"};
    struct stop_matcher *m = NULL;
    ck_assert_int_eq(stop_matcher_new(stops, 2, &m), 0);
    struct buf out;
    buf_init(&out, 0);
    ck_assert_int_eq(stop_matcher_feed(m, "text <", 6, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "text ");
    ck_assert_uint_eq(stop_matcher_held(m), 1);
    ck_assert_int_eq(stop_matcher_feed(m, "/b", 2, &out), 0); /* "</b" cannot become "</s>" */
    ck_assert_str_eq(buf_cstr(&out), "text </b");
    ck_assert_uint_eq(stop_matcher_held(m), 0);
    ck_assert_int_eq(stop_matcher_feed(m, "#", 1, &out), 0);
    ck_assert_int_eq(stop_matcher_feed(m, "#", 1, &out), 0);
    ck_assert_uint_eq(stop_matcher_held(m), 2);
    ck_assert_int_eq(stop_matcher_feed(m, "#tail", 5, &out), 1);
    ck_assert_str_eq(buf_cstr(&out), "text </b");
    ck_assert_int_eq(stop_matcher_matched(m), 1);
    /* Finished: later feeds and the flush add nothing. */
    ck_assert_int_eq(stop_matcher_feed(m, "more", 4, &out), 1);
    ck_assert_int_eq(stop_matcher_flush(m, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "text </b");
    buf_fini(&out);
    stop_matcher_free(m);
}
END_TEST

START_TEST(test_stop_matcher_feed_utf8_multibyte)
{
    /* Stops made of multi-byte characters, text split inside characters. */
    const char *stops[] = {"\xE3\x80\x82", "\xF0\x9F\x9B\x91"}; /* "。" and "🛑" */
    run_all_splits("\xE6\x97\xA5\xE6\x9C\xAC\xE3\x80\x82\xE8\xAA\x9E", stops, 2, false);
    run_all_splits("caf\xC3\xA9 \xF0\x9F\x9B\x91 stop", stops, 2, false);
    run_all_splits("no stop: \xF0\x9F\x98\x80\xE3\x80", stops, 2, false);
}
END_TEST

START_TEST(test_stop_matcher_feed_emits_whole_characters)
{
    struct stop_matcher *m = NULL;
    ck_assert_int_eq(stop_matcher_new(NULL, 0, &m), 0);
    struct buf out;
    buf_init(&out, 0);
    /* "é" (C3 A9) and "😀" (F0 9F 98 80) fed byte by byte: nothing partial is ever emitted. */
    ck_assert_int_eq(stop_matcher_feed(m, "a\xC3", 2, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "a");
    ck_assert_int_eq(stop_matcher_feed(m, "\xA9\xF0\x9F", 3, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "a\xC3\xA9");
    ck_assert_int_eq(stop_matcher_feed(m, "\x98", 1, &out), 0);
    ck_assert_uint_eq(stop_matcher_held(m), 3);
    ck_assert_int_eq(stop_matcher_feed(m, "\x80", 1, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "a\xC3\xA9\xF0\x9F\x98\x80");
    /* Invalid bytes are not held (a lone continuation byte, 0xFF). */
    ck_assert_int_eq(stop_matcher_feed(m, "\x80\xFF", 2, &out), 0);
    ck_assert_uint_eq(stop_matcher_held(m), 0);
    /* An unfinished character at the end comes out on flush. */
    ck_assert_int_eq(stop_matcher_feed(m, "\xE3\x80", 2, &out), 0);
    ck_assert_uint_eq(stop_matcher_held(m), 2);
    ck_assert_int_eq(stop_matcher_flush(m, &out), 0);
    ck_assert_uint_eq(out.len, 11);
    ck_assert_uint_eq(stop_matcher_held(m), 0);
    buf_fini(&out);
    stop_matcher_free(m);
}
END_TEST

START_TEST(test_stop_matcher_feed_empty_pieces)
{
    const char *stops[] = {"ab"};
    struct stop_matcher *m = NULL;
    ck_assert_int_eq(stop_matcher_new(stops, 1, &m), 0);
    struct buf out;
    buf_init(&out, 0);
    ck_assert_int_eq(stop_matcher_feed(m, NULL, 0, &out), 0);
    ck_assert_int_eq(stop_matcher_feed(m, "a", 1, &out), 0);
    ck_assert_int_eq(stop_matcher_feed(m, "", 0, &out), 0);
    ck_assert_int_eq(stop_matcher_feed(m, "b", 1, &out), 1);
    ck_assert_uint_eq(out.len, 0);
    buf_fini(&out);
    stop_matcher_free(m);
}
END_TEST

START_TEST(test_stop_matcher_feed_bounded_output)
{
    const char *stops[] = {"zz"};
    struct stop_matcher *m = NULL;
    ck_assert_int_eq(stop_matcher_new(stops, 1, &m), 0);
    struct buf out;
    buf_init(&out, 4);
    ck_assert_int_eq(stop_matcher_feed(m, "abcdefz", 7, &out), ERR_TOO_BIG);
    ck_assert_uint_eq(out.len, 0);
    buf_fini(&out);
    buf_init(&out, 0);
    /* The failed feed left the state unchanged: the text was not consumed. */
    ck_assert_int_eq(stop_matcher_feed(m, "ab", 2, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "ab");
    buf_fini(&out);
    stop_matcher_free(m);
}
END_TEST

START_TEST(test_stop_matcher_new_rejects_bad_stops)
{
    struct stop_matcher *m = NULL;
    const char *empty[] = {""};
    ck_assert_int_eq(stop_matcher_new(empty, 1, &m), ERR_INVAL);
    const char *null1[] = {NULL};
    ck_assert_int_eq(stop_matcher_new(null1, 1, &m), ERR_INVAL);
    const char *five[] = {"a", "b", "c", "d", "e"};
    ck_assert_int_eq(stop_matcher_new(five, 5, &m), ERR_INVAL);
    ck_assert_int_eq(stop_matcher_new(NULL, 2, &m), ERR_INVAL);
    char *big = malloc(STOP_MATCHER_MAX_LEN + 2);
    ck_assert_ptr_nonnull(big);
    memset(big, 'x', STOP_MATCHER_MAX_LEN + 1);
    big[STOP_MATCHER_MAX_LEN + 1] = '\0';
    const char *bigs[] = {big};
    ck_assert_int_eq(stop_matcher_new(bigs, 1, &m), ERR_INVAL);
    free(big);
    ck_assert_ptr_null(m);
    stop_matcher_free(NULL);
}
END_TEST

Suite *stop_matcher_suite(void)
{
    Suite *s = suite_create("stop_matcher");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_stop_matcher_feed_every_split_single_stop);
    tcase_add_test(tc, test_stop_matcher_feed_overlapping_stops);
    tcase_add_test(tc, test_stop_matcher_feed_self_overlapping_stop);
    tcase_add_test(tc, test_stop_matcher_feed_holds_minimum);
    tcase_add_test(tc, test_stop_matcher_feed_utf8_multibyte);
    tcase_add_test(tc, test_stop_matcher_feed_emits_whole_characters);
    tcase_add_test(tc, test_stop_matcher_feed_empty_pieces);
    tcase_add_test(tc, test_stop_matcher_feed_bounded_output);
    tcase_add_test(tc, test_stop_matcher_new_rejects_bad_stops);
    suite_add_tcase(s, tc);
    return s;
}
