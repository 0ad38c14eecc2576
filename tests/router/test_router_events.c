/* Unit tests of the KV event lines and the line reader: every line type the engine writes (the
 * exact lines of engine/serve/serve_router.c), unknown types skipped, malformed lines refused with
 * a reason, bounds on hashes and line length, lines split across reads. */
#include "router/router_events.h"

#include "common/err.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static uint64_t hashes[8];

static int parse(const char *line, struct router_event *ev)
{
    char err[160];
    return router_events_parse(line, strlen(line), ev, hashes, 8, err, sizeof(err));
}

START_TEST(test_router_events_parse_each_type)
{
    struct router_event ev;
    ck_assert_int_eq(parse("{\"type\":\"hello\",\"model\":\"m\",\"block_size\":16,\"hash\":"
                           "\"cinfer-chain-v1\",\"prefix_caching\":true}",
                           &ev),
                     0);
    ck_assert_int_eq(ev.type, ROUTER_EVENT_HELLO);
    ck_assert_int_eq(ev.block_size, 16);
    ck_assert_str_eq(ev.hash, "cinfer-chain-v1");
    ck_assert_str_eq(ev.model, "m");
    ck_assert(ev.prefix_caching);
    ck_assert_uint_eq(ev.kv_blocks, 0); /* an engine older than the field */
    ck_assert_int_eq(parse("{\"type\":\"hello\",\"block_size\":16,\"hash\":\"h\",\"model\":\"m\","
                           "\"prefix_caching\":true,\"kv_blocks\":1638}",
                           &ev),
                     0);
    ck_assert_uint_eq(ev.kv_blocks, 1638);
    ck_assert_int_eq(parse("{\"type\":\"snapshot\",\"seq\":7,\"blocks\":2}", &ev), 0);
    ck_assert_int_eq(ev.type, ROUTER_EVENT_SNAPSHOT);
    ck_assert_uint_eq(ev.seq, 7);
    ck_assert_uint_eq(ev.blocks, 2);
    ck_assert_int_eq(parse("{\"type\":\"stored\",\"seq\":9,\"tier\":\"device\",\"hashes\":["
                           "\"0123456789abcdef\",\"7fffffffffffffff\"]}",
                           &ev),
                     0);
    ck_assert_int_eq(ev.type, ROUTER_EVENT_STORED);
    ck_assert_int_eq(ev.tier, ROUTER_TIER_DEVICE);
    ck_assert_uint_eq(ev.n_hashes, 2);
    ck_assert_uint_eq(ev.hashes[0], UINT64_C(0x0123456789abcdef));
    ck_assert_uint_eq(ev.hashes[1], UINT64_C(0x7fffffffffffffff));
    ck_assert_int_eq(parse("{\"type\":\"evicted\",\"seq\":10,\"tier\":\"cpu\",\"hashes\":[]}", &ev),
                     0);
    ck_assert_int_eq(ev.type, ROUTER_EVENT_EVICTED);
    ck_assert_int_eq(ev.tier, ROUTER_TIER_OTHER); /* a tier of a newer engine */
    ck_assert_uint_eq(ev.n_hashes, 0);
    ck_assert_int_eq(parse("{\"type\":\"stored\",\"seq\":11,\"tier\":\"host\",\"hashes\":[]}", &ev),
                     0);
    ck_assert_int_eq(ev.tier, ROUTER_TIER_HOST);
    ck_assert_int_eq(
        parse("{\"type\":\"evicted\",\"seq\":12,\"tier\":\"disk\",\"hashes\":[]}", &ev), 0);
    ck_assert_int_eq(ev.tier, ROUTER_TIER_DISK);
    ck_assert_int_eq(parse("{\"type\":\"load\",\"seq\":10,\"running\":3,\"waiting\":4}", &ev), 0);
    ck_assert_int_eq(ev.type, ROUTER_EVENT_LOAD);
    ck_assert_int_eq(ev.running, 3);
    ck_assert_int_eq(ev.waiting, 4);
    ck_assert_int_eq(ev.prefill_waiting, -1); /* an engine older than the field */
    ck_assert_int_eq(parse("{\"type\":\"load\",\"seq\":11,\"running\":1,\"waiting\":2,"
                           "\"prefill_waiting\":3072}",
                           &ev),
                     0);
    ck_assert_int_eq(ev.waiting, 2);
    ck_assert_int_eq(ev.prefill_waiting, 3072);
    ck_assert_int_eq(parse("{\"type\":\"offload\",\"seq\":1}", &ev), ERR_UNSUPPORTED);
}
END_TEST

START_TEST(test_router_events_parse_malformed)
{
    static const char *const bad[] = {
        "",
        "{",
        "[]",
        "{\"seq\":1}",
        "{\"type\":\"load\",\"running\":1,\"waiting\":1}", /* no seq */
        "{\"type\":\"load\",\"seq\":-1,\"running\":1,\"waiting\":1}",
        "{\"type\":\"load\",\"seq\":1,\"running\":-1,\"waiting\":1}",
        "{\"type\":\"load\",\"seq\":1,\"running\":\"1\",\"waiting\":1}",
        "{\"type\":\"load\",\"seq\":1,\"running\":1,\"waiting\":1,\"prefill_waiting\":-5}",
        "{\"type\":\"load\",\"seq\":1,\"running\":1,\"waiting\":1,\"prefill_waiting\":1.5}",
        "{\"type\":\"load\",\"seq\":1,\"running\":1,\"waiting\":1,"
        "\"prefill_waiting\":99999999999999}",
        "{\"type\":\"snapshot\",\"seq\":1}",
        "{\"type\":\"stored\",\"seq\":1,\"tier\":\"device\"}",
        "{\"type\":\"stored\",\"seq\":1,\"hashes\":[]}",
        "{\"type\":\"stored\",\"seq\":1,\"tier\":\"device\",\"hashes\":[\"123\"]}",
        "{\"type\":\"stored\",\"seq\":1,\"tier\":\"device\",\"hashes\":[\"0123456789ABCDEF\"]}",
        "{\"type\":\"stored\",\"seq\":1,\"tier\":\"device\",\"hashes\":[12]}",
        "{\"type\":\"stored\",\"seq\":1,\"tier\":\"device\",\"hashes\":\"x\"}",
        "{\"type\":\"hello\",\"block_size\":0,\"hash\":\"h\",\"model\":\"m\","
        "\"prefix_caching\":true}",
        "{\"type\":\"hello\",\"block_size\":16,\"model\":\"m\",\"prefix_caching\":true}",
        "{\"type\":\"hello\",\"block_size\":16,\"hash\":\"h\",\"model\":\"m\"}",
        "{\"type\":\"hello\",\"block_size\":16,\"hash\":\"h\",\"model\":\"m\","
        "\"prefix_caching\":true,\"kv_blocks\":-1}",
        "{\"type\":\"load\",\"seq\":1,\"seq\":2,\"running\":1,\"waiting\":1}",
    };
    struct router_event ev;
    char err[160];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ck_assert_msg(router_events_parse(bad[i], strlen(bad[i]), &ev, hashes, 8, err,
                                          sizeof(err)) == ERR_PARSE,
                      "accepted: %s", bad[i]);
        ck_assert_msg(err[0], "no reason for: %s", bad[i]);
    }
    /* More hashes than the caller's array holds. */
    char line[1024];
    size_t n = (size_t)snprintf(line, sizeof(line),
                                "{\"type\":\"stored\",\"seq\":1,\"tier\":\"device\",\"hashes\":[");
    for (int i = 0; i < 9; i++)
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s\"%016x\"", i ? "," : "", i);
    snprintf(line + n, sizeof(line) - n, "]}");
    ck_assert_int_eq(parse(line, &ev), ERR_PARSE);
}
END_TEST

struct collected {
    char lines[8][64];
    int n;
};

static int collect(void *ctx, const char *line, size_t len)
{
    struct collected *c = ctx;
    ck_assert_int_lt(c->n, 8);
    ck_assert_uint_lt(len, 64);
    memcpy(c->lines[c->n], line, len);
    c->lines[c->n++][len] = '\0';
    return strcmp(c->lines[c->n - 1], "stop") == 0 ? 7 : 0;
}

START_TEST(test_router_lines_split_and_bound)
{
    struct router_lines l;
    struct collected c = {0};
    router_lines_init(&l, 16);
    ck_assert_int_eq(router_lines_feed(&l, "ab", 2, collect, &c), 0);
    ck_assert_int_eq(c.n, 0);
    ck_assert_int_eq(router_lines_feed(&l, "c\r\n\nde\nf", 8, collect, &c), 0);
    ck_assert_int_eq(c.n, 2);
    ck_assert_str_eq(c.lines[0], "abc");
    ck_assert_str_eq(c.lines[1], "de");
    ck_assert_int_eq(router_lines_feed(&l, "g\n", 2, collect, &c), 0);
    ck_assert_str_eq(c.lines[2], "fg");
    /* The callback's non-zero result stops the feed. */
    ck_assert_int_eq(router_lines_feed(&l, "stop\nlost\n", 10, collect, &c), 7);
    ck_assert_int_eq(c.n, 4);
    router_lines_fini(&l);
    /* A line longer than the bound, whole or in pieces. */
    router_lines_init(&l, 4);
    ck_assert_int_eq(router_lines_feed(&l, "12345\n", 6, collect, &c), ERR_TOO_BIG);
    router_lines_fini(&l);
    router_lines_init(&l, 4);
    ck_assert_int_eq(router_lines_feed(&l, "123", 3, collect, &c), 0);
    ck_assert_int_eq(router_lines_feed(&l, "45", 2, collect, &c), ERR_TOO_BIG);
    router_lines_fini(&l);
}
END_TEST

Suite *router_events_suite(void)
{
    Suite *s = suite_create("router_events");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_router_events_parse_each_type);
    tcase_add_test(tc, test_router_events_parse_malformed);
    tcase_add_test(tc, test_router_lines_split_and_bound);
    suite_add_tcase(s, tc);
    return s;
}
