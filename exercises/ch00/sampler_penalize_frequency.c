/* GENERATED from solutions/ch00/sampler_penalize_frequency.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=0`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Sampler lab (lab 0): sampler_penalize_frequency(), the OpenAI API's
 * frequency penalty. exercises/ch00/sampler_penalize_frequency.c is
 * generated from this file by scripts/make-exercises.sh; `make lab
 * CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

void sampler_penalize_frequency(float *logits, int vocab, const int *output_counts, float penalty)
{
    // TODO(lab ch00.frequency): subtract penalty once per time each token was generated (the prompt does not count)
    (void)logits; (void)vocab; (void)output_counts; (void)penalty;
    LAB_TODO("subtract penalty x count from the logit of each generated token");
}
