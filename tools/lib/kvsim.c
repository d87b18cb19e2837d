#include "kvsim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "batching.h"
#include "mem.h"
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
    } kinds[] = {{"fixed", KVSIM_FIXED, 1}, {"uniform", KVSIM_UNIFORM, 2}, {"lognormal", KVSIM_LOGNORMAL, 2},
                   {"gamma", KVSIM_GAMMA, 2}, {"weibull", KVSIM_WEIBULL, 2}};
    const char *usage = "use fixed:N, uniform:LO:HI, lognormal:MEAN:SIGMA, gamma:MEAN:CV or weibull:MEAN:CV";
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
        if ((d->kind == KVSIM_GAMMA || d->kind == KVSIM_WEIBULL) && (v[0] < 1 || v[0] > 1e7 || v[1] < 0.05 || v[1] > 4))
            return err_set(err, "'%s': gamma and weibull need MEAN >= 1 and 0.05 <= CV <= 4", text);
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
    case KVSIM_GAMMA: snprintf(buf, n, "gamma:%g:%g", d->a, d->b); break;
    case KVSIM_WEIBULL: snprintf(buf, n, "weibull:%g:%g", d->a, d->b); break;
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

/* Whether a distribution has a log-scale parameter mu that the filter
 * solve moves: lognormal (mu of ln length), gamma and Weibull (mu = ln of
 * the scale; the shape comes from the CV). */
static int scaled(const KvsimDist *d)
{
    return d->kind == KVSIM_LOGNORMAL || d->kind == KVSIM_GAMMA || d->kind == KVSIM_WEIBULL;
}

/* The shape k for a coefficient of variation: gamma 1 / CV^2; Weibull
 * solves CV^2 = Gamma(1 + 2/k) / Gamma(1 + 1/k)^2 - 1 (decreasing in k)
 * by bisection on ln k. */
static double shape_for_cv(const KvsimDist *d)
{
    double cv = d->b;
    if (d->kind == KVSIM_GAMMA)
        return 1.0 / (cv * cv);
    double lo = log(0.05), hi = log(200.0), target = log1p(cv * cv);
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi), k = exp(mid);
        double v = lgamma(1.0 + 2.0 / k) - 2.0 * lgamma(1.0 + 1.0 / k); /* ln(1 + CV^2) */
        if (v > target)
            lo = mid;
        else
            hi = mid;
    }
    return exp(0.5 * (lo + hi));
}

double kvsim_dist_mean_at(const KvsimDist *d, double mu)
{
    switch (d->kind) {
    case KVSIM_LOGNORMAL: return exp(mu + 0.5 * d->b * d->b);
    case KVSIM_GAMMA: return exp(mu) * shape_for_cv(d);
    case KVSIM_WEIBULL: return exp(mu + lgamma(1.0 + 1.0 / shape_for_cv(d)));
    case KVSIM_UNIFORM: return 0.5 * (d->a + d->b);
    case KVSIM_FIXED: break;
    }
    return d->a;
}

/* mu for a mean before truncation: lognormal mean = exp(mu + sigma^2 / 2);
 * gamma k exp(mu); Weibull exp(mu) Gamma(1 + 1/k). */
static double mu_for_mean(const KvsimDist *d)
{
    switch (d->kind) {
    case KVSIM_LOGNORMAL: return log(d->a) - 0.5 * d->b * d->b;
    case KVSIM_GAMMA: return log(d->a / shape_for_cv(d));
    case KVSIM_WEIBULL: return log(d->a) - lgamma(1.0 + 1.0 / shape_for_cv(d));
    default: return 0.0;
    }
}

/* A standard gamma draw of shape k (scale 1): Marsaglia and Tsang (2000);
 * below k = 1, a draw of shape k + 1 times U^(1/k). */
static double gamma_std(double k, KvsimRng *r)
{
    double boost = 1.0;
    if (k < 1.0) {
        double u = 1.0 - kvsim_rng_uniform(r); /* (0, 1] */
        boost = pow(u, 1.0 / k);
        k += 1.0;
    }
    double dd = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * dd);
    for (;;) {
        double x, v;
        do {
            x = normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = 1.0 - kvsim_rng_uniform(r); /* (0, 1] */
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + dd * (1.0 - v + log(v)))
            return boost * dd * v;
    }
}

/* The shape parameter a draw needs: gamma's and Weibull's from the CV
 * (a bisection for Weibull, so callers compute it once, not per draw); 0
 * for the others. */
static double shape_of(const KvsimDist *d)
{
    return d->kind == KVSIM_GAMMA || d->kind == KVSIM_WEIBULL ? shape_for_cv(d) : 0.0;
}

/* One length; lognormal, gamma and Weibull draw with the given mu, gamma
 * and Weibull with shape = shape_of(d). */
static double draw_with_mu(const KvsimDist *d, double mu, double shape, KvsimRng *r)
{
    switch (d->kind) {
    case KVSIM_FIXED: return d->a;
    case KVSIM_UNIFORM: return d->a + floor(kvsim_rng_uniform(r) * (d->b - d->a + 1.0));
    case KVSIM_LOGNORMAL: return floor(exp(mu + d->b * normal(r)) + 0.5);
    case KVSIM_GAMMA: return floor(exp(mu) * gamma_std(shape, r) + 0.5);
    case KVSIM_WEIBULL: {
        double u = 1.0 - kvsim_rng_uniform(r); /* (0, 1]: inverse CDF of 1 - exp(-(x / scale)^k) */
        return floor(exp(mu) * pow(-log(u), 1.0 / shape) + 0.5);
    }
    }
    return d->a;
}

int kvsim_dist_draw(const KvsimDist *d, int lo, int hi, KvsimRng *r)
{
    double v = lo, mu = scaled(d) ? mu_for_mean(d) : 0.0, shape = shape_of(d);
    for (int attempt = 0; attempt < 100; attempt++) {
        v = draw_with_mu(d, mu, shape, r);
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
    case KVSIM_LOGNORMAL:
    case KVSIM_GAMMA:
    case KVSIM_WEIBULL: return 1;
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
    /* Gaps are at most 37 / rate steps (-log of a 53-bit uniform): this
     * keeps every arrival step far inside a long. */
    if (w->rate > 0 && (double)w->n_requests / w->rate > KVSIM_MAX_ARRIVAL_STEPS)
        return err_set(err, "arrivals at %.3g requests per step (--rate, or --rate-per-s x --step-ms / 1000) spread "
                       "%d requests over about %.3g steps, more than the %.0e a run may span", w->rate,
                       w->n_requests, (double)w->n_requests / w->rate, KVSIM_MAX_ARRIVAL_STEPS);
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

/* ------------------------------------------------------------ the filter */

/* What the filter keeps, with the service's own limits: prompts in
 * [min, input_hi], outputs in [min, output_hi(prompt)]. */
typedef struct {
    int min, input_hi, output_cap, total_hi;
} KeptSet;

static int min_int(int a, int b) { return a < b ? a : b; }

static KeptSet kept_set(const KvsimWorkload *w, int seq_len)
{
    const KvsimFilter *f = &w->filter;
    int total = min_int(f->max_total, seq_len);
    return (KeptSet){.min = f->min, .input_hi = min_int(f->max_input, w->max_input), .output_cap = w->max_output,
                     .total_hi = total};
}

static int output_hi(const KeptSet *k, int prompt)
{
    return min_int(k->output_cap, k->total_hi - prompt);
}

static int kept(const KeptSet *k, int prompt, int output)
{
    return prompt >= k->min && prompt <= k->input_hi && output >= k->min && output <= output_hi(k, prompt);
}

static double std_normal_cdf(double z)
{
    return 0.5 * erfc(-z / sqrt(2.0));
}

/* The regularized lower incomplete gamma P(a, x), the gamma's CDF: below
 * x = a + 1 its power series, sum x^n / (a (a+1) ... (a+n)), converges
 * fast; above, 1 - Q(a, x) by Legendre's continued fraction for Q,
 * evaluated with the modified Lentz method. */
static double gamma_p(double a, double x)
{
    if (x <= 0.0)
        return 0.0;
    double lnpre = a * log(x) - x - lgamma(a);
    if (x < a + 1.0) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 10000; n++) {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-16)
                break;
        }
        return sum * exp(lnpre);
    }
    double b = x + 1.0 - a, c = 1.0 / 1e-300, dd = 1.0 / b, h = dd;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        dd = an * dd + b;
        if (fabs(dd) < 1e-300)
            dd = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300)
            c = 1e-300;
        dd = 1.0 / dd;
        double del = dd * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-16)
            break;
    }
    return 1.0 - exp(lnpre) * h;
}

/* The CDF of the unrounded draw at x > 0, for the scaled families. */
static double scaled_cdf(const KvsimDist *d, double mu, double shape, double x)
{
    switch (d->kind) {
    case KVSIM_LOGNORMAL: return std_normal_cdf((log(x) - mu) / d->b);
    case KVSIM_GAMMA: return gamma_p(shape, x / exp(mu));
    case KVSIM_WEIBULL: return -expm1(-pow(x / exp(mu), shape));
    default: return 0.0;
    }
}

/* pmf[k], k = 0..n: the chance that one draw is k (a lognormal, gamma or
 * Weibull draw rounds to the nearest integer). */
static void length_pmf(const KvsimDist *d, double mu, double *pmf, int n)
{
    double shape = shape_of(d);
    for (int k = 0; k <= n; k++) {
        if (d->kind == KVSIM_FIXED)
            pmf[k] = k == (int)d->a;
        else if (d->kind == KVSIM_UNIFORM)
            pmf[k] = k >= d->a && k <= d->b ? 1.0 / (d->b - d->a + 1.0) : 0.0;
        else if (k == 0)
            pmf[k] = scaled_cdf(d, mu, shape, 0.5);
        else
            pmf[k] = scaled_cdf(d, mu, shape, k + 0.5) - scaled_cdf(d, mu, shape, k - 0.5);
    }
}

/* The kept pairs' share and means, for prompts ~ pin and outputs ~ pout. */
static void kept_means(const KeptSet *k, const double *pin, const double *pout, int n_out, double *cum, double *cumx,
                       KvsimFilterFit *fit)
{
    cum[0] = cumx[0] = 0.0;
    for (int o = 1; o <= n_out; o++) {
        int in = o >= k->min; /* outputs below min are never kept */
        cum[o] = cum[o - 1] + (in ? pout[o] : 0.0);
        cumx[o] = cumx[o - 1] + (in ? o * pout[o] : 0.0);
    }
    double z = 0.0, sum_in = 0.0, sum_out = 0.0;
    for (int p = k->min; p <= k->input_hi; p++) {
        int hi = output_hi(k, p);
        if (hi < k->min)
            continue;
        z += pin[p] * cum[hi];
        sum_in += p * pin[p] * cum[hi];
        sum_out += pin[p] * cumx[hi];
    }
    fit->kept = z;
    fit->mean_input = z > 0 ? sum_in / z : 0.0;
    fit->mean_output = z > 0 ? sum_out / z : 0.0;
}

int kvsim_filter_solve(const KvsimWorkload *w, int seq_len, KvsimFilterFit *fit, Err *err)
{
    KeptSet k = kept_set(w, seq_len);
    int n_in = k.input_hi, n_out = k.total_hi;
    if (n_in < k.min || output_hi(&k, k.min) < k.min)
        return err_set(err, "--filter %d:%d:%d keeps no request under --max-input %d and --max-output %d",
                       w->filter.min, w->filter.max_input, w->filter.max_total, w->max_input, w->max_output);
    double *buf = mem_alloc_array(MEM_ACTIVATIONS, (size_t)(n_in + 1) + 3u * (size_t)(n_out + 1), sizeof(double));
    if (!buf)
        return err_set(err, "out of memory for the length distributions");
    double *pin = buf, *pout = pin + n_in + 1, *cum = pout + n_out + 1, *cumx = cum + n_out + 1;
    double mu_in = scaled(&w->input) ? mu_for_mean(&w->input) : 0.0;
    double mu_out = scaled(&w->output) ? mu_for_mean(&w->output) : 0.0;
    for (int it = 0; it < 200; it++) {
        length_pmf(&w->input, mu_in, pin, n_in);
        length_pmf(&w->output, mu_out, pout, n_out);
        kept_means(&k, pin, pout, n_out, cum, cumx, fit);
        if (fit->kept < 1e-3)
            break;
        /* A larger mu moves the kept mean up: step by the ratio missing. */
        if (scaled(&w->input))
            mu_in += log(w->input.a / fit->mean_input);
        if (scaled(&w->output))
            mu_out += log(w->output.a / fit->mean_output);
    }
    mem_free(buf);
    fit->mu_input = mu_in;
    fit->mu_output = mu_out;
    char a[64], b[64];
    if (fit->kept < 1e-3)
        return err_set(err, "--filter %d:%d:%d keeps %.2g of the requests drawn from --input %s and --output %s",
                       w->filter.min, w->filter.max_input, w->filter.max_total, fit->kept,
                       kvsim_dist_format(a, sizeof a, &w->input), kvsim_dist_format(b, sizeof b, &w->output));
    int off_in = scaled(&w->input) && fabs(fit->mean_input / w->input.a - 1.0) > 1e-6;
    int off_out = scaled(&w->output) && fabs(fit->mean_output / w->output.a - 1.0) > 1e-6;
    if (off_in || off_out)
        return err_set(err, "--filter %d:%d:%d: no --input %s and --output %s of any scale keep requests of those "
                       "means (the closest keep %.1f and %.1f)", w->filter.min, w->filter.max_input,
                       w->filter.max_total, kvsim_dist_format(a, sizeof a, &w->input),
                       kvsim_dist_format(b, sizeof b, &w->output), fit->mean_input, fit->mean_output);
    return 0;
}

/* A kept pair: drawn again as a pair until the filter keeps it (a
 * benchmark drops the whole request). shape[0], shape[1]: shape_of() the
 * input and the output distribution. */
static void draw_kept_pair(const KvsimWorkload *w, const KeptSet *k, const KvsimFilterFit *fit,
                           const double shape[2], KvsimRng *r, int *prompt, int *output)
{
    double p = 0, o = 0;
    for (long attempt = 0; attempt < 1000000; attempt++) {
        p = draw_with_mu(&w->input, fit->mu_input, shape[0], r);
        o = draw_with_mu(&w->output, fit->mu_output, shape[1], r);
        if (p < 1e7 && o < 1e7 && kept(k, (int)p, (int)o))
            break;
    }
    /* kvsim_filter_solve() refused filters that keep under 1e-3: a million
     * misses in a row does not happen; clamp rather than loop forever. */
    *prompt = p < k->min ? k->min : p > k->input_hi ? k->input_hi : (int)p;
    int hi = output_hi(k, *prompt);
    *output = o < k->min ? k->min : o > hi ? hi : (int)o;
}

void kvsim_make_requests(const KvsimWorkload *w, int seq_len, const KvsimFilterFit *fit, SimRequestSpec *out)
{
    KvsimRng lengths, arrivals;
    kvsim_rng_seed(&lengths, w->seed);
    /* A separate stream: the lengths do not change with the rate. */
    kvsim_rng_seed(&arrivals, w->seed ^ 0x5851f42d4c957f2dULL);
    KeptSet k = kept_set(w, seq_len);
    const double shape[2] = {shape_of(&w->input), shape_of(&w->output)};
    double t = 0.0;
    for (int i = 0; i < w->n_requests; i++) {
        int prompt, output;
        if (w->filter.max_total > 0 && fit) {
            draw_kept_pair(w, &k, fit, shape, &lengths, &prompt, &output);
        } else {
            prompt = kvsim_dist_draw(&w->input, 1, w->max_input, &lengths);
            int room = seq_len - prompt;
            output = kvsim_dist_draw(&w->output, 1, w->max_output < room ? w->max_output : room, &lengths);
        }
        int asks = w->max_new_tokens > 0 ? w->max_new_tokens : output;
        if (i > 0 && w->rate > 0)
            t += -log(1.0 - kvsim_rng_uniform(&arrivals)) / w->rate;
        out[i] = (SimRequestSpec){.prompt_tokens = prompt, .max_new_tokens = asks, .output_tokens = output,
                                  .arrival_step = w->seconds_per_step > 0 ? 0 : (long)t,
                                  .arrival_s = w->seconds_per_step > 0 ? t * w->seconds_per_step : 0.0};
    }
}

void kvsim_knowing_outputs(const SimRequestSpec *asked, int n, SimRequestSpec *oracle, SimRequestSpec *out_pow2)
{
    for (int i = 0; i < n; i++) {
        oracle[i] = out_pow2[i] = asked[i];
        oracle[i].max_new_tokens = asked[i].output_tokens;
        out_pow2[i].max_new_tokens = reserve_round_up_pow2(asked[i].output_tokens);
    }
}

/* ------------------------------------------------------------ one run */

/* What the chapters' own books do not separate, watched after every step
 * (the run's observer, after the chapter's accounting, before finished
 * requests let go):
 *
 * - KV that requests keep after they finished (chapter 3 releases a
 *   batch's regions only when the whole batch is done, and counts what
 *   they hold as token states);
 * - the paper's Fig. 2 split of the whole pool (KvsimResult.pool_share):
 *   what each holding request holds, will still fill, asked for and will
 *   never fill. */
typedef struct {
    ServeChapter ch;
    ReservePolicy policy;     /* chapter 3: what a region asks for */
    int block_size;           /* chapter 4: a request asks for its blocks */
    double finished_reserved; /* byte-steps reserved by requests finished in an earlier step */
    double finished_used;     /* of which holding their tokens */
    double pool_held[3];      /* slot-steps: token states, reservation, internal fragmentation */
    int *live;                /* [n_requests] the arrived requests that may still hold memory, in index order */
    int n_live;               /* entries of live */
    int n_seen;               /* requests that have joined live (the first n_seen arrived) */
    KvsimProgress progress;   /* a line every 5 seconds of a long run */
} Watch;

/* Positions request r will hold at the end: its stop, or its last allowed
 * token (which is sampled, never fed). */
static int final_positions(const Request *r)
{
    return r->stop_at > 0 ? r->stop_at : r->max_tokens - 1;
}

/* Whether r holds memory after this step, and how many positions it asked
 * for: chapter 3 until its region is released (r->kv.reserved), its
 * policy's size before any buddy rounding; chapter 4 while it runs (or
 * finished this step), its blocks. */
static int positions_asked(const Watch *watch, const ServingRun *run, const Request *r)
{
    if (watch->ch == SERVE_PAGED) {
        int holds = r->phase == REQ_RUNNING || (r->phase == REQ_DONE && r->finish != REQ_FINISH_REJECTED &&
                                                 r->finished_step == run->step);
        return holds ? (r->n_cached + watch->block_size - 1) / watch->block_size * watch->block_size : 0;
    }
    if (r->kv.reserved == 0)
        return 0;
    if (watch->policy == RESERVE_GROW)
        return (int)(r->kv.reserved / run->kv_bytes_per_token);
    return reserve_initial_tokens(watch->policy, r->n_tokens, r->max_tokens, run->model->cfg.seq_len);
}

static void watch_pool(Watch *watch, const ServingRun *run, const Request *r)
{
    int asked = positions_asked(watch, run, r);
    if (asked == 0)
        return;
    int held = r->n_cached, final = final_positions(r);
    int will_hold = final < asked ? final : asked;
    watch->pool_held[0] += held;
    watch->pool_held[1] += will_hold > held ? will_hold - held : 0;
    watch->pool_held[2] += asked > will_hold ? asked - will_hold : 0;
}

void kvsim_progress(void *ctx, const ServingRun *run)
{
    KvsimProgress *p = ctx;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double now = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    if (p->last_s == 0.0)
        p->last_s = now;
    if (!p->f || now - p->last_s < 5.0)
        return;
    p->last_s = now;
    fprintf(p->f, "kvsim: %s: step %ld, %d running, %d waiting, %d of %d requests done\n", p->label, run->step,
            run->n_running, run->n_waiting, run->n_done, run->n_reqs);
    fflush(p->f);
}

static void watch_step(void *ctx, const ServingRun *run)
{
    Watch *watch = ctx;
    /* The requests that arrived since the last step join the live list
     * (in index order, after the earlier ones, which have lower indices). */
    while (watch->n_seen < run->n_arrived)
        watch->live[watch->n_live++] = watch->n_seen++;
    /* One pass over the live list, in index order (the sums come out the
     * same as over every request), dropping those that are done and hold
     * nothing any more: each request is visited only while it holds
     * memory, so a run costs its events, not requests x steps. */
    int kept = 0;
    for (int k = 0; k < watch->n_live; k++) {
        const Request *r = &run->reqs[watch->live[k]];
        watch_pool(watch, run, r);
        if (r->phase == REQ_DONE && r->kv.reserved == 0 && (watch->ch != SERVE_PAGED || r->finished_step < run->step))
            continue; /* holds nothing, now and from now on */
        watch->live[kept++] = watch->live[k];
        if (r->phase != REQ_DONE || r->kv.reserved == 0 || r->finished_step >= run->step)
            continue;
        size_t used = (size_t)r->n_cached * run->kv_bytes_per_token;
        watch->finished_reserved += (double)r->kv.reserved;
        watch->finished_used += (double)(used < r->kv.reserved ? used : r->kv.reserved);
    }
    watch->n_live = kept;
    kvsim_progress(&watch->progress, run);
}

static void collect(const ServingRun *run, const Watch *watch, size_t pool_slots, KvsimResult *res)
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
    /* Every step of the run, idle ones too (nothing held then), is one
     * pool's worth of slots. */
    double pool = (double)pool_slots * (double)run->step, held = 0.0;
    for (int i = 0; i < 3; i++) {
        res->pool_share[i] = pool > 0 ? watch->pool_held[i] / pool : 0.0;
        held += res->pool_share[i];
    }
    res->pool_share[3] = pool > 0 ? 1.0 - held : 0.0;
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

/* kvsim_run() and kvsim_run_timed(): @p clock NULL is kvsim_run(). */
static int run_one(ServeChapter ch, const Model *shape, const CliOptions *o, size_t kv_bytes_per_token,
                   const SimRequestSpec *reqs, int n, FILE *log, const KvsimClock *clock, KvsimResult *res, Err *err)
{
    ServingRun run;
    if (serving_sim_init(&run, shape, o, kv_bytes_per_token, reqs, n, err))
        return -1;
    Watch watch = {.ch = ch, .block_size = o->block_size,
                   .progress = {ch == SERVE_PAGED ? "paged" : o->reserve, stderr, 0.0}};
    watch.live = mem_alloc_array(MEM_ACTIVATIONS, (size_t)(n > 0 ? n : 1), sizeof(int)); /* [n] */
    if (!watch.live) {
        serving_run_free(&run);
        return err_set(err, "out of memory for the requests' list");
    }
    if (ch == SERVE_BATCHING && reserve_policy_parse(o->reserve, &watch.policy, err)) {
        mem_free(watch.live);
        serving_run_free(&run);
        return -1;
    }
    if (clock)
        serving_use_cost_model(&run, &clock->machine, &clock->shape, 1);
    int rc = serving_add_observer(&run, watch_step, &watch, NULL, err);
    if (rc == 0)
        rc = serve_check(ch, &run, err);
    if (rc == 0)
        rc = serve_run(ch, &run, log, err);
    if (rc == 0)
        collect(&run, &watch, serving_kv_budget(&run) / kv_bytes_per_token, res);
    if (rc == 0 && clock) {
        res->has_latency = 1;
        rc = latency_summarize(run.latency.reqs, run.latency.n, run.clock.now_s, run.tokens_generated, &clock->slo,
                               &res->latency, err);
    }
    mem_free(watch.live);
    serving_run_free(&run);
    return rc;
}

int kvsim_run(ServeChapter ch, const Model *shape, const CliOptions *o, size_t kv_bytes_per_token,
              const SimRequestSpec *reqs, int n, FILE *log, KvsimResult *res, Err *err)
{
    return run_one(ch, shape, o, kv_bytes_per_token, reqs, n, log, NULL, res, err);
}

int kvsim_run_timed(ServeChapter ch, const Model *shape, const CliOptions *o, size_t kv_bytes_per_token,
                    const SimRequestSpec *reqs, int n, const KvsimClock *clock, KvsimResult *res, Err *err)
{
    return run_one(ch, shape, o, kv_bytes_per_token, reqs, n, NULL, clock, res, err);
}
