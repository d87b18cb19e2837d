/* Chapter 7's rejection sampling, which keeps the verifier's distribution
 * exactly, and the distribution chapter 4's sampler draws from (the greedy
 * rule is the lab's: solutions/ch07/spec_accept_greedy.c). */
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "sampler.h"
#include "spec.h"

int spec_draw(const float *w, int vocab, unsigned long long *rng)
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
        *next = spec_draw(scratch, vocab, rng);
        return i;
    }
    *next = spec_draw(p + (size_t)n * vocab, vocab, rng); /* all kept: the verifier's own next token */
    return n;
}

/* Larger probability first; equal ones by token id. */
static int by_prob_desc(const void *a, const void *b)
{
    const ProbIndex *x = a, *y = b;
    if (x->prob != y->prob)
        return x->prob > y->prob ? -1 : 1;
    return x->index - y->index;
}

/* Top-p as the sampler applies it: the tokens ahead of which less than
 * top_p of the mass lies (those below the sampler's cutoff never are),
 * renormalised; a nearly flat distribution whose cutoff drops everything
 * keeps its most likely token alone. */
static void keep_nucleus(Sampler *s, const float *probs, float *out)
{
    int n = s->vocab_size, kept = 0;
    float cutoff = (1.0f - s->params.top_p) / (float)(n - 1 > 0 ? n - 1 : 1);
    memset(out, 0, (size_t)n * sizeof(float));
    for (int i = 0; i < n; i++)
        if (probs[i] >= cutoff)
            s->prob_index[kept++] = (ProbIndex){.prob = probs[i], .index = i};
    if (kept == 0) {
        out[sampler_argmax(probs, n)] = 1.0f;
        return;
    }
    qsort(s->prob_index, (size_t)kept, sizeof(ProbIndex), by_prob_desc);
    int last = sampler_filter_top_p(s->prob_index, kept, s->params.top_p) - 1;
    double mass = 0.0;
    for (int i = 0; i <= last; i++)
        mass += s->prob_index[i].prob;
    for (int i = 0; i <= last; i++)
        out[s->prob_index[i].index] = (float)(s->prob_index[i].prob / mass);
}

void spec_distribution(Sampler *s, float *logits, const int *tokens, int n_prompt, int n_tokens, float *out)
{
    const SamplingParams *p = &s->params;
    const int n = s->vocab_size;
    sampler_penalize(s, logits, tokens, n_prompt, n_tokens);
    for (int i = 0; i < n; i++)
        logits[i] /= p->temperature;
    if (p->min_p > 0.0f)
        sampler_filter_min_p(logits, n, p->min_p);
    if (p->top_k > 0)
        sampler_filter_top_k(logits, n, p->top_k, s->prob_index);
    softmax(logits, n);
    if (p->top_p <= 0.0f || p->top_p >= 1.0f) {
        memcpy(out, logits, (size_t)n * sizeof(float));
        return;
    }
    keep_nucleus(s, logits, out);
}
