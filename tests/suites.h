/**
 * @file suites.h
 * @brief How test files hand their Check suite to the runner.
 *
 * Each test file defines `Suite *suite_NAME(void)` and then writes
 * `REGISTER_SUITE(NAME)`; the runner (tests/runner.c) collects every
 * registered suite, so adding a test file needs no edit anywhere else.
 */
#ifndef KVLAB_TESTS_SUITES_H
#define KVLAB_TESTS_SUITES_H

#include <check.h>

/** A function that builds a suite. */
typedef Suite *(*SuiteMaker)(void);

/**
 * Adds a suite to the runner's list (called before main by REGISTER_SUITE).
 * @param name          the suite's name, used to select it on the command line
 * @param make          builds the suite
 * @param needs_answers 1: the suite runs the chapters' lab code and needs
 *                      the answers (see test_lab_answers())
 */
void test_register_suite(const char *name, SuiteMaker make, int needs_answers);

/**
 * Whether the chapters' lab code in this build is the answers
 * (the maintainers' tree). In the handout it is the exercises: `make test`
 * says so (KVLAB_LAB_ANSWERS=0), and the suites and tests that need the
 * answers are skipped with a SKIP line instead of failing.
 * @return 1 unless the environment has KVLAB_LAB_ANSWERS=0
 */
int test_lab_answers(void);

/** Registers suite_NAME() under NAME before main() runs. */
#define REGISTER_SUITE(name)                                              \
    static void register_suite_##name(void) __attribute__((constructor)); \
    static void register_suite_##name(void) { test_register_suite(#name, suite_##name, 0); }

/**
 * Registers suite_NAME(), a suite that needs the lab answers: in the
 * handout it is skipped, and the runner says so.
 */
#define REGISTER_LAB_SUITE(name)                                          \
    static void register_suite_##name(void) __attribute__((constructor)); \
    static void register_suite_##name(void) { test_register_suite(#name, suite_##name, 1); }

#endif
