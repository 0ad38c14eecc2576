/* Entry point shared by every Check suite: the Makefile compiles it once per tests/<prog>/test_<mod>.c
 * with -DCINFER_SUITE=<mod>_suite, so each suite is its own binary with its own summary line.
 * CK_VERBOSITY=verbose adds one result line per check, which the runner needs to count skipped
 * checks (tests/testutil.h test_skip). */
#include <check.h>
#include <stdlib.h>

Suite *CINFER_SUITE(void);

int main(void)
{
    SRunner *runner = srunner_create(CINFER_SUITE());
    srunner_run_all(runner, CK_ENV); /* CK_VERBOSITY; hack/run-tests.sh sets verbose */
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
