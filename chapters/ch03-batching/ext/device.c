/* Chapter 3 extension: the arena on the device.
 * Adds: a device store of token slots kept in step with the books. Option:
 * --device cuda. Taught in: book/ch03-batching.md, "Extension: the arena on
 * the device".
 * The K/V bytes of the arena live in device memory, one token slot per
 * bytes_per_token of the books, and are placed and moved exactly where and
 * when the books on the host say. The store is a row store
 * (common/cuda/device_kv.h) in which each request owns a region of
 * consecutive rows. See batching_device.h. */
#include "batching_device.h"

#include <string.h>

#include "serving_device.h"

/* ------------------------------------------------------------ the arena store */

#ifdef KVLAB_CUDA

#include "cuda_check.h"

int device_kv_open_arena(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, long long arena_rows,
                         int max_seqs, int max_tokens, Err *err)
{
    if (max_seqs <= 0)
        return err_set(err, "K/V arena: needs at least one sequence");
    return device_row_store_open(kv, sizeof(DeviceRowStore), "arena", dev, cfg, t, cfg->n_layers, arena_rows, MEM_KV,
                                 max_tokens, max_seqs, err);
}

int device_kv_arena_place(DeviceKv *kv, int seq, long long first_row, long long rows, Err *err)
{
    DeviceRowStore *s = device_row_store_of(kv, "arena");
    if (!s)
        return err_set(err, "device_kv_arena_place: not an arena store");
    if (seq < 0 || seq >= s->max_seqs || first_row < 0 || rows < 0 || first_row + rows > s->cache.rows ||
        rows > s->cfg.seq_len)
        return err_set(err, "region [%lld, %lld) of sequence %d does not fit the arena of %lld rows", first_row,
                       first_row + rows, seq, s->cache.rows);
    s->region_first[seq] = first_row;
    s->region_rows[seq] = rows;
    return 0;
}

int device_kv_arena_copy_rows(DeviceKv *kv, long long src_row, long long dst_row, long long rows, Err *err)
{
    DeviceRowStore *s = device_row_store_of(kv, "arena");
    if (!s)
        return err_set(err, "device_kv_arena_copy_rows: not an arena store");
    long long n = s->cache.rows;
    if (rows < 0 || src_row < 0 || dst_row < 0 || src_row + rows > n || dst_row + rows > n ||
        (src_row < dst_row + rows && dst_row < src_row + rows))
        return err_set(err, "copying rows [%lld, %lld) to [%lld, ...) leaves the arena or overlaps", src_row,
                       src_row + rows, dst_row);
    if (rows == 0)
        return 0;
    size_t rb = device_kv_row_bytes(&s->cache), lb = device_kv_layer_bytes(&s->cache);
    void *bases[2] = {s->cache.k, s->cache.v};
    for (int i = 0; i < 2; i++)
        CUDA_CHECK(err, cudaMemcpy2DAsync((char *)bases[i] + (size_t)dst_row * rb, lb,
                                          (char *)bases[i] + (size_t)src_row * rb, lb, (size_t)rows * rb,
                                          (size_t)s->cache.layers, cudaMemcpyDeviceToDevice, s->dev->stream));
    return 0;
}

#else /* built without CUDA: device_open() fails first */

#define NO_CUDA "this build has no CUDA support"

int device_kv_open_arena(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, long long arena_rows,
                         int max_seqs, int max_tokens, Err *err)
{
    (void)dev, (void)cfg, (void)t, (void)arena_rows, (void)max_seqs, (void)max_tokens;
    memset(kv, 0, sizeof *kv);
    return err_set(err, NO_CUDA);
}

int device_kv_arena_place(DeviceKv *kv, int seq, long long first_row, long long rows, Err *err)
{
    (void)kv, (void)seq, (void)first_row, (void)rows;
    return err_set(err, NO_CUDA);
}

int device_kv_arena_copy_rows(DeviceKv *kv, long long src_row, long long dst_row, long long rows, Err *err)
{
    (void)kv, (void)src_row, (void)dst_row, (void)rows;
    return err_set(err, NO_CUDA);
}

#endif

/* ------------------------------------------------------------ kept in step with the books */


/* The books' byte offset as a token slot of the device arena. Every region
 * starts a whole number of tokens from the arena's start (regions are
 * whole tokens, holes are what regions left), so the division is exact;
 * anything else is a bookkeeping error, refused rather than rounded. */
static int slot_of(const BatchingState *b, size_t offset, long long *slot, Err *err)
{
    if (offset % b->bytes_per_token != 0)
        return err_set(err, "a region starts at byte %zu, not a whole number of %zu-byte tokens into the arena",
                       offset, b->bytes_per_token);
    *slot = (long long)(offset / b->bytes_per_token);
    return 0;
}

/* BatchingState.on_move: the same copy, queued on the device's stream now,
 * so that moves run in the order the books made them (a later move may
 * reuse the hole an earlier one left). */
static void repeat_move(void *ctx, const KvRegion *from, const KvRegion *to, int n_pos)
{
    ServingDeviceKv *d = ctx;
    const BatchingState *b = d->chapter;
    long long src = 0, dst = 0;
    if (d->fault.msg[0])
        return; /* the first failure is the one reported */
    if (slot_of(b, from->offset, &src, &d->fault) || slot_of(b, to->offset, &dst, &d->fault) ||
        device_kv_arena_copy_rows(d->kv, src, dst, n_pos, &d->fault))
        err_prefix(&d->fault, "moving %d positions of K/V on the device", n_pos);
}

int batching_device_sync(const BatchingState *b, ServingRun *run, Err *err)
{
    ServingDeviceKv *d = &run->device->kv;
    for (int i = 0; i < run->n_reqs; i++) {
        const KvRegion *reg = &b->regions[i];
        long long first = 0;
        if ((reg->tokens > 0 && slot_of(b, reg->offset, &first, err)) ||
            device_kv_arena_place(d->kv, i, first, reg->tokens, err))
            return err_prefix(err, "step %ld", run->step);
    }
    return 0;
}

int batching_device_open(BatchingState *b, ServingRun *run, Err *err)
{
    ServingDeviceKv *d = &run->device->kv;
    const DeviceRun *r = &run->device->run;
    size_t per_token = model_kv_bytes_per_token(&b->cfg, dtype_bytes(r->kv_type));
    if (b->bytes_per_token != per_token)
        return err_set(err, "--device cuda: the books count %zu B per token, but a token's %s K/V take %zu B",
                       b->bytes_per_token, dtype_name(r->kv_type), per_token);
    long long slots = (long long)(b->arena.capacity / b->bytes_per_token);
    if (device_kv_open_arena(d->kv, &r->dev, &b->cfg, r->kv_type, slots, run->n_reqs, run->max_step_tokens, err))
        return err_prefix(err, "--device cuda");
    d->chapter = b;
    b->on_move = repeat_move;
    b->on_move_ctx = d;
    return 0;
}
