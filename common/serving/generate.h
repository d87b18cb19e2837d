/**
 * @file generate.h
 * @brief The autoregressive loop for one request (chapters 1 and 2).
 *
 * Each step: decide which tokens to run (the chapter's choice), run them
 * through forward(), pick the next token from the last row of logits,
 * print it, append it, repeat. What chapters 1 and 2 disagree on is a single
 * number per step, how many leading positions already have their K and V
 * stored: chapter 1 always answers 0 (recompute everything), chapter 2
 * answers "all but the newest token".
 *
 * Output follows llama2.c's `run` byte for byte: the prompt (without the
 * dummy-prefix space), the generated text, one newline. BOS or EOS ends
 * generation and is not printed.
 */
#ifndef KVLAB_GENERATE_H
#define KVLAB_GENERATE_H

#include <stdio.h>

#include "err.h"
#include "forward.h"
#include "report.h"
#include "sampler.h"
#include "tokenizer.h"

/** How a single-request chapter keeps K and V. */
typedef struct {
    KvSeam seam; /**< store/attend used by the forward pass */
    /**
     * Called before each step with the sequence length; makes room for
     * that many positions (a growing cache may reallocate here, never inside
     * the forward pass).
     * @param ctx       the K/V store (seam.ctx)
     * @param n_tokens  tokens in the sequence, including the newest
     * @param cached    receives how many leading positions already have K/V
     * @param err       receives the reason on failure
     * @return 0 on success, -1 on failure
     */
    int (*prepare)(void *ctx, int n_tokens, int *cached, Err *err);
    /**
     * KV bytes reserved and used now (may be NULL: nothing is kept).
     * @param ctx       the K/V store
     * @param reserved  receives reserved bytes
     * @param used      receives bytes holding tokens
     */
    void (*usage)(void *ctx, size_t *reserved, size_t *used);
    /**
     * Optional: runs one forward step somewhere else (the CUDA path,
     * device_run.h) instead of forward() on the CPU through `seam`. NULL
     * for the CPU path.
     * @param step_ctx  the context below
     * @param entries   [n] the step's tokens
     * @param n         number of entries
     * @param logits    receives the row of logits of the last entry (host)
     * @param err       receives the reason on failure
     * @return 0 on success, -1 on failure
     */
    int (*step)(void *step_ctx, const BatchEntry *entries, int n, float **logits, Err *err);
    void *step_ctx; /**< passed to step */
} SingleStreamKv;

/** Why generation stopped. */
typedef enum {
    FINISH_LENGTH,  /**< produced the requested number of tokens */
    FINISH_STOP,    /**< the model emitted BOS or EOS */
    FINISH_SEQ_LEN, /**< the sequence reached the model's seq_len */
} FinishReason;

/** One request's tokens and what its steps cost. */
typedef struct {
    int *tokens;          /**< [seq_len + 1] prompt ids, then generated ids (see model_max_tokens()) */
    int n_prompt;         /**< prompt ids (with BOS) */
    int n_tokens;         /**< ids so far */
    FinishReason finish;  /**< why generation stopped */
    BatchEntry *entries;  /**< [seq_len] the batch of the current step */
    double *step_seconds; /**< [seq_len + 2] time of the step run with t tokens in context, or 0 */
    long positions_run;   /**< token positions fed through the model, all steps together */
    double elapsed_s;     /**< wall time of all steps */
    KvTimeline kv;        /**< KV reserved/used after each step */
} Generation;

/**
 * The longest prompt, in bytes, that could fit @p seq_len tokens: no token
 * stands for more than the tokenizer's max_token_length bytes, so a longer
 * text cannot fit and is refused before it is tokenized (a 100 KB prompt
 * then costs nothing, whatever the merging costs).
 * @param t        the tokenizer
 * @param seq_len  tokens there is room for
 * @return seq_len x max_token_length, saturated at SIZE_MAX (0 for seq_len <= 0)
 */
size_t generation_max_prompt_bytes(const Tokenizer *t, int seq_len);

/**
 * Allocates the buffers and encodes the prompt (BOS + text). Refuses an
 * empty prompt, one longer than generation_max_prompt_bytes() before
 * tokenizing it, and one longer than seq_len tokens.
 * @param g       receives the buffers and prompt ids
 * @param m       the model (for seq_len and vocab)
 * @param t       the tokenizer
 * @param prompt  the prompt text
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int generation_init(Generation *g, const Model *m, const Tokenizer *t, const char *prompt, Err *err);

/**
 * Frees the buffers.
 * @param g  an initialised or zeroed generation
 */
void generation_free(Generation *g);

/**
 * Runs the loop until @p steps new tokens, BOS/EOS, or seq_len + 1 tokens. Prints the
 * text to @p out (NULL: print nothing) as it goes.
 * @param g       initialised by generation_init()
 * @param m       the model
 * @param t       the tokenizer
 * @param s       the sampler
 * @param fs      activations, with room for the largest step the chapter plans
 *                (unused, and may be NULL, when kv->step is set)
 * @param kv      the chapter's K/V strategy
 * @param steps   most new tokens
 * @param out     where the text goes, or NULL
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int generate(Generation *g, const Model *m, const Tokenizer *t, Sampler *s, ForwardState *fs,
             const SingleStreamKv *kv, int steps, FILE *out, Err *err);

/**
 * Prints the text of token i of a sequence (llama2.c's rules: the piece as
 * it follows token i-1, unprintable single bytes skipped).
 * @param out     stream
 * @param t       tokenizer
 * @param tokens  the sequence
 * @param i       index of the token to print, >= 1
 */
void print_token(FILE *out, const Tokenizer *t, const int *tokens, int i);

#endif
