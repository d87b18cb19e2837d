#include "arrivals.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "parse.h"

/* splitmix64 (Steele, Lea and Flood): one 64-bit state, a fixed increment,
 * a mixing function; every seed is a good one. */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: 53 random bits, never 0, so that log() is finite. */
static double uniform_open0(uint64_t *state)
{
    return (double)((next_u64(state) >> 11) + 1) * 0x1.0p-53;
}

/* A standard normal draw (Box-Muller, one of the pair). */
static double normal(uint64_t *state)
{
    double u = uniform_open0(state), v = uniform_open0(state);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Gamma of shape k and scale 1: Marsaglia and Tsang (2000) for k >= 1; for
 * k < 1, Gamma(k + 1) x U^(1/k). */
static double gamma_draw(double k, uint64_t *state)
{
    if (k < 1.0)
        return gamma_draw(k + 1.0, state) * pow(uniform_open0(state), 1.0 / k);
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(state), v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = uniform_open0(state);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

double arrival_stream_gap(ArrivalStream *s)
{
    double mean = 1.0 / s->p.rate;
    if (s->p.cv == 1.0) /* exponential: the gamma of shape 1, drawn directly */
        return -log(uniform_open0(&s->state)) * mean;
    double shape = 1.0 / (s->p.cv * s->p.cv);
    return gamma_draw(shape, &s->state) * mean / shape;
}

void arrival_stream_init(ArrivalStream *s, const ArrivalProcess *p, uint64_t seed)
{
    s->p = *p;
    s->state = seed;
    s->next_s = 0.0;
}

double arrival_stream_next(ArrivalStream *s)
{
    double now = s->next_s;
    s->next_s += arrival_stream_gap(s);
    return now;
}

/* The field of text that ends at ':' or the end, copied into buf. */
static const char *field(const char *text, char *buf, size_t n)
{
    size_t len = strcspn(text, ":");
    if (len >= n)
        len = n - 1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    return text[strcspn(text, ":")] == ':' ? text + strcspn(text, ":") + 1 : NULL;
}

int arrival_parse(const char *text, ArrivalProcess *p, Err *err)
{
    char kind[16], rate[64], cv[64] = "1";
    const char *rest = field(text, kind, sizeof kind);
    int gamma = strcmp(kind, "gamma") == 0;
    if ((!gamma && strcmp(kind, "poisson") != 0) || !rest)
        return err_set(err, "'%.60s' is not poisson:RATE or gamma:RATE:CV", text);
    rest = field(rest, rate, sizeof rate);
    if (gamma != (rest != NULL) || (rest && strchr(rest, ':')))
        return err_set(err, "'%.60s' is not poisson:RATE or gamma:RATE:CV", text);
    if (rest)
        field(rest, cv, sizeof cv);
    if (parse_double(rate, ARRIVAL_RATE_MIN, ARRIVAL_RATE_MAX, &p->rate, err))
        return err_prefix(err, "the rate (requests per second)");
    if (parse_double(cv, ARRIVAL_CV_MIN, ARRIVAL_CV_MAX, &p->cv, err))
        return err_prefix(err, "the CV (standard deviation of the gaps over their mean)");
    return 0;
}
