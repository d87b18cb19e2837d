/* Chapter 3 on the device (--device cuda): the K/V bytes of the arena live
 * in device memory, one token slot per bytes_per_token of the books, and
 * are placed and moved exactly where and when the books on the host say.
 * See "On the device" in batching.h. */
#include "batching.h"
#include "serving_device.h"

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
