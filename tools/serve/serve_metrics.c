/* GET /metrics in the Prometheus text format (version 0.0.4), with vLLM's
 * names and bucket bounds. */
#include "serve_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's bounds (vllm/v1/metrics/loggers.py), in seconds. */
static const double TTFT_BOUNDS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
static const double ITL_BOUNDS[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double E2E_BOUNDS[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                    20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

void serve_metrics_init(ServeMetrics *m)
{
    memset(m, 0, sizeof *m);
    m->ttft = (ServeHistogram){.bounds = TTFT_BOUNDS, .n_bounds = COUNT(TTFT_BOUNDS)};
    m->itl = (ServeHistogram){.bounds = ITL_BOUNDS, .n_bounds = COUNT(ITL_BOUNDS)};
    m->e2e = (ServeHistogram){.bounds = E2E_BOUNDS, .n_bounds = COUNT(E2E_BOUNDS)};
}

void serve_histogram_add(ServeHistogram *h, double x)
{
    int b = 0;
    while (b < h->n_bounds && x > h->bounds[b])
        b++;
    h->counts[b]++;
    h->sum += x;
    h->count++;
}

static void metric(FILE *f, const char *name, const char *type, const char *help, const char *model, double value)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"%s\"} %.17g\n", name, help, name, type, name, model,
            value);
}

static void histogram(FILE *f, const char *name, const char *help, const char *model, const ServeHistogram *h)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long cumulated = 0;
    for (int b = 0; b < h->n_bounds; b++) {
        cumulated += h->counts[b];
        fprintf(f, "%s_bucket{le=\"%g\",model_name=\"%s\"} %ld\n", name, h->bounds[b], model, cumulated);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %ld\n", name, model, h->count);
    fprintf(f, "%s_sum{model_name=\"%s\"} %.17g\n%s_count{model_name=\"%s\"} %ld\n", name, model, h->sum, name,
            model, h->count);
}

char *serve_metrics_text(const ServeMetrics *m, const char *model)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    double usage = m->blocks_total > 0 ? (double)m->blocks_used / m->blocks_total : 0.0;
    metric(f, "vllm:num_requests_running", "gauge", "Requests in the running batch.", model, m->running);
    metric(f, "vllm:num_requests_waiting", "gauge", "Requests waiting to be admitted (or preempted).", model,
           m->waiting);
    metric(f, "vllm:kv_cache_usage_perc", "gauge", "KV cache usage: blocks held over blocks in the pool (1 = 100%).",
           model, usage);
    metric(f, "vllm:prefix_cache_queries_total", "counter", "Prompt positions looked up in the prefix cache.", model,
           (double)m->prefix_queries);
    metric(f, "vllm:prefix_cache_hits_total", "counter", "Prompt positions found in the prefix cache.", model,
           (double)m->prefix_hits);
    metric(f, "vllm:num_preemptions_total", "counter", "Requests preempted (their blocks taken back).", model,
           (double)m->preemptions);
    metric(f, "vllm:prompt_tokens_total", "counter", "Prompt tokens of the requests served.", model,
           (double)m->prompt_tokens);
    metric(f, "vllm:generation_tokens_total", "counter", "Tokens generated.", model, (double)m->generation_tokens);
    fprintf(f, "# HELP vllm:request_success_total Requests finished.\n# TYPE vllm:request_success_total counter\n");
    fprintf(f, "vllm:request_success_total{finished_reason=\"stop\",model_name=\"%s\"} %ld\n", model, m->finished_stop);
    fprintf(f, "vllm:request_success_total{finished_reason=\"length\",model_name=\"%s\"} %ld\n", model,
            m->finished_length);
    histogram(f, "vllm:time_to_first_token_seconds", "Time to first token, from arrival at the server.", model,
              &m->ttft);
    histogram(f, "vllm:inter_token_latency_seconds", "Time between two tokens of one request.", model, &m->itl);
    histogram(f, "vllm:e2e_request_latency_seconds", "From arrival at the server to the last token.", model,
              &m->e2e);
    metric(f, "kvlab:blocks_total", "gauge", "Blocks in the pool.", model, m->blocks_total);
    metric(f, "kvlab:blocks_used", "gauge", "Blocks held by some block table.", model, m->blocks_used);
    metric(f, "kvlab:blocks_free", "gauge", "Blocks free (on the free stack, or parked by the prefix cache).", model,
           m->blocks_total - m->blocks_used);
    metric(f, "kvlab:requests_cancelled_total", "counter", "Requests cancelled because their client went away.", model,
           (double)m->cancelled);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
