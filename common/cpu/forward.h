/**
 * @file forward.h
 * @brief The transformer forward pass, written once, and the K/V seam.
 *
 * A forward step runs a flat batch of tokens, each a ::BatchEntry
 * (sequence, position, token), as serving systems do. Chapter 1 feeds a
 * whole sequence every step; chapter 2 one new token; chapter 3 one token
 * for each request of a static batch; chapter 4 a mix of whole prompts and
 * single decode tokens from many requests. The forward pass does not know
 * which: everything a chapter changes goes through one narrow interface,
 * the ::KvSeam, which answers two questions per layer:
 *
 * 1. **store**: where do this token's key and value go?
 * 2. **attend**: given a query head, read back the keys and values of
 *    positions 0..pos of its sequence and return the attention output.
 *
 * In each layer the forward pass stores K/V for every entry of the batch
 * before any entry attends, so a prompt fed as one batch sees its own
 * earlier tokens, exactly as if it had been fed token by token.
 */
#ifndef KVLAB_FORWARD_H
#define KVLAB_FORWARD_H

#include "err.h"
#include "model.h"

/** One token of a forward step. */
typedef struct {
    int seq;        /**< which sequence (meaning is up to the K/V seam) */
    int pos;        /**< position of the token in its sequence, from 0 */
    int token;      /**< token id */
    int logits_row; /**< row of ForwardState.logits to fill, or -1 for none */
} BatchEntry;

/** The K/V seam: what each chapter implements. */
typedef struct {
    void *ctx; /**< the chapter's K/V store */
    /**
     * Keeps the key and value of one token for one layer.
     * @param ctx    the store
     * @param layer  layer index
     * @param e      the token
     * @param k      [kv_dim] key, RoPE already applied
     * @param v      [kv_dim] value
     */
    void (*store)(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v);
    /**
     * Attention of one query head over positions 0..e->pos of e->seq.
     * Called concurrently for different (entry, head) pairs.
     * @param ctx     the store
     * @param layer   layer index
     * @param e       the querying token
     * @param head    query head index (its KV head is head / kv_mul)
     * @param q       [head_dim] query head, RoPE applied
     * @param out     [head_dim] receives the attention output
     * @param scores  [seq_len] scratch for this call
     */
    void (*attend)(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                   float *scores);
} KvSeam;

/** Activation buffers of a forward step, sized once for the largest batch. */
typedef struct {
    int max_tokens; /**< capacity in batch entries */
    int max_logits; /**< capacity in logits rows */
    float *x;       /**< [max_tokens][dim] residual stream */
    float *xb;      /**< [max_tokens][dim] normed input / attention output */
    float *xb2;     /**< [max_tokens][dim] projection output */
    float *q;       /**< [max_tokens][dim] queries */
    float *k;       /**< [max_tokens][kv_dim] keys of this step */
    float *v;       /**< [max_tokens][kv_dim] values of this step */
    float *hb;      /**< [max_tokens][hidden_dim] SwiGLU gate */
    float *hb2;     /**< [max_tokens][hidden_dim] SwiGLU up */
    float *scores;  /**< [threads][seq_len] attention scratch, one row per thread */
    int score_rows; /**< rows of scores (threads it was sized for) */
    float *logit_x; /**< [max_logits][dim] final-normed rows that need logits */
    float *logits;  /**< [max_logits][vocab_size] */
    float *rope_cos; /**< [seq_len][head_dim/2] */
    float *rope_sin; /**< [seq_len][head_dim/2] */
    float rope_theta; /**< the RoPE base rope_cos and rope_sin were computed for */
} ForwardState;

/**
 * Allocates the activation buffers (charged to activations) and computes
 * the RoPE tables for the llama2.c base, 10000; forward() recomputes them,
 * once, for a model with another base (SmolLM2's is 100000).
 * @param s           receives the buffers
 * @param cfg         model shape
 * @param max_tokens  most entries one forward call will get
 * @param max_logits  most entries of one call that want logits
 * @param err         receives the reason on failure
 * @return 0 on success, -1 when out of memory or sizes are not positive
 */
int forward_state_init(ForwardState *s, const ModelConfig *cfg, int max_tokens, int max_logits, Err *err);

/**
 * Frees the activation buffers.
 * @param s  an initialised or zeroed state
 */
void forward_state_free(ForwardState *s);

/**
 * Bytes forward_state_init() allocates for these capacities (for planning
 * and for the memory arithmetic of the book).
 * @param cfg         model shape
 * @param max_tokens  entries per call
 * @param max_logits  logits rows per call
 * @param threads     attention scratch rows
 * @return bytes
 */
size_t forward_state_bytes(const ModelConfig *cfg, int max_tokens, int max_logits, int threads);

/**
 * Checks, before a run, that the activations of one step as long as the
 * model's declared context (the largest step a chapter sizes for) could
 * fit this machine's memory at all: a model file that declares 2^20
 * positions of a wide model is refused in one line, not at its first step.
 * (The buffers are allocated zeroed but untouched, so only what a step
 * writes becomes resident.)
 * @param cfg      model shape
 * @param threads  attention scratch rows
 * @param err      receives "the model declares a context of N positions: ..."
 * @return 0 when it could fit, -1 otherwise
 */
int forward_check_context(const ModelConfig *cfg, int threads, Err *err);

/**
 * How many threads are worth using for a model when the user did not say
 * (no --threads): 1 for models narrower than 256 (stories260K), whose
 * matrices are so small that starting and joining threads costs more than
 * it saves. For wider ones 0, OpenMP's default, when OMP_NUM_THREADS is
 * set, and otherwise 1: on a machine whose cores other work shares, every
 * parallel region waits for its slowest thread to be scheduled, and two
 * threads ran about ten times slower than one (stories110M shape, 2 cores
 * at a load of 10, issue 14), while one thread is never slower than itself.
 * Ask for more with --threads N or OMP_NUM_THREADS.
 * @param cfg  model shape
 * @return a thread count for ops_set_threads()
 */
int forward_default_threads(const ModelConfig *cfg);

/**
 * Runs the model on a batch of tokens. For every entry with logits_row >= 0,
 * fills s->logits[logits_row]. Allocates nothing. The first call with a
 * model whose RoPE base differs from the tables' recomputes the tables in
 * place.
 * @param m        the model
 * @param s        activation buffers with capacity for the batch
 * @param kv       the chapter's K/V seam
 * @param entries  [n] the tokens
 * @param n        number of entries, 1..s->max_tokens
 */
void forward(const Model *m, ForwardState *s, const KvSeam *kv, const BatchEntry *entries, int n);

#endif
