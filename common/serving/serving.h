/**
 * @file serving.h
 * @brief Serving many requests at once: what chapters 3 and 4 share.
 *
 * A serving chapter runs a request file through the model. Every step it
 * decides which requests run and which of their tokens to feed (prompts of
 * newly admitted requests, one new token of each running one), the forward
 * pass runs them all as one flat batch, and each request that received
 * logits samples its next token. The chapters differ only in how they
 * reserve K/V memory and whom they admit; that is the ::ServingChapter.
 *
 * This module holds the rest: the request lifecycle, the step loop, the
 * JSON Lines output (`--out`), and the accounting of where KV memory goes,
 * split as the PagedAttention paper does into
 *
 * - **token states**: bytes that hold a token's K/V;
 * - **reserved**: bytes reserved for tokens the request will still produce;
 * - **internal fragmentation**: bytes reserved that will never hold a token,
 *   because the request ended before filling its reservation;
 * - **external fragmentation**: free bytes that could not be used, because
 *   no hole was large enough for the request that was waiting.
 *
 * Each is summed over steps (byte-steps), so the fractions weigh every step
 * equally and add up to 1.
 *
 * The same step loop also runs **without a model** (serving_run_simulated(),
 * what kvsim and the tests use): the chapter schedules as always, the fed
 * positions count as cached, and each fed request receives a dummy token
 * until its predetermined length; no forward pass, no K/V bytes. Requests
 * may **arrive** later than step 0 (Request.arrival_step, in file order):
 * until then they are ::REQ_PENDING, which no chapter treats as waiting,
 * and when nobody that has arrived is left to serve, time skips to the next
 * arrival.
 */
#ifndef KVLAB_SERVING_H
#define KVLAB_SERVING_H

#include <stdio.h>

#include "cli.h"
#include "device_kv.h"
#include "err.h"
#include "forward.h"
#include "json.h"
#include "model.h"
#include "report.h"
#include "requests.h"
#include "sampler.h"
#include "tokenizer.h"

/** KV memory by the paper's four categories, in byte-steps. */
typedef struct {
    double token_states;           /**< bytes holding a token's K/V */
    double reserved;               /**< bytes held for tokens still to come */
    double internal_fragmentation; /**< bytes reserved that never held a token */
    double external_fragmentation; /**< free bytes too scattered to use */
} KvBreakdown;

/**
 * One reservation's history, enough to split it exactly once the request's
 * final length is known. A reservation changes size only when it is made,
 * grown or released, and only its last size can exceed the final length,
 * so the bytes that were never going to be used are (last size - final
 * length) x (steps since the last change).
 */
typedef struct {
    size_t reserved;         /**< bytes reserved now (0: holds nothing) */
    double reserved_steps;   /**< sum over steps of reserved bytes */
    double used_steps;       /**< sum over steps of bytes holding tokens */
    long steps_since_change; /**< steps with the current reservation size */
} KvReservationTrack;

/**
 * Sets the bytes a request holds now (after an allocation, a growth, a
 * release to 0).
 * @param t      the request's track
 * @param bytes  bytes reserved from now on
 */
void kv_track_set_reserved(KvReservationTrack *t, size_t bytes);

/**
 * Adds one step with @p used_bytes holding tokens.
 * @param t           the track
 * @param used_bytes  bytes of the reservation that hold K/V now
 */
void kv_track_step(KvReservationTrack *t, size_t used_bytes);

/**
 * Splits the history into the four categories, adds it to @p b, and starts
 * a fresh history (call when the reservation is released).
 * @param t            the track
 * @param final_bytes  bytes the request's tokens fill at the end (its final
 *                     length x bytes per token); on preemption, pass the
 *                     reservation itself (its slack was for future tokens)
 * @param b            where the byte-steps go
 */
void kv_track_close(KvReservationTrack *t, size_t final_bytes, KvBreakdown *b);

/**
 * The four categories as fractions of their sum (all 0 when nothing was
 * ever reserved).
 * @param b    byte-steps
 * @param out  [4] token states, reserved, internal, external
 */
void kv_breakdown_fractions(const KvBreakdown *b, double out[4]);

/** Where a request is in its life. */
typedef enum {
    REQ_WAITING, /**< not admitted yet, or preempted */
    REQ_RUNNING, /**< admitted: holds K/V memory and gets steps */
    REQ_DONE,    /**< finished or rejected */
    REQ_PENDING  /**< has not arrived yet (Request.arrival_step is later): no chapter sees it as waiting */
} RequestPhase;

/** How a request ended (the `finish` of its JSON line). */
typedef enum {
    REQ_FINISH_NONE,     /**< not finished */
    REQ_FINISH_LENGTH,   /**< max_new_tokens reached, or the model's seq_len */
    REQ_FINISH_STOP,     /**< the model emitted BOS or EOS */
    REQ_FINISH_REJECTED  /**< could never run (see note) */
} RequestFinish;

/** One request (one sample of one line of the request file). */
typedef struct {
    const RequestSpec *spec; /**< its line */
    int index;         /**< position in ServingRun.reqs; also BatchEntry.seq */
    int sample;        /**< which of the --n samples of its prompt */
    int *tokens;       /**< [seq_len + 1] prompt ids (with BOS), then generated ids (see model_max_tokens()) */
    int n_prompt;      /**< prompt ids */
    int n_tokens;      /**< ids so far */
    int max_tokens;    /**< n_prompt + max_new_tokens, capped at seq_len + 1 (model_max_tokens()) */
    int n_cached;      /**< leading positions whose K/V are stored */
    RequestPhase phase;     /**< waiting, running or done */
    RequestFinish finish;   /**< how it ended (REQ_FINISH_NONE until then) */
    long admitted_step; /**< step of its first admission, or -1 */
    long finished_step; /**< step it finished on, or -1 */
    int preemptions;    /**< times its K/V were freed to make room */
    long arrival_step;  /**< first step at which it may be admitted (0: from the start; see ::REQ_PENDING) */
    int stop_at;        /**< simulation only: with this many tokens it "samples" EOS and stops (0: never; it runs to max_tokens) */
    Sampler sampler;    /**< seeded with --seed + index: batching never changes its draws */
    KvReservationTrack kv;  /**< its KV reservation over time, for the breakdown */
    char note[200];     /**< why it was rejected */
} Request;

/** The state of a serving run, shared by the loop and the chapter. */
typedef struct {
    const Model *model;         /**< the model (NULL when simulating) */
    const Tokenizer *tokenizer; /**< for --out text */
    const CliOptions *opts;     /**< seed, sampling, budget, chapter options */
    size_t kv_bytes_per_token; /**< all layers, K and V */
    Request *reqs;             /**< [n_reqs] in file order (samples of one line together) */
    int n_reqs;                /**< requests (file lines x samples) */
    long step;                 /**< forward steps run so far */
    int n_done;                /**< requests finished or rejected */
    int max_concurrent;        /**< most requests RUNNING after any step */
    double running_sum;        /**< requests RUNNING, summed over the steps that ran a batch */
    long busy_steps;           /**< steps that ran a batch (step - busy_steps: steps nobody was there to serve) */
    int n_arrived;             /**< requests 0..n_arrived-1 have arrived (arrival steps never decrease in file order) */
    long tokens_generated;     /**< new tokens of all requests */
    BatchEntry *entries;       /**< [max_step_tokens] this step's batch */
    int n_entries;             /**< entries planned for this step */
    int max_step_tokens;       /**< capacity of entries (the chapter's step budget) */
    int n_logits;              /**< logits rows used this step */
    int max_logits;            /**< logits rows per step */
    int *taker_row;            /**< [n_reqs] logits row each taker samples from this step */
    int *taker_req;            /**< [n_reqs] request index of each taker */
    int n_takers;              /**< requests that sample this step */
    float *logits_scratch;     /**< [vocab_size] a private copy of a row, for sampling */
    int no_kv_storage;         /**< 1: simulate only (kvsim): chapters keep the books but allocate no K/V bytes */
    ForwardState fs;           /**< activations of the forward pass */
    KvTimeline timeline;       /**< total KV reserved/used after each step */
    KvBreakdown breakdown;     /**< byte-steps by category */
    double elapsed_s;          /**< wall time of the loop */
    void *chapter_ctx;         /**< the chapter's state while open (see serving_run()) */
    int *finished_now;         /**< [n_reqs] indexes of the requests that finished in the current step */
    RequestSpec *sim_specs;    /**< [n_reqs] the specs serving_sim_init() made (NULL otherwise) */
    struct ServingDevice *device; /**< --device cuda: where the steps run (serving_device.h); NULL: the CPU */
} ServingRun;

/**
 * A chapter's K/V store on the device (`--device cuda`), kept in step with
 * the chapter's allocator on the host. The host keeps every book exactly as
 * on the CPU (run->no_kv_storage = 1: no K/V bytes on the host); the device
 * store holds the K/V bytes where those books say they are, and repeats
 * every copy the books decided (a region moved, a block copied on write).
 */
typedef struct ServingDeviceKv {
    DeviceKv *kv;  /**< the store: ServingChapter.device_open opens it */
    void *chapter; /**< the chapter's state (what its open() made) */
    Err fault;     /**< the first failure of a copy repeated from a hook that cannot return one (empty: none) */
    /**
     * Called after every schedule(), before the step's forward pass: tells
     * the store where the K/V of every running request are now.
     * @param d    this
     * @param run  the run
     * @param err  receives the reason on failure
     * @return 0 on success, -1 on failure
     */
    int (*sync)(struct ServingDeviceKv *d, ServingRun *run, Err *err);
} ServingDeviceKv;

/** A serving chapter: its K/V memory and its scheduling policy. */
typedef struct {
    CliProgram program; /**< name, summary, accepted options */
    /**
     * Optional (may be NULL): refuses a run that can never work (a budget
     * that holds no request, say) before the program prints anything, so
     * that the error is the only line on stderr. open() should repeat the
     * check for callers that do not go through run_serving_main().
     * @return 0 when the run can go ahead, -1 with the reason in @p err
     */
    int (*check)(const ServingRun *run, Err *err);
    /**
     * Creates the chapter's K/V store and scheduler for @p run (requests are
     * loaded, tokenized and seeded; none admitted). May reject requests that
     * can never run (serving_reject()). Sets the largest step it will plan.
     * Prints its setup (budget, blocks...) to @p log.
     * @return 0 on success, -1 on failure
     */
    int (*open)(ServingRun *run, void **ctx, int *max_step_tokens, int *max_logits, FILE *log, Err *err);
    /** Frees everything open() made. */
    void (*close)(void *ctx);
    /** The K/V seam the forward pass uses. */
    KvSeam (*seam)(void *ctx);
    /**
     * Plans one step: admits, grows, preempts, and feeds requests with
     * serving_feed(). Planning nothing while requests are unfinished is an
     * error (the loop reports it instead of spinning).
     * @return 0 on success, -1 on failure
     */
    int (*schedule)(void *ctx, ServingRun *run, Err *err);
    /** Called once per request that finished in the step just run. */
    void (*finished)(void *ctx, ServingRun *run, Request *r);
    /**
     * After each step: records KV reserved/used (kv_timeline_record on
     * run->timeline) and the breakdown (tracks, external fragmentation).
     * serving_account_default() does it from the requests' tracks.
     */
    void (*account)(void *ctx, ServingRun *run);
    /** Extra lines of the memory table (may be NULL); the chapter is still open. */
    void (*extra_table)(FILE *f, void *ctx, const ServingRun *run);
    /** Extra keys of the JSON report (may be NULL); the chapter is still open. */
    void (*extra_json)(JsonWriter *j, void *ctx, const ServingRun *run);
    /**
     * `--device cuda` (NULL: the chapter has no CUDA path). Called once,
     * right after open(): opens the chapter's device K/V store in d->kv,
     * sized from the books open() set up, hooks it to the chapter's
     * allocator (so that every copy the allocator decides is repeated on
     * the device) and sets d->sync.
     * @param ctx              the chapter's state
     * @param run              the run (run->no_kv_storage is 1)
     * @param dev              the open device
     * @param kv_type          element type of the stored K/V (--kv-dtype)
     * @param max_step_tokens  most entries of a step (what open() said)
     * @param d                d->kv and d->chapter are set; the hook fills the rest
     * @param err              receives the reason on failure
     * @return 0 on success, -1 on failure
     */
    int (*device_open)(void *ctx, ServingRun *run, const Device *dev, Dtype kv_type, int max_step_tokens,
                       ServingDeviceKv *d, Err *err);
} ServingChapter;

/**
 * Adds the tokens of @p r that have no K/V yet (positions n_cached ..
 * n_tokens - 1) to this step's batch, the last one with a logits row.
 * The chapter must already have made room for them.
 * @param run  the run
 * @param r    a RUNNING request
 * @param err  receives the reason when the step is full
 * @return 0 on success, -1 when the batch or logits capacity is exceeded
 */
int serving_feed(ServingRun *run, Request *r, Err *err);

/**
 * Lets @p taker sample its next token from the logits row that @p source
 * was fed for in this step (forked samples of one prompt: the prompt runs
 * once, every sample draws from its last logits with its own sampler).
 * @param run     the run
 * @param source  a request fed this step with serving_feed()
 * @param taker   a RUNNING request with the same tokens as @p source
 * @param err     receives the reason on failure
 * @return 0 on success, -1 when @p source has no row this step
 */
int serving_share_logits(ServingRun *run, const Request *source, Request *taker, Err *err);

/**
 * Marks a request admitted (RUNNING), remembering the first admission step.
 * @param run  the run
 * @param r    a WAITING request
 */
void serving_admit(ServingRun *run, Request *r);

/**
 * Sends a running request back to the queue: its K/V are gone, so every
 * position must be recomputed when it is admitted again. The chapter frees
 * the memory (and closes r->kv).
 * @param run  the run
 * @param r    a RUNNING request
 */
void serving_preempt(ServingRun *run, Request *r);

/**
 * Ends a request that can never run, with a one-line reason.
 * @param run  the run
 * @param r    a WAITING request
 * @param fmt  printf format of the reason
 */
void serving_reject(ServingRun *run, Request *r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/**
 * The KV budget of the run: --kv-budget, or by default room for 8 requests
 * of the model's full length.
 * @param run  the run
 * @return bytes
 */
size_t serving_kv_budget(const ServingRun *run);

/**
 * The default account hook: sums the reservations of all requests, records
 * the timeline, and adds one step to each reservation's track (used =
 * n_cached x bytes per token).
 * @param run  the run
 */
void serving_account_default(ServingRun *run);

/**
 * Runs a serving chapter as a program: options, model, requests, the loop,
 * `--out` JSON Lines, the memory table (with utilization and breakdown),
 * `--json`. Errors are one line on stderr.
 * @param ch    the chapter
 * @param argc  from main
 * @param argv  from main
 * @return the process exit status (0, or 1 on any error)
 */
int run_serving_main(const ServingChapter *ch, int argc, char **argv);

/**
 * Sets up a run without a program around it (for tests and tools): encodes
 * and seeds every request. Rejects requests whose prompt is longer than
 * seq_len.
 * @param run        receives the run
 * @param m          the model
 * @param t          the tokenizer
 * @param opts       options (seed, temperature, top-p, n_samples)
 * @param rf         the requests
 * @param err        receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_run_init(ServingRun *run, const Model *m, const Tokenizer *t, const CliOptions *opts,
                     const RequestFile *rf, Err *err);

/**
 * Runs the loop of a chapter to completion on an initialised run. The
 * chapter is opened and stays open (run->chapter_ctx), so that its numbers
 * can still be reported; close it with serving_run_close(). The programs
 * call all this through run_serving_main().
 * @param ch   the chapter
 * @param run  from serving_run_init()
 * @param log  where setup lines and progress go, or NULL
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_run(const ServingChapter *ch, ServingRun *run, FILE *log, Err *err);

/**
 * Closes the chapter that serving_run() opened (no-op if none is open).
 * @param ch   the chapter
 * @param run  the run
 */
void serving_run_close(const ServingChapter *ch, ServingRun *run);

/**
 * Frees what serving_run_init() allocated.
 * @param run  the run
 */
void serving_run_free(ServingRun *run);

/**
 * Writes one JSON object per request, in file order: id, sample, prompt,
 * prompt_tokens, tokens, text, finish, admitted_step, finished_step,
 * preemptions (and note when rejected).
 * @param run   a finished run
 * @param path  output file
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_write_jsonl(const ServingRun *run, const char *path, Err *err);

/* ------------------------------------------------------------ simulation */

/**
 * A request known only by its lengths: what the capacity simulator (kvsim)
 * and the tests feed the chapters instead of prompts and a model.
 */
typedef struct {
    int prompt_tokens;  /**< prompt length in tokens, BOS included, >= 1 */
    int max_new_tokens; /**< the most tokens the client allows: what the reservation policies see */
    int output_tokens;  /**< tokens it really produces before EOS; 0, or >= max_new_tokens: it runs to the limit */
    long arrival_step;  /**< step at which it arrives (never less than the previous request's) */
} SimRequestSpec;

/** The token id every simulated request appends (its value never matters). */
#define SERVING_SIM_TOKEN 3

/**
 * Sets up a run without a model file, a tokenizer or any prompt text: each
 * request gets @p reqs[i].prompt_tokens dummy tokens, max_tokens = prompt +
 * max_new_tokens capped at seq_len + 1, and stops (as if it sampled EOS) after
 * output_tokens new tokens. Requests whose prompt is longer than seq_len
 * are rejected, as serving_run_init() does.
 * @param run                 receives the run (free with serving_run_free())
 * @param shape               a model whose cfg alone is filled in (seq_len, layers, heads)
 * @param opts                options (budget, block size, reserve policy...)
 * @param kv_bytes_per_token  K and V of one position in all layers (2 x layers x kv_dim x element bytes)
 * @param reqs                [n] the requests, in arrival order
 * @param n                   number of requests, >= 1
 * @param err                 receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_sim_init(ServingRun *run, const Model *shape, const CliOptions *opts, size_t kv_bytes_per_token,
                     const SimRequestSpec *reqs, int n, Err *err);

/**
 * Opens a chapter for a simulated run: the chapter's books (in
 * accounting-only mode: run->no_kv_storage is set here) and the step
 * buffers, but no forward-pass buffers. Requests that have not arrived
 * become ::REQ_PENDING.
 * @param ch   the chapter
 * @param run  from serving_sim_init() (or any initialised run)
 * @param log  where the chapter's setup lines go, or NULL
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure (close with serving_run_close() either way)
 */
int serving_sim_open(const ServingChapter *ch, ServingRun *run, FILE *log, Err *err);

/**
 * One step of the serving loop without a model: arrivals (skipping ahead
 * over steps when nobody is there to serve), the chapter's schedule, the
 * fed positions marked cached, a dummy token appended to every request
 * that was fed (or its stop), the chapter's accounting, the finished hook.
 * Exactly what serving_run() does around the forward pass and the sampler.
 * @param ch   the chapter
 * @param run  opened with serving_sim_open()
 * @param err  receives the reason on failure (e.g. a scheduler that plans nothing)
 * @return 0 on success (also when every request is done), -1 on failure
 */
int serving_sim_step(const ServingChapter *ch, ServingRun *run, Err *err);

/**
 * serving_sim_open(), then serving_sim_step() until every request is done.
 * The chapter stays open for its numbers; close it with serving_run_close().
 * @param ch   the chapter
 * @param run  from serving_sim_init()
 * @param log  where the chapter's setup lines go, or NULL
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_run_simulated(const ServingChapter *ch, ServingRun *run, FILE *log, Err *err);

/**
 * Total preemptions of a run (requeues in chapter 3, preemptions in
 * chapter 4): the sum of every request's count.
 * @param run  the run
 * @return preemptions
 */
long serving_preemptions(const ServingRun *run);

#endif
