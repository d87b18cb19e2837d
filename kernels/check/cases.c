/* Validation cases for every kernel: see cases.h.
 *
 * Each case fills its inputs with seeded random numbers, computes the CPU
 * reference, and runs every version of the kernel on the device with its
 * outputs first poisoned (all bits set: NaN), so that an output a kernel
 * forgets to write fails. All outputs are compared. The kernels of
 * chapter 4 run on a chapter 4 block pool ([n_blocks][n_layers][2]
 * [block_size][kv_dim], the device's layout too) and are compared with
 * chapter 4's own CPU code on the same pool: PagedAttention with the lab's
 * paged_attention(), block copy with block_pool_copy().
 *
 * How errors are measured, and the tolerances (why each is what it is):
 *
 * - Exact kernels (RoPE, residual add, embedding, conversion, K/V write,
 *   block copy) do the same rounding as the reference, operation for
 *   operation, or only move bytes: their outputs must be bitwise equal.
 *   Tolerance 0.
 * - Elementwise kernels with library functions (SwiGLU: expf, a division):
 *   error relative to the reference value. CUDA's expf is within 2 ulp,
 *   glibc's within 1; with the division and two products the result is
 *   within about 5 ulp = 3e-7. Tolerance 2e-6.
 * - RMSNorm: error relative to the value. The sum of dim squares is
 *   reassociated (and uses fused multiply-adds); for positive terms the
 *   rounding errors of a sum of n terms stay below n u in the worst case
 *   and near sqrt(n) u in practice (u = 6e-8): for dim = 768, about 2e-6.
 *   Tolerance 1e-5.
 * - Dot-product kernels (matmul, attention) can cancel: an output near 0
 *   has a large relative error for a correct kernel. Their error is
 *   measured against the output's magnitude, the sum of the absolute
 *   values of its terms (matmul: sum_i |w_oi x_ti|; attention: sum_t a_t
 *   |v_td| with the softmax weights a_t), which is what rounding error is
 *   proportional to. For k terms summed in any order the bound is k u,
 *   the typical error sqrt(k) u: for k = 2048, 1.2e-4 and 2.7e-6. A kernel
 *   that drops one term of k is off by about 1/k of the magnitude
 *   (4.9e-4 for k = 2048; for attention, one position of t: 1/t, 2.4e-4 at
 *   t = 4096, the longest case). Tolerance 5e-5 for f32 sums: 18x the
 *   typical error, 5x below one dropped term. With f16/bf16 weights the
 *   products of the (identically rounded) inputs are exact in f32, but the
 *   tensor cores may accumulate with truncation: 1e-4, still below one
 *   dropped term. Attention with f16/bf16 caches: the reference reads the
 *   same rounded K/V, and scores and sums are f32: 5e-5.
 */
#include "cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "dtype.h"
#include "kernels.h"
#include "kv_ref.h"
#include "mem.h"
#include "ops.h"
#include "paged.h"
#include "sampler.h"

#define TOL_EXACT 0.0
#define TOL_SWIGLU 2e-6
#define TOL_RMSNORM 1e-5
#define TOL_DOT_F32 5e-5
#define TOL_DOT_16 1e-4
#define TOL_ATTENTION 5e-5

/* The performance goal of the issue: PagedAttention within 1.10x of the
 * contiguous-cache kernel at the same lengths and batch. */
#define GOAL_PAGED_RATIO 1.10

/* ------------------------------------------------------------ plumbing */

typedef struct {
    const Device *dev;
    const KcaseOptions *o;
    KcaseReport report;
    void *ctx;
    int failed;
} Run;

/* Launches one version once (queued on the device's stream). */
typedef int (*LaunchFn)(void *args, int version, Err *err);

static void fill(float *x, size_t n, float lo, float hi, unsigned long long *rng)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * sampler_random_f32(rng);
}

static float *host_floats(size_t n)
{
    return mem_alloc_array(MEM_ACTIVATIONS, n ? n : 1, sizeof(float));
}

static int upload(void *dst, const void *src, size_t bytes, const Device *dev, Err *err)
{
    CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dev->stream));
    return device_sync(dev, err);
}

static int download(void *dst, const void *src, size_t bytes, const Device *dev, Err *err)
{
    CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dev->stream));
    return device_sync(dev, err);
}

/* All bits set: every float is NaN, so an output left unwritten fails. */
static int poison(void *dst, size_t bytes, const Device *dev, Err *err)
{
    CUDA_CHECK(err, cudaMemsetAsync(dst, 0xff, bytes, dev->stream));
    return 0;
}

/* A device buffer holding a copy of host data (or just allocated). */
static int device_copy(void **dst, const void *src, size_t bytes, const Device *dev, Err *err)
{
    if (device_alloc(dst, bytes, MEM_ACTIVATIONS, err))
        return -1;
    return src ? upload(*dst, src, bytes, dev, err) : 0;
}

/* Largest |got - want| / |want| (0 where both are 0; NaN counts as infinite). */
static double relative_error(const float *got, const float *want, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double e = d == 0.0 ? 0.0 : d / fabs((double)want[i]);
        if (isnan(e) || isnan((double)got[i]))
            return INFINITY;
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Largest |got - want| / scale (see the top of the file). */
static double scaled_error(const float *got, const float *want, const float *scale, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]) / (double)scale[i];
        if (isnan(e))
            return INFINITY;
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Fraction of bytes that differ (0: bitwise equal). */
static double byte_error(const void *got, const void *want, size_t bytes)
{
    const unsigned char *g = got, *w = want;
    size_t differ = 0;
    for (size_t i = 0; i < bytes; i++)
        differ += g[i] != w[i];
    return bytes ? (double)differ / (double)bytes : 0.0;
}

/* Mean microseconds of one call, after two warm-up calls. */
static int time_version(Run *run, LaunchFn launch, void *args, int version, double *us, Err *err)
{
    cudaEvent_t start, stop;
    CUDA_CHECK(err, cudaEventCreate(&start));
    CUDA_CHECK(err, cudaEventCreate(&stop));
    int rc = 0, repeats = run->o->repeats > 0 ? run->o->repeats : 20;
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = launch(args, version, err);
    if (rc == 0 && cudaEventRecord(start, run->dev->stream) != cudaSuccess)
        rc = err_set(err, "%s:%d: cudaEventRecord failed", __FILE__, __LINE__);
    for (int i = 0; i < repeats && rc == 0; i++)
        rc = launch(args, version, err);
    float ms = 0.0f;
    if (rc == 0) {
        cudaError_t e = cudaEventRecord(stop, run->dev->stream);
        if (e == cudaSuccess)
            e = cudaEventSynchronize(stop);
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&ms, start, stop);
        if (e != cudaSuccess)
            rc = err_set(err, "%s:%d: timing with CUDA events: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    *us = 1e3 * (double)ms / repeats;
    return rc;
}

/* Records a result: times it if it passed, reports it, counts failures. */
static int finish(Run *run, KcaseResult *r, LaunchFn launch, void *args, Err *err)
{
    r->passed = r->supported && r->max_error <= r->tolerance;
    if (r->supported && r->passed && run->o->time && launch)
        TRY(time_version(run, launch, args, r->version, &r->us, err));
    if (r->supported && !r->passed)
        run->failed++;
    run->report(r, run->ctx);
    return 0;
}

static KcaseResult result_for(const char *kernel, const KvkVersion *versions, int version, const char *dtype,
                              double tolerance, double bytes)
{
    KcaseResult r;
    memset(&r, 0, sizeof r);
    r.kernel = kernel;
    r.version = version;
    r.version_name = versions ? versions[version - 1].name : "";
    r.dtype = dtype;
    r.tolerance = tolerance;
    r.bytes = bytes;
    r.supported = 1;
    return r;
}

/* Frees a list of device buffers and host buffers (NULLs are fine). */
static void release(void **device_bufs, size_t n_dev, void **host_bufs, size_t n_host)
{
    for (size_t i = 0; i < n_dev; i++)
        device_free(device_bufs[i], NULL);
    for (size_t i = 0; i < n_host; i++)
        mem_free(host_bufs[i]);
}

#define RELEASE(dev_list, host_list)                                                              \
    release((void **)(dev_list), sizeof(dev_list) / sizeof(void *), (void **)(host_list),         \
            sizeof(host_list) / sizeof(void *))

/* ------------------------------------------------------------- rmsnorm */

typedef struct {
    const Device *dev;
    float *out, *x, *w;
    int *row_map;
    int rows, dim;
} RmsArgs;

static int rms_launch(void *p, int v, Err *err)
{
    RmsArgs *a = p;
    return kvk_rmsnorm(v, a->out, a->x, a->w, a->row_map, a->rows, a->dim, a->dev->stream, err);
}

/* rows outputs from src_rows input rows; with a row map when they differ
 * (the final norm of the rows that want logits). */
static int case_rmsnorm(Run *run, int src_rows, int rows, int dim, Err *err)
{
    unsigned long long rng = 11;
    float *x = host_floats((size_t)src_rows * dim), *w = host_floats(dim), *want = host_floats((size_t)rows * dim);
    float *got = host_floats((size_t)rows * dim);
    int *map = mem_alloc_array(MEM_ACTIVATIONS, (size_t)rows, sizeof(int));
    void *host[] = {x, w, want, got, map};
    RmsArgs a = {.dev = run->dev, .rows = rows, .dim = dim};
    void *devs[4] = {0};
    int rc = -1;
    if (!x || !w || !want || !got || !map) {
        err_set(err, "out of memory");
        goto done;
    }
    fill(x, (size_t)src_rows * dim, -2.0f, 2.0f, &rng);
    fill(w, dim, 0.5f, 1.5f, &rng);
    for (int r = 0; r < rows; r++) {
        map[r] = src_rows == rows ? r : (r * 5 + 3) % src_rows;
        rmsnorm(want + (size_t)r * dim, x + (size_t)map[r] * dim, w, dim);
    }
    if (device_copy((void **)&a.x, x, (size_t)src_rows * dim * 4, run->dev, err) ||
        device_copy((void **)&a.w, w, (size_t)dim * 4, run->dev, err) ||
        device_copy((void **)&a.out, NULL, (size_t)rows * dim * 4, run->dev, err))
        goto done;
    if (src_rows != rows && device_copy((void **)&a.row_map, map, (size_t)rows * sizeof(int), run->dev, err))
        goto done;
    for (int v = 1; v <= kvk_rmsnorm_n_versions; v++) {
        KcaseResult r = result_for("rmsnorm", kvk_rmsnorm_versions, v, "f32", TOL_RMSNORM,
                                   (2.0 * rows + 1) * dim * 4);
        snprintf(r.shape, sizeof r.shape, "%d rows x %d%s", rows, dim, src_rows != rows ? " (row map)" : "");
        if (poison(a.out, (size_t)rows * dim * 4, run->dev, err) || rms_launch(&a, v, err) ||
            download(got, a.out, (size_t)rows * dim * 4, run->dev, err))
            goto done;
        r.max_error = relative_error(got, want, (size_t)rows * dim);
        r.outputs = (long long)rows * dim;
        if (finish(run, &r, rms_launch, &a, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.x, devs[1] = a.w, devs[2] = a.out, devs[3] = a.row_map;
    RELEASE(devs, host);
    return rc;
}

/* ---------------------------------------------------------------- rope */

typedef struct {
    const Device *dev;
    float *q, *k, *cos_t, *sin_t;
    int *pos;
    int n, qw, kw, hd;
} RopeArgs;

static int rope_launch(void *p, int v, Err *err)
{
    RopeArgs *a = p;
    return kvk_rope(v, a->q, a->k, a->pos, a->cos_t, a->sin_t, a->n, a->qw, a->kw, a->hd, a->dev->stream, err);
}

static int case_rope(Run *run, int n, int qw, int kw, int hd, int seq_len, Err *err)
{
    unsigned long long rng = 12;
    size_t half = (size_t)hd / 2, nq = (size_t)n * qw, nk = (size_t)n * kw;
    float *q = host_floats(nq), *k = host_floats(nk), *cos_t = host_floats(seq_len * half);
    float *sin_t = host_floats(seq_len * half), *want = host_floats(nq + nk), *got = host_floats(nq + nk);
    int *pos = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(int));
    void *host[] = {q, k, cos_t, sin_t, want, got, pos};
    RopeArgs a = {.dev = run->dev, .n = n, .qw = qw, .kw = kw, .hd = hd};
    void *devs[5] = {0};
    int rc = -1;
    if (!q || !k || !cos_t || !sin_t || !want || !got || !pos) {
        err_set(err, "out of memory");
        goto done;
    }
    fill(q, nq, -1.0f, 1.0f, &rng);
    fill(k, nk, -1.0f, 1.0f, &rng);
    rope_tables(cos_t, sin_t, seq_len, hd);
    memcpy(want, q, nq * 4);
    memcpy(want + nq, k, nk * 4);
    for (int i = 0; i < n; i++) {
        pos[i] = i == n - 1 ? seq_len - 1 : (int)(sampler_random_f32(&rng) * (float)seq_len) % seq_len;
        rope_rotate(want + (size_t)i * qw, qw, hd, cos_t + pos[i] * half, sin_t + pos[i] * half);
        rope_rotate(want + nq + (size_t)i * kw, kw, hd, cos_t + pos[i] * half, sin_t + pos[i] * half);
    }
    if (device_copy((void **)&a.q, NULL, nq * 4, run->dev, err) ||
        device_copy((void **)&a.k, NULL, nk * 4, run->dev, err) ||
        device_copy((void **)&a.cos_t, cos_t, seq_len * half * 4, run->dev, err) ||
        device_copy((void **)&a.sin_t, sin_t, seq_len * half * 4, run->dev, err) ||
        device_copy((void **)&a.pos, pos, (size_t)n * sizeof(int), run->dev, err))
        goto done;
    for (int v = 1; v <= kvk_rope_n_versions; v++) {
        KcaseResult r = result_for("rope", kvk_rope_versions, v, "f32", TOL_EXACT, 2.0 * (nq + nk) * 4);
        snprintf(r.shape, sizeof r.shape, "%d tokens, q %d k %d, head %d", n, qw, kw, hd);
        if (upload(a.q, q, nq * 4, run->dev, err) || upload(a.k, k, nk * 4, run->dev, err) ||
            rope_launch(&a, v, err) || download(got, a.q, nq * 4, run->dev, err) ||
            download(got + nq, a.k, nk * 4, run->dev, err))
            goto done;
        r.max_error = relative_error(got, want, nq + nk);
        r.outputs = (long long)(nq + nk);
        if (finish(run, &r, rope_launch, &a, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.q, devs[1] = a.k, devs[2] = a.cos_t, devs[3] = a.sin_t, devs[4] = a.pos;
    RELEASE(devs, host);
    return rc;
}

/* ------------------------------------------------ swiglu and residual */

typedef struct {
    const Device *dev;
    float *a, *b;
    long long n;
    int residual; /* 0: swiglu, 1: residual add */
} MapArgs;

static int map_launch(void *p, int v, Err *err)
{
    MapArgs *m = p;
    if (m->residual)
        return kvk_residual_add(v, m->a, m->b, m->n, m->dev->stream, err);
    return kvk_swiglu(v, m->a, m->b, m->n, m->dev->stream, err);
}

/* SwiGLU (residual = 0) or the residual add (residual = 1), in place. */
static int case_elementwise(Run *run, long long n, int residual, Err *err)
{
    unsigned long long rng = residual ? 14 : 13;
    float *a0 = host_floats((size_t)n), *b = host_floats((size_t)n), *want = host_floats((size_t)n);
    float *got = host_floats((size_t)n);
    void *host[] = {a0, b, want, got};
    MapArgs m = {.dev = run->dev, .n = n, .residual = residual};
    void *devs[2] = {0};
    int rc = -1;
    if (!a0 || !b || !want || !got) {
        err_set(err, "out of memory");
        goto done;
    }
    fill(a0, (size_t)n, -4.0f, 4.0f, &rng);
    fill(b, (size_t)n, -4.0f, 4.0f, &rng);
    memcpy(want, a0, (size_t)n * 4);
    if (residual)
        add_inplace(want, b, (int)n);
    else
        swiglu(want, b, (int)n);
    if (device_copy((void **)&m.a, NULL, (size_t)n * 4, run->dev, err) ||
        device_copy((void **)&m.b, b, (size_t)n * 4, run->dev, err))
        goto done;
    int versions = residual ? kvk_residual_n_versions : kvk_swiglu_n_versions;
    for (int v = 1; v <= versions; v++) {
        KcaseResult r = result_for(residual ? "residual" : "swiglu",
                                   residual ? kvk_residual_versions : kvk_swiglu_versions, v, "f32",
                                   residual ? TOL_EXACT : TOL_SWIGLU, 3.0 * (double)n * 4);
        snprintf(r.shape, sizeof r.shape, "%lld elements", n);
        if (upload(m.a, a0, (size_t)n * 4, run->dev, err) || map_launch(&m, v, err) ||
            download(got, m.a, (size_t)n * 4, run->dev, err))
            goto done;
        r.max_error = relative_error(got, want, (size_t)n);
        r.outputs = n;
        if (finish(run, &r, map_launch, &m, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = m.a, devs[1] = m.b;
    RELEASE(devs, host);
    return rc;
}

/* ----------------------------------------------------------- embedding */

typedef struct {
    const Device *dev;
    float *out;
    void *table;
    int *tokens;
    Dtype t;
    int n, dim;
} EmbArgs;

static int emb_launch(void *p, int v, Err *err)
{
    EmbArgs *a = p;
    return kvk_embedding(v, a->out, a->table, a->t, a->tokens, a->n, a->dim, a->dev->stream, err);
}

static int case_embedding(Run *run, int vocab, int dim, int n, Dtype t, Err *err)
{
    unsigned long long rng = 15;
    size_t cells = (size_t)vocab * dim;
    float *table = host_floats(cells), *want = host_floats((size_t)n * dim), *got = host_floats((size_t)n * dim);
    void *typed = mem_alloc_array(MEM_ACTIVATIONS, cells, dtype_bytes(t));
    int *tokens = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(int));
    void *host[] = {table, want, got, typed, tokens};
    EmbArgs a = {.dev = run->dev, .t = t, .n = n, .dim = dim};
    void *devs[3] = {0};
    int rc = -1;
    if (!table || !want || !got || !typed || !tokens) {
        err_set(err, "out of memory");
        goto done;
    }
    fill(table, cells, -1.0f, 1.0f, &rng);
    dtype_from_f32(typed, table, cells, t);
    dtype_to_f32(table, typed, cells, t); /* the values the device holds */
    for (int i = 0; i < n; i++) {
        tokens[i] = i == 0 ? vocab - 1 : (int)(sampler_random_f32(&rng) * (float)vocab) % vocab;
        memcpy(want + (size_t)i * dim, table + (size_t)tokens[i] * dim, (size_t)dim * 4);
    }
    if (device_copy(&a.table, typed, cells * dtype_bytes(t), run->dev, err) ||
        device_copy((void **)&a.tokens, tokens, (size_t)n * sizeof(int), run->dev, err) ||
        device_copy((void **)&a.out, NULL, (size_t)n * dim * 4, run->dev, err))
        goto done;
    for (int v = 1; v <= kvk_embedding_n_versions; v++) {
        KcaseResult r = result_for("embedding", kvk_embedding_versions, v, dtype_name(t), TOL_EXACT,
                                   (double)n * dim * (4.0 + (double)dtype_bytes(t)));
        snprintf(r.shape, sizeof r.shape, "%d tokens of %d x %d", n, vocab, dim);
        if (poison(a.out, (size_t)n * dim * 4, run->dev, err) || emb_launch(&a, v, err) ||
            download(got, a.out, (size_t)n * dim * 4, run->dev, err))
            goto done;
        r.max_error = relative_error(got, want, (size_t)n * dim);
        r.outputs = (long long)n * dim;
        if (finish(run, &r, emb_launch, &a, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.table, devs[1] = a.tokens, devs[2] = a.out;
    RELEASE(devs, host);
    return rc;
}

/* ------------------------------------------------------------- convert */

/* f32 -> f16/bf16 on the device must give the host conversion's bits, over
 * every exponent range: subnormal halves, normal, overflow to infinity. */
static int case_convert(Run *run, long long n, Dtype t, Err *err)
{
    unsigned long long rng = 16;
    float *x = host_floats((size_t)n);
    void *want = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, 2), *got = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, 2);
    void *host[] = {x, want, got};
    void *devs[2] = {0};
    int rc = -1;
    if (!x || !want || !got) {
        err_set(err, "out of memory");
        goto done;
    }
    for (long long i = 0; i < n; i++) {
        float mantissa = 1.0f + sampler_random_f32(&rng), exponent = -30.0f + 48.0f * sampler_random_f32(&rng);
        x[i] = (i % 2 ? -1.0f : 1.0f) * mantissa * exp2f(floorf(exponent));
    }
    dtype_from_f32(want, x, (size_t)n, t);
    if (device_copy(&devs[0], x, (size_t)n * 4, run->dev, err) ||
        device_copy(&devs[1], NULL, (size_t)n * 2, run->dev, err) ||
        kvk_convert_from_f32(devs[1], t, devs[0], n, run->dev->stream, err) ||
        download(got, devs[1], (size_t)n * 2, run->dev, err))
        goto done;
    static const KvkVersion convert_version[] = {{"round-to-nearest-even", "the device's conversion"}};
    KcaseResult r = result_for("convert", convert_version, 1, dtype_name(t), TOL_EXACT, (double)n * 6);
    snprintf(r.shape, sizeof r.shape, "%lld values, 2^-30 .. 2^18", n);
    r.max_error = byte_error(got, want, (size_t)n * 2);
    r.outputs = n;
    rc = finish(run, &r, NULL, NULL, err);
done:
    RELEASE(devs, host);
    return rc;
}

/* -------------------------------------------------------------- matmul */

typedef struct {
    const Device *dev;
    float *out;
    void *x, *w;
    Dtype t;
    int n, in, out_dim;
} MatArgs;

static int mat_launch(void *p, int v, Err *err)
{
    MatArgs *a = p;
    return kvk_matmul(v, a->dev->blas, a->out, a->x, a->w, a->t, a->n, a->in, a->out_dim, a->dev->stream, err);
}

static int case_matmul(Run *run, int n, int in, int out_dim, Dtype t, Err *err)
{
    unsigned long long rng = 17;
    size_t nx = (size_t)n * in, nw = (size_t)out_dim * in, no = (size_t)n * out_dim;
    float *x = host_floats(nx), *w = host_floats(nw), *want = host_floats(no), *mag = host_floats(no);
    float *got = host_floats(no);
    void *xt = mem_alloc_array(MEM_ACTIVATIONS, nx, dtype_bytes(t)), *wt = mem_alloc_array(MEM_ACTIVATIONS, nw,
                                                                                             dtype_bytes(t));
    void *host[] = {x, w, want, mag, got, xt, wt};
    MatArgs a = {.dev = run->dev, .t = t, .n = n, .in = in, .out_dim = out_dim};
    void *devs[3] = {0};
    int rc = -1;
    if (!x || !w || !want || !mag || !got || !xt || !wt) {
        err_set(err, "out of memory");
        goto done;
    }
    fill(x, nx, -1.0f, 1.0f, &rng);
    fill(w, nw, -1.0f, 1.0f, &rng);
    dtype_from_f32(xt, x, nx, t);
    dtype_from_f32(wt, w, nw, t);
    dtype_round(x, nx, t); /* the reference multiplies the values the device holds */
    dtype_round(w, nw, t);
    matmul(want, x, w, n, in, out_dim);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out_dim; o++) {
            double m = 0.0;
            for (int j = 0; j < in; j++)
                m += fabs((double)w[(size_t)o * in + j] * (double)x[(size_t)i * in + j]);
            mag[(size_t)i * out_dim + o] = (float)m;
        }
    if (device_copy(&a.x, xt, nx * dtype_bytes(t), run->dev, err) ||
        device_copy(&a.w, wt, nw * dtype_bytes(t), run->dev, err) ||
        device_copy((void **)&a.out, NULL, no * 4, run->dev, err))
        goto done;
    for (int v = 1; v <= kvk_matmul_n_versions; v++) {
        KcaseResult r = result_for("matmul", kvk_matmul_versions, v, dtype_name(t),
                                   t == DTYPE_F32 ? TOL_DOT_F32 : TOL_DOT_16,
                                   (double)(nx + nw) * (double)dtype_bytes(t) + (double)no * 4);
        snprintf(r.shape, sizeof r.shape, "%d tokens, %d -> %d", n, in, out_dim);
        if (poison(a.out, no * 4, run->dev, err) || mat_launch(&a, v, err) ||
            download(got, a.out, no * 4, run->dev, err))
            goto done;
        r.max_error = scaled_error(got, want, mag, no);
        r.outputs = (long long)no;
        if (finish(run, &r, mat_launch, &a, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.x, devs[1] = a.w, devs[2] = a.out;
    RELEASE(devs, host);
    return rc;
}

/* ------------------------------------------------------------ kv_write */

typedef struct {
    const Device *dev;
    void *k_cache, *v_cache;
    float *k, *v;
    long long *slots;
    Dtype t;
    int n, kv_dim;
} WriteArgs;

static int write_launch(void *p, int v, Err *err)
{
    WriteArgs *a = p;
    return kvk_kv_write(v, a->t, a->k_cache, a->v_cache, a->k, a->v, a->slots, a->n, a->kv_dim, a->dev->stream,
                        err);
}

/* n tokens into distinct random rows of a [rows][kv_dim] cache; every
 * seventh token has slot -1 and must leave the cache untouched. */
static int case_kv_write(Run *run, int n, int kv_dim, int rows, Dtype t, Err *err)
{
    unsigned long long rng = 18;
    size_t cells = (size_t)rows * kv_dim, eb = dtype_bytes(t), nkv = (size_t)n * kv_dim;
    float *init = host_floats(cells), *k = host_floats(nkv), *v = host_floats(nkv);
    void *cache0 = mem_alloc_array(MEM_ACTIVATIONS, cells, eb), *want_k = mem_alloc_array(MEM_ACTIVATIONS, cells, eb);
    void *want_v = mem_alloc_array(MEM_ACTIVATIONS, cells, eb), *got = mem_alloc_array(MEM_ACTIVATIONS, cells, eb);
    long long *slots = mem_alloc_array(MEM_ACTIVATIONS, (size_t)rows, sizeof(long long));
    void *host[] = {init, k, v, cache0, want_k, want_v, got, slots};
    WriteArgs a = {.dev = run->dev, .t = t, .n = n, .kv_dim = kv_dim};
    void *devs[5] = {0};
    int rc = -1;
    if (!init || !k || !v || !cache0 || !want_k || !want_v || !got || !slots || n > rows) {
        err_set(err, n > rows ? "kv_write case: more tokens than rows" : "out of memory");
        goto done;
    }
    fill(init, cells, -1.0f, 1.0f, &rng);
    fill(k, nkv, -1.0f, 1.0f, &rng);
    fill(v, nkv, -1.0f, 1.0f, &rng);
    dtype_from_f32(cache0, init, cells, t);
    for (int i = 0; i < rows; i++)
        slots[i] = i;
    for (int i = rows - 1; i > 0; i--) { /* shuffle: distinct random rows */
        int j = (int)(sampler_random_f32(&rng) * (float)(i + 1)) % (i + 1);
        long long tmp = slots[i];
        slots[i] = slots[j];
        slots[j] = tmp;
    }
    for (int i = 6; i < n; i += 7)
        slots[i] = -1;
    memcpy(want_k, cache0, cells * eb);
    memcpy(want_v, cache0, cells * eb);
    kv_write_reference(want_k, want_v, t, k, v, slots, n, kv_dim);
    if (device_copy(&a.k_cache, NULL, cells * eb, run->dev, err) ||
        device_copy(&a.v_cache, NULL, cells * eb, run->dev, err) ||
        device_copy((void **)&a.k, k, nkv * 4, run->dev, err) || device_copy((void **)&a.v, v, nkv * 4, run->dev, err) ||
        device_copy((void **)&a.slots, slots, (size_t)n * sizeof(long long), run->dev, err))
        goto done;
    for (int ver = 1; ver <= kvk_kv_write_n_versions; ver++) {
        KcaseResult r = result_for("kv_write", kvk_kv_write_versions, ver, dtype_name(t), TOL_EXACT,
                                   (double)nkv * 2 * (4.0 + (double)eb));
        snprintf(r.shape, sizeof r.shape, "%d tokens x %d into %d rows", n, kv_dim, rows);
        r.supported = ver == 1 || kv_dim % 4 == 0;
        if (r.supported) {
            if (upload(a.k_cache, cache0, cells * eb, run->dev, err) ||
                upload(a.v_cache, cache0, cells * eb, run->dev, err) || write_launch(&a, ver, err) ||
                download(got, a.k_cache, cells * eb, run->dev, err))
                goto done;
            r.max_error = byte_error(got, want_k, cells * eb);
            if (download(got, a.v_cache, cells * eb, run->dev, err))
                goto done;
            double ev = byte_error(got, want_v, cells * eb);
            r.max_error = ev > r.max_error ? ev : r.max_error;
            r.outputs = 2LL * (long long)cells;
        }
        if (finish(run, &r, write_launch, &a, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.k_cache, devs[1] = a.v_cache, devs[2] = a.k, devs[3] = a.v, devs[4] = a.slots;
    RELEASE(devs, host);
    return rc;
}

/* ------------------------------------------------------------ attention */

/* The paged kernels read a pool of PAGED_LAYERS layers, chapter 4's
 * layout, and attend its last layer: a kernel that finds the wrong layer,
 * or K where V is, reads rows of another layer (NaN here). */
#define PAGED_LAYERS 2

/* A batch of attention queries over K/V held both contiguously (each
 * sequence from a base row) and in shuffled blocks of a chapter 4 block
 * pool (a block table per sequence), with the same values: the contiguous
 * and the paged kernels read the same numbers. The contiguous kernel is
 * checked against attention_reference(), the paged one against chapter
 * 4's paged_attention() (the lab's answer) over the
 * pool, which must itself give attention_reference()'s bits. */
typedef struct {
    int n, heads, kv_heads, hd, max_pos;
    Dtype t;
    int block_size;
    int max_blocks;          /* per sequence */
    long long rows;          /* contiguous rows */
    float *q;                /* [n][dim] */
    float *k, *v;            /* [rows][kv_dim] values as stored (rounded) */
    long long *base;         /* [n] */
    int *pos;                /* [n] */
    int *entry_table;        /* [n] table row of each entry */
    int *tables;             /* [n_tables][max_blocks] block ids, -1 past a sequence's blocks */
    int *table_blocks;       /* [n_tables] blocks each table holds */
    int n_tables;
    int n_blocks;            /* blocks in the pool */
    BlockPool pool;          /* PAGED_LAYERS layers; storage [n_blocks][PAGED_LAYERS][2][block_size][kv_dim] */
    float *want, *mag;       /* [n][dim] reference output (attention_reference()) and magnitude */
    float *want_paged;       /* [n][dim] paged_attention() over the pool */
    /* device */
    float *d_q, *d_out, *d_scratch;
    void *d_k, *d_v, *d_pool;
    long long *d_base;
    int *d_pos, *d_entry, *d_tables;
} AttnCase;

typedef struct {
    const Device *dev;
    AttnCase *c;
    int paged;
} AttnArgs;

static KvkHeads case_heads(const AttnCase *c) { return (KvkHeads){c->heads, c->kv_heads, c->hd}; }

static int attn_launch(void *p, int v, Err *err)
{
    AttnArgs *a = p;
    AttnCase *c = a->c;
    if (!a->paged)
        return kvk_attention(v, c->t, c->d_out, c->d_q, c->d_k, c->d_v, c->d_base, c->d_pos, c->n, c->max_pos,
                             case_heads(c), c->d_scratch, a->dev->stream, err);
    KvkBlockTables tables = {c->d_tables, c->max_blocks, c->d_entry, c->block_size, PAGED_LAYERS};
    return kvk_paged_attention(v, c->t, c->d_out, c->d_q, c->d_pool, PAGED_LAYERS - 1, tables, c->d_pos, c->n,
                               c->max_pos, case_heads(c), c->d_scratch, a->dev->stream, err);
}

/* Reference output and magnitude of every (entry, head), reading the
 * contiguous copy through attention_reference(). */
static void attention_expected(AttnCase *c, float *scores)
{
    int dim = c->heads * c->hd, kv_dim = c->kv_heads * c->hd, mul = c->heads / c->kv_heads;
    for (int i = 0; i < c->n; i++)
        for (int h = 0; h < c->heads; h++) {
            const float *q = c->q + (size_t)i * dim + h * c->hd;
            const float *k = c->k + (size_t)c->base[i] * kv_dim + (h / mul) * c->hd;
            const float *v = c->v + (size_t)c->base[i] * kv_dim + (h / mul) * c->hd;
            int n_pos = c->pos[i] + 1;
            attention_reference(c->want + (size_t)i * dim + h * c->hd, q, k, v, n_pos, kv_dim, c->hd, scores);
            for (int t = 0; t < n_pos; t++)
                scores[t] = attention_score(q, k + (size_t)t * kv_dim, c->hd);
            softmax(scores, n_pos);
            for (int d = 0; d < c->hd; d++) {
                double m = 0.0;
                for (int t = 0; t < n_pos; t++)
                    m += (double)scores[t] * fabs((double)v[(size_t)t * kv_dim + d]);
                c->mag[(size_t)i * dim + h * c->hd + d] = (float)m;
            }
        }
}

/* The paged kernels' reference: chapter 4's paged_attention() for every
 * (entry, head), reading the pool through the entry's block table. It
 * reads the same values as attention_reference() did in the same order,
 * so it must give its bits (the lab checks the same); if it does not, the
 * reference is wrong and no kernel is judged by it. */
static int paged_expected(AttnCase *c, float *scores, Err *err)
{
    int dim = c->heads * c->hd, mul = c->heads / c->kv_heads;
    for (int i = 0; i < c->n; i++) {
        int seq = c->entry_table[i];
        BlockTable table = {c->tables + (size_t)seq * c->max_blocks, c->table_blocks[seq], c->max_blocks};
        for (int h = 0; h < c->heads; h++) {
            size_t at = (size_t)i * dim + (size_t)h * c->hd;
            paged_attention(&c->pool, &table, PAGED_LAYERS - 1, h / mul, c->hd, c->q + at, c->pos[i] + 1,
                            c->want_paged + at, scores);
        }
    }
    if (memcmp(c->want_paged, c->want, (size_t)c->n * dim * sizeof(float)) != 0)
        return err_set(err, "paged_attention() (chapter 4, the lab) does not give attention_reference()'s bits on "
                            "the same K/V; fix it (make lab CH=4) before checking the paged kernels against it");
    return 0;
}

/* Where sequence s's positions go: contiguous rows from base (its region),
 * and blocks spread over a shuffled pool. */
static int attention_layout(AttnCase *c, int n_seqs, const int *seq_len, unsigned long long *rng)
{
    c->max_blocks = (c->max_pos + c->block_size - 1) / c->block_size;
    c->n_tables = n_seqs;
    c->tables = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_seqs * c->max_blocks, sizeof(int));
    c->table_blocks = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_seqs, sizeof(int));
    int total_blocks = 0;
    for (int s = 0; s < n_seqs; s++)
        total_blocks += (seq_len[s] + c->block_size - 1) / c->block_size;
    total_blocks += 3; /* a few blocks nobody uses */
    int *perm = mem_alloc_array(MEM_ACTIVATIONS, (size_t)total_blocks, sizeof(int));
    if (!c->tables || !c->table_blocks || !perm) {
        mem_free(perm);
        return -1;
    }
    for (int b = 0; b < total_blocks; b++)
        perm[b] = b;
    for (int b = total_blocks - 1; b > 0; b--) {
        int j = (int)(sampler_random_f32(rng) * (float)(b + 1)) % (b + 1);
        int tmp = perm[b];
        perm[b] = perm[j];
        perm[j] = tmp;
    }
    int next = 0;
    for (int s = 0; s < n_seqs; s++) {
        c->table_blocks[s] = 0;
        for (int b = 0; b < c->max_blocks; b++) {
            int used = b * c->block_size < seq_len[s];
            c->tables[(size_t)s * c->max_blocks + b] = used ? perm[next++] : -1;
            c->table_blocks[s] += used;
        }
    }
    c->n_blocks = total_blocks;
    mem_free(perm);
    return 0;
}

/* The pool: every element NaN (rows no sequence holds, the other layer),
 * then the K/V of each sequence copied from its contiguous rows into its
 * blocks, in the last layer. */
static int attention_pool(AttnCase *c, int n_seqs, const long long *seq_base, const int *seq_len, Err *err)
{
    int kv_dim = c->kv_heads * c->hd;
    BlockShape shape = {.block_size = c->block_size, .n_layers = PAGED_LAYERS, .kv_dim = kv_dim,
                        .elem_bytes = sizeof(float)};
    if (block_pool_init(&c->pool, &shape, c->n_blocks, 1, err))
        return -1;
    memset(c->pool.storage, 0xff, (size_t)c->n_blocks * c->pool.floats_per_block * sizeof(float));
    size_t row_bytes = (size_t)kv_dim * sizeof(float);
    for (int s = 0; s < n_seqs; s++)
        for (int t = 0; t < seq_len[s]; t++) {
            int block = c->tables[(size_t)s * c->max_blocks + t / c->block_size];
            size_t row = (size_t)(t % c->block_size) * kv_dim, from = (size_t)(seq_base[s] + t) * kv_dim;
            memcpy(block_pool_keys(&c->pool, block, PAGED_LAYERS - 1) + row, c->k + from, row_bytes);
            memcpy(block_pool_values(&c->pool, block, PAGED_LAYERS - 1) + row, c->v + from, row_bytes);
        }
    return 0;
}

static void attention_case_free(AttnCase *c)
{
    void *devs[] = {c->d_q, c->d_out, c->d_scratch, c->d_k, c->d_v, c->d_pool, c->d_base, c->d_pos, c->d_entry,
                    c->d_tables};
    void *host[] = {c->q, c->k, c->v, c->base, c->pos, c->entry_table, c->tables, c->table_blocks, c->want,
                    c->mag, c->want_paged};
    RELEASE(devs, host);
    block_pool_free(&c->pool);
}

/* Typed copy of f32 values, uploaded to a new device buffer. */
static int upload_typed(void **dst, const float *src, size_t n, Dtype t, const Device *dev, Err *err)
{
    void *typed = mem_alloc_array(MEM_ACTIVATIONS, n ? n : 1, dtype_bytes(t));
    if (!typed)
        return err_set(err, "out of memory");
    dtype_from_f32(typed, src, n, t);
    int rc = device_copy(dst, typed, n * dtype_bytes(t), dev, err);
    mem_free(typed);
    return rc;
}

/* Builds a case: entries (seq_of[i], pos[i]) over n_seqs sequences of
 * lengths seq_len[], each stored from row seq_base[] in the contiguous copy
 * and, when paged, in its blocks of the pool. (Only the paged kernels need
 * the lab's paged_attention(): in the handout it may be unwritten.) */
static int attention_build(AttnCase *c, const Device *dev, int n_seqs, const int *seq_len, const long long *seq_base,
                           const int *seq_of, int paged, unsigned long long *rng, Err *err)
{
    int dim = c->heads * c->hd, kv_dim = c->kv_heads * c->hd;
    size_t cells = (size_t)c->rows * kv_dim;
    c->q = host_floats((size_t)c->n * dim);
    c->k = host_floats(cells);
    c->v = host_floats(cells);
    c->base = mem_alloc_array(MEM_ACTIVATIONS, (size_t)c->n, sizeof(long long));
    c->entry_table = mem_alloc_array(MEM_ACTIVATIONS, (size_t)c->n, sizeof(int));
    c->want = host_floats((size_t)c->n * dim);
    c->want_paged = host_floats((size_t)c->n * dim);
    c->mag = host_floats((size_t)c->n * dim);
    float *scores = host_floats((size_t)c->max_pos);
    int rc = -1;
    if (!c->q || !c->k || !c->v || !c->base || !c->entry_table || !c->want || !c->want_paged || !c->mag || !scores ||
        attention_layout(c, n_seqs, seq_len, rng)) {
        err_set(err, "out of memory for an attention case");
        goto done;
    }
    fill(c->q, (size_t)c->n * dim, -1.0f, 1.0f, rng);
    fill(c->k, cells, -1.0f, 1.0f, rng);
    fill(c->v, cells, -1.0f, 1.0f, rng);
    /* The device stores K/V in type t: both references read the rounded values. */
    dtype_round(c->k, cells, c->t);
    dtype_round(c->v, cells, c->t);
    for (int i = 0; i < c->n; i++) {
        c->base[i] = seq_base[seq_of[i]];
        c->entry_table[i] = seq_of[i];
    }
    attention_expected(c, scores);
    if (paged && (attention_pool(c, n_seqs, seq_base, seq_len, err) || paged_expected(c, scores, err) ||
                  upload_typed(&c->d_pool, c->pool.storage, (size_t)c->n_blocks * c->pool.floats_per_block, c->t,
                               dev, err)))
        goto done;
    size_t scratch = kvk_attention_scratch_floats(1, c->n, c->max_pos, case_heads(c));
    size_t paged_scratch = kvk_paged_attention_scratch_floats(2, c->n, c->max_pos, case_heads(c));
    scratch = scratch > paged_scratch ? scratch : paged_scratch;
    if (device_copy((void **)&c->d_q, c->q, (size_t)c->n * dim * 4, dev, err) ||
        device_copy((void **)&c->d_out, NULL, (size_t)c->n * dim * 4, dev, err) ||
        device_copy((void **)&c->d_scratch, NULL, scratch * 4, dev, err) ||
        upload_typed(&c->d_k, c->k, cells, c->t, dev, err) || upload_typed(&c->d_v, c->v, cells, c->t, dev, err) ||
        device_copy((void **)&c->d_base, c->base, (size_t)c->n * sizeof(long long), dev, err) ||
        device_copy((void **)&c->d_pos, c->pos, (size_t)c->n * sizeof(int), dev, err) ||
        device_copy((void **)&c->d_entry, c->entry_table, (size_t)c->n * sizeof(int), dev, err) ||
        device_copy((void **)&c->d_tables, c->tables, (size_t)c->n_tables * c->max_blocks * sizeof(int), dev, err))
        goto done;
    rc = 0;
done:
    mem_free(scores);
    return rc;
}

/* Bytes an attention call must read: each entry's K and V rows and its
 * query, plus its output. */
static double attention_bytes(const AttnCase *c)
{
    double rows = 0.0;
    for (int i = 0; i < c->n; i++)
        rows += c->pos[i] + 1;
    int dim = c->heads * c->hd, kv_dim = c->kv_heads * c->hd;
    return rows * 2.0 * kv_dim * (double)dtype_bytes(c->t) + 2.0 * c->n * dim * 4;
}

/* Runs every version of the contiguous (paged = 0) or paged (paged = 1)
 * kernel on a built case; returns the fastest passing time in *best_us. */
static int attention_versions(Run *run, AttnCase *c, int paged, const char *what, double *best_us, Err *err)
{
    int dim = c->heads * c->hd;
    size_t no = (size_t)c->n * dim;
    float *got = host_floats(no);
    if (!got)
        return err_set(err, "out of memory");
    AttnArgs a = {run->dev, c, paged};
    int versions = paged ? kvk_paged_attention_n_versions : kvk_attention_n_versions;
    int rc = 0;
    *best_us = 0.0;
    for (int v = 1; v <= versions && rc == 0; v++) {
        KcaseResult r = result_for(paged ? "paged_attention" : "attention",
                                   paged ? kvk_paged_attention_versions : kvk_attention_versions, v, dtype_name(c->t),
                                   TOL_ATTENTION, attention_bytes(c));
        snprintf(r.shape, sizeof r.shape, "%.40s: %d x %d/%d heads of %d", what, c->n, c->heads, c->kv_heads, c->hd);
        if (paged)
            snprintf(r.shape + strlen(r.shape), sizeof r.shape - strlen(r.shape), ", blocks of %d", c->block_size);
        r.supported = paged ? kvk_paged_attention_supports(c->t, case_heads(c))
                            : kvk_attention_supports(v, c->t, case_heads(c), c->max_pos);
        if (r.supported) {
            rc = poison(c->d_out, no * 4, run->dev, err);
            if (rc == 0)
                rc = attn_launch(&a, v, err);
            if (rc == 0)
                rc = download(got, c->d_out, no * 4, run->dev, err);
            if (rc)
                break;
            r.max_error = scaled_error(got, paged ? c->want_paged : c->want, c->mag, no);
            r.outputs = (long long)no;
        }
        rc = finish(run, &r, attn_launch, &a, err);
        if (rc == 0 && r.passed && r.us > 0 && (*best_us == 0.0 || r.us < *best_us))
            *best_us = r.us;
    }
    mem_free(got);
    return rc;
}

/* The three contiguous forms of the chapters and the paged form, on one
 * set of sequences. kind: 1 whole sequence (chapter 1), 2 one decode token
 * over a long cache (chapter 2), 3 a batch of decode tokens over regions of
 * an arena (chapter 3, and chapter 4's decode step). */
static int case_attention(Run *run, int kind, int n_seqs, int len, int heads, int kv_heads, int hd, int block_size,
                          Dtype t, int compare_paged, Err *err)
{
    unsigned long long rng = 19 + (unsigned long long)kind;
    AttnCase c;
    memset(&c, 0, sizeof c);
    c.heads = heads, c.kv_heads = kv_heads, c.hd = hd, c.t = t, c.block_size = block_size;
    int *seq_len = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_seqs, sizeof(int));
    long long *seq_base = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_seqs, sizeof(long long));
    int n = kind == 1 ? len : n_seqs;
    int *seq_of = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(int));
    c.pos = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(int));
    int rc = -1;
    if (!seq_len || !seq_base || !seq_of || !c.pos) {
        err_set(err, "out of memory");
        goto done;
    }
    c.n = n;
    for (int s = 0; s < n_seqs; s++) {
        /* Batches mix lengths (the last one is full); regions are len apart. */
        seq_len[s] = kind == 3 && s != n_seqs - 1 ? 1 + (int)(sampler_random_f32(&rng) * (float)len) % len : len;
        seq_base[s] = (long long)s * len;
    }
    for (int i = 0; i < n; i++) {
        seq_of[i] = kind == 1 ? 0 : i;
        c.pos[i] = kind == 1 ? i : seq_len[i] - 1;
    }
    c.max_pos = len;
    c.rows = (long long)n_seqs * len;
    if (attention_build(&c, run->dev, n_seqs, seq_len, seq_base, seq_of, compare_paged, &rng, err))
        goto done;
    static const char *const what[] = {"", "whole sequence", "decode", "batched decode"};
    char label[64];
    snprintf(label, sizeof label, "%s %d", what[kind], len);
    double contiguous_us = 0.0, paged_us = 0.0;
    if (attention_versions(run, &c, 0, label, &contiguous_us, err) ||
        (compare_paged && attention_versions(run, &c, 1, label, &paged_us, err)))
        goto done;
    if (compare_paged && run->o->time && contiguous_us > 0 && paged_us > 0) {
        KcaseResult r = result_for("paged/contiguous", NULL, 1, dtype_name(t), GOAL_PAGED_RATIO, 0.0);
        snprintf(r.shape, sizeof r.shape, "%.40s: %d x %d heads, paged / contiguous time", label, n, heads);
        r.version_name = "time ratio (goal)";
        r.max_error = paged_us / contiguous_us;
        r.passed = r.max_error <= GOAL_PAGED_RATIO;
        r.outputs = -1; /* marks a performance goal, not a check */
        run->report(&r, run->ctx);
    }
    rc = 0;
done:
    attention_case_free(&c);
    mem_free(seq_len);
    mem_free(seq_base);
    mem_free(seq_of);
    return rc;
}

/* ---------------------------------------------------------- block copy */

typedef struct {
    const Device *dev;
    void *pool;
    int *pairs;
    const int *pairs_host;
    int n_pairs;
    long long block_bytes;
} CopyArgs;

static int copy_launch(void *p, int v, Err *err)
{
    CopyArgs *a = p;
    return kvk_block_copy(v, a->pool, a->pairs, a->pairs_host, a->n_pairs, a->block_bytes, a->dev->stream, err);
}

/* n_pairs (src, dst) pairs over a pool of n_blocks shuffled block ids.
 * chained = 0: 2 n_pairs distinct blocks, the first n_pairs sources, the
 * rest destinations, so no copy reads what another writes (copy-on-write).
 * chained = 1: a cycle, pair p copies block b_p to b_(p+1) and the last
 * one back to b_0, so each copy reads what the one before wrote. */
static int copy_pairs(int *pairs, int n_blocks, int n_pairs, int chained, unsigned long long *rng, Err *err)
{
    int *ids = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n_blocks, sizeof(int));
    if (!ids)
        return err_set(err, "out of memory");
    for (int b = 0; b < n_blocks; b++)
        ids[b] = b;
    for (int b = n_blocks - 1; b > 0; b--) {
        int j = (int)(sampler_random_f32(rng) * (float)(b + 1)) % (b + 1);
        int tmp = ids[b];
        ids[b] = ids[j];
        ids[j] = tmp;
    }
    for (int p = 0; p < n_pairs; p++) {
        pairs[2 * p] = ids[p];
        pairs[2 * p + 1] = chained ? ids[(p + 1) % n_pairs] : ids[n_pairs + p];
    }
    mem_free(ids);
    return 0;
}

/* The copies on a chapter 4 pool of n_blocks blocks (layers x 2 x
 * block_size x kv_dim each), against block_pool_copy() on the CPU's pool
 * holding the same (rounded) values: the pairs must behave as if copied
 * one after the other, as block_pool_copy() copies them. */
static int case_block_copy(Run *run, int layers, int n_blocks, int block_size, int kv_dim, int n_pairs, Dtype t,
                           int chained, Err *err)
{
    unsigned long long rng = 20;
    BlockShape shape = {.block_size = block_size, .n_layers = layers, .kv_dim = kv_dim, .elem_bytes = sizeof(float)};
    BlockPool pool;
    memset(&pool, 0, sizeof pool);
    size_t cells = 0, bytes = 0;
    void *start = NULL, *want = NULL, *got = NULL;
    int *pairs = mem_alloc_array(MEM_ACTIVATIONS, 2 * (size_t)(n_pairs > 0 ? n_pairs : 1), sizeof(int));
    CopyArgs a = {.dev = run->dev, .pairs_host = pairs, .n_pairs = n_pairs};
    int rc = -1;
    if (2 * n_pairs > n_blocks) {
        err_set(err, "block copy case: too many pairs");
        goto done;
    }
    if (block_pool_init(&pool, &shape, n_blocks, 1, err))
        goto done;
    cells = (size_t)n_blocks * pool.floats_per_block;
    bytes = cells * dtype_bytes(t);
    a.block_bytes = (long long)(pool.floats_per_block * dtype_bytes(t));
    start = mem_alloc(MEM_ACTIVATIONS, bytes);
    want = mem_alloc(MEM_ACTIVATIONS, bytes);
    got = mem_alloc(MEM_ACTIVATIONS, bytes);
    if (!pairs || !start || !want || !got) {
        err_set(err, "out of memory");
        goto done;
    }
    /* Values the device type holds exactly: the CPU pool and the device
     * pool start from the same numbers. */
    fill(pool.storage, cells, -1.0f, 1.0f, &rng);
    dtype_round(pool.storage, cells, t);
    dtype_from_f32(start, pool.storage, cells, t);
    if (copy_pairs(pairs, n_blocks, n_pairs, chained, &rng, err))
        goto done;
    for (int p = 0; p < n_pairs; p++)
        block_pool_copy(&pool, pairs[2 * p + 1], pairs[2 * p]);
    dtype_from_f32(want, pool.storage, cells, t);
    if (device_copy(&a.pool, NULL, bytes, run->dev, err) ||
        device_copy((void **)&a.pairs, pairs, 2 * (size_t)n_pairs * sizeof(int), run->dev, err))
        goto done;
    for (int ver = 1; ver <= kvk_block_copy_n_versions; ver++) {
        KcaseResult r = result_for("block_copy", kvk_block_copy_versions, ver, dtype_name(t), TOL_EXACT,
                                   2.0 * n_pairs * (double)a.block_bytes);
        snprintf(r.shape, sizeof r.shape, "%d blocks of [%d][2][%d][%d] (%lld B)%s", n_pairs, layers, block_size,
                 kv_dim, a.block_bytes, chained ? ", chained" : "");
        if (upload(a.pool, start, bytes, run->dev, err) || copy_launch(&a, ver, err) ||
            download(got, a.pool, bytes, run->dev, err))
            goto done;
        r.max_error = byte_error(got, want, bytes);
        r.outputs = (long long)bytes;
        if (finish(run, &r, copy_launch, &a, err))
            goto done;
    }
    rc = 0;
done:
    device_free(a.pool, NULL);
    device_free(a.pairs, NULL);
    mem_free(start);
    mem_free(want);
    mem_free(got);
    mem_free(pairs);
    block_pool_free(&pool);
    return rc;
}

/* ------------------------------------------------------------ registry */

static int run_rmsnorm(Run *r, Err *err)
{
    TRY(case_rmsnorm(r, 7, 7, 64, err));  /* stories260K: dim 64 */
    TRY(case_rmsnorm(r, 7, 3, 61, err));  /* a row map, an odd width */
    if (!r->o->quick)
        TRY(case_rmsnorm(r, 64, 64, 768, err)); /* stories110M, batch 64 */
    return 0;
}

static int run_rope(Run *r, Err *err)
{
    TRY(case_rope(r, 9, 64, 32, 8, 512, err)); /* stories260K: GQA, head 8 */
    if (!r->o->quick)
        TRY(case_rope(r, 64, 768, 768, 64, 1024, err)); /* stories110M */
    return 0;
}

static int run_swiglu(Run *r, Err *err)
{
    TRY(case_elementwise(r, 1001, 0, err)); /* not a multiple of 4: the tail */
    if (!r->o->quick)
        TRY(case_elementwise(r, 64LL * 2048, 0, err));
    return 0;
}

static int run_residual(Run *r, Err *err)
{
    TRY(case_elementwise(r, 1001, 1, err));
    if (!r->o->quick)
        TRY(case_elementwise(r, 64LL * 768, 1, err));
    return 0;
}

static int run_embedding(Run *r, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        TRY(case_embedding(r, 512, 64, 9, (Dtype)t, err));
        if (!r->o->quick)
            TRY(case_embedding(r, 32000, 768, 64, (Dtype)t, err));
    }
    return 0;
}

static int run_convert(Run *r, Err *err)
{
    TRY(case_convert(r, 100000, DTYPE_F16, err));
    return case_convert(r, 100000, DTYPE_BF16, err);
}

static int run_matmul(Run *r, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        TRY(case_matmul(r, 7, 64, 172, (Dtype)t, err)); /* stories260K's w1 */
        TRY(case_matmul(r, 1, 61, 33, (Dtype)t, err));  /* odd sizes */
        if (!r->o->quick) {
            TRY(case_matmul(r, 64, 768, 768, (Dtype)t, err));  /* stories110M wq, batch 64 */
            TRY(case_matmul(r, 64, 768, 2048, (Dtype)t, err)); /* w1 */
            TRY(case_matmul(r, 1, 2048, 768, (Dtype)t, err));  /* w2, one token */
        }
    }
    return 0;
}

static int run_kv_write(Run *r, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        TRY(case_kv_write(r, 9, 32, 64, (Dtype)t, err));
        TRY(case_kv_write(r, 5, 6, 16, (Dtype)t, err)); /* kv_dim not a multiple of 4: v1 only */
        if (!r->o->quick)
            TRY(case_kv_write(r, 64, 768, 4096, (Dtype)t, err));
    }
    return 0;
}

/* Attention, contiguous and paged, in the shapes of the chapters. */
static int run_attention(Run *r, int paged, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        Dtype d = (Dtype)t;
        /* stories260K: 8 heads over 4 KV heads of 8 */
        TRY(case_attention(r, 1, 1, 37, 8, 4, 8, 4, d, paged, err));
        TRY(case_attention(r, 3, 5, 40, 8, 4, 8, 16, d, paged, err));
        TRY(case_attention(r, 2, 1, 300, 8, 4, 8, 1, d, paged, err)); /* block size 1, two partitions */
        if (r->o->quick)
            continue;
        /* stories110M: 12 heads of 64 */
        TRY(case_attention(r, 1, 1, 512, 12, 12, 64, 16, d, paged, err));
        TRY(case_attention(r, 2, 1, 4096, 12, 12, 64, 16, d, paged, err));
        TRY(case_attention(r, 3, 64, 1024, 12, 12, 64, 16, d, paged, err));
        /* a GQA shape with 128-wide heads (Llama-2-70B's 64/8) */
        TRY(case_attention(r, 3, 16, 2048, 64, 8, 128, 256, d, paged, err));
    }
    return 0;
}

static int run_attention_contiguous(Run *r, Err *err) { return run_attention(r, 0, err); }
static int run_attention_paged(Run *r, Err *err) { return run_attention(r, 1, err); }

static int run_block_copy(Run *r, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        TRY(case_block_copy(r, 5, 40, 16, 32, 7, (Dtype)t, 0, err)); /* stories260K, blocks of 16: f32 1.25 chunks */
        TRY(case_block_copy(r, 1, 12, 1, 6, 3, DTYPE_F16, 0, err));  /* 24-byte blocks: the byte loop */
        TRY(case_block_copy(r, 3, 20, 4, 16, 5, (Dtype)t, 1, err));  /* a cycle of 5: one wave per pair */
        if (!r->o->quick)
            TRY(case_block_copy(r, 12, 512, 16, 768, 128, (Dtype)t, 0, err)); /* stories110M, 8,192 slots */
    }
    return 0;
}

static const struct {
    const char *name;
    int (*run)(Run *r, Err *err);
} KERNELS[] = {
    {"rmsnorm", run_rmsnorm},     {"rope", run_rope},           {"swiglu", run_swiglu},
    {"residual", run_residual},   {"embedding", run_embedding}, {"convert", run_convert},
    {"matmul", run_matmul},       {"kv_write", run_kv_write},   {"attention", run_attention_contiguous},
    {"paged_attention", run_attention_paged}, {"block_copy", run_block_copy},
};
#define N_KERNELS (sizeof KERNELS / sizeof KERNELS[0])

const char *kcase_kernel_names(void)
{
    return "rmsnorm rope swiglu residual embedding convert matmul kv_write attention paged_attention block_copy";
}

int kcase_kernel_known(const char *name)
{
    for (size_t i = 0; i < N_KERNELS; i++)
        if (strcmp(name, KERNELS[i].name) == 0)
            return 1;
    return 0;
}

int kcase_run(const Device *dev, const char *kernel, const KcaseOptions *o, KcaseReport report, void *ctx, Err *err)
{
    Run run = {dev, o, report, ctx, 0};
    int found = 0;
    for (size_t i = 0; i < N_KERNELS; i++) {
        if (kernel && strcmp(kernel, KERNELS[i].name) != 0)
            continue;
        found = 1;
        if (KERNELS[i].run(&run, err))
            return err_prefix(err, "%s", KERNELS[i].name);
    }
    if (!found)
        return err_set(err, "no kernel '%s' (kernels: %s)", kernel, kcase_kernel_names());
    return run.failed;
}
