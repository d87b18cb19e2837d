/* Kernel check: RoPE (kernels/rope.cu) against rope_rotate() of
 * common/cpu/ops.c, with the tables of rope_tables().
 *
 * Tolerance: 0 (bitwise). The kernel does the reference's operations on
 * the same table values in the same order, two products and a sum per
 * element, each rounded as the CPU rounds it (__fmul_rn and __fadd_rn
 * forbid fused multiply-adds). */
#include "kcase.h"

#include <stdio.h>
#include <string.h>

#include "mem.h"
#include "ops.h"
#include "sampler.h"

#define TOL_EXACT 0.0

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

static int case_rope(KcaseRun *run, int n, int qw, int kw, int hd, int seq_len, Err *err)
{
    unsigned long long rng = 12;
    size_t half = (size_t)hd / 2, nq = (size_t)n * qw, nk = (size_t)n * kw;
    float *q = kcase_host_floats(nq), *k = kcase_host_floats(nk), *cos_t = kcase_host_floats(seq_len * half);
    float *sin_t = kcase_host_floats(seq_len * half), *want = kcase_host_floats(nq + nk);
    float *got = kcase_host_floats(nq + nk);
    int *pos = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(int));
    void *host[] = {q, k, cos_t, sin_t, want, got, pos};
    RopeArgs a = {.dev = run->dev, .n = n, .qw = qw, .kw = kw, .hd = hd};
    void *devs[5] = {0};
    int rc = -1;
    if (!q || !k || !cos_t || !sin_t || !want || !got || !pos) {
        err_set(err, "out of memory");
        goto done;
    }
    kcase_fill(q, nq, -1.0f, 1.0f, &rng);
    kcase_fill(k, nk, -1.0f, 1.0f, &rng);
    rope_tables(cos_t, sin_t, seq_len, hd);
    memcpy(want, q, nq * 4);
    memcpy(want + nq, k, nk * 4);
    for (int i = 0; i < n; i++) {
        pos[i] = i == n - 1 ? seq_len - 1 : (int)(sampler_random_f32(&rng) * (float)seq_len) % seq_len;
        rope_rotate(want + (size_t)i * qw, qw, hd, cos_t + pos[i] * half, sin_t + pos[i] * half);
        rope_rotate(want + nq + (size_t)i * kw, kw, hd, cos_t + pos[i] * half, sin_t + pos[i] * half);
    }
    if (kcase_device_copy((void **)&a.q, NULL, nq * 4, run->dev, err) ||
        kcase_device_copy((void **)&a.k, NULL, nk * 4, run->dev, err) ||
        kcase_device_copy((void **)&a.cos_t, cos_t, seq_len * half * 4, run->dev, err) ||
        kcase_device_copy((void **)&a.sin_t, sin_t, seq_len * half * 4, run->dev, err) ||
        kcase_device_copy((void **)&a.pos, pos, (size_t)n * sizeof(int), run->dev, err))
        goto done;
    for (int v = 1; v <= kvk_rope_n_versions; v++) {
        KcaseResult r = kcase_result("rope", kvk_rope_versions, v, "f32", TOL_EXACT, 2.0 * (nq + nk) * 4);
        snprintf(r.shape, sizeof r.shape, "%d tokens, q %d k %d, head %d", n, qw, kw, hd);
        if (kcase_upload(a.q, q, nq * 4, run->dev, err) || kcase_upload(a.k, k, nk * 4, run->dev, err) ||
            rope_launch(&a, v, err) || kcase_download(got, a.q, nq * 4, run->dev, err) ||
            kcase_download(got + nq, a.k, nk * 4, run->dev, err))
            goto done;
        r.max_error = kcase_relative_error(got, want, nq + nk);
        r.outputs = (long long)(nq + nk);
        if (kcase_finish(run, &r, rope_launch, &a, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.q, devs[1] = a.k, devs[2] = a.cos_t, devs[3] = a.sin_t, devs[4] = a.pos;
    KCASE_RELEASE(devs, host);
    return rc;
}

int kcase_check_rope(KcaseRun *run, Err *err)
{
    TRY(case_rope(run, 9, 64, 32, 8, 512, err)); /* stories260K: GQA, head 8 */
    if (!run->o->quick)
        TRY(case_rope(run, 64, 768, 768, 64, 1024, err)); /* stories110M */
    return 0;
}
