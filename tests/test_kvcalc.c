/* The memory arithmetic (tools/lib/kvmath.h) and build/kvcalc: the figures of
 * the source material, pinned to the byte. */
#include <check.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "kvmath.h"
#include "suites.h"

static KvShape preset(const char *name)
{
    KvShape s;
    ck_assert_msg(kvmath_preset(name, &s) == 0, "preset %s is missing", name);
    return s;
}

START_TEST(presets_have_the_published_shapes)
{
    KvShape s = preset("llama-7b");
    ck_assert_int_eq(s.n_layers, 32);
    ck_assert_int_eq(s.n_heads, 32);
    ck_assert_int_eq(s.n_kv_heads, 32);
    ck_assert_int_eq(s.head_dim, 128);
    s = preset("LLaMA-13B"); /* case does not matter */
    ck_assert_int_eq(s.n_layers, 40);
    ck_assert_int_eq(s.n_kv_heads, 40);
    ck_assert_int_eq(s.head_dim, 128);
    s = preset("opt-13b");
    ck_assert_int_eq(s.n_layers, 40);
    ck_assert_int_eq(s.n_heads, 40);
    ck_assert_int_eq(s.n_kv_heads, 40);
    s = preset("llama-2-70b");
    ck_assert_int_eq(s.n_layers, 80);
    ck_assert_int_eq(s.n_heads, 64);
    ck_assert_int_eq(s.n_kv_heads, 8);
    ck_assert_int_eq(s.head_dim, 128);
    KvShape none;
    ck_assert_int_eq(kvmath_preset("gpt-5", &none), -1);
}
END_TEST

START_TEST(per_token_bytes_follow_the_formula_for_every_dtype)
{
    KvShape s = preset("llama-7b");
    ck_assert_uint_eq(kvmath_bytes_per_token(&s, KV_DTYPE_FP32), 1048576u);
    ck_assert_uint_eq(kvmath_bytes_per_token(&s, KV_DTYPE_FP16), 524288u);
    ck_assert_uint_eq(kvmath_bytes_per_token(&s, KV_DTYPE_BF16), 524288u);
    /* int8 counts one 4-byte scale per head of each row: 2 x 32 x 32 x (128 + 4). */
    ck_assert_uint_eq(kvmath_bytes_per_token(&s, KV_DTYPE_INT8), 270336u);
    ck_assert_uint_eq(kvmath_bytes_per_token(&s, KV_DTYPE_FP8_E4M3), 262144u);
    ck_assert_uint_eq(kvmath_bytes_per_token(&s, KV_DTYPE_FP8_E5M2), 262144u);
    /* GQA: 70B has 8 KV heads for 64 query heads, so it costs less per
     * token than 13B: 2 x 80 x 8 x 128 x 2 = 327,680 B. */
    KvShape l70 = preset("llama-2-70b");
    ck_assert_uint_eq(kvmath_bytes_per_token(&l70, KV_DTYPE_FP16), 327680u);
    /* A checkpoint header: stories260K's shape, fp32 as kvlab stores it. */
    ModelConfig cfg = {64, 172, 5, 8, 4, 512, 512};
    KvShape m = kvmath_shape_from_config(&cfg, "stories260K");
    ck_assert_int_eq(m.head_dim, 8);
    ck_assert_uint_eq(kvmath_bytes_per_token(&m, KV_DTYPE_FP32), 1280u);
    ck_assert_uint_eq(kvmath_bytes_per_token(&m, KV_DTYPE_FP32), model_kv_bytes_per_token(&cfg, 4));
}
END_TEST

/* The source's figures. */
START_TEST(source_figures_are_exact)
{
    KvShape l7 = preset("llama-7b"), l13 = preset("llama-13b");
    uint64_t r7 = kvmath_bytes_per_request(&l7, KV_DTYPE_FP16, 2048);
    uint64_t r13 = kvmath_bytes_per_request(&l13, KV_DTYPE_FP16, 2048);
    ck_assert_uint_eq(r7, 1073741824ULL);
    ck_assert_uint_eq(r7, KVMATH_GIB); /* exactly 1 GiB */
    ck_assert_uint_eq(r13, 1677721600ULL);
    ck_assert_uint_eq(32 * r7, 32 * KVMATH_GIB); /* 32 requests = 32 GiB */
    ck_assert_uint_eq(32 * r7, 34359738368ULL);

    /* 80 - 26 - 4 - 2 = 48, and how many 13B requests that holds. */
    KvBudget dec = {80 * KVMATH_GB, 26 * KVMATH_GB, 4 * KVMATH_GB, 2 * KVMATH_GB};
    KvBudget bin = {80 * KVMATH_GIB, 26 * KVMATH_GIB, 4 * KVMATH_GIB, 2 * KVMATH_GIB};
    uint64_t left;
    ck_assert_int_eq(kvmath_kv_bytes_left(&dec, &left, NULL), 0);
    ck_assert_uint_eq(left, 48000000000ULL);
    ck_assert_uint_eq(kvmath_requests_that_fit(left, r13), 28); /* 28.61 */
    ck_assert_int_eq(kvmath_kv_bytes_left(&bin, &left, NULL), 0);
    ck_assert_uint_eq(left, 51539607552ULL);
    ck_assert_uint_eq(kvmath_requests_that_fit(left, r13), 30); /* 30.72: the source's "about 30" */

    /* 15 requests: 25,165,824,000 B = 23.44 GiB, far from filling 80 GB. */
    ck_assert_uint_eq(15 * r13, 25165824000ULL);
    ck_assert_uint_eq(kvmath_requests_that_fit(80 * KVMATH_GB - 32 * KVMATH_GB - 15 * r13, r13), 13);

    /* 500 of 2,048 tokens used: 75.59% unused, not 60%. */
    ck_assert_double_eq(kvmath_unused_fraction(500, 2048), 1548.0 / 2048.0);
    ck_assert_double_eq_tol(kvmath_unused_fraction(500, 2048), 0.755859375, 1e-15);
    ck_assert_double_eq(kvmath_unused_fraction(3000, 2048), 0.0);
}
END_TEST

START_TEST(impossible_budget_is_an_error)
{
    KvBudget b = {10 * KVMATH_GB, 26 * KVMATH_GB, 0, 0};
    uint64_t left = 7;
    Err err = {{0}};
    ck_assert_int_eq(kvmath_kv_bytes_left(&b, &left, &err), -1);
    ck_assert_uint_eq(left, 7);
    ck_assert_msg(strstr(err.msg, "26000000000") != NULL, "message lacks the bytes: %s", err.msg);
    KvBudget exact = {26 * KVMATH_GB, 26 * KVMATH_GB, 0, 0}; /* nothing left is also nothing for KV */
    ck_assert_int_eq(kvmath_kv_bytes_left(&exact, &left, &err), -1);
    /* Two sizes that add up past 2^64 must not wrap round to a small sum. */
    KvBudget huge = {18000000000000000000ULL, 10000000000000000000ULL, 10000000000000000000ULL, 0};
    ck_assert_int_eq(kvmath_kv_bytes_left(&huge, &left, &err), -1);
}
END_TEST

START_TEST(dtype_names)
{
    KvDtype d;
    const char *names[] = {"fp32", "f32", "fp16", "f16", "BF16", "int8", "fp8-e4m3", "FP8-E5M2"};
    unsigned bytes[] = {4, 4, 2, 2, 2, 1, 1, 1};
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(kvmath_dtype_parse(names[i], &d, NULL), 0);
        ck_assert_uint_eq(kvmath_dtype_bytes(d), bytes[i]);
    }
    ck_assert_int_eq(kvmath_dtype_parse("fp8", &d, NULL), -1);
    ck_assert_str_eq(kvmath_dtype_name(KV_DTYPE_BF16), "bf16");
    ck_assert_str_eq(kvmath_dtype_name(KV_DTYPE_FP16), "fp16");
    ck_assert_str_eq(kvmath_dtype_name(KV_DTYPE_FP8_E5M2), "fp8-e5m2");
}
END_TEST

/* ------------------------------------------------------------ the program */

static void run(const char *const *argv, ProgramResult *r)
{
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

static void expect_in(const char *text, const char *want)
{
    ck_assert_msg(strstr(text, want) != NULL, "expected '%s' in:\n%s", want, text);
}

START_TEST(check_source_prints_the_exact_figures)
{
    const char *argv[] = {"kvcalc", "--check-source", NULL};
    ProgramResult r;
    run(argv, &r);
    ck_assert_int_eq(r.status, 0);
    const char *want[] = {"1,073,741,824 B = 1.0737 GB = 1.0000 GiB", "1,677,721,600 B = 1.6777 GB = 1.5625 GiB",
                          "34,359,738,368 B = 34.3597 GB = 32.0000 GiB", "48,000,000,000 B", "28 requests",
                          "51,539,607,552 B", "30 requests", "25,165,824,000 B", "room for 13 more",
                          "75.5859% unused", "51.1719% unused",
                          /* item 7: the same 13B budget at smaller K/V entries */
                          "int8     865,075,200 B per request: 55 full-length requests fit in 48 GB, 59 in 48 GiB",
                          "fp8-e4m3 838,860,800 B per request: 57 full-length requests fit in 48 GB, 61 in 48 GiB"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        expect_in(r.out, want[i]);
    test_result_free(&r);
}
END_TEST

START_TEST(gpu_fit_gives_both_readings)
{
    const char *argv[] = {"kvcalc", "--preset", "llama-13b", "--gpu-mem", "80GB", "--weights", "26GB",
                          "--activations", "4GB", "--reserve", "2GB", NULL};
    ProgramResult r;
    run(argv, &r);
    ck_assert_int_eq(r.status, 0);
    expect_in(r.out, "819,200 B");
    expect_in(r.out, "left for KV   48,000,000,000 B");
    expect_in(r.out, "full-length requests that fit: 28 ");
    expect_in(r.out, "80GiB 26GiB 4GiB 2GiB");
    expect_in(r.out, "left for KV   51,539,607,552 B");
    expect_in(r.out, "full-length requests that fit: 30 ");
    /* The table by K/V type: bytes per token and what fits in the 48 GB. */
    expect_in(r.out, "fp32      128 head_dim x 4 B                 1,638,400");
    expect_in(r.out, "14 (-14 against fp16)");
    expect_in(r.out, "int8      (128 head_dim x 1 B + 4 B scale)     422,400");
    expect_in(r.out, "55 (+27 against fp16)");
    expect_in(r.out, "fp8-e4m3  128 head_dim x 1 B                   409,600");
    expect_in(r.out, "57 (+29 against fp16)");
    test_result_free(&r);
}
END_TEST

START_TEST(int8_counts_its_scales)
{
    const char *argv[] = {"kvcalc", "--preset", "smollm2-135m", "--dtype", "int8", NULL};
    ProgramResult r;
    run(argv, &r);
    ck_assert_int_eq(r.status, 0);
    /* 2 x 30 x 3 x (64 + 4) = 12,240 B per token: 6% more than 64 codes alone. */
    expect_in(r.out, "int8 (1 B per element, and a 4 B scale per head of each row)");
    expect_in(r.out, "2 (K,V) x 30 layers x 3 KV heads x (64 head_dim x 1 B + 4 B scale) = 12,240 B");
    test_result_free(&r);
}
END_TEST

/* The shape of a real checkpoint header, here a synthetic one. */
START_TEST(model_header_gives_the_shape)
{
    ModelConfig cfg = {48, 96, 3, 6, 2, 400, 80};
    char model[PATH_MAX], tok[PATH_MAX];
    test_write_synthetic(&cfg, 1, 1, 1, model, tok);
    const char *argv[] = {"kvcalc", "--model", model, "--batch", "4", NULL};
    ProgramResult r;
    run(argv, &r);
    ck_assert_int_eq(r.status, 0);
    /* 2 x 3 layers x 2 KV heads x 8 head_dim x 4 B = 384 B; x 80 = 30,720 B; x 4 = 122,880 B */
    expect_in(r.out, "3 layers, 6 query heads, 2 KV heads (GQA), head_dim 8; fp32");
    expect_in(r.out, "= 384 B");
    expect_in(r.out, "one request of 80 tokens\n  30,720 B");
    expect_in(r.out, "a batch of 4 such requests\n  122,880 B");
    test_result_free(&r);
    unlink(model);
    unlink(tok);
}
END_TEST

START_TEST(bad_options_are_one_line_and_exit_1)
{
    const char *cases[][12] = {
        {"kvcalc", "--preset", "gpt-5", NULL},
        {"kvcalc", "--dtype", "fp8", NULL},
        {"kvcalc", "--gpu-mem", "80XB", NULL},
        {"kvcalc", "--gpu-mem", "10GB", "--weights", "26GB", NULL},
        {"kvcalc", "--weights", "1GB", NULL},
        {"kvcalc", "--seq-len", "0", NULL},
        {"kvcalc", "--batch", "-3", NULL},
        {"kvcalc", "--model", "/nonexistent/model.bin", NULL},
        {"kvcalc", "--preset", "llama-7b", "--model", "x.bin", NULL},
        {"kvcalc", "--seq-len", NULL},
        {"kvcalc", "--frobnicate", NULL},
        {"kvcalc", "stray", NULL},
        /* 2^24 requests of 2^24 tokens at 655,360 B per token: past 2^64 bytes */
        {"kvcalc", "--preset", "llama-2-70b", "--dtype", "fp32", "--seq-len", "16777216", "--batch", "16777216", NULL},
        {"kvcalc", "--gpu-mem", "17000000TB", "--weights", "10000000TB", "--activations", "10000000TB", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ProgramResult r;
        run(cases[i], &r);
        ck_assert_msg(r.status == 1, "case %zu (%s %s): exit %d", i, cases[i][1], cases[i][2] ? cases[i][2] : "",
                      r.status);
        ck_assert_msg(r.out_len == 0, "case %zu printed on stdout: %s", i, r.out);
        ck_assert_msg(test_count_lines(r.err) == 1 && strncmp(r.err, "kvcalc: error: ", 15) == 0,
                      "case %zu: expected one error line, got:\n%s", i, r.err);
        test_result_free(&r);
    }
}
END_TEST

Suite *suite_kvcalc(void)
{
    Suite *s = suite_create("kvcalc");
    TCase *math = tcase_create("kvmath");
    tcase_add_test(math, presets_have_the_published_shapes);
    tcase_add_test(math, per_token_bytes_follow_the_formula_for_every_dtype);
    tcase_add_test(math, source_figures_are_exact);
    tcase_add_test(math, impossible_budget_is_an_error);
    tcase_add_test(math, dtype_names);
    suite_add_tcase(s, math);
    TCase *prog = tcase_create("program");
    tcase_add_test(prog, check_source_prints_the_exact_figures);
    tcase_add_test(prog, gpu_fit_gives_both_readings);
    tcase_add_test(prog, int8_counts_its_scales);
    tcase_add_test(prog, model_header_gives_the_shape);
    tcase_add_test(prog, bad_options_are_one_line_and_exit_1);
    suite_add_tcase(s, prog);
    return s;
}

REGISTER_SUITE(kvcalc)
