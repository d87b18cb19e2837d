/* GENERATED from solutions/ch00/sampler_filter_top_p.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=0`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Sampler lab (lab 0): sampler_filter_top_p(), the size of the nucleus.
 * exercises/ch00/sampler_filter_top_p.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

int sampler_filter_top_p(const ProbIndex *sorted, int n, float top_p)
{
    // TODO(lab ch00.top_p): how many leading candidates to keep: each while those before it hold less than top_p
    (void)sorted; (void)top_p;
    LAB_TODO("count the candidates until those before hold top_p of the probability");
    return n;
}
