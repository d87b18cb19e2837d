#include "kvsim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "parse.h"

/* ------------------------------------------------------------ GPUs */

/* Marketed sizes, GB = 10^9 B. */
static const KvsimGpu GPUS[] = {
    {"a100-40gb", "A100 40 GB", 40000000000ULL},
    {"a100-80gb", "A100 80 GB", 80000000000ULL},
    {"h100-80gb", "H100 80 GB", 80000000000ULL},
    {"h200-141gb", "H200 141 GB", 141000000000ULL},
};

int kvsim_gpu_preset(const char *name, KvsimGpu *gpu)
{
    for (size_t i = 0; i < sizeof GPUS / sizeof GPUS[0]; i++)
        if (strcasecmp(name, GPUS[i].name) == 0) {
            *gpu = GPUS[i];
            return 0;
        }
    return -1;
}

const char *kvsim_gpu_names(void)
{
    return "a100-40gb, a100-80gb, h100-80gb, h200-141gb";
}

/* ------------------------------------------------------------ distributions */

/* Reads one number after a ':' (or at the start), advancing *p; strictly
 * (parse_double()): " 5", "0x10" and "inf" are not lengths. */
static int read_number(const char **p, double *v)
{
    if (**p != ':')
        return -1;
    const char *start = *p + 1;
    size_t len = strcspn(start, ":");
    char text[64];
    if (len == 0 || len >= sizeof text)
        return -1;
    memcpy(text, start, len);
    text[len] = '\0';
    if (parse_double(text, -1e300, 1e300, v, NULL))
        return -1;
    *p = start + len;
    return 0;
}

int kvsim_dist_parse(const char *text, KvsimDist *d, Err *err)
{
    static const struct {
        const char *name;
        KvsimDistKind kind;
        int n_numbers;
    } kinds[] = {{"fixed", KVSIM_FIXED, 1}, {"uniform", KVSIM_UNIFORM, 2}, {"lognormal", KVSIM_LOGNORMAL, 2}};
    const char *usage = "use fixed:N, uniform:LO:HI or lognormal:MEAN:SIGMA";
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t len = strlen(kinds[k].name);
        if (strncmp(text, kinds[k].name, len) != 0 || text[len] != ':')
            continue;
        const char *p = text + len;
        double v[2] = {0, 0};
        for (int i = 0; i < kinds[k].n_numbers; i++)
            if (read_number(&p, &v[i]))
                return err_set(err, "'%s': bad number (%s)", text, usage);
        if (*p)
            return err_set(err, "'%s': unexpected '%s' (%s)", text, p, usage);
        *d = (KvsimDist){kinds[k].kind, v[0], v[1]};
        if (d->kind == KVSIM_FIXED && (v[0] < 1 || v[0] != floor(v[0]) || v[0] > 1e7))
            return err_set(err, "'%s': a fixed length is a whole number of tokens >= 1", text);
        if (d->kind == KVSIM_UNIFORM && (v[0] < 1 || v[1] < v[0] || v[0] != floor(v[0]) || v[1] != floor(v[1]) ||
                                         v[1] > 1e7))
            return err_set(err, "'%s': uniform needs whole numbers 1 <= LO <= HI", text);
        if (d->kind == KVSIM_LOGNORMAL && (v[0] < 1 || v[0] > 1e7 || v[1] <= 0 || v[1] > 4))
            return err_set(err, "'%s': lognormal needs MEAN >= 1 and 0 < SIGMA <= 4", text);
        return 0;
    }
    return err_set(err, "'%s' is not a length distribution (%s, or a workload name with --workload)", text, usage);
}

const char *kvsim_dist_format(char *buf, size_t n, const KvsimDist *d)
{
    switch (d->kind) {
    case KVSIM_FIXED: snprintf(buf, n, "fixed:%.0f", d->a); break;
    case KVSIM_UNIFORM: snprintf(buf, n, "uniform:%.0f:%.0f", d->a, d->b); break;
    case KVSIM_LOGNORMAL: snprintf(buf, n, "lognormal:%g:%g", d->a, d->b); break;
    }
    return buf;
}

/* Means from the PagedAttention paper (Fig. 11); sigmas assumed, see kvsim.h. */
static const KvsimWorkloadPreset WORKLOADS[] = {
    {"sharegpt", {KVSIM_LOGNORMAL, 161.31, 1.0}, {KVSIM_LOGNORMAL, 337.99, 1.0},
     "ShareGPT-like: means 161.31 in / 337.99 out from the PagedAttention paper (Fig. 11); sigma 1.0 assumed"},
    {"alpaca", {KVSIM_LOGNORMAL, 19.31, 0.6}, {KVSIM_LOGNORMAL, 58.45, 0.8},
     "Alpaca-like: means 19.31 in / 58.45 out from the PagedAttention paper (Fig. 11); sigmas 0.6 / 0.8 assumed"},
};

int kvsim_workload_preset(const char *name, KvsimWorkloadPreset *w)
{
    for (size_t i = 0; i < sizeof WORKLOADS / sizeof WORKLOADS[0]; i++)
        if (strcasecmp(name, WORKLOADS[i].name) == 0) {
            *w = WORKLOADS[i];
            return 0;
        }
    return -1;
}

/* ------------------------------------------------------------ random numbers */

void kvsim_rng_seed(KvsimRng *r, uint64_t seed)
{
    r->state = seed;
}

/* splitmix64 (Steele, Lea, Flood 2014): one add, three xor-shift-multiplies. */
static uint64_t next_u64(KvsimRng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double kvsim_rng_uniform(KvsimRng *r)
{
    return (double)(next_u64(r) >> 11) * 0x1.0p-53;
}

/* A standard normal draw (Box-Muller; the second value is thrown away to
 * keep the generator stateless beyond its counter). */
static double normal(KvsimRng *r)
{
    double u1 = 1.0 - kvsim_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = kvsim_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double draw_once(const KvsimDist *d, KvsimRng *r)
{
    switch (d->kind) {
    case KVSIM_FIXED: return d->a;
    case KVSIM_UNIFORM: return d->a + floor(kvsim_rng_uniform(r) * (d->b - d->a + 1.0));
    case KVSIM_LOGNORMAL: {
        double mu = log(d->a) - 0.5 * d->b * d->b;
        return floor(exp(mu + d->b * normal(r)) + 0.5);
    }
    }
    return d->a;
}

int kvsim_dist_draw(const KvsimDist *d, int lo, int hi, KvsimRng *r)
{
    double v = lo;
    for (int attempt = 0; attempt < 100; attempt++) {
        v = draw_once(d, r);
        if (v >= lo && v <= hi)
            return (int)v;
    }
    return v < lo ? lo : hi;
}

/* ------------------------------------------------------------ workloads */

/* Whether a distribution can produce anything in [lo, hi] at all. */
static int reaches(const KvsimDist *d, int lo, int hi)
{
    switch (d->kind) {
    case KVSIM_FIXED: return d->a >= lo && d->a <= hi;
    case KVSIM_UNIFORM: return d->b >= lo && d->a <= hi;
    case KVSIM_LOGNORMAL: return 1;
    }
    return 0;
}

int kvsim_workload_check(const KvsimWorkload *w, int seq_len, Err *err)
{
    char a[64];
    if (w->n_requests < 1 || w->n_requests > 1000000)
        return err_set(err, "--requests %d: give 1 to 1000000", w->n_requests);
    if (w->max_input < 1 || w->max_input >= seq_len)
        return err_set(err, "--max-input %d: a prompt must leave room under the model's length %d", w->max_input,
                       seq_len);
    if (w->max_output < 1)
        return err_set(err, "--max-output %d: must be at least 1", w->max_output);
    if (w->max_new_tokens < 0)
        return err_set(err, "--max-new %d: must be at least 1 (or oracle)", w->max_new_tokens);
    if (!(w->rate >= 0) || w->rate > 1e6)
        return err_set(err, "--rate %g: give requests per step >= 0 (0: all at once)", w->rate);
    if (!reaches(&w->input, 1, w->max_input))
        return err_set(err, "--input %s never gives a prompt of 1 to %d tokens (--max-input)",
                       kvsim_dist_format(a, sizeof a, &w->input), w->max_input);
    int out_hi = w->max_output < seq_len - w->max_input ? w->max_output : seq_len - w->max_input;
    if (!reaches(&w->output, 1, out_hi))
        return err_set(err, "--output %s never gives 1 to %d tokens (--max-output %d, and prompts of up to %d "
                       "under the model's length %d)", kvsim_dist_format(a, sizeof a, &w->output), out_hi,
                       w->max_output, w->max_input, seq_len);
    return 0;
}

void kvsim_make_requests(const KvsimWorkload *w, int seq_len, SimRequestSpec *out)
{
    KvsimRng lengths, arrivals;
    kvsim_rng_seed(&lengths, w->seed);
    /* A separate stream: the lengths do not change with the rate. */
    kvsim_rng_seed(&arrivals, w->seed ^ 0x5851f42d4c957f2dULL);
    double t = 0.0;
    for (int i = 0; i < w->n_requests; i++) {
        int prompt = kvsim_dist_draw(&w->input, 1, w->max_input, &lengths);
        int room = seq_len - prompt;
        int output = kvsim_dist_draw(&w->output, 1, w->max_output < room ? w->max_output : room, &lengths);
        int asks = w->max_new_tokens > 0 ? w->max_new_tokens : output;
        if (i > 0 && w->rate > 0)
            t += -log(1.0 - kvsim_rng_uniform(&arrivals)) / w->rate;
        out[i] = (SimRequestSpec){.prompt_tokens = prompt, .max_new_tokens = asks, .output_tokens = output,
                                  .arrival_step = (long)t};
    }
}

/* ------------------------------------------------------------ one run */

/* What the chapters' own books do not separate: KV that requests keep
 * after they finished (chapter 3 releases a batch's regions only when the
 * whole batch is done, and counts what they hold as token states). The
 * run's observer looks at every step, after its accounting. */
typedef struct {
    double finished_reserved; /* byte-steps reserved by requests finished in an earlier step */
    double finished_used;     /* of which holding their tokens */
} Watch;

static void watch_step(void *ctx, const ServingRun *run)
{
    Watch *watch = ctx;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        if (r->phase != REQ_DONE || r->kv.reserved == 0 || r->finished_step >= run->step)
            continue;
        size_t used = (size_t)r->n_cached * run->kv_bytes_per_token;
        watch->finished_reserved += (double)r->kv.reserved;
        watch->finished_used += (double)(used < r->kv.reserved ? used : r->kv.reserved);
    }
}

static void collect(const ServingRun *run, const Watch *watch, KvsimResult *res)
{
    memset(res, 0, sizeof *res);
    res->max_concurrent = run->max_concurrent;
    res->avg_concurrent = run->busy_steps ? run->running_sum / (double)run->busy_steps : 0.0;
    res->util_avg = kv_timeline_avg_utilization(&run->timeline);
    res->util_at_peak = run->timeline.util_at_peak;
    res->peak_reserved = run->timeline.peak_reserved;
    kv_breakdown_fractions(&run->breakdown, res->breakdown);
    const KvBreakdown *b = &run->breakdown;
    double total = b->token_states + b->reserved + b->internal_fragmentation + b->external_fragmentation;
    res->held_by_finished = total > 0 ? watch->finished_reserved / total : 0.0;
    res->live_token_states = total > 0 ? (b->token_states - watch->finished_used) / total : 0.0;
    res->preemptions = serving_preemptions(run);
    res->steps = run->step;
    res->busy_steps = run->busy_steps;
    res->tokens_generated = run->tokens_generated;
    double latency = 0.0;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        if (r->finish == REQ_FINISH_REJECTED) {
            res->rejected++;
            continue;
        }
        res->completed++;
        latency += (double)(r->finished_step + 1 - r->arrival_step);
    }
    res->served_per_step = run->step ? (double)res->completed / (double)run->step : 0.0;
    res->mean_latency = res->completed ? latency / res->completed : 0.0;
}

int kvsim_check(ServeChapter ch, const Model *shape, const CliOptions *o, size_t kv_bytes_per_token,
                const SimRequestSpec *reqs, int n, Err *err)
{
    ServingRun run;
    if (serving_sim_init(&run, shape, o, kv_bytes_per_token, reqs, n, err))
        return -1;
    int rc = serve_check(ch, &run, err);
    serving_run_free(&run);
    return rc;
}

int kvsim_run(ServeChapter ch, const Model *shape, const CliOptions *o, size_t kv_bytes_per_token,
              const SimRequestSpec *reqs, int n, FILE *log, KvsimResult *res, Err *err)
{
    ServingRun run;
    if (serving_sim_init(&run, shape, o, kv_bytes_per_token, reqs, n, err))
        return -1;
    Watch watch = {0};
    run.observe = watch_step;
    run.observe_ctx = &watch;
    int rc = serve_check(ch, &run, err);
    if (rc == 0)
        rc = serve_run(ch, &run, log, err);
    if (rc == 0)
        collect(&run, &watch, res);
    serving_run_free(&run);
    return rc;
}
