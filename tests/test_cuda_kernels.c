/* Every version of every kernel against its CPU reference, on the small
 * shapes of kernels/check/cases.c (the tolerances, with their reasons, are
 * there). Without a CUDA device each test prints a SKIP line and passes. */
#include <check.h>
#include <string.h>

#include "cuda_test.h"
#include "suites.h"

#ifdef KVLAB_CUDA
#include "cases.h"

typedef struct {
    int checked, failed;
    char first_failure[400];
} Tally;

static void record(const KcaseResult *r, void *ctx)
{
    Tally *t = ctx;
    if (r->outputs < 0 || !r->supported)
        return; /* performance goals and shapes a version does not take */
    t->checked++;
    if (!r->passed && t->failed++ == 0)
        snprintf(t->first_failure, sizeof t->first_failure, "%s v%d %s on %s (%s): error %.3g > tolerance %.3g",
                 r->kernel, r->version, r->version_name, r->shape, r->dtype, r->max_error, r->tolerance);
}
#endif

/* Runs one kernel's cases; every version of every case must pass. */
static void check_kernel(const char *kernel)
{
    if (!cuda_test_device_present(kernel))
        return;
#ifdef KVLAB_CUDA
    Device dev;
    Err err = {{0}};
    ck_assert_msg(device_open(&dev, &err) == 0, "%s", err.msg);
    KcaseOptions o = {.quick = 1, .time = 0, .repeats = 1};
    Tally t = {0};
    int failed = kcase_run(&dev, kernel, &o, record, &t, &err);
    device_close(&dev);
    ck_assert_msg(failed >= 0, "%s: %s", kernel, err.msg);
    ck_assert_msg(t.failed == 0, "%d checks failed; the first: %s", t.failed, t.first_failure);
    ck_assert_msg(t.checked > 0, "%s: nothing was checked", kernel);
    ck_assert_int_eq(device_live_buffers(), 0);
#endif
}

START_TEST(rmsnorm) { check_kernel("rmsnorm"); }
END_TEST
START_TEST(rope) { check_kernel("rope"); }
END_TEST
START_TEST(swiglu) { check_kernel("swiglu"); }
END_TEST
START_TEST(residual) { check_kernel("residual"); }
END_TEST
START_TEST(embedding) { check_kernel("embedding"); }
END_TEST
START_TEST(convert) { check_kernel("convert"); }
END_TEST
START_TEST(matmul) { check_kernel("matmul"); }
END_TEST
START_TEST(kv_write) { check_kernel("kv_write"); }
END_TEST
START_TEST(attention) { check_kernel("attention"); }
END_TEST
START_TEST(paged_attention) { check_kernel("paged_attention"); }
END_TEST
START_TEST(block_copy) { check_kernel("block_copy"); }
END_TEST

Suite *suite_cuda_kernels(void)
{
    Suite *s = suite_create("cuda_kernels");
    TCase *tc = tcase_create("versions_match_cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rmsnorm);
    tcase_add_test(tc, rope);
    tcase_add_test(tc, swiglu);
    tcase_add_test(tc, residual);
    tcase_add_test(tc, embedding);
    tcase_add_test(tc, convert);
    tcase_add_test(tc, matmul);
    tcase_add_test(tc, kv_write);
    tcase_add_test(tc, attention);
    tcase_add_test(tc, paged_attention);
    tcase_add_test(tc, block_copy);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(cuda_kernels)
