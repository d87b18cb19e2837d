/* GENERATED from solutions/ch00/sampler_filter_min_p.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=0`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Sampler lab (lab 0): sampler_filter_min_p(), min-p filtering.
 * exercises/ch00/sampler_filter_min_p.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=sampling` grades yours. */
#include <math.h>

#include "lab.h"
#include "sampler.h"

void sampler_filter_min_p(float *logits, int vocab, float min_p)
{
    // TODO(lab ch00.min_p): set to -INFINITY every logit whose probability is below min_p x the top one's
    (void)logits; (void)vocab; (void)min_p;
    LAB_TODO("mask the tokens less likely than min_p times the most likely one");
}
