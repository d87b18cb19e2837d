/* Kernel check: RMSNorm (kernels/rmsnorm.cu) against rmsnorm() of
 * common/cpu/ops.c, row by row, with and without a row map.
 *
 * Tolerance: 1e-5 relative to each value. The kernel reassociates the sum
 * of dim squares (and uses fused multiply-adds); for positive terms the
 * rounding error of a sum of n terms stays below n u in the worst case and
 * near sqrt(n) u in practice (u = 6e-8): for dim = 768, about 2e-6. A
 * kernel that drops one square of 768 is off by about 1e-3. */
#include "kcase.h"

#include <stdio.h>

#include "mem.h"
#include "ops.h"

#define TOL_RMSNORM 1e-5

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
static int case_rmsnorm(KcaseRun *run, int src_rows, int rows, int dim, Err *err)
{
    unsigned long long rng = 11;
    float *x = kcase_host_floats((size_t)src_rows * dim), *w = kcase_host_floats(dim);
    float *want = kcase_host_floats((size_t)rows * dim), *got = kcase_host_floats((size_t)rows * dim);
    int *map = mem_alloc_array(MEM_ACTIVATIONS, (size_t)rows, sizeof(int));
    void *host[] = {x, w, want, got, map};
    RmsArgs a = {.dev = run->dev, .rows = rows, .dim = dim};
    void *devs[4] = {0};
    int rc = -1;
    if (!x || !w || !want || !got || !map) {
        err_set(err, "out of memory");
        goto done;
    }
    kcase_fill(x, (size_t)src_rows * dim, -2.0f, 2.0f, &rng);
    kcase_fill(w, dim, 0.5f, 1.5f, &rng);
    for (int r = 0; r < rows; r++) {
        map[r] = src_rows == rows ? r : (r * 5 + 3) % src_rows;
        rmsnorm(want + (size_t)r * dim, x + (size_t)map[r] * dim, w, dim);
    }
    if (kcase_device_copy((void **)&a.x, x, (size_t)src_rows * dim * 4, run->dev, err) ||
        kcase_device_copy((void **)&a.w, w, (size_t)dim * 4, run->dev, err) ||
        kcase_device_copy((void **)&a.out, NULL, (size_t)rows * dim * 4, run->dev, err))
        goto done;
    if (src_rows != rows && kcase_device_copy((void **)&a.row_map, map, (size_t)rows * sizeof(int), run->dev, err))
        goto done;
    for (int v = 1; v <= kvk_rmsnorm_n_versions; v++) {
        KcaseResult r = kcase_result("rmsnorm", kvk_rmsnorm_versions, v, "f32", TOL_RMSNORM,
                                     (2.0 * rows + 1) * dim * 4);
        snprintf(r.shape, sizeof r.shape, "%d rows x %d%s", rows, dim, src_rows != rows ? " (row map)" : "");
        if (kcase_check_floats(run, &r, rms_launch, &a, a.out, got, want, NULL, (size_t)rows * dim, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.x, devs[1] = a.w, devs[2] = a.out, devs[3] = a.row_map;
    KCASE_RELEASE(devs, host);
    return rc;
}

int kcase_check_rmsnorm(KcaseRun *run, Err *err)
{
    TRY(case_rmsnorm(run, 7, 7, 64, err)); /* stories260K: dim 64 */
    TRY(case_rmsnorm(run, 7, 3, 61, err)); /* a row map, an odd width */
    if (!run->o->quick)
        TRY(case_rmsnorm(run, 64, 64, 768, err)); /* stories110M, batch 64 */
    return 0;
}
