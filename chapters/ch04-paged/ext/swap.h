/**
 * @file swap.h
 * @brief Chapter 4 extension: preemption by swapping, a host swap space
 *        for the blocks of preempted requests.
 *
 * **Adds** a second way to preempt. The core frees a preempted request's
 * blocks and recomputes its positions when it comes back; with this
 * extension its blocks are copied to a pool of host blocks instead and
 * copied back when it is readmitted (vLLM V0's other way), and the report
 * sets the bytes that moved against the FLOPs a recomputation would have
 * spent (paged_recompute_flops()).
 *
 * **Turned on by** `--preempt swap` (`--swap-space SIZE`: the host
 * blocks, by default as many bytes as the KV budget). It is part of the
 * token budget's scheduler: ext/budget.c opens it (swap_open()) and calls
 * it when it preempts (swap_out_request()) and admits (swap_in_request()).
 *
 * **Taught in** book/ch04-paged.md, "Extension: swapping instead of
 * recomputing".
 *
 * **Where the core calls it**: never by name. budget_open() opens it
 * (swap_open()), which fills in the server's hooks (PagedHooks):
 * block_freed (swap_forget_block(), as a table lets a block go in
 * scheduler.c) and preemption_note (swap_preemption_note(), for the
 * report's preemption line).
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
#ifndef KVLAB_CH04_SWAP_H
#define KVLAB_CH04_SWAP_H

#include "paged.h"

/**
 * The swap space: a pool of host blocks of the device pool's size, with
 * its own free stack and reference counts, for every swapped-out request a
 * table of the host slots that hold its blocks, and what swapping did.
 */
struct SwapSpace {
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
    long swaps_out;          /**< requests swapped out */
    long swaps_in;           /**< requests swapped back in */
    long swap_blocks_out;    /**< blocks copied to the host (a block shared by several tables: once) */
    long swap_blocks_in;     /**< blocks copied back to the device (likewise) */
    long swapped_tokens;     /**< positions swapped out */
    double swapped_flops;    /**< what recomputing those positions would have cost (paged_recompute_flops()) */
    long swap_fallbacks;     /**< preemptions that recomputed because the swap space was full */
};

/**
 * Whether the options ask for swapping.
 * @param o  the options
 * @return 1 with `--preempt swap`
 */
int swap_wanted(const CliOptions *o);

/**
 * Refuses, before anything is printed, a swap space that holds no block,
 * more than a slot id names, or (with bytes to hold) more than the
 * machine's memory.
 * @param run  the run (its options)
 * @param err  receives one line on failure
 * @return 0 when it can be made, -1 otherwise
 */
int swap_check(const ServingRun *run, Err *err);

/**
 * Makes s->swap (`--swap-space`, by default as large as the KV budget)
 * for the server's pool. ext/budget.c calls it once the pool exists.
 * @param s    the server (its pool made)
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int swap_open(PagedServer *s, const ServingRun *run, Err *err);

/**
 * Frees s->swap (none: nothing).
 * @param s  the server
 */
void swap_close(PagedServer *s);

/**
 * Preempting @p r: its blocks go to the host (one copy per block, shared
 * blocks once) and its table lets go of them, unless the swap space has
 * too few free slots. The caller then sends it back to the queue
 * (paged_preempt(), which finds the table empty).
 * @param s    the server (s->swap set)
 * @param run  the run
 * @param r    a running request with positions cached
 * @param err  receives the reason when a device copy fails
 * @return 1 when swapped, 0 when the swap space is full (r is recomputed), -1 on failure
 */
int swap_out_request(PagedServer *s, ServingRun *run, Request *r, Err *err);

/**
 * Admitting @p r, whose blocks wait in the swap space: they come back into
 * its (empty) table, with its cached positions.
 * @param s    the server (s->swap set)
 * @param run  the run
 * @param r    a waiting, swapped-out request
 * @param err  receives the reason when a device copy fails
 * @return 0 on success, -1 on failure
 */
int swap_in_request(PagedServer *s, ServingRun *run, Request *r, Err *err);

/**
 * Whether request @p i's blocks wait in the swap space.
 * @param s  the server
 * @param i  a request
 * @return 1 or 0 (always 0 without s->swap)
 */
int swap_is_out(const PagedServer *s, int i);

/**
 * Free blocks admitting swapped-out request @p i takes for positions up
 * to @p end: its slots that come back as fresh blocks, new blocks past
 * them, and a copy when the block holding @p start is still shared.
 * @param s      the server
 * @param i      a swapped-out request
 * @param start  its cached positions (the first one fed)
 * @param end    one past the last position fed
 * @return blocks
 */
int swap_blocks_to_admit(const PagedServer *s, int i, int start, int end);

/**
 * Positions @p start .. @p end - 1 of table @p t are about to be written:
 * a copy that was exact is not any more.
 * @param s      the server (s->swap set)
 * @param t      the table
 * @param start  first position
 * @param end    one past the last
 */
void swap_note_writes(PagedServer *s, const BlockTable *t, int start, int end);

/**
 * The preemption line's note in the report, with swapping on.
 * @return a static string
 */
const char *swap_preemption_note(void);

/**
 * The setup line's end: how many host blocks, how many bytes.
 * @param log  where it goes
 * @param sw   the swap space
 */
void swap_print_setup(FILE *log, const SwapSpace *sw);

/**
 * The swap lines of the scheduler's part of the memory table: requests
 * out and in, fallbacks, the blocks moved and what recomputing would have
 * cost.
 * @param f  stream
 * @param s  the server (s->swap set)
 */
void swap_report_table(FILE *f, const PagedServer *s);

/**
 * The swap keys of the JSON report (zeros without s->swap): swap_space_blocks,
 * swaps_out, swaps_in, swap_blocks_out, swap_blocks_in, swap_bytes_out,
 * swap_bytes_in, swap_fallbacks, swapped_tokens,
 * swapped_tokens_recompute_flops.
 * @param j  the writer
 * @param s  the server
 */
void swap_report_json(JsonWriter *j, const PagedServer *s);

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

/* ------------------------------------------------------------ the swap space itself */

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

#endif
