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
 * @param name  the suite's name, used to select it on the command line
 * @param make  builds the suite
 */
void test_register_suite(const char *name, SuiteMaker make);

/** Registers suite_NAME() under NAME before main() runs. */
#define REGISTER_SUITE(name)                                              \
    static void register_suite_##name(void) __attribute__((constructor)); \
    static void register_suite_##name(void) { test_register_suite(#name, suite_##name); }

#endif
