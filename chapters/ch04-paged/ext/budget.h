/**
 * @file budget.h
 * @brief Chapter 4 extension: the token budget with chunked prefill, the
 *        running limit, and what preemption costs.
 *
 * **Adds** a scheduler of its own over the core's phases (scheduler.h).
 * With `--max-num-batched-tokens N` (chunked prefill, as vLLM V1) no step
 * exceeds N tokens: the decodes go first, then the next chunk of a prompt
 * that is still being prefilled, then admissions with a first chunk that
 * fits the rest; only a prompt's last chunk gets a logits row, and the
 * samples forked from a prompt in chunks (`--n`) wait for its last one.
 * With `--max-num-seqs` at most that many requests run. Every preemption
 * is counted with what recomputing it costs; with `--preempt swap` the
 * blocks go to the host swap space instead (ext/swap.c). The report gains
 * a "scheduler" part: the step sizes, the steps to the first token, the
 * preemptions' costs.
 *
 * **Turned on by** `--max-num-batched-tokens`, `--max-num-seqs`,
 * `--preempt` or `--swap-space` (budget_wanted()). Without any of them
 * PagedServer.budget is NULL, and the chapter allocates, schedules and
 * reports exactly what its core does.
 *
 * **Taught in** book/ch04-paged.md, "Extension: a token budget and
 * chunked prefill" (and "Extension: swapping instead of recomputing").
 *
 * **Where the core calls it** (behind budget_wanted()): paged_check()
 * calls budget_check() before the model loads, and paged_open() calls
 * budget_open(), which fills in the server's hooks (PagedHooks): plan
 * (budget_schedule() instead of paged_schedule()), print_setup,
 * report_table, report_json and a close. The core names nothing else of
 * it.
 */
#ifndef KVLAB_CH04_BUDGET_H
#define KVLAB_CH04_BUDGET_H

#include "paged.h"

/** Most steps PagedBudget.timeline keeps; beyond that it keeps every other one. */
#define PAGED_STEP_SAMPLES 2048

/** One step's size, for the JSON report's step_tokens_timeline. */
typedef struct {
    long step;         /**< the step */
    int tokens;        /**< tokens (batch entries) it ran */
    int prompt_tokens; /**< of which prompt or recomputed positions (the rest: one decode token per request) */
} PagedStepSample;

/**
 * What the scheduler keeps when it is given `--max-num-batched-tokens`,
 * `--max-num-seqs`, `--preempt` or `--swap-space`: the budget's rules and
 * the numbers the report adds (the swap space is PagedServer.swap).
 */
struct PagedBudget {
    ServingRun *run;         /**< the run whose observer notes first tokens (budget_close() takes it off) */
    int chunked_prefill;     /**< 1 (--max-num-batched-tokens): the step budget is strict, prompts run in chunks */
    int max_num_seqs;        /**< most requests running at once */
    int *follows;            /**< [n_reqs] the sample whose prompt this fork waits for while it runs in chunks, or -1 */
    long *first_token_step;  /**< [n_reqs] the step a request sampled its first token in, or -1 */
    long *sorted_steps;      /**< [n_reqs] scratch for the median of the steps to the first token */
    int max_step_tokens;     /**< most tokens (batch entries) in one step: what the budget bounds */
    long max_step_kv_reads;  /**< most K/V positions attention read in one step: sum over its entries of pos + 1 */
    long steps_mixed;        /**< steps in which decode tokens waited behind prompt (or recomputed) positions */
    int max_prompt_beside_decodes; /**< most prompt positions in a step that also ran decodes */
    long recomputed_tokens;  /**< positions whose K/V a preemption dropped, to be recomputed */
    double recompute_flops;  /**< the forward-pass FLOPs of recomputing them (paged_recompute_flops()) */
    long recompute_blocks;   /**< blocks those preemptions freed (what swapping would have moved each way) */
    PagedStepSample timeline[PAGED_STEP_SAMPLES]; /**< step sizes, oldest first (every stride-th step) */
    int timeline_n;          /**< samples kept */
    long timeline_stride;    /**< one step in stride is kept */
    long timeline_steps;     /**< steps offered */
};

/**
 * Whether the options ask for this extension.
 * @param o  the options
 * @return 1 with any of `--max-num-batched-tokens`, `--max-num-seqs`,
 *         `--preempt`, `--swap-space`
 */
int budget_wanted(const CliOptions *o);

/**
 * Refuses, before anything is printed, scheduler options that cannot work
 * together: `--max-num-seqs` above `--max-num-batched-tokens` (every running
 * request may need a decode token in the same step, and decodes are never
 * cut: vLLM refuses the same), `--n` samples above `--max-num-seqs` (the
 * samples of a prompt are admitted together), `--swap-space` without
 * `--preempt swap`, and a swap space that cannot be made (swap_check()).
 * @param run  the run (its options)
 * @param err  receives one line on failure
 * @return 0 when the options work together, -1 otherwise
 */
int budget_check(const ServingRun *run, Err *err);

/**
 * Makes s->budget: the budget's rules (s->max_batched_tokens with
 * `--max-num-batched-tokens`), the per-request books, with `--preempt swap`
 * the swap space (swap_open()), and the step's capacity; adds the observer
 * that notes each request's first token (serving_add_observer()).
 * @param s                the server (its pool made)
 * @param run              the run
 * @param max_step_tokens  set to the most tokens one step may feed
 * @param err              receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int budget_open(PagedServer *s, ServingRun *run, int *max_step_tokens, Err *err);

/**
 * Frees what budget_open() made (none: nothing).
 * @param s  the server
 */
void budget_close(PagedServer *s);

/**
 * The setup line: the budget, whole prompts or chunks, the running limit,
 * how preemption works.
 * @param log   where it goes
 * @param s     the server (s->budget set)
 * @param run   the run
 * @param name  the program's name, which starts the line
 */
void budget_print_setup(FILE *log, const PagedServer *s, const ServingRun *run, const char *name);

/**
 * Plans one step: the decodes of the running requests (preempting the
 * newest when out of blocks: swapped out, or recomputed later), then the
 * next chunk of a prompt still being prefilled, then FCFS admission of
 * waiting requests (a swapped-out one gets its blocks back), with a first
 * chunk when the budget is strict and within `--max-num-seqs`.
 * @param s    the server (s->budget set)
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int budget_schedule(PagedServer *s, ServingRun *run, Err *err);

/**
 * The most requests that may run at once: `--max-num-seqs` (by default
 * `--max-num-batched-tokens` when that is given), else every request.
 * @param s    the server
 * @param run  the run
 * @return the limit
 */
int budget_max_running(const PagedServer *s, const ServingRun *run);

/**
 * Steps to the first token over the requests that took one: from the step
 * it arrived at to the step that sampled its first token, both counted (1:
 * its first step).
 * @param s       the server (with s->budget)
 * @param run     the finished run
 * @param min     receives the fewest
 * @param median  receives the median (the mean of the middle two for an even count)
 * @param max     receives the most
 * @return how many requests took a first token
 */
int budget_first_token_steps(const PagedServer *s, const ServingRun *run, long *min, double *median, long *max);

/**
 * The scheduler's lines of the memory table: the budget and what it did to
 * the steps, steps to the first token, and the preemptions with their
 * cost: bytes a swap moved against FLOPs a recomputation spent or would
 * have spent.
 * @param f    stream
 * @param s    the server (s->budget set)
 * @param run  the finished run
 */
void budget_report_table(FILE *f, const PagedServer *s, const ServingRun *run);

/**
 * The scheduler's JSON keys: max_num_batched_tokens, chunked_prefill,
 * max_num_seqs, preempt, max_step_tokens, max_step_kv_reads,
 * steps_decodes_behind_prompt, max_prompt_tokens_beside_decodes,
 * first_token_steps {min, median, max}, the swap keys
 * (swap_report_json()), recomputed_tokens, recompute_flops,
 * recompute_blocks, step_tokens_timeline ([step, tokens, prompt tokens]
 * per kept step).
 * @param j    the writer (inside the report object)
 * @param s    the server (s->budget set)
 * @param run  the finished run
 */
void budget_report_json(JsonWriter *j, const PagedServer *s, const ServingRun *run);

#endif
