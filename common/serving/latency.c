#include "latency.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "parse.h"

/* ------------------------------------------------------------ one request */

void timeline_init(RequestTimeline *t, double *storage, int capacity)
{
    *t = (RequestTimeline){.arrival_s = 0.0, .admitted_s = -1.0, .first_output_s = -1.0, .last_output_s = -1.0,
                           .first_output_step = -1, .capacity = storage ? capacity : 0, .output_s = storage};
}

void timeline_arrive(RequestTimeline *t, double s, long step)
{
    t->arrival_s = s;
    t->arrival_step = step;
}

void timeline_admit(RequestTimeline *t, double s)
{
    if (t->admitted_s < 0)
        t->admitted_s = s;
}

void timeline_output(RequestTimeline *t, double s, long step)
{
    if (t->n_outputs == 0) {
        t->first_output_s = s;
        t->first_output_step = step;
    }
    if (t->n_outputs < t->capacity)
        t->output_s[t->n_outputs] = s;
    t->last_output_s = s;
    t->n_outputs++;
}

double timeline_queue(const RequestTimeline *t)
{
    return t->admitted_s < 0 ? -1.0 : t->admitted_s - t->arrival_s;
}

double timeline_ttft(const RequestTimeline *t)
{
    return t->n_outputs < 1 ? -1.0 : t->first_output_s - t->arrival_s;
}

double timeline_tpot(const RequestTimeline *t)
{
    return t->n_outputs < 2 ? -1.0 : (t->last_output_s - t->first_output_s) / (double)(t->n_outputs - 1);
}

double timeline_e2e(const RequestTimeline *t)
{
    return t->n_outputs < 1 ? -1.0 : t->last_output_s - t->arrival_s;
}

int timeline_itls(const RequestTimeline *t, double *out)
{
    if (t->n_outputs < 2 || t->n_outputs > t->capacity)
        return 0;
    if (out)
        for (int i = 1; i < t->n_outputs; i++)
            out[i - 1] = t->output_s[i] - t->output_s[i - 1];
    return t->n_outputs - 1;
}

/* ------------------------------------------------------------ statistics */

double latency_percentile(const double *sorted, long n, int pct)
{
    /* rank = ceil(pct x n / 100) in integers: 0.9 x 10 in doubles is
     * 9.000000000000002, whose ceiling would be 10. */
    long rank = ((long)pct * n + 99) / 100;
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void latency_stats(double *values, long n, LatencyStats *out)
{
    memset(out, 0, sizeof *out);
    if (n <= 0)
        return;
    double sum = 0.0;
    for (long i = 0; i < n; i++) /* in the caller's order: the same sum on every machine */
        sum += values[i];
    qsort(values, (size_t)n, sizeof values[0], compare_doubles);
    out->count = n;
    out->mean = sum / (double)n;
    out->p50 = latency_percentile(values, n, 50);
    out->p90 = latency_percentile(values, n, 90);
    out->p99 = latency_percentile(values, n, 99);
    out->max = values[n - 1];
}

/* ------------------------------------------------------------ summary */

static int meets(const RequestTimeline *t, const LatencySlo *slo)
{
    double tpot = timeline_tpot(t);
    return (slo->ttft_s <= 0 || timeline_ttft(t) <= slo->ttft_s) && (slo->tpot_s <= 0 || tpot < 0 || tpot <= slo->tpot_s);
}

/* One value per request with outputs, picked by @p which (-1: none). */
static void per_request_stats(const RequestTimeline *t, int n, double (*which)(const RequestTimeline *),
                              double *scratch, LatencyStats *out)
{
    long k = 0;
    for (int i = 0; i < n; i++) {
        double v = t[i].n_outputs > 0 ? which(&t[i]) : -1.0;
        if (v >= 0)
            scratch[k++] = v;
    }
    latency_stats(scratch, k, out);
}

static long total_gaps(const RequestTimeline *t, int n)
{
    long gaps = 0;
    for (int i = 0; i < n; i++)
        gaps += timeline_itls(&t[i], NULL);
    return gaps;
}

int latency_summarize(const RequestTimeline *t, int n, double duration_s, long tokens, const LatencySlo *slo,
                      LatencySummary *out, Err *err)
{
    memset(out, 0, sizeof *out);
    if (slo)
        out->slo = *slo;
    long gaps = total_gaps(t, n);
    size_t room = (size_t)(gaps > n ? gaps : n);
    double *scratch = mem_alloc_array(MEM_ACTIVATIONS, room > 0 ? room : 1, sizeof(double)); /* [room] values */
    if (!scratch)
        return err_set(err, "out of memory for the latency summary of %d requests", n);
    for (int i = 0; i < n; i++) {
        if (t[i].n_outputs < 1)
            continue;
        out->requests++;
        out->outputs += t[i].n_outputs;
        out->good += meets(&t[i], &out->slo);
    }
    per_request_stats(t, n, timeline_queue, scratch, &out->queue);
    per_request_stats(t, n, timeline_ttft, scratch, &out->ttft);
    per_request_stats(t, n, timeline_tpot, scratch, &out->tpot);
    per_request_stats(t, n, timeline_e2e, scratch, &out->e2e);
    long k = 0;
    for (int i = 0; i < n; i++)
        k += timeline_itls(&t[i], scratch + k);
    latency_stats(scratch, k, &out->itl);
    mem_free(scratch);
    out->tokens = tokens;
    out->duration_s = duration_s;
    if (duration_s > 0) {
        out->requests_per_s = out->requests / duration_s;
        out->tokens_per_s = (double)tokens / duration_s;
        out->goodput_per_s = out->good / duration_s;
    }
    return 0;
}

/* ------------------------------------------------------------ output */

/* Milliseconds in 10 columns: 4 significant digits, whole ones from 10 s. */
static void print_ms(FILE *f, double s)
{
    fprintf(f, s >= 10.0 ? " %10.0f" : " %10.4g", 1e3 * s);
}

static void print_row(FILE *f, const char *name, const LatencyStats *s)
{
    fprintf(f, "  %-6s", name);
    if (s->count == 0) {
        fprintf(f, " %10s\n", "-");
        return;
    }
    const double v[5] = {s->mean, s->p50, s->p90, s->p99, s->max};
    for (int i = 0; i < 5; i++)
        print_ms(f, v[i]);
    fprintf(f, "  (%ld)\n", s->count);
}

void latency_print(FILE *f, const LatencySummary *s, const char *clock)
{
    fprintf(f, "latency (%s)\n", clock);
    fprintf(f, "  %d requests, %ld tokens in %.4g s: %.4g requests/s, %.4g tokens/s\n", s->requests, s->tokens,
            s->duration_s, s->requests_per_s, s->tokens_per_s);
    fprintf(f, "  %-6s %10s %10s %10s %10s %10s  (values)\n", "ms", "mean", "p50", "p90", "p99", "max");
    print_row(f, "queue", &s->queue);
    print_row(f, "TTFT", &s->ttft);
    print_row(f, "TPOT", &s->tpot);
    print_row(f, "ITL", &s->itl);
    print_row(f, "e2e", &s->e2e);
    if (s->slo.ttft_s > 0 || s->slo.tpot_s > 0) {
        char ttft[48] = "", tpot[48] = "";
        if (s->slo.ttft_s > 0)
            snprintf(ttft, sizeof ttft, "TTFT <= %.4g ms", 1e3 * s->slo.ttft_s);
        if (s->slo.tpot_s > 0)
            snprintf(tpot, sizeof tpot, "%sTPOT <= %.4g ms", ttft[0] ? " and " : "", 1e3 * s->slo.tpot_s);
        fprintf(f, "  goodput %d of %d requests met %s%s: %.4g requests/s\n", s->good, s->requests, ttft, tpot,
                s->goodput_per_s);
    }
    fprintf(f, "  percentiles: nearest rank; TPOT: per request with 2+ outputs; ITL: every gap\n");
}

static void json_stats(JsonWriter *j, const char *key, const LatencyStats *s)
{
    json_begin_object(j, key);
    json_int(j, "count", s->count);
    json_double(j, "mean", s->mean);
    json_double(j, "p50", s->p50);
    json_double(j, "p90", s->p90);
    json_double(j, "p99", s->p99);
    json_double(j, "max", s->max);
    json_end_object(j);
}

void latency_json(JsonWriter *j, const LatencySummary *s)
{
    json_int(j, "requests", s->requests);
    json_int(j, "outputs", s->outputs);
    json_int(j, "tokens", s->tokens);
    json_double(j, "duration_s", s->duration_s);
    json_double(j, "requests_per_s", s->requests_per_s);
    json_double(j, "tokens_per_s", s->tokens_per_s);
    json_stats(j, "queue_s", &s->queue);
    json_stats(j, "ttft_s", &s->ttft);
    json_stats(j, "tpot_s", &s->tpot);
    json_stats(j, "itl_s", &s->itl);
    json_stats(j, "e2e_s", &s->e2e);
    if (s->slo.ttft_s > 0 || s->slo.tpot_s > 0) {
        json_double(j, "slo_ttft_s", s->slo.ttft_s);
        json_double(j, "slo_tpot_s", s->slo.tpot_s);
        json_int(j, "good_requests", s->good);
        json_double(j, "goodput_requests_per_s", s->goodput_per_s);
    }
}

/* A value, or null when it is undefined (< 0): json_double() writes a
 * NaN as null. */
static void json_maybe(JsonWriter *j, const char *key, double v)
{
    json_double(j, key, v < 0 ? NAN : v);
}

void latency_json_request(JsonWriter *j, const RequestTimeline *t, double *scratch)
{
    json_double(j, "arrival_s", t->arrival_s);
    json_maybe(j, "queue_s", timeline_queue(t));
    json_maybe(j, "ttft_s", timeline_ttft(t));
    json_maybe(j, "tpot_s", timeline_tpot(t));
    json_maybe(j, "e2e_s", timeline_e2e(t));
    json_int(j, "outputs", t->n_outputs);
    long n = timeline_itls(t, scratch);
    if (n == 0)
        return;
    LatencyStats s;
    latency_stats(scratch, n, &s);
    json_double(j, "itl_p50_s", s.p50);
    json_double(j, "itl_p90_s", s.p90);
    json_double(j, "itl_p99_s", s.p99);
    json_double(j, "itl_max_s", s.max);
}

/* ------------------------------------------------------------ recorder */

int latency_recorder_init(LatencyRecorder *rec, int n, int (*capacity_of)(const void *ctx, int i), const void *ctx,
                          Err *err)
{
    memset(rec, 0, sizeof *rec);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int c = capacity_of(ctx, i);
        if (size_add(total, (size_t)(c > 0 ? c : 0), &total))
            return err_set(err, "the latency record of %d requests overflows", n);
        if (c > rec->max_capacity)
            rec->max_capacity = c;
    }
    rec->reqs = mem_alloc_array(MEM_ACTIVATIONS, (size_t)(n > 0 ? n : 1), sizeof(RequestTimeline)); /* [n] */
    rec->output_s = mem_alloc_array(MEM_ACTIVATIONS, total > 0 ? total : 1, sizeof(double)); /* [total] */
    if (!rec->reqs || !rec->output_s) {
        latency_recorder_free(rec);
        return err_set(err, "out of memory for the latency record of %d requests (%zu outputs)", n, total);
    }
    rec->n = n;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        int c = capacity_of(ctx, i);
        c = c > 0 ? c : 0;
        timeline_init(&rec->reqs[i], rec->output_s + at, c);
        at += (size_t)c;
    }
    return 0;
}

void latency_recorder_free(LatencyRecorder *rec)
{
    mem_free(rec->reqs);
    mem_free(rec->output_s);
    memset(rec, 0, sizeof *rec);
}
