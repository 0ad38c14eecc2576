/* Real chat templates through engine/api/jinja against Python's jinja2 rendering them as Hugging
 * Face transformers does: every template of ../shared/testdata/chat-templates/ and
 * tests/testdata/chat/templates/ with every message list of tests/testdata/chat/cases.json, byte
 * for byte (tests/testdata/chat/golden/, written by hack/gen-chat-golden.py). Where jinja2 fails
 * (a template's raise_exception, a type error on input it does not handle) the interpreter must
 * fail too, with the template's own message for raise_exception. Also the small probes of
 * tests/testdata/chat/probes.txt, one per Jinja2 feature or Python corner. */
#include "common/buf.h"
#include "common/err.h"
#include "common/sha256.h"
#include "engine/api/jinja.h"
#include "tests/testutil.h"

#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GOLDEN_GLOB "tests/testdata/chat/golden/*.json"
#define CASES_PATH  "tests/testdata/chat/cases.json"
#define PROBES_PATH "tests/testdata/chat/probes.json"

static glob_t goldens;

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j, "%s: %s (line %d)", path, je.text, je.line);
    return j;
}

/* The variables transformers' render() gets: messages, tools, documents, add_generation_prompt,
 * the template's tokens, then the case's extra keyword arguments. */
static json_t *case_vars(const json_t *c, const json_t *tokens)
{
    json_t *v = json_object();
    json_t *tools = json_object_get(c, "tools"), *agp = json_object_get(c, "add_generation_prompt");
    json_object_set(v, "messages", json_object_get(c, "messages"));
    json_object_set_new(v, "tools", tools ? json_incref(tools) : json_null());
    json_object_set_new(v, "documents", json_null());
    json_object_set_new(v, "add_generation_prompt", agp ? json_incref(agp) : json_true());
    json_object_update(v, (json_t *)tokens);
    json_t *kw = json_object_get(c, "kwargs");
    if (kw) json_object_update(v, kw);
    return v;
}

static const json_t *find_case(const json_t *cases, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(
        cases, i, c) if (!strcmp(json_string_value(json_object_get(c, "name")), name)) return c;
    return NULL;
}

/* Checks one rendering against its expectation; returns whether it matched. */
static bool check_result(const char *what, const struct jinja_template *t, const char *perr,
                         const json_t *vars, time_t now, const json_t *want)
{
    struct buf out;
    char err[512] = "";
    buf_init(&out, 1 << 24);
    int rc = t ? jinja_render(t, vars, now, NULL, &out, err, sizeof(err)) : ERR_PARSE;
    const json_t *output = json_object_get(want, "output");
    const char *werr = json_string_value(json_object_get(want, "error"));
    const char *wmsg = json_string_value(json_object_get(want, "message"));
    bool ok;
    if (output) {
        ok = rc == 0 && out.len == json_string_length(output) &&
             memcmp(buf_cstr(&out), json_string_value(output), out.len) == 0;
        if (!ok)
            fprintf(stderr, "%s: %s\n  want: %.300s\n  got:  %.300s\n", what,
                    rc ? (t ? err : perr) : "output differs", json_string_value(output),
                    buf_cstr(&out));
    } else {
        ok = rc != 0;
        /* raise_exception's message must come through */
        if (ok && werr && !strcmp(werr, "TemplateError") && wmsg && !strstr(t ? err : perr, wmsg))
            ok = false;
        if (!ok)
            fprintf(stderr, "%s: want %s (%s), got %s: %.300s\n", what, werr, wmsg,
                    rc ? "an error" : "output", rc ? (t ? err : perr) : buf_cstr(&out));
    }
    buf_fini(&out);
    return ok;
}

START_TEST(test_jinja_golden_template)
{
    json_t *g = load_json(goldens.gl_pathv[_i]);
    const char *ref = json_string_value(json_object_get(g, "template"));
    ck_assert(ref);
    const char *path = NULL;
    if (!strncmp(ref, "shared:", 7)) {
        path = test_shared_path(ref + 7);
        if (!path) {
            json_decref(g);
            return;
        }
    } else {
        ck_assert(!strncmp(ref, "local:", 6));
        path = ref + 6;
    }
    size_t len;
    char *src = test_read_file(path, &len);
    ck_assert_msg(src, "cannot read %s", path);
    char hex[SHA256_HEX_LEN];
    ck_assert_int_eq(sha256_hex(src, len, hex), 0);
    ck_assert_msg(!strcmp(hex, json_string_value(json_object_get(g, "sha256"))),
                  "%s changed since its golden file was written: run hack/gen-chat-golden.py",
                  path);

    struct jinja_template *t = NULL;
    char perr[512] = "";
    int prc = jinja_parse(src, len, &t, perr, sizeof(perr));
    json_t *cases_doc = load_json(CASES_PATH), *cases = json_object_get(cases_doc, "cases");
    const json_t *tokens = json_object_get(g, "tokens");
    time_t now = (time_t)json_integer_value(json_object_get(g, "now"));
    size_t i, bad = 0, n = 0;
    json_t *r;
    json_array_foreach(json_object_get(g, "results"), i, r)
    {
        const char *name = json_string_value(json_object_get(r, "case"));
        const json_t *c = find_case(cases, name);
        ck_assert_msg(c, "case %s is not in %s", name, CASES_PATH);
        if (prc) /* a parse failure is only right when jinja2's compile failed too */
            ck_assert_msg(json_object_get(r, "error"), "%s: %s", path, perr);
        json_t *vars = case_vars(c, tokens);
        char what[512];
        snprintf(what, sizeof(what), "%.300s / %.100s", path, name);
        bad += !check_result(what, t, perr, vars, now, r);
        n++;
        json_decref(vars);
    }
    ck_assert_msg(bad == 0, "%s: %zu of %zu renderings differ from jinja2's", path, bad, n);
    jinja_free(t);
    free(src);
    json_decref(cases_doc);
    json_decref(g);
}
END_TEST

START_TEST(test_jinja_golden_probes)
{
    json_t *doc = load_json(PROBES_PATH);
    const json_t *vars = json_object_get(doc, "vars");
    time_t now = (time_t)json_integer_value(json_object_get(doc, "now"));
    size_t i, bad = 0;
    json_t *r;
    json_array_foreach(json_object_get(doc, "results"), i, r)
    {
        const char *src = json_string_value(json_object_get(r, "source"));
        struct jinja_template *t = NULL;
        char perr[512] = "", what[200];
        jinja_parse(src, strlen(src), &t, perr, sizeof(perr));
        snprintf(what, sizeof(what), "probe %zu: %.120s", i, src);
        bad += !check_result(what, t, perr, vars, now, r);
        jinja_free(t);
    }
    ck_assert_msg(bad == 0, "%zu probes differ from jinja2", bad);
    json_decref(doc);
}
END_TEST

Suite *jinja_golden_suite(void)
{
    /* strftime_now formats local time, as Python's datetime.now(): pin the zone */
    setenv("TZ", "UTC", 1);
    tzset();
    Suite *s = suite_create("jinja_golden");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    if (glob(GOLDEN_GLOB, 0, NULL, &goldens) != 0) goldens.gl_pathc = 0;
    if (goldens.gl_pathc == 0) fprintf(stderr, "no golden files match %s\n", GOLDEN_GLOB);
    tcase_add_loop_test(tc, test_jinja_golden_template, 0, (int)goldens.gl_pathc);
    tcase_add_test(tc, test_jinja_golden_probes);
    suite_add_tcase(s, tc);
    return s;
}
