/* The Jinja interpreter's refusals and bounds: malformed templates fail at parse time with a
 * line number, unsupported features are named, a template that misbehaves (raise_exception,
 * undefined values, type errors) fails at render time with its message, and hostile templates hit
 * the step, memory, output and depth limits instead of hanging or exhausting the process. The
 * rendering itself is checked against Python's jinja2 in test_jinja_golden.c. */
#include "common/buf.h"
#include "common/err.h"
#include "engine/api/jinja.h"

#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *src, char *err, size_t errlen)
{
    struct jinja_template *t = NULL;
    int rc = jinja_parse(src, strlen(src), &t, err, errlen);
    if (rc == 0) ck_assert_ptr_nonnull(t);
    jinja_free(t);
    return rc;
}

/* Renders src with vars (JSON text, may be NULL) into out; returns the render's code. */
static int render_lim(const char *src, const char *vars_json, const struct jinja_limits *lim,
                      struct buf *out, char *err, size_t errlen)
{
    struct jinja_template *t = NULL;
    int rc = jinja_parse(src, strlen(src), &t, err, errlen);
    ck_assert_msg(rc == 0, "parse of %s: %s", src, err);
    json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : NULL;
    if (vars_json) ck_assert_ptr_nonnull(vars);
    rc = jinja_render(t, vars, 0, lim, out, err, errlen);
    json_decref(vars);
    jinja_free(t);
    return rc;
}

static int render(const char *src, const char *vars_json, struct buf *out, char *err, size_t errlen)
{
    return render_lim(src, vars_json, NULL, out, err, errlen);
}

static const struct {
    const char *src;
    int rc;
    const char *msg; /* substring of the message */
} bad_templates[] = {
    {"{{ x", ERR_PARSE, "line 1"},
    {"line\n{{ 1 + }}", ERR_PARSE, "line 2"},
    {"{{ foo( }}", ERR_PARSE, "unexpected"},
    {"{{ 'unterminated }}", ERR_PARSE, "unexpected char"},
    {"{{ ) }}", ERR_PARSE, "unexpected ')'"},
    {"{{ [1, 2) }}", ERR_PARSE, "expected ']'"},
    {"{% if x %}no end", ERR_PARSE, "endif"},
    {"{% for x in y %}", ERR_PARSE, "endfor"},
    {"{% endif %}", ERR_PARSE, "unknown tag 'endif'"},
    {"{% for %}{% endfor %}", ERR_PARSE, "expected"},
    {"{% set 1 = 2 %}", ERR_PARSE, "can't assign"},
    {"{% frobnicate %}", ERR_PARSE, "unknown tag 'frobnicate'"},
    {"{% do x.append(1) %}", ERR_PARSE, "unknown tag 'do'"},
    {"{# never closed", ERR_PARSE, "comment"},
    {"{% raw %}never closed", ERR_PARSE, "raw"},
    {"{{ x | no_such_filter }}", ERR_PARSE, "no filter named 'no_such_filter'"},
    {"{{ x is no_such_test }}", ERR_PARSE, "no test named"},
    {"{{ x | urlize }}", ERR_UNSUPPORTED, "urlize"},
    {"{% include 'other.jinja' %}", ERR_UNSUPPORTED, "'include'"},
    {"{% extends 'base' %}", ERR_UNSUPPORTED, "'extends'"},
    {"{% break %}", ERR_PARSE, "outside of a loop"},
    {"{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}", ERR_PARSE,
     "outside of a loop"},
    {"{% macro m(a=1, b) %}{% endmacro %}", ERR_PARSE, "non-default argument"},
    {"{{ 'bad \\x4 escape' }}", ERR_PARSE, "truncated"},
    {"{{ '\\N{BULLET}' }}", ERR_PARSE, "\\N"},
    {"{{ 99999999999999999999 }}", ERR_PARSE, "too large"},
    {"{{ caf\xc3\xa9 }}", ERR_PARSE, "non-ASCII"},
    {"{{ x is y is z }}", ERR_PARSE, "chain"},
    {"\xff\xfe bad utf-8", ERR_PARSE, "UTF-8"},
};

START_TEST(test_jinja_parse_rejects_malformed)
{
    char err[256] = "";
    int rc = parse(bad_templates[_i].src, err, sizeof(err));
    ck_assert_msg(rc == bad_templates[_i].rc, "%s: rc %d (%s), want %d", bad_templates[_i].src, rc,
                  err, bad_templates[_i].rc);
    ck_assert_msg(strstr(err, bad_templates[_i].msg), "%s: message '%s' lacks '%s'",
                  bad_templates[_i].src, err, bad_templates[_i].msg);
}
END_TEST

START_TEST(test_jinja_parse_bounds_nesting_and_size)
{
    char err[256];
    /* 100000 parentheses: an error, not a stack overflow */
    size_t n = 100000;
    char *deep = malloc(2 * n + 16);
    ck_assert_ptr_nonnull(deep);
    size_t o = 0;
    memcpy(deep, "{{ ", 3), o = 3;
    for (size_t i = 0; i < n; i++) deep[o++] = '(';
    deep[o++] = '1';
    deep[o] = '\0';
    ck_assert_int_eq(parse(deep, err, sizeof(err)), ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(err, "too deeply"));
    for (size_t i = 0; i < 1000; i++) deep[3 + i] = '-'; /* ---------1: unary nesting */
    deep[1003] = '1';
    deep[1004] = '\0';
    ck_assert_int_eq(parse(deep, err, sizeof(err)), ERR_PARSE);
    free(deep);
    /* a source over the limit, and a NUL byte inside one */
    size_t big = JINJA_SOURCE_MAX + 1;
    char *huge = malloc(big);
    ck_assert_ptr_nonnull(huge);
    memset(huge, 'a', big);
    struct jinja_template *t = NULL;
    ck_assert_int_eq(jinja_parse(huge, big, &t, err, sizeof(err)), ERR_TOO_BIG);
    ck_assert_ptr_null(t);
    free(huge);
    ck_assert_int_eq(jinja_parse("a\0b", 3, &t, err, sizeof(err)), ERR_PARSE);
    jinja_free(NULL);
}
END_TEST

START_TEST(test_jinja_unknown_filter_inside_if_fails_only_when_run)
{
    /* jinja2 defers unknown filters and tests inside if blocks to run time */
    const char *src = "{% if flag %}{{ x | from_json }}{% else %}plain{% endif %}";
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    ck_assert_int_eq(render(src, "{\"flag\": false}", &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "plain");
    buf_reset(&out);
    ck_assert_int_eq(render(src, "{\"flag\": true}", &out, err, sizeof(err)), ERR_INVAL);
    ck_assert_ptr_nonnull(strstr(err, "no filter named 'from_json'"));
    buf_fini(&out);
}
END_TEST

static const struct {
    const char *src;
    const char *vars;
    int rc;
    const char *msg;
} render_errors[] = {
    {"{{ raise_exception('Conversation roles must alternate') }}", NULL, ERR_INVAL,
     "Conversation roles must alternate"},
    {"{{ missing.attr }}", NULL, ERR_INVAL, "'missing' is undefined"},
    {"{{ messages[0].content.nope() }}", "{\"messages\": [{\"content\": \"x\"}]}", ERR_INVAL,
     "has no attribute 'nope'"},
    {"{{ 'a' + 1 }}", NULL, ERR_INVAL, "can only concatenate str"},
    {"{{ 1 / 0 }}", NULL, ERR_INVAL, "division by zero"},
    {"{{ [].append(1) }}", NULL, ERR_INVAL, "unsafe"},
    {"{{ {}.update({}) }}", NULL, ERR_INVAL, "unsafe"},
    {"{{ 'x'.translate({}) }}", NULL, ERR_UNSUPPORTED, "translate"},
    {"{{ cycler(1, 2) }}", NULL, ERR_UNSUPPORTED, "cycler"},
    {"{% for x in 5 %}{% endfor %}", NULL, ERR_INVAL, "not iterable"},
    {"{% set a, b = [1, 2, 3] %}", NULL, ERR_INVAL, "too many values"},
    {"{{ range(1000000) }}", NULL, ERR_INVAL, "Range too big"},
    {"{{ 9223372036854775807 + 1 }}", NULL, ERR_INVAL, "overflow"},
    {"{{ x | tojson }}", "{}", ERR_INVAL, "not JSON serializable"},
    {"{{ [1] | map('nosuch') | list }}", NULL, ERR_INVAL, "no filter named 'nosuch'"},
    {"{{ {'a': 1}.items }}", NULL, ERR_INVAL, "cannot convert"},
};

START_TEST(test_jinja_render_errors_are_clear)
{
    struct buf out;
    char err[256] = "";
    buf_init(&out, 0);
    int rc = render(render_errors[_i].src, render_errors[_i].vars, &out, err, sizeof(err));
    ck_assert_msg(rc == render_errors[_i].rc, "%s: rc %d (%s)", render_errors[_i].src, rc, err);
    ck_assert_msg(strstr(err, render_errors[_i].msg), "%s: message '%s' lacks '%s'",
                  render_errors[_i].src, err, render_errors[_i].msg);
    ck_assert_msg(strstr(err, "line 1"), "no line in '%s'", err);
    buf_fini(&out);
}
END_TEST

START_TEST(test_jinja_render_step_limit_stops_loops)
{
    struct jinja_limits lim;
    jinja_limits_default(&lim);
    lim.max_steps = 1000000;
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    int rc = render_lim("{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}"
                        "{% endfor %}{% endfor %}",
                        NULL, &lim, &out, err, sizeof(err));
    ck_assert_int_eq(rc, ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "steps"));
    buf_fini(&out);
}
END_TEST

START_TEST(test_jinja_render_memory_limit_stops_growth)
{
    struct jinja_limits lim;
    jinja_limits_default(&lim);
    lim.max_memory = 8u << 20;
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    int rc = render_lim("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
                        NULL, &lim, &out, err, sizeof(err));
    ck_assert_int_eq(rc, ERR_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "memory"));
    buf_fini(&out);
}
END_TEST

START_TEST(test_jinja_render_output_limit_keeps_the_buffer)
{
    struct buf out;
    char err[256];
    buf_init(&out, 64);
    ck_assert_int_eq(buf_puts(&out, "kept"), 0);
    int rc = render("{% for i in range(100) %}{{ i }}{% endfor %}", NULL, &out, err, sizeof(err));
    ck_assert_int_eq(rc, ERR_TOO_BIG);
    ck_assert_str_eq(buf_cstr(&out), "kept");
    rc = render("{{ 'a' }}{{ raise_exception('late') }}", NULL, &out, err, sizeof(err));
    ck_assert_int_eq(rc, ERR_INVAL);
    ck_assert_str_eq(buf_cstr(&out), "kept");
    buf_fini(&out);
}
END_TEST

START_TEST(test_jinja_render_depth_limit_stops_recursion)
{
    struct buf out;
    char err[256];
    buf_init(&out, 0);
    int rc = render("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", NULL, &out, err,
                    sizeof(err));
    ck_assert_int_eq(rc, ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err, "deeper"));
    /* a namespace that holds itself: printing it is refused, not a stack overflow */
    rc = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, &out, err,
                sizeof(err));
    ck_assert_int_eq(rc, ERR_INVAL);
    buf_fini(&out);
}
END_TEST

START_TEST(test_jinja_render_rejects_non_object_vars)
{
    struct jinja_template *t;
    char err[256];
    ck_assert_int_eq(jinja_parse("x", 1, &t, err, sizeof(err)), 0);
    json_t *arr = json_array();
    struct buf out;
    buf_init(&out, 0);
    ck_assert_int_eq(jinja_render(t, arr, 0, NULL, &out, err, sizeof(err)), ERR_INVAL);
    ck_assert_int_eq(jinja_render(t, NULL, 0, NULL, &out, err, sizeof(err)), 0);
    ck_assert_str_eq(buf_cstr(&out), "x");
    json_decref(arr);
    buf_fini(&out);
    jinja_free(t);
}
END_TEST

START_TEST(test_jinja_loops_over_content)
{
    static const struct {
        const char *src;
        bool loops;
    } t[] = {
        {"{% for m in messages %}{{ m['content'] }}{% endfor %}", false},
        {"{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}",
         true},
        {"{% for m in messages %}{% for p in m.content | selectattr('type', 'eq', 'text') %}"
         "{% endfor %}{% endfor %}",
         true},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct jinja_template *tp;
        char err[256];
        ck_assert_int_eq(jinja_parse(t[i].src, strlen(t[i].src), &tp, err, sizeof(err)), 0);
        ck_assert_int_eq(jinja_loops_over_content(tp), t[i].loops);
        jinja_free(tp);
    }
}
END_TEST

/* A parsed template is immutable: threads render it at once and get the same text. */
struct shared_render {
    const struct jinja_template *t;
    json_t *vars;
    char text[256];
    int rc;
};

static void *render_thread(void *arg)
{
    struct shared_render *r = arg;
    struct buf out;
    char err[128];
    buf_init(&out, 0);
    for (int i = 0; i < 200 && r->rc == 0; i++) {
        buf_reset(&out);
        r->rc = jinja_render(r->t, r->vars, 0, NULL, &out, err, sizeof(err));
    }
    snprintf(r->text, sizeof(r->text), "%s", buf_cstr(&out));
    buf_fini(&out);
    return NULL;
}

START_TEST(test_jinja_render_concurrently)
{
    const char *src = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}"
                      "{{ 'x' | upper }}";
    struct jinja_template *t;
    char err[256];
    ck_assert_int_eq(jinja_parse(src, strlen(src), &t, err, sizeof(err)), 0);
    struct shared_render r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct shared_render){.t = t};
        r[i].vars = json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", " hi ");
        ck_assert_int_eq(pthread_create(&th[i], NULL, render_thread, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(r[i].rc, 0);
        ck_assert_str_eq(r[i].text, "<user>hiX");
        json_decref(r[i].vars);
    }
    jinja_free(t);
}
END_TEST

Suite *jinja_suite(void)
{
    Suite *s = suite_create("jinja");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_jinja_parse_rejects_malformed, 0,
                        (int)(sizeof(bad_templates) / sizeof(bad_templates[0])));
    tcase_add_test(tc, test_jinja_parse_bounds_nesting_and_size);
    tcase_add_test(tc, test_jinja_unknown_filter_inside_if_fails_only_when_run);
    tcase_add_loop_test(tc, test_jinja_render_errors_are_clear, 0,
                        (int)(sizeof(render_errors) / sizeof(render_errors[0])));
    tcase_add_test(tc, test_jinja_render_step_limit_stops_loops);
    tcase_add_test(tc, test_jinja_render_memory_limit_stops_growth);
    tcase_add_test(tc, test_jinja_render_output_limit_keeps_the_buffer);
    tcase_add_test(tc, test_jinja_render_depth_limit_stops_recursion);
    tcase_add_test(tc, test_jinja_render_rejects_non_object_vars);
    tcase_add_test(tc, test_jinja_loops_over_content);
    tcase_add_test(tc, test_jinja_render_concurrently);
    suite_add_tcase(s, tc);
    return s;
}
