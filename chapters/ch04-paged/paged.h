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
 * With `--max-num-batched-tokens N` (chunked prefill, as vLLM V1) no step
 * exceeds N tokens: the decodes go first, then the next chunk of a prompt
 * that is still being prefilled, then admissions with a first chunk that
 * fits the rest; only a prompt's last chunk gets a logits row. With
 * `--max-num-seqs` at most that many requests run. With `--preempt swap` a
 * preempted request's blocks go to a host swap space (::SwapSpace) and come
 * back when it is readmitted, instead of being recomputed. Without these
 * options PagedServer.sched is NULL and nothing of this runs.
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
 * (paged_device_open()), in the same layout as the CPU pool's storage,
 * [n_blocks][n_layers][2][block_size][kv_dim], in the device's element
 * type: block b on the device holds what block b holds on the CPU, byte
 * for byte once rounded. Before each step the device gets every running
 * request's block table (paged_device_sync()); every copy-on-write the pool
 * makes is repeated on the device as it is made (BlockPool.on_copy), one
 * contiguous copy per block as on the CPU; PagedAttention on the device
 * reads through the tables, and is tested against paged_attention().
 *
 * ## Where each idea is
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: open, loop, report | chapters/ch04-paged/main.c | main() |
 * | one step: schedule, forward, sample, account, release | chapters/ch04-paged/server.c | paged_step() |
 * | pool, tables and queue for a run; budgets refused | chapters/ch04-paged/server.c | paged_check(), paged_open() |
 * | room for each running request, preemption, admission, forks | chapters/ch04-paged/scheduler.c | paged_schedule() |
 * | decodes first, then prompt chunks within the token budget | chapters/ch04-paged/scheduler.c | schedule_decodes(), schedule_prompt_chunks(), admit_waiting() |
 * | a chunk of a prompt, a logits row only for its last | common/serving/serving.c | serving_feed_upto() |
 * | the budget's rules, the running limit, the scheduler's numbers and report | chapters/ch04-paged/sched.c | paged_sched_check(), paged_sched_open(), paged_sched_report_table() |
 * | swapping blocks out and in, shared blocks once | chapters/ch04-paged/swap.c | swap_out_table(), swap_in_table() |
 * | what recomputing positions costs in FLOPs | chapters/ch04-paged/sched.c | paged_recompute_flops() |
 * | the admission rule with its watermark (lab) | solutions/ch04/paged_can_admit.c | paged_can_admit() |
 * | a block off the free stack (lab) | solutions/ch04/block_pool_alloc.c | block_pool_alloc() |
 * | a holder lets go; double frees refused (lab) | solutions/ch04/block_pool_release.c | block_pool_release() |
 * | the slot mapping: position to (block, row) (lab) | solutions/ch04/block_table_slot.c | block_table_slot() |
 * | copy-on-write of a shared block (lab) | solutions/ch04/block_table_make_writable.c | block_table_make_writable() |
 * | the pool, tables, growth, forks | chapters/ch04-paged/block_pool.c | block_table_grow(), block_table_fork() |
 * | the K/V seam: store into a slot, attend | chapters/ch04-paged/paged_kv.c | paged_store(), paged_attend() |
 * | PagedAttention: attention through the block table (lab) | solutions/ch04/paged_attention.c | paged_attention() |
 * | blocks used, slack, sharing, the breakdown | chapters/ch04-paged/report.c | paged_account() |
 * | beam search: beams fork and share blocks, the best by length-normalised score (`--beam`) | chapters/ch04-paged/beam.c | beam_schedule(), beam_select() |
 * | the chapter's lines of the memory table | chapters/ch04-paged/report.c | paged_report_table() |
 * | the same blocks on the device | chapters/ch04-paged/device.c | paged_device_open(), paged_device_sync() |
 * | a block between the device and the host swap space | chapters/ch04-paged/device.c | paged_device_swap_block() |
 * | `--trace`: each step's changes to the tables and blocks; `--show-tables` | chapters/ch04-paged/trace.c | paged_trace_open(), paged_print_tables() |
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
 * out[i] += a[j] * rows[j][i] for j = 0, 1, ..., n_rows - 1 in turn: the
 * same additions in the same order, so the same bits, as
 * attention_accumulate() called once per row, but each running sum stays in
 * a register over all the rows of a block instead of going through memory
 * once per row (at small head_dim that round trip, not the arithmetic, is
 * what the weighted sum of values costs).
 * @param out       [head_dim] running sums, updated
 * @param a         [n_rows] attention weights
 * @param rows      [n_rows][stride] value rows; the head's slice starts at offset 0
 * @param n_rows    rows to add (0 or more)
 * @param stride    floats between consecutive rows
 * @param head_dim  width
 */
void paged_accumulate_rows(float *out, const float *a, const float *rows, int n_rows, int stride, int head_dim);

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

/** What preemption does with a request's blocks (`--preempt`). */
typedef enum {
    PAGED_PREEMPT_RECOMPUTE, /**< free them; every position is recomputed when it is readmitted (vLLM V1) */
    PAGED_PREEMPT_SWAP       /**< copy them to the host swap space and back when readmitted (vLLM V0's other way) */
} PagedPreemptMode;

/**
 * The swap space of `--preempt swap`: a pool of host blocks of the device
 * pool's size, with its own free stack and reference counts, and for every
 * swapped-out request a table of the host slots that hold its blocks.
 *
 * A block several tables share (forks) is copied out once: the first
 * holder to be swapped out copies it and links the device block to its
 * copy; a later holder whose block is still that exact copy takes one more
 * reference on the slot instead. Coming back in works the same way: the
 * first holder copies the slot into a fresh device block and links the
 * two; the others take a reference on that block. So the sharing, and the
 * reference counts, survive a round trip through the host. A link breaks
 * when either side is freed; a device block written after its copy was
 * taken is no longer that copy (its link stays for coming back in: the
 * write only touches rows the other holders never read).
 *
 * The bytes and these books are charged to kv and kv_metadata at MEM_SWAP:
 * the ledger shows the swap space as a device of its own.
 */
typedef struct {
    int n_slots;             /**< host blocks */
    size_t bytes_per_block;  /**< the pool's: a slot holds one block exactly */
    unsigned char *storage;  /**< [n_slots][bytes_per_block], each slot laid out as a pool block, charged to kv
                                  at MEM_SWAP (NULL: accounting only) */
    int *free_stack;         /**< [n_slots] free slot ids; the next one handed out is at n_free - 1 */
    int n_free;              /**< free slots */
    int *ref_count;          /**< [n_slots] swapped-out tables holding each slot; 0 = free */
    int *tables;             /**< [n_tables][capacity] slot of each logical block of a swapped-out request */
    int *n_blocks;           /**< [n_tables] entries of each table (0: nothing swapped out) */
    int *cached;             /**< [n_tables] positions whose K/V the table holds */
    int n_tables;            /**< requests */
    int capacity;            /**< entries per table: ceil(seq_len / block_size) */
    int *host_copy;          /**< [pool blocks] the slot linked to each device block, or -1 */
    unsigned char *exact;    /**< [pool blocks] 1 while the device block still holds exactly its linked slot's bytes */
    int *device_copy;        /**< [n_slots] the device block linked to each slot, or -1 */
} SwapSpace;

/** Most steps PagedSched.timeline keeps; beyond that it keeps every other one. */
#define PAGED_STEP_SAMPLES 2048

/** One step's size, for the JSON report's step_tokens_timeline. */
typedef struct {
    long step;         /**< the step */
    int tokens;        /**< tokens (batch entries) it ran */
    int prompt_tokens; /**< of which prompt or recomputed positions (the rest: one decode token per request) */
} PagedStepSample;

/**
 * What the scheduler keeps when it is given `--max-num-batched-tokens`,
 * `--max-num-seqs`, `--preempt` or `--swap-space`: the budget's rules, the
 * swap space, and the numbers the report adds. Without any of them
 * PagedServer.sched is NULL, and the chapter allocates, schedules and
 * reports exactly what it did before those options existed.
 */
typedef struct {
    int chunked_prefill;     /**< 1 (--max-num-batched-tokens): the step budget is strict, prompts run in chunks */
    int max_num_seqs;        /**< most requests running at once */
    PagedPreemptMode preempt; /**< recompute or swap */
    int *follows;            /**< [n_reqs] the sample whose prompt this fork waits for while it runs in chunks, or -1 */
    long *first_token_step;  /**< [n_reqs] the step a request sampled its first token in, or -1 */
    long *sorted_steps;      /**< [n_reqs] scratch for the median of the steps to the first token */
    SwapSpace swap;          /**< the host blocks (n_slots 0 without --preempt swap) */
    int max_step_tokens;     /**< most tokens (batch entries) in one step: what the budget bounds */
    long max_step_kv_reads;  /**< most K/V positions attention read in one step: sum over its entries of pos + 1 */
    long steps_mixed;        /**< steps in which decode tokens waited behind prompt (or recomputed) positions */
    int max_prompt_beside_decodes; /**< most prompt positions in a step that also ran decodes */
    long recomputed_tokens;  /**< positions whose K/V a preemption dropped, to be recomputed */
    double recompute_flops;  /**< the forward-pass FLOPs of recomputing them (paged_recompute_flops()) */
    long recompute_blocks;   /**< blocks those preemptions freed (what swapping would have moved each way) */
    long swaps_out;          /**< requests swapped out */
    long swaps_in;           /**< requests swapped back in */
    long swap_blocks_out;    /**< blocks copied to the host (a block shared by several tables: once) */
    long swap_blocks_in;     /**< blocks copied back to the device (likewise) */
    long swapped_tokens;     /**< positions swapped out */
    double swapped_flops;    /**< what recomputing those positions would have cost (paged_recompute_flops()) */
    long swap_fallbacks;     /**< preemptions that recomputed because the swap space was full */
    PagedStepSample timeline[PAGED_STEP_SAMPLES]; /**< step sizes, oldest first (every stride-th step) */
    int timeline_n;          /**< samples kept */
    long timeline_stride;    /**< one step in stride is kept */
    long timeline_steps;     /**< steps offered */
} PagedSched;

/** Beam search state (`--beam`), defined in beam.c; see beam.h. */
typedef struct BeamSearch BeamSearch;

/**
 * What sharing saves, kept with `--n` or `--beam` (NULL otherwise): the
 * blocks the same sequences would hold unshared, at the step of peak use
 * and summed over steps.
 */
typedef struct {
    int saved_at_peak;   /**< logical - physical blocks at the step of peak use */
    int logical_at_peak; /**< blocks the sequences held then, each shared block counted once per holder */
    double logical_sum;  /**< sum over steps of those logical blocks */
    BeamSearch *beam;    /**< --beam: the search (beam.h); NULL with --n */
} PagedSharing;

/** The chapter-4 server: the paged store, the queue and the numbers it reports. */
typedef struct {
    PagedKv kv;               /**< the pool and the block tables (K and V of one token: paged_bytes_per_token()) */
    int watermark_blocks;     /**< free blocks kept back at admission: --watermark % of the pool, rounded down */
    int max_batched_tokens;   /**< token budget of one step: --max-num-batched-tokens, or max(seq_len, 2048) */
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
    PagedSharing *sharing;    /**< --n or --beam: what sharing saves, and the beams; NULL otherwise */
    PagedSched *sched;        /**< the token budget, --max-num-seqs and swapping; NULL without those options */
    const PagedCache *cache;  /**< a cache of K/V above the pool, or NULL (chapter 4) */
} PagedServer;

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
 * length, the block tables, and with the scheduler's options
 * (PagedServer.sched) paged_sched_print_setup()'s line.
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
 * write, preempting the newest when out of blocks: recomputed later, or
 * swapped out), then with a token budget the next chunk of a prompt still
 * being prefilled, then FCFS admission of waiting requests with their
 * prompts (or full recomputation, or what a swap-in leaves to feed), in
 * chunks when a budget is given.
 * @param s    the server
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_schedule(PagedServer *s, ServingRun *run, Err *err);

/**
 * Gives every block a table holds a history for the breakdown (a block
 * already held keeps its own): call after a table grows or forks.
 * @param s  the server
 * @param t  the table
 */
void paged_track_table(PagedServer *s, const BlockTable *t);

/**
 * Makes the slot of @p r's newest token exist and be private (a new block,
 * or a copy of a shared one), all or nothing.
 * @param s  the server
 * @param r  a running request
 * @return 0 on success, -1 when the pool has too few free blocks
 */
int paged_make_room(PagedServer *s, Request *r);

/**
 * Marks @p r running and appends it to the running list (admission order).
 * @param s    the server
 * @param run  the run
 * @param r    a waiting request whose blocks are taken
 */
void paged_start_running(PagedServer *s, ServingRun *run, Request *r);

/**
 * Sends running request @p r back to the queue: its blocks are freed now
 * (their unfilled rows count as reserved for tokens to come) and its
 * prompt and generated tokens are recomputed when it is admitted again.
 * @param s    the server
 * @param run  the run
 * @param r    a running request
 */
void paged_preempt(PagedServer *s, ServingRun *run, Request *r);

/**
 * Lets go of every block @p r's table holds, as when it finishes (its
 * K/V are not needed any more), without changing its phase.
 * @param s    the server
 * @param run  the run
 * @param r    the request
 */
void paged_release_table(PagedServer *s, ServingRun *run, Request *r);

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
 * `--device cuda`: a pool of the same blocks, in the same layout, on the
 * device (device_kv_open_paged()), one block table per request; hooks the
 * pool's on_copy to repeat copy-on-write there. paged_open() calls it.
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
 * The device store of this chapter (chapters/ch04-paged/device.c): the
 * pool's blocks in device memory, [n_blocks][n_layers][2 (K, V)]
 * [block_size][kv_dim] of type @p t, the layout of BlockPool.storage, and
 * a block table per sequence (kept on the host by the chapter, uploaded
 * each step); attention reads through the tables (PagedAttention, one pass
 * or split along long sequences).
 * @param kv          receives the store
 * @param dev         the device
 * @param cfg         model shape
 * @param t           element type of K/V
 * @param n_blocks    blocks in the pool
 * @param block_size  tokens per block, a power of two
 * @param max_seqs    sequence ids are 0..max_seqs-1
 * @param max_tokens  most entries of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_open_paged(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int n_blocks,
                         int block_size, int max_seqs, int max_tokens, Err *err);

/**
 * Sets a sequence's block table in a device store (the blocks holding
 * positions 0.., block_size positions each).
 * @param kv        a store from device_kv_open_paged()
 * @param seq       sequence id
 * @param blocks    [n] block ids
 * @param n         blocks (0: the sequence has none)
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on a bad id or too many blocks
 */
int device_kv_paged_set_table(DeviceKv *kv, int seq, const int *blocks, int n, Err *err);

/**
 * Copies whole blocks (every layer, K and V: one contiguous run each) for
 * copy-on-write, on the device's stream, before the next step reads them.
 * @param kv       a store from device_kv_open_paged()
 * @param pairs    [n][2] (source, destination) block ids (host)
 * @param n        pairs, at most max_seqs
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_paged_copy_blocks(DeviceKv *kv, const int *pairs, int n, Err *err);

/**
 * The pool's bytes on the device: block b is @p block_bytes bytes from
 * block b - 1, laid out as a block of BlockPool.storage
 * ([n_layers][2][block_size][kv_dim]) in the store's K/V type.
 * @param kv           a store from device_kv_open_paged()
 * @param block_bytes  receives the bytes of one block (may be NULL)
 * @return the device address of block 0, or NULL when @p kv is not a paged
 *         store (or the build has no CUDA)
 */
void *device_kv_paged_blocks(const DeviceKv *kv, size_t *block_bytes);

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

/* ------------------------------------------------------------ the scheduler's options (sched.c) */

/**
 * Refuses, before anything is printed, scheduler options that cannot work
 * together: `--max-num-seqs` above `--max-num-batched-tokens` (every running
 * request may need a decode token in the same step, and decodes are never
 * cut: vLLM refuses the same), `--n` samples above `--max-num-seqs` (the
 * samples of a prompt are admitted together), `--swap-space` without
 * `--preempt swap`. paged_check() and paged_open() call it.
 * @param run  the run (its options)
 * @param err  receives one line on failure
 * @return 0 when the options work together, -1 otherwise
 */
int paged_sched_check(const ServingRun *run, Err *err);

/**
 * Makes s->sched when a scheduler option was given (none: leaves it NULL):
 * the budget's rules, the per-request books, and with `--preempt swap`
 * the swap space (swap_space_init(); `--swap-space`, by default as large as
 * the KV budget). paged_open() calls it once the pool exists.
 * @param s    the server (its pool made)
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_sched_open(PagedServer *s, const ServingRun *run, Err *err);

/**
 * The setup line of the scheduler's options (with s->sched only): the
 * budget, whole prompts or chunks, the running limit, how preemption works.
 * @param log   where it goes
 * @param s     the server
 * @param run   the run
 * @param name  the program's name, which starts the line
 */
void paged_sched_print_setup(FILE *log, const PagedServer *s, const ServingRun *run, const char *name);

/**
 * Frees what paged_sched_open() made.
 * @param sc  the scheduler's books, or NULL
 */
void paged_sched_close(PagedSched *sc);

/**
 * The most requests that may run at once: `--max-num-seqs` (by default
 * `--max-num-batched-tokens` when that is given), else every request.
 * @param s    the server
 * @param run  the run
 * @return the limit
 */
int paged_max_running(const PagedServer *s, const ServingRun *run);

/**
 * A step's sizes, once it is scheduled (paged_schedule() calls it): its
 * tokens, the K/V positions its attention reads, and whether decode tokens
 * share it with prompt positions.
 * @param sc   the scheduler's books
 * @param run  the run, this step planned
 */
void paged_sched_note_step(PagedSched *sc, const ServingRun *run);

/**
 * After sampling: the step in which each request took its first token.
 * @param s    the server
 * @param run  the run
 */
void paged_sched_note_tokens(PagedServer *s, const ServingRun *run);

/**
 * What recomputing the K/V of positions 0..n_positions-1 costs in the
 * forward pass: for every position, 2 FLOPs per weight of the layers'
 * projections (Wq, Wk, Wv, Wo, W1, W2, W3; the classifier is left out, as
 * a swapped-in request computes the same logits row), plus attention, 4 x
 * dim FLOPs per layer for every position it reads (the scores and the
 * weighted sum of values over positions 0..p). Norms, RoPE and softmax
 * (a few FLOPs per element) are left out.
 * @param c            the model's shape
 * @param n_positions  positions recomputed
 * @return FLOPs
 */
double paged_recompute_flops(const ModelConfig *c, long n_positions);

/**
 * Steps to the first token over the requests that took one: from the step
 * it arrived at to the step that sampled its first token, both counted (1:
 * its first step).
 * @param s       the server (with s->sched)
 * @param run     the finished run
 * @param min     receives the fewest
 * @param median  receives the median (the mean of the middle two for an even count)
 * @param max     receives the most
 * @return how many requests took a first token
 */
int paged_first_token_steps(const PagedServer *s, const ServingRun *run, long *min, double *median, long *max);

/**
 * The scheduler's lines of the memory table (with s->sched only): the
 * budget and what it did to the steps, steps to the first token, and the
 * preemptions with their cost: bytes a swap moved against FLOPs a
 * recomputation spent or would have spent.
 * @param f    stream
 * @param s    the server
 * @param run  the finished run
 */
void paged_sched_report_table(FILE *f, const PagedServer *s, const ServingRun *run);

/**
 * The scheduler's JSON keys (with s->sched only): max_num_batched_tokens,
 * chunked_prefill, max_num_seqs, preempt, max_step_tokens,
 * max_step_kv_reads, steps_decodes_behind_prompt,
 * max_prompt_tokens_beside_decodes, first_token_steps {min, median, max},
 * step_tokens_timeline ([step, tokens, prompt tokens] per kept step),
 * swap_space_blocks, swaps_out, swaps_in, swap_blocks_out, swap_blocks_in,
 * swap_bytes_out, swap_bytes_in, swap_fallbacks, recomputed_tokens,
 * recompute_flops, swapped_tokens, swapped_tokens_recompute_flops,
 * recompute_blocks.
 * @param j    the writer (inside the report object)
 * @param s    the server
 * @param run  the finished run
 */
void paged_sched_report_json(JsonWriter *j, const PagedServer *s, const ServingRun *run);

/* ------------------------------------------------------------ the swap space (swap.c) */

/**
 * Makes a swap space of @p n_slots host blocks of @p p's block size, every
 * slot free, and an empty table per request.
 * @param sw            receives the swap space
 * @param p             the device pool it backs
 * @param n_slots       host blocks, at least 1
 * @param n_tables      requests
 * @param capacity      entries per table
 * @param with_storage  1: allocate the bytes (MEM_KV at MEM_SWAP); 0: accounting only
 * @param err           receives the reason on failure
 * @return 0 on success, -1 on failure (free it with swap_space_free() either way)
 */
int swap_space_init(SwapSpace *sw, const BlockPool *p, int n_slots, int n_tables, int capacity, int with_storage,
                    Err *err);

/**
 * Frees the swap space.
 * @param sw  an initialised or zeroed swap space
 */
void swap_space_free(SwapSpace *sw);

/**
 * Host slots a swap-out of @p t would take: one for each block without an
 * exact copy on the host already.
 * @param sw  the swap space
 * @param t   the table to swap out
 * @return slots needed
 */
int swap_slots_needed(const SwapSpace *sw, const BlockTable *t);

/**
 * Fresh device blocks a swap-in of request @p seq would take: one for each
 * of its slots not linked to a device block any more.
 * @param sw   the swap space
 * @param seq  a swapped-out request
 * @return blocks needed
 */
int swap_blocks_needed(const SwapSpace *sw, int seq);

/**
 * Swaps a table out: every block goes to a host slot (copied, or a
 * reference on the exact copy already there), the table lets go of its
 * device blocks (@p on_free hears of each that becomes free), and request
 * @p seq's host table remembers the slots and @p n_cached. The caller has
 * checked swap_slots_needed() against sw->n_free.
 * @param sw        the swap space
 * @param p         the device pool
 * @param t         request @p seq's block table (emptied)
 * @param seq       the request
 * @param n_cached  positions whose K/V the blocks hold
 * @param run       where the bytes are (run->device: copies on the device's stream)
 * @param on_free   called with each device block that becomes free (may be NULL)
 * @param ctx       passed to @p on_free
 * @param copies    receives the blocks copied (blocks that were already on the host cost none)
 * @param err       receives the reason when a device copy fails
 * @return 0 on success, -1 on failure
 */
int swap_out_table(SwapSpace *sw, BlockPool *p, BlockTable *t, int seq, int n_cached, ServingRun *run,
                   void (*on_free)(void *ctx, int block), void *ctx, int *copies, Err *err);

/**
 * Swaps request @p seq back in: each slot becomes a device block again
 * (copied into a fresh block, or a reference on the block it is still
 * linked to), the slots are let go, and the request's n_cached comes back.
 * The caller has checked swap_blocks_needed() against the free blocks.
 * @param sw      the swap space
 * @param p       the device pool
 * @param t       the request's (empty) block table
 * @param r       the request
 * @param run     where the bytes go
 * @param copies  receives the blocks copied
 * @param err     receives the reason when a device copy fails
 * @return 0 on success, -1 on failure
 */
int swap_in_table(SwapSpace *sw, BlockPool *p, BlockTable *t, Request *r, ServingRun *run, int *copies, Err *err);

/**
 * A device block is about to be written: it no longer holds exactly its
 * linked slot's bytes.
 * @param sw     the swap space
 * @param block  the block
 */
void swap_note_write(SwapSpace *sw, int block);

/**
 * A device block became free: its link goes.
 * @param sw     the swap space
 * @param block  the block
 */
void swap_forget_block(SwapSpace *sw, int block);

/**
 * `--device cuda`: copies one whole block between the device pool and a
 * host buffer, on the device's stream, in the host pool's layout
 * [n_layers][2 (K, V)][block_size][kv_dim] of the device's element type,
 * which is the device block's layout too: one copy of bytes_per_block.
 * Stream order puts the copy after every kernel that
 * wrote the block and before any that reads it or writes it again.
 * @param run        the run (run->device set, the device pool open)
 * @param block      device block
 * @param host       [bytes_per_block] host buffer
 * @param to_device  1: host to device (swap in); 0: device to host (swap out)
 * @param err        receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_device_swap_block(ServingRun *run, int block, void *host, int to_device, Err *err);

/* ------------------------------------------------------------ watching the steps (trace.c) */

/**
 * What watches the steps for `--trace` and `--show-tables`: the run's
 * observer (ServingRun.observe), called after each step's accounting and
 * before finished requests let go of their blocks, and owned by the run
 * (ServingRun.observe_free), so that the server itself is not one byte
 * larger for it. For the trace it keeps a copy of what the last line said
 * (every block table, every request's cached positions, every block's
 * holders and filled rows) and writes only what changed. It listens to the
 * pool's copies (BlockPool.on_copy, passed on to the listener that was
 * there) to name copy-on-write in the events.
 *
 * A chapter built on this server can add members to every step's line
 * with @p extra (its own cache's view, say): paged_trace_of() finds the
 * watcher of a run.
 */
typedef struct PagedTrace {
    const PagedServer *server; /**< the server watched (not used after paged_close()) */
    long show_step;           /**< --show-tables: the step whose tables are printed, or -1 */
    FILE *show;               /**< where they go */
    int shown;                /**< 1 once they were printed */
    int *tables;              /**< [n_reqs][capacity] every block table as the last line left it */
    int *table_len;           /**< [n_reqs] entries of each */
    int *cached;              /**< [n_reqs] positions with K/V, as the last line said */
    int *slots;               /**< [n_reqs] host slots held in the swap space (swapped out), as the last line said */
    int *refs;                /**< [n_blocks] holders of each block, as the last line said */
    int *rows;                /**< [n_blocks] rows filled in each block, as the last line said */
    int *copy_dst;            /**< [n_blocks] this step's block copies: destination */
    int *copy_src;            /**< [n_blocks] and source */
    int n_copies;             /**< copies this step */
    int *map_index;           /**< [max(n_reqs, n_blocks)] scratch for a delta's indexes */
    long *map_value;          /**< [max(n_reqs, n_blocks)] and values */
    void (*prev_observe)(void *ctx, const ServingRun *run); /**< the observer that was there, called after */
    void *prev_observe_ctx;   /**< its context */
    void (*prev_observe_free)(void *ctx); /**< and what freed it */
    void (*prev_on_copy)(void *ctx, int dst, int src); /**< the pool's copy listener that was there (the device) */
    void *prev_on_copy_ctx;   /**< its context */
    /**
     * Optional (NULL: none): adds members to every step's line, after the
     * chapter's own.
     * @param ctx  extra_ctx
     * @param j    the writer, inside the step's object
     * @param run  the run
     */
    void (*extra)(void *ctx, JsonWriter *j, const ServingRun *run);
    void *extra_ctx;          /**< passed to extra */
} PagedTrace;

/**
 * With `--trace` (run->trace) or `--show-tables`: makes the watcher,
 * writes the trace's setup line (the pool, the block size, the requests)
 * and becomes the run's observer (the run frees it). Without either it
 * does nothing. paged_open() calls it last.
 * @param s    the server (open)
 * @param run  the run
 * @param log  where `--show-tables` prints (NULL: stderr)
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int paged_trace_open(PagedServer *s, ServingRun *run, FILE *log, Err *err);

/**
 * The watcher paged_trace_open() made for a run.
 * @param run  the run
 * @return it, or NULL without `--trace` and `--show-tables`
 */
PagedTrace *paged_trace_of(const ServingRun *run);

/**
 * `--show-tables`: every request that holds blocks, with its block table
 * (`request 0: prompt 5, tokens 53, cached 52, table [0, 44, 52, 19]`;
 * a block that several tables hold is marked with its holders, `7(x2)`),
 * those swapped out, and the pool's totals.
 * @param f    the stream
 * @param s    the server
 * @param run  the run, after a step's accounting
 */
void paged_print_tables(FILE *f, const PagedServer *s, const ServingRun *run);

#endif
