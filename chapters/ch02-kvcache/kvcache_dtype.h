/**
 * @file kvcache_dtype.h
 * @brief Extension of chapter 2: the contiguous cache with smaller entries
 *        (`--kv-dtype f16|bf16|int8|fp8-e4m3|fp8-e5m2`).
 *
 * What it adds: the same cache as kvcache.h, under the same `--kv-alloc`
 * policies (the same capacities, the same doubling), whose rows hold K and
 * V in a smaller element type (common/cpu/kv_dtype.h), so that one token
 * costs
 *
 *     2 x n_layers x n_kv_heads x (head_dim x element bytes + scale bytes)
 *
 * instead of f32's 4 bytes an element: the source material's fp16
 * arithmetic, 2 bytes an element, on a real run. The layout is the core's
 * with rows of bytes:
 *
 *     keys   [n_layers][capacity][row_bytes]
 *     values [n_layers][capacity][row_bytes]
 *
 * where a row is one token's n_kv_heads heads in the stored type (and, for
 * int8, one f32 scale per head after the codes).
 *
 * The option: `--kv-dtype` (f32, the default, is the core: kvcache.c and
 * the lab in solutions/ch02/, unchanged). main() opens this cache instead
 * of the core's in one guarded call. The book: book/ch02-kvcache.md,
 * section "Smaller entries: --kv-dtype".
 *
 * It reuses the core's bookkeeping (a ::KvCache whose float buffers stay
 * NULL: policy, capacity, length, what growing cost) and its growth rule
 * (kv_cache_grow_target()). Attention reads each stored row in place,
 * with the core's arithmetic in the core's order (kv_attention_rows()),
 * so the tokens are those of an f32 cache holding the values the rows
 * hold.
 */
#ifndef KVLAB_CH02_KVCACHE_DTYPE_H
#define KVLAB_CH02_KVCACHE_DTYPE_H

#include <stddef.h>

#include "err.h"
#include "forward.h"
#include "generate.h"
#include "kv_dtype.h"
#include "kvcache.h"
#include "model.h"

/** Chapter 2's cache with its rows in a smaller element type. */
typedef struct {
    KvCache book;           /**< shape, policy, capacity, length, growth counters (its float buffers stay NULL) */
    KvRowFormat row;        /**< one stored row: n_kv_heads heads of head_dim values */
    size_t row_bytes;       /**< bytes of one stored row, scales included */
    unsigned char *storage; /**< [2][n_layers][capacity][row_bytes]: keys, then values, one allocation */
    unsigned char *keys;    /**< [n_layers][capacity][row_bytes], the first half of storage */
    unsigned char *values;  /**< [n_layers][capacity][row_bytes], the second half of storage */
} KvCacheTyped;

/**
 * Bytes of a typed cache of @p capacity positions (keys and values).
 * @param c         the cache (its row format)
 * @param capacity  positions
 * @return 2 x n_layers x capacity x row_bytes
 */
size_t kv_cache_typed_bytes(const KvCacheTyped *c, int capacity);

/**
 * Reserves the initial cache under @p policy (charged to kv in the ledger).
 * @param c         receives the cache
 * @param cfg       model shape
 * @param policy    max or grow
 * @param type      element type of the rows
 * @param n_prompt  prompt length in tokens, which the first step feeds at once
 * @param err       receives the reason on failure
 * @return 0 on success, -1 when out of memory, the prompt does not fit or
 *         the heads are too wide for the type (kv_row_format_init())
 */
int kv_cache_typed_init(KvCacheTyped *c, const ModelConfig *cfg, KvAllocPolicy policy, KvDtype type, int n_prompt,
                        Err *err);

/**
 * Frees the cache.
 * @param c  an initialised or zeroed cache
 */
void kv_cache_typed_free(KvCacheTyped *c);

/**
 * The seam's prepare, as kv_cache_prepare(): positions already stored are
 * all but the new ones; grows the cache first when the policy allows.
 * @param ctx       a KvCacheTyped
 * @param n_tokens  tokens in the sequence, including the newest
 * @param cached    receives the number of leading positions not to run
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kv_cache_typed_prepare(void *ctx, int n_tokens, int *cached, Err *err);

/**
 * Stores one token's key and value as rows (layer, e->pos), converted to
 * the cache's type (kv_row_store()).
 * @param ctx    a KvCacheTyped
 * @param layer  layer index
 * @param e      the token
 * @param k      [kv_dim] its key, RoPE applied
 * @param v      [kv_dim] its value
 */
void kv_cache_typed_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v);

/**
 * Causal attention of one query head over the stored positions 0..e->pos
 * of a layer, reading each stored row in place (kv_attention_rows()).
 * @param ctx     a KvCacheTyped
 * @param layer   layer index
 * @param e       the querying token
 * @param head    query head (reads KV head head / kv_mul)
 * @param q       [head_dim] query
 * @param out     [head_dim] receives the output
 * @param scores  [seq_len] scratch
 */
void kv_cache_typed_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                           float *scores);

/**
 * KV bytes reserved and used, at the stored size (scales included).
 * @param ctx       a KvCacheTyped
 * @param reserved  receives capacity x bytes per token
 * @param used      receives length x bytes per token
 */
void kv_cache_typed_usage(void *ctx, size_t *reserved, size_t *used);

/**
 * Builds the strategy the generation loop uses.
 * @param c  the cache
 * @return the strategy (seam, prepare, usage)
 */
SingleStreamKv kv_cache_typed_strategy(KvCacheTyped *c);

#endif
