/* Sampler lab (lab 0): sampler_penalize_presence(), the OpenAI API's
 * presence penalty. exercises/ch00/sampler_penalize_presence.c is
 * generated from this file by scripts/make-exercises.sh; `make lab
 * CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

void sampler_penalize_presence(float *logits, int vocab, const int *output_counts, float penalty)
{
    // LAB BEGIN(ch00.presence): subtract penalty once from the logit of every token generated at least once
    for (int v = 0; v < vocab; v++)
        if (output_counts[v] > 0)
            logits[v] -= penalty;
    // LAB STUB:
    // (void)logits; (void)vocab; (void)output_counts; (void)penalty;
    // LAB_TODO("subtract penalty once from the logit of each generated token");
    // LAB END
}
