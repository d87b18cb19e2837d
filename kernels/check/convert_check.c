/* Kernel check: f32 to f16/bf16 on the device (kernels/convert.cu)
 * against dtype_from_f32() on the host (common/model/dtype.c), over every
 * exponent range: subnormal halves, normal, overflow to infinity.
 *
 * Tolerance: 0 (bitwise). Both round to nearest even; a conversion either
 * gives the host's bits or is wrong. */
#include "kcase.h"

#include <math.h>
#include <stdio.h>

#include "mem.h"
#include "sampler.h"

#define TOL_EXACT 0.0

static int case_convert(KcaseRun *run, long long n, Dtype t, Err *err)
{
    unsigned long long rng = 16;
    float *x = kcase_host_floats((size_t)n);
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
    if (kcase_device_copy(&devs[0], x, (size_t)n * 4, run->dev, err) ||
        kcase_device_copy(&devs[1], NULL, (size_t)n * 2, run->dev, err) ||
        kvk_convert_from_f32(devs[1], t, devs[0], n, run->dev->stream, err) ||
        kcase_download(got, devs[1], (size_t)n * 2, run->dev, err))
        goto done;
    static const KvkVersion convert_version[] = {{"round-to-nearest-even", "the device's conversion"}};
    KcaseResult r = kcase_result("convert", convert_version, 1, dtype_name(t), TOL_EXACT, (double)n * 6);
    snprintf(r.shape, sizeof r.shape, "%lld values, 2^-30 .. 2^18", n);
    r.max_error = kcase_byte_error(got, want, (size_t)n * 2);
    r.outputs = n;
    rc = kcase_finish(run, &r, NULL, NULL, err);
done:
    KCASE_RELEASE(devs, host);
    return rc;
}

int kcase_check_convert(KcaseRun *run, Err *err)
{
    TRY(case_convert(run, 100000, DTYPE_F16, err));
    return case_convert(run, 100000, DTYPE_BF16, err);
}
