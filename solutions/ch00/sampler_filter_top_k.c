/* Sampler lab (lab 0): sampler_filter_top_k(), top-k filtering.
 * exercises/ch00/sampler_filter_top_k.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=sampling` grades yours. */
#include <math.h>

#include "lab.h"
#include "sampler.h"

void sampler_filter_top_k(float *logits, int vocab, int k, ProbIndex *top)
{
    // LAB BEGIN(ch00.top_k): keep the k largest logits (ties: the lower id), every other logit -INFINITY
    if (k >= vocab)
        return;
    /* The k best so far, best first, each with its logit (compared in
     * order, without going back to logits[]). Tokens come in id order, so
     * a later token beats a kept one only with a strictly larger logit:
     * ties go to the lower id. Usually few tokens get in; each shifts at
     * most k. */
    int have = 0;
    for (int v = 0; v < vocab; v++) {
        int at = have;
        while (at > 0 && logits[v] > top[at - 1].prob)
            at--;
        if (at == k)
            continue;
        for (int i = (have < k ? have : k - 1); i > at; i--)
            top[i] = top[i - 1];
        top[at] = (ProbIndex){.prob = logits[v], .index = v};
        if (have < k)
            have++;
    }
    /* Mask everything, then put the kept logits back. */
    for (int v = 0; v < vocab; v++)
        logits[v] = -INFINITY;
    for (int i = 0; i < k; i++)
        logits[top[i].index] = top[i].prob;
    // LAB STUB:
    // (void)logits; (void)vocab; (void)k; (void)top;
    // LAB_TODO("keep the k most likely tokens and mask the rest with -INFINITY");
    // LAB END
}
