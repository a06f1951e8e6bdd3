/* Shared runner for the check unit tests: runs one suite, exit status = pass/fail. */
#ifndef SF_TEST_CHECK_MAIN_H
#define SF_TEST_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

static inline int sf_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
