/* Chapter 1 as a program: the golden output, and what it reports. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "suites.h"

/* The public golden test of ../shared/models/README.md. */
START_TEST(golden_once_upon_a_time)
{
    const char *golden_path = test_shared_file("golden-once-upon-a-time-150.txt");
    if (!golden_path || !test_shared_file("stories260K.bin")) {
        test_skip("golden_once_upon_a_time", TEST_NOT_FOUND("stories260K.bin or golden-once-upon-a-time-150.txt"));
        return;
    }
    size_t golden_len;
    char *golden = test_slurp(golden_path);
    golden_len = strlen(golden);
    const char *argv[] = {"ch01-naive", "--model", test_shared_file("stories260K.bin"), "--tokenizer",
                          test_shared_file("tok512.bin"), "--prompt", "Once upon a time", "--steps", "150",
                          "--quiet", NULL};
    ProgramResult r;
    ck_assert_int_eq(test_run_program(argv, &r), 0);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_uint_eq(r.out_len, golden_len);
    ck_assert_msg(memcmp(r.out, golden, golden_len) == 0, "output differs from the golden file:\n%s", r.out);
    test_result_free(&r);
    free(golden);
}
END_TEST

Suite *suite_ch01(void)
{
    Suite *s = suite_create("ch01");
    TCase *tc = tcase_create("program");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, golden_once_upon_a_time);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_LAB_SUITE(ch01)
