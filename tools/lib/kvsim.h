/**
 * @file kvsim.h
 * @brief The capacity simulator's library: GPUs, request-length
 *        distributions, arrivals, and one serving strategy run without a
 *        model.
 *
 * A laptop cannot run a 13B model, but the allocators of chapters 3 and 4
 * never look at a weight: they see request lengths, bytes per token and a
 * budget. kvsim (tools/kvsim.c) therefore drives the chapters' own code,
 * the same step functions their programs call (batching_step(),
 * paged_step()), on a run set up without a model (serving_sim_init():
 * requests that exist only as lengths, no forward pass, no K/V bytes). What
 * it prints is what the chapters would do on that GPU, step for step, minus
 * the arithmetic.
 *
 * The caller says which chapter (serve.h). It provides
 *
 * - GPU presets, in GB = 10^9 bytes as vendors print them;
 * - length distributions (fixed, uniform, lognormal, gamma, Weibull) with a seeded
 *   generator, and named workloads shaped like ShareGPT and Alpaca;
 * - Poisson arrivals at a rate in requests per simulated step;
 * - kvsim_run(): one strategy over one workload, and its numbers.
 */
#ifndef KVLAB_KVSIM_H
#define KVLAB_KVSIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "err.h"
#include "model.h"
#include "serve.h"
#include "serving.h"

/** A GPU's memory as its vendor names it. */
typedef struct {
    const char *name;  /**< e.g. "a100-80gb" */
    const char *label; /**< e.g. "A100 80 GB" */
    uint64_t bytes;    /**< the marketed size in GB = 10^9 bytes */
} KvsimGpu;

/**
 * Looks up a GPU preset: "a100-40gb" (40 GB), "a100-80gb" (80 GB),
 * "h100-80gb" (80 GB), "h200-141gb" (141 GB); case does not matter. The
 * sizes are the marketed ones in GB = 10^9 B (an A100 80GB actually has
 * 80 GiB of HBM; give --gpu-mem 80GiB for that reading).
 * @param name  preset name
 * @param gpu   receives the preset
 * @return 0 if known, -1 otherwise
 */
int kvsim_gpu_preset(const char *name, KvsimGpu *gpu);

/**
 * Comma-separated GPU preset names, for help texts and errors.
 * @return a static string
 */
const char *kvsim_gpu_names(void);

/** Kinds of length distribution. */
typedef enum {
    KVSIM_FIXED,     /**< always the same length */
    KVSIM_UNIFORM,   /**< every integer in [lo, hi] equally likely */
    KVSIM_LOGNORMAL, /**< exp(N(mu, sigma^2)), rounded to an integer */
    KVSIM_GAMMA,     /**< gamma of shape 1/CV^2 and scale exp(mu), rounded */
    KVSIM_WEIBULL    /**< Weibull of the shape giving CV and scale exp(mu), rounded */
} KvsimDistKind;

/** A distribution of token counts. */
typedef struct {
    KvsimDistKind kind; /**< fixed, uniform, lognormal, gamma or Weibull */
    double a;           /**< fixed: the length; uniform: lo; lognormal, gamma, Weibull: the mean before truncation */
    double b;           /**< uniform: hi; lognormal: sigma of ln(length); gamma, Weibull: the CV (sd / mean) */
} KvsimDist;

/**
 * Parses "fixed:N", "uniform:LO:HI", "lognormal:MEAN:SIGMA" (MEAN is the
 * mean of the lognormal before truncation, so mu = ln(MEAN) - SIGMA^2 / 2),
 * "gamma:MEAN:CV" or "weibull:MEAN:CV" (MEAN before truncation, CV the
 * standard deviation over the mean, 0.05 to 4; the shape follows from CV).
 * @param text  the description
 * @param d     receives the distribution
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvsim_dist_parse(const char *text, KvsimDist *d, Err *err);

/**
 * Writes a distribution the way kvsim_dist_parse() reads it.
 * @param buf  output
 * @param n    its size
 * @param d    the distribution
 * @return buf
 */
const char *kvsim_dist_format(char *buf, size_t n, const KvsimDist *d);

/**
 * The mean of a distribution before any filter, at a given log-scale: what
 * kvsim prints as "before the filter".
 * @param d  the distribution (for lognormal, gamma and Weibull its kind and
 *           spread; their MEAN is not used, @p mu stands for it)
 * @param mu the log-scale: the lognormal's mu, or ln of the gamma's or Weibull's
 *           scale (ignored for fixed and uniform)
 * @return the mean of the unrounded, untruncated draw (fixed and uniform: their own mean)
 */
double kvsim_dist_mean_at(const KvsimDist *d, double mu);

/** A named workload: input and output length distributions and where they come from. */
typedef struct {
    const char *name;   /**< "sharegpt" or "alpaca" */
    KvsimDist input;    /**< prompt lengths */
    KvsimDist output;   /**< output lengths */
    const char *source; /**< one sentence: where the numbers come from */
} KvsimWorkloadPreset;

/**
 * Looks up a named workload ("sharegpt", "alpaca"). The means are the
 * PagedAttention paper's (Kwon et al., SOSP 2023, Fig. 11: ShareGPT input
 * 161.31 / output 337.99 tokens, Alpaca 19.31 / 58.45); the paper gives no
 * spread beyond "higher variance" for ShareGPT, so the sigmas (1.0 for
 * ShareGPT, 0.6 and 0.8 for Alpaca) are this project's assumption.
 * @param name  preset name
 * @param w     receives the preset
 * @return 0 if known, -1 otherwise
 */
int kvsim_workload_preset(const char *name, KvsimWorkloadPreset *w);

/** A small seeded generator (splitmix64): the same seed, the same workload. */
typedef struct {
    uint64_t state; /**< advances by a constant per draw */
} KvsimRng;

/**
 * Seeds a generator.
 * @param r     the generator
 * @param seed  any value
 */
void kvsim_rng_seed(KvsimRng *r, uint64_t seed);

/**
 * A uniform draw.
 * @param r  the generator
 * @return a double in [0, 1)
 */
double kvsim_rng_uniform(KvsimRng *r);

/**
 * Draws one length from @p d within [lo, hi]: a draw outside is drawn
 * again (as benchmark scripts filter requests that are too long), and
 * after 100 misses the last draw is clamped.
 * @param d   the distribution
 * @param lo  smallest acceptable length, >= 1
 * @param hi  largest, >= lo
 * @param r   the generator
 * @return a length in [lo, hi]
 */
int kvsim_dist_draw(const KvsimDist *d, int lo, int hi, KvsimRng *r);

/**
 * A benchmark's filter (`--filter MIN:MAXIN:MAXTOTAL`): a request whose
 * prompt or output is shorter than @c min, whose prompt is longer than
 * @c max_input or whose prompt + output is longer than @c max_total is
 * dropped, and the pair is drawn again (vLLM's benchmark script drops
 * ShareGPT requests this way: 4, 1024, 2048). With a filter, a lognormal's,
 * gamma's or Weibull's MEAN is the mean of the requests the filter keeps:
 * its log-scale mu is solved for that (kvsim_filter_solve()), so the filter does not bias the
 * means.
 */
typedef struct {
    int min;       /**< shortest prompt and output kept, >= 1 */
    int max_input; /**< longest prompt kept */
    int max_total; /**< longest prompt + output kept; 0: no filter */
} KvsimFilter;

/** What requests a simulation serves. */
typedef struct {
    int n_requests;     /**< how many */
    KvsimDist input;    /**< prompt lengths */
    KvsimDist output;   /**< output lengths (tokens produced before EOS) */
    int max_input;      /**< longest prompt the service accepts */
    int max_output;     /**< most new tokens the service allows; output is drawn in [1, min(max_output, seq_len - prompt)] */
    int max_new_tokens; /**< what each request asks for (what `request`/`pow2` reserve): 0 = its true output length (the paper's oracle) */
    double rate;        /**< arrivals per simulated step (Poisson); 0: all arrive at step 0 */
    double seconds_per_step; /**< > 0: arrivals are times (t steps x this, seconds on the run's clock), not steps */
    uint64_t seed;      /**< seeds lengths and arrivals */
    KvsimFilter filter; /**< max_total 0: no filter (lengths out of bounds are redrawn one at a time, which lowers the means) */
} KvsimWorkload;

/** What kvsim_filter_solve() found. */
typedef struct {
    double mu_input;   /**< log-scale of the prompts before the filter: a lognormal's mu, ln of a gamma's or Weibull's scale */
    double mu_output;  /**< log-scale of the outputs before the filter, the same way */
    double mean_input;  /**< mean prompt of the kept requests (the target, when it converged) */
    double mean_output; /**< mean output of the kept requests */
    double kept;        /**< share of the drawn pairs the filter keeps */
} KvsimFilterFit;

/**
 * For a workload with a filter: the log-scales mu of the input and output
 * distributions (lognormal, gamma or Weibull, their spread kept) whose kept
 * pairs have means input.a and output.a, found by iterating
 * mu += ln(target / mean kept) on the exact distribution of the rounded
 * lengths (each family's own CDF, no sampling). A fixed or uniform
 * distribution is taken as it is.
 * @param w        the workload (filter.max_total > 0)
 * @param seq_len  the model's longest sequence (no kept pair is longer)
 * @param fit      receives the parameters and what they give
 * @param err      receives the reason when the filter keeps (almost) nothing
 *                 or the means cannot be reached
 * @return 0 on success, -1 on failure
 */
int kvsim_filter_solve(const KvsimWorkload *w, int seq_len, KvsimFilterFit *fit, Err *err);

/** Mean span of the arrivals (requests / rate), in steps, beyond which a
 *  workload is refused: arrival steps stay far inside a long. */
#define KVSIM_MAX_ARRIVAL_STEPS 1e12

/**
 * Checks a workload against the model's seq_len (lengths that can never
 * be drawn, limits that leave no room, arrivals too slow to fit a run).
 * @param w        the workload
 * @param seq_len  the model's longest sequence
 * @param err      receives the reason on failure
 * @return 0 when it can be generated, -1 otherwise
 */
int kvsim_workload_check(const KvsimWorkload *w, int seq_len, Err *err);

/**
 * Draws the requests: for each, a prompt length, an output length, what it
 * asks for, and its arrival step (the first at step 0, then exponential
 * gaps of mean 1/rate steps, rounded down), or with seconds_per_step its
 * arrival time (the same sums, unrounded, times seconds_per_step). With a
 * filter, pairs are drawn
 * from the distributions of @p fit until one is kept.
 * @param w        the workload (checked)
 * @param seq_len  the model's longest sequence
 * @param fit      with a filter, what kvsim_filter_solve() found; else NULL
 * @param out      [w->n_requests] receives the requests in arrival order
 */
void kvsim_make_requests(const KvsimWorkload *w, int seq_len, const KvsimFilterFit *fit, SimRequestSpec *out);

/**
 * The same requests as the PagedAttention paper's Orca baselines that know
 * each output length ask for them (its Sec. 6.1): Orca (Oracle) exactly
 * the output; Orca (Pow2) the output rounded up to a power of two ("if the
 * true output length is 25, it reserves 32 positions for outputs"); the
 * prompt comes on top in both (chapter 3's `--reserve request`).
 * @param asked     [n] the requests
 * @param n         how many
 * @param oracle    [n] receives them asking for their output length
 * @param out_pow2  [n] receives them asking for it rounded up to a power of two
 */
void kvsim_knowing_outputs(const SimRequestSpec *asked, int n, SimRequestSpec *oracle, SimRequestSpec *out_pow2);

/** What one strategy did with one workload. */
typedef struct {
    int max_concurrent;      /**< most requests running after any step */
    double avg_concurrent;   /**< requests running, averaged over the steps that ran a batch */
    double util_avg;         /**< KV used / reserved, averaged over steps (the chapters' kv_utilization_avg) */
    double util_at_peak;     /**< used / reserved at the step of peak reservation */
    double breakdown[4];     /**< token states, reserved, internal, external fragmentation (fractions) */
    double held_by_finished; /**< share of the same byte-steps reserved by requests that had already finished
                                  (static batching keeps them until the batch ends; counted above as what they hold) */
    double live_token_states; /**< token states of requests still running: breakdown[0] minus what finished ones held */
    size_t peak_reserved;    /**< most KV bytes reserved at once */
    long preemptions;        /**< requeues (chapter 3) or preemptions (chapter 4) */
    int completed;           /**< requests that finished */
    int rejected;            /**< requests that could never run */
    long steps;              /**< simulated steps from the first to the last (idle ones included) */
    long busy_steps;         /**< steps that ran a batch */
    long tokens_generated;   /**< new tokens of all requests */
    double served_per_step;  /**< completed / steps */
    double mean_latency;     /**< steps from arrival to finish, averaged over completed requests */
    /**
     * The PagedAttention paper's Fig. 2 method: shares of the **whole KV
     * pool** (slots x steps, idle steps included), not of what was
     * reserved: token states (positions holding K/V); reservation
     * (positions a request asked for that it will still fill);
     * internal fragmentation (positions it asked for and will never
     * fill); external fragmentation and others (the rest of the pool:
     * free, too scattered to use, or lost to a buddy block's rounding
     * beyond what the request asked for). A paged request asks for its
     * blocks.
     */
    double pool_share[4];
    int has_latency;         /**< 1: the run was timed by the cost model (kvsim_run_timed()) */
    LatencySummary latency;  /**< its latency then (latency.h) */
} KvsimResult;

/** The cost model a timed run's clock follows (cost_model.h), and its objectives. */
typedef struct {
    CostMachine machine; /**< the GPU's rates */
    CostShape shape;     /**< the model's costs */
    LatencySlo slo;      /**< --slo-ttft, --slo-tpot (0: none) */
} KvsimClock;

/**
 * Refuses a strategy that can never run on this workload before anything
 * is printed (the chapter's own check, e.g. a budget that holds no
 * reservation under --reserve max).
 * @param ch                  the chapter
 * @param shape               a model whose cfg alone is filled in
 * @param o                   the chapter's options
 * @param kv_bytes_per_token  K and V of one token
 * @param reqs                [n] the requests
 * @param n                   how many
 * @param err                 receives the reason
 * @return 0 when it can run, -1 otherwise
 */
int kvsim_check(ServeChapter ch, const Model *shape, const CliOptions *o, size_t kv_bytes_per_token,
                const SimRequestSpec *reqs, int n, Err *err);

/** A progress line on a long simulated run: the observer kvsim_progress()
 *  writes one every 5 seconds, none on a run shorter than that. */
typedef struct {
    const char *label; /**< what runs ("paged", "hash"), for the line */
    FILE *f;           /**< where the line goes (stderr), or NULL: none */
    double last_s;     /**< when the last line was written (monotonic seconds; 0: not started) */
} KvsimProgress;

/**
 * A serving observer (serving_add_observer()): every 5 seconds of the run,
 * "kvsim: LABEL: step S, R running, W waiting, D of N requests done".
 * @param ctx  a KvsimProgress
 * @param run  the run
 */
void kvsim_progress(void *ctx, const ServingRun *run);

/**
 * Runs one strategy: a simulated run of @p reqs through chapter @p ch with
 * options @p o (budget, --reserve, --block-size, --max-batch, --watermark)
 * and collects its numbers. Nothing is printed unless @p log is given.
 * It watches every step through an observer of the run (serving_add_observer()).
 * @param ch                  the chapter
 * @param shape               a model whose cfg alone is filled in
 * @param o                   the chapter's options
 * @param kv_bytes_per_token  K and V of one token, all layers, in the simulated dtype
 * @param reqs                [n] requests in arrival order
 * @param n                   how many
 * @param log                 the chapter's setup lines go here, or NULL
 * @param res                 receives the numbers
 * @param err                 receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvsim_run(ServeChapter ch, const Model *shape, const CliOptions *o, size_t kv_bytes_per_token,
              const SimRequestSpec *reqs, int n, FILE *log, KvsimResult *res, Err *err);

/**
 * kvsim_run() on the cost model's clock (`--latency`): the same run, each
 * step lasting what cost_step_seconds() says, and the latency of its
 * requests in res->latency.
 * @param ch                  the chapter
 * @param shape               a model whose cfg alone is filled in
 * @param o                   the chapter's options
 * @param kv_bytes_per_token  K and V of one token
 * @param reqs                [n] requests in arrival order
 * @param n                   how many
 * @param clock               the cost model and the objectives
 * @param res                 receives the numbers
 * @param err                 receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvsim_run_timed(ServeChapter ch, const Model *shape, const CliOptions *o, size_t kv_bytes_per_token,
                    const SimRequestSpec *reqs, int n, const KvsimClock *clock, KvsimResult *res, Err *err);

#endif
