/* Tests for common/json_util: parse errors with positions, typed getters, bounded dump. */
#include "common/err.h"
#include "common/json_util.h"

#include <check.h>
#include <string.h>

START_TEST(test_json_util_parse_valid_and_malformed)
{
    char err[128];
    json_t *j = NULL;
    ck_assert_int_eq(json_util_parse("{\"a\": 1}", 8, &j, err, sizeof(err)), 0);
    ck_assert(json_is_object(j));
    json_decref(j);
    ck_assert_int_eq(json_util_parse("42", 2, &j, err, sizeof(err)), 0);
    ck_assert(json_is_integer(j));
    json_decref(j);

    static const char *const bad[] = {
        "",       "{",           "{\"a\":}",          "[1,]", "{\"a\"1}",
        "nul",    "\"\\u0000\"", "{\"a\":1,\"a\":2}", "1 2",  "\"\xff\xfe\"",
        "{'a':1}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        j = (json_t *)1;
        err[0] = 0;
        ck_assert_int_eq(json_util_parse(bad[i], strlen(bad[i]), &j, err, sizeof(err)), ERR_PARSE);
        ck_assert_ptr_eq(j, (json_t *)1); /* untouched on failure */
        ck_assert_msg(strncmp(err, "invalid JSON at line ", 21) == 0, "err: %s", err);
    }
    /* Line and column point at the problem. */
    ck_assert_int_eq(json_util_parse("{\n  \"a\": x}", 11, &j, err, sizeof(err)), ERR_PARSE);
    ck_assert_msg(strstr(err, "line 2") != NULL, "err: %s", err);
    /* Not NUL-terminated input is read only up to len. */
    ck_assert_int_eq(json_util_parse("[1]garbage", 3, &j, err, sizeof(err)), 0);
    json_decref(j);
    /* A tiny error buffer truncates but stays terminated. */
    char tiny[8];
    ck_assert_int_eq(json_util_parse("{", 1, &j, tiny, sizeof(tiny)), ERR_PARSE);
    ck_assert_uint_eq(strlen(tiny), 7);
    /* NULL data with zero length is an empty document. */
    ck_assert_int_eq(json_util_parse(NULL, 0, &j, NULL, 0), ERR_PARSE);
}
END_TEST

START_TEST(test_json_util_parse_object_rejects_other_values)
{
    char err[128];
    json_t *j = NULL;
    ck_assert_int_eq(json_util_parse_object("[1]", 3, &j, err, sizeof(err)), ERR_PARSE);
    ck_assert_str_eq(err, "request body must be a JSON object");
    ck_assert_int_eq(json_util_parse_object("{}", 2, &j, err, sizeof(err)), 0);
    json_decref(j);
}
END_TEST

START_TEST(test_json_util_get_typed_fields)
{
    char err[128];
    json_t *o = json_pack("{s:s, s:i, s:f, s:b, s:n, s:i}", "s", "text", "i", 7, "f", 0.5, "b", 1,
                          "nil", "big", 5000);
    const char *s = NULL;
    long long i = 0;
    double d = 0;
    bool b = false;
    ck_assert_int_eq(json_util_get_str(o, "s", &s, err, sizeof(err)), 0);
    ck_assert_str_eq(s, "text");
    ck_assert_int_eq(json_util_get_int(o, "i", 1, 10, &i, err, sizeof(err)), 0);
    ck_assert_int_eq(i, 7);
    ck_assert_int_eq(json_util_get_double(o, "f", 0, 2, &d, err, sizeof(err)), 0);
    ck_assert_double_eq(d, 0.5);
    ck_assert_int_eq(json_util_get_double(o, "i", 0, 10, &d, err, sizeof(err)), 0);
    ck_assert_double_eq(d, 7.0);
    ck_assert_int_eq(json_util_get_bool(o, "b", &b, err, sizeof(err)), 0);
    ck_assert(b);

    /* Absent and null are "not found", with *out untouched. */
    s = "keep";
    ck_assert_int_eq(json_util_get_str(o, "missing", &s, err, sizeof(err)), ERR_NOT_FOUND);
    ck_assert_int_eq(json_util_get_str(o, "nil", &s, err, sizeof(err)), ERR_NOT_FOUND);
    ck_assert_str_eq(s, "keep");

    /* Wrong types and ranges name the field. */
    ck_assert_int_eq(json_util_get_str(o, "i", &s, err, sizeof(err)), ERR_INVAL);
    ck_assert_str_eq(err, "field \"i\" must be a string");
    ck_assert_int_eq(json_util_get_int(o, "big", 1, 4096, &i, err, sizeof(err)), ERR_INVAL);
    ck_assert_str_eq(err, "field \"big\" must be an integer between 1 and 4096");
    ck_assert_int_eq(json_util_get_int(o, "f", 0, 10, &i, err, sizeof(err)), ERR_INVAL);
    ck_assert_int_eq(json_util_get_double(o, "s", 0, 1, &d, err, sizeof(err)), ERR_INVAL);
    ck_assert_str_eq(err, "field \"s\" must be a number between 0 and 1");
    ck_assert_int_eq(json_util_get_double(o, "i", 0, 1, &d, err, sizeof(err)), ERR_INVAL);
    ck_assert_int_eq(json_util_get_bool(o, "s", &b, err, sizeof(err)), ERR_INVAL);
    ck_assert_str_eq(err, "field \"s\" must be a boolean");
    /* A non-object container has no fields. */
    json_t *arr = json_array();
    ck_assert_int_eq(json_util_get_str(arr, "s", &s, err, sizeof(err)), ERR_NOT_FOUND);
    json_decref(arr);
    json_decref(o);
}
END_TEST

START_TEST(test_json_util_dump_bounded)
{
    json_t *o = json_pack("{s:s, s:[i,i]}", "b", "x", "a", 1, 2);
    struct buf b;
    buf_init(&b, 0);
    ck_assert_int_eq(json_util_dump(o, &b), 0);
    ck_assert_str_eq(buf_cstr(&b), "{\"b\":\"x\",\"a\":[1,2]}"); /* key order kept, compact */
    buf_fini(&b);

    buf_init(&b, 10);
    ck_assert_int_eq(buf_puts(&b, "ab"), 0);
    ck_assert_int_eq(json_util_dump(o, &b), ERR_TOO_BIG);
    ck_assert_str_eq(buf_cstr(&b), "ab"); /* restored */
    buf_fini(&b);

    buf_init(&b, 0);
    json_t *scalar = json_integer(5);
    ck_assert_int_eq(json_util_dump(scalar, &b), 0);
    ck_assert_str_eq(buf_cstr(&b), "5");
    ck_assert_int_eq(json_util_dump(NULL, &b), ERR_INVAL);
    buf_fini(&b);
    json_decref(scalar);
    json_decref(o);
}
END_TEST

START_TEST(test_json_util_path_getters)
{
    json_t *o = json_loads("{\"metadata\":{\"name\":\"a\",\"generation\":3,\"labels\":null},"
                           "\"spec\":{\"replicas\":2.0},\"k\":\"top\",\"n\":null}",
                           0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert_str_eq(json_util_str_at(o, "metadata", "name"), "a");
    ck_assert_str_eq(json_util_str_at(o, "k", NULL), "top");
    ck_assert_ptr_null(json_util_str_at(o, "metadata", "generation")); /* not a string */
    ck_assert_ptr_null(json_util_str_at(o, "missing", "name"));
    ck_assert_ptr_null(json_util_str_at(o, "k", "x")); /* a step that is not an object */
    ck_assert_ptr_null(json_util_str_at(NULL, "metadata", "name"));
    ck_assert_int_eq(json_util_int_at(o, "metadata", "generation", -1), 3);
    ck_assert_int_eq(json_util_int_at(o, "spec", "replicas", -1), -1); /* a real, not an integer */
    ck_assert_int_eq(json_util_int_at(o, "spec", "missing", 7), 7);
    ck_assert_ptr_eq(json_util_at(o, "metadata", NULL), json_object_get(o, "metadata"));
    /* json_util_field: JSON null reads as absent, non-objects have no fields. */
    ck_assert_ptr_null(json_util_field(o, "n"));
    ck_assert_ptr_null(json_util_field(json_object_get(o, "k"), "x"));
    ck_assert_ptr_nonnull(json_util_field(o, "k"));
    json_decref(o);
}
END_TEST

Suite *json_util_suite(void)
{
    Suite *s = suite_create("json_util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_json_util_parse_valid_and_malformed);
    tcase_add_test(tc, test_json_util_parse_object_rejects_other_values);
    tcase_add_test(tc, test_json_util_get_typed_fields);
    tcase_add_test(tc, test_json_util_dump_bounded);
    tcase_add_test(tc, test_json_util_path_getters);
    suite_add_tcase(s, tc);
    return s;
}
