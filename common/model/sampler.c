#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "ops.h"

int sampler_init(Sampler *s, int vocab_size, float temperature, float top_p, unsigned long long seed, Err *err)
{
    memset(s, 0, sizeof *s);
    if (vocab_size <= 0)
        return err_set(err, "vocab_size %d is not positive", vocab_size);
    if (!(temperature >= 0.0f) || isinf(temperature))
        return err_set(err, "temperature must be a number >= 0");
    if (!(top_p >= 0.0f) || top_p > 1.0f)
        return err_set(err, "top-p must be in [0, 1]");
    s->vocab_size = vocab_size;
    s->temperature = temperature;
    s->top_p = top_p;
    /* xorshift has one fixed point, 0; steer away from it. */
    s->rng_state = seed ? seed : 0x9E3779B97F4A7C15ull;
    s->prob_index = mem_alloc_array(MEM_ACTIVATIONS, (size_t)vocab_size, sizeof(ProbIndex));
    if (!s->prob_index)
        return err_set(err, "out of memory");
    return 0;
}

void sampler_free(Sampler *s)
{
    mem_free(s->prob_index);
    memset(s, 0, sizeof *s);
}

static unsigned int random_u32(unsigned long long *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (unsigned int)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

float sampler_random_f32(unsigned long long *state)
{
    return (float)(random_u32(state) >> 8) / 16777216.0f;
}

int sampler_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Walks the cumulative distribution until it passes coin (in [0, 1)). */
static int sample_from_probs(const float *probs, int n, float coin)
{
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf)
            return i;
    }
    return n - 1; /* rounding left the total just under 1 */
}

static int compare_prob_desc(const void *a, const void *b)
{
    float pa = ((const ProbIndex *)a)->prob, pb = ((const ProbIndex *)b)->prob;
    return (pa < pb) - (pa > pb);
}

/* Nucleus sampling: sample among the most likely tokens whose probabilities
 * add up to just over top_p. Tokens below (1 - top_p) / (n - 1) can never be
 * in the nucleus, so they are dropped before the sort. */
static int sample_top_p(Sampler *s, const float *probs, float coin)
{
    int n = s->vocab_size, kept = 0;
    float cutoff = (1.0f - s->top_p) / (float)(n - 1 > 0 ? n - 1 : 1);
    for (int i = 0; i < n; i++)
        if (probs[i] >= cutoff) {
            s->prob_index[kept].index = i;
            s->prob_index[kept].prob = probs[i];
            kept++;
        }
    /* The cutoff is only a shortcut: when top_p < 1/n and the distribution
     * is nearly flat, it drops every token. The nucleus is then the most
     * likely token alone (its probability, at least 1/n, exceeds top_p). */
    if (kept == 0)
        return sampler_argmax(probs, n);
    qsort(s->prob_index, (size_t)kept, sizeof(ProbIndex), compare_prob_desc);
    float cumulative = 0.0f;
    int last = kept - 1;
    for (int i = 0; i < kept; i++) {
        cumulative += s->prob_index[i].prob;
        if (cumulative > s->top_p) {
            last = i;
            break;
        }
    }
    float r = coin * cumulative, cdf = 0.0f;
    for (int i = 0; i <= last; i++) {
        cdf += s->prob_index[i].prob;
        if (r < cdf)
            return s->prob_index[i].index;
    }
    return s->prob_index[last].index;
}

int sampler_sample(Sampler *s, float *logits)
{
    if (s->temperature == 0.0f)
        return sampler_argmax(logits, s->vocab_size);
    for (int i = 0; i < s->vocab_size; i++)
        logits[i] /= s->temperature;
    softmax(logits, s->vocab_size);
    float coin = sampler_random_f32(&s->rng_state);
    if (s->top_p <= 0.0f || s->top_p >= 1.0f)
        return sample_from_probs(logits, s->vocab_size, coin);
    return sample_top_p(s, logits, coin);
}
