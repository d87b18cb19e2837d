/**
 * @file sampler.h
 * @brief Choosing the next token from logits: penalties, greedy, temperature,
 *        min-p, top-k, top-p.
 *
 * The steps run in the order vLLM's V1 sampler runs them
 * (vllm/v1/sample/sampler.py, Sampler.forward() and Sampler.sample()):
 *
 *  1. the **penalties** change the logits, from the tokens of the sequence
 *     so far: repetition (prompt and output), then frequency and presence
 *     (output only), as the OpenAI API defines those two;
 *  2. temperature 0 is **greedy**: the largest logit, whatever the other
 *     settings say (no random number is drawn);
 *  3. otherwise the logits are divided by the **temperature**;
 *  4. **min-p** drops every token less likely than min_p times the most
 *     likely one;
 *  5. **top-k** keeps the k most likely of what is left;
 *  6. **top-p** keeps the smallest set of the most likely tokens whose
 *     probabilities, renormalised over what 4 and 5 left, reach top_p (the
 *     token that crosses the threshold is kept);
 *  7. one token is drawn from what is left, renormalised.
 *
 * Each filter and each penalty is one function with the contract in its
 * comment below: the sampler lab's (lab 0, `make lab CH=sampling`), one
 * file each in solutions/ch00/, which every program links with common/.
 * Every setting has a neutral value that leaves the step out, and with the
 * neutral values the sampler draws exactly what it drew before the filters
 * and penalties existed.
 *
 * The random numbers come from a seeded xorshift generator, so a seed gives
 * the same text on every run and every machine.
 */
#ifndef KVLAB_SAMPLER_H
#define KVLAB_SAMPLER_H

#include <stddef.h>

#include "err.h"

/** A probability with the token it belongs to (for sorting in top-p). */
typedef struct {
    float prob; /**< probability of the token */
    int index;  /**< the token id */
} ProbIndex;

/**
 * How to choose a token: vLLM's SamplingParams, the part kvlab implements.
 * The neutral value of each field turns its step off.
 */
typedef struct {
    float temperature;        /**< 0 = greedy; > 0 divides the logits */
    float top_p;              /**< in (0, 1): nucleus sampling; 0 or 1 = off */
    int top_k;                /**< keep the k most likely tokens; 0 = off */
    float min_p;              /**< drop tokens below min_p x the top probability, in [0, 1]; 0 = off */
    float repetition_penalty; /**< in [0.01, 100]: logits of prompt and output tokens divided (if > 0) or multiplied; 1 = off */
    float frequency_penalty;  /**< subtracted from a logit once per time its token was generated; 0 = off */
    float presence_penalty;   /**< subtracted once from the logit of every token generated so far; 0 = off */
} SamplingParams;

/** Sampling settings, scratch and the generator state of one sequence. */
typedef struct {
    int vocab_size;               /**< logits per step */
    SamplingParams params;        /**< what to do at each step */
    unsigned long long rng_state; /**< xorshift64* state; never 0 */
    ProbIndex *prob_index;        /**< [vocab_size] scratch: top-k's and top-p's candidates */
    int *output_counts;           /**< [vocab_size] scratch: times each token was generated (NULL without penalties) */
    unsigned char *in_prompt;     /**< [vocab_size] scratch: 1 for tokens of the prompt (NULL without penalties) */
} Sampler;

/**
 * The neutral settings: greedy, and every filter and penalty off.
 * @return temperature 0, top_p 0, top_k 0, min_p 0, repetition 1,
 *         frequency 0, presence 0
 */
SamplingParams sampling_params_default(void);

/**
 * Checks settings against their ranges (the same as vLLM's
 * SamplingParams, where it has one).
 * @param p    the settings
 * @param err  receives a one-line reason, naming the setting
 * @return 0 when valid, -1 otherwise
 */
int sampling_params_check(const SamplingParams *p, Err *err);

/**
 * Whether any penalty is on (they need the sequence's tokens and the
 * count scratch).
 * @param p  the settings
 * @return 1 when repetition != 1, frequency != 0 or presence != 0
 */
int sampling_params_penalize(const SamplingParams *p);

/**
 * Host bytes that sampler_init_params() allocates for @p p (what a
 * program sets aside per sequence; the memory table counts them under
 * activations).
 * @param vocab_size  logits per step
 * @param p           the settings
 * @return the bytes, without allocator overhead
 */
size_t sampler_scratch_bytes(int vocab_size, const SamplingParams *p);

/**
 * Sets up a sampler. The count scratch of the penalties is allocated here,
 * only when a penalty is on, never during decoding.
 * @param s           receives the sampler
 * @param vocab_size  number of logits per step
 * @param p           the settings (checked with sampling_params_check())
 * @param seed        seed of the random generator (any value; 0 is mapped to a fixed nonzero state)
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on bad settings or out of memory
 */
int sampler_init_params(Sampler *s, int vocab_size, const SamplingParams *p, unsigned long long seed, Err *err);

/**
 * Sets up a sampler with temperature and top-p only (every other setting
 * neutral): sampler_init_params() in short.
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
 * Picks the next token of a sequence: every step of the file comment, in
 * that order. Modifies @p logits in place (penalties, temperature, the
 * filters' masks, softmax); with temperature 0 and no penalty it leaves
 * them alone. The penalties count @p tokens afresh at every call (as
 * vLLM counts its bins at every step), so a sequence's counts can never
 * disagree with its tokens, whatever forks, beam moves or preemptions did
 * to them.
 * @param s         the sampler
 * @param logits    [vocab_size] scores of the next token
 * @param tokens    [n_tokens] the sequence so far: the prompt, then the generated tokens (NULL when n_tokens is 0)
 * @param n_prompt  how many of @p tokens are the prompt
 * @param n_tokens  how many tokens the sequence has
 * @return the chosen token id
 */
int sampler_sample_seq(Sampler *s, float *logits, const int *tokens, int n_prompt, int n_tokens);

/**
 * Picks the next token with no sequence behind it: sampler_sample_seq()
 * with no tokens, so the penalties have nothing to penalise.
 * @param s       the sampler
 * @param logits  [vocab_size] scores of the next token
 * @return the chosen token id
 */
int sampler_sample(Sampler *s, float *logits);

/**
 * Step 1 alone: the penalties of @p s applied to @p logits from the
 * sequence's tokens (nothing when every penalty is neutral). Beam search
 * scores its beams with this, each by its own tokens.
 * @param s         the sampler (its count scratch is used and left zeroed)
 * @param logits    [vocab_size] scores, changed in place
 * @param tokens    [n_tokens] the prompt, then the generated tokens
 * @param n_prompt  how many of @p tokens are the prompt
 * @param n_tokens  how many tokens the sequence has
 */
void sampler_penalize(Sampler *s, float *logits, const int *tokens, int n_prompt, int n_tokens);

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

/* ------------------------------------------------------------ one function per step (lab 0: solutions/ch00/) */

/**
 * Repetition penalty (vLLM, after the CTRL paper): for every token that
 * appears in the prompt or in the output, a positive logit is divided by
 * @p penalty and any other logit is multiplied by it, so that a penalty
 * above 1 makes the token less likely whatever the sign of its logit.
 * Tokens that appear in neither keep their logits.
 * @param logits         [vocab] scores, changed in place
 * @param vocab          number of tokens
 * @param in_prompt      [vocab] nonzero for tokens of the prompt
 * @param output_counts  [vocab] times each token was generated
 * @param penalty        > 0 (the CLI allows 0.01 to 100); 1 changes nothing
 */
void sampler_penalize_repetition(float *logits, int vocab, const unsigned char *in_prompt, const int *output_counts,
                                 float penalty);

/**
 * Frequency and presence penalties, as the OpenAI API defines them
 * (logit -= count x frequency + (count > 0) x presence), applied as vLLM
 * applies them: for every token generated at least once, @p frequency is
 * subtracted once per time it was generated, then @p presence once,
 * however often. Prompt tokens do not count; tokens never generated keep
 * their logits.
 * @param logits         [vocab] scores, changed in place
 * @param vocab          number of tokens
 * @param output_counts  [vocab] times each token was generated
 * @param frequency      in [-2, 2]; 0 changes nothing
 * @param presence       in [-2, 2]; 0 changes nothing
 */
void sampler_penalize_counts(float *logits, int vocab, const int *output_counts, float frequency, float presence);

/**
 * min-p: drops every token whose probability is below @p min_p times the
 * probability of the most likely token, by setting its logit to
 * -INFINITY. Works on logits: p(v) / p(max) = exp(logit(v) - max logit),
 * so no softmax is needed. The most likely token is always kept.
 * @param logits  [vocab] scores (after the temperature), changed in place
 * @param vocab   number of tokens
 * @param min_p   in (0, 1]
 */
void sampler_filter_min_p(float *logits, int vocab, float min_p);

/**
 * top-k: keeps the @p k tokens with the largest logits and sets every
 * other logit to -INFINITY. Ranking: a larger logit first, and among
 * equal logits the lower id first, so exactly min(k, vocab) tokens stay
 * (vLLM keeps every token tied with the k-th) and k = 1 keeps the token
 * sampler_argmax() picks. Tokens already at -INFINITY rank last.
 * @param logits  [vocab] scores, changed in place
 * @param vocab   number of tokens
 * @param k       at least 1
 * @param top     [k] scratch: receives the kept tokens, best first (only .index is meaningful)
 */
void sampler_filter_top_k(float *logits, int vocab, int k, ProbIndex *top);

/**
 * top-p (nucleus): of candidates sorted most likely first, how many to
 * keep. A token is kept when the candidates before it hold less than
 * @p top_p of the probability, so the token whose probability crosses
 * top_p is kept and the nucleus always holds at least one token (as
 * vLLM's and Hugging Face's top-p).
 * @param sorted  [n] probabilities, largest first, summing to at most 1
 * @param n       candidates, at least 1
 * @param top_p   in (0, 1)
 * @return how many leading candidates form the nucleus, 1..n
 */
int sampler_filter_top_p(const ProbIndex *sorted, int n, float top_p);

#endif
