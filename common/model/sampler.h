/**
 * @file sampler.h
 * @brief Choosing the next token from logits: greedy, temperature, top-p.
 *
 * Temperature 0 is greedy (argmax), which makes every chapter reproducible
 * and comparable byte for byte. Otherwise the logits are divided by the
 * temperature, turned into probabilities, and sampled, optionally from the
 * smallest set of tokens whose probability reaches top_p (nucleus sampling).
 * The random numbers come from a seeded xorshift generator, so a seed gives
 * the same text on every run and every machine.
 */
#ifndef KVLAB_SAMPLER_H
#define KVLAB_SAMPLER_H

#include "err.h"

/** A probability with the token it belongs to (for sorting in top-p). */
typedef struct {
    float prob; /**< probability of the token */
    int index;  /**< the token id */
} ProbIndex;

/** Sampling settings and the generator state of one sequence. */
typedef struct {
    int vocab_size;               /**< logits per step */
    float temperature;            /**< 0 = greedy */
    float top_p;                  /**< in (0, 1): nucleus sampling; else plain sampling */
    unsigned long long rng_state; /**< xorshift64* state; never 0 */
    ProbIndex *prob_index;        /**< [vocab_size] scratch for top-p */
} Sampler;

/**
 * Sets up a sampler.
 * @param s            receives the sampler
 * @param vocab_size   number of logits per step
 * @param temperature  0 for greedy, > 0 to sample
 * @param top_p        nucleus threshold; 0 or >= 1 turns it off
 * @param seed         seed of the random generator (any value; 0 is mapped to a fixed nonzero state)
 * @param err          receives the reason on failure
 * @return 0 on success, -1 on bad settings or out of memory
 */
int sampler_init(Sampler *s, int vocab_size, float temperature, float top_p, unsigned long long seed, Err *err);

/**
 * Frees the sampler's scratch.
 * @param s  an initialised or zeroed sampler
 */
void sampler_free(Sampler *s);

/**
 * Picks the next token. Modifies @p logits in place when sampling
 * (temperature scaling and softmax).
 * @param s       the sampler
 * @param logits  [vocab_size] scores of the next token
 * @return the chosen token id
 */
int sampler_sample(Sampler *s, float *logits);

/**
 * Index of the largest value (the first one on ties).
 * @param x  values
 * @param n  count, at least 1
 * @return the index
 */
int sampler_argmax(const float *x, int n);

/**
 * Next float in [0, 1) from a xorshift64* state.
 * @param state  generator state, updated
 * @return a uniform random float
 */
float sampler_random_f32(unsigned long long *state);

#endif
