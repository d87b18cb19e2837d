/* kvlab-loadgen's statistics: latency.h's, plus the standard deviation
 * that vLLM's benchmark prints. */
#include "loadgen_stats.h"

#include <math.h>

#include "latency.h"

void loadgen_stats(double *values, long n, LoadgenStats *out)
{
    LatencyStats s;
    latency_stats(values, n, &s);
    double sq = 0;
    for (long i = 0; i < n; i++)
        sq += (values[i] - s.mean) * (values[i] - s.mean);
    *out = (LoadgenStats){.count = s.count, .mean = s.mean, .std = n ? sqrt(sq / (double)n) : 0.0, .p50 = s.p50,
                          .p90 = s.p90, .p99 = s.p99, .max = s.max};
}
