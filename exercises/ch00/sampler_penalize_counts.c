/* GENERATED from solutions/ch00/sampler_penalize_counts.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=0`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Sampler lab (lab 0): sampler_penalize_counts(), the OpenAI API's
 * frequency and presence penalties. exercises/ch00/sampler_penalize_counts.c
 * is generated from this file by scripts/make-exercises.sh; `make lab
 * CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

void sampler_penalize_counts(float *logits, int vocab, const int *output_counts, float frequency, float presence)
{
    // TODO(lab ch00.counts): for each generated token, subtract frequency once per time it came, then presence once
    (void)logits; (void)vocab; (void)output_counts; (void)frequency; (void)presence;
    LAB_TODO("subtract frequency x count and presence from the logit of each generated token");
}
