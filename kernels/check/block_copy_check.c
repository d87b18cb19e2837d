/* Kernel check: copy-on-write of whole blocks (kernels/block_copy.cu)
 * against block_pool_copy() of chapter 4 (block_pool.h), on a chapter 4
 * pool of n_blocks blocks (layers x 2 x block_size x kv_dim each) holding
 * the same (rounded) values on the CPU and the device: the pairs must
 * behave as if copied one after the other, as block_pool_copy() copies
 * them.
 *
 * Tolerance: 0 (bitwise), over the whole pool: a copy moves bytes, and
 * must move no others. */
#include "kcase.h"

#include <stdio.h>
#include <string.h>

#include "block_pool.h"
#include "mem.h"

#define TOL_EXACT 0.0

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
    kcase_shuffle(ids, n_blocks, rng);
    for (int p = 0; p < n_pairs; p++) {
        pairs[2 * p] = ids[p];
        pairs[2 * p + 1] = chained ? ids[(p + 1) % n_pairs] : ids[n_pairs + p];
    }
    mem_free(ids);
    return 0;
}

static int case_block_copy(KcaseRun *run, int layers, int n_blocks, int block_size, int kv_dim, int n_pairs, Dtype t,
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
    kcase_fill(pool.storage, cells, -1.0f, 1.0f, &rng);
    dtype_round(pool.storage, cells, t);
    dtype_from_f32(start, pool.storage, cells, t);
    if (copy_pairs(pairs, n_blocks, n_pairs, chained, &rng, err))
        goto done;
    for (int p = 0; p < n_pairs; p++)
        block_pool_copy(&pool, pairs[2 * p + 1], pairs[2 * p]);
    dtype_from_f32(want, pool.storage, cells, t);
    if (kcase_device_copy(&a.pool, NULL, bytes, run->dev, err) ||
        kcase_device_copy((void **)&a.pairs, pairs, 2 * (size_t)n_pairs * sizeof(int), run->dev, err))
        goto done;
    for (int ver = 1; ver <= kvk_block_copy_n_versions; ver++) {
        KcaseResult r = kcase_result("block_copy", kvk_block_copy_versions, ver, dtype_name(t), TOL_EXACT,
                                     2.0 * n_pairs * (double)a.block_bytes);
        snprintf(r.shape, sizeof r.shape, "%d blocks of [%d][2][%d][%d] (%lld B)%s", n_pairs, layers, block_size,
                 kv_dim, a.block_bytes, chained ? ", chained" : "");
        if (kcase_upload(a.pool, start, bytes, run->dev, err) || copy_launch(&a, ver, err) ||
            kcase_download(got, a.pool, bytes, run->dev, err))
            goto done;
        r.max_error = kcase_byte_error(got, want, bytes);
        r.outputs = (long long)bytes;
        if (kcase_finish(run, &r, copy_launch, &a, err))
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

int kcase_check_block_copy(KcaseRun *run, Err *err)
{
    for (int t = 0; t < DTYPE_COUNT; t++) {
        TRY(case_block_copy(run, 5, 40, 16, 32, 7, (Dtype)t, 0, err)); /* stories260K, blocks of 16: f32 1.25 chunks */
        TRY(case_block_copy(run, 1, 12, 1, 6, 3, DTYPE_F16, 0, err));  /* 24-byte blocks: the byte loop */
        TRY(case_block_copy(run, 3, 20, 4, 16, 5, (Dtype)t, 1, err));  /* a cycle of 5: one wave per pair */
        if (!run->o->quick)
            TRY(case_block_copy(run, 12, 512, 16, 768, 128, (Dtype)t, 0, err)); /* stories110M, 8,192 slots */
    }
    return 0;
}
