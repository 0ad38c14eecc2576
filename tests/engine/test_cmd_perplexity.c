/* `cinfer-engine perplexity` (engine/cmd/cmd_perplexity.c) on stories260K (../shared; skipped when
 * absent): sink-window with sinks and a window that hold the whole text gives the full cache's
 * perplexity to the last digit; a text longer than the model's context is refused in mode none
 * and runs to the end with sink-window in a bounded number of KV blocks; bad flags and files get
 * a clear error and exit status. */
#include "engine/cmd/cmd.h"

#include "tests/testutil.h"

#include <check.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char text_path[512], out_path[512];

/* A story of `sentences` sentences (about 12 tokens each), varied so it is not one loop. */
static void write_story(const char *path, int sentences)
{
    static const char *who[] = {"Lily", "Tom", "the cat", "a little bird", "Mom", "Ben"};
    static const char *did[] = {"went to the park",  "found a red ball", "was very happy",
                                "played with a toy", "saw a big tree",   "ate a yummy cake"};
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("Once upon a time, there was a little girl named Lily.", f);
    for (int i = 0; i < sentences; i++)
        fprintf(f, " One day, %s %s and said hello.", who[(i * 7) % 6], did[(i * 5 + i / 6) % 6]);
    fputc('\n', f);
    fclose(f);
}

/* Runs the command with stdout into out_path; returns its status, its output in out. */
static int run_ppl(char *out, size_t cap, ...)
{
    char *argv[40];
    int argc = 0;
    argv[argc++] = "perplexity";
    va_list ap;
    va_start(ap, cap);
    for (const char *a = va_arg(ap, const char *); a && argc < 39; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    fflush(stdout);
    int saved = dup(1);
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    int st = cmd_perplexity_main(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    size_t len = 0;
    char *s = test_read_file(out_path, &len);
    ck_assert_ptr_nonnull(s);
    snprintf(out, cap, "%s", s);
    free(s);
    return st;
}

/* The value of `key=` in a result line, as text (static). */
static const char *field(const char *line, const char *key)
{
    static char v[64];
    char pat[64];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(line, pat);
    if (!p && strncmp(line, pat + 1, strlen(pat + 1)) == 0) p = line - 1;
    ck_assert_msg(p != NULL, "no %s in: %s", key, line);
    p += strlen(pat);
    size_t n = strcspn(p, " \n");
    ck_assert(n < sizeof(v));
    memcpy(v, p, n);
    v[n] = 0;
    return v;
}

static long ival(const char *v)
{
    return strtol(v, NULL, 10);
}

static const char *model_path(void)
{
    return test_shared_path("models/tinyllamas/stories260K.gguf");
}

static void paths(void)
{
    snprintf(text_path, sizeof(text_path), "%s/cinfer_ppl_%ld.txt", test_tmpdir(), (long)getpid());
    snprintf(out_path, sizeof(out_path), "%s/cinfer_ppl_%ld.out", test_tmpdir(), (long)getpid());
}

START_TEST(test_perplexity_window_holding_all_matches_full_cache)
{
    const char *m = model_path();
    if (!m) return;
    char model[4096];
    snprintf(model, sizeof(model), "%s", m);
    paths();
    write_story(text_path, 30); /* about 400 tokens */
    char full[1024], win[1024];
    ck_assert_int_eq(run_ppl(full, sizeof(full), "--model", model, "--file", text_path,
                             "--log-level", "error", NULL),
                     0);
    ck_assert_int_eq(run_ppl(win, sizeof(win), "--model", model, "--file", text_path,
                             "--kv-eviction", "sink-window", "--kv-window-tokens", "1000",
                             "--log-level", "error", NULL),
                     0);
    char ppl[64];
    snprintf(ppl, sizeof(ppl), "%s", field(full, "ppl"));
    ck_assert_str_eq(field(win, "ppl"), ppl);
    ck_assert_str_eq(field(win, "evictions"), "0");
    ck_assert_double_gt(strtod(ppl, NULL), 1.0);
    ck_assert_double_lt(strtod(ppl, NULL), 50.0); /* the model's own kind of text */
    unlink(text_path);
    unlink(out_path);
}
END_TEST

START_TEST(test_perplexity_past_context_bounded_kv)
{
    const char *m = model_path();
    if (!m) return;
    char model[4096];
    snprintf(model, sizeof(model), "%s", m);
    paths();
    write_story(text_path, 220); /* about 2900 tokens: past the context of 2048 */
    char out[1024];
    ck_assert_int_eq(run_ppl(out, sizeof(out), "--model", model, "--file", text_path, "--log-level",
                             "error", NULL),
                     1);
    ck_assert_int_eq(run_ppl(out, sizeof(out), "--model", model, "--file", text_path,
                             "--kv-eviction", "sink-window", "--kv-window-tokens", "64",
                             "--score-from", "1000", "--log-level", "error", NULL),
                     0);
    ck_assert_int_gt(ival(field(out, "tokens")), 2048);
    ck_assert_int_gt(ival(field(out, "evictions")), 100);
    /* one sink block + 64 + 15 + a chunk of 16: 111 tokens, 7 blocks */
    ck_assert_int_le(ival(field(out, "max_kv_tokens")), 111);
    ck_assert_int_le(ival(field(out, "max_kv_blocks")), 7);
    double ppl = strtod(field(out, "ppl_tail"), NULL);
    ck_assert_double_gt(ppl, 1.0);
    ck_assert_double_lt(ppl, 50.0);
    unlink(text_path);
    unlink(out_path);
}
END_TEST

START_TEST(test_perplexity_rejects_bad_input)
{
    const char *m = model_path();
    if (!m) return;
    char model[4096];
    snprintf(model, sizeof(model), "%s", m);
    paths();
    char out[1024];
    write_story(text_path, 3);
    /* flag values */
    ck_assert_int_eq(run_ppl(out, sizeof(out), "--model", model, "--file", text_path,
                             "--kv-eviction", "window", "--log-level", "error", NULL),
                     2);
    ck_assert_int_eq(run_ppl(out, sizeof(out), "--model", model, "--file", text_path,
                             "--kv-window-tokens", "0", "--log-level", "error", NULL),
                     2);
    ck_assert_int_eq(run_ppl(out, sizeof(out), "--model", model, "--file", text_path,
                             "--kv-sink-tokens", "-1", "--log-level", "error", NULL),
                     2);
    /* a window past the model's context */
    ck_assert_int_eq(run_ppl(out, sizeof(out), "--model", model, "--file", text_path,
                             "--kv-eviction", "sink-window", "--kv-window-tokens", "2040",
                             "--log-level", "error", NULL),
                     1);
    /* missing and too-short files */
    ck_assert_int_eq(run_ppl(out, sizeof(out), "--model", model, "--file", "/nonexistent/x.txt",
                             "--log-level", "error", NULL),
                     1);
    FILE *f = fopen(text_path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(run_ppl(out, sizeof(out), "--model", model, "--file", text_path, "--log-level",
                             "error", NULL),
                     1);
    ck_assert_str_eq(out, "");
    unlink(text_path);
    unlink(out_path);
}
END_TEST

Suite *cmd_perplexity_suite(void);
Suite *cmd_perplexity_suite(void)
{
    Suite *s = suite_create("cmd_perplexity");
    TCase *tc = tcase_create("stories260K");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_perplexity_window_holding_all_matches_full_cache);
    tcase_add_test(tc, test_perplexity_past_context_bounded_kv);
    tcase_add_test(tc, test_perplexity_rejects_bad_input);
    suite_add_tcase(s, tc);
    return s;
}
