/* Chapter 4's scheduler: continuous batching over the block pool.
 *
 * Each step: room for every running request's next token (oldest first,
 * preempting the newest when the pool is empty), then, with a token budget
 * (--max-num-batched-tokens), the next chunk of a prompt that is still
 * being prefilled, then first-come, first-served admission while blocks,
 * the step's token budget and --max-num-seqs allow (the rule is the lab's
 * paged_can_admit()). Decodes always go first, so a long prompt never
 * holds running requests back by more than the budget. A preempted
 * request's blocks are freed and recomputed later, or with --preempt swap
 * copied to the host and back. Finished requests give their blocks back
 * the moment they finish. */
#include <string.h>

#include "ext/beam.h"
#include "paged.h"
#include "trace.h"

/* ------------------------------------------------------------ blocks in and out */

/* Every block a table holds has a history from the moment it is taken;
 * setting the same size again is a no-op, so calling this for blocks that
 * were already held (shared) changes nothing. */
static void track_table(PagedServer *s, const BlockTable *t)
{
    for (int i = 0; i < t->n_blocks; i++)
        if (t->blocks[i] != BLOCK_HOLE)
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
    size_t final = rb->preempted ? s->kv.pool.bytes_per_block
                                 : (size_t)s->block_filled[block] * paged_bytes_per_token(s);
    kv_track_close(&s->block_track[block], final, rb->breakdown);
    s->block_filled[block] = 0;
    if (s->sched) /* a free block is nobody's copy any more */
        swap_forget_block(&s->sched->swap, block);
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

/* --preempt swap: r's blocks go to the host (one copy per block, shared
 * blocks once), its device blocks are freed, and it comes back with them.
 * Returns 1 when swapped, 0 when the swap space is full (then r is
 * recomputed instead), -1 on a device failure. */
static int swap_out_request(PagedServer *s, ServingRun *run, Request *r, Err *err)
{
    PagedSched *sc = s->sched;
    BlockTable *t = &s->kv.tables.tables[r->index];
    if (swap_slots_needed(&sc->swap, t) > sc->swap.n_free) {
        sc->swap_fallbacks++;
        return 0;
    }
    ReleaseBooks rb = {s, &run->breakdown, 1};
    int copies = 0;
    if (swap_out_table(&sc->swap, &s->kv.pool, t, r->index, r->n_cached, run, close_block_track, &rb, &copies, err))
        return -1;
    sc->swaps_out++;
    sc->swap_blocks_out += copies;
    sc->swapped_tokens += r->n_cached;
    sc->swapped_flops += paged_recompute_flops(&s->kv.cfg, r->n_cached);
    return 1;
}

/* What a recomputation will cost, for the report next to the swaps. */
static void count_recomputation(PagedServer *s, const Request *r)
{
    PagedSched *sc = s->sched;
    if (!sc)
        return;
    sc->recomputed_tokens += r->n_cached;
    sc->recompute_flops += paged_recompute_flops(&s->kv.cfg, r->n_cached);
    sc->recompute_blocks += s->kv.tables.tables[r->index].n_blocks;
}

/* The most recently admitted request goes back to the queue: its blocks are
 * freed now, and its prompt and generated tokens are recomputed when it is
 * admitted again, or (--preempt swap) its blocks wait on the host. */
static Request *preempt_newest(PagedServer *s, ServingRun *run, Err *err)
{
    Request *victim = &run->reqs[s->running[s->n_running - 1]];
    int swapped = 0;
    if (s->sched && s->sched->preempt == PAGED_PREEMPT_SWAP && victim->n_cached > 0) {
        swapped = swap_out_request(s, run, victim, err);
        if (swapped < 0)
            return NULL;
    }
    if (!swapped) {
        count_recomputation(s, victim);
        release_blocks(s, run, victim, 1);
    }
    if (s->sched)
        s->sched->follows[victim->index] = -1; /* a fork waiting for a prompt starts again with it */
    s->n_running--;
    serving_preempt(run, victim);
    s->preemptions++;
    if (victim->index < s->first_waiting)
        s->first_waiting = victim->index;
    return victim;
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

/* Positions start..end-1 of the table are about to be written: a copy
 * that was exact is not any more. */
static void note_writes(PagedServer *s, const BlockTable *t, int start, int end)
{
    if (!s->sched)
        return;
    int bs = s->kv.pool.shape.block_size;
    for (int b = start / bs; b <= (end - 1) / bs; b++)
        swap_note_write(&s->sched->swap, t->blocks[b]);
}

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
    note_writes(s, t, pos, pos + 1);
    return 0;
}

/* Free blocks a table needs before positions start..end-1 can be written:
 * new blocks past its last one, plus a copy when the block holding start
 * is shared (the blocks after it are new, so private). */
static int blocks_to_write_range(const BlockPool *p, const BlockTable *t, int start, int end)
{
    int grow = block_count_for_tokens(end, p->shape.block_size) - t->n_blocks;
    int cow = start < t->n_blocks * p->shape.block_size && block_table_blocks_to_write(p, t, start);
    return (grow > 0 ? grow : 0) + cow;
}

/* Room for positions n_cached..end-1 of r (a prompt chunk, a recomputation,
 * what follows a swap-in): all or nothing, -1 when too few blocks are free. */
static int make_room_for_chunk(PagedServer *s, Request *r, int end)
{
    BlockPool *p = &s->kv.pool;
    BlockTable *t = &s->kv.tables.tables[r->index];
    int start = r->n_cached, copied = 0, had = t->n_blocks * p->shape.block_size;
    if (make_free(s, blocks_to_write_range(p, t, start, end)))
        return -1;
    if (block_table_grow(p, t, end))
        return -1;
    if (start < had && block_table_make_writable(p, t, start, &copied))
        return -1;
    s->cow_copies += copied;
    track_table(s, t);
    note_writes(s, t, start, end);
    return 0;
}

/* ------------------------------------------------------------ feeding */

/* Forked samples of r's prompt that waited for its last chunk: now that
 * the chunk is in this step, their tables point at r's blocks and they
 * sample from r's logits row, as when the whole prompt ran at once. */
static int release_followers(PagedServer *s, ServingRun *run, const Request *r, Err *err)
{
    for (int k = 0; k < s->n_running; k++) {
        Request *f = &run->reqs[s->running[k]];
        if (s->sched->follows[f->index] != r->index)
            continue;
        s->sched->follows[f->index] = -1;
        block_table_fork(&s->kv.pool, &s->kv.tables.tables[r->index], &s->kv.tables.tables[f->index]);
        trace_event_values(run->trace, "fork", r->index, 1, &(long){f->index});
        f->n_cached = f->n_tokens;
        if (serving_share_logits(run, r, f, err))
            return -1;
    }
    return 0;
}

/* Feeds r's positions n_cached..end-1; a prompt's last chunk also lets
 * its waiting forks go. */
static int feed_until(PagedServer *s, ServingRun *run, Request *r, int end, Err *err)
{
    if (serving_feed_upto(run, r, end, err))
        return -1;
    return s->sched && end == r->n_tokens ? release_followers(s, run, r, err) : 0;
}

/* A fork waiting for its prompt's last chunk: nothing of its own to feed. */
static int is_following(const PagedServer *s, const Request *r)
{
    return s->sched && s->sched->follows[r->index] >= 0;
}

/* ------------------------------------------------------------ decodes */

/* Every running request with one token to feed (its newest, or the last
 * of a prompt) feeds it, oldest admission first. When the pool runs dry,
 * the newest running request is preempted, again and again, until there
 * is room or the request itself was the newest. The oldest request always
 * gets its room (it fits the pool alone, or it would have been rejected),
 * so every step makes progress. Decodes come first and are never cut:
 * --max-num-seqs <= --max-num-batched-tokens leaves room for all of them. */
static int schedule_decodes(PagedServer *s, ServingRun *run, int *preempted, Err *err)
{
    for (int i = 0; i < s->n_running; i++) {
        Request *r = &run->reqs[s->running[i]];
        if (r->n_tokens - r->n_cached != 1 || is_following(s, r))
            continue; /* a prompt still in chunks (next pass), a fork that waits, or one fed already */
        int evicted_self = 0;
        while (!evicted_self && make_room_for_token(s, r) != 0) {
            Request *victim = preempt_newest(s, run, err);
            if (!victim)
                return -1;
            evicted_self = victim == r;
            *preempted = 1;
        }
        if (evicted_self)
            break;
        if (feed_until(s, run, r, r->n_tokens, err))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ prompt chunks */

/* Tokens this step still has room for. */
static int budget_left(const PagedServer *s, const ServingRun *run)
{
    return s->max_batched_tokens - run->n_entries;
}

/* The end of r's next chunk: as many of its positions without K/V as the
 * budget left and the free blocks allow (a shared block at its start needs
 * one for its copy). */
static int chunk_end(const PagedServer *s, const ServingRun *run, const Request *r)
{
    const BlockPool *p = &s->kv.pool;
    const BlockTable *t = &s->kv.tables.tables[r->index];
    int bs = p->shape.block_size, start = r->n_cached;
    int cow = start < t->n_blocks * bs && block_table_blocks_to_write(p, t, start);
    int room = (t->n_blocks + block_pool_available(p) - cow) * bs, end = r->n_tokens;
    if (end > start + budget_left(s, run))
        end = start + budget_left(s, run);
    if (end > room)
        end = room;
    if (end > t->capacity * bs)
        end = t->capacity * bs;
    return end;
}

/* Prompts (or recomputations) admitted in an earlier step and not yet
 * complete take the budget the decodes left, oldest first; at most the
 * newest admission is one. They never preempt: the decodes before them
 * were fed already, and the oldest requests come first. */
static int schedule_prompt_chunks(PagedServer *s, ServingRun *run, Err *err)
{
    for (int i = 0; i < s->n_running && budget_left(s, run) > 0; i++) {
        Request *r = &run->reqs[s->running[i]];
        if (r->n_tokens - r->n_cached <= 1 || is_following(s, r))
            continue;
        int end = chunk_end(s, run, r);
        if (end <= r->n_cached || make_room_for_chunk(s, r, end))
            continue; /* no block free for it this step */
        if (feed_until(s, run, r, end, err))
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

/* Whether request i's blocks wait in the swap space. */
static int is_swapped_out(const PagedServer *s, int i)
{
    return s->sched && s->sched->swap.n_slots > 0 && s->sched->swap.n_blocks[i] > 0;
}

static int swap_in_request(PagedServer *s, ServingRun *run, Request *r, Err *err)
{
    PagedSched *sc = s->sched;
    BlockTable *t = &s->kv.tables.tables[r->index];
    int copies = 0;
    if (swap_in_table(&sc->swap, &s->kv.pool, t, r, run, &copies, err))
        return -1;
    track_table(s, t);
    sc->swaps_in++;
    sc->swap_blocks_in += copies;
    return 0;
}

/* Admits request i and the samples forked from it, feeding i's positions
 * up to @p end (its whole prompt, or with a token budget a first chunk):
 * a swapped-out request first gets its blocks back, then room for the
 * positions; each sibling's table points at the same blocks (one more
 * holder each) and it samples from i's logits row, once i's prompt is
 * complete: in this step, or (chunked) in the step of its last chunk. */
static int admit_group(PagedServer *s, ServingRun *run, int i, int group, int end, const PagedCachedPrefix *hit,
                       Err *err)
{
    Request *r = &run->reqs[i];
    if (is_swapped_out(s, i) && swap_in_request(s, run, r, err))
        return -1;
    if (s->cache) { /* the blocks a cache above the pool holds for r come first */
        s->cache->admitted(s->cache->ctx, r, &s->kv.tables.tables[i], hit);
        r->n_cached = hit->n_blocks * s->kv.pool.shape.block_size;
    }
    if (make_room_for_chunk(s, r, end)) {
        if (s->cache) { /* the cached blocks go back too: r waits with an empty table */
            release_blocks(s, run, r, 1);
            r->n_cached = 0;
        }
        return 1; /* not admitted (only an unfinished lab allocator gets here) */
    }
    start_running(s, run, r);
    for (int k = 1; k < group; k++) {
        Request *sibling = &run->reqs[i + k];
        start_running(s, run, sibling);
        if (end < r->n_tokens) {
            s->sched->follows[sibling->index] = r->index; /* forked when the prompt's last chunk runs */
            continue;
        }
        block_table_fork(&s->kv.pool, &s->kv.tables.tables[i], &s->kv.tables.tables[i + k]);
        trace_event_values(run->trace, "fork", i, 1, &(long){i + k});
        sibling->n_cached = sibling->n_tokens;
    }
    if (serving_feed_upto(run, r, end, err))
        return -1;
    for (int k = 1; k < group && end == r->n_tokens; k++)
        if (serving_share_logits(run, r, &run->reqs[i + k], err))
            return -1;
    return 0;
}

/* The leading blocks of r that a cache above the pool holds already
 * (none without one). */
static PagedCachedPrefix cached_prefix(const PagedServer *s, const Request *r)
{
    PagedCachedPrefix none = {0, 0, NULL};
    return s->cache ? s->cache->lookup(s->cache->ctx, r) : none;
}

/* Positions of request i with K/V already (those it gets back from the
 * swap space), and the blocks admitting positions up to @p end takes:
 * every position that is not cached is (re)computed, into new blocks, and
 * cached blocks that nobody holds leave the free ones too. */
static int blocks_to_admit(const PagedServer *s, int i, int start, int end, const PagedCachedPrefix *hit)
{
    const int bs = s->kv.pool.shape.block_size;
    if (!is_swapped_out(s, i))
        return block_count_for_tokens(end, bs) - hit->n_blocks + hit->n_free;
    const SwapSpace *sw = &s->sched->swap;
    int held = sw->n_blocks[i], grow = block_count_for_tokens(end, bs) - held;
    /* A slot that comes back as a block still shared with another table
     * needs a copy before its first write. */
    const int *slots = sw->tables + (size_t)i * sw->capacity;
    int cow = start < held * bs && sw->device_copy[slots[start / bs]] >= 0;
    return swap_blocks_needed(sw, i) + (grow > 0 ? grow : 0) + cow;
}

static int cached_when_admitted(const PagedServer *s, const ServingRun *run, int i, const PagedCachedPrefix *hit)
{
    if (is_swapped_out(s, i))
        return s->sched->swap.cached[i];
    return hit->n_blocks ? hit->n_blocks * s->kv.pool.shape.block_size : run->reqs[i].n_cached;
}

/* First come, first served: the queue is the requests in arrival order
 * (file order), so a preempted request, which arrived earlier, comes back
 * before any newer one. The first request that does not fit stops the
 * admission (no overtaking, so nobody starves), and so does the first that
 * has not arrived yet (every later one arrives later still). Without a
 * token budget a prompt must fit the step whole; with one it may start
 * with a chunk, and then it is the last admission of the step. */
static int admit_waiting(PagedServer *s, ServingRun *run, Err *err)
{
    while (s->first_waiting < run->n_reqs &&
           (run->reqs[s->first_waiting].phase == REQ_RUNNING || run->reqs[s->first_waiting].phase == REQ_DONE))
        s->first_waiting++;
    int max_running = paged_max_running(s, run);
    for (int i = s->first_waiting; i < run->n_reqs; i++) {
        Request *r = &run->reqs[i];
        if (r->phase == REQ_PENDING)
            break;
        if (r->phase != REQ_WAITING)
            continue;
        int group = fork_group_size(run, i);
        PagedCachedPrefix hit = cached_prefix(s, r);
        int start = cached_when_admitted(s, run, i, &hit), end = r->n_tokens;
        if (s->sched && s->sched->chunked_prefill && end > start + budget_left(s, run))
            end = start + budget_left(s, run);
        if (end <= start || s->n_running + group > max_running ||
            !paged_can_admit(block_pool_available(&s->kv.pool), blocks_to_admit(s, i, start, end, &hit),
                             s->watermark_blocks) ||
            run->n_entries + (end - start) > s->max_batched_tokens || run->n_logits >= run->max_logits)
            break;
        int rc = admit_group(s, run, i, group, end, &hit, err);
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
    if (s->sharing && s->sharing->beam) /* --beam: beam groups run and wait as a whole (beam.c) */
        return beam_schedule(s, run, err);
    int preempted = 0;
    if (schedule_decodes(s, run, &preempted, err))
        return -1;
    if (s->sched && schedule_prompt_chunks(s, run, err))
        return -1;
    /* A step that had to preempt is short of blocks: admitting now would
     * only preempt again (vLLM's v1 scheduler does the same). */
    if (!preempted && admit_waiting(s, run, err))
        return -1;
    if (s->sched)
        paged_sched_note_step(s->sched, run);
    return 0;
}

void paged_finished(PagedServer *s, ServingRun *run, Request *r)
{
    release_blocks(s, run, r, 0);
    remove_running(s, r->index);
}

/* ------------------------------------------------------------ for beam.c */

void paged_track_table(PagedServer *s, const BlockTable *t)
{
    track_table(s, t);
}

int paged_make_room(PagedServer *s, Request *r)
{
    return make_room_for_token(s, r);
}

void paged_start_running(PagedServer *s, ServingRun *run, Request *r)
{
    start_running(s, run, r);
}

void paged_preempt(PagedServer *s, ServingRun *run, Request *r)
{
    release_blocks(s, run, r, 1);
    remove_running(s, r->index);
    serving_preempt(run, r);
    s->preemptions++;
    if (r->index < s->first_waiting)
        s->first_waiting = r->index;
}

void paged_release_table(PagedServer *s, ServingRun *run, Request *r)
{
    release_blocks(s, run, r, 0);
}
