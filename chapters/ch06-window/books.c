/* Chapter 6: what the lab's eviction functions (window_drop_position(),
 * window_slide(), window_evict_heavy()) build on: a block given back to
 * the pool, and a position's heavy-hitter score. Nothing here calls the
 * lab, so the chapter's files call each other in no cycle. See window.h. */
#include "window.h"

void window_return_block(WindowCache *w, ServingRun *run, int seq, int logical)
{
    PagedServer *s = w->server;
    BlockTable *t = &s->kv.tables.tables[seq];
    int bs = s->kv.pool.shape.block_size, block = t->blocks[logical];
    /* Its rows held tokens that were used and are done: the breakdown
     * counts them as token states, as for a request that finished. */
    kv_track_close(&s->block_track[block], (size_t)bs * paged_bytes_per_token(s), &run->breakdown);
    s->block_filled[block] = 0;
    block_pool_release(&s->kv.pool, block);
    t->blocks[logical] = BLOCK_HOLE;
    w->blocks_returned++;
}

double window_heavy_score(const WindowCache *w, int seq, int pos)
{
    double sum = 0.0;
    for (int h = 0; h < w->n_heads; h++)
        sum += w->attn[((size_t)seq * w->n_heads + h) * w->seq_len + pos];
    return sum;
}
