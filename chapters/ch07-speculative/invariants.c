/* Chapter 7's invariants: what must hold after every step, however the
 * rollback (the lab's spec_rollback(), solutions/ch07/spec_rollback.c)
 * gave the rejected positions back. */
#include <string.h>

#include "scheduler.h"
#include "spec.h"

/* Tables holding each block, counted from the tables themselves. */
static int count_holders(const PagedServer *s, int *holders, Err *err)
{
    const BlockPool *p = &s->kv.pool;
    memset(holders, 0, (size_t)p->n_blocks * sizeof(int));
    for (int i = 0; i < s->kv.tables.count; i++) {
        const BlockTable *t = &s->kv.tables.tables[i];
        for (int b = 0; b < t->n_blocks; b++) {
            if (t->blocks[b] < 0 || t->blocks[b] >= p->n_blocks)
                return err_set(err, "table %d names block %d, outside the pool of %d", i, t->blocks[b], p->n_blocks);
            holders[t->blocks[b]]++;
        }
    }
    return 0;
}

/* Each running table holds ceil(accepted positions / block size) blocks;
 * the others hold none. */
static int check_tables(const PagedServer *s, const ServingRun *run, Err *err)
{
    const int bs = s->kv.pool.shape.block_size;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        int held = s->kv.tables.tables[i].n_blocks;
        int want = r->phase == REQ_RUNNING ? block_count_for_tokens(r->n_cached, bs) : 0;
        if (held != want)
            return err_set(err, "step %ld: request %d holds %d blocks for %d accepted positions (want %d)", run->step,
                           i, held, r->n_cached, want);
    }
    return 0;
}

int spec_check_invariants(const PagedServer *s, const ServingRun *run, int *holders, Err *err)
{
    const BlockPool *p = &s->kv.pool;
    if (check_tables(s, run, err))
        return -1;
    if (count_holders(s, holders, err))
        return -1;
    int held = 0;
    for (int b = 0; b < p->n_blocks; b++) {
        if (p->ref_count[b] < 0)
            return err_set(err, "step %ld: block %d has reference count %d", run->step, b, p->ref_count[b]);
        if (p->ref_count[b] != holders[b])
            return err_set(err, "step %ld: block %d has reference count %d but %d tables hold it", run->step, b,
                           p->ref_count[b], holders[b]);
        held += holders[b] > 0;
    }
    for (int i = 0; i < p->n_free; i++)
        if (p->ref_count[p->free_stack[i]] != 0)
            return err_set(err, "step %ld: block %d is on the free stack with %d holders", run->step,
                           p->free_stack[i], p->ref_count[p->free_stack[i]]);
    if (p->n_free + held != p->n_blocks)
        return err_set(err, "step %ld: %d free + %d held blocks, but the pool has %d", run->step, p->n_free, held,
                       p->n_blocks);
    return 0;
}
