/**
 * @file serving.h
 * @brief Serving many requests at once: what chapters 3 and 4 share.
 *
 * A serving chapter runs a request file through the model, one step at a
 * time. Each chapter writes its step out in full, calling the functions
 * below by name around its own (batching_step() in chapter 3,
 * paged_step() in chapter 4):
 *
 *     if (!serving_step_begin(run))          arrivals; 0 once every request is done
 *         return 0;
 *     chapter_schedule(...);                 who runs, which tokens (serving_feed())
 *     serving_step_forward(run, &seam, err); the batch through the model, K/V through the seam
 *     serving_step_sample(run);              each fed request takes its next token
 *     chapter_account(...);                  where the KV memory went this step
 *     n = serving_step_finished(run);        who finished (run->finished_now[0..n-1])
 *     chapter_finished(...) for each;        their memory goes back
 *     serving_step_end(run);
 *
 * The same step runs the programs on the CPU, on the device
 * (`--device cuda`: serving_step_forward() runs the batch there) and
 * **without a model** (serving_sim_init(), what kvsim and the tests use:
 * no forward pass, no K/V bytes; the fed positions count as cached and each
 * fed request receives a dummy token until its predetermined length).
 * Requests may **arrive** later than step 0 (Request.arrival_step, in file
 * order) or later than time 0 (Request.arrival_s, on the run's clock):
 * until then they are ::REQ_PENDING, which no chapter treats as waiting,
 * and when nobody that has arrived is left to serve, time skips to the
 * next arrival.
 *
 * **The run's clock** (::RunClock) starts at 0 when the first step begins
 * and advances by each step's time: its measured time (`--clock wall`, the
 * default), or its time in the cost model (`--clock model`, cost_model.h:
 * charged from the step's work, the same on every machine). An idle server
 * skips ahead to the next arrival instead of waiting for it. The step
 * functions record each request's arrival, first admission and every
 * output (latency.h): an output's time is the end of the forward step that
 * computed its logits. serving_latency_summary() sums them up.
 *
 * This module also holds the request lifecycle, the JSON Lines output
 * (`--out`), and the accounting of where KV memory goes, split as the
 * PagedAttention paper does into
 *
 * - **token states**: bytes that hold a token's K/V;
 * - **reserved**: bytes reserved for tokens the request will still produce;
 * - **internal fragmentation**: bytes reserved that will never hold a token,
 *   because the request ended before filling its reservation;
 * - **external fragmentation**: free bytes that could not be used, because
 *   no hole was large enough for the request that was waiting.
 *
 * Each is summed over steps (byte-steps), so the fractions weigh every step
 * equally and add up to 1. What a serving program does around its loop
 * (options, files, the report) is in serving_program.h.
 */
#ifndef KVLAB_SERVING_H
#define KVLAB_SERVING_H

#include <stdio.h>

#include "chat.h"
#include "cli.h"
#include "err.h"
#include "forward.h"
#include "json.h"
#include "cost_model.h"
#include "latency.h"
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
    REQ_FINISH_STOP,     /**< the model emitted a stop token: BOS or EOS (llama2.c), EOS (GGUF), `<|im_end|>` (--chat) */
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
    double arrival_s;   /**< earliest time it may be admitted, on the run's clock (0: from the start) */
    int stop_at;        /**< simulation only: with this many tokens it "samples" EOS and stops (0: never; it runs to max_tokens) */
    Sampler sampler;    /**< seeded with --seed + index: batching never changes its draws */
    KvReservationTrack kv;  /**< its KV reservation over time, for the breakdown */
    char note[200];     /**< why it was rejected */
} Request;

struct ServingRun; /* below: an observer is handed the run */

/** Most observers one run keeps (serving_add_observer()). */
#define SERVING_MAX_OBSERVERS 6

/**
 * One observer of a run's steps: called by serving_step_finished(), after
 * the chapter has accounted the step and before the requests that finished
 * let go of their memory. A chapter's watcher of the steps (`--trace`,
 * `--show-tables`), a later chapter's books (chapter 5's cache) and the
 * capacity simulator's measures (tools/lib/kvsim.c) all look at a step
 * this way.
 */
typedef struct {
    void (*observe)(void *ctx, const struct ServingRun *run); /**< the call */
    void *ctx;                                                /**< passed to observe */
    void (*free_ctx)(void *ctx); /**< frees ctx when the run is freed (NULL: its adder keeps it) */
} ServingObserver;

/**
 * The run's clock, and what the current step costs. See the file's
 * comment; the times are seconds since the first step began.
 */
typedef struct {
    int model;             /**< 1: steps last what the cost model says (`--clock model`); 0: what they measure */
    int has_machine;       /**< 1: a cost model is known (with the wall clock, `--machine`: each step is compared) */
    CostMachine machine;   /**< the cost model's machine */
    CostShape shape;       /**< the cost model's view of the model */
    double now_s;          /**< the clock: the end of the last step (or the arrival it skipped to) */
    double step_begin_s;   /**< the clock when the current step began */
    double step_model_s;   /**< the current step's modelled time (serving_step_forward(); 0 without a machine) */
    double outputs_s;      /**< when the current step's outputs are ready: the end of its forward pass */
    StepWork work;         /**< the current step's work */
    int attended_given;    /**< 1: the chapter said how many positions attention reads (serving_set_attended()) */
    CostCheck check;       /**< wall clock with a machine: each step's modelled time over its measured one */
    CostCheck check_cpu;   /**< the same over the step's CPU time (the process's: one thread's with --threads 1),
                                which other programs on the machine do not lengthen */
    double step_cpu_started_s; /**< the process's CPU time when the current step began (with a machine) */
} RunClock;

/** The state of a serving run, shared by the loop and the chapter. */
typedef struct ServingRun {
    const Model *model;         /**< the model (NULL when simulating) */
    const Tokenizer *tokenizer; /**< encodes the prompts; decodes --out text; says which tokens stop */
    int chat;                   /**< 1 with --chat: prompts were rendered with chat_template, whose end token stops */
    ChatTemplate chat_template; /**< --chat: the model's template (zeroed without it) */
    const CliOptions *opts;     /**< seed, sampling, budget, chapter options */
    size_t kv_bytes_per_token; /**< all layers, K and V */
    Request *reqs;             /**< [n_reqs] in file order (samples of one line together) */
    int n_reqs;                /**< requests (file lines x samples) */
    long step;                 /**< forward steps run so far */
    int n_done;                /**< requests finished or rejected */
    int n_running;             /**< requests RUNNING now (kept by every change of phase from serving_open_steps() on) */
    int n_waiting;             /**< requests WAITING now (arrived, not running, not done; kept likewise) */
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
    double elapsed_s;          /**< wall time of all steps (serving_step_begin() to serving_step_end()) */
    int *finished_now;         /**< [n_reqs] indexes of the requests that finished in the current step */
    int n_finished;            /**< entries of finished_now this step */
    const float *logits;       /**< [n_logits][vocab_size] this step's logits (host), NULL in a simulation */
    int simulated;             /**< 1: no model runs (serving_sim_init()): no forward pass, dummy tokens */
    RequestSpec *sim_specs;    /**< [n_reqs] the specs serving_sim_init() made (NULL otherwise) */
    struct ServingDevice *device; /**< --device cuda: where the steps run (serving_device.h); NULL: the CPU */
    double progress_shown_s;   /**< when serving_show_progress() last wrote a line */
    double step_started_s;     /**< when the current step began (serving_step_begin()) */
    ServingObserver observers[SERVING_MAX_OBSERVERS]; /**< serving_add_observer(), oldest first */
    int n_observers;           /**< entries of observers */
    /**
     * Optional (NULL: every request): whether request @p r gets a line in
     * `--out`. Chapter 4's beam search writes only each prompt's best beam.
     * @param ctx  out_ctx
     * @param r    the request
     * @return 1 to write it
     */
    int (*out_keep)(void *ctx, const Request *r);
    /**
     * Optional (NULL: none): extra keys of request @p r's `--out` line.
     * @param ctx  out_ctx
     * @param j    the writer, inside the line's object
     * @param r    the request
     */
    void (*out_extra)(void *ctx, JsonWriter *j, const Request *r);
    void *out_ctx;             /**< passed to out_keep and out_extra */
    struct ServingTrace *trace; /**< `--trace`: where the step's events go (trace.h); NULL: no trace */
    RunClock clock;            /**< the run's clock and the current step's work */
    LatencyRecorder latency;   /**< each request's arrival, admission and outputs (reqs[i] is request i's) */
    int latency_out;           /**< 1: `--out` lines carry each request's times (a latency option was given) */
} ServingRun;

/**
 * Adds an observer of the steps (ServingObserver). Observers are called
 * newest first. One rule of ownership for all of them: when @p free_ctx
 * is given, the run owns @p ctx from this call on and frees it in
 * serving_run_free() (at once when it cannot be added); without one, the
 * adder keeps @p ctx and takes the observer off (serving_remove_observer())
 * before freeing it.
 * @param run       the run
 * @param observe   called after each step's accounting
 * @param ctx       passed to @p observe
 * @param free_ctx  frees @p ctx with the run, or NULL
 * @param err       receives the reason on failure
 * @return 0, or -1 when the run has SERVING_MAX_OBSERVERS already
 */
int serving_add_observer(ServingRun *run, void (*observe)(void *ctx, const ServingRun *run), void *ctx,
                         void (*free_ctx)(void *ctx), Err *err);

/**
 * Takes off the observer whose context is @p ctx (none: nothing changes).
 * The run no longer calls it, nor frees @p ctx.
 * @param run  the run
 * @param ctx  the context it was added with
 */
void serving_remove_observer(ServingRun *run, const void *ctx);

/**
 * Records a fork in the trace (`--trace`): request @p child's table now
 * shares every block of @p parent's.
 * @param run     the run
 * @param parent  the request whose blocks are shared
 * @param child   the request that shares them
 */
void serving_note_fork(ServingRun *run, const Request *parent, const Request *child);

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
 * Gives @p r its next token, as sampling does: BOS or EOS finishes it
 * (the token is not kept), otherwise it is appended and the request
 * finishes when it has max_tokens. A finished request is added to
 * run->finished_now (run->n_finished counts them). Chapter 4's beam search
 * chooses its tokens itself and hands them over this way.
 * @param run   the run
 * @param r     a request fed this step
 * @param next  the token
 * @return 1 when @p r finished, else 0
 */
int serving_take_token(ServingRun *run, Request *r, int next);

/**
 * Adds positions n_cached .. @p end - 1 of @p r to this step's batch: a
 * chunk of a prompt (chunked prefill). Only when @p end is n_tokens, the
 * whole rest, does the last position get a logits row and @p r sample a
 * token; an earlier chunk only stores its K/V, which later chunks attend to.
 * The chapter must already have made room for the positions.
 * @param run  the run
 * @param r    a RUNNING request
 * @param end  one past the last position fed: n_cached < end <= n_tokens
 * @param err  receives the reason on failure
 * @return 0 on success, -1 when the batch or logits capacity is exceeded or
 *         there is nothing to feed
 */
int serving_feed_upto(ServingRun *run, Request *r, int end, Err *err);

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
 * The default accounting of a step: sums the reservations of all requests, records
 * the timeline, and adds one step to each reservation's track (used =
 * n_cached x bytes per token).
 * @param run  the run
 */
void serving_account_default(ServingRun *run);

/**
 * The default accounting of a step over the requests that can hold a
 * reservation, listed by the chapter (its batch): the same sums and tracks
 * as serving_account_default() when every request with a reservation is
 * listed, in time proportional to the list instead of the whole file.
 * Listed requests that hold nothing are skipped.
 * @param run        the run
 * @param holders    [n_holders] request indexes, each at most once
 * @param n_holders  entries of @p holders
 */
void serving_account_holders(ServingRun *run, const int *holders, int n_holders);

/**
 * Sets up a run without a program around it (for tests and tools): encodes
 * and seeds every request. Rejects requests whose prompt is longer than
 * seq_len. With `opts->chat` each prompt is first rendered as one user
 * message in the tokenizer's chat template (chat_render()), and the end of
 * the assistant's turn stops a request; a tokenizer without a template is
 * refused.
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
 * Sizes what every step needs, once the chapter knows its largest step:
 * the batch and the sampling buffers, the forward pass's activations (none
 * in a simulation), and with `--device cuda` the weights and activations on
 * the device (serving_device_start()). Requests that have not arrived
 * become ::REQ_PENDING. A chapter's open() calls it last.
 * @param run              the run (its requests seen, and possibly rejected, by the chapter)
 * @param max_step_tokens  most entries of a step
 * @param max_logits       most logits rows of a step
 * @param err              receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_open_steps(ServingRun *run, int max_step_tokens, int max_logits, Err *err);

/**
 * Makes the step larger after serving_open_steps(): room for
 * @p max_step_tokens entries and @p max_logits logits rows (the batch and
 * the forward pass's activations, reallocated; what they held is gone).
 * Chapter 7 calls it once, before the first step, because each request it
 * speculates for feeds its last token and k proposals, each with a logits
 * row. CPU only (a device run's activations are on the device).
 * @param run              the run, opened, before its first step
 * @param max_step_tokens  most entries of a step (not fewer than now)
 * @param max_logits       most logits rows of a step (not fewer than now)
 * @param err              receives the reason on failure
 * @return 0 on success, -1 when out of memory or on a device run
 */
int serving_widen_steps(ServingRun *run, int max_step_tokens, int max_logits, Err *err);

/**
 * The loop's condition: some request is not done yet.
 * @param run  the run
 * @return 1 while requests are unfinished, else 0
 */
int serving_unfinished(const ServingRun *run);

/**
 * Starts a step: lets in the requests that have arrived by now (skipping
 * ahead to the next arrival when nobody who has arrived is left to serve)
 * and empties the batch, for the chapter's schedule to fill with
 * serving_feed().
 * @param run  the run
 * @return 1 when there is a step to run, 0 when every request is done
 */
int serving_step_begin(ServingRun *run);

/**
 * Runs the batch the chapter planned (run->entries): with forward() through
 * @p seam on the CPU, on the device with `--device cuda`, or not at all in
 * a simulation. Then every position fed counts as cached. A plan without a
 * single entry is an error (a scheduler that is stuck), not a spin.
 * @param run   the run, this step planned
 * @param seam  the chapter's K/V seam (store and attend)
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int serving_step_forward(ServingRun *run, const KvSeam *seam, Err *err);

/**
 * Every request fed this step takes its next token: sampled from its logits
 * row with its own sampler (in a simulation, a dummy token, or its stop at
 * its predetermined length). BOS or EOS, or its last allowed token, finishes
 * a request; the step's finished requests are listed in run->finished_now.
 * @param run  the run, after serving_step_forward()
 */
void serving_step_sample(ServingRun *run);

/**
 * The requests that finished this step, for the chapter to release: their
 * indexes are run->finished_now[0..n-1]. Tells the run's observers first.
 * @param run  the run, after the chapter's accounting
 * @return how many finished
 */
int serving_step_finished(ServingRun *run);

/**
 * Ends the step: counts it, and its time in run->elapsed_s.
 * @param run  the run
 */
void serving_step_end(ServingRun *run);

/**
 * A progress line on @p log every few seconds (a quarter of a second on a
 * terminal, where it overwrites itself): step, running, waiting, done.
 * @param run  the run
 * @param log  where the line goes, or NULL
 */
void serving_show_progress(ServingRun *run, FILE *log);

/**
 * Makes the cost model the run's clock (@p model_clock 1), or only a
 * yardstick that each step's measured time is compared with (0). kvsim
 * and the tests call it on a simulated run; a program gets it from
 * `--clock model` and `--machine` (serving_run_init()). Call it before
 * serving_open_steps().
 * @param run          the run
 * @param m            the machine
 * @param shape        the model's costs (cost_shape_init())
 * @param model_clock  1: the clock; 0: compared with the wall clock
 */
void serving_use_cost_model(ServingRun *run, const CostMachine *m, const CostShape *shape, int model_clock);

/**
 * Tells the cost model that the current step moves @p bytes between the
 * device and the host (a swap out or in). Call it while scheduling, before
 * serving_step_forward().
 * @param run    the run
 * @param bytes  bytes moved (one way; call once per direction)
 */
void serving_note_transfer(ServingRun *run, double bytes);

/**
 * Tells the cost model how many positions this step's attention reads,
 * over every fed token, when the chapter's attention reads fewer than the
 * whole context (a window). By default serving_step_forward() counts pos
 * + 1 for a token at position pos. Call it before serving_step_forward().
 * @param run       the run
 * @param attended  positions read
 */
void serving_set_attended(ServingRun *run, long attended);

/**
 * The latency of the finished run (latency.h): its requests' timelines,
 * over the clock's span, with `--slo-ttft` and `--slo-tpot`.
 * @param run  a finished run
 * @param out  receives the summary
 * @param err  receives the reason on failure
 * @return 0 on success, -1 when out of memory
 */
int serving_latency_summary(const ServingRun *run, LatencySummary *out, Err *err);

/**
 * One line saying which clock the run's times are on (for the latency
 * block): the wall clock, or the cost model and its machine.
 * @param run  the run
 * @param buf  output
 * @param n    its size
 * @return buf
 */
const char *serving_clock_describe(const ServingRun *run, char *buf, size_t n);

/**
 * Frees what serving_run_init() allocated.
 * @param run  the run
 */
void serving_run_free(ServingRun *run);

/**
 * Writes one JSON object per request, in file order: id, sample, prompt,
 * prompt_tokens, tokens, text, finish, admitted_step, finished_step,
 * preemptions (and note when rejected); when a latency option was given
 * (run->latency_out), also arrival_step, first_token_step and the times of
 * latency_json_request() (arrival_s, queue_s, ttft_s, tpot_s, e2e_s,
 * outputs, itl_p50_s, itl_p90_s, itl_p99_s, itl_max_s).
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
    double arrival_s;   /**< time at which it arrives, seconds on the run's clock (never less than the previous request's) */
} SimRequestSpec;

/** The token id every simulated request appends (its value never matters). */
#define SERVING_SIM_TOKEN 3

/**
 * Sets up a run without a model file, a tokenizer or any prompt text: each
 * request gets @p reqs[i].prompt_tokens dummy tokens, max_tokens = prompt +
 * max_new_tokens capped at seq_len + 1, and stops (as if it sampled EOS) after
 * output_tokens new tokens. Requests whose prompt is longer than seq_len
 * are rejected, as serving_run_init() does. Requests must arrive in file
 * order (arrival steps never decrease). Then open a chapter on the run and
 * step it as a program does: no model runs and no K/V byte is allocated
 * (run->simulated and run->no_kv_storage are set).
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
 * Total preemptions of a run (requeues in chapter 3, preemptions in
 * chapter 4): the sum of every request's count.
 * @param run  the run
 * @return preemptions
 */
long serving_preemptions(const ServingRun *run);

#endif
