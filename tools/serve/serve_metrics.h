/**
 * @file serve_metrics.h
 * @brief kvlab-serve's GET /metrics: counters, gauges and histograms in the
 *        Prometheus text format, named as vLLM names them so that the same
 *        dashboards and queries read both.
 *
 * | vLLM's name | what kvlab-serve counts |
 * |---|---|
 * | vllm:num_requests_running | requests (choices) admitted into the batch |
 * | vllm:num_requests_waiting | choices waiting: not admitted yet, or preempted |
 * | vllm:kv_cache_usage_perc | blocks held by a table / blocks in the pool (0 to 1, as vLLM) |
 * | vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total | prompt positions looked up / found cached (chapter 5) |
 * | vllm:num_preemptions_total | requests sent back to the queue |
 * | vllm:prompt_tokens_total, vllm:generation_tokens_total | tokens in and out |
 * | vllm:request_success_total{finished_reason} | requests finished by stop or length |
 * | vllm:time_to_first_token_seconds | from the request's arrival to its first token, at the server |
 * | vllm:inter_token_latency_seconds | between one token and the next of a choice |
 * | vllm:e2e_request_latency_seconds | from arrival to the last token |
 *
 * kvlab adds kvlab:blocks_total, kvlab:blocks_used, kvlab:blocks_free
 * (free: on the free stack or parked by the prefix cache) and
 * kvlab:requests_cancelled_total.
 */
#ifndef KVLAB_SERVE_METRICS_H
#define KVLAB_SERVE_METRICS_H

/** Most finite bucket bounds of a histogram. */
#define SERVE_HIST_MAX_BOUNDS 20

/** A Prometheus histogram: counts per bucket (cumulated when written), sum and count. */
typedef struct {
    const double *bounds;                    /**< [n_bounds] upper bounds, increasing (seconds) */
    int n_bounds;                            /**< finite buckets; one more (+Inf) follows */
    long counts[SERVE_HIST_MAX_BOUNDS + 1];  /**< observations per bucket (not cumulated) */
    double sum;                              /**< sum of the observations */
    long count;                              /**< observations */
} ServeHistogram;

/** Everything GET /metrics shows. */
typedef struct {
    int running;                /**< choices running */
    int waiting;                /**< choices waiting */
    int blocks_total;           /**< blocks in the pool */
    int blocks_used;            /**< blocks some table holds */
    long prefix_queries;        /**< prompt positions looked up (chapter 5; 0 without the cache) */
    long prefix_hits;           /**< of which found cached */
    long preemptions;           /**< requests preempted */
    long prompt_tokens;         /**< prompt tokens of the choices served */
    long generation_tokens;     /**< tokens generated */
    long finished_stop;         /**< choices that ended on a stop token or string */
    long finished_length;       /**< choices that ended at max_tokens or the context */
    long cancelled;             /**< choices cancelled (client gone) */
    ServeHistogram ttft;        /**< time to first token, seconds */
    ServeHistogram itl;         /**< inter-token latency, seconds */
    ServeHistogram e2e;         /**< end-to-end latency, seconds */
} ServeMetrics;

/**
 * Zeroes the metrics and gives the histograms vLLM's bucket bounds.
 * @param m  the metrics
 */
void serve_metrics_init(ServeMetrics *m);

/**
 * Adds one observation.
 * @param h  the histogram
 * @param x  the value (seconds)
 */
void serve_histogram_add(ServeHistogram *h, double x);

/**
 * The Prometheus text of @p m.
 * @param m      the metrics
 * @param model  the model_name label
 * @return malloc'ed text, or NULL when memory runs out
 */
char *serve_metrics_text(const ServeMetrics *m, const char *model);

#endif
