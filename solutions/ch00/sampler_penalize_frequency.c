/* Sampler lab (lab 0): sampler_penalize_frequency(), the OpenAI API's
 * frequency penalty. exercises/ch00/sampler_penalize_frequency.c is
 * generated from this file by scripts/make-exercises.sh; `make lab
 * CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

void sampler_penalize_frequency(float *logits, int vocab, const int *output_counts, float penalty)
{
    // LAB BEGIN(ch00.frequency): subtract penalty once per time each token was generated (the prompt does not count)
    for (int v = 0; v < vocab; v++)
        if (output_counts[v] > 0)
            logits[v] -= penalty * (float)output_counts[v];
    // LAB STUB:
    // (void)logits; (void)vocab; (void)output_counts; (void)penalty;
    // LAB_TODO("subtract penalty x count from the logit of each generated token");
    // LAB END
}
