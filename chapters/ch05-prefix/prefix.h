/**
 * @file prefix.h
 * @brief Chapter 5: automatic prefix caching on chapter 4's paged pool,
 *        with a hash chain (vLLM V1) or a radix tree (SGLang) side by side.
 *
 * Many requests start with the same tokens: a system prompt, few-shot
 * examples, the earlier turns of a conversation. Their K/V are the same
 * bits in every request, because a position's K/V depend only on the
 * tokens up to it. Chapter 4 computes them again for each request; this
 * chapter computes them once. A full block of K/V stays findable by its
 * tokens after the request that computed it has let go, and a later
 * request whose leading tokens match takes the block (one holder more, as
 * chapter 4's forks do) and starts its prefill after it.
 *
 * **Built on chapter 4, deliberately.** This chapter is chapter 4's server
 * with a cache above its pool: chapter 4's scheduler, block tables,
 * PagedAttention, preemption and forks run unchanged, linked from
 * chapters/ch04-paged/ and chapter 4's lab files (the Makefile's rule for
 * build/ch05-prefix, and `make check-layout`, know it). Chapter 4 offers
 * the extension points (its extension ext/paged_cache.h), and never names
 * this chapter:
 *
 * | extension point (chapter 4) | what the cache does there (this chapter) |
 * |---|---|
 * | PagedCache.lookup: at admission, which leading blocks are cached | hash_chain_match() or radix_match() |
 * | PagedCache.admitted: the request takes them | hash_chain_take() or radix_take() |
 * | PagedCache.release: instead of block_table_release() | tail first, parking the cached blocks (hash_chain_release(), radix_release()) |
 * | PagedCache.reclaim: the free stack is short of blocks | evict a parked block (hash_chain_evict(), radix_evict()) |
 * | BlockPool.n_parked: free blocks off the free stack, which the pool counts as free | parking.c keeps it: block_pool_park(), block_pool_hold_parked(), block_pool_free_parked() |
 *
 * **When a block is registered.** A block is cached the moment the last
 * of its positions is scheduled, generated tokens included, as vLLM does:
 * before each lookup and each release the cache registers every full block
 * that the step planned so far will have filled
 * (prefix_cache_register_planned()). A request admitted later in the same
 * step can hit it: the forward pass stores the K/V of a layer for the
 * whole batch before any attention reads them (common/cpu/forward.c).
 *
 * **The last position is always computed.** A request samples from the
 * logits of its last position, so a hit covers at most n_tokens - 1
 * positions, rounded down to whole blocks. When every block of a sequence
 * is cached and its length is a multiple of the block size, the whole last
 * block is recomputed, as vLLM does (its computed positions stay
 * block-aligned): up to block_size - 1 positions of work to keep every
 * write inside a private block. The books count these positions
 * (PrefixCache.recomputed_tokens).
 *
 * **Identity.** The cache changes which positions are computed, never
 * what they hold: the K/V of a cached block are bit for bit what the
 * request would have computed, so every request gives the same tokens
 * with `--prefix-cache off`, `hash` and `radix`, at every block size,
 * budget and number of preemptions (tests/test_ch05.c).
 *
 * The chapter runs on the CPU only: `--device` is not one of its options.
 *
 * ## Where each idea is
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: open, loop, report | chapters/ch05-prefix/main.c | main() |
 * | the cache on chapter 4's server: hooks, registration, books | chapters/ch05-prefix/prefix_cache.c | prefix_cache_open() |
 * | parking: free blocks that still hold cached K/V | chapters/ch05-prefix/parking.c | block_pool_park(), block_pool_free_parked() |
 * | the key of a block, FNV-1a | chapters/ch05-prefix/hash_chain.c | hash_block_key() |
 * | the chained keys of a sequence's full blocks (lab) | solutions/ch05/hash_chain_keys.c | hash_chain_keys() |
 * | one block by key, chain and tokens: no collision accepted (lab) | solutions/ch05/hash_chain_find.c | hash_chain_find() |
 * | the longest cached run of leading blocks (lab) | solutions/ch05/hash_chain_match.c | hash_chain_match() |
 * | a hit takes its blocks out of the LRU queue (lab) | solutions/ch05/hash_chain_take.c | hash_chain_take() |
 * | release tail first, parking cached blocks (lab) | solutions/ch05/hash_chain_release.c | hash_chain_release() |
 * | evict the least recently freed block (lab) | solutions/ch05/hash_chain_evict.c | hash_chain_evict() |
 * | the hash table and the LRU queue | chapters/ch05-prefix/hash_chain.c | hash_chain_register(), hash_chain_queue_push_newest() |
 * | the radix tree: match, insert, split, evict at the leaves | chapters/ch05-prefix/radix_tree.c | radix_match(), radix_insert(), radix_evict() |
 * | hits, prefill saved, cached-but-free blocks, KV cache usage | chapters/ch05-prefix/report.c | prefix_report_table() |
 */
#ifndef KVLAB_CH05_PREFIX_H
#define KVLAB_CH05_PREFIX_H

#include <stdint.h>

#include "ext/paged_cache.h"
#include "hash_chain.h"
#include "paged.h"
#include "radix_tree.h"

/** Which cache runs above the pool. */
typedef enum {
    PREFIX_CACHE_OFF,   /**< none: chapter 4 exactly (the books still count prefill positions) */
    PREFIX_CACHE_HASH,  /**< vLLM V1's chain of block hashes, LRU queue of free cached blocks */
    PREFIX_CACHE_RADIX  /**< SGLang's radix tree, LRU eviction at the leaves */
} PrefixCacheMode;

/** Most samples PrefixCache keeps of its blocks over time; then every other one. */
#define PREFIX_TIMELINE_CAP 2048

/** The pool's blocks after one step. */
typedef struct {
    long step;       /**< the step */
    int held;        /**< blocks some table holds */
    int cached_free; /**< blocks no table holds that still hold cached K/V (parked) */
} PrefixSample;

/** The cache above chapter 4's server, and its books. */
typedef struct {
    PrefixCacheMode mode;  /**< off, hash or radix */
    PagedServer *server;   /**< chapter 4's server it extends */
    PagedCache hooks;      /**< what chapter 4's scheduler calls (PagedServer.cache points here) */
    ServingRun *run;       /**< the run */
    int block_size;        /**< tokens per block */
    HashChain hash;        /**< mode hash */
    RadixTree radix;       /**< mode radix */
    /* How far each request's blocks are known to the cache. */
    int *n_known;          /**< [n_reqs] leading blocks of each request that the cache holds (its own, or an equal one) */
    uint64_t *last_key;    /**< [n_reqs] hash: the key of its last known block */
    long *last_id;         /**< [n_reqs] hash: the registration number of the entry that stands for it */
    int *last_block;       /**< [n_reqs] radix: the tree block that ends its known path */
    int *stopped;          /**< [n_reqs] radix: 1 once its next block would hang below a block it does not hold */
    int *fed_until;        /**< [n_reqs] scratch: positions with K/V once the planned step has run */
    int *recompute;        /**< [n_reqs] cached positions the last lookup leaves to recompute (the last block) */
    double *first_token_s; /**< [n_reqs] seconds of serving before each request had its first token, or -1 */
    uint64_t *keys;        /**< [table capacity] scratch: a sequence's keys */
    int *hit;              /**< [table capacity] scratch: the blocks a lookup found */
    /* The books. */
    long admissions;        /**< admissions looked up (a fork group counts once) */
    long query_tokens;      /**< positions those admissions needed K/V for (prompt, or prompt + generated when recomputed) */
    long hit_tokens;        /**< of which were cached */
    long recomputed_tokens; /**< cached positions computed again: the whole last block of a fully cached sequence */
    long duplicates;        /**< full blocks computed twice at once (an equal one was registered first) */
    long steps;             /**< steps observed */
    int held_peak;          /**< most blocks held after a step */
    long held_peak_step;    /**< when */
    int shared_at_peak;     /**< blocks held by two or more tables then */
    int saved_at_peak;      /**< blocks sharing saved then: table entries - blocks held */
    int cached_free_peak;   /**< most parked blocks after a step */
    double usage_sum;             /**< sum over steps of held / total */
    double usage_with_cached_sum; /**< sum over steps of (held + parked) / total */
    double usage_peak;            /**< most held / total */
    double usage_with_cached_peak; /**< most (held + parked) / total */
    double ttft_sum;        /**< sum of first_token_s over the requests that have one */
    double ttft_max;        /**< the largest */
    int ttft_count;         /**< how many have one */
    PrefixSample samples[PREFIX_TIMELINE_CAP]; /**< the blocks over time, oldest first */
    int n_samples;          /**< samples kept */
    long stride;            /**< one step in stride is kept */
} PrefixCache;

/**
 * The mode named by `--prefix-cache`.
 * @param name  "off", "hash" or "radix"
 * @param mode  receives the mode
 * @return 0, or -1 for another name
 */
int prefix_cache_mode_parse(const char *name, PrefixCacheMode *mode);

/**
 * The name of a mode, as `--prefix-cache` spells it.
 * @param mode  the mode
 * @return "off", "hash" or "radix"
 */
const char *prefix_cache_mode_name(PrefixCacheMode mode);

/**
 * Refuses what chapter 4 offers and this chapter cannot do: `--preempt
 * swap` (chapter 4's paged_check() then refuses `--swap-space` alone).
 * `--max-num-batched-tokens` and `--max-num-seqs` work: a cached prefix is
 * skipped, and the positions after it are prefilled in chunks.
 * @param run  the run, its options parsed
 * @param err  receives the reason
 * @return 0, or -1 for an option this chapter refuses
 */
int prefix_check(const ServingRun *run, Err *err);

/**
 * Puts a cache above an open chapter-4 server: the server's PagedCache
 * hooks and an observer of the run (serving_add_observer(); the cache
 * keeps it and prefix_cache_close() takes it off). With PREFIX_CACHE_OFF only the books are
 * kept and the server behaves as chapter 4's.
 * @param s      the server (paged_open(), no step run yet)
 * @param run    its run
 * @param mode   which cache
 * @param cache  receives the cache (close it with prefix_cache_close(), also on failure)
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int prefix_cache_open(PagedServer *s, ServingRun *run, PrefixCacheMode mode, PrefixCache **cache, Err *err);

/**
 * Takes the cache off its server (hooks and observer) and frees it. Close
 * it before paged_close().
 * @param c  the cache, or NULL
 */
void prefix_cache_close(PrefixCache *c);

/**
 * Registers every full block that the step planned so far will have
 * filled, in every running request (generated tokens included): the cache
 * does it before each lookup and each release, so that a block is
 * findable from the moment its last position is scheduled.
 * @param c  the cache
 */
void prefix_cache_register_planned(PrefixCache *c);

/**
 * The setup lines of the program: chapter 4's (paged_print_setup()), then
 * the cache's.
 * @param c     the cache
 * @param name  the program's name
 * @param log   where they go
 */
void prefix_print_setup(const PrefixCache *c, const char *name, FILE *log);

/**
 * paged_open(), prefix_cache_open(), then paged_step() until every request
 * is done: a whole run for the tools and the tests. Both stay open for
 * their numbers.
 * @param run     the run
 * @param mode    which cache
 * @param server  receives the server (close with paged_close(), also on failure)
 * @param cache   receives the cache (close with prefix_cache_close() first, also on failure)
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int prefix_serve(ServingRun *run, PrefixCacheMode mode, PagedServer **server, PrefixCache **cache, Err *err);

/**
 * The share of the positions that admissions needed that were cached.
 * @param c  the cache
 * @return hit_tokens / query_tokens, or 0 before any admission
 */
double prefix_cache_hit_rate(const PrefixCache *c);

/**
 * Chapter 4's lines of the memory table, then chapter 5's: the cache's
 * hits and prefill positions computed, evictions, cached-but-free blocks
 * over time, KV cache usage with and without them, blocks shared at the
 * peak (serving_program_report() calls it).
 * @param f    stream
 * @param ctx  the PrefixCache
 * @param run  the finished run
 */
void prefix_report_table(FILE *f, void *ctx, const ServingRun *run);

/**
 * Chapter 4's JSON keys, then chapter 5's: prefix_cache, prefix_cache_hit_tokens,
 * prefix_cache_query_tokens, prefill_tokens_computed, prefix_cache_hit_rate,
 * prefix_cache_recomputed_tokens, prefix_cache_evictions,
 * prefix_cache_duplicates, cached_free_blocks_peak, blocks_shared_at_peak,
 * blocks_saved_at_peak, kv_cache_usage (peak and average, without and with
 * the cached free blocks), time_to_first_token_mean_s and _max_s,
 * cached_free_timeline.
 * @param j    the writer (inside the report object)
 * @param ctx  the PrefixCache
 * @param run  the finished run
 */
void prefix_report_json(JsonWriter *j, void *ctx, const ServingRun *run);

#endif
