/* The informer's namespace lists ("a,b": one list+watch per namespace behind one cache view):
 * malformed lists refused before anything runs, and a composite that cannot reach an API server
 * answers empty and unsynced. Listing and watching against a real API server:
 * tests/operator/test_reconcile_live.c and tests/e2e/operator.sh. */
#include "common/err.h"
#include "common/informer.h"

#include <check.h>
#include <stdatomic.h>

static atomic_int client_calls;

/* No API server: every client the informer threads ask for fails. */
static int no_client(void *ctx, struct k8s_client **out)
{
    (void)ctx;
    (void)out;
    atomic_fetch_add(&client_calls, 1);
    return ERR_IO;
}

static struct informer_opts opts_for(const char *ns)
{
    return (struct informer_opts){
        .name = "configmaps", .res = &k8s_resource_configmaps, .ns = ns, .new_client = no_client};
}

START_TEST(test_informer_start_rejects_bad_namespace_lists)
{
    static const char *const bad[] = {
        ",",     "a,",    ",a",
        "a,,b",  "a,B",   "a,a",
        "a b,c", "a,-",   "a,b-",
        "a,b/c", "a,b.c", "a,0123456789012345678901234567890123456789012345678901234567890123",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct informer_opts o = opts_for(bad[i]);
        struct informer *inf = (struct informer *)&o; /* must stay untouched */
        ck_assert_msg(informer_start(&o, &inf) == ERR_INVAL, "accepted \"%s\"", bad[i]);
        ck_assert_ptr_eq(inf, (struct informer *)&o);
    }
}
END_TEST

START_TEST(test_informer_namespace_list_unsynced_is_empty)
{
    struct informer_opts o = opts_for("team-a,team-b,c");
    struct informer *inf = NULL;
    ck_assert_int_eq(informer_start(&o, &inf), 0);
    ck_assert(!informer_has_synced(inf));
    ck_assert(!informer_wait_synced(inf, 100));
    ck_assert_ptr_null(informer_get(inf, "team-a", "x"));
    ck_assert_ptr_null(informer_get(inf, "elsewhere", "x"));
    json_t *all = informer_list(inf, NULL, NULL), *one = informer_list(inf, "team-b", NULL);
    json_t *none = informer_list(inf, "elsewhere", NULL);
    ck_assert(json_is_array(all) && json_array_size(all) == 0);
    ck_assert(json_is_array(one) && json_array_size(one) == 0);
    ck_assert(json_is_array(none) && json_array_size(none) == 0);
    json_decref(all);
    json_decref(one);
    json_decref(none);
    ck_assert_uint_eq(informer_len(inf), 0);
    ck_assert_uint_eq(informer_relists(inf), 0);
    informer_free(inf);
    ck_assert_int_ge(atomic_load(&client_calls), 1); /* the parts did run */
}
END_TEST

Suite *informer_suite(void)
{
    Suite *s = suite_create("informer");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_informer_start_rejects_bad_namespace_lists);
    tcase_add_test(tc, test_informer_namespace_list_unsynced_is_empty);
    suite_add_tcase(s, tc);
    return s;
}
