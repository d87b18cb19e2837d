#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "ops.h"

/* ------------------------------------------------------------ settings */

SamplingParams sampling_params_default(void)
{
    return (SamplingParams){.temperature = 0.0f, .top_p = 0.0f, .top_k = 0, .min_p = 0.0f,
                            .repetition_penalty = 1.0f, .frequency_penalty = 0.0f, .presence_penalty = 0.0f};
}

int sampling_params_check(const SamplingParams *p, Err *err)
{
    /* Written as !(inside) so that NaN, which fails every comparison, is
     * refused too. */
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return err_set(err, "temperature must be a number >= 0");
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return err_set(err, "top-p must be in [0, 1]");
    if (p->top_k < 0)
        return err_set(err, "top-k must be 0 (off) or more, not %d", p->top_k);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return err_set(err, "min-p must be in [0, 1]");
    /* A tiny penalty would divide a logit into infinity. */
    if (!(p->repetition_penalty >= 0.01f && p->repetition_penalty <= 100.0f))
        return err_set(err, "repetition-penalty must be in [0.01, 100] (1 = off)");
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return err_set(err, "frequency-penalty must be in [-2, 2]");
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return err_set(err, "presence-penalty must be in [-2, 2]");
    return 0;
}

int sampling_params_penalize(const SamplingParams *p)
{
    return p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
}

size_t sampler_scratch_bytes(int vocab_size, const SamplingParams *p)
{
    size_t n = (size_t)vocab_size, bytes = n * sizeof(ProbIndex);
    if (sampling_params_penalize(p))
        bytes += n * sizeof(int) + n * sizeof(unsigned char);
    return bytes;
}

/* ------------------------------------------------------------ set-up */

int sampler_init_params(Sampler *s, int vocab_size, const SamplingParams *p, unsigned long long seed, Err *err)
{
    memset(s, 0, sizeof *s);
    if (vocab_size <= 0)
        return err_set(err, "vocab_size %d is not positive", vocab_size);
    if (sampling_params_check(p, err))
        return -1;
    s->vocab_size = vocab_size;
    s->params = *p;
    /* xorshift has one fixed point, 0; steer away from it. */
    s->rng_state = seed ? seed : 0x9E3779B97F4A7C15ull;
    s->prob_index = mem_alloc_array(MEM_ACTIVATIONS, (size_t)vocab_size, sizeof(ProbIndex));
    if (!s->prob_index)
        return err_set(err, "out of memory");
    if (!sampling_params_penalize(p))
        return 0;
    /* The penalties' counts: sized here, for the whole run, so that no
     * step allocates; zeroed, and left zeroed after each use. */
    s->output_counts = mem_alloc_array(MEM_ACTIVATIONS, (size_t)vocab_size, sizeof(int));
    s->in_prompt = mem_alloc_array(MEM_ACTIVATIONS, (size_t)vocab_size, sizeof(unsigned char));
    if (!s->output_counts || !s->in_prompt) {
        sampler_free(s);
        return err_set(err, "out of memory");
    }
    memset(s->output_counts, 0, (size_t)vocab_size * sizeof(int));
    memset(s->in_prompt, 0, (size_t)vocab_size);
    return 0;
}

int sampler_init(Sampler *s, int vocab_size, float temperature, float top_p, unsigned long long seed, Err *err)
{
    SamplingParams p = sampling_params_default();
    p.temperature = temperature;
    p.top_p = top_p;
    return sampler_init_params(s, vocab_size, &p, seed, err);
}

void sampler_free(Sampler *s)
{
    mem_free(s->prob_index);
    mem_free(s->output_counts);
    mem_free(s->in_prompt);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ random numbers */

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

/* ------------------------------------------------------------ step 1: penalties */

/* Marks the prompt's tokens and counts the generated ones (ids outside
 * the vocabulary cannot be penalised and are skipped), or, with
 * @p add = 0, undoes exactly that: the scratch is back to zero after each
 * use without a pass over the whole vocabulary. */
static void count_tokens(Sampler *s, const int *tokens, int n_prompt, int n_tokens, int add)
{
    for (int i = 0; i < n_tokens; i++) {
        int t = tokens[i];
        if (t < 0 || t >= s->vocab_size)
            continue;
        if (i < n_prompt)
            s->in_prompt[t] = (unsigned char)add;
        else
            s->output_counts[t] = add ? s->output_counts[t] + 1 : 0;
    }
}

void sampler_penalize(Sampler *s, float *logits, const int *tokens, int n_prompt, int n_tokens)
{
    const SamplingParams *p = &s->params;
    if (!sampling_params_penalize(p) || n_tokens == 0)
        return;
    count_tokens(s, tokens, n_prompt, n_tokens, 1);
    /* vLLM's order (vllm/model_executor/layers/utils.py, apply_penalties()). */
    if (p->repetition_penalty != 1.0f)
        sampler_penalize_repetition(logits, s->vocab_size, s->in_prompt, s->output_counts, p->repetition_penalty);
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f)
        sampler_penalize_counts(logits, s->vocab_size, s->output_counts, p->frequency_penalty, p->presence_penalty);
    count_tokens(s, tokens, n_prompt, n_tokens, 0);
}

/* ------------------------------------------------------------ step 7: the draw */

/* Walks the cumulative distribution until it passes coin x the total:
 * tokens with probability 0 (masked, or too unlikely for a float) are
 * never drawn, not even when rounding leaves the sum just under 1. */
static int sample_from_probs(const float *probs, int n, float coin)
{
    float cdf = 0.0f;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (probs[i] == 0.0f)
            continue;
        cdf += probs[i];
        last = i;
        if (coin < cdf)
            return i;
    }
    return last;
}

static int compare_prob_desc(const void *a, const void *b)
{
    const ProbIndex *x = a, *y = b;
    if (x->prob != y->prob)
        return (x->prob < y->prob) - (x->prob > y->prob);
    return (x->index > y->index) - (x->index < y->index); /* ties: the lower id first, on every libc */
}

/* Step 6 and the draw: the nucleus among @p probs (summing to 1), sampled.
 * Tokens below (1 - top_p) / (n - 1) can never be in the nucleus, so they
 * are dropped before the sort. */
static int sample_top_p(Sampler *s, const float *probs, float coin)
{
    int n = s->vocab_size, kept = 0;
    float cutoff = (1.0f - s->params.top_p) / (float)(n - 1 > 0 ? n - 1 : 1);
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
    int last = sampler_filter_top_p(s->prob_index, kept, s->params.top_p) - 1;
    float mass = 0.0f;
    for (int i = 0; i <= last; i++)
        mass += s->prob_index[i].prob;
    float r = coin * mass, cdf = 0.0f;
    for (int i = 0; i <= last; i++) {
        cdf += s->prob_index[i].prob;
        if (r < cdf)
            return s->prob_index[i].index;
    }
    return s->prob_index[last].index;
}

/* ------------------------------------------------------------ all steps */

int sampler_sample_seq(Sampler *s, float *logits, const int *tokens, int n_prompt, int n_tokens)
{
    const SamplingParams *p = &s->params;
    int n = s->vocab_size;
    sampler_penalize(s, logits, tokens, n_prompt, n_tokens);                 /* 1 */
    if (p->temperature == 0.0f)                                              /* 2 */
        return sampler_argmax(logits, n);
    for (int i = 0; i < n; i++)                                              /* 3 */
        logits[i] /= p->temperature;
    if (p->min_p > 0.0f)                                                     /* 4 */
        sampler_filter_min_p(logits, n, p->min_p);
    if (p->top_k > 0)                                                        /* 5 */
        sampler_filter_top_k(logits, n, p->top_k, s->prob_index);
    softmax(logits, n); /* the masked tokens get probability 0, the rest is renormalised */
    float coin = sampler_random_f32(&s->rng_state);
    if (p->top_p <= 0.0f || p->top_p >= 1.0f)
        return sample_from_probs(logits, n, coin);                           /* 7 */
    return sample_top_p(s, logits, coin);                                    /* 6, 7 */
}

int sampler_sample(Sampler *s, float *logits)
{
    return sampler_sample_seq(s, logits, NULL, 0, 0);
}
