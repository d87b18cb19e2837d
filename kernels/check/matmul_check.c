/* Kernel check: the projections (kernels/matmul.cu: a plain kernel and
 * cuBLAS) against matmul() of common/cpu/ops.c, on the values the device
 * holds (inputs rounded to f16/bf16 for those types).
 *
 * The error is measured against each output's magnitude, the sum of the
 * absolute values of its terms (sum_i |w_oi x_ti|): an output near 0 can
 * come from cancelling terms, and a correct kernel then has a large
 * relative error. For k terms summed in any order the rounding error is at
 * most k u and typically sqrt(k) u (u = 6e-8): for k = 2048, 1.2e-4 and
 * 2.7e-6. A kernel that drops one term of k is off by about 1/k of the
 * magnitude: 4.9e-4 for k = 2048.
 *
 * Tolerance: 5e-5 for f32 sums, 18x the typical error and 10x below one
 * dropped term at k = 2048. With f16/bf16 inputs the products are exact in
 * f32, but the tensor cores may accumulate with truncation: 1e-4, still
 * below one dropped term. */
#include "kcase.h"

#include <math.h>
#include <stdio.h>

#include "mem.h"
#include "ops.h"

#define TOL_DOT_F32 5e-5
#define TOL_DOT_16 1e-4

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

/* The magnitude of each output: sum_i |w[o][i] x[t][i]|. */
static void matmul_magnitude(float *mag, const float *x, const float *w, int n, int in, int out_dim)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out_dim; o++) {
            double m = 0.0;
            for (int j = 0; j < in; j++)
                m += fabs((double)w[(size_t)o * in + j] * (double)x[(size_t)i * in + j]);
            mag[(size_t)i * out_dim + o] = (float)m;
        }
}

static int case_matmul(KcaseRun *run, int n, int in, int out_dim, Dtype t, Err *err)
{
    unsigned long long rng = 17;
    size_t nx = (size_t)n * in, nw = (size_t)out_dim * in, no = (size_t)n * out_dim;
    float *x = kcase_host_floats(nx), *w = kcase_host_floats(nw), *want = kcase_host_floats(no);
    float *mag = kcase_host_floats(no), *got = kcase_host_floats(no);
    void *xt = mem_alloc_array(MEM_ACTIVATIONS, nx, dtype_bytes(t));
    void *wt = mem_alloc_array(MEM_ACTIVATIONS, nw, dtype_bytes(t));
    void *host[] = {x, w, want, mag, got, xt, wt};
    MatArgs a = {.dev = run->dev, .t = t, .n = n, .in = in, .out_dim = out_dim};
    void *devs[3] = {0};
    int rc = -1;
    if (!x || !w || !want || !mag || !got || !xt || !wt) {
        err_set(err, "out of memory");
        goto done;
    }
    kcase_fill(x, nx, -1.0f, 1.0f, &rng);
    kcase_fill(w, nw, -1.0f, 1.0f, &rng);
    dtype_from_f32(xt, x, nx, t);
    dtype_from_f32(wt, w, nw, t);
    dtype_round(x, nx, t); /* the reference multiplies the values the device holds */
    dtype_round(w, nw, t);
    matmul(want, x, w, n, in, out_dim);
    matmul_magnitude(mag, x, w, n, in, out_dim);
    if (kcase_device_copy(&a.x, xt, nx * dtype_bytes(t), run->dev, err) ||
        kcase_device_copy(&a.w, wt, nw * dtype_bytes(t), run->dev, err) ||
        kcase_device_copy((void **)&a.out, NULL, no * 4, run->dev, err))
        goto done;
    for (int v = 1; v <= kvk_matmul_n_versions; v++) {
        KcaseResult r = kcase_result("matmul", kvk_matmul_versions, v, dtype_name(t),
                                     t == DTYPE_F32 ? TOL_DOT_F32 : TOL_DOT_16,
                                     (double)(nx + nw) * (double)dtype_bytes(t) + (double)no * 4);
        snprintf(r.shape, sizeof r.shape, "%d tokens, %d -> %d", n, in, out_dim);
        if (kcase_check_floats(run, &r, mat_launch, &a, a.out, got, want, mag, no, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.x, devs[1] = a.w, devs[2] = a.out;
    KCASE_RELEASE(devs, host);
    return rc;
}

int kcase_check_matmul(KcaseRun *run, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        TRY(case_matmul(run, 7, 64, 172, (Dtype)t, err)); /* stories260K's w1 */
        TRY(case_matmul(run, 1, 61, 33, (Dtype)t, err));  /* odd sizes */
        if (!run->o->quick) {
            TRY(case_matmul(run, 64, 768, 768, (Dtype)t, err));  /* stories110M wq, batch 64 */
            TRY(case_matmul(run, 64, 768, 2048, (Dtype)t, err)); /* w1 */
            TRY(case_matmul(run, 1, 2048, 768, (Dtype)t, err));  /* w2, one token */
        }
    }
    return 0;
}
