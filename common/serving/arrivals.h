/**
 * @file arrivals.h
 * @brief Requests that arrive on a clock: Poisson arrivals at a rate, or
 *        burstier gamma arrivals (`--arrival-rate`, `--arrival`).
 *
 * Load generators (vLLM's benchmark script among them) send request i at
 * the sum of i gaps drawn independently: exponential gaps give a Poisson
 * process, the traffic of many independent users; gamma gaps of the same
 * mean and a coefficient of variation CV above 1 come in bursts (vLLM's
 * `--burstiness` is the gamma's shape, 1 / CV^2). The first request
 * arrives at time 0.
 *
 * The draws come from a seeded splitmix64 generator and the C library's
 * log(), sqrt() and cos(): the same seed gives the same arrivals.
 */
#ifndef KVLAB_ARRIVALS_H
#define KVLAB_ARRIVALS_H

#include <stdint.h>

#include "err.h"

/** Smallest coefficient of variation of the gaps accepted (nearly regular). */
#define ARRIVAL_CV_MIN 0.05
/** Largest coefficient of variation of the gaps accepted (a few huge bursts). */
#define ARRIVAL_CV_MAX 10.0
/** Lowest rate accepted, requests per second (one request in about 12 days). */
#define ARRIVAL_RATE_MIN 1e-6
/** Highest rate accepted, requests per second. */
#define ARRIVAL_RATE_MAX 1e6

/** How requests arrive. */
typedef struct {
    double rate; /**< requests per second, > 0 */
    double cv;   /**< the gaps' standard deviation over their mean: 1 for Poisson (exponential gaps), else gamma */
} ArrivalProcess;

/** The state of a stream of arrivals. */
typedef struct {
    ArrivalProcess p; /**< the process */
    uint64_t state;   /**< splitmix64 state */
    double next_s;    /**< when the next request arrives */
} ArrivalStream;

/**
 * Parses "poisson:R" or "gamma:R:CV" (R requests per second, from 1e-6 to 1e6;
 * CV in [0.05, 10]; gamma:R:1 is poisson:R, draw for draw).
 * @param text  the description
 * @param p     receives the process
 * @param err   receives "'TEXT' ..." on failure
 * @return 0 on success, -1 on failure
 */
int arrival_parse(const char *text, ArrivalProcess *p, Err *err);

/**
 * Starts a stream of arrivals.
 * @param s     the stream
 * @param p     the process (rate > 0)
 * @param seed  any value: the same seed, the same arrivals
 */
void arrival_stream_init(ArrivalStream *s, const ArrivalProcess *p, uint64_t seed);

/**
 * The next request's arrival time: 0 for the first, then the previous plus
 * one gap.
 * @param s  the stream
 * @return seconds from the start
 */
double arrival_stream_next(ArrivalStream *s);

/**
 * One gap of the process: exponential of mean 1 / rate when cv is 1, gamma
 * of shape 1 / cv^2 and the same mean otherwise.
 * @param s  the stream (its generator advances)
 * @return seconds, > 0
 */
double arrival_stream_gap(ArrivalStream *s);

#endif
