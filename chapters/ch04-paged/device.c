/* Chapter 4 on the device (--device cuda): the K/V bytes of the block pool
 * live in device memory, block for block; the pool, the block tables, the
 * reference counts and every scheduling decision stay on the host. See
 * "On the device" in paged.h. */
#include "paged.h"

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

/* ServingDeviceKv.sync: the block table of every running request, as the
 * host has it after schedule(). Only running requests are fed, and each
 * one's table covers every position fed. */
static int upload_tables(ServingDeviceKv *d, ServingRun *run, Err *err)
{
    const PagedServer *s = d->chapter;
    (void)run;
    for (int k = 0; k < s->n_running; k++) {
        int i = s->running[k];
        const BlockTable *t = &s->kv.tables.tables[i];
        if (device_kv_paged_set_table(d->kv, i, t->blocks, t->n_blocks, err))
            return -1;
    }
    return 0;
}

int paged_device_open(void *ctx, ServingRun *run, const Device *dev, Dtype kv_type, int max_step_tokens,
                      ServingDeviceKv *d, Err *err)
{
    PagedServer *s = ctx;
    BlockPool *p = &s->kv.pool;
    if (p->shape.elem_bytes != dtype_bytes(kv_type))
        return err_set(err, "the pool counts %zu-byte K/V elements, but %s takes %zu", p->shape.elem_bytes,
                       dtype_name(kv_type), dtype_bytes(kv_type));
    if (device_kv_open_paged(d->kv, dev, &s->kv.cfg, kv_type, p->n_blocks, p->shape.block_size, run->n_reqs,
                             max_step_tokens, err))
        return -1;
    p->on_copy = repeat_copy;
    p->on_copy_ctx = d;
    d->sync = upload_tables;
    return 0;
}
