/* fetch-model's pure parts: URL redaction for logs (userinfo, query values, fragments), hf://
 * resolution, and --verify of a file on disk. The download itself is tests/e2e/fetch_model.sh. */
#include "common/err.h"
#include "common/sha256.h"
#include "engine/tools/fetch_model.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(test_fetch_model_redact_url_credentials)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"https://host/m.gguf", "https://host/m.gguf"},
        {"https://user:secret@host:8443/m.gguf", "https://REDACTED@host:8443/m.gguf"},
        {"https://tok@host/m.gguf", "https://REDACTED@host/m.gguf"},
        /* a password holding '@': the authority ends at the last one */
        {"https://u:p@ss@host/m.gguf", "https://REDACTED@host/m.gguf"},
        {"https://host/m.gguf?token=abc", "https://host/m.gguf?token=REDACTED"},
        {"https://h/m.gguf?X-Amz-Signature=s&X-Amz-Credential=AKIA%2F&download=1",
         "https://h/m.gguf?X-Amz-Signature=REDACTED&X-Amz-Credential=REDACTED&download=REDACTED"},
        {"https://h/m?sv=2022&sig=abc%3D&se=2030",
         "https://h/m?sv=REDACTED&sig=REDACTED&se=REDACTED"},
        {"https://h/m?baretoken", "https://h/m?REDACTED"},
        {"https://h/m?a=&&b=1", "https://h/m?a=REDACTED&&b=REDACTED"},
        {"https://h/m?", "https://h/m?"},
        {"https://h/m#frag", "https://h/m#REDACTED"},
        {"https://u:p@h/m?t=1#f", "https://REDACTED@h/m?t=REDACTED#REDACTED"},
        /* an '@' in the path is not userinfo */
        {"https://h/org/@scope/m.gguf", "https://h/org/@scope/m.gguf"},
        {"https://h?k=v", "https://h?k=REDACTED"},
        {"hf://org/repo/m.gguf", "hf://org/repo/m.gguf"},
        {"/relative/path?token=x", "/relative/path?token=REDACTED"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[256];
        fetch_model_redact_url(cases[i].in, out, sizeof(out));
        ck_assert_msg(strcmp(out, cases[i].want) == 0, "case %zu: %s -> %s, want %s", i,
                      cases[i].in, out, cases[i].want);
    }
}
END_TEST

START_TEST(test_fetch_model_redact_url_bounded)
{
    char out[16];
    memset(out, 'x', sizeof(out));
    fetch_model_redact_url("https://user:secret@host/model.gguf", out, sizeof(out));
    ck_assert_uint_eq(strlen(out), sizeof(out) - 1);
    ck_assert_str_eq(out, "https://REDACTE"); /* cut, never the secret */
    char one[1] = {'x'};
    fetch_model_redact_url("https://h/m", one, sizeof(one));
    ck_assert_int_eq(one[0], 0);
    fetch_model_redact_url(NULL, out, sizeof(out));
    ck_assert_str_eq(out, "");
    fetch_model_redact_url("https://h/m", out, 0); /* nothing written, no crash */
}
END_TEST

START_TEST(test_fetch_model_resolve_redacts_in_errors)
{
    char url[512], err[512] = "";
    ck_assert_int_eq(fetch_model_resolve("s3://k:secret@bucket/m?sig=zzz", NULL, url, sizeof(url),
                                         err, sizeof(err)),
                     ERR_INVAL);
    ck_assert_ptr_null(strstr(err, "secret"));
    ck_assert_ptr_null(strstr(err, "zzz"));
    ck_assert_ptr_nonnull(strstr(err, "s3://REDACTED@bucket/m?sig=REDACTED"));
    ck_assert_int_eq(fetch_model_resolve("hf://org/repo/m.gguf", "https://hub.example/", url,
                                         sizeof(url), err, sizeof(err)),
                     0);
    ck_assert_str_eq(url, "https://hub.example/org/repo/resolve/main/m.gguf");
    ck_assert_int_eq(fetch_model_resolve("hf://org/repo", NULL, url, sizeof(url), err, sizeof(err)),
                     ERR_INVAL);
    ck_assert_int_eq(fetch_model_resolve("https://h/m.gguf", NULL, url, 8, err, sizeof(err)),
                     ERR_TOO_BIG);
}
END_TEST

START_TEST(test_fetch_model_verify_file)
{
    char path[] = "/tmp/cinfer-test-verify.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    static const char data[] = "not really a model";
    ck_assert_int_eq(write(fd, data, sizeof(data) - 1), (int)sizeof(data) - 1);
    close(fd);
    char hex[SHA256_HEX_LEN], err[512] = "";
    ck_assert_int_eq(sha256_hex(data, sizeof(data) - 1, hex), 0);
    ck_assert_int_eq(fetch_model_verify(path, hex, err, sizeof(err)), 0);

    char wrong[SHA256_HEX_LEN];
    memcpy(wrong, hex, sizeof(wrong));
    wrong[0] = wrong[0] == '0' ? '1' : '0';
    ck_assert_int_eq(fetch_model_verify(path, wrong, err, sizeof(err)), ERR_BAD_STATE);
    ck_assert_ptr_nonnull(strstr(err, "sha256 mismatch"));
    ck_assert_ptr_nonnull(strstr(err, hex));
    ck_assert_ptr_nonnull(strstr(err, wrong));

    ck_assert_int_eq(fetch_model_verify(path, "ABC", err, sizeof(err)), ERR_INVAL);
    char upper[SHA256_HEX_LEN];
    for (size_t i = 0; i < sizeof(upper); i++)
        upper[i] = hex[i] >= 'a' && hex[i] <= 'f' ? (char)(hex[i] - 'a' + 'A') : hex[i];
    if (strcmp(upper, hex) != 0)
        ck_assert_int_eq(fetch_model_verify(path, upper, err, sizeof(err)), ERR_INVAL);
    unlink(path);
    ck_assert_int_eq(fetch_model_verify(path, hex, err, sizeof(err)), ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "No such file"));
}
END_TEST

Suite *fetch_model_suite(void)
{
    Suite *s = suite_create("fetch_model");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_fetch_model_redact_url_credentials);
    tcase_add_test(tc, test_fetch_model_redact_url_bounded);
    tcase_add_test(tc, test_fetch_model_resolve_redacts_in_errors);
    tcase_add_test(tc, test_fetch_model_verify_file);
    suite_add_tcase(s, tc);
    return s;
}
