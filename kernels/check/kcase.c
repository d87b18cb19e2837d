/* The plumbing of the kernel checks: buffers, error measures, timing and
 * reporting (kcase.h). */
#include "kcase.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "sampler.h"

/* ------------------------------------------------------------ buffers */

void kcase_fill(float *x, size_t n, float lo, float hi, unsigned long long *rng)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * sampler_random_f32(rng);
}

float *kcase_host_floats(size_t n)
{
    return mem_alloc_array(MEM_ACTIVATIONS, n ? n : 1, sizeof(float));
}

int kcase_upload(void *dst, const void *src, size_t bytes, const Device *dev, Err *err)
{
    CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dev->stream));
    return device_sync(dev, err);
}

int kcase_download(void *dst, const void *src, size_t bytes, const Device *dev, Err *err)
{
    CUDA_CHECK(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dev->stream));
    return device_sync(dev, err);
}

int kcase_poison(void *dst, size_t bytes, const Device *dev, Err *err)
{
    CUDA_CHECK(err, cudaMemsetAsync(dst, 0xff, bytes, dev->stream));
    return 0;
}

int kcase_run_poisoned(KcaseRun *run, KcaseLaunch launch, void *args, int version, void *out, void *got,
                       size_t out_bytes, Err *err)
{
    TRY(kcase_poison(out, out_bytes, run->dev, err));
    TRY(launch(args, version, err));
    return kcase_download(got, out, out_bytes, run->dev, err);
}

int kcase_check_floats(KcaseRun *run, KcaseResult *r, KcaseLaunch launch, void *args, float *out, float *got,
                       const float *want, const float *magnitude, size_t n, Err *err)
{
    TRY(kcase_run_poisoned(run, launch, args, r->version, out, got, n * sizeof(float), err));
    r->max_error = magnitude ? kcase_scaled_error(got, want, magnitude, n) : kcase_relative_error(got, want, n);
    r->outputs = (long long)n;
    return kcase_finish(run, r, launch, args, err);
}

int kcase_device_copy(void **dst, const void *src, size_t bytes, const Device *dev, Err *err)
{
    if (device_alloc(dst, bytes, MEM_ACTIVATIONS, err))
        return -1;
    return src ? kcase_upload(*dst, src, bytes, dev, err) : 0;
}

int kcase_upload_typed(void **dst, const float *src, size_t n, Dtype t, const Device *dev, Err *err)
{
    void *typed = mem_alloc_array(MEM_ACTIVATIONS, n ? n : 1, dtype_bytes(t));
    if (!typed)
        return err_set(err, "out of memory");
    dtype_from_f32(typed, src, n, t);
    int rc = kcase_device_copy(dst, typed, n * dtype_bytes(t), dev, err);
    mem_free(typed);
    return rc;
}

void kcase_release(void **device_bufs, size_t n_dev, void **host_bufs, size_t n_host)
{
    for (size_t i = 0; i < n_dev; i++)
        device_free(device_bufs[i], NULL);
    for (size_t i = 0; i < n_host; i++)
        mem_free(host_bufs[i]);
}

void kcase_shuffle(int *ids, int n, unsigned long long *rng)
{
    for (int i = 0; i < n; i++)
        ids[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(sampler_random_f32(rng) * (float)(i + 1)) % (i + 1);
        int tmp = ids[i];
        ids[i] = ids[j];
        ids[j] = tmp;
    }
}

/* ------------------------------------------------------------- errors */

double kcase_relative_error(const float *got, const float *want, size_t n)
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

double kcase_scaled_error(const float *got, const float *want, const float *scale, size_t n)
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

double kcase_byte_error(const void *got, const void *want, size_t bytes)
{
    const unsigned char *g = got, *w = want;
    size_t differ = 0;
    for (size_t i = 0; i < bytes; i++)
        differ += g[i] != w[i];
    return bytes ? (double)differ / (double)bytes : 0.0;
}

/* ------------------------------------------------------------- timing */

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One timed call: the L2 cleared, then the call alone between two events
 * (all queued before the host waits, so the call starts as soon as the
 * clearing ends). */
static int time_one_call(KcaseRun *run, KcaseLaunch launch, void *args, int version, int i, cudaEvent_t start,
                         cudaEvent_t stop, double *us, Err *err)
{
    cudaStream_t stream = run->dev->stream;
    if (run->l2_scrub)
        CUDA_CHECK(err, cudaMemsetAsync(run->l2_scrub, i & 0xff, run->l2_scrub_bytes, stream));
    CUDA_CHECK(err, cudaEventRecord(start, stream));
    TRY(launch(args, version, err));
    CUDA_CHECK(err, cudaEventRecord(stop, stream));
    CUDA_CHECK(err, cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(err, cudaEventElapsedTime(&ms, start, stop));
    *us = 1e3 * (double)ms;
    return 0;
}

int kcase_time(KcaseRun *run, KcaseLaunch launch, void *args, int version, double *us, Err *err)
{
    int repeats = run->o->repeats > 0 ? run->o->repeats : 20;
    double *calls = mem_alloc_array(MEM_ACTIVATIONS, (size_t)repeats, sizeof(double));
    if (!calls)
        return err_set(err, "out of memory");
    cudaEvent_t start = NULL, stop = NULL;
    int rc = 0;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess)
        rc = err_set(err, "%s:%d: cudaEventCreate failed", __FILE__, __LINE__);
    for (int i = 0; i < 2 && rc == 0; i++) /* warm-up: the first call loads the module, cuBLAS picks its kernels */
        rc = launch(args, version, err);
    for (int i = 0; i < repeats && rc == 0; i++)
        rc = time_one_call(run, launch, args, version, i, start, stop, &calls[i], err);
    if (rc == 0) {
        qsort(calls, (size_t)repeats, sizeof(double), compare_doubles);
        *us = repeats % 2 ? calls[repeats / 2] : 0.5 * (calls[repeats / 2 - 1] + calls[repeats / 2]);
    }
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    mem_free(calls);
    return rc;
}

/* ------------------------------------------------------------ results */

KcaseResult kcase_result(const char *kernel, const KvkVersion *versions, int version, const char *dtype,
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

int kcase_finish(KcaseRun *run, KcaseResult *r, KcaseLaunch launch, void *args, Err *err)
{
    r->passed = r->supported && r->max_error <= r->tolerance;
    if (r->supported && r->passed && run->o->time && launch)
        TRY(kcase_time(run, launch, args, r->version, &r->us, err));
    if (r->supported && !r->passed)
        run->failed++;
    run->report(r, run->ctx);
    return 0;
}

void kcase_report_goal(KcaseRun *run, const char *kernel, const char *dtype, const char *what,
                       const char *shape, double ratio, double goal)
{
    KcaseResult r = kcase_result(kernel, NULL, 1, dtype, goal, 0.0);
    snprintf(r.shape, sizeof r.shape, "%s", shape);
    r.version_name = what;
    r.max_error = ratio;
    r.passed = ratio <= goal;
    r.goal = 1;
    run->report(&r, run->ctx);
}

/* ---------------------------------------------------- elementwise maps */

typedef struct {
    const Device *dev;
    const KcaseMap *m;
    float *a, *b;
    long long n;
} MapArgs;

static int map_launch(void *p, int v, Err *err)
{
    MapArgs *a = p;
    return a->m->launch(v, a->a, a->b, a->n, a->dev->stream, err);
}

int kcase_inplace_map(KcaseRun *run, const KcaseMap *m, long long n, Err *err)
{
    unsigned long long rng = m->seed;
    float *a0 = kcase_host_floats((size_t)n), *b = kcase_host_floats((size_t)n);
    float *want = kcase_host_floats((size_t)n), *got = kcase_host_floats((size_t)n);
    void *host[] = {a0, b, want, got};
    MapArgs args = {.dev = run->dev, .m = m, .n = n};
    void *devs[2] = {0};
    int rc = -1;
    if (!a0 || !b || !want || !got) {
        err_set(err, "out of memory");
        goto done;
    }
    kcase_fill(a0, (size_t)n, -4.0f, 4.0f, &rng);
    kcase_fill(b, (size_t)n, -4.0f, 4.0f, &rng);
    memcpy(want, a0, (size_t)n * 4);
    m->reference(want, b, (int)n);
    if (kcase_device_copy((void **)&args.a, NULL, (size_t)n * 4, run->dev, err) ||
        kcase_device_copy((void **)&args.b, b, (size_t)n * 4, run->dev, err))
        goto done;
    for (int v = 1; v <= m->n_versions; v++) {
        /* reads a and b, writes a */
        KcaseResult r = kcase_result(m->kernel, m->versions, v, "f32", m->tolerance, 3.0 * (double)n * 4);
        snprintf(r.shape, sizeof r.shape, "%lld elements", n);
        if (kcase_upload(args.a, a0, (size_t)n * 4, run->dev, err) || map_launch(&args, v, err) ||
            kcase_download(got, args.a, (size_t)n * 4, run->dev, err))
            goto done;
        r.max_error = kcase_relative_error(got, want, (size_t)n);
        r.outputs = n;
        if (kcase_finish(run, &r, map_launch, &args, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = args.a, devs[1] = args.b;
    KCASE_RELEASE(devs, host);
    return rc;
}
