/* kvsim --scenario paper-fig19 (tools/lib/kvsim_swap.c): the cost model of
 * recomputing against swapping, by hand on a tiny model; where the two
 * cross, and how that moves with the fixed cost of a copy; the program's
 * output and its refusals. */
#include <check.h>
#include <string.h>

#include "helpers.h"
#include "kvsim_swap.h"
#include "ext/swap.h"
#include "paged.h"
#include "suites.h"

START_TEST(costs_by_hand)
{
    /* dim 4, hidden 8, 2 layers, 2 heads on 1 KV head (kv_dim 2), vocab
     * 10, 2-byte elements: 2 x 2 x 2 x 2 = 16 B of K/V per token. A GPU of
     * 1000 FLOP/s, HBM 10^4 B/s and a link of 100 B/s; copies get half of
     * it (50 B/s) and cost 0.5 s each; recomputation gets half the FLOPs.
     * 10 tokens in blocks of 4: 3 blocks, 192 B each way (whole blocks).
     * vLLM: 3 x 2 x 2 = 12 copies, 6 s + 192 / 50 = 9.84 s; one copy per
     * block: 1.5 + 3.84 = 5.34 s. Recomputation: per layer 2 x 144 x 10 =
     * 2880 FLOPs of projections (144 weights: 16 + 16 + 2 x 8 + 3 x 32)
     * and 4 x 4 x 55 of attention = 3760, two layers 7520: 15.04 s; alone,
     * the 368 weights (736 B) take 0.0736 s to read, less. */
    ModelConfig c = {4, 8, 2, 2, 1, 10, 16};
    KvsimSwapGpu gpu = {"toy", "toy", 1e3, 1e4, 100, "by hand"};
    KvsimSwapAssumptions a = {.copy_latency = 0.5, .pcie_share = 0.5, .mfu = 0.5, .elem_bytes = 2};
    KvsimSwapCost k;
    kvsim_swap_cost(&c, &gpu, &a, 10, 4, &k);
    ck_assert_int_eq(k.blocks, 3);
    ck_assert_double_eq(k.bytes, 192);
    ck_assert_int_eq(k.copies_vllm, 12);
    ck_assert_double_eq_tol(k.swap_vllm, 9.84, 1e-12);
    ck_assert_double_eq_tol(k.swap_one_copy, 5.34, 1e-12);
    ck_assert_double_eq(k.flops, 7520);
    ck_assert_double_eq(paged_recompute_flops(&c, 10), 7520);
    ck_assert_double_eq_tol(k.recompute, 15.04, 1e-12);
    ck_assert_double_eq(kvsim_swap_params(&c), 368);
    ck_assert_double_eq_tol(k.recompute_alone, 15.04, 1e-12);
    /* A slow memory makes the weights' read the bound of a recomputation alone. */
    gpu.hbm = 10;
    kvsim_swap_cost(&c, &gpu, &a, 10, 4, &k);
    ck_assert_double_eq_tol(k.recompute_alone, 73.6, 1e-12);
    ck_assert_double_eq_tol(k.recompute, 15.04, 1e-12);
    ck_assert_double_eq_tol(k.swap_one_copy, 1.5 + 192.0 / 10, 1e-12); /* the copy is HBM-bound now */
}
END_TEST

START_TEST(crossover_moves_with_the_cost_of_a_copy)
{
    ModelConfig c7, c13;
    KvsimSwapGpu a100, h100;
    ck_assert_int_eq(kvsim_swap_model("llama-7b", &c7), 0);
    ck_assert_int_eq(kvsim_swap_model("LLaMA-13B", &c13), 0);
    ck_assert_int_eq(kvsim_swap_model("llama-65b", &c7), -1);
    ck_assert_int_eq(kvsim_swap_gpu("a100-40gb", &a100), 0);
    ck_assert_int_eq(kvsim_swap_gpu("h100-80gb", &h100), 0);
    ck_assert_int_eq(kvsim_swap_gpu("v100", &h100), -1);
    ck_assert_double_eq_tol(kvsim_swap_params(&c7), 6.74e9, 0.01e9); /* LLaMA-7B's 6.74 B */
    ck_assert_double_eq_tol(kvsim_swap_params(&c13), 13.02e9, 0.01e9);
    KvsimSwapAssumptions a = {.copy_latency = 10e-6, .pcie_share = 0.8, .mfu = 0.5, .elem_bytes = 2};
    int previous = 1;
    for (int us = 1; us <= 16; us *= 2) {
        a.copy_latency = us * 1e-6;
        int cross = kvsim_swap_crossover(&c13, &a100, &a, 1024, 0, 0);
        ck_assert_msg(cross >= previous, "%d us per copy: crossover %d below %d", us, cross, previous);
        ck_assert_int_le(kvsim_swap_crossover(&c13, &a100, &a, 1024, 1, 0), cross); /* fewer copies, earlier */
        previous = cross;
    }
    /* At the defaults: swapping 1024 tokens of LLaMA-13B pays from blocks
     * of 16 on an A100; on an H100 (3.2x the FLOP/s, 2x the link) only
     * from 128. */
    a.copy_latency = 10e-6;
    ck_assert_int_eq(kvsim_swap_crossover(&c13, &a100, &a, 1024, 0, 0), 16);
    ck_assert_int_eq(kvsim_swap_crossover(&c13, &h100, &a, 1024, 0, 0), 128);
    KvsimSwapCost k;
    kvsim_swap_cost(&c13, &a100, &a, 1024, 16, &k);
    ck_assert_msg(2 * k.swap_vllm < k.recompute, "at the crossover swapping is cheaper");
    kvsim_swap_cost(&c13, &a100, &a, 1024, 8, &k);
    ck_assert_msg(2 * k.swap_vllm > k.recompute, "below it recomputing is");
    /* With a copy that costs nothing, only bytes against FLOPs remain. */
    a.copy_latency = 0;
    ck_assert_int_eq(kvsim_swap_crossover(&c13, &a100, &a, 1024, 0, 0), 1);
}
END_TEST

static void run_kvsim(const char *const *args, ProgramResult *r)
{
    const char *argv[24] = {"kvsim"};
    int n = 1;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    ck_assert_int_eq(test_run_program(argv, r), 0);
}

static void expect_one_line_error(const char *const *args, const char *word)
{
    ProgramResult r;
    run_kvsim(args, &r);
    ck_assert_msg(r.status == 1, "expected exit 1, got %d; stderr: %s", r.status, r.err);
    ck_assert_msg(test_count_lines(r.err) == 1 && strstr(r.err, "kvsim: error: ") == r.err && strstr(r.err, word),
                  "expected one error line naming '%s', got:\n%s", word, r.err);
    ck_assert_uint_eq(r.out_len, 0);
    test_result_free(&r);
}

START_TEST(program_prints_the_comparison)
{
    ProgramResult r;
    run_kvsim((const char *[]){"--scenario", "paper-fig19", NULL}, &r);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    const char *lines[] = {"assumptions (--gpu a100-40gb", "NVIDIA A100 datasheet", "--copy-latency: an assumption",
                           "llama-7b (32 layers", "llama-13b (40 layers", "where they cross", "fixed cost per copy"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(r.out, lines[i]), "'%s' missing from:\n%s", lines[i], r.out);
    test_result_free(&r);
    run_kvsim((const char *[]){"--scenario", "list", NULL}, &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "paper-fig19"));
    test_result_free(&r);
    run_kvsim((const char *[]){"--scenario=paper-fig19", "--help", NULL}, &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "--copy-latency US"));
    test_result_free(&r);
}
END_TEST

START_TEST(program_refuses_bad_options)
{
    expect_one_line_error((const char *[]){"--scenario", "paper-fig19", "--mfu", "0", NULL}, "--mfu");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig19", "--gpu", "v100", NULL}, "a100-40gb");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig19", "--length", "0", NULL}, "--length");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig19", "--length", "2.5", NULL}, "--length");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig19", "--copy-latency", "x", NULL}, "--copy-latency");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig19", "--dtype", "int3", NULL}, "fp16");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig19", "--preset", "llama-7b", NULL}, "not an option");
    expect_one_line_error((const char *[]){"--scenario", "paper-fig19", "--json", "/nonexistent/x.json", NULL},
                          "cannot create");
}
END_TEST

Suite *suite_kvsim_swap(void)
{
    Suite *s = suite_create("kvsim_swap");
    TCase *tc = tcase_create("kvsim_swap");
    tcase_add_test(tc, costs_by_hand);
    tcase_add_test(tc, crossover_moves_with_the_cost_of_a_copy);
    tcase_add_test(tc, program_prints_the_comparison);
    tcase_add_test(tc, program_refuses_bad_options);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(kvsim_swap)
