/* Chapter 4 on the device (--device cuda): the K/V bytes of the block pool
 * live in device memory, block for block; the pool, the block tables, the
 * reference counts and every scheduling decision stay on the host. See
 * "On the device" in paged.h. */
#include "paged.h"
#include "serving_device.h"

/* BlockPool.on_copy: the same copy-on-write, queued on the device's stream
 * as the scheduler makes it. Copies run in the order they were decided: a
 * block a copy reads may be freed and handed out again later in the same
 * schedule(), and the device must read it before anything overwrites it. */
static void repeat_copy(void *ctx, int dst, int src)
{
    ServingDeviceKv *d = ctx;
    if (d->fault.msg[0])
        return; /* the first failure is the one reported */
    int pair[2] = {src, dst}; /* (source, destination), device_kv_paged_copy_blocks() */
    if (device_kv_paged_copy_blocks(d->kv, pair, 1, &d->fault))
        err_prefix(&d->fault, "copying block %d to block %d on the device", src, dst);
}

int paged_device_sync(const PagedServer *s, ServingRun *run, Err *err)
{
    ServingDeviceKv *d = &run->device->kv;
    for (int k = 0; k < s->n_running; k++) {
        int i = s->running[k];
        const BlockTable *t = &s->kv.tables.tables[i];
        if (device_kv_paged_set_table(d->kv, i, t->blocks, t->n_blocks, err))
            return err_prefix(err, "step %ld", run->step);
    }
    return 0;
}

int paged_device_open(PagedServer *s, ServingRun *run, Err *err)
{
    ServingDeviceKv *d = &run->device->kv;
    const DeviceRun *r = &run->device->run;
    BlockPool *p = &s->kv.pool;
    if (p->shape.elem_bytes != dtype_bytes(r->kv_type))
        return err_set(err, "--device cuda: the pool counts %zu-byte K/V elements, but %s takes %zu",
                       p->shape.elem_bytes, dtype_name(r->kv_type), dtype_bytes(r->kv_type));
    if (device_kv_open_paged(d->kv, &r->dev, &s->kv.cfg, r->kv_type, p->n_blocks, p->shape.block_size, run->n_reqs,
                             run->max_step_tokens, err))
        return err_prefix(err, "--device cuda");
    d->chapter = s;
    p->on_copy = repeat_copy;
    p->on_copy_ctx = d;
    return 0;
}
