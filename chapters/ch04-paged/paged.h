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
 *    fit with a watermark of free blocks to spare and their tokens fit the
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
 * runs and no K/V byte is allocated. The scheduler reads only the requests
 * and the model's shape, never the weights.
 *
 * **On the device** (`--device cuda`) the chapter keeps only the books on
 * the host too; the K/V bytes live in a device pool of the same blocks
 * (paged_device_open()), laid out [layer][block x block_size + row][kv_dim]
 * (common/cuda/device_kv.h). Before each step the device gets every running
 * request's block table (paged_device_sync()); every copy-on-write the pool
 * makes is repeated on the device as it is made (BlockPool.on_copy);
 * PagedAttention on the device reads through the tables.
 *
 * ## Where each idea is
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: open, loop, report | chapters/ch04-paged/main.c | main() |
 * | one step: schedule, forward, sample, account, release | chapters/ch04-paged/server.c | paged_step() |
 * | pool, tables and queue for a run; budgets refused | chapters/ch04-paged/server.c | paged_check(), paged_open() |
 * | room for each running request, preemption, admission, forks | chapters/ch04-paged/scheduler.c | paged_schedule() |
 * | the admission rule with its watermark (lab) | solutions/ch04/paged_can_admit.c | paged_can_admit() |
 * | a block off the free stack (lab) | solutions/ch04/block_pool_alloc.c | block_pool_alloc() |
 * | a holder lets go; double frees refused (lab) | solutions/ch04/block_pool_release.c | block_pool_release() |
 * | the slot mapping: position to (block, row) (lab) | solutions/ch04/block_table_slot.c | block_table_slot() |
 * | copy-on-write of a shared block (lab) | solutions/ch04/block_table_make_writable.c | block_table_make_writable() |
 * | the pool, tables, growth, forks | chapters/ch04-paged/block_pool.c | block_table_grow(), block_table_fork() |
 * | the K/V seam: store into a slot, attend | chapters/ch04-paged/paged_kv.c | paged_store(), paged_attend() |
 * | PagedAttention: attention through the block table (lab) | solutions/ch04/paged_attention.c | paged_attention() |
 * | blocks used, slack, sharing, the breakdown | chapters/ch04-paged/report.c | paged_account() |
 * | the chapter's lines of the memory table | chapters/ch04-paged/report.c | paged_report_table() |
 * | the same blocks on the device | chapters/ch04-paged/device.c | paged_device_open(), paged_device_sync() |
 */
#ifndef KVLAB_CH04_PAGED_H
#define KVLAB_CH04_PAGED_H

#include "block_pool.h"
#include "forward.h"
#include "serving.h"

/** The paged K/V store: the pool, and a block table per request. */
typedef struct {
    ModelConfig cfg;    /**< the model's shape (heads, head_dim) */
    BlockPool pool;     /**< every block of the KV budget */
    BlockTables tables; /**< one per request; BatchEntry.seq indexes it */
} PagedKv;

/**
 * Keeps one token's K and V of one layer at its slot: block
 * table[pos / block_size], row pos % block_size. The scheduler has already
 * made that block exist and be private.
 * @param ctx    a PagedKv
 * @param layer  layer index
 * @param e      the token (e->seq: the request)
 * @param k      [kv_dim] key
 * @param v      [kv_dim] value
 */
void paged_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v);

/**
 * PagedAttention of one query head over positions 0..n_pos-1 of a sequence,
 * reading keys and values straight out of the blocks its table names:
 * scores in position order, softmax, weighted sum of values in position
 * order, exactly as attention_reference() does over a contiguous cache.
 * @param pool      a pool with storage
 * @param t         the sequence's block table (covers n_pos positions)
 * @param layer     layer index
 * @param kv_head   the KV head this query head reads (head / kv_mul)
 * @param head_dim  width of a head
 * @param q         [head_dim] query
 * @param n_pos     positions attended (the query's position + 1)
 * @param out       [head_dim] receives the output
 * @param scores    [n_pos] scratch
 */
void paged_attention(const BlockPool *pool, const BlockTable *t, int layer, int kv_head, int head_dim,
                     const float *q, int n_pos, float *out, float *scores);

/**
 * The seam's attend: paged_attention() for query head @p head of entry @p e.
 * @param ctx     a PagedKv
 * @param layer   layer index
 * @param e       the querying token
 * @param head    query head
 * @param q       [head_dim] query
 * @param out     [head_dim] receives the output
 * @param scores  [seq_len] scratch
 */
void paged_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *scores);

/**
 * The K/V seam over a paged store.
 * @param kv  the store
 * @return store = paged_store, attend = paged_attend
 */
KvSeam paged_seam(PagedKv *kv);

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
 * What a cache of K/V above the pool found for a waiting request: blocks
 * whose K/V equal those the request's first positions would get.
 */
typedef struct {
    int n_blocks;      /**< leading blocks found: the request's first n_blocks x block_size positions */
    int n_free;        /**< how many of them no table holds now (parked): taking them uses up free blocks */
    const int *blocks; /**< [n_blocks] the blocks in order (the cache's buffer, valid until its next call) */
} PagedCachedPrefix;

/**
 * Extension points for a cache of K/V contents kept above the pool (a
 * later chapter's prefix cache). Chapter 4 has none (PagedServer.cache is
 * NULL), and the scheduler then does exactly what it does without them.
 */
typedef struct {
    void *ctx; /**< passed to every function */
    /**
     * At admission: the leading blocks of @p r whose K/V are already in the
     * pool. It changes nothing (a waiting request may be looked up at
     * every step). At least the last position must be left to compute,
     * since its logits are what the request samples from.
     * @param ctx  the cache
     * @param r    a waiting request
     * @return what it found ({0} when nothing)
     */
    PagedCachedPrefix (*lookup)(void *ctx, const Request *r);
    /**
     * @p r is admitted with what lookup() found: its empty table @p t takes
     * those blocks, one holder more each (a parked one leaves the cache's
     * free queue). The scheduler then allocates the rest.
     * @param ctx  the cache
     * @param r    the request
     * @param t    its table, empty
     * @param hit  lookup()'s answer for @p r in this step
     */
    void (*admitted)(void *ctx, Request *r, BlockTable *t, const PagedCachedPrefix *hit);
    /**
     * Instead of block_table_release(): @p r's table lets go of its blocks
     * (the cache may park those it keeps), calling @p on_free for each
     * block no table holds any more, and leaves the table empty.
     * @param ctx          the cache
     * @param r            the request (finished or preempted)
     * @param t            its table
     * @param on_free      as for block_table_release()
     * @param on_free_ctx  passed to @p on_free
     */
    void (*release)(void *ctx, Request *r, BlockTable *t, void (*on_free)(void *ctx, int block), void *on_free_ctx);
    /**
     * The free stack has fewer blocks than the scheduler is about to take:
     * give one parked block back (block_pool_free_parked()), forgetting
     * what it cached.
     * @param ctx  the cache
     * @return 0 when a block went back on the stack, -1 when none is parked
     */
    int (*reclaim)(void *ctx);
} PagedCache;

/** The chapter-4 server: the paged store, the queue and the numbers it reports. */
typedef struct {
    PagedKv kv;               /**< the pool and the block tables */
    size_t bytes_per_token;   /**< K and V of all layers for one token */
    int watermark_blocks;     /**< free blocks kept back at admission: --watermark % of the pool, rounded down */
    int max_batched_tokens;   /**< token budget of one step: max(seq_len, 2048), as vLLM */
    int *running;             /**< [n_reqs] running requests, oldest admission first */
    int n_running;            /**< entries of running */
    int first_waiting;        /**< no request before this index is waiting (where admission starts looking) */
    int *block_filled;        /**< [n_blocks] tokens held by each block after the last step */
    KvReservationTrack *block_track; /**< [n_blocks] each held block's history, for the breakdown */
    long preemptions;         /**< requests sent back to the queue */
    long cow_copies;          /**< blocks copied on write */
    int blocks_peak_used;     /**< most blocks held after any step */
    int blocks_saved_peak;    /**< most blocks sharing saved after any step (logical - physical) */
    long blocks_peak_step;    /**< the step blocks_peak_used happened */
    double blocks_saved_sum;  /**< sum over steps of the blocks sharing saved */
    size_t slack_tokens_peak; /**< most unfilled rows in held blocks after any step */
    long steps_accounted;     /**< steps seen by paged_account() */
    const PagedCache *cache;  /**< a cache of K/V above the pool, or NULL (chapter 4) */
} PagedServer;

/**
 * Refuses, before anything is printed, a KV budget the pool cannot be made
 * from: one that holds no block, more blocks than an int names, or (when
 * K/V are stored on the host) more than the machine's memory. paged_open()
 * makes the same checks.
 * @param run  the run (requests initialised)
 * @param err  receives the reason on failure
 * @return 0 when the pool can be made, -1 otherwise
 */
int paged_check(const ServingRun *run, Err *err);

/**
 * Creates the server for a run: pool, tables, queue, and the step buffers
 * (serving_open_steps()); with `--device cuda` also the device pool
 * (paged_device_open()). Rejects requests that could never fit in the
 * whole pool. Prints the setup to @p log.
 * @param run     the run (requests initialised, none admitted)
 * @param server  receives the server (close it with paged_close(), also on failure)
 * @param log     where the setup lines go, or NULL
 * @param err     receives the reason on failure (budget too small for one block, --n without temperature)
 * @return 0 on success, -1 on failure
 */
int paged_open(ServingRun *run, PagedServer **server, FILE *log, Err *err);

/**
 * The setup lines paged_open() prints: the pool, the concurrency at full
 * length, the block tables.
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
 * One step of the serving loop: paged_schedule(), the batch through the
 * model with paged_seam() (serving_step_forward()), every fed request's
 * next token (serving_step_sample()), paged_account(), and
 * paged_finished() for each request that finished. The same step serves
 * the program, the simulator and the tests.
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
 * Plans one step: decodes of the running requests (growing, copying on
 * write, preempting the newest when out of blocks), then FCFS admission of
 * waiting requests with their prompts (or full recomputation).
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

/**
 * `--device cuda`: a pool of the same blocks on the device
 * (device_kv_open_paged()), one block table per request; hooks the pool's
 * on_copy to repeat copy-on-write there. paged_open() calls it.
 * @param s    the server
 * @param run  the run (run->device set, the step buffers sized)
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_device_open(PagedServer *s, ServingRun *run, Err *err);

/**
 * `--device cuda`, after each schedule: uploads the block table of every
 * running request (only running requests are fed, and each one's table
 * covers every position fed).
 * @param s    the server
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_device_sync(const PagedServer *s, ServingRun *run, Err *err);

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
