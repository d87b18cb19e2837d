/* Sampler lab (lab 0): sampler_filter_min_p(), min-p filtering.
 * exercises/ch00/sampler_filter_min_p.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=sampling` grades yours. */
#include <math.h>

#include "lab.h"
#include "sampler.h"

void sampler_filter_min_p(float *logits, int vocab, float min_p)
{
    // LAB BEGIN(ch00.min_p): set to -INFINITY every logit whose probability is below min_p x the top one's
    float max = logits[sampler_argmax(logits, vocab)];
    /* p(v) / p(max) = exp(logit(v) - max): the softmax's sum cancels. */
    for (int v = 0; v < vocab; v++)
        if (expf(logits[v] - max) < min_p)
            logits[v] = -INFINITY;
    // LAB STUB:
    // (void)logits; (void)vocab; (void)min_p;
    // LAB_TODO("mask the tokens less likely than min_p times the most likely one");
    // LAB END
}
