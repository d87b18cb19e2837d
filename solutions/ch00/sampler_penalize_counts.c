/* Sampler lab (lab 0): sampler_penalize_counts(), the OpenAI API's
 * frequency and presence penalties. exercises/ch00/sampler_penalize_counts.c
 * is generated from this file by scripts/make-exercises.sh; `make lab
 * CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

void sampler_penalize_counts(float *logits, int vocab, const int *output_counts, float frequency, float presence)
{
    // LAB BEGIN(ch00.counts): for each generated token, subtract frequency once per time it came, then presence once
    for (int v = 0; v < vocab; v++) {
        int count = output_counts[v];
        if (count == 0)
            continue; /* never generated (the prompt does not count): unchanged */
        /* vLLM's order: the frequency penalty, then the presence penalty. */
        logits[v] -= frequency * (float)count;
        logits[v] -= presence;
    }
    // LAB STUB:
    // (void)logits; (void)vocab; (void)output_counts; (void)frequency; (void)presence;
    // LAB_TODO("subtract frequency x count and presence from the logit of each generated token");
    // LAB END
}
