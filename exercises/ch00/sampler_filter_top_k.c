/* GENERATED from solutions/ch00/sampler_filter_top_k.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=0`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Sampler lab (lab 0): sampler_filter_top_k(), top-k filtering.
 * exercises/ch00/sampler_filter_top_k.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=sampling` grades yours. */
#include <math.h>

#include "lab.h"
#include "sampler.h"

void sampler_filter_top_k(float *logits, int vocab, int k, ProbIndex *top)
{
    // TODO(lab ch00.top_k): keep the k largest logits (ties: the lower id), every other logit -INFINITY
    (void)logits; (void)vocab; (void)k; (void)top;
    LAB_TODO("keep the k most likely tokens and mask the rest with -INFINITY");
}
