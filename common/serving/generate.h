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
 * generation and is not printed. The text goes out through a DecodeStream
 * (tokenizer.h), so it is cut only between whole UTF-8 characters: a token
 * that ends inside a character (byte-level BPE splits many) prints when
 * the character is complete, and a character that the last token leaves
 * unfinished (--steps, or the context, ran out first) prints as U+FFFD.
 *
 * With `--chat` (generation_init_chat()) the prompt is the user's message
 * in the model's ChatML template (chat.h); only the answer is printed, and
 * `<|im_end|>`, the end of the assistant's turn, ends generation unprinted.
 */
#ifndef KVLAB_GENERATE_H
#define KVLAB_GENERATE_H

#include <stdio.h>

#include "err.h"
#include "forward.h"
#include "report.h"
#include "chat.h"
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
    int end_token;        /**< a token that also ends generation, unprinted (--chat: `<|im_end|>`); -1: none */
    int echo_prompt;      /**< 1: generate() prints the prompt before the new text; 0 (--chat): the new text only */
    BatchEntry *entries;  /**< [seq_len] the batch of the current step */
    double *step_seconds; /**< [seq_len + 2] time of the step run with t tokens in context, or 0 */
    long positions_run;   /**< token positions fed through the model, all steps together */
    double elapsed_s;     /**< wall time of all steps */
    int n_outputs;        /**< samples taken: the new tokens, and the stop token when one ended generation */
    double first_output_s; /**< wall time from the first step's start to the first sample: the time to first token */
    double last_output_s; /**< the same to the last sample (end to end; 0 before the first) */
    KvTimeline kv;        /**< KV reserved/used after each step */
} Generation;

/**
 * Allocates the buffers and encodes the prompt (BOS + text, or the text
 * alone when the tokenizer adds no BOS). Refuses an empty prompt, one
 * longer than tokenizer_max_text_bytes() for seq_len tokens before
 * tokenizing it (it cannot fit, and a 100 KB prompt then costs nothing),
 * and one longer than seq_len tokens. generate() will print the prompt
 * and stop at the tokenizer's stop tokens only.
 * @param g       receives the buffers and prompt ids
 * @param m       the model (for seq_len and vocab)
 * @param t       the tokenizer
 * @param prompt  the prompt text
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int generation_init(Generation *g, const Model *m, const Tokenizer *t, const char *prompt, Err *err);

/**
 * generation_init() for `--chat`: @p message becomes the one user message
 * of a ChatML conversation with the template's default system message
 * (chat_render()), generate() prints only the answer, and the end of the
 * assistant's turn (chat_end_token()) stops it unprinted. The length is
 * checked before the prompt is rendered.
 * @param g        receives the buffers and prompt ids
 * @param m        the model
 * @param t        the tokenizer the template came from
 * @param chat     the model's template (chat_template_open())
 * @param message  the user's message
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int generation_init_chat(Generation *g, const Model *m, const Tokenizer *t, const ChatTemplate *chat,
                         const char *message, Err *err);

/**
 * Frees the buffers.
 * @param g  an initialised or zeroed generation
 */
void generation_free(Generation *g);

/**
 * Runs the loop until @p steps new tokens, a stop token (tokenizer_is_stop(),
 * or g->end_token), or seq_len + 1 tokens. Prints the text to @p out (NULL:
 * print nothing) as it goes, in whole UTF-8 characters (one left unfinished
 * at the end prints as U+FFFD), then a newline.
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

#endif
