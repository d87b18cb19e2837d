/**
 * @file grading.h
 * @brief What a chapter's lab tests (tests/lab/chNN.c) use to be graded.
 *
 * Each chapter's lab file defines lab_suite() and adds every graded test
 * with lab_add_test(). The grader (tests/lab/grader.c) runs each test on its
 * own, in a child process with a time limit (Check's fork mode), so that a
 * crash or a hang in a student's code costs that one test and nothing else,
 * and prints PASS/FAIL/SKIP, the failure message split into what was
 * expected and a hint, what the student's code printed, and `Score: x/y`
 * in points.
 *
 * Assertion messages follow one pattern, which the grader relies on:
 * `ck_assert_msg(ok, "expected ..., got ...; hint: ...", ...)`, the hint
 * naming the function the test exercises (and only that one: a test that
 * needs another lab function working sets it up with the project's own code,
 * or says which test to pass first).
 *
 * **Scoring.** A test is worth its points when it passes and 0 otherwise. A
 * test that could not run (it printed a SKIP line with test_skip(), e.g. a
 * model file that is nowhere) scores 0 as well, and says why: skipped is not
 * passed. The grader says so under the score.
 *
 * **Time limits.** Every test has one (LAB_UNIT_S for the small cases, a few
 * seconds more for whole runs); a test that runs past it fails with a hint
 * that names the function it exercises. CK_TIMEOUT_MULTIPLIER=N (Check's)
 * multiplies every limit, for a slow grading machine.
 */
#ifndef KVLAB_TESTS_LAB_GRADING_H
#define KVLAB_TESTS_LAB_GRADING_H

#include <check.h>

/** Time limit of a small case (a unit test runs in milliseconds): an endless loop ends here. */
#define LAB_UNIT_S 3.0

/** Time limit of a test that runs a chapter end to end on a synthetic or the real tiny model. */
#define LAB_RUN_S 8.0

/**
 * The chapter's graded tests (each chapter's lab file defines it; a lab
 * binary links exactly one).
 * @return a suite whose tests were added with lab_add_test()
 */
Suite *lab_suite(void);

/**
 * An instructor's hidden tests (optional): a file tests/lab/hidden/chNN.c
 * that defines this function is linked into chapter NN's lab binary, and
 * the grader adds its tests after lab_suite()'s, graded the same way. Their
 * visibility in results.json is "after_published" unless the function
 * calls lab_set_visibility(). The handout leaves tests/lab/hidden/ out
 * (book/instructors.md).
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
 *                   (LAB_UNIT_S, LAB_RUN_S, or a measured few seconds)
 * @param points     what it is worth, 1 or more
 * @param exercises  the function the test exercises, as a hint names it,
 *                   e.g. "hash_chain_find()"; the grader names it when the
 *                   test hangs or crashes
 */
void lab_add_test(Suite *s, const TTest *test, double timeout_s, int points, const char *exercises);

/**
 * Sets the visibility, in results.json, of the tests added after this
 * call. The values are Gradescope's: "visible" (the default for the
 * chapter's own tests), "hidden", "after_due_date" or "after_published"
 * (the default for an instructor's hidden tests, lab_hidden_tests()).
 * @param visibility  one of the four
 */
void lab_set_visibility(const char *visibility);

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
