/**
 * @file latency.h
 * @brief What a client sees of a request's speed, and the summary over
 *        many requests: queue time, time to first token, time per output
 *        token, inter-token latency, end-to-end latency, throughput and
 *        goodput.
 *
 * A request's life on one clock (seconds; which clock is the caller's
 * business: the serving chapters use the run's clock, serving.h):
 *
 *     arrival ---- admission ---- output 1 ---- output 2 ... ---- output n = finish
 *       |<- queue ->|
 *       |<--------- TTFT ---------->|<- ITL ->|
 *       |<------------------------------ e2e ------------------------------>|
 *
 * - **queue**: first admission minus arrival.
 * - **TTFT** (time to first token): first output minus arrival. It holds
 *   the queue and the whole prompt's prefill.
 * - **ITL** (inter-token latency): the gap between two consecutive outputs
 *   of one request. Every gap of every request is one value.
 * - **TPOT** (time per output token): (last output - first output) /
 *   (outputs - 1), one value per request with at least two outputs: that
 *   request's mean ITL. Averaged over requests it weighs each request
 *   equally; the ITLs weigh each token equally.
 * - **e2e**: last output minus arrival, so that e2e = TTFT + (outputs - 1)
 *   x TPOT exactly.
 *
 * An **output** is every sample a request takes, the one that stops it
 * (EOS, `<|im_end|>`) included: the client waits for that step as for any
 * other, and an OpenAI server streams it as the chunk that carries
 * `finish_reason`. kvlab does not keep a stop token among a request's
 * tokens, so a request that stops has one output more than it has new
 * tokens.
 *
 * **Percentiles** are nearest-rank: the p-th percentile of n values is the
 * value of rank ceil(p / 100 x n) in ascending order (rank 1 the smallest),
 * so it is always one of the values (p50 of 1, 2, 3, 4 is 2; p99 of 100
 * values is the 99th smallest). numpy's default (and so vLLM's benchmark
 * script) interpolates linearly between ranks instead, which differs on
 * small samples. Means add the values in request order.
 *
 * **Goodput** counts the requests that meet both objectives: TTFT <= the
 * TTFT objective and TPOT <= the TPOT objective (a request with a single
 * output has no TPOT and meets that objective); requests per second of
 * the run's duration.
 *
 * Nothing here allocates while requests run: a ::RequestTimeline writes
 * its outputs into storage sized before the run (latency_recorder_init()
 * sizes it from each request's most outputs), and the summary allocates
 * its scratch once, at the end.
 */
#ifndef KVLAB_LATENCY_H
#define KVLAB_LATENCY_H

#include <stdio.h>

#include "err.h"
#include "json.h"

/** One request's moments on the clock. Times are seconds; -1: not yet. */
typedef struct {
    double arrival_s;       /**< when it arrived */
    double admitted_s;      /**< its first admission (-1: never admitted) */
    double first_output_s;  /**< its first output (-1: none yet) */
    double last_output_s;   /**< its latest output: its finish once it is done (-1: none yet) */
    long arrival_step;      /**< the step it arrived at (joined the queue) */
    long first_output_step; /**< the step that gave its first output (-1: none yet) */
    int n_outputs;          /**< outputs so far */
    int capacity;           /**< entries of output_s (0: only the first and last output are kept) */
    double *output_s;       /**< [capacity] the time of each output, in order; not owned */
} RequestTimeline;

/**
 * Starts a timeline with nothing recorded.
 * @param t         the timeline
 * @param storage   [capacity] where the outputs' times go, or NULL
 * @param capacity  most outputs the request can have (0 with NULL storage)
 */
void timeline_init(RequestTimeline *t, double *storage, int capacity);

/**
 * The request arrived.
 * @param t     the timeline
 * @param s     when
 * @param step  the step it joined the queue at
 */
void timeline_arrive(RequestTimeline *t, double s, long step);

/**
 * The request was admitted (only the first admission counts).
 * @param t  the timeline
 * @param s  when
 */
void timeline_admit(RequestTimeline *t, double s);

/**
 * The request took an output (a token, or the stop). Outputs past the
 * capacity update the first and last times only.
 * @param t     the timeline
 * @param s     when (never earlier than the previous output)
 * @param step  the step that computed it
 */
void timeline_output(RequestTimeline *t, double s, long step);

/**
 * Queue time: first admission - arrival.
 * @param t  the timeline
 * @return seconds, or -1 when it was never admitted
 */
double timeline_queue(const RequestTimeline *t);

/**
 * Time to first token: first output - arrival.
 * @param t  the timeline
 * @return seconds, or -1 when it has no output
 */
double timeline_ttft(const RequestTimeline *t);

/**
 * Time per output token: (last output - first output) / (outputs - 1).
 * @param t  the timeline
 * @return seconds, or -1 with fewer than two outputs
 */
double timeline_tpot(const RequestTimeline *t);

/**
 * End-to-end latency: last output - arrival.
 * @param t  the timeline
 * @return seconds, or -1 when it has no output
 */
double timeline_e2e(const RequestTimeline *t);

/**
 * The gaps between consecutive outputs, in order.
 * @param t    the timeline
 * @param out  [n_outputs - 1] receives the gaps (may be NULL to count)
 * @return how many gaps were written: n_outputs - 1 when every output's
 *         time was kept, 0 when there are fewer than two or the capacity
 *         was too small to keep them all
 */
int timeline_itls(const RequestTimeline *t, double *out);

/** Mean and nearest-rank percentiles of a set of values (all 0 when it is empty). */
typedef struct {
    long count;  /**< values */
    double mean; /**< their mean */
    double p50;  /**< nearest-rank median */
    double p90;  /**< nearest-rank 90th percentile */
    double p99;  /**< nearest-rank 99th percentile */
    double max;  /**< the largest */
} LatencyStats;

/**
 * The nearest-rank percentile of sorted values: the value of rank
 * ceil(pct x n / 100), rank 1 being the smallest (rank 1 for pct 0).
 * @param sorted  [n] values in ascending order
 * @param n       how many, >= 1
 * @param pct     a whole percent, 0 to 100
 * @return one of the values
 */
double latency_percentile(const double *sorted, long n, int pct);

/**
 * Mean, p50, p90, p99 and max of @p values (which it sorts in place).
 * @param values  [n] the values; sorted on return
 * @param n       how many (0: every figure is 0)
 * @param out     receives the figures
 */
void latency_stats(double *values, long n, LatencyStats *out);

/** Latency objectives (0: no objective of that kind). */
typedef struct {
    double ttft_s; /**< most time to first token, seconds */
    double tpot_s; /**< most time per output token, seconds */
} LatencySlo;

/** The latency of a run, over its completed requests. */
typedef struct {
    int requests;          /**< requests with at least one output */
    long outputs;          /**< their outputs */
    long tokens;           /**< new tokens kept (the caller's count; outputs minus stops) */
    double duration_s;     /**< the run's span on its clock */
    double requests_per_s; /**< requests / duration */
    double tokens_per_s;   /**< tokens / duration */
    LatencyStats queue;    /**< queue time of each request */
    LatencyStats ttft;     /**< TTFT of each request */
    LatencyStats tpot;     /**< TPOT of each request with two outputs or more */
    LatencyStats itl;      /**< every gap between outputs (requests whose outputs were all kept) */
    LatencyStats e2e;      /**< e2e of each request */
    LatencySlo slo;        /**< the objectives goodput counts against */
    int good;              /**< requests that met both objectives (every request when there are none) */
    double goodput_per_s;  /**< good / duration */
} LatencySummary;

/**
 * Summarizes @p n timelines (requests without an output are left out).
 * Allocates its scratch once (activations) and frees it.
 * @param t           [n] the timelines
 * @param n           how many
 * @param duration_s  the run's span on the same clock (0: throughputs are 0)
 * @param tokens      new tokens kept over the run
 * @param slo         the objectives (NULL: none)
 * @param out         receives the summary
 * @param err         receives the reason on failure
 * @return 0 on success, -1 when the scratch cannot be allocated
 */
int latency_summarize(const RequestTimeline *t, int n, double duration_s, long tokens, const LatencySlo *slo,
                      LatencySummary *out, Err *err);

/**
 * Prints the latency block of a memory table: the throughput line, a row
 * per measure (queue, TTFT, TPOT, ITL, e2e: mean, p50, p90, p99, max in
 * milliseconds), and the goodput line when there are objectives.
 * @param f      stream
 * @param s      the summary
 * @param clock  one line saying which clock the times are on (printed after "latency")
 */
void latency_print(FILE *f, const LatencySummary *s, const char *clock);

/**
 * Writes the summary's keys into the current JSON object: requests,
 * outputs, tokens, duration_s, requests_per_s, tokens_per_s, one object
 * per measure (queue_s, ttft_s, tpot_s, itl_s, e2e_s: count, mean, p50,
 * p90, p99, max, in seconds), and with objectives slo_ttft_s, slo_tpot_s,
 * good_requests, goodput_requests_per_s.
 * @param j  the writer, inside an object
 * @param s  the summary
 */
void latency_json(JsonWriter *j, const LatencySummary *s);

/**
 * Writes one request's keys into its JSON line: arrival_s, queue_s,
 * ttft_s, tpot_s, e2e_s (null when undefined) and its ITLs' itl_p50_s,
 * itl_p90_s, itl_p99_s, itl_max_s (with two outputs or more, all kept).
 * @param j        the writer, inside the request's object
 * @param t        the request's timeline
 * @param scratch  [t->capacity] room for its gaps
 */
void latency_json_request(JsonWriter *j, const RequestTimeline *t, double *scratch);

/**
 * Owns the timelines of @p n requests and one block of output times,
 * sized up front: what a run records into while its requests run.
 */
typedef struct {
    RequestTimeline *reqs; /**< [n] one per request */
    int n;                 /**< requests */
    double *output_s;      /**< [sum of the capacities] every request's output times */
    int max_capacity;      /**< the largest capacity (for scratch) */
} LatencyRecorder;

/**
 * Allocates the timelines and their outputs' storage (activations), each
 * timeline started with its request's capacity.
 * @param rec          receives the recorder
 * @param n            requests, >= 0
 * @param capacity_of  most outputs request @p i can have (>= 0)
 * @param ctx          passed to @p capacity_of
 * @param err          receives the reason on failure
 * @return 0 on success, -1 when out of memory or the sizes overflow
 */
int latency_recorder_init(LatencyRecorder *rec, int n, int (*capacity_of)(const void *ctx, int i), const void *ctx,
                          Err *err);

/**
 * Frees a recorder.
 * @param rec  from latency_recorder_init(), or zeroed
 */
void latency_recorder_free(LatencyRecorder *rec);

#endif
