/* The one test runner: every suite that a test file registered.
 *
 *   build/test-kvlab                 all suites
 *   build/test-kvlab model ops       only the suites named
 *   CK_VERBOSITY=verbose ...         one line per test
 *   KVLAB_LAB_ANSWERS=0 ...          the lab code is the exercises (the
 *                                    handout): skip what needs the answers
 *
 * Exit status 0 when every test passed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

#define MAX_SUITES 128

static struct {
    const char *name;
    SuiteMaker make;
    int needs_answers;
} suites[MAX_SUITES];
static int n_suites;

void test_register_suite(const char *name, SuiteMaker make, int needs_answers)
{
    if (n_suites == MAX_SUITES) {
        fprintf(stderr, "test-kvlab: more than %d suites; raise MAX_SUITES\n", MAX_SUITES);
        exit(1);
    }
    suites[n_suites].name = name;
    suites[n_suites].make = make;
    suites[n_suites].needs_answers = needs_answers;
    n_suites++;
}

int test_lab_answers(void)
{
    const char *answers = getenv("KVLAB_LAB_ANSWERS");
    return !(answers && strcmp(answers, "0") == 0);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int wanted(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    /* Constructors run in link order; sort so that runs read the same. */
    qsort(suites, (size_t)n_suites, sizeof suites[0], compare_names);
    SRunner *runner = NULL;
    for (int i = 0; i < n_suites; i++) {
        if (!wanted(suites[i].name, argc, argv))
            continue;
        if (suites[i].needs_answers && !test_lab_answers()) {
            printf("SKIP suite %s: it runs the chapters' lab code, and here that code is the untouched exercises "
                   "(the handout: this code is yours to write); make lab CH=n grades it\n", suites[i].name);
            continue;
        }
        if (!runner)
            runner = srunner_create(suites[i].make());
        else
            srunner_add_suite(runner, suites[i].make());
    }
    if (!runner) {
        fprintf(stderr, "test-kvlab: no suite matches; suites are:");
        for (int i = 0; i < n_suites; i++)
            fprintf(stderr, " %s", suites[i].name);
        fprintf(stderr, "\n");
        return 1;
    }
    srunner_run_all(runner, CK_ENV);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
