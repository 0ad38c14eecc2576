/* Declarative configuration: precedence, types, ranges, choices, positionals, errors, help. */
#include "common/cfg.h"
#include "common/err.h"

#include <check.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct test_cfg {
    int port;
    double temp;
    uint64_t kv_bytes;
    bool prefix;
    const char *name;
    const char *token;
};

static const struct cfg_opt opts[] = {
    {"port", CFG_INT, offsetof(struct test_cfg, port), "8000", 1, 65535, "TCP port", NULL, 0},
    {"temperature", CFG_DOUBLE, offsetof(struct test_cfg, temp), "1.0", 0, 2, "Sampling", NULL, 0},
    {"kv-cache-bytes", CFG_SIZE, offsetof(struct test_cfg, kv_bytes), "64M", 1, 0, "KV budget",
     NULL, 0},
    {"prefix-caching", CFG_BOOL, offsetof(struct test_cfg, prefix), "true", 1, 0, "Reuse", NULL, 0},
    {"name", CFG_STRING, offsetof(struct test_cfg, name), "json", 1, 0, "Format", "json|text", 0},
    {"token", CFG_STRING, offsetof(struct test_cfg, token), NULL, 1, 0, "Secret", NULL, CFG_SECRET},
};

static const struct cfg_spec spec = {
    .program = "test",
    .usage = "URI [DEST]",
    .env_prefix = "CINFER_TEST_",
    .opts = opts,
    .n_opts = sizeof(opts) / sizeof(opts[0]),
    .min_positional = 0,
    .max_positional = 2,
};

static int parse(struct test_cfg *c, struct cfg_result *r, char *err, int argc, ...)
{
    char *argv[16] = {"test"};
    va_list ap;
    va_start(ap, argc);
    for (int i = 1; i < argc; i++) argv[i] = va_arg(ap, char *);
    va_end(ap);
    return cfg_parse(&spec, c, argc, argv, r, err, 256);
}

static void clear_env(void)
{
    unsetenv("CINFER_TEST_PORT");
    unsetenv("CINFER_TEST_KV_CACHE_BYTES");
    unsetenv("CINFER_TEST_TOKEN");
}

START_TEST(test_cfg_parse_defaults)
{
    struct test_cfg c;
    struct cfg_result r;
    char err[256];
    ck_assert_int_eq(parse(&c, &r, err, 1), 0);
    ck_assert_int_eq(c.port, 8000);
    ck_assert_double_eq(c.temp, 1.0);
    ck_assert_uint_eq(c.kv_bytes, 64ull << 20);
    ck_assert(c.prefix);
    ck_assert_str_eq(c.name, "json");
    ck_assert_ptr_null(c.token);
    ck_assert_int_eq(r.n_positional, 0);
}
END_TEST

START_TEST(test_cfg_parse_flag_beats_env_beats_default)
{
    struct test_cfg c;
    struct cfg_result r;
    char err[256];
    setenv("CINFER_TEST_PORT", "9000", 1);
    setenv("CINFER_TEST_KV_CACHE_BYTES", "1G", 1);
    ck_assert_int_eq(parse(&c, &r, err, 3, "--port", "9100"), 0);
    ck_assert_int_eq(c.port, 9100);
    ck_assert_uint_eq(c.kv_bytes, 1ull << 30);
    ck_assert_int_eq(parse(&c, &r, err, 1), 0);
    ck_assert_int_eq(c.port, 9000);
    clear_env();
}
END_TEST

START_TEST(test_cfg_parse_forms_and_positionals)
{
    struct test_cfg c;
    struct cfg_result r;
    char err[256];
    ck_assert_int_eq(parse(&c, &r, err, 7, "hf://a/b", "--port=1234", "--no-prefix-caching",
                           "--temperature", "0", "/tmp/x"),
                     0);
    ck_assert_int_eq(c.port, 1234);
    ck_assert(!c.prefix);
    ck_assert_double_eq(c.temp, 0);
    ck_assert_int_eq(r.n_positional, 2);
    ck_assert_str_eq(r.positional[0], "hf://a/b");
    ck_assert_str_eq(r.positional[1], "/tmp/x");
    ck_assert_int_eq(parse(&c, &r, err, 3, "--prefix-caching=false", "--name=text"), 0);
    ck_assert(!c.prefix);
    ck_assert_str_eq(c.name, "text");
    ck_assert_int_eq(parse(&c, &r, err, 3, "--", "--port"), 0);
    ck_assert_str_eq(r.positional[0], "--port");
}
END_TEST

START_TEST(test_cfg_parse_rejects_bad_input_naming_the_flag)
{
    static const struct {
        const char *a1, *a2, *want;
        int rc;
    } cases[] = {
        {"--port", "0", "--port: 0 is out of range", ERR_RANGE},
        {"--port", "70000", "out of range", ERR_RANGE},
        {"--port", "12ab", "expected an integer", ERR_INVAL},
        {"--port", "", "expected an integer", ERR_INVAL},
        {"--port", "99999999999999999999", "expected an integer", ERR_INVAL},
        {"--temperature", "nan", "expected a number", ERR_INVAL},
        {"--temperature", "2.5", "out of range", ERR_RANGE},
        {"--kv-cache-bytes", "12Q", "expected a size", ERR_INVAL},
        {"--kv-cache-bytes", "-1G", "expected a size", ERR_INVAL},
        {"--prefix-caching=maybe", NULL, "expected true or false", ERR_INVAL},
        {"--name", "xml", "is not one of json|text", ERR_INVAL},
        {"--bogus", NULL, "unknown option \"--bogus\"", ERR_INVAL},
        {"-x", NULL, "unknown option \"-x\"", ERR_INVAL},
        {"--no-port", NULL, "unknown option", ERR_INVAL},
        {"--port", NULL, "needs a value", ERR_INVAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct test_cfg c;
        struct cfg_result r;
        char err[256] = "";
        int rc = cases[i].a2 ? parse(&c, &r, err, 3, cases[i].a1, cases[i].a2)
                             : parse(&c, &r, err, 2, cases[i].a1);
        ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d", i, rc);
        ck_assert_msg(strstr(err, cases[i].want), "case %zu: message \"%s\"", i, err);
    }
}
END_TEST

START_TEST(test_cfg_parse_env_errors_and_secrets)
{
    struct test_cfg c;
    struct cfg_result r;
    char err[256];
    setenv("CINFER_TEST_PORT", "abc", 1);
    ck_assert_int_eq(parse(&c, &r, err, 1), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "CINFER_TEST_PORT"));
    clear_env();
    setenv("CINFER_TEST_TOKEN", "s3cr3t", 1);
    ck_assert_int_eq(parse(&c, &r, err, 1), 0);
    ck_assert_str_eq(c.token, "s3cr3t");
    clear_env();
}
END_TEST

START_TEST(test_cfg_parse_positional_limits_and_help)
{
    struct test_cfg c;
    struct cfg_result r;
    char err[256];
    ck_assert_int_eq(parse(&c, &r, err, 4, "a", "b", "c"), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "unexpected argument \"c\""));
    ck_assert_int_eq(parse(&c, &r, err, 3, "--port", "--help"), ERR_INVAL); /* value, not help */
    ck_assert_int_eq(parse(&c, &r, err, 2, "--help"), 0);
    ck_assert(r.help);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cfg_usage(&spec, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "--kv-cache-bytes BYTES  [CINFER_TEST_KV_CACHE_BYTES]"));
    ck_assert_ptr_nonnull(strstr(text, "(default: 8000) (range: 1..65535)"));
    ck_assert_ptr_nonnull(strstr(text, "(json|text)"));
    free(text);
}
END_TEST

START_TEST(test_cfg_parse_size_units)
{
    unsigned long long v;
    ck_assert_int_eq(cfg_parse_size("1024", &v), 0);
    ck_assert_uint_eq(v, 1024);
    ck_assert_int_eq(cfg_parse_size("2k", &v), 0);
    ck_assert_uint_eq(v, 2048);
    ck_assert_int_eq(cfg_parse_size("1.5G", &v), 0);
    ck_assert_uint_eq(v, 1610612736ull);
    ck_assert_int_eq(cfg_parse_size("3MB", &v), 0);
    ck_assert_uint_eq(v, 3000000);
    ck_assert_int_eq(cfg_parse_size("4GiB", &v), 0);
    ck_assert_uint_eq(v, 4ull << 30);
    ck_assert_int_eq(cfg_parse_size("", &v), ERR_INVAL);
    ck_assert_int_eq(cfg_parse_size("G", &v), ERR_INVAL);
    ck_assert_int_eq(cfg_parse_size("1X", &v), ERR_INVAL);
    ck_assert_int_eq(cfg_parse_size("1GBx", &v), ERR_INVAL);
    ck_assert_int_eq(cfg_parse_size("inf", &v), ERR_INVAL);
    ck_assert_int_eq(cfg_parse_size("99999999T", &v), ERR_RANGE);
}
END_TEST

Suite *cfg_suite(void)
{
    Suite *s = suite_create("cfg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_cfg_parse_defaults);
    tcase_add_test(tc, test_cfg_parse_flag_beats_env_beats_default);
    tcase_add_test(tc, test_cfg_parse_forms_and_positionals);
    tcase_add_test(tc, test_cfg_parse_rejects_bad_input_naming_the_flag);
    tcase_add_test(tc, test_cfg_parse_env_errors_and_secrets);
    tcase_add_test(tc, test_cfg_parse_positional_limits_and_help);
    tcase_add_test(tc, test_cfg_parse_size_units);
    suite_add_tcase(s, tc);
    return s;
}
