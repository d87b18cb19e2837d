/* Sampler lab (lab 0): sampler_filter_top_p(), the size of the nucleus.
 * exercises/ch00/sampler_filter_top_p.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=sampling` grades yours. */
#include "lab.h"
#include "sampler.h"

int sampler_filter_top_p(const ProbIndex *sorted, int n, float top_p)
{
    // LAB BEGIN(ch00.top_p): how many leading candidates to keep: each while those before it hold less than top_p
    float before = 0.0f; /* probability of the candidates ahead of sorted[i] */
    for (int i = 0; i < n; i++) {
        if (before >= top_p)
            return i;
        before += sorted[i].prob;
    }
    return n;
    // LAB STUB:
    // (void)sorted; (void)top_p;
    // LAB_TODO("count the candidates until those before hold top_p of the probability");
    // return n;
    // LAB END
}
