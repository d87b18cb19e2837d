/**
 * @file kvsim_prefix.h
 * @brief kvsim's prefix-caching scenarios: chapter 5's caches at 7B and
 *        13B scale, on a synthetic multi-turn chat trace, without a model.
 *
 * A chat service sends the whole conversation with every new message: a
 * system prompt that every conversation shares, then each earlier user
 * turn and answer, then the new turn. The trace is made of such requests
 * (kvsim_prefix_make_trace()): C conversations, each of up to T turns,
 * user turns and answers drawn from lognormal lengths, conversations
 * starting at Poisson times, and turn k + 1 arriving a fixed think time
 * after turn k would have finished had it started at once (arrival steps
 * must be known in advance in a simulated run; a turn delayed by the queue
 * may therefore arrive before its predecessor's answer is complete, and
 * the report counts those).
 *
 * Each request is given its own token ids after serving_sim_init(): the
 * system prompt's ids are the same in every conversation, user turns have
 * ids of their own, and every answer position holds SERVING_SIM_TOKEN,
 * which is exactly what a simulated request generates. So a later turn's
 * prompt repeats its conversation's earlier answers token for token, and
 * can find the blocks their decodes filled.
 *
 * The same trace then runs through chapter 4's server with chapter 5's
 * cache above it (prefix_cache_open(), paged_step()), once per cache: off,
 * hash, radix. No forward pass runs and no K/V byte is allocated; what is
 * measured is what the allocator and the cache do: prefill positions
 * computed, hits, evictions, cached-but-free blocks, preemptions,
 * concurrency and queueing.
 */
#ifndef KVLAB_KVSIM_PREFIX_H
#define KVLAB_KVSIM_PREFIX_H

#include <stdint.h>
#include <stdio.h>

#include "err.h"
#include "kvsim.h"
#include "prefix.h"

/** The shape of a synthetic multi-turn trace. */
typedef struct {
    int conversations;   /**< how many */
    int turns;           /**< most turns per conversation (fewer when the context is full) */
    int system_tokens;   /**< the system prompt every conversation starts with (BOS included) */
    KvsimDist user;      /**< tokens of a user turn */
    KvsimDist answer;    /**< tokens of an answer */
    int max_turn_tokens; /**< longest user turn or answer drawn */
    int think_steps;     /**< steps between an answer's end and the next user turn */
    double rate;         /**< conversations starting per simulated step (Poisson) */
    uint64_t seed;       /**< seeds every draw */
} KvsimPrefixTrace;

/** One request of the trace: its lengths and arrival, and where it belongs. */
typedef struct {
    SimRequestSpec spec; /**< prompt, answer length, arrival */
    int conversation;    /**< which conversation */
    int turn;            /**< which turn of it, from 0 */
} KvsimPrefixRequest;

/**
 * Draws the trace: every conversation's turns and answers, in arrival
 * order (ties in conversation order).
 * @param t        the trace's shape
 * @param seq_len  the model's longest sequence: a conversation stops before a turn would pass it
 * @param out      receives up to t->conversations x t->turns requests
 * @return how many requests
 */
int kvsim_prefix_make_trace(const KvsimPrefixTrace *t, int seq_len, KvsimPrefixRequest *out);

/**
 * Writes the token ids of every request of a simulated run made from the
 * trace: the shared system prompt, the conversation's earlier user turns
 * and answers (SERVING_SIM_TOKEN), the new turn.
 * @param t     the trace's shape
 * @param reqs  [run->n_reqs] the trace (kvsim_prefix_make_trace())
 * @param run   a run from serving_sim_init() on the trace's specs, before any step
 */
void kvsim_prefix_write_tokens(const KvsimPrefixTrace *t, const KvsimPrefixRequest *reqs, ServingRun *run);

/** What one cache did with the trace. */
typedef struct {
    long query_tokens;      /**< positions the admissions needed */
    long prefill_computed;  /**< of which computed */
    double hit_rate;        /**< the share found cached */
    long evictions;         /**< blocks evicted */
    int cached_free_peak;   /**< most cached-but-free blocks after a step */
    int shared_at_peak;     /**< blocks held by two or more tables at the peak of use */
    int held_peak;          /**< most blocks held */
    long preemptions;       /**< requests preempted */
    int max_concurrent;     /**< most requests running */
    long steps;             /**< simulated steps */
    double mean_wait;       /**< steps from arrival to the first token, averaged */
    double mean_latency;    /**< steps from arrival to the last token, averaged */
    int early_turns;        /**< turns that arrived before their conversation's previous turn finished */
} KvsimPrefixResult;

/**
 * Runs the trace through chapter 4's server with chapter 5's cache in
 * @p mode, accounting only.
 * @param shape               a model whose cfg alone is filled in
 * @param o                   the options (budget, block size, watermark)
 * @param kv_bytes_per_token  K and V of one token, all layers, in the simulated dtype
 * @param t                   the trace's shape
 * @param reqs                [n] the trace
 * @param n                   how many
 * @param mode                which cache
 * @param res                 receives the numbers
 * @param err                 receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvsim_prefix_run(const Model *shape, const CliOptions *o, size_t kv_bytes_per_token, const KvsimPrefixTrace *t,
                     const KvsimPrefixRequest *reqs, int n, PrefixCacheMode mode, KvsimPrefixResult *res, Err *err);

/**
 * Whether kvsim's command line asks for a prefix-caching scenario
 * (`--scenario prefix-...`).
 * @param argc  from main
 * @param argv  from main
 * @return 1 when it does
 */
int kvsim_prefix_wanted(int argc, char **argv);

/**
 * kvsim's prefix-caching scenarios as a program: parses their options
 * (`--scenario prefix-multiturn-7b | prefix-multiturn-13b`, `--block-size`,
 * `--conversations`, `--turns`, `--rate`, `--seed`, `--json`, `--help`), prints the
 * setup and one row per cache, and returns the exit status (errors: one
 * line on stderr, status 1).
 * @param argc  from main
 * @param argv  from main
 * @return 0 on success, 1 on error
 */
int kvsim_prefix_main(int argc, char **argv);

#endif
