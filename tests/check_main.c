/* Entry point shared by every Check suite: the Makefile compiles it once per tests/<prog>/test_<mod>.c
 * with -DCINFER_SUITE=<mod>_suite, so each suite is its own binary with its own summary line. */
#include <check.h>
#include <stdlib.h>

Suite *CINFER_SUITE(void);

int main(void)
{
    SRunner *runner = srunner_create(CINFER_SUITE());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
