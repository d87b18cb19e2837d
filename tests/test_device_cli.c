/* --device and the element-type options, as a user meets them on any
 * machine, in every chapter: on one without a GPU (or a build without
 * CUDA) --device cuda must say so in one line and exit 1, never crash; the
 * CPU path refuses the device-only options, and --kv-dtype where its CPU
 * path stores f32 only (chapter 2 stores every type: test_ch02.c). The GPU suites
 * (test_cuda_*.c) cover the rest. */
#include <check.h>
#include <string.h>

#include "device.h"
#include "helpers.h"
#include "suites.h"

/* Every chapter program. */
static const char *const PROGRAMS[] = {"ch01-naive", "ch02-kvcache", "ch03-batching", "ch04-paged"};
#define N_PROGRAMS (sizeof PROGRAMS / sizeof PROGRAMS[0])

/* The program failed with exactly one line on stderr, "PROGRAM: error: ...",
 * that contains each word. */
static void expect_one_line_error(const ProgramResult *r, const char *program, const char *word1, const char *word2)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: error: ", program);
    ck_assert_msg(r->status == 1, "%s: exit status %d, stderr: %s", program, r->status, r->err);
    ck_assert_msg(r->out_len == 0, "stdout should be empty: %s", r->out);
    ck_assert_msg(test_count_lines(r->err) == 1, "want one line on stderr: %s", r->err);
    ck_assert_msg(strstr(r->err, prefix) == r->err, "message: %s", r->err);
    ck_assert_msg(strstr(r->err, word1) != NULL, "'%s' lacks '%s'", r->err, word1);
    ck_assert_msg(!word2 || strstr(r->err, word2) != NULL, "'%s' lacks '%s'", r->err, word2);
}

START_TEST(device_cuda_without_a_device_fails_in_one_line)
{
    Err err = {{0}};
    if (device_probe(&err) == 0) {
        test_skip("device_cuda_without_a_device_fails_in_one_line", "a CUDA device is present");
        return;
    }
    /* Before any model or request file is read: the missing device is the
     * one line, however the rest of the command line looks. */
    for (size_t i = 0; i < N_PROGRAMS; i++) {
        const char *argv[] = {PROGRAMS[i], "--device", "cuda", "--kv-dtype", "f16", "--model", "/nonexistent", NULL};
        ProgramResult r;
        ck_assert_int_eq(test_run_program(argv, &r), 0);
        expect_one_line_error(&r, PROGRAMS[i], "--device cuda: ", device_compiled_in() ? "no CUDA" : "no CUDA support");
        test_result_free(&r);
    }
}
END_TEST

START_TEST(device_types_need_device_cuda)
{
    for (size_t i = 0; i < N_PROGRAMS; i++) {
        ProgramResult r;
        /* Chapter 2's CPU cache and chapter 4's pool store every type. */
        if (strcmp(PROGRAMS[i], "ch02-kvcache") != 0 && strcmp(PROGRAMS[i], "ch04-paged") != 0) {
            const char *argv[] = {PROGRAMS[i], "--kv-dtype", "f16", NULL};
            ck_assert_int_eq(test_run_program(argv, &r), 0);
            expect_one_line_error(&r, PROGRAMS[i], "--kv-dtype f16", "--device cuda");
            test_result_free(&r);
        }
        const char *argv2[] = {PROGRAMS[i], "--device", "cpu", "--weight-dtype", "bf16", NULL};
        ck_assert_int_eq(test_run_program(argv2, &r), 0);
        expect_one_line_error(&r, PROGRAMS[i], "--weight-dtype", "--device cuda");
        test_result_free(&r);
    }
}
END_TEST

/* The CUDA path stores f32, f16 and bf16: the other K/V types are refused
 * in one line with --device cuda, before any device is looked for. */
START_TEST(device_refuses_the_cpu_only_kv_types)
{
    const char *types[] = {"int8", "fp8-e4m3", "fp8-e5m2"};
    for (size_t i = 0; i < N_PROGRAMS; i++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            const char *argv[] = {PROGRAMS[i], "--device", "cuda", "--kv-dtype", types[t], NULL};
            ProgramResult r;
            ck_assert_int_eq(test_run_program(argv, &r), 0);
            expect_one_line_error(&r, PROGRAMS[i], types[t], "the CUDA path stores K/V as f32, f16 or bf16");
            test_result_free(&r);
        }
}
END_TEST

START_TEST(bad_device_options_are_refused)
{
    const char *bad[][3] = {{"--device", "gpu", "cpu, cuda"},
                            {"--kv-dtype", "f8", "f32, f16, bf16, int8, fp8-e4m3 or fp8-e5m2"},
                            {"--weight-dtype", "int8", "f32, f16, bf16"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (size_t p = 0; p < N_PROGRAMS; p++) {
            const char *argv[] = {PROGRAMS[p], bad[i][0], bad[i][1], NULL};
            ProgramResult r;
            ck_assert_int_eq(test_run_program(argv, &r), 0);
            expect_one_line_error(&r, PROGRAMS[p], bad[i][0], bad[i][2]);
            test_result_free(&r);
        }
    }
}
END_TEST

START_TEST(help_lists_the_device_options)
{
    for (size_t i = 0; i < N_PROGRAMS; i++) {
        const char *argv[] = {PROGRAMS[i], "--help", NULL};
        ProgramResult r;
        ck_assert_int_eq(test_run_program(argv, &r), 0);
        ck_assert_int_eq(r.status, 0);
        ck_assert_msg(strstr(r.out, "--device cpu|cuda"), "%s --help: %s", PROGRAMS[i], r.out);
        ck_assert_ptr_nonnull(strstr(r.out, "--kv-dtype f32|f16|bf16|int8|fp8-e4m3|fp8-e5m2"));
        ck_assert_ptr_nonnull(strstr(r.out, "--weight-dtype f32|f16|bf16"));
        test_result_free(&r);
    }
}
END_TEST

/* Whether a tool is built without CUDA too (the CPU benchmarks). */
static int cpu_tool(const char *name)
{
    return strcmp(name, "paged_attention_bench") == 0 || strcmp(name, "machine-limits") == 0;
}

/* The GPU tools (built with CUDA) and the CPU benchmarks: --help works,
 * and bad arguments are refused in one line before any device is opened
 * (or any buffer allocated), so that a typo is an error (not a SKIP) where
 * there is no GPU. */
START_TEST(tools_take_help_and_refuse_bad_arguments)
{
    static const char *const cases[][6] = {
        {"decode-bench", "--batch", "12abc", NULL, NULL, "not a whole number"},
        {"decode-bench", "--preset", "stories1B", NULL, NULL, "unknown preset 'stories1B'"},
        {"decode-bench", "--context", "2000", NULL, NULL, "seq_len of 1024"},
        {"decode-bench", "--markdown", "/", NULL, NULL, "--markdown /: cannot create"},
        {"decode-bench", "--steps", NULL, NULL, NULL, "needs a value"},
        {"decode-bench", "--bogus", NULL, NULL, NULL, "unknown argument '--bogus'"},
        {"kernel-check", "--kernel", "flash", NULL, NULL, "no kernel 'flash'"},
        {"kernel-check", "--repeats", "3x", NULL, NULL, "not a whole number"},
        {"kernel-check", "--markdown", "/", NULL, NULL, "cannot create"},
        {"paged_attention_bench", "64abc", NULL, NULL, NULL, "HEAD_DIM: '64abc' is not a whole number"},
        {"paged_attention_bench", "63", NULL, NULL, NULL, "HEAD_DIM must be even"},
        {"paged_attention_bench", "64", "3", "more", NULL, "too many arguments"},
        {"machine-limits", "--mib", "0", NULL, NULL, "--mib: 0 is out of range [1, 65536]"},
        {"machine-limits", "--threads", "2x", NULL, NULL, "not a whole number"},
        {"machine-limits", "--passes", NULL, NULL, NULL, "--passes needs a value"},
        {"machine-limits", "--read-only", "--bogus", NULL, NULL, "unknown argument '--bogus'"},
    };
    static const char *const tools[] = {"decode-bench", "kernel-check", "paged_attention_bench", "machine-limits"};
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        if (!cpu_tool(tools[i]) && !device_compiled_in())
            continue; /* built only with CUDA */
        const char *argv[] = {tools[i], "--help", NULL};
        ProgramResult r;
        ck_assert_int_eq(test_run_program(argv, &r), 0);
        ck_assert_msg(r.status == 0 && strstr(r.out, "Usage: ") == r.out && r.err[0] == '\0',
                      "%s --help: exit %d, stdout: %s, stderr: %s", tools[i], r.status, r.out, r.err);
        test_result_free(&r);
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!cpu_tool(cases[i][0]) && !device_compiled_in())
            continue;
        const char *argv[] = {cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4], NULL};
        ProgramResult r;
        ck_assert_int_eq(test_run_program(argv, &r), 0);
        expect_one_line_error(&r, cases[i][0], cases[i][5], NULL);
        test_result_free(&r);
    }
}
END_TEST

Suite *suite_device_cli(void)
{
    Suite *s = suite_create("device_cli");
    TCase *tc = tcase_create("options");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, device_cuda_without_a_device_fails_in_one_line);
    tcase_add_test(tc, device_types_need_device_cuda);
    tcase_add_test(tc, bad_device_options_are_refused);
    tcase_add_test(tc, device_refuses_the_cpu_only_kv_types);
    tcase_add_test(tc, help_lists_the_device_options);
    tcase_add_test(tc, tools_take_help_and_refuse_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(device_cli)
