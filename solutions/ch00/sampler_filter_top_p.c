/* Sampler lab (lab 0): sampler_filter_top_p(), the size of the nucleus.
 * exercises/ch00/sampler_filter_top_p.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

int sampler_filter_top_p(const ProbIndex *sorted, int n, float top_p)
{
    // LAB BEGIN(ch00.top_p): how many leading candidates to keep: each while those before it hold less than top_p
    int kept = 0;
    float before = 0.0f; /* probability of the candidates ahead of sorted[kept] */
    while (kept < n && before < top_p)
        before += sorted[kept++].prob;
    return kept;
    // LAB STUB:
    // (void)sorted; (void)top_p;
    // LAB_TODO("count the candidates until those before hold top_p of the probability");
    // return n;
    // LAB END
}
