/**
 * @file paged.h
 * @brief Chapter 4: PagedAttention and continuous batching over the block
 *        pool of block_pool.h.
 *
 * The server keeps one ::BlockPool for the whole KV budget and one
 * ::BlockTable per request. Every step it
 *
 * 1. gives every running request room for its next token, oldest first: a
 *    fresh block when the token starts a new block, a private copy when the
 *    block is shared (copy-on-write, here in the scheduler, never inside
 *    the forward pass). When no block is free it preempts the most recently
 *    admitted request: its blocks go back to the pool and it waits to be
 *    recomputed from its prompt and generated tokens;
 * 2. admits waiting requests first come, first served, while their blocks
 *    fit with a watermark of free blocks to spare and their prompts fit the
 *    step's token budget; the prompts of the newly admitted requests run in
 *    the same forward step as the decode tokens of the running ones. The
 *    samples of one prompt (`--n`) are admitted together: the prompt runs
 *    once, its blocks are shared by reference count, and every sample draws
 *    its first token from the same logits with its own sampler;
 * 3. after the step, frees the blocks of every request that finished.
 *
 * The forward pass reads K/V through the block tables (paged_attention()):
 * no gather into a contiguous copy, and the same arithmetic in the same
 * order as common/cpu/ops.h's reference, so the tokens are bit for bit those of
 * the contiguous chapters whatever the block size, the budget or the number
 * of preemptions.
 *
 * **Driving it without a model** (the capacity simulator, tests): set up
 * the run with serving_sim_init() and step it as the program does
 * (paged_open(), paged_step() until serving_unfinished() says 0): no model
 * runs and no K/V byte is allocated.
 *
 * ## Where each idea is
 *
 * This header (the server a program runs), paged_kv.h (the store and
 * PagedAttention), block_pool.h (the pool and the tables) and scheduler.h
 * (the phases of a step, which an extension schedules with) are the
 * chapter's core, and nothing else.
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: open, loop, report | chapters/ch04-paged/main.c | main() |
 * | one step: plan, forward, sample, account, release | chapters/ch04-paged/server.c | paged_step() |
 * | the pool for a run; budgets refused, requests that never fit | chapters/ch04-paged/pool.c | paged_check_fits(), paged_open_pool() |
 * | room for each running request, preempting the newest | chapters/ch04-paged/scheduler.c | paged_schedule_decodes(), paged_preempt() |
 * | first come, first served admission; a prompt's samples forked | chapters/ch04-paged/scheduler.c | paged_admit_waiting(), paged_fork() |
 * | the admission rule with its watermark (lab) | solutions/ch04/paged_can_admit.c | paged_can_admit() |
 * | a block off the free stack (lab) | solutions/ch04/block_pool_alloc.c | block_pool_alloc() |
 * | a holder lets go; double frees refused (lab) | solutions/ch04/block_pool_release.c | block_pool_release() |
 * | the slot mapping: position to (block, row) (lab) | solutions/ch04/block_table_slot.c | block_table_slot() |
 * | copy-on-write of a shared block (lab) | solutions/ch04/block_table_make_writable.c | block_table_make_writable() |
 * | the pool, tables, growth, forks | chapters/ch04-paged/block_pool.c | block_table_grow(), block_table_fork() |
 * | the K/V seam: store into a slot, attend | chapters/ch04-paged/seam.c | paged_store(), paged_attend() |
 * | PagedAttention: attention through the block table (lab) | solutions/ch04/paged_attention.c | paged_attention() |
 * | the weighted sum of values, a block of rows at a time | chapters/ch04-paged/paged_kv.c | paged_accumulate_rows() |
 * | each block's history; blocks used, slack, sharing | chapters/ch04-paged/account.c | paged_account() |
 * | the chapter's lines of the memory table | chapters/ch04-paged/report.c | paged_report_table() |
 *
 * ## The extensions
 *
 * Each later feature is an extension in chapters/ch04-paged/ext/, turned on
 * by its option. An extension calls the core; the core calls it only
 * through the one guarded open call listed here (with a check before the
 * model loads for two), declared in the extension's own header. The open
 * call fills in the entries of ::PagedHooks the extension needs, and the
 * core reads those (PagedServer.hooks) without naming the extension.
 * Without its option nothing of an extension runs, every hook is NULL, and
 * the chapter is exactly its core.
 *
 * | extension: what it adds | option | the core calls it, guarded | the hooks it fills in |
 * |---|---|---|---|
 * | ext/budget.c: decodes first, then prompt chunks within a token budget (serving_feed_upto()); the running limit; preemption's costs | `--max-num-batched-tokens`, `--max-num-seqs`, `--preempt`, `--swap-space` | budget_check() (paged_check()), budget_open() (paged_open()) | plan, print_setup, report_table, report_json, close |
 * | ext/swap.c: blocks swapped to the host and back, shared blocks once; paged_recompute_flops() | `--preempt swap` (ext/budget.c opens it) | none: ext/budget.c opens it (swap_open()) | block_freed, preemption_note |
 * | ext/beam.c: beam search, a scheduler and a step of its own (beam_step()) | `--beam W` | beam_check() (paged_check()), beam_open() (paged_open()) | step, sharing_json, close |
 * | ext/trace.c: each step's changes to the tables and blocks; the tables after one step | `--trace`, `--show-tables` | paged_trace_open() | none: the run's observers (serving_add_observer()) |
 * | ext/device.c: the same blocks on the device | `--device cuda` | paged_device_open() | none: the pool's on_copy and the run's device seam |
 * | ext/paged_cache.h: the hooks of a cache of K/V above the pool | chapter 5's program | none: chapter 5 sets PagedServer.cache | ::PagedCache (lookup, admitted, release, reclaim) |
 */
#ifndef KVLAB_CH04_PAGED_H
#define KVLAB_CH04_PAGED_H

#include "paged_kv.h"
#include "serving.h"

/**
 * The admission rule (vLLM's): a request may take @p needed blocks only if
 * at least @p watermark_blocks stay free afterwards, so that the running
 * requests have room to grow and a new admission does not trigger a
 * preemption at once.
 * @param n_free            free blocks now
 * @param needed            blocks the request needs now
 * @param watermark_blocks  blocks to keep free
 * @return 1 when it may be admitted, else 0
 */
int paged_can_admit(int n_free, int needed, int watermark_blocks);

/**
 * What sharing saves, kept when requests fork (`--n`, `--beam`; NULL
 * otherwise): the blocks the same sequences would hold unshared, at the
 * step of peak use and summed over steps.
 */
typedef struct {
    int saved_at_peak;   /**< logical - physical blocks at the step of peak use */
    int logical_at_peak; /**< blocks the sequences held then, each shared block counted once per holder */
    double logical_sum;  /**< sum over steps of those logical blocks */
    const char *note;    /**< appended to the report's sharing line, e.g. " (beams fork and share)" (NULL: nothing) */
} PagedSharing;

/** The chapter-4 server (below). */
typedef struct PagedServer PagedServer;

/**
 * Where an extension changes the core's run: each entry NULL (or 0) unless
 * an extension that is on filled it in with its one open call (the table
 * above); the core then calls it instead of, or after, its own. The core
 * reads these and names no extension.
 */
typedef struct {
    int (*step)(PagedServer *s, ServingRun *run, Err *err); /**< a whole step instead of paged_step()'s (ext/beam.c) */
    int (*plan)(PagedServer *s, ServingRun *run, Err *err); /**< the schedule instead of paged_schedule() (ext/budget.c) */
    void (*block_freed)(PagedServer *s, int block);          /**< a block no table holds any more (ext/swap.c) */
    /** Setup lines after the core's (ext/budget.c). */
    void (*print_setup)(FILE *log, const PagedServer *s, const ServingRun *run, const char *name);
    void (*report_table)(FILE *f, const PagedServer *s, const ServingRun *run); /**< lines after the core's (ext/budget.c) */
    void (*sharing_json)(JsonWriter *j, const PagedServer *s); /**< keys after the sharing keys (ext/beam.c) */
    void (*report_json)(JsonWriter *j, const PagedServer *s, const ServingRun *run); /**< keys at the end (ext/budget.c) */
    const char *preemption_note;      /**< what preemption does, for the report; NULL: recomputes (ext/swap.c) */
    void (*close[4])(PagedServer *s); /**< frees an extension's state, in the order added (paged_close()) */
    int n_close;                      /**< entries of close */
} PagedHooks;

/** The token budget's books (ext/budget.h). */
typedef struct PagedBudget PagedBudget;
/** The swap space (ext/swap.h). */
typedef struct SwapSpace SwapSpace;
/** Beam search (ext/beam.h). */
typedef struct BeamSearch BeamSearch;
/** The hooks of a cache above the pool (ext/paged_cache.h). */
typedef struct PagedCache PagedCache;

/** The chapter-4 server: the paged store, the queue and the numbers it reports. */
struct PagedServer {
    PagedKv kv;               /**< the pool and the block tables (K and V of one token: paged_bytes_per_token()) */
    int watermark_blocks;     /**< free blocks kept back at admission: --watermark % of the pool, rounded down */
    int max_batched_tokens;   /**< token budget of one step: max(seq_len, 2048), or what ext/budget.c sets */
    int *running;             /**< [n_reqs] running requests, oldest admission first */
    int n_running;            /**< entries of running */
    int first_waiting;        /**< no request before this index is waiting (where admission starts looking) */
    int *block_filled;        /**< [n_blocks] tokens held by each block after the last step */
    KvReservationTrack *block_track; /**< [n_blocks] each held block's history, for the breakdown */
    long preemptions;         /**< requests sent back to the queue */
    long cow_copies;          /**< blocks copied on write */
    int blocks_peak_used;     /**< most blocks held after any step */
    int blocks_saved_peak;    /**< most blocks sharing saved after any step (logical - physical) */
    long blocks_peak_step;    /**< the step of blocks_peak_used */
    double blocks_saved_sum;  /**< sum over steps of the blocks sharing saved */
    size_t slack_tokens_peak; /**< most unfilled rows in held blocks after any step */
    long steps_accounted;     /**< steps seen by paged_account() */
    PagedSharing *sharing;    /**< with forks (--n, --beam): what sharing saves; NULL otherwise */
    /* The extensions, each NULL when its option is off: the guards of the
     * core's calls into them (the table above). */
    PagedBudget *budget;      /**< ext/budget.h: the token budget, the running limit, preemption's costs */
    SwapSpace *swap;          /**< ext/swap.h: --preempt swap */
    BeamSearch *beam;         /**< ext/beam.h: --beam */
    PagedHooks hooks;         /**< what the extensions that are on change in the core's run */
    const PagedCache *cache;  /**< ext/paged_cache.h: a cache of K/V above the pool (chapter 5) */
};

/**
 * K and V of all layers for one token: a block's bytes over its block
 * size (the run's kv_bytes_per_token; kept in the pool, not twice).
 * @param s  the server
 * @return bytes
 */
static inline size_t paged_bytes_per_token(const PagedServer *s)
{
    return s->kv.pool.bytes_per_block / (size_t)s->kv.pool.shape.block_size;
}

/**
 * Refuses, before anything is printed, a KV budget the pool cannot be made
 * from: one that holds no block, more blocks than an int names, or (when
 * K/V are stored on the host) more than the machine's memory, or one in
 * which no request fits. paged_open() makes the same checks.
 * @param run  the run (requests initialised)
 * @param err  receives the reason on failure
 * @return 0 when the pool can be made, -1 otherwise
 */
int paged_check(const ServingRun *run, Err *err);

/**
 * Creates the server for a run: pool, tables, queue, and the step buffers
 * (serving_open_steps()), and the extensions its options ask for. Rejects
 * requests that could never fit in the whole pool. Prints the setup to
 * @p log.
 * @param run     the run (requests initialised, none admitted)
 * @param server  receives the server (close it with paged_close(), also on failure)
 * @param log     where the setup lines go, or NULL
 * @param err     receives the reason on failure (budget too small for one block, --n without temperature)
 * @return 0 on success, -1 on failure
 */
int paged_open(ServingRun *run, PagedServer **server, FILE *log, Err *err);

/**
 * The setup lines paged_open() prints: the pool, the concurrency at full
 * length, the block tables (and an extension's line).
 * @param s     the open server
 * @param run   its run
 * @param name  the program's name, which starts each line
 * @param log   where they go
 */
void paged_print_setup(const PagedServer *s, const ServingRun *run, const char *name, FILE *log);

/**
 * Frees the server (all blocks must have been released by then; any that
 * are not are released here).
 * @param s  the server, or NULL
 */
void paged_close(PagedServer *s);

/**
 * One step of the serving loop: paged_plan(), the batch through the model
 * with paged_seam() (serving_step_forward()), every fed request's next
 * token (serving_step_sample()), paged_account(), and paged_finished() for
 * each request that finished. The same step serves the program, the
 * simulator and the tests.
 * @param s    the server
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success (also when every request is already done), -1 on failure
 */
int paged_step(PagedServer *s, ServingRun *run, Err *err);

/**
 * paged_open(), then paged_step() until every request is done: a whole run
 * for the tools and the tests. The server stays open for its numbers.
 * @param run     the run
 * @param server  receives the server (close it with paged_close(), also on failure)
 * @param log     where the setup lines go, or NULL
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_serve(ServingRun *run, PagedServer **server, FILE *log, Err *err);

/**
 * Chapter 4's lines of the memory table: blocks total/used/free over time,
 * last-block slack, block-table bytes, preemptions, sharing
 * (serving_program_report() calls it).
 * @param f    stream
 * @param ctx  the PagedServer
 * @param run  the finished run
 */
void paged_report_table(FILE *f, void *ctx, const ServingRun *run);

/**
 * Chapter 4's JSON keys: block_size, blocks_total, bytes_per_block,
 * blocks_peak_used, preemptions, blocks_saved_by_sharing (peak and
 * average), cow_copies, watermark_blocks, max_batched_tokens,
 * block_table_bytes, kv_metadata_bytes, blocks_timeline.
 * @param j    the writer (inside the report object)
 * @param ctx  the PagedServer
 * @param run  the finished run
 */
void paged_report_json(JsonWriter *j, void *ctx, const ServingRun *run);

#endif
