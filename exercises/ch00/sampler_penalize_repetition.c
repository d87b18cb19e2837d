/* GENERATED from solutions/ch00/sampler_penalize_repetition.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=0`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Sampler lab (lab 0): sampler_penalize_repetition(), vLLM's repetition
 * penalty. exercises/ch00/sampler_penalize_repetition.c is generated from
 * this file by scripts/make-exercises.sh; `make lab CH=sampling` grades
 * yours. */
#include "lab.h"
#include "sampler.h"

void sampler_penalize_repetition(float *logits, int vocab, const unsigned char *in_prompt, const int *output_counts,
                                 float penalty)
{
    // TODO(lab ch00.repetition): for every token of the prompt or the output, divide a positive logit by penalty, multiply any other by it
    (void)logits; (void)vocab; (void)in_prompt; (void)output_counts; (void)penalty;
    LAB_TODO("penalise the logits of the tokens seen in the prompt or the output");
}
