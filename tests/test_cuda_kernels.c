/* Every version of every kernel against its CPU reference, on the small
 * shapes of the kernel checks (kernels/check/NAME_check.c, each with its
 * tolerance and the reason for it), and cuBLAS working in the ledger's
 * workspace. Without a CUDA device each test prints a SKIP line and
 * passes. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_test.h"
#include "suites.h"

#ifdef KVLAB_CUDA
#include <cuda_runtime_api.h>

#include "cases.h"
#include "kernels.h"

typedef struct {
    int checked, failed;
    char first_failure[400];
} Tally;

static void record(const KcaseResult *r, void *ctx)
{
    Tally *t = ctx;
    if (r->goal || !r->supported)
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
/* The paged kernels' reference is chapter 4's paged_attention(), a lab
 * answer: in the handout it is the student's unfinished exercise. */
START_TEST(paged_attention)
{
    if (!test_lab_answers()) {
        test_skip("paged_attention", "its CPU reference is chapter 4's paged_attention(), whose lab code here is "
                                     "the untouched exercises (the handout)");
        return;
    }
    check_kernel("paged_attention");
}
END_TEST
START_TEST(block_copy) { check_kernel("block_copy"); }
END_TEST

#ifdef KVLAB_CUDA
/* Sends stderr to a temporary file until stderr_restore(). */
typedef struct {
    char path[64];
    int saved;
} StderrCapture;

static void stderr_capture(StderrCapture *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/kvlab-stderr-XXXXXX");
    int fd = mkstemp(c->path);
    ck_assert_msg(fd >= 0, "mkstemp failed");
    fflush(stderr);
    c->saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* Restores stderr and returns what was written meanwhile (malloc'd). */
static char *stderr_restore(StderrCapture *c)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    char *text = test_slurp(c->path);
    unlink(c->path);
    return text;
}

/* Queues a small f32 matmul through cuBLAS (version 2) on `stream`. */
static void blas_matmul(const Device *dev, float *out, const float *x, const float *w, cudaStream_t stream)
{
    Err err = {{0}};
    ck_assert_msg(kvk_matmul(2, dev->blas, out, x, w, DTYPE_F32, 4, 32, 16, stream, &err) == 0, "%s", err.msg);
}

/* Every GEMM, on the device's stream, on another stream and back, and
 * inside a captured graph, runs with the workspace from the ledger.
 * cuBLAS cannot say which workspace it uses; the emulator's fake cuBLAS
 * can (make emu-check): with EMU_VERBOSE set it prints, when a handle is
 * destroyed, how many GEMMs it ran and how many of them with the user's
 * workspace. On a real GPU only the stream bookkeeping is checked. */
static void blas_workspace_check(void)
{
    setenv("EMU_VERBOSE", "1", 1);
    StderrCapture cap;
    stderr_capture(&cap);
    Device dev;
    Err err = {{0}};
    int opened = device_open(&dev, &err) == 0;
    float *x = NULL, *w = NULL, *out = NULL; /* [4][32], [16][32], [4][16] */
    cudaStream_t other = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int emulated = opened && strncmp(dev.name, "EMU ", 4) == 0;
    long rebinds = -1;
    if (opened) {
        ck_assert(device_alloc(&x, 4 * 32 * sizeof(float), MEM_ACTIVATIONS, &err) == 0);
        ck_assert(device_alloc(&w, 16 * 32 * sizeof(float), MEM_ACTIVATIONS, &err) == 0);
        ck_assert(device_alloc(&out, 4 * 16 * sizeof(float), MEM_ACTIVATIONS, &err) == 0);
        ck_assert(cudaMemsetAsync(x, 0, 4 * 32 * sizeof(float), dev.stream) == cudaSuccess);
        ck_assert(cudaMemsetAsync(w, 0, 16 * 32 * sizeof(float), dev.stream) == cudaSuccess);
        ck_assert(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
        for (int i = 0; i < 3; i++)
            blas_matmul(&dev, out, x, w, dev.stream);
        ck_assert(device_sync(&dev, &err) == 0);
        blas_matmul(&dev, out, x, w, other); /* a stream change: the workspace is set again */
        ck_assert(cudaStreamSynchronize(other) == cudaSuccess);
        blas_matmul(&dev, out, x, w, dev.stream); /* and back */
        ck_assert(cudaStreamBeginCapture(dev.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
        blas_matmul(&dev, out, x, w, dev.stream);
        ck_assert(cudaStreamEndCapture(dev.stream, &graph) == cudaSuccess);
        ck_assert(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        ck_assert(cudaGraphLaunch(exec, dev.stream) == cudaSuccess);
        ck_assert(device_sync(&dev, &err) == 0);
        rebinds = kvk_blas_rebinds(dev.blas);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(other);
        device_free(out, NULL);
        device_free(w, NULL);
        device_free(x, NULL);
        device_close(&dev);
    }
    char *text = stderr_restore(&cap);
    unsetenv("EMU_VERBOSE");
    ck_assert_msg(opened, "%s", err.msg);
    ck_assert_msg(rebinds == 2, "the handle changed streams %ld times, not 2", rebinds);
    if (!emulated) {
        free(text);
        test_skip("cublas_uses_the_ledger_workspace", "which workspace cuBLAS used can only be seen under the CPU "
                                                     "emulator's fake cuBLAS (make emu-check)");
        return;
    }
    const char *line = strstr(text, "FAKE CUBLAS: ");
    long long gemms = -1, with_ours = -1;
    ck_assert_msg(line && sscanf(line, "FAKE CUBLAS: %lld GEMMs, %lld of them", &gemms, &with_ours) == 2,
                  "the fake cuBLAS printed no count: %.300s", text);
    free(text);
    ck_assert_msg(gemms == 6, "%lld GEMMs, not 6", gemms);
    ck_assert_msg(with_ours == gemms, "only %lld of %lld GEMMs ran with the ledger's workspace", with_ours, gemms);
}
#endif

#ifdef KVLAB_CUDA
/* Versions 2 and 3 of paged attention size their partition grid from
 * max_pos; an entry at or past it (the caller broke the rule) must come
 * out NaN, never merged from partitions nobody computed (that read the
 * next pair's). Version 3 checks every entry's position itself, whether
 * it splits (max_pos 257: two partitions) or not (256: one). */
static void paged_split_past_max_pos(void)
{
    enum { HD = 8, BS = 16, POS = 300, BLOCKS = (POS + BS) / BS };
    KvkHeads h = {1, 1, HD};
    Device dev;
    Err err = {{0}};
    ck_assert_msg(device_open(&dev, &err) == 0, "%s", err.msg);
    float *pool, *q, *out, *scratch; /* [BLOCKS][1 layer][2][BS][HD], [HD], [HD], scratch */
    int *ints, ints_host[BLOCKS + 2];  /* block table [BLOCKS], entry table [1], pos [1] */
    size_t pool_floats = (size_t)BLOCKS * 2 * BS * HD, scratch_floats = 0;
    static const int max_pos[] = {POS + 1, KVK_SPLIT_PARTITION, KVK_SPLIT_PARTITION + 1};
    for (int version = 2; version <= 3; version++)
        for (size_t m = 0; m < sizeof max_pos / sizeof max_pos[0]; m++) {
            size_t floats = kvk_paged_attention_scratch_floats(version, DTYPE_F32, 1, max_pos[m], h);
            scratch_floats = floats > scratch_floats ? floats : scratch_floats;
        }
    ck_assert(device_alloc((void **)&pool, pool_floats * sizeof(float), MEM_ACTIVATIONS, &err) == 0);
    ck_assert(device_alloc((void **)&q, HD * sizeof(float), MEM_ACTIVATIONS, &err) == 0);
    ck_assert(device_alloc((void **)&out, HD * sizeof(float), MEM_ACTIVATIONS, &err) == 0);
    ck_assert(device_alloc((void **)&scratch, scratch_floats * sizeof(float), MEM_ACTIVATIONS, &err) == 0);
    ck_assert(device_alloc((void **)&ints, sizeof ints_host, MEM_ACTIVATIONS, &err) == 0);
    for (int b = 0; b < BLOCKS; b++)
        ints_host[b] = b;
    ints_host[BLOCKS] = 0;       /* entry 0 reads table row 0 */
    ints_host[BLOCKS + 1] = POS; /* two partitions of 256 positions */
    cuda_test_upload(&dev, ints, ints_host, sizeof ints_host);
    ck_assert(cudaMemsetAsync(pool, 0, pool_floats * sizeof(float), dev.stream) == cudaSuccess);
    ck_assert(cudaMemsetAsync(q, 0, HD * sizeof(float), dev.stream) == cudaSuccess);
    KvkBlockTables tables = {ints, BLOCKS, ints + BLOCKS, BS, 1};
    float got[HD];
    for (int version = 2; version <= 3; version++)
        for (size_t m = 0; m < (version == 2 ? 2 : 3); m++) {
            int right = max_pos[m] > POS;
            ck_assert_msg(kvk_paged_attention(version, DTYPE_F32, out, q, pool, 0, tables, ints + BLOCKS + 1, 1,
                                              max_pos[m], h, scratch, dev.stream, &err) == 0, "%s", err.msg);
            cuda_test_download(&dev, got, out, sizeof got);
            for (int d = 0; d < HD; d++) /* zero values: a right call gives 0 */
                ck_assert_msg(right ? got[d] == 0.0f : isnan(got[d]), "v%d, max_pos %d: out[%d] = %g", version,
                              max_pos[m], d, got[d]);
        }
    void *bufs[] = {pool, q, out, scratch, ints};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        device_free(bufs[i], NULL);
    device_close(&dev);
    ck_assert_int_eq(device_live_buffers(), 0);
}

/* The message of a failed launch check: a fault of an earlier kernel
 * (sticky: every later call returns it) must not be blamed on the kernel
 * just launched; a refused launch must name it. */
START_TEST(launch_errors_blame_the_right_kernel)
{
    Err err = {{0}};
    ck_assert_int_eq(kvk_launch_error(&err, cudaErrorIllegalAddress, "attention v3", "kernels/attention.cu", 7), -1);
    ck_assert_msg(strstr(err.msg, "before launching attention v3") && strstr(err.msg, "earlier kernel") &&
                      strstr(err.msg, "not the cause"),
                  "%s", err.msg);
    ck_assert(kvk_error_is_device_fault(cudaErrorLaunchFailure) && kvk_error_is_device_fault(cudaErrorMisalignedAddress));
    ck_assert_int_eq(kvk_launch_error(&err, cudaErrorInvalidConfiguration, "rmsnorm v2", "kernels/rmsnorm.cu", 9), -1);
    ck_assert_msg(strstr(err.msg, "kernels/rmsnorm.cu:9: launching rmsnorm v2: ") && !strstr(err.msg, "earlier"),
                  "%s", err.msg);
    ck_assert(!kvk_error_is_device_fault(cudaErrorInvalidConfiguration) &&
              !kvk_error_is_device_fault(cudaErrorLaunchOutOfResources) &&
              !kvk_error_is_device_fault(cudaErrorNoKernelImageForDevice));
}
END_TEST
#endif

START_TEST(paged_split_refuses_positions_past_max_pos)
{
    if (!cuda_test_device_present("paged_split_refuses_positions_past_max_pos"))
        return;
#ifdef KVLAB_CUDA
    paged_split_past_max_pos();
#endif
}
END_TEST

/* Block copy v2 launches once per wave of pairs that do not depend on each
 * other (the pairs of one launch run at the same time). */
START_TEST(block_copy_waves_split_chained_pairs)
{
#ifdef KVLAB_CUDA
    static const struct {
        int pairs[6], n, waves;
        const char *what;
    } cases[] = {
        {{0, 1, 2, 3, 4, 5}, 3, 1, "independent pairs (copy-on-write)"},
        {{0, 1, 0, 2, 0, 3}, 3, 1, "one source read three times"},
        {{0, 1, 1, 2}, 2, 2, "a chain: the second reads what the first writes"},
        {{0, 1, 1, 0}, 2, 2, "a swap"},
        {{0, 2, 1, 2}, 2, 2, "two copies into one block"},
        {{0, 1, 2, 0}, 2, 2, "the second overwrites what the first reads"},
        {{0, 1, 1, 2, 2, 3}, 3, 3, "a chain of three"},
        {{0, 1, 2, 3, 1, 4}, 3, 2, "independent, then one that reads the first's block"},
        {{0}, 0, 0, "no pairs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(kvk_block_copy_waves(cases[i].pairs, cases[i].n) == cases[i].waves, "%s: %d launches, not %d",
                      cases[i].what, kvk_block_copy_waves(cases[i].pairs, cases[i].n), cases[i].waves);
#else
    test_skip("block_copy_waves_split_chained_pairs", "built without CUDA");
#endif
}
END_TEST

START_TEST(cublas_uses_the_ledger_workspace)
{
    if (!cuda_test_device_present("cublas_uses_the_ledger_workspace"))
        return;
#ifdef KVLAB_CUDA
    blas_workspace_check();
#endif
}
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
    TCase *rules = tcase_create("rules");
    tcase_set_timeout(rules, 60);
    tcase_add_test(rules, cublas_uses_the_ledger_workspace);
    tcase_add_test(rules, paged_split_refuses_positions_past_max_pos);
    tcase_add_test(rules, block_copy_waves_split_chained_pairs);
#ifdef KVLAB_CUDA
    tcase_add_test(rules, launch_errors_blame_the_right_kernel);
#endif
    suite_add_tcase(s, rules);
    return s;
}

REGISTER_SUITE(cuda_kernels)
