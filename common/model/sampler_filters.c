/* The steps of the sampler that change which tokens can be drawn, one
 * function each, in the order vLLM applies them (see sampler.h): the three
 * penalties on the logits, then min-p, top-k and top-p. sampler.c calls
 * them; each depends on nothing but its arguments. */
#include "sampler.h"

#include <math.h>

/* ------------------------------------------------------------ penalties */

void sampler_penalize_repetition(float *logits, int vocab, const unsigned char *in_prompt, const int *output_counts,
                                 float penalty)
{
    for (int v = 0; v < vocab; v++) {
        if (!in_prompt[v] && output_counts[v] == 0)
            continue;
        /* Dividing a negative logit would raise it: multiply it instead. */
        if (logits[v] > 0.0f)
            logits[v] /= penalty;
        else
            logits[v] *= penalty;
    }
}

void sampler_penalize_frequency(float *logits, int vocab, const int *output_counts, float penalty)
{
    for (int v = 0; v < vocab; v++)
        if (output_counts[v] > 0)
            logits[v] -= penalty * (float)output_counts[v];
}

void sampler_penalize_presence(float *logits, int vocab, const int *output_counts, float penalty)
{
    for (int v = 0; v < vocab; v++)
        if (output_counts[v] > 0)
            logits[v] -= penalty;
}

/* ------------------------------------------------------------ filters */

void sampler_filter_min_p(float *logits, int vocab, float min_p)
{
    float max = logits[sampler_argmax(logits, vocab)];
    /* p(v) / p(max) = exp(logit(v) - max): the softmax's sum cancels. */
    for (int v = 0; v < vocab; v++)
        if (expf(logits[v] - max) < min_p)
            logits[v] = -INFINITY;
}

/* Whether token a ranks before token b: a larger logit, or the same logit
 * and a lower id (as sampler_argmax() breaks ties). */
static int ranks_before(const float *logits, int a, int b)
{
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

/* Restores heap order in heap[0..n-1] below position i: a min-heap by
 * rank, so heap[0] is the kept token that ranks last. */
static void sift_down(const float *logits, ProbIndex *heap, int n, int i)
{
    for (;;) {
        int worst = i, l = 2 * i + 1, r = l + 1;
        if (l < n && ranks_before(logits, heap[worst].index, heap[l].index))
            worst = l;
        if (r < n && ranks_before(logits, heap[worst].index, heap[r].index))
            worst = r;
        if (worst == i)
            return;
        ProbIndex t = heap[i];
        heap[i] = heap[worst];
        heap[worst] = t;
        i = worst;
    }
}

static void sift_up(const float *logits, ProbIndex *heap, int i)
{
    while (i > 0 && ranks_before(logits, heap[(i - 1) / 2].index, heap[i].index)) {
        ProbIndex t = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

void sampler_filter_top_k(float *logits, int vocab, int k, ProbIndex *top)
{
    if (k >= vocab)
        return;
    /* The k best so far in a heap whose root is the worst of them: a token
     * gets in only by beating the root. O(vocab log k), any k. */
    int have = 0;
    for (int v = 0; v < vocab; v++) {
        if (have < k) {
            top[have].index = v;
            sift_up(logits, top, have++);
        } else if (ranks_before(logits, v, top[0].index)) {
            top[0].index = v;
            sift_down(logits, top, k, 0);
        }
    }
    /* Mask everything, then put the kept logits back. */
    for (int i = 0; i < k; i++)
        top[i].prob = logits[top[i].index];
    for (int v = 0; v < vocab; v++)
        logits[v] = -INFINITY;
    for (int i = 0; i < k; i++)
        logits[top[i].index] = top[i].prob;
}

int sampler_filter_top_p(const ProbIndex *sorted, int n, float top_p)
{
    float before = 0.0f; /* probability of the candidates ahead of sorted[i] */
    for (int i = 0; i < n; i++) {
        if (before >= top_p)
            return i;
        before += sorted[i].prob;
    }
    return n;
}
