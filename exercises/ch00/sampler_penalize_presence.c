/* GENERATED from solutions/ch00/sampler_penalize_presence.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=0`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Sampler lab (lab 0): sampler_penalize_presence(), the OpenAI API's
 * presence penalty. exercises/ch00/sampler_penalize_presence.c is
 * generated from this file by scripts/make-exercises.sh; `make lab
 * CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

void sampler_penalize_presence(float *logits, int vocab, const int *output_counts, float penalty)
{
    // TODO(lab ch00.presence): subtract penalty once from the logit of every token generated at least once
    (void)logits; (void)vocab; (void)output_counts; (void)penalty;
    LAB_TODO("subtract penalty once from the logit of each generated token");
}
