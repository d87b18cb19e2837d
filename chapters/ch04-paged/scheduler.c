/* Chapter 4's scheduler: continuous batching over the block pool.
 *
 * Each step: room for every running request's next token (oldest first,
 * preempting the newest when the pool is empty), then first-come,
 * first-served admission while blocks and the step's token budget allow
 * (the rule is the lab's paged_can_admit()). Finished requests give their
 * blocks back the moment they finish. */
#include <string.h>

#include "paged.h"

/* ------------------------------------------------------------ blocks in and out */

/* Every block a table holds has a history from the moment it is taken;
 * setting the same size again is a no-op, so calling this for blocks that
 * were already held (shared) changes nothing. */
static void track_table(PagedServer *s, const BlockTable *t)
{
    for (int i = 0; i < t->n_blocks; i++)
        kv_track_set_reserved(&s->block_track[t->blocks[i]], s->kv.pool.bytes_per_block);
}


/* Why a table lets go of its blocks decides how the unfilled rows of a
 * block that becomes free are counted (see kv_track_close()). */
typedef struct {
    PagedServer *s;
    KvBreakdown *breakdown;
    int preempted; /* 1: the rows were for tokens still to come */
} ReleaseBooks;

static void close_block_track(void *ctx, int block)
{
    ReleaseBooks *rb = ctx;
    PagedServer *s = rb->s;
    size_t final = rb->preempted ? s->kv.pool.bytes_per_block : (size_t)s->block_filled[block] * s->bytes_per_token;
    kv_track_close(&s->block_track[block], final, rb->breakdown);
    s->block_filled[block] = 0;
}

static void release_blocks(PagedServer *s, ServingRun *run, Request *r, int preempted)
{
    ReleaseBooks rb = {s, &run->breakdown, preempted};
    BlockTable *t = &s->kv.tables.tables[r->index];
    if (s->cache) /* a cache above the pool keeps what it may hand out again (paged.h) */
        s->cache->release(s->cache->ctx, r, t, close_block_track, &rb);
    else
        block_table_release(&s->kv.pool, t, close_block_track, &rb);
}

static void remove_running(PagedServer *s, int index)
{
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == index) {
            memmove(s->running + i, s->running + i + 1, (size_t)(s->n_running - i - 1) * sizeof(int));
            s->n_running--;
            return;
        }
}

/* The most recently admitted request goes back to the queue: its blocks are
 * freed now, and its prompt and generated tokens are recomputed when it is
 * admitted again. */
static Request *preempt_newest(PagedServer *s, ServingRun *run)
{
    Request *victim = &run->reqs[s->running[s->n_running - 1]];
    release_blocks(s, run, victim, 1);
    s->n_running--;
    serving_preempt(run, victim);
    s->preemptions++;
    if (victim->index < s->first_waiting)
        s->first_waiting = victim->index;
    return victim;
}

/* At least n blocks on the free stack, asking a cache above the pool for
 * the free blocks it keeps when there are too few. */
static int make_free(PagedServer *s, int n)
{
    BlockPool *p = &s->kv.pool;
    while (p->n_free < n && s->cache && s->cache->reclaim(s->cache->ctx) == 0) {
        /* one parked block is back on the stack */
    }
    return p->n_free >= n ? 0 : -1;
}

/* ------------------------------------------------------------ decodes */

/* Makes the slot of r's newest token (position n_tokens - 1) exist and be
 * private: a new block when the token starts one, a copy when its block is
 * shared. All or nothing: -1 when the pool has too few free blocks. */
static int make_room_for_token(PagedServer *s, Request *r)
{
    BlockPool *p = &s->kv.pool;
    BlockTable *t = &s->kv.tables.tables[r->index];
    int pos = r->n_tokens - 1, copied = 0;
    if (make_free(s, block_table_blocks_to_write(p, t, pos)))
        return -1;
    if (block_table_grow(p, t, pos + 1) || block_table_make_writable(p, t, pos, &copied))
        return -1;
    s->cow_copies += copied;
    track_table(s, t);
    return 0;
}

/* Every running request feeds its newest token, oldest admission first.
 * When the pool runs dry, the newest running request is preempted, again
 * and again, until there is room or the request itself was the newest.
 * The oldest request always gets its room (it fits the pool alone, or it
 * would have been rejected), so every step makes progress. */
static int schedule_decodes(PagedServer *s, ServingRun *run, int *preempted, Err *err)
{
    for (int i = 0; i < s->n_running; i++) {
        Request *r = &run->reqs[s->running[i]];
        int evicted_self = 0;
        while (!evicted_self && make_room_for_token(s, r) != 0) {
            evicted_self = preempt_newest(s, run) == r;
            *preempted = 1;
        }
        if (evicted_self)
            break;
        if (serving_feed(run, r, err))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ admission */

/* Samples of one prompt that have not produced a token yet run as a group:
 * the prompt once, its blocks shared. Returns the group's size from
 * request i (1 without --n, or when i has already generated tokens). */
static int fork_group_size(const ServingRun *run, int i)
{
    const Request *first = &run->reqs[i];
    if (first->n_tokens != first->n_prompt)
        return 1;
    int n = 1;
    while (i + n < run->n_reqs) {
        const Request *r = &run->reqs[i + n];
        if (r->spec != first->spec || r->phase != REQ_WAITING || r->n_tokens != r->n_prompt)
            break;
        n++;
    }
    return n;
}

static void start_running(PagedServer *s, ServingRun *run, Request *r)
{
    serving_admit(run, r);
    s->running[s->n_running++] = r->index;
}

/* Admits request i and the samples forked from it: i's blocks are taken
 * and its tokens fed; each sibling's table points at the same blocks (one
 * more holder each) and it samples from i's logits row. Their K/V are
 * i's, in the shared blocks, once this step's forward pass has run. */
static int admit_group(PagedServer *s, ServingRun *run, int i, int group, const PagedCachedPrefix *hit, Err *err)
{
    Request *r = &run->reqs[i];
    BlockTable *t = &s->kv.tables.tables[i];
    if (s->cache) { /* the blocks a cache above the pool holds for r come first */
        s->cache->admitted(s->cache->ctx, r, t, hit);
        r->n_cached = hit->n_blocks * s->kv.pool.shape.block_size;
    }
    int fresh = block_count_for_tokens(r->n_tokens, s->kv.pool.shape.block_size) - t->n_blocks;
    if (make_free(s, fresh) || block_table_grow(&s->kv.pool, t, r->n_tokens)) {
        if (s->cache) { /* the cached blocks go back too: r waits with an empty table */
            release_blocks(s, run, r, 1);
            r->n_cached = 0;
        }
        return 1; /* not admitted (only an unfinished lab allocator gets here) */
    }
    track_table(s, t);
    start_running(s, run, r);
    if (serving_feed(run, r, err))
        return -1;
    for (int k = 1; k < group; k++) {
        Request *sibling = &run->reqs[i + k];
        block_table_fork(&s->kv.pool, t, &s->kv.tables.tables[i + k]);
        start_running(s, run, sibling);
        sibling->n_cached = sibling->n_tokens;
        if (serving_share_logits(run, r, sibling, err))
            return -1;
    }
    return 0;
}

/* The leading blocks of r that a cache above the pool holds already
 * (none without one). */
static PagedCachedPrefix cached_prefix(const PagedServer *s, const Request *r)
{
    PagedCachedPrefix none = {0, 0, NULL};
    return s->cache ? s->cache->lookup(s->cache->ctx, r) : none;
}

/* First come, first served: the queue is the requests in arrival order
 * (file order), so a preempted request, which arrived earlier, comes back
 * before any newer one. The first request that does not fit stops the
 * admission (no overtaking, so nobody starves), and so does the first that
 * has not arrived yet (every later one arrives later still). */
static int admit_waiting(PagedServer *s, ServingRun *run, Err *err)
{
    const int bs = s->kv.pool.shape.block_size;
    while (s->first_waiting < run->n_reqs &&
           (run->reqs[s->first_waiting].phase == REQ_RUNNING || run->reqs[s->first_waiting].phase == REQ_DONE))
        s->first_waiting++;
    for (int i = s->first_waiting; i < run->n_reqs; i++) {
        Request *r = &run->reqs[i];
        if (r->phase == REQ_PENDING)
            break;
        if (r->phase != REQ_WAITING)
            continue;
        int group = fork_group_size(run, i);
        PagedCachedPrefix hit = cached_prefix(s, r);
        /* Every position that is not cached is (re)computed, into new
         * blocks; cached blocks that nobody holds leave the free ones too. */
        int needed = block_count_for_tokens(r->n_tokens, bs) - hit.n_blocks + hit.n_free;
        int to_feed = r->n_tokens - hit.n_blocks * bs;
        if (!paged_can_admit(block_pool_available(&s->kv.pool), needed, s->watermark_blocks) ||
            run->n_entries + to_feed > s->max_batched_tokens || run->n_logits >= run->max_logits)
            break;
        int rc = admit_group(s, run, i, group, &hit, err);
        if (rc < 0)
            return -1;
        if (rc > 0)
            break;
        i += group - 1;
    }
    return 0;
}

int paged_schedule(PagedServer *s, ServingRun *run, Err *err)
{
    int preempted = 0;
    if (schedule_decodes(s, run, &preempted, err))
        return -1;
    /* A step that had to preempt is short of blocks: admitting now would
     * only preempt again (vLLM's v1 scheduler does the same). */
    if (!preempted && admit_waiting(s, run, err))
        return -1;
    return 0;
}

void paged_finished(PagedServer *s, ServingRun *run, Request *r)
{
    release_blocks(s, run, r, 0);
    remove_running(s, r->index);
}
