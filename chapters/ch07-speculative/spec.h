/**
 * @file spec.h
 * @brief Chapter 7: speculative decoding on chapter 4's paged cache.
 *        Propose k tokens cheaply, verify them in one forward pass, keep
 *        the longest prefix the model agrees with, and give the cache back
 *        for the rest.
 *
 * A decode step reads every weight of the model to produce one token per
 * sequence. When the step is limited by memory bandwidth, running k + 1
 * positions of a sequence costs little more than running one: the weights
 * are read once for all of them. Speculation uses that slack. Each step,
 * for every running sequence,
 *
 * 1. a **proposer** guesses the next k tokens d1..dk (`--spec-k K`):
 *    - `--spec ngram`: prompt lookup. The last n tokens (n from
 *      `--spec-ngram-max` down to `--spec-ngram-min`) are looked for earlier
 *      in the sequence; what followed their latest occurrence is proposed.
 *      No second model.
 *    - `--spec self:L`: the model's own first L layers, then its final norm
 *      and head, run as a model of their own (the same weights).
 *    - `--spec draft --draft-model FILE`: a separate, smaller model with the
 *      same vocabulary.
 * 2. the **verifier** (the model) runs the sequence's last token and d1..dk
 *    as one chunk through chapter 4's forward step, with a logits row for
 *    every position: row i says what the model would emit after d1..di;
 * 3. **acceptance**: greedy keeps the longest prefix d1..dj whose every
 *    token is the model's own choice, plus the model's choice after it (so
 *    every step emits 1..k+1 tokens, and exactly the tokens plain decoding
 *    emits); with sampling, rejection sampling keeps dj with probability
 *    min(1, p(dj) / q(dj)) and on a rejection draws from the leftover
 *    max(0, p - q), so the output has the model's distribution exactly
 *    (Leviathan et al. 2023; Chen et al. 2023);
 * 4. **rollback**: positions of rejected proposals were written into the
 *    paged cache by the verifier. They are given back: the table keeps
 *    ceil(accepted positions / block size) blocks, the rest go back to the
 *    pool, and the rows of the last block past the accepted positions are
 *    simply overwritten later (spec_rollback()).
 *
 * **What the memory sees.** Room for the proposals is taken from the free
 * blocks only after chapter 4's scheduler has planned the step (its
 * decodes, its admissions, its preemptions): speculation never preempts,
 * and it proposes fewer tokens when the pool is short. The rollback runs
 * before paged_account(), so the accounting, the timeline and every later
 * scheduling decision see accepted tokens only. The K/V rows written for
 * rejected tokens are counted on their own (spec_rejected_kv_bytes).
 *
 * **Copy-on-write.** With `--n`, the samples of a prompt share its blocks.
 * Chapter 4 makes the block of a sequence's last token private before the
 * step (paged_make_room()); that position is always kept. The proposals
 * start after it, in that private block or in fresh ones, so a rollback
 * never undoes a copy, and never lets go of a block another table holds.
 * spec_rollback() is still written for shared blocks: it drops one holder,
 * and only a block whose last holder let go returns to the pool.
 *
 * **Chapter 5's prefix cache** is not part of this chapter (it is built on
 * chapter 4 only). Composed with it, a block must be registered under its
 * hash only once every token of it is accepted: the rollback would have to
 * run before chapter 5's registration of full blocks, or drop the blocks
 * it gives back from the cache's index.
 *
 * Chapter 7 depends on chapter 4 deliberately: its program links chapter
 * 4's folder and lab files, and it steps chapter 4's scheduler with its own
 * step (spec_step()), as chapter 6 does. The core gained one entry point,
 * in common/: serving_widen_steps() (a step of k + 1 rows per sequence).
 *
 * ## Where each idea is
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: options, open, loop, report | chapters/ch07-speculative/main.c | main() |
 * | the options, refused in one line | chapters/ch07-speculative/options.c | spec_parse_options(), spec_check() |
 * | one step: plan, propose, verify in one pass, accept, roll back, account | chapters/ch07-speculative/spec.c | spec_step() |
 * | prompt lookup | chapters/ch07-speculative/propose.c | spec_propose_ngram() |
 * | a draft model (or the first L layers) with a contiguous cache of its own | chapters/ch07-speculative/draft.c | spec_draft_propose() |
 * | the greedy rule (lab) | solutions/ch07/spec_accept_greedy.c | spec_accept_greedy() |
 * | rejection sampling; the sampler's distribution | chapters/ch07-speculative/accept.c | spec_accept_sampled(), spec_distribution() |
 * | give back the rejected positions of a table (lab) | solutions/ch07/spec_rollback.c | spec_rollback() |
 * | the invariants after a step | chapters/ch07-speculative/invariants.c | spec_check_invariants() |
 * | the memory table's lines and the JSON keys | chapters/ch07-speculative/report.c | spec_report_table() |
 */
#ifndef KVLAB_CH07_SPEC_H
#define KVLAB_CH07_SPEC_H

#include <stdio.h>

#include "paged.h"

/** Where the proposals come from. */
typedef enum {
    SPEC_NONE = 0, /**< no speculation: chapter 4's step */
    SPEC_NGRAM,    /**< prompt lookup */
    SPEC_SELF,     /**< the model's first L layers and its head */
    SPEC_DRAFT     /**< a separate draft model */
} SpecMethod;

/** Most proposals per step (--spec-k). */
#define SPEC_MAX_K 16

/** The chapter's options. */
typedef struct {
    SpecMethod method;      /**< --spec ngram|self:L|draft (SPEC_NONE: chapter 4's run) */
    int k;                  /**< --spec-k K: proposals per step, 1..SPEC_MAX_K (default 4) */
    int ngram_min;          /**< --spec-ngram-min: shortest n looked up (default 1) */
    int ngram_max;          /**< --spec-ngram-max: longest n looked up (default 3) */
    int self_layers;        /**< L of --spec self:L */
    const char *draft_path; /**< --draft-model FILE */
    int check;              /**< --spec-check: spec_check_invariants() after every step, an error if one fails */
} SpecOptions;

/** A proposer that runs a model: the draft, or the first L layers. */
typedef struct {
    Model own;            /**< the draft model, loaded (--spec draft), else unused */
    Model view;           /**< self:L: the target's weights with cfg.n_layers = L (nothing owned) */
    const Model *model;   /**< the model that proposes: &own or &view */
    ForwardState fs;      /**< its activations: [seq_len] tokens, [n_seqs] logits rows */
    BatchEntry *entries;  /**< [max(seq_len, n_seqs)] its batch */
    int max_entries;      /**< capacity of entries */
    float *kv;            /**< K then V of every request: [n_seqs][n_layers][2][max_tokens][kv_dim] */
    size_t *offset;       /**< [n_seqs] where each request's cache starts in kv */
    int *capacity;        /**< [n_seqs] positions each request's cache holds (its max_tokens) */
    int *cached;          /**< [n_seqs] leading positions whose draft K/V are valid */
    size_t kv_bytes;      /**< bytes of kv */
} SpecDraft;

/** The chapter's books beside chapter 4's server. */
typedef struct {
    SpecOptions opt;       /**< the options */
    PagedServer *server;   /**< chapter 4's server (set once paged_open() made it) */
    int n_seqs;            /**< requests */
    int vocab;             /**< logits per row */
    int sampled;           /**< 1: --temperature > 0 (rejection sampling), 0: greedy */
    int *budget;           /**< [n_seqs] proposals a request may make this step (0: it does not speculate) */
    int *n_proposed;       /**< [n_seqs] proposals fed this step */
    int *proposals;        /**< [n_seqs][k] this step's proposals */
    int *rows;             /**< [n_seqs][k + 1] logits rows: the last token's, then each proposal's */
    int *targets;          /**< [k + 1] the verifier's choice at each row (greedy) */
    float *q;              /**< [n_seqs][k][vocab] the draft's distribution of each proposal (sampling with a model), else NULL */
    float *p;              /**< [k + 1][vocab] the verifier's distributions (sampling) */
    float *scratch;        /**< [vocab] a row to sample from */
    SpecDraft draft;       /**< self:L and draft */
    int has_draft;         /**< 1: draft is open */
    long proposed;         /**< proposals verified, over the run */
    long accepted;         /**< of which accepted */
    long spec_steps;       /**< sequence-steps that speculated (one per sequence per step) */
    long spec_emitted;     /**< tokens those sequence-steps emitted (accepted + the verifier's own) */
    long forward_steps;    /**< verifier forward passes (steps that ran a batch) */
    long rejected_positions; /**< positions written by the verifier and then given back */
    long blocks_rolled_back; /**< blocks given back to the pool by rollbacks */
    int proposal_blocks_peak; /**< most blocks held at once for proposals, over the steps */
    long invariant_checks;  /**< times spec_check_invariants() ran (--spec-check) */
    int *holders;          /**< [pool blocks] scratch of spec_check_invariants() */
} SpecDecoder;

/**
 * Takes the chapter's options out of argv (the rest is left for the common
 * parser) and checks them.
 * @param argc  in: argument count; out: what is left
 * @param argv  the arguments (compacted in place)
 * @param o     receives the options
 * @param err   receives one line on failure
 * @return 0 on success, -1 on a bad option
 */
int spec_parse_options(int *argc, char **argv, SpecOptions *o, Err *err);

/**
 * Refuses what speculation cannot be combined with: `--beam`, `--device
 * cuda`, `--preempt swap`, `--max-num-batched-tokens`/`--max-num-seqs`
 * (chapter 4's token budget: proposals are not in it), `--spec self:L`
 * with L outside 1..layers-1.
 * @param o    the options
 * @param run  the run (its options and model)
 * @param err  receives one line on failure
 * @return 0 when the run can go ahead, -1 otherwise
 */
int spec_check(const SpecOptions *o, const ServingRun *run, Err *err);

/**
 * The chapter's books: per-request proposals and rows, the draft model
 * (loaded, and refused in one line when its vocabulary differs) or the
 * view of the first L layers, with a cache of its own.
 * @param d    receives the books
 * @param o    the options
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure (close with spec_close() either way)
 */
int spec_open(SpecDecoder *d, const SpecOptions *o, const ServingRun *run, Err *err);

/**
 * After paged_open(): remembers the server and widens the step to k + 1
 * positions and logits rows per request (serving_widen_steps()).
 * @param d       the books
 * @param server  chapter 4's server
 * @param run     the run
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int spec_attach(SpecDecoder *d, PagedServer *server, ServingRun *run, Err *err);

/**
 * Frees the books and the draft.
 * @param d  opened or zeroed books
 */
void spec_close(SpecDecoder *d);

/**
 * One step: chapter 4's paged_plan(); proposals for every running request
 * that decodes, room for them from the free blocks; the batch through the
 * model with chapter 4's seam, every proposal with its logits row; the
 * requests that did not speculate sample as in chapter 4; the others
 * accept (spec_accept_greedy() or spec_accept_sampled()), take their tokens
 * and roll back (spec_rollback()); paged_account(); the finished requests'
 * blocks back to the pool.
 * @param d    the books
 * @param run  the run
 * @param err  receives the reason on failure (with --spec-check, a broken invariant)
 * @return 0 on success, -1 on failure
 */
int spec_step(SpecDecoder *d, ServingRun *run, Err *err);

/**
 * Prompt lookup: the longest n in [n_min, n_max] whose last n tokens occur
 * earlier in @p tokens; from their latest earlier occurrence, the tokens
 * that followed (at most @p k, never past the end of @p tokens).
 * @param tokens  [n_tokens] the sequence so far
 * @param n_tokens  its length
 * @param n_min   shortest n
 * @param n_max   longest n
 * @param k       most proposals
 * @param out     [k] receives the proposals
 * @return proposals written (0: no earlier occurrence)
 */
int spec_propose_ngram(const int *tokens, int n_tokens, int n_min, int n_max, int k, int *out);

/**
 * The greedy rule: how many proposals are accepted, the longest prefix
 * with proposals[i] == targets[i]. The verifier's own token after them is
 * targets[result].
 * @param targets    [n + 1] the verifier's choice after the last token and after each proposal
 * @param proposals  [n] the proposals
 * @param n          proposals
 * @return accepted, 0..n
 */
int spec_accept_greedy(const int *targets, const int *proposals, int n);

/**
 * Rejection sampling (Leviathan et al. 2023, Chen et al. 2023): proposal i
 * is kept with probability min(1, p_i(d) / q_i(d)); at the first rejection
 * the next token is drawn from max(0, p_i - q_i), normalised; when all n
 * are kept, from p_n. The emitted tokens then have the distribution of
 * sampling from p token by token, exactly.
 * @param p          [n + 1][vocab] the verifier's distributions
 * @param q          [n][vocab] the proposer's distributions, or NULL: each
 *                   proposal was certain (prompt lookup, q = 1 at it)
 * @param proposals  [n] the proposals
 * @param n          proposals
 * @param vocab      tokens per distribution
 * @param rng        the request's random state (sampler_random_f32())
 * @param scratch    [vocab] scratch
 * @param next       receives the token drawn after the accepted ones
 * @return accepted, 0..n
 */
int spec_accept_sampled(const float *p, const float *q, const int *proposals, int n, int vocab,
                        unsigned long long *rng, float *scratch, int *next);

/**
 * Gives back the positions of @p r past @p keep: the table keeps
 * ceil(keep / block size) blocks; each block past those loses this table
 * as a holder and goes back to the pool when no other table holds it (its
 * breakdown history closed, as chapter 4 does for a freed block). The rows
 * of the last kept block past @p keep are left as they are: they are
 * written again before anything attends to them. r->n_cached becomes
 * @p keep.
 * @param s     chapter 4's server
 * @param run   the run
 * @param r     the request
 * @param keep  positions whose K/V stay (accepted), at most r->n_cached
 * @return blocks that went back to the pool
 */
int spec_rollback(PagedServer *s, ServingRun *run, Request *r, int keep);

/**
 * The invariants after a step: every running request's table holds
 * exactly ceil(n_cached / block size) blocks and every other request's
 * none; every block's reference count is the number of tables that hold
 * it (never negative), and a block is on the free stack exactly when its
 * count is 0; the free blocks plus the held blocks are the pool.
 * @param s    chapter 4's server
 * @param run      the run
 * @param holders  [pool blocks] scratch
 * @param err      receives the first broken invariant
 * @return 0 when all hold, -1 otherwise
 */
int spec_check_invariants(const PagedServer *s, const ServingRun *run, int *holders, Err *err);

/**
 * The memory table: chapter 4's lines, then the proposer, acceptance,
 * tokens per step, and what speculation cost the cache (the K/V of
 * rejected tokens, written then released; the draft's own cache).
 * @param f    stream
 * @param ctx  the SpecDecoder
 * @param run  the finished run
 */
void spec_report_table(FILE *f, void *ctx, const ServingRun *run);

/**
 * The JSON report: chapter 4's keys, then spec_method, spec_k,
 * spec_proposed, spec_accepted, spec_acceptance_rate, spec_steps,
 * spec_tokens_per_spec_step, spec_tokens_per_forward_step,
 * spec_forward_steps, spec_rejected_positions, spec_rejected_kv_bytes,
 * spec_blocks_rolled_back, spec_draft_kv_bytes.
 * @param j    the writer
 * @param ctx  the SpecDecoder
 * @param run  the finished run
 */
void spec_report_json(JsonWriter *j, void *ctx, const ServingRun *run);

/**
 * Opens the model proposer: loads --draft-model (refusing a vocabulary
 * other than the target's, or a shorter context, in one line) or makes
 * the view of the first L layers; its activations and its cache.
 * @param g    receives it
 * @param o    the options
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure (spec_draft_close() either way)
 */
int spec_draft_open(SpecDraft *g, const SpecOptions *o, const ServingRun *run, Err *err);

/**
 * Frees the model proposer.
 * @param g  opened or zeroed
 */
void spec_draft_close(SpecDraft *g);

/**
 * Proposals from the model proposer for every request with a budget: each
 * catches up on the tokens its cache lacks (one forward pass, in chunks of
 * at most its capacity), then runs one token at a time, all requests in
 * one batch, until each has budget[i] proposals. Greedy: the argmax; with
 * sampling, a draw from the proposer's distribution at the run's
 * temperature, kept in d->q.
 * @param d    the books (budget set; proposals and n_proposed filled)
 * @param run  the run
 */
void spec_draft_propose(SpecDecoder *d, ServingRun *run);

/**
 * After a rollback: the proposer's cache of request @p seq keeps only
 * positions below @p keep.
 * @param g     the proposer
 * @param seq   the request
 * @param keep  positions the verifier kept
 */
void spec_draft_keep(SpecDraft *g, int seq, int keep);

/**
 * The distribution the sampler draws from, as chapter 4 samples (the
 * penalties over the tokens so far, the temperature, min-p, top-k, the
 * softmax, the top-p nucleus, renormalised): every step of
 * sampler_sample_seq() but the draw.
 * @param s         the request's sampler (its settings and scratch)
 * @param logits    [vocab] a row (changed in place)
 * @param tokens    [n_tokens] the tokens before the row's next token
 * @param n_prompt  of which the prompt
 * @param n_tokens  tokens
 * @param out       [vocab] receives the probabilities
 */
void spec_distribution(Sampler *s, float *logits, const int *tokens, int n_prompt, int n_tokens, float *out);

/**
 * A draw from weights @p w (their sum is taken: they need not add up to
 * 1), by the inverse of the cumulative sum; tokens of weight 0 are never
 * drawn.
 * @param w      [vocab] weights, not negative, not all 0
 * @param vocab  entries
 * @param rng    the random state (sampler_random_f32())
 * @return the token
 */
int spec_draw(const float *w, int vocab, unsigned long long *rng);

#endif
