/**
 * @file grading.h
 * @brief What a chapter's lab tests (tests/lab/chNN.c) use to be graded.
 *
 * Each chapter's lab file defines lab_suite() and adds every graded test
 * with lab_add_test(). The grader (tests/lab/grader.c) runs each test on its
 * own, in a child process with a time limit (Check's fork mode), so that a
 * crash or a hang in a student's code costs that one test and nothing else,
 * and prints PASS/FAIL, the failure message split into what was expected
 * and a hint, what the student's code printed, and `Score: x/y`.
 *
 * Assertion messages follow one pattern, which the grader relies on:
 * `ck_assert_msg(ok, "expected ..., got ...; hint: ...", ...)`.
 */
#ifndef KVLAB_TESTS_LAB_GRADING_H
#define KVLAB_TESTS_LAB_GRADING_H

#include <check.h>

/**
 * The chapter's graded tests (each chapter's lab file defines it; a lab
 * binary links exactly one).
 * @return a suite whose tests were added with lab_add_test()
 */
Suite *lab_suite(void);

/**
 * An instructor's hidden tests (optional): a file tests/lab/hidden/chNN.c
 * that defines this function is linked into chapter NN's lab binary, and
 * the grader adds its tests after lab_suite()'s, graded the same way. The
 * handout leaves tests/lab/hidden/ out (book/instructors.md).
 * @param s  the chapter's suite, to add tests to with lab_add_test()
 */
void lab_hidden_tests(Suite *s) __attribute__((weak));

/**
 * Adds one graded test (a START_TEST function) to the suite as its own test
 * case, named after the function, so that the grader can run and report it
 * alone.
 * @param s          the chapter's suite
 * @param test       the test (the name given to START_TEST)
 * @param timeout_s  seconds before the test counts as hung and fails
 */
void lab_add_test(Suite *s, const TTest *test, double timeout_s);

/**
 * Largest absolute difference between two vectors, and where it is.
 * @param a      [n]
 * @param b      [n]
 * @param n      length
 * @param where  receives the index of the largest difference (NaN counts
 *               as infinitely different); may be NULL
 * @return the difference (INFINITY when a NaN or infinity is involved)
 */
float lab_max_abs_diff(const float *a, const float *b, int n, int *where);

#endif
