/* Kernel check: the K/V write (kernels/kv_write.cu) against
 * kv_write_reference() (kernels/check/kv_ref.c: the CPU chapters write
 * K/V inline, so the reference is written out there), n tokens into
 * distinct random rows of a cache, every seventh with slot -1, which must
 * leave the cache untouched.
 *
 * Tolerance: 0 (bitwise), over the whole cache, not only the rows
 * written: the kernel converts like dtype_from_f32() and must touch
 * nothing else. */
#include "kcase.h"

#include <stdio.h>
#include <string.h>

#include "kv_ref.h"
#include "mem.h"

#define TOL_EXACT 0.0

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

/* The slot of each token: distinct random rows, every seventh -1. */
static int write_slots(long long *slots, int n, int rows, unsigned long long *rng)
{
    int *ids = mem_alloc_array(MEM_ACTIVATIONS, (size_t)rows, sizeof(int));
    if (!ids)
        return -1;
    kcase_shuffle(ids, rows, rng);
    for (int i = 0; i < n; i++)
        slots[i] = i % 7 == 6 ? -1 : ids[i];
    mem_free(ids);
    return 0;
}

/* Compares both caches with the reference's, bytewise. */
static int compare_caches(const WriteArgs *a, void *got, const void *want_k, const void *want_v, size_t bytes,
                          double *error, Err *err)
{
    TRY(kcase_download(got, a->k_cache, bytes, a->dev, err));
    double ek = kcase_byte_error(got, want_k, bytes);
    TRY(kcase_download(got, a->v_cache, bytes, a->dev, err));
    double ev = kcase_byte_error(got, want_v, bytes);
    *error = ek > ev ? ek : ev;
    return 0;
}

static int case_kv_write(KcaseRun *run, int n, int kv_dim, int rows, Dtype t, Err *err)
{
    unsigned long long rng = 18;
    size_t cells = (size_t)rows * kv_dim, eb = dtype_bytes(t), nkv = (size_t)n * kv_dim;
    float *init = kcase_host_floats(cells), *k = kcase_host_floats(nkv), *v = kcase_host_floats(nkv);
    void *cache0 = mem_alloc_array(MEM_ACTIVATIONS, cells, eb), *want_k = mem_alloc_array(MEM_ACTIVATIONS, cells, eb);
    void *want_v = mem_alloc_array(MEM_ACTIVATIONS, cells, eb), *got = mem_alloc_array(MEM_ACTIVATIONS, cells, eb);
    long long *slots = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(long long));
    void *host[] = {init, k, v, cache0, want_k, want_v, got, slots};
    WriteArgs a = {.dev = run->dev, .t = t, .n = n, .kv_dim = kv_dim};
    void *devs[5] = {0};
    int rc = -1;
    if (!init || !k || !v || !cache0 || !want_k || !want_v || !got || !slots || n > rows ||
        write_slots(slots, n, rows, &rng)) {
        err_set(err, n > rows ? "kv_write case: more tokens than rows" : "out of memory");
        goto done;
    }
    kcase_fill(init, cells, -1.0f, 1.0f, &rng);
    kcase_fill(k, nkv, -1.0f, 1.0f, &rng);
    kcase_fill(v, nkv, -1.0f, 1.0f, &rng);
    dtype_from_f32(cache0, init, cells, t);
    memcpy(want_k, cache0, cells * eb);
    memcpy(want_v, cache0, cells * eb);
    kv_write_reference(want_k, want_v, t, k, v, slots, n, kv_dim);
    if (kcase_device_copy(&a.k_cache, NULL, cells * eb, run->dev, err) ||
        kcase_device_copy(&a.v_cache, NULL, cells * eb, run->dev, err) ||
        kcase_device_copy((void **)&a.k, k, nkv * 4, run->dev, err) ||
        kcase_device_copy((void **)&a.v, v, nkv * 4, run->dev, err) ||
        kcase_device_copy((void **)&a.slots, slots, (size_t)n * sizeof(long long), run->dev, err))
        goto done;
    for (int ver = 1; ver <= kvk_kv_write_n_versions; ver++) {
        KcaseResult r = kcase_result("kv_write", kvk_kv_write_versions, ver, dtype_name(t), TOL_EXACT,
                                     (double)nkv * 2 * (4.0 + (double)eb));
        snprintf(r.shape, sizeof r.shape, "%d tokens x %d into %d rows", n, kv_dim, rows);
        r.supported = ver == 1 || kv_dim % 4 == 0;
        if (r.supported) {
            if (kcase_upload(a.k_cache, cache0, cells * eb, run->dev, err) ||
                kcase_upload(a.v_cache, cache0, cells * eb, run->dev, err) || write_launch(&a, ver, err) ||
                compare_caches(&a, got, want_k, want_v, cells * eb, &r.max_error, err))
                goto done;
            r.outputs = 2LL * (long long)cells;
        }
        if (kcase_finish(run, &r, write_launch, &a, err))
            goto done;
    }
    rc = 0;
done:
    devs[0] = a.k_cache, devs[1] = a.v_cache, devs[2] = a.k, devs[3] = a.v, devs[4] = a.slots;
    KCASE_RELEASE(devs, host);
    return rc;
}

int kcase_check_kv_write(KcaseRun *run, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        TRY(case_kv_write(run, 9, 32, 64, (Dtype)t, err));
        TRY(case_kv_write(run, 5, 6, 16, (Dtype)t, err)); /* kv_dim not a multiple of 4: v1 only */
        if (!run->o->quick)
            TRY(case_kv_write(run, 64, 768, 4096, (Dtype)t, err));
    }
    return 0;
}
