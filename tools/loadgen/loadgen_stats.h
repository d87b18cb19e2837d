/**
 * @file loadgen_stats.h
 * @brief kvlab-loadgen's figures of one measure: latency.h's nearest-rank
 *        statistics (the same as every chapter's latency block), kept in a
 *        file of their own because latency.h brings kvlab's JSON writer,
 *        whose json_string() has the name of jansson's.
 */
#ifndef KVLAB_LOADGEN_STATS_H
#define KVLAB_LOADGEN_STATS_H

/** The figures of one measure (seconds). */
typedef struct {
    long count;  /**< values */
    double mean; /**< their mean */
    double std;  /**< their standard deviation */
    double p50;  /**< nearest-rank median */
    double p90;  /**< nearest-rank 90th percentile */
    double p99;  /**< nearest-rank 99th percentile */
    double max;  /**< the largest */
} LoadgenStats;

/**
 * The figures of @p values (sorted in place), by latency_stats().
 * @param values  [n] the values
 * @param n       how many (0: every figure is 0)
 * @param out     receives the figures
 */
void loadgen_stats(double *values, long n, LoadgenStats *out);

#endif
