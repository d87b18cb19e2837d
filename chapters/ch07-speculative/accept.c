/* Chapter 7's acceptance rules: the greedy one, and rejection sampling,
 * which keeps the verifier's distribution exactly. */
#include <math.h>

#include "sampler.h"
#include "spec.h"

int spec_accept_greedy(const int *targets, const int *proposals, int n)
{
    int accepted = 0;
    while (accepted < n && proposals[accepted] == targets[accepted])
        accepted++;
    return accepted;
}

void spec_probabilities(const float *logits, int vocab, float temperature, float *out)
{
    double max = logits[0], sum = 0.0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > max)
            max = logits[i];
    for (int i = 0; i < vocab; i++)
        sum += exp(((double)logits[i] - max) / (double)temperature);
    for (int i = 0; i < vocab; i++)
        out[i] = (float)(exp(((double)logits[i] - max) / (double)temperature) / sum);
}

/* A draw from the weights @p w (not necessarily normalised: their sum is
 * taken), by the inverse of the cumulative sum. */
static int draw(const float *w, int vocab, unsigned long long *rng)
{
    double total = 0.0;
    for (int i = 0; i < vocab; i++)
        total += w[i];
    double u = (double)sampler_random_f32(rng) * total, cdf = 0.0;
    int last = 0;
    for (int i = 0; i < vocab; i++) {
        if (w[i] <= 0.0f)
            continue;
        cdf += w[i];
        last = i;
        if (u < cdf)
            return i;
    }
    return last; /* u at the very top (rounding): the last token with weight */
}

/* The proposer's probability of @p token at proposal @p i: 1 for a
 * certain proposal (q == NULL). */
static double proposer_prob(const float *q, int i, int vocab, int token)
{
    return q ? (double)q[(size_t)i * vocab + token] : 1.0;
}

int spec_accept_sampled(const float *p, const float *q, const int *proposals, int n, int vocab,
                        unsigned long long *rng, float *scratch, int *next)
{
    for (int i = 0; i < n; i++) {
        const float *pi = p + (size_t)i * vocab; /* [vocab] */
        int d = proposals[i];
        double qd = proposer_prob(q, i, vocab, d), ratio = qd > 0.0 ? (double)pi[d] / qd : 1.0;
        if ((double)sampler_random_f32(rng) < ratio)
            continue; /* kept with probability min(1, p/q) */
        /* Rejected: the next token comes from what p has beyond q. */
        for (int t = 0; t < vocab; t++) {
            double left = (double)pi[t] - proposer_prob(q, i, vocab, t) * (q || t == d ? 1.0 : 0.0);
            scratch[t] = left > 0.0 ? (float)left : 0.0f;
        }
        *next = draw(scratch, vocab, rng);
        return i;
    }
    *next = draw(p + (size_t)n * vocab, vocab, rng); /* all kept: the verifier's own next token */
    return n;
}
