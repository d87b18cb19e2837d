/* Chapter 4's scheduler: continuous batching over the block pool.
 *
 * Each step (paged_schedule()): room for every running request's next
 * token, oldest first, preempting the newest when the pool is empty; then
 * first-come, first-served admission of waiting requests while their
 * blocks fit with the watermark to spare (the lab's paged_can_admit()) and
 * their prompts fit the step. The samples of one prompt (--n) are admitted
 * together and share its blocks. A preempted request's blocks are freed,
 * and it is recomputed when it is admitted again. Finished requests give
 * their blocks back the moment they finish. scheduler.h says which pieces
 * are public, and who else schedules with them. */
#include <string.h>

#include "scheduler.h"

/* ------------------------------------------------------------ blocks in and out */

/* Why a table lets go of its blocks decides how the unfilled rows of a
 * block that becomes free are counted (see kv_track_close()). */
typedef struct {
    PagedServer *s;
    KvBreakdown *breakdown;
    int preempted; /* 1: the rows were for tokens still to come */
} ReleaseBooks;

static void close_freed_block(void *ctx, int block)
{
    ReleaseBooks *rb = ctx;
    paged_block_freed(rb->s, rb->breakdown, block, rb->preempted);
    if (rb->s->hooks.block_freed) /* an extension's books of the block (ext/swap.c) */
        rb->s->hooks.block_freed(rb->s, block);
}

static void release_blocks(PagedServer *s, ServingRun *run, Request *r, int preempted)
{
    ReleaseBooks rb = {s, &run->breakdown, preempted};
    BlockTable *t = &s->kv.tables.tables[r->index];
    if (s->cache) /* a cache above the pool keeps what it may hand out again (ext/paged_cache.h) */
        s->cache->release(s->cache->ctx, r, t, close_freed_block, &rb);
    else
        block_table_release(&s->kv.pool, t, close_freed_block, &rb);
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

void paged_preempt(PagedServer *s, ServingRun *run, Request *victim)
{
    release_blocks(s, run, victim, 1);
    remove_running(s, victim->index);
    serving_preempt(run, victim);
    s->preemptions++;
    if (victim->index < s->first_waiting)
        s->first_waiting = victim->index;
}

void paged_finished(PagedServer *s, ServingRun *run, Request *r)
{
    release_blocks(s, run, r, 0);
    remove_running(s, r->index);
}

void paged_release_table(PagedServer *s, ServingRun *run, Request *r)
{
    release_blocks(s, run, r, 0);
}

/* ------------------------------------------------------------ room for positions */

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

/* The slot of r's newest token (position n_tokens - 1): a new block when
 * the token starts one, a copy when its block is shared. */
int paged_make_room(PagedServer *s, Request *r)
{
    BlockPool *p = &s->kv.pool;
    BlockTable *t = &s->kv.tables.tables[r->index];
    int pos = r->n_tokens - 1, copied = 0;
    if (make_free(s, block_table_blocks_to_write(p, t, pos)))
        return -1;
    if (block_table_grow(p, t, pos + 1) || block_table_make_writable(p, t, pos, &copied))
        return -1;
    s->cow_copies += copied;
    paged_track_table(s, t);
    return 0;
}

int paged_blocks_to_write(const BlockPool *p, const BlockTable *t, int start, int end)
{
    int grow = block_count_for_tokens(end, p->shape.block_size) - t->n_blocks;
    /* The blocks after the one holding start are new, so private. */
    int cow = start < t->n_blocks * p->shape.block_size && block_table_blocks_to_write(p, t, start);
    return (grow > 0 ? grow : 0) + cow;
}

int paged_make_room_upto(PagedServer *s, Request *r, int end)
{
    BlockPool *p = &s->kv.pool;
    BlockTable *t = &s->kv.tables.tables[r->index];
    int start = r->n_cached, copied = 0, had = t->n_blocks * p->shape.block_size;
    if (make_free(s, paged_blocks_to_write(p, t, start, end)))
        return -1;
    if (block_table_grow(p, t, end))
        return -1;
    if (start < had && block_table_make_writable(p, t, start, &copied))
        return -1;
    s->cow_copies += copied;
    paged_track_table(s, t);
    return 0;
}

/* ------------------------------------------------------------ decodes */

int paged_schedule_decodes(PagedServer *s, ServingRun *run, int *preempted, Err *err)
{
    for (int i = 0; i < s->n_running; i++) {
        Request *r = &run->reqs[s->running[i]];
        if (r->n_tokens - r->n_cached != 1)
            continue; /* fed already in this step */
        int evicted_self = 0;
        while (!evicted_self && paged_make_room(s, r) != 0) {
            Request *victim = &run->reqs[s->running[s->n_running - 1]]; /* the newest */
            paged_preempt(s, run, victim);
            evicted_self = victim == r;
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

int paged_fork_group_size(const ServingRun *run, int i)
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

void paged_start_running(PagedServer *s, ServingRun *run, Request *r)
{
    serving_admit(run, r);
    s->running[s->n_running++] = r->index;
}

void paged_fork(PagedServer *s, ServingRun *run, const Request *parent, Request *child)
{
    block_table_fork(&s->kv.pool, &s->kv.tables.tables[parent->index], &s->kv.tables.tables[child->index]);
    serving_note_fork(run, parent, child);
    child->n_cached = child->n_tokens;
}

int paged_first_waiting(PagedServer *s, const ServingRun *run)
{
    while (s->first_waiting < run->n_reqs &&
           (run->reqs[s->first_waiting].phase == REQ_RUNNING || run->reqs[s->first_waiting].phase == REQ_DONE))
        s->first_waiting++;
    return s->first_waiting;
}

int paged_next_waiting(const ServingRun *run, int i)
{
    for (; i < run->n_reqs && run->reqs[i].phase != REQ_PENDING; i++)
        if (run->reqs[i].phase == REQ_WAITING)
            return i;
    return -1; /* the end, or the first that has not arrived: every later one arrives later still */
}

PagedCachedPrefix paged_cached_prefix(const PagedServer *s, const Request *r)
{
    PagedCachedPrefix none = {0, 0, NULL};
    return s->cache ? s->cache->lookup(s->cache->ctx, r) : none;
}

int paged_blocks_to_admit(const PagedServer *s, int end, const PagedCachedPrefix *hit)
{
    return block_count_for_tokens(end, s->kv.pool.shape.block_size) - hit->n_blocks + hit->n_free;
}

int paged_admission_fits(const PagedServer *s, const ServingRun *run, int start, int end, int blocks)
{
    return end > start && paged_can_admit(block_pool_available(&s->kv.pool), blocks, s->watermark_blocks) &&
           run->n_entries + (end - start) <= s->max_batched_tokens && run->n_logits < run->max_logits;
}

int paged_admit_first(PagedServer *s, ServingRun *run, Request *r, int end, const PagedCachedPrefix *hit)
{
    if (s->cache) { /* the blocks a cache above the pool holds for r come first */
        s->cache->admitted(s->cache->ctx, r, &s->kv.tables.tables[r->index], hit);
        r->n_cached = hit->n_blocks * s->kv.pool.shape.block_size;
    }
    if (paged_make_room_upto(s, r, end)) {
        if (s->cache) { /* the cached blocks go back too: r waits with an empty table */
            release_blocks(s, run, r, 1);
            r->n_cached = 0;
        }
        return 1;
    }
    paged_start_running(s, run, r);
    return 0;
}

/* Admits request i and the samples forked from it, with its whole prompt:
 * each sibling's table points at i's blocks (one more holder each) and it
 * samples from i's logits row. */
static int admit_group(PagedServer *s, ServingRun *run, int i, int group, const PagedCachedPrefix *hit, Err *err)
{
    Request *r = &run->reqs[i];
    if (paged_admit_first(s, run, r, r->n_tokens, hit))
        return 1; /* not admitted (only an unfinished lab allocator gets here) */
    for (int k = 1; k < group; k++) {
        paged_start_running(s, run, &run->reqs[i + k]);
        paged_fork(s, run, r, &run->reqs[i + k]);
    }
    if (serving_feed(run, r, err))
        return -1;
    for (int k = 1; k < group; k++)
        if (serving_share_logits(run, r, &run->reqs[i + k], err))
            return -1;
    return 0;
}

/* The queue is the requests in arrival order (file order), so a preempted
 * request, which arrived earlier, comes back before any newer one. The
 * first request that does not fit stops the admission (no overtaking, so
 * nobody starves), and so does the first that has not arrived yet. */
int paged_admit_waiting(PagedServer *s, ServingRun *run, Err *err)
{
    const int bs = s->kv.pool.shape.block_size;
    int i = paged_first_waiting(s, run);
    while ((i = paged_next_waiting(run, i)) >= 0) {
        Request *r = &run->reqs[i];
        int group = paged_fork_group_size(run, i);
        PagedCachedPrefix hit = paged_cached_prefix(s, r);
        int start = hit.n_blocks ? hit.n_blocks * bs : r->n_cached;
        if (!paged_admission_fits(s, run, start, r->n_tokens, paged_blocks_to_admit(s, r->n_tokens, &hit)))
            break;
        int rc = admit_group(s, run, i, group, &hit, err);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
        i += group;
    }
    return 0;
}

int paged_schedule(PagedServer *s, ServingRun *run, Err *err)
{
    int preempted = 0;
    if (paged_schedule_decodes(s, run, &preempted, err))
        return -1;
    /* A step that had to preempt is short of blocks: admitting now would
     * only preempt again (vLLM's v1 scheduler does the same). */
    return preempted ? 0 : paged_admit_waiting(s, run, err);
}
