/**
 * @file batching.h
 * @brief Chapter 3: batching with a contiguous K/V region reserved per
 *        request, static (FasterTransformer) or continuous (Orca).
 *
 * Running one request at a time leaves the hardware idle: a decode step
 * reads every weight to produce one token. Batching runs many requests in
 * one forward step, so each weight is read once for all of them. Before
 * paging, a server did it the way FasterTransformer did (`--batching
 * static`, the default):
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
 * ## Continuous batching with reservations (`--batching continuous`)
 *
 * Orca (Yu et al., OSDI 2022) schedules at every iteration instead, and the
 * PagedAttention paper's baselines (Orca-Max, Orca-Pow2, Orca-Oracle) are
 * Orca with exactly these reservations. Two things change, nothing else:
 *
 * - **when regions are released**: a request's region is freed in the step
 *   it finishes (batching_finished()), not when its batch ends;
 * - **when admission runs**: at every step, after the running requests have
 *   their room, while the batch has room and the head of the queue fits
 *   (same batching_admit(), same first come, first served); the prompts of
 *   the requests admitted run in the same forward step as the decodes of
 *   the running ones. A step that had to requeue somebody to make room
 *   admits nobody (the arena is short; admitting would only requeue again;
 *   chapter 4 and vLLM do the same), unless nobody is left running.
 *
 * Every reservation is still made in full at admission, so continuous
 * batching frees the memory of finished requests but none of the
 * reservation waste. And regions now come and go at different times, so the
 * arena fragments under every policy, not only under `grow`.
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
 * This guarantees progress, in both batchings. The invariant: every
 * running request comes before every waiting one in file order, and the
 * batch lists the running ones in file order. Admission keeps it (it takes
 * the first waiting requests, in order, and appends them); a requeue keeps
 * it (the victim is always the last running request: the newest, or the
 * grower when nobody newer runs); finishing and arriving keep it. So the
 * oldest running request is the head of everybody unfinished. Nobody
 * requeues it to make room (victims are newer than the grower); it
 * requeues itself only when it is the only one left running. Then nobody
 * runs, so the arena is empty (continuous batching has released every
 * finished region; static batching ends the batch), and admission runs at
 * once, in the same step: the request is the first waiting one, and its
 * region (its tokens and the next one, rounded up to a power of two) is at
 * most its largest region, which fits the budget (or it would have been
 * rejected). So the oldest request produces a token at every step, and
 * finishes. Every requeue is counted and reported, with the positions it
 * costs to recompute.
 *
 * ## External fragmentation, precisely
 *
 * At a step where a placement (an admission or a growth) is refused
 * although the arena's free bytes add up to at least what was asked, the
 * free bytes in holes smaller than the request are external fragmentation
 * for that one step (kv_arena_free_in_holes_below()). The first such
 * refusal of a step counts; a step without one adds nothing. Free memory
 * that nobody was refused is idle, not fragmented; the table reports it
 * separately. A static batch starts from an empty arena, so there only
 * `grow` fragments it (the regions of one batch are laid out back to back
 * otherwise); under continuous batching a request that waits at the head of
 * the queue is tried again at every step, and every step it is refused by
 * fragmentation counts.
 *
 * ## The step's token capacity
 *
 * open() sizes a step for the sum of the --max-batch largest max_tokens,
 * and never more positions than the arena holds. That bounds every step of
 * both batchings, prefills and decodes mixed: a step feeds only running
 * requests (at most --max-batch), each at most its n_tokens - n_cached <=
 * max_tokens positions; and each fed position lies in its request's region
 * (feed checks it), and the regions are disjoint pieces of the arena.
 *
 * ## Accounting-only mode
 *
 * With run->no_kv_storage set, the chapter keeps all its books (arena,
 * regions, tracks, moves, bytes copied) but allocates no K/V bytes and
 * copies none: kvsim drives it at real-model scale.
 *
 * ## Where each idea is
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: open, loop, report | chapters/ch03-batching/main.c | main() |
 * | one step: schedule, forward, sample, account, release | chapters/ch03-batching/server.c | batching_step() |
 * | the arena for a run; budgets refused; the step's size | chapters/ch03-batching/server.c | batching_check(), batching_open() |
 * | when admission runs, growth, requeues, the batch's end | chapters/ch03-batching/batching.c | batching_schedule(), batching_make_room(), batching_finished() |
 * | whom to admit: first come, first served (lab) | solutions/ch03/batching_admit.c | batching_admit() |
 * | where a region goes, and why it does not fit | chapters/ch03-batching/regions.c | batching_place(), batching_refused() |
 * | how much each policy reserves (lab) | solutions/ch03/reserve_initial_tokens.c | reserve_initial_tokens() |
 * | the policies' names, growth sizes | chapters/ch03-batching/reserve.c | reserve_policy_parse(), reserve_grown_tokens() |
 * | first fit: where a region goes (lab) | solutions/ch03/kv_arena_alloc.c | kv_arena_alloc() |
 * | a freed region merges with its neighbours (lab) | solutions/ch03/kv_arena_release.c | kv_arena_release() |
 * | the arena's holes, largest regions | chapters/ch03-batching/kv_arena.c | kv_arena_init(), reserve_largest_tokens() |
 * | the K/V seam: a request's rows in its region | chapters/ch03-batching/batching.c | batching_store(), batching_attend() |
 * | the breakdown, fragmentation, the memory table | chapters/ch03-batching/server.c | batching_account(), batching_report_table() |
 *
 * ## The extensions
 *
 * Three later features are extensions in chapters/ch03-batching/ext/, each
 * turned on by its option. An extension calls the core; the core calls it
 * only through one guarded, named call (`--arena buddy`, run->device, the
 * trace's options), where its header says.
 *
 * | extension: what it adds | option | the core calls it, guarded |
 * |---|---|---|
 * | ext/buddy.c, ext/buddy_arena.c: power-of-two blocks and their buddies instead of first fit; the rounding counts as internal fragmentation | `--arena buddy` | arena_ops() (regions.c): buddy_arena_ops(), the allocator's operations (::ArenaOps) in place of first fit's |
 * | ext/trace.c: each step's changes to the regions; the regions after one step | `--trace`, `--show-tables` | batching_open(): batching_trace_open() |
 * | ext/device.c: the same arena on the device; moves repeated there | `--device cuda` | batching_open(): batching_device_open(); batching_step(): batching_device_sync() |
 */
#ifndef KVLAB_CH03_BATCHING_H
#define KVLAB_CH03_BATCHING_H

#include <stdio.h>

#include "kv_arena.h"
#include "serving.h"

/* The buddy arena's books (ext/buddy.h), when `--arena buddy` asks for them. */
typedef struct BuddyArena BuddyArena;

/** Where one request's K/V live. */
typedef struct {
    size_t offset; /**< first byte in the arena */
    int tokens;    /**< positions the region holds; 0: no region */
    int slots;     /**< positions of arena it takes: tokens with first fit, the power of two above with `--arena buddy` */
} KvRegion;

/** Which allocator hands out the regions (`--arena`). */
typedef enum {
    ARENA_FIRST_FIT, /**< kv_arena.h: exact sizes, first fit, any neighbouring holes merge (the default) */
    ARENA_BUDDY      /**< buddy.h: blocks of a power of two of positions, merged only with their buddy */
} ArenaKind;

/** When admission runs and regions are released (`--batching`). */
typedef enum {
    BATCHING_STATIC,    /**< a batch runs until its last request finishes (FasterTransformer) */
    BATCHING_CONTINUOUS /**< regions freed when a request finishes, admission at every step (Orca) */
} BatchingMode;

/** What the batching did, for the memory table and the tests. */
typedef struct {
    long batches;                  /**< batches started in an empty arena (continuous: after the batch emptied) */
    int largest_batch;             /**< most requests in the batch at once */
    long joined_running;           /**< admissions into a batch that was running (continuous only) */
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
    BatchingMode mode;        /**< --batching */
    int max_batch;            /**< --max-batch */
    ModelConfig cfg;          /**< shape of the model (seq_len, layers, kv_dim) */
    size_t bytes_per_token;   /**< K and V of one position in all layers (run->kv_bytes_per_token) */
    KvArena arena;            /**< the KV budget's books (capacity always; the holes with first fit) */
    float *storage;           /**< [arena.capacity / 4] the K/V bytes; NULL in accounting-only mode */
    KvRegion *regions;        /**< [n_reqs] each request's region */
    int *batch;               /**< [max_batch] request indexes of the current batch, in admission order */
    int n_batch;              /**< members of the batch: running, or finished and still holding a region (static) */
    int step_external_seen;   /**< 1 once this step has counted its refusal */
    size_t step_external;     /**< external fragmentation seen this step, bytes */
    BuddyArena *buddy;        /**< --arena buddy (ext/buddy_arena.h): the books in positions (slot i is bytes i x bytes_per_token on); NULL with first fit */
    BatchingStats stats;      /**< what happened so far */
    FILE *log;                /**< where refusals and batches are told (NULL: quiet) */
    long log_lines;           /**< lines told so far */
    char last_refusal[256];   /**< the latest "request N waits/cannot grow: ..." line */
    int told_head;            /**< request whose wait the log told last (-1: none), so a wait is told once */
    signed char told_reason;  /**< why it waited then: 1 no space, 2 fragmentation, 3 batch full */
    signed char last_refusal_fragmented; /**< 1: that refusal had enough free bytes in total (this and told_reason
                                              are bytes, so that the state keeps its size: the same memory tables) */
    Err fault;                /**< a bookkeeping error seen by batching_finished(), which cannot return one (empty: none); the next schedule reports it */
    int first_waiting;        /**< no request before this index is waiting: where admission starts looking (batching_requeue() moves it back) */
    ArenaKind arena_kind;     /**< --arena */
    /**
     * Told of every move that copies K/V (positions 0..n_pos-1 from one
     * region to the other), while both regions exist; NULL: nobody
     * listens. The device store repeats the copy (batching_device_open()).
     */
    void (*on_move)(void *ctx, const KvRegion *from, const KvRegion *to, int n_pos);
    void *on_move_ctx;        /**< passed to on_move */
} BatchingState;

/**
 * An allocator of regions: everything the core asks of one. First fit
 * (regions.c, over kv_arena.h) is the chapter's own; `--arena buddy` puts
 * the buddy extension's in its place (ext/buddy_arena.c). arena_ops()
 * picks one, and it is the only call of the core that names the
 * extension. Offsets are bytes for both.
 */
typedef struct {
    int (*open)(BatchingState *b, size_t budget, Err *err); /**< books of its own beside the arena's (NULL: none) */
    void (*close)(BatchingState *b);                        /**< frees them (NULL: none) */
    int (*slots)(int tokens);                               /**< positions of arena a region of @p tokens takes */
    size_t (*largest_placeable)(size_t budget, size_t bytes_per_token); /**< the largest region a budget holds */
    /** Refuses a budget whose largest region is less than the smallest request's (NULL: the core's check is all). */
    int (*refuse)(const ServingRun *run, ReservePolicy policy, size_t smallest, int id, Err *err);
    /** Rejects a request whose largest region is more than @p room, in its own words (NULL: the core's). */
    void (*reject)(const BatchingState *b, ServingRun *run, Request *r, size_t bytes, size_t room);
    int (*take)(BatchingState *b, int tokens, KvRegion *reg);          /**< places a region; -1 when none fits */
    int (*give_back)(BatchingState *b, const KvRegion *reg, Err *err); /**< frees one, merging what it may */
    size_t (*free_bytes)(const BatchingState *b);                      /**< free bytes now */
    int (*free_pieces)(const BatchingState *b);                        /**< holes, or free blocks */
    size_t (*largest_free)(const BatchingState *b);                    /**< bytes of the largest free piece */
    size_t (*free_bytes_below)(const BatchingState *b, size_t bytes);  /**< free bytes in pieces under @p bytes */
} ArenaOps;

/**
 * The allocator `--arena` names: first fit's, or with `--arena buddy` the
 * buddy extension's (buddy_arena_ops()).
 * @param kind  the allocator
 * @return its operations (static: never freed)
 */
const ArenaOps *arena_ops(ArenaKind kind);

/** Most log lines about refusals and requeues; later ones are only counted. */
#define BATCHING_LOG_LIMIT 200

/**
 * Creates the chapter's state for a run: the arena (with its K/V bytes
 * unless accounting only), the regions, the batch, and the step buffers
 * (serving_open_steps()); with `--device cuda` also the device arena
 * (batching_device_open()). Refuses what batching_check() refuses, rejects
 * requests that can never fit and prints the setup to @p log.
 * @param run    the run (requests initialised, none admitted)
 * @param state  receives the state (close it with batching_close(), also on failure)
 * @param log    where setup lines, refusals and batches are told, or NULL
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int batching_open(ServingRun *run, BatchingState **state, FILE *log, Err *err);

/**
 * Frees the state.
 * @param b  the state, or NULL
 */
void batching_close(BatchingState *b);

/**
 * One step of the serving loop: batching_schedule(), the batch through
 * the model with batching_seam() (serving_step_forward()), every fed
 * request's next token (serving_step_sample()), batching_account(), and
 * batching_finished() for each request that finished. The same step serves
 * the program, the simulator and the tests.
 * @param b    the state
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success (also when every request is already done), -1 on failure
 */
int batching_step(BatchingState *b, ServingRun *run, Err *err);

/**
 * batching_open(), then batching_step() until every request is done: a
 * whole run for the tools and the tests. The state stays open for its
 * numbers.
 * @param run    the run
 * @param state  receives the state (close it with batching_close(), also on failure)
 * @param log    where the chapter's lines go, or NULL
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int batching_serve(ServingRun *run, BatchingState **state, FILE *log, Err *err);

/**
 * The K/V seam over the arena's regions.
 * @param b  the state
 * @return store = batching_store, attend = batching_attend
 */
KvSeam batching_seam(BatchingState *b);

/**
 * After a step: the reservations of the batch's members (serving_account_holders()),
 * this step's external fragmentation, free bytes, holes, and what finished
 * requests still hold.
 * @param b    the state
 * @param run  the run
 */
void batching_account(BatchingState *b, ServingRun *run);

/**
 * Chapter 3's lines of the memory table: batches, reservations, the arena,
 * growth, what finished requests held, refusals (serving_program_report()
 * calls it).
 * @param f    stream
 * @param ctx  the BatchingState
 * @param run  the finished run
 */
void batching_report_table(FILE *f, void *ctx, const ServingRun *run);

/**
 * Chapter 3's keys of the JSON report: batching, reserve, max_batch, the
 * budget, batches, reservations, the arena, growth, requeues, refusals.
 * @param j    the writer (inside the report object)
 * @param ctx  the BatchingState
 * @param run  the finished run
 */
void batching_report_json(JsonWriter *j, void *ctx, const ServingRun *run);

/**
 * Reads a batching name as `--batching` spells it.
 * @param name  "static" or "continuous"; NULL means static
 * @param mode  receives the mode
 * @param err   receives the reason on failure
 * @return 0 on success, -1 for an unknown name
 */
int batching_mode_parse(const char *name, BatchingMode *mode, Err *err);

/**
 * The mode's name as `--batching` spells it.
 * @param mode  a mode
 * @return a static string
 */
const char *batching_mode_name(BatchingMode mode);

/**
 * Reads an allocator name as `--arena` spells it.
 * @param name  "first-fit" or "buddy"; NULL means first-fit
 * @param kind  receives the allocator
 * @param err   receives the reason on failure
 * @return 0 on success, -1 for an unknown name
 */
int arena_kind_parse(const char *name, ArenaKind *kind, Err *err);

/**
 * The allocator's name as `--arena` spells it.
 * @param kind  an allocator
 * @return a static string
 */
const char *arena_kind_name(ArenaKind kind);

/**
 * Positions of arena a region of @p tokens positions takes: @p tokens
 * with first fit, buddy_block_slots() with the buddy allocator.
 * @param kind    the allocator
 * @param tokens  positions the region holds, >= 1
 * @return positions taken
 */
int arena_region_slots(ArenaKind kind, int tokens);

/**
 * Free bytes of the arena now (the holes, or the free buddy blocks).
 * @param b  the chapter
 * @return bytes
 */
size_t batching_free_bytes(const BatchingState *b);

/**
 * Free pieces of the arena now: holes with first fit, free blocks with
 * the buddy allocator.
 * @param b  the chapter
 * @return pieces
 */
int batching_free_pieces(const BatchingState *b);

/**
 * Takes a region of @p tokens positions from the arena's free pieces
 * (first fit, or a buddy block with `--arena buddy`).
 * @param b       the chapter
 * @param tokens  positions the region holds, >= 1
 * @param reg     receives the region
 * @return 0 when placed, -1 when no free piece holds it
 */
int batching_take_region(BatchingState *b, int tokens, KvRegion *reg);

/**
 * Gives a region's bytes back to the arena (a hole again, merged with its
 * neighbours; or a buddy block, merged with its buddy).
 * @param b    the chapter
 * @param reg  a region batching_take_region() placed
 * @param err  receives the reason on a bookkeeping error
 * @return 0 on success, -1 on failure
 */
int batching_give_back_region(BatchingState *b, const KvRegion *reg, Err *err);

/**
 * Records why @p bytes could not be placed for request @p r (in
 * b->last_refusal), and counts the external fragmentation of this step
 * when the free total was enough.
 * @param b       the chapter
 * @param run     the run
 * @param r       the request
 * @param bytes   what it asked for
 * @param action  what it was doing ("waits", "cannot grow from ...")
 */
void batching_refused(BatchingState *b, const ServingRun *run, const Request *r, size_t bytes, const char *action);

/**
 * Refuses a run that can never work, before anything is printed: an
 * unknown policy, batching or arena, a budget that holds no request's reservation, a budget
 * larger than this machine's memory (unless accounting only).
 * @param run  an initialised run (requests encoded)
 * @param err  receives the reason
 * @return 0 when the run can go ahead, -1 otherwise
 */
int batching_check(const ServingRun *run, Err *err);

/**
 * Gives @p r a region of @p tokens positions (first fit, or a buddy
 * block, as --arena says). On refusal, says
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
 * Admits waiting requests in file order while the batch has room and their
 * reservation fits; stops at the first that does not fit (the chapter's
 * lab). Static batching calls it to start a batch, continuous batching at
 * every step.
 * @param b    the chapter; b->batch lists the members (none when a static batch starts)
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
 * Plans one step: makes room for the running requests, admits (static:
 * only when nobody runs, starting a batch; continuous: at every step),
 * feeds every running request of the batch.
 * @param b    the state
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int batching_schedule(BatchingState *b, ServingRun *run, Err *err);

/**
 * A request finished: static batching ends the batch when its last
 * request finished; continuous batching releases @p r's region at once.
 * @param b    the state
 * @param run  the run
 * @param r    the request that finished
 */
void batching_finished(BatchingState *b, ServingRun *run, Request *r);

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
