/* Chapter 4's books: each block's history from the moment a table takes
 * it until it is free again, and after each step where the KV memory is
 * (paged_account()): blocks held, rows filled, slack and sharing. */
#include "scheduler.h"

/* ------------------------------------------------------------ each block's history */

/* Setting the same size again is a no-op, so calling this for blocks that
 * were already held (shared) changes nothing. */
void paged_track_table(PagedServer *s, const BlockTable *t)
{
    for (int i = 0; i < t->n_blocks; i++)
        if (t->blocks[i] != BLOCK_HOLE)
            kv_track_set_reserved(&s->block_track[t->blocks[i]], s->kv.pool.bytes_per_block);
}

void paged_block_freed(PagedServer *s, KvBreakdown *breakdown, int block, int preempted)
{
    size_t final = preempted ? s->kv.pool.bytes_per_block
                             : (size_t)s->block_filled[block] * paged_bytes_per_token(s);
    kv_track_close(&s->block_track[block], final, breakdown);
    s->block_filled[block] = 0;
}

/* ------------------------------------------------------------ after a step */

/* Rows filled in each held block, the largest over the tables holding it
 * (shared blocks hold the same rows for every holder). Only running
 * requests hold blocks (those that finished in this step are still on the
 * list: they let go in paged_finished(), after this). */
static int fill_block_rows(PagedServer *s, const ServingRun *run)
{
    const BlockPool *p = &s->kv.pool;
    const int bs = p->shape.block_size;
    int logical = 0;
    for (int b = 0; b < p->n_blocks; b++)
        s->block_filled[b] = 0;
    for (int k = 0; k < s->n_running; k++) {
        int i = s->running[k];
        const BlockTable *t = &s->kv.tables.tables[i];
        int cached = run->reqs[i].n_cached;
        for (int j = 0; j < t->n_blocks; j++) {
            int rows = cached - j * bs;
            rows = rows < 0 ? 0 : rows > bs ? bs : rows;
            if (t->blocks[j] == BLOCK_HOLE) /* a block a later chapter gave back: nothing held */
                continue;
            if (rows > s->block_filled[t->blocks[j]])
                s->block_filled[t->blocks[j]] = rows;
            logical++;
        }
    }
    return logical;
}

void paged_account(PagedServer *s, ServingRun *run)
{
    const BlockPool *p = &s->kv.pool;
    int logical = fill_block_rows(s, run);
    size_t used_rows = 0;
    for (int b = 0; b < p->n_blocks; b++) {
        if (p->ref_count[b] == 0)
            continue;
        used_rows += (size_t)s->block_filled[b];
        kv_track_step(&s->block_track[b], (size_t)s->block_filled[b] * paged_bytes_per_token(s));
    }
    int physical = block_pool_used(p);
    kv_timeline_record(&run->timeline, run->step, (size_t)physical * p->bytes_per_block,
                       used_rows * paged_bytes_per_token(s));
    if (physical > s->blocks_peak_used) {
        s->blocks_peak_used = physical;
        s->blocks_peak_step = run->step;
        if (s->sharing) { /* what the same sequences would hold unshared, then */
            s->sharing->saved_at_peak = logical - physical;
            s->sharing->logical_at_peak = logical;
        }
    }
    if (s->sharing)
        s->sharing->logical_sum += logical;
    int saved = logical - physical;
    if (saved > s->blocks_saved_peak)
        s->blocks_saved_peak = saved;
    s->blocks_saved_sum += saved;
    size_t slack = (size_t)physical * (size_t)p->shape.block_size - used_rows;
    if (slack > s->slack_tokens_peak)
        s->slack_tokens_peak = slack;
    s->steps_accounted++;
}
