/**
 * @file batching.h
 * @brief Chapter 3: static batching with a contiguous K/V region reserved
 *        per request.
 *
 * Running one request at a time leaves the hardware idle: a decode step
 * reads every weight to produce one token. Batching runs many requests in
 * one forward step, so each weight is read once for all of them. Before
 * paging, a server did it the way FasterTransformer did:
 *
 * 1. **Admit** waiting requests in file order (first come, first served)
 *    while the batch has room (`--max-batch`) and each one's reservation
 *    fits in the KV arena (kv_arena.h). The first request that does not fit
 *    stops admission: nobody overtakes it, so long requests cannot starve.
 *    The log says why it waits.
 * 2. **Prefill** every prompt of the new batch in its first step, as one
 *    flat forward batch.
 * 3. **Decode** one token per running request per step, until every request
 *    of the batch has finished. A request that finishes early keeps its
 *    reservation until the batch ends (its slot in the batch's tensors
 *    cannot be reused until then).
 * 4. **Release** every region at once, and go back to 1.
 *
 * A request whose largest possible region does not fit the whole budget can
 * never run: it is rejected up front (`finish: rejected`, with the reason).
 * When no request fits, the budget itself is refused.
 *
 * ## Region layout
 *
 * A region of `tokens` positions is one contiguous piece of the arena laid
 * out `[n_layers][2 (K, V)][tokens][kv_dim]` floats: the keys of one layer
 * are rows 0..tokens-1, exactly as in a single-request cache, so attention
 * reads them with the same code and the same summation order as chapters 1
 * and 2, and every request's greedy tokens equal its solo tokens.
 *
 * ## Growing (`--reserve grow`)
 *
 * A region that is full is **moved**: a region of twice the size is taken
 * first fit, the K/V of the positions stored so far are copied over, and
 * the old region is freed (cudaMalloc, copy, cudaFree). The old and the new
 * region exist at the same time, so a growth can fail although the request
 * alone would fit. When a growth fails the batch makes room, always at the
 * expense of the newest requests, never the older ones:
 *
 * - the most recently admitted running request of the batch that is newer
 *   than the growing one is **requeued**: its region is freed, it waits for
 *   a later batch, and its K/V are recomputed from its tokens then (they are
 *   not lost: prompt and generated tokens are kept). Repeat until the growth
 *   fits;
 * - when no newer running request is left, the growing request requeues
 *   itself.
 *
 * This guarantees progress. The oldest running request only ever requeues
 * itself when it is the only one left running; the batch then ends, and the
 * next batch starts with it (it is the first waiting request in file
 * order) in an empty arena, with a region that holds its tokens and the
 * next one, so it produces at least one token per batch. Every requeue is
 * counted and reported, with the positions it costs to recompute.
 *
 * ## External fragmentation, precisely
 *
 * At a step where a placement (an admission or a growth) is refused
 * although the arena's free bytes add up to at least what was asked, the
 * free bytes in holes smaller than the request are external fragmentation
 * for that one step (kv_arena_free_in_holes_below()). The first such
 * refusal of a step counts; a step without one adds nothing. Free memory
 * that nobody was refused is idle, not fragmented; the table reports it
 * separately. In this chapter every batch starts from an empty arena, so
 * only `grow` fragments it (the regions of one batch are laid out back to
 * back otherwise).
 *
 * ## Accounting-only mode
 *
 * With run->no_kv_storage set, the chapter keeps all its books (arena,
 * regions, tracks, moves, bytes copied) but allocates no K/V bytes and
 * copies none: kvsim drives it at real-model scale.
 *
 * ## On the device
 *
 * With `--device cuda` the chapter runs in that mode too, and its K/V
 * bytes live in a device arena of token slots (batching_device_open()):
 * the region at byte offset o of the books is the slots from
 * o / bytes_per_token on, and every move the books make is repeated on the
 * device through the on_move hook, in the order the books made it.
 *
 * The functions below are the chapter's lab (solutions/ch03/batching.c),
 * with the allocator and the reservation policies of kv_arena.h
 * (solutions/ch03/kv_arena.c).
 */
#ifndef KVLAB_CH03_BATCHING_H
#define KVLAB_CH03_BATCHING_H

#include <stdio.h>

#include "kv_arena.h"
#include "serving.h"

/** Where one request's K/V live. */
typedef struct {
    size_t offset; /**< first byte in the arena */
    int tokens;    /**< positions the region holds; 0: no region */
} KvRegion;

/** What the batching did, for the memory table and the tests. */
typedef struct {
    long batches;                  /**< batches started */
    int largest_batch;             /**< most requests admitted into one batch */
    long reservations;             /**< regions reserved at admission */
    double reserved_tokens_sum;    /**< their sizes summed, in positions */
    long grow_moves;               /**< regions moved to a larger hole */
    double grow_bytes_copied;      /**< K/V bytes those moves copied */
    long requeues;                 /**< requests sent back to the queue to make room */
    long positions_recomputed;     /**< K/V positions those requeues threw away */
    long refusals_no_space;        /**< placements refused: not enough free bytes in total */
    long refusals_fragmentation;   /**< placements refused although enough bytes were free */
    long external_steps;           /**< steps that counted external fragmentation */
    int max_holes;                 /**< most holes in the arena after a step */
    double free_fraction_sum;      /**< sum over steps of free bytes / budget */
    double reserved_sum;           /**< sum over steps of bytes in regions */
    double finished_held_sum;      /**< of which in regions of requests that had finished */
    long steps;                    /**< steps accounted */
} BatchingStats;

/** The chapter's state between steps. */
typedef struct {
    ReservePolicy policy;     /**< --reserve */
    int max_batch;            /**< --max-batch */
    ModelConfig cfg;          /**< shape of the model (seq_len, layers, kv_dim) */
    size_t bytes_per_token;   /**< K and V of one position in all layers (run->kv_bytes_per_token) */
    KvArena arena;            /**< the KV budget's books */
    float *storage;           /**< [arena.capacity / 4] the K/V bytes; NULL in accounting-only mode */
    KvRegion *regions;        /**< [n_reqs] each request's region */
    int *batch;               /**< [max_batch] request indexes of the current batch, in admission order */
    int n_batch;              /**< requests admitted into the current batch (some may have left) */
    size_t step_external;     /**< external fragmentation seen this step, bytes */
    int step_external_seen;   /**< 1 once this step has counted its refusal */
    BatchingStats stats;      /**< what happened so far */
    FILE *log;                /**< where refusals and batches are told (NULL: quiet) */
    long log_lines;           /**< lines told so far */
    char last_refusal[256];   /**< the latest "request N waits/cannot grow: ..." line */
    Err fault;                /**< a bookkeeping error seen in a hook that cannot return one (empty: none) */
    /**
     * Told of every move that copies K/V (positions 0..n_pos-1 from one
     * region to the other), while both regions exist; NULL: nobody
     * listens. The device store repeats the copy (batching_device_open()).
     */
    void (*on_move)(void *ctx, const KvRegion *from, const KvRegion *to, int n_pos);
    void *on_move_ctx;        /**< passed to on_move */
} BatchingState;

/** Most log lines about refusals and requeues; later ones are only counted. */
#define BATCHING_LOG_LIMIT 200

/**
 * The chapter as the serving loop sees it (name, options, hooks).
 * @return a static chapter
 */
const ServingChapter *batching_chapter(void);

/**
 * Refuses a run that can never work, before anything is printed: an
 * unknown policy, a budget that holds no request's reservation, a budget
 * larger than this machine's memory (unless accounting only).
 * @param run  an initialised run (requests encoded)
 * @param err  receives the reason
 * @return 0 when the run can go ahead, -1 otherwise
 */
int batching_check(const ServingRun *run, Err *err);

/**
 * Gives @p r a region of @p tokens positions, first fit. On refusal, says
 * why in b->last_refusal (and on the log), counts it, and measures external
 * fragmentation when the free total was enough.
 * @param b       the chapter
 * @param run     the run
 * @param r       a request without a region
 * @param tokens  positions to reserve
 * @return 0 when placed, -1 when no hole is large enough
 */
int batching_place(BatchingState *b, ServingRun *run, Request *r, int tokens);

/**
 * Starts a batch: admits waiting requests in file order while the batch has
 * room and their reservation fits; stops at the first that does not fit
 * (the chapter's lab).
 * @param b    the chapter, with no request running
 * @param run  the run
 * @return requests admitted
 */
int batching_admit(BatchingState *b, ServingRun *run);

/**
 * Under `grow`: moves every running request whose region is full to a
 * larger one, oldest first; when a move is refused, requeues the newest
 * requests as described in batching.h.
 * @param b    the chapter
 * @param run  the run
 * @param err  receives the reason on a bookkeeping failure
 * @return 0 on success, -1 on failure
 */
int batching_make_room(BatchingState *b, ServingRun *run, Err *err);

/**
 * Sends a running request back to the queue: frees its region (its track
 * closes as a preemption) and marks it for recomputation.
 * @param b    the chapter
 * @param run  the run
 * @param r    a running member of the batch
 * @param why  which request it makes room for (for the log)
 * @param err  receives the reason on a bookkeeping failure
 * @return 0 on success, -1 on failure
 */
int batching_requeue(BatchingState *b, ServingRun *run, Request *r, const Request *why, Err *err);

/**
 * Ends the current batch: every region still held is released and its
 * track closed at the request's final length.
 * @param b    the chapter
 * @param run  the run
 * @param err  receives the reason on a bookkeeping failure
 * @return 0 on success, -1 on failure
 */
int batching_end(BatchingState *b, ServingRun *run, Err *err);

/**
 * Plans one step (ServingChapter.schedule): starts a batch when none is
 * running, makes room, feeds every running request of the batch.
 * @param ctx  the BatchingState
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int batching_schedule(void *ctx, ServingRun *run, Err *err);

/**
 * ServingChapter.finished: ends the batch when its last request finished.
 * @param ctx  the BatchingState
 * @param run  the run
 * @param r    the request that finished
 */
void batching_finished(void *ctx, ServingRun *run, Request *r);

/**
 * The K/V seam: keeps a token's key and value in row e->pos of its
 * request's region.
 * @param ctx    the BatchingState
 * @param layer  layer index
 * @param e      the token (e->seq is the request index)
 * @param k      [kv_dim] key, RoPE applied
 * @param v      [kv_dim] value
 */
void batching_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v);

/**
 * The K/V seam: causal attention of one query head over positions
 * 0..e->pos of the request's region.
 * @param ctx     the BatchingState
 * @param layer   layer index
 * @param e       the querying token
 * @param head    query head (reads KV head head / kv_mul)
 * @param q       [head_dim] query
 * @param out     [head_dim] receives the output
 * @param scores  [seq_len] scratch
 */
void batching_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                     float *scores);

/**
 * ServingChapter.device_open (`--device cuda`): an arena of token slots on
 * the device (device_kv_open_arena()), one slot per bytes_per_token of the
 * books' arena; hooks on_move to repeat every move there, and sets a sync
 * that places every request's region before each step
 * (device_kv_arena_place()).
 * @param ctx              the BatchingState
 * @param run              the run (accounting only)
 * @param dev              the device
 * @param kv_type          element type of the stored K/V
 * @param max_step_tokens  most entries of a step
 * @param d                receives the sync hook; d->kv is opened
 * @param err              receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int batching_device_open(void *ctx, ServingRun *run, const Device *dev, Dtype kv_type, int max_step_tokens,
                         ServingDeviceKv *d, Err *err);

/**
 * Keys (@p which 0) or values (1) of @p layer in a region: the start of its
 * [tokens][kv_dim] rows.
 * @param b      the chapter (with storage)
 * @param reg    the region
 * @param layer  layer index
 * @param which  0 for K, 1 for V
 * @return [tokens][kv_dim]
 */
float *batching_plane(const BatchingState *b, const KvRegion *reg, int layer, int which);

#endif
