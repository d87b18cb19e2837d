/**
 * @file kvcache.h
 * @brief Chapter 2: one contiguous KV cache per request.
 *
 * Chapter 1 recomputed the keys and values of the whole sequence at every
 * step. But the K and V of a token depend only on that token and the ones
 * before it, so they never change once computed: keep them. Each step then
 * runs only the newest token through the model, appends its K and V to the
 * cache, and lets its query attend over everything cached. A step costs
 * O(t) attention work and a constant amount of matmul work, instead of
 * chapter 1's O(t) matmuls and O(t^2) attention.
 *
 * The cache is one buffer per request, laid out so that a layer's keys are
 * contiguous rows:
 *
 *     keys   [n_layers][capacity][kv_dim]
 *     values [n_layers][capacity][kv_dim]
 *
 * Row (layer, pos) holds the key of position pos in that layer, all KV heads
 * back to back (kv_dim = n_kv_heads * head_dim). Its size is the course's
 * formula: 2 (K and V) x n_layers x n_kv_heads x head_dim x capacity x 4 B.
 *
 * How much to reserve is the policy (`--kv-alloc`):
 *
 * - **max** reserves the model's seq_len positions up front. Simple and
 *   never reallocates, but a short request leaves most of it unused.
 * - **grow** starts small (16 positions, or the prompt rounded up to a
 *   power of two) and doubles when full: allocate the new buffer, copy the
 *   cached rows, free the old one. Little is wasted, but each doubling
 *   copies everything cached so far, and while it copies the old and the
 *   new buffer both exist: the peak is 1.5 times the new size.
 *
 * Reallocation happens in kv_cache_prepare(), between steps, never inside
 * the forward pass, whose store and attend only ever touch rows that exist.
 *
 * ## Where each idea is
 *
 * | idea | file | function |
 * |---|---|---|
 * | the program: open, generate, report the cache | chapters/ch02-kvcache/main.c | main() |
 * | the loop: plan a step, forward, sample, print | common/serving/generate.c | generate() |
 * | positions already cached: all but the newest (lab) | solutions/ch02/kv_cache_prepare.c | kv_cache_prepare() |
 * | append a token's K/V at row (layer, pos) (lab) | solutions/ch02/kv_cache_store.c | kv_cache_store() |
 * | attention over the cached positions (lab) | solutions/ch02/kv_cache_attend.c | kv_cache_attend() |
 * | move a full cache into one twice as large (lab) | solutions/ch02/kv_cache_grow.c | kv_cache_grow() |
 * | the buffer and its size | chapters/ch02-kvcache/kvcache.c | kv_cache_init(), kv_cache_free() |
 * | when it doubles: room before a step | chapters/ch02-kvcache/room.c | kv_cache_make_room() |
 * | the same cache on the device | chapters/ch02-kvcache/device.c | kv_cache_device_open() |
 *
 * Extension (`--kv-dtype`, not the lab): the same cache storing its rows
 * in a smaller element type, chapters/ch02-kvcache/kvcache_dtype.h.
 */
#ifndef KVLAB_CH02_KVCACHE_H
#define KVLAB_CH02_KVCACHE_H

#include <stddef.h>

#include "cli.h"
#include "device_kv.h"
#include "err.h"
#include "forward.h"
#include "generate.h"
#include "model.h"

/** How much K/V storage a request reserves (`--kv-alloc`). */
typedef enum {
    KV_ALLOC_MAX,  /**< the model's seq_len, up front */
    KV_ALLOC_GROW, /**< start small, double when full */
} KvAllocPolicy;

/** Smallest capacity the grow policy starts with, in positions. */
#define KV_CACHE_GROW_MIN 16

/** One request's K/V cache and what keeping it has cost. */
typedef struct {
    ModelConfig cfg;       /**< the model's shape */
    KvAllocPolicy policy;  /**< max or grow */
    int kv_dim;            /**< floats per row: n_kv_heads * head_dim */
    int capacity;          /**< positions reserved per layer */
    int length;            /**< positions 0..length-1 hold K/V (after the current step) */
    float *storage;        /**< [2][n_layers][capacity][kv_dim]: keys, then values, one allocation */
    float *keys;           /**< [n_layers][capacity][kv_dim], the first half of storage */
    float *values;         /**< [n_layers][capacity][kv_dim], the second half of storage */
    int initial_capacity;  /**< capacity chosen by kv_cache_init() */
    int reallocations;     /**< times the grow policy moved the cache */
    size_t bytes_copied;   /**< bytes those moves copied */
    size_t peak_held_bytes; /**< most KV bytes allocated at one moment (old + new during a move) */
} KvCache;

/**
 * The capacity a policy starts with: seq_len for max; for grow, the prompt
 * rounded up to a power of two, at least ::KV_CACHE_GROW_MIN, at most
 * seq_len.
 * @param policy    max or grow
 * @param n_prompt  prompt length in tokens (with BOS)
 * @param seq_len   the model's longest sequence
 * @return positions to reserve
 */
int kv_cache_initial_capacity(KvAllocPolicy policy, int n_prompt, int seq_len);

/**
 * Bytes of a cache of @p capacity positions (keys and values together).
 * @param cfg       model shape
 * @param capacity  positions
 * @return 2 x n_layers x capacity x kv_dim x sizeof(float)
 */
static inline size_t kv_cache_bytes(const ModelConfig *cfg, int capacity)
{
    /* Inline, like kv_cache_attach(): the lab's kv_cache_grow() uses both, and kvcache.c calls the lab (no call cycle). */
    return 2 * (size_t)cfg->n_layers * (size_t)capacity * (size_t)model_kv_dim(cfg) * sizeof(float);
}

/**
 * Reserves the initial cache (charged to kv in the ledger).
 * @param kv        receives the cache
 * @param cfg       model shape
 * @param policy    max or grow
 * @param n_prompt  prompt length in tokens, which the first step feeds at once
 * @param err       receives the reason on failure
 * @return 0 on success, -1 when out of memory or the prompt does not fit
 */
int kv_cache_init(KvCache *kv, const ModelConfig *cfg, KvAllocPolicy policy, int n_prompt, Err *err);

/**
 * Frees the cache.
 * @param kv  an initialised or zeroed cache
 */
void kv_cache_free(KvCache *kv);

/**
 * Points keys and values at the two halves of one allocation of
 * @p capacity positions and records the capacity (kv_cache_init() and
 * kv_cache_grow() use it).
 * @param kv        the cache
 * @param storage   [2][n_layers][capacity][kv_dim] floats
 * @param capacity  positions the allocation holds
 */
static inline void kv_cache_attach(KvCache *kv, float *storage, int capacity)
{
    size_t half = (size_t)kv->cfg.n_layers * (size_t)capacity * (size_t)kv->kv_dim;
    kv->storage = storage;
    kv->keys = storage;          /* [n_layers][capacity][kv_dim] */
    kv->values = storage + half; /* [n_layers][capacity][kv_dim] */
    kv->capacity = capacity;
}

/**
 * The capacity the grow policy moves to so that @p n_tokens positions fit:
 * the capacity doubled until they do, capped at seq_len. Refuses what
 * cannot fit: more than seq_len positions, or any growth under max.
 * @param kv        the cache
 * @param n_tokens  positions the step needs
 * @param target    receives the new capacity
 * @param err       receives the reason on failure
 * @return 0 on success, -1 when the positions cannot fit
 */
int kv_cache_grow_target(const KvCache *kv, int n_tokens, int *target, Err *err);

/**
 * Makes room for @p n_tokens positions before a step: the grow policy
 * doubles the capacity until they fit (one kv_cache_grow(), however many
 * doublings, capped at seq_len); max fails, since it never grows.
 * @param kv        the cache
 * @param n_tokens  positions the step needs
 * @param err       receives the reason on failure
 * @return 0 on success, -1 when the positions cannot fit
 */
int kv_cache_make_room(KvCache *kv, int n_tokens, Err *err);

/**
 * Moves the cache into a new buffer of @p new_capacity positions: allocate,
 * copy rows 0..length-1 of every layer's keys and values, free the old
 * buffer. Counts the reallocation, the bytes copied and the peak of KV
 * bytes held while both buffers exist.
 * @param kv            the cache
 * @param new_capacity  positions, more than kv->capacity and at most seq_len
 * @param err           receives the reason on failure
 * @return 0 on success, -1 when out of memory (the old cache is intact)
 */
int kv_cache_grow(KvCache *kv, int new_capacity, Err *err);

/**
 * Chapter 2's answer to "how many positions already have K/V?": all those
 * stored by earlier steps, which is all but the newest token after the
 * prompt. Makes room for @p n_tokens positions first (grow doubles the
 * capacity until they fit; max fails if they do not).
 * @param ctx       a KvCache
 * @param n_tokens  tokens in the sequence, including the newest
 * @param cached    receives the number of leading positions not to run
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kv_cache_prepare(void *ctx, int n_tokens, int *cached, Err *err);

/**
 * Appends one token's key and value: row (layer, e->pos) of keys and values.
 * @param ctx    a KvCache
 * @param layer  layer index
 * @param e      the token
 * @param k      [kv_dim] its key, RoPE applied
 * @param v      [kv_dim] its value
 */
void kv_cache_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v);

/**
 * Causal attention of one query head over the cached positions 0..e->pos
 * of a layer: scores q . k_t / sqrt(head_dim), softmax, weighted sum of
 * v_t. Query head h reads KV head h / kv_mul. Same arithmetic, in the same
 * order, as chapter 1, so the tokens come out identical.
 * @param ctx     a KvCache
 * @param layer   layer index
 * @param e       the querying token
 * @param head    query head
 * @param q       [head_dim] query
 * @param out     [head_dim] receives the output
 * @param scores  [seq_len] scratch
 */
void kv_cache_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                     float *scores);

/**
 * KV bytes reserved (capacity) and used (positions holding K/V).
 * @param ctx       a KvCache
 * @param reserved  receives capacity x bytes per token
 * @param used      receives length x bytes per token
 */
void kv_cache_usage(void *ctx, size_t *reserved, size_t *used);

/**
 * Builds the strategy the generation loop uses.
 * @param kv  the cache
 * @return the strategy (seam, prepare, usage)
 */
SingleStreamKv kv_cache_strategy(KvCache *kv);

/**
 * `--device cuda`: the same cache under the same policy on the device
 * (device_kv_open_contiguous(), a ::DeviceKvOpenFn): seq_len positions
 * for --kv-alloc max, or the prompt rounded up to a power of two (at least
 * 16), doubled when full, for grow. The first step feeds the prompt, the
 * others one token.
 * @param kv        receives the store
 * @param dev       the device
 * @param cfg       model shape
 * @param kv_type   element type of K/V
 * @param opts      the options (--kv-alloc)
 * @param n_prompt  prompt length
 * @param max_step  receives n_prompt
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kv_cache_device_open(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                         const CliOptions *opts, int n_prompt, int *max_step, Err *err);

/**
 * Name of a policy, as written on the command line.
 * @param policy  max or grow
 * @return "max" or "grow"
 */
const char *kv_alloc_policy_name(KvAllocPolicy policy);

/**
 * Parses a policy name.
 * @param name    "max" or "grow"
 * @param policy  receives the policy
 * @param err     receives the reason on failure
 * @return 0 on success, -1 for an unknown name
 */
int kv_alloc_policy_parse(const char *name, KvAllocPolicy *policy, Err *err);

/**
 * This chapter's device store (chapters/ch02-kvcache/device.c): one
 * request's contiguous cache [layer][capacity][kv_dim].
 * With @p grow = 0 the capacity is seq_len from the start (--kv-alloc max);
 * with grow = 1 it starts at the prompt length rounded up to a power of two
 * (at least 16) and doubles when full, copying the stored rows, up to
 * seq_len (--kv-alloc grow). prepare() answers how many positions are
 * stored.
 * @param kv          receives the store
 * @param dev         the device
 * @param cfg         model shape
 * @param t           element type of K/V
 * @param grow        0: reserve seq_len; 1: grow by doubling
 * @param n_prompt    prompt length (sizes the first reservation of grow)
 * @param max_tokens  most entries of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_open_contiguous(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int grow,
                              int n_prompt, int max_tokens, Err *err);

/** What growing a contiguous cache cost (chapter 2's table). */
typedef struct {
    int capacity;           /**< positions reserved now */
    int initial_capacity;   /**< positions reserved when the store was opened */
    int length;             /**< positions 0..length-1 hold K/V */
    int reallocations;      /**< times the cache moved to a larger one */
    size_t bytes_copied;    /**< K/V bytes copied by those moves */
    size_t peak_held_bytes; /**< most K/V bytes allocated at one moment (old + new during a move) */
} DeviceContiguousStats;

/**
 * Reports the growth of a contiguous store.
 * @param kv     a store from device_kv_open_contiguous()
 * @param stats  receives the numbers
 */
void device_kv_contiguous_stats(const DeviceKv *kv, DeviceContiguousStats *stats);

#endif
