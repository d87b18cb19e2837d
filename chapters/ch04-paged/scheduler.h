/**
 * @file scheduler.h
 * @brief Chapter 4's scheduler, phase by phase, and the other pieces of the
 *        core an extension builds with: public so that an extension can
 *        plan a step its own way with them.
 *
 * paged_schedule() is two phases: paged_schedule_decodes() (room for every
 * running request's next token, the newest preempted while the pool is
 * dry) and paged_admit_waiting() (first come, first served, whole prompts,
 * the samples of one prompt admitted together). The token budget
 * (ext/budget.c) and beam search (ext/beam.c) schedule with the same
 * pieces in their own order, as chapter 6's window_step() runs chapter 4's
 * step with its own seam; none of them changes what the pieces do.
 */
#ifndef KVLAB_CH04_SCHEDULER_H
#define KVLAB_CH04_SCHEDULER_H

#include "ext/paged_cache.h"
#include "paged.h"

/* ------------------------------------------------------------ the phases of one step (paged_step()) */

/**
 * Plans one step: paged_schedule(), or the schedule an extension puts in
 * its place (PagedHooks.plan: ext/budget.c).
 * @param s    the server
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_plan(PagedServer *s, ServingRun *run, Err *err);

/**
 * The chapter's schedule: room for every running request's next token
 * (growing, copying on write, preempting the newest when out of blocks),
 * then, unless that preempted, first-come, first-served admission of
 * waiting requests with their whole prompts (the pieces below).
 * @param s    the server
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_schedule(PagedServer *s, ServingRun *run, Err *err);

/**
 * A request finished: its blocks go back to the pool at once.
 * @param s    the server
 * @param run  the run
 * @param r    the request
 */
void paged_finished(PagedServer *s, ServingRun *run, Request *r);

/**
 * After a step: KV reserved (blocks held) and used (rows holding tokens),
 * counting each physical block once however many tables share it; the
 * breakdown per block; the block and sharing numbers.
 * @param s    the server
 * @param run  the run
 */
void paged_account(PagedServer *s, ServingRun *run);

/* ------------------------------------------------------------ the schedule, piece by piece (scheduler.c) */

/**
 * Every running request with one token to feed (its newest) gets room for
 * it, oldest admission first, and is fed. When the pool runs dry the
 * newest running request is preempted (paged_preempt()), again and again,
 * until there is room or the request itself was the newest. The oldest
 * request always gets its room (it fits the pool alone, or it would have
 * been rejected), so every step makes progress.
 * @param s          the server
 * @param run        the run
 * @param preempted  set to 1 when anybody was preempted
 * @param err        receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_schedule_decodes(PagedServer *s, ServingRun *run, int *preempted, Err *err);

/**
 * First come, first served: the waiting requests in arrival (file) order,
 * each with its whole prompt and its forks, while their blocks fit with
 * the watermark to spare (paged_can_admit()) and their prompt fits the
 * step. The first that does not fit stops admission, and so does the first
 * that has not arrived.
 * @param s    the server
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_admit_waiting(PagedServer *s, ServingRun *run, Err *err);

/**
 * Makes the slot of @p r's newest token exist and be private (a new block,
 * or a copy of a shared one), all or nothing.
 * @param s  the server
 * @param r  a running request
 * @return 0 on success, -1 when the pool has too few free blocks
 */
int paged_make_room(PagedServer *s, Request *r);

/**
 * Makes positions n_cached..end-1 of @p r exist and be private (a prompt,
 * a chunk of one, a recomputation), all or nothing.
 * @param s    the server
 * @param r    the request
 * @param end  one past the last position to be written
 * @return 0 on success, -1 when the pool has too few free blocks
 */
int paged_make_room_upto(PagedServer *s, Request *r, int end);

/**
 * Free blocks a table needs before positions @p start .. @p end - 1 can be
 * written: new blocks past its last one, plus a copy when the block
 * holding @p start is shared.
 * @param p      the pool
 * @param t      the table
 * @param start  first position to be written
 * @param end    one past the last
 * @return blocks needed
 */
int paged_blocks_to_write(const BlockPool *p, const BlockTable *t, int start, int end);

/**
 * Sends running request @p victim back to the queue: the blocks its table
 * still holds are freed now (their unfilled rows count as reserved for
 * tokens to come), and its prompt and generated tokens are recomputed
 * when it is admitted again. The one way a request is preempted; an
 * extension that keeps the K/V elsewhere (ext/swap.c) empties the table
 * first.
 * @param s       the server
 * @param run     the run
 * @param victim  a running request
 */
void paged_preempt(PagedServer *s, ServingRun *run, Request *victim);

/**
 * Marks @p r running and appends it to the running list (admission order).
 * @param s    the server
 * @param run  the run
 * @param r    a waiting request whose blocks are taken
 */
void paged_start_running(PagedServer *s, ServingRun *run, Request *r);

/**
 * Forks @p parent's table into @p child's (one holder more for each
 * block) and counts the child's positions as cached.
 * @param s       the server
 * @param run     the run (the fork goes into the trace)
 * @param parent  a request whose prompt is complete in this step
 * @param child   a request of the same prompt with an empty table
 */
void paged_fork(PagedServer *s, ServingRun *run, const Request *parent, Request *child);

/**
 * Samples of one prompt that have not produced a token yet run as a group:
 * the prompt once, its blocks shared.
 * @param run  the run
 * @param i    a waiting request
 * @return the group's size from request @p i (1 without `--n`, or when
 *         @p i has already generated tokens)
 */
int paged_fork_group_size(const ServingRun *run, int i);

/**
 * Moves PagedServer.first_waiting past the requests that run or are done.
 * @param s    the server
 * @param run  the run
 * @return where admission starts looking
 */
int paged_first_waiting(PagedServer *s, const ServingRun *run);

/**
 * The next request admission looks at, from @p i on: the first waiting
 * one, before the first that has not arrived.
 * @param run  the run
 * @param i    where to start looking
 * @return its index, or -1 when the queue ends or stops there
 */
int paged_next_waiting(const ServingRun *run, int i);

/**
 * The leading blocks of @p r that a cache above the pool holds already
 * (ext/paged_cache.h; none without one).
 * @param s  the server
 * @param r  a waiting request
 * @return what the cache found
 */
PagedCachedPrefix paged_cached_prefix(const PagedServer *s, const Request *r);

/**
 * Free blocks admitting positions up to @p end takes: every position that
 * is not cached is computed into new blocks, and cached blocks that nobody
 * holds leave the free ones too.
 * @param s    the server
 * @param end  one past the last position fed at admission
 * @param hit  what the cache found
 * @return blocks
 */
int paged_blocks_to_admit(const PagedServer *s, int end, const PagedCachedPrefix *hit);

/**
 * Whether an admission fits the step: positions to feed, @p blocks free
 * with the watermark to spare (paged_can_admit()), the step's token budget
 * and a logits row.
 * @param s       the server
 * @param run     the run, this step planned so far
 * @param start   first position to feed
 * @param end     one past the last
 * @param blocks  free blocks the admission takes
 * @return 1 when it fits, else 0
 */
int paged_admission_fits(const PagedServer *s, const ServingRun *run, int start, int end, int blocks);

/**
 * The first request of an admission takes its blocks: those a cache holds
 * for it first, then room for positions up to @p end; it runs. All or
 * nothing: with too few free blocks the cached ones go back and it waits.
 * @param s    the server
 * @param run  the run
 * @param r    a waiting request
 * @param end  one past the last position it is fed now
 * @param hit  what paged_cached_prefix() found for it in this step
 * @return 0 when it runs, 1 when it waits (only an unfinished lab allocator gets there)
 */
int paged_admit_first(PagedServer *s, ServingRun *run, Request *r, int end, const PagedCachedPrefix *hit);

/* ------------------------------------------------------------ the pool and its books (pool.c, account.c) */

/**
 * paged_check()'s test of the pool, for requests that must fit @p width at
 * a time (1; an extension that runs the requests of a prompt together
 * passes their number): refused when no request fits.
 * @param run    the run (requests initialised)
 * @param width  requests whose blocks must fit together
 * @param note   added to the message after the positions ("" for none)
 * @param err    receives the reason on failure
 * @return 0 when the pool can be made and some request fits, -1 otherwise
 */
int paged_check_fits(const ServingRun *run, int width, const char *note, Err *err);

/**
 * Rejects, with the reason, every waiting request whose blocks (times
 * @p width) could never fit the pool above the watermark.
 * @param s      the server (pool made)
 * @param run    the run
 * @param width  requests whose blocks must fit together (as paged_check_fits())
 * @param note   added to the reason after the positions ("" for none)
 */
void paged_reject_unfitting(PagedServer *s, ServingRun *run, int width, const char *note);

/**
 * The pool and the block tables for a run, and the watermark: as many
 * blocks as the KV budget holds (paged_check() refused a budget that
 * holds none).
 * @param s    the server, zeroed
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_open_pool(PagedServer *s, ServingRun *run, Err *err);

/**
 * Gives every block a table holds a history for the breakdown (a block
 * already held keeps its own): call after a table grows or forks.
 * @param s  the server
 * @param t  the table
 */
void paged_track_table(PagedServer *s, const BlockTable *t);

/**
 * A release freed @p block: its history closes, its unfilled rows counted
 * as reserved for tokens to come when @p preempted, else never filled.
 * @param s          the server
 * @param breakdown  the run's breakdown
 * @param block      the block no table holds any more
 * @param preempted  1 when its holder was preempted, 0 when it finished
 */
void paged_block_freed(PagedServer *s, KvBreakdown *breakdown, int block, int preempted);

/**
 * Lets go of every block @p r's table holds, as when it finishes (its
 * K/V are not needed any more), without changing its phase.
 * @param s    the server
 * @param run  the run
 * @param r    the request
 */
void paged_release_table(PagedServer *s, ServingRun *run, Request *r);

#endif
