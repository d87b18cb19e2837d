/**
 * @file paged_kv.h
 * @brief Chapter 4's K/V side: the paged store, and attention that reads
 *        it through the block tables (PagedAttention) behind the K/V seam.
 *
 * The forward pass stores each token's K and V at its slot (paged_store())
 * and attends through the table (paged_attend(), paged_attention()): no
 * gather into a contiguous copy, and the same arithmetic in the same order
 * as common/cpu/ops.h's reference. paged.h, the server, includes it; the
 * block pool and the tables are block_pool.h's.
 */
#ifndef KVLAB_CH04_PAGED_KV_H
#define KVLAB_CH04_PAGED_KV_H

#include "block_pool.h"
#include "forward.h"

/** The paged K/V store: the pool, and a block table per request. */
typedef struct {
    ModelConfig cfg;    /**< the model's shape (heads, head_dim) */
    BlockPool pool;     /**< every block of the KV budget */
    BlockTables tables; /**< one per request; BatchEntry.seq indexes it */
} PagedKv;

/**
 * Keeps one token's K and V of one layer at its slot: block
 * table[pos / block_size], row pos % block_size. The scheduler has already
 * made that block exist and be private.
 * @param ctx    a PagedKv
 * @param layer  layer index
 * @param e      the token (e->seq: the request)
 * @param k      [kv_dim] key
 * @param v      [kv_dim] value
 */
void paged_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v);

/**
 * out[i] += a[j] * rows[j][i] for j = 0, 1, ..., n_rows - 1 in turn: the
 * same additions in the same order, so the same bits, as
 * attention_accumulate() called once per row, but each running sum stays in
 * a register over all the rows of a block instead of going through memory
 * once per row (at small head_dim that round trip, not the arithmetic, is
 * what the weighted sum of values costs).
 * @param out       [head_dim] running sums, updated
 * @param a         [n_rows] attention weights
 * @param rows      [n_rows][stride] value rows; the head's slice starts at offset 0
 * @param n_rows    rows to add (0 or more)
 * @param stride    floats between consecutive rows
 * @param head_dim  width
 */
void paged_accumulate_rows(float *out, const float *a, const float *rows, int n_rows, int stride, int head_dim);

/**
 * PagedAttention of one query head over positions 0..n_pos-1 of a sequence,
 * reading keys and values straight out of the blocks its table names:
 * scores in position order, softmax, weighted sum of values in position
 * order, exactly as attention_reference() does over a contiguous cache.
 * @param pool      a pool with storage
 * @param t         the sequence's block table (covers n_pos positions)
 * @param layer     layer index
 * @param kv_head   the KV head this query head reads (head / kv_mul)
 * @param head_dim  width of a head
 * @param q         [head_dim] query
 * @param n_pos     positions attended (the query's position + 1)
 * @param out       [head_dim] receives the output
 * @param scores    [n_pos] scratch
 */
void paged_attention(const BlockPool *pool, const BlockTable *t, int layer, int kv_head, int head_dim,
                     const float *q, int n_pos, float *out, float *scores);

/**
 * The seam's attend: paged_attention() for query head @p head of entry @p e.
 * @param ctx     a PagedKv
 * @param layer   layer index
 * @param e       the querying token
 * @param head    query head
 * @param q       [head_dim] query
 * @param out     [head_dim] receives the output
 * @param scores  [seq_len] scratch
 */
void paged_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *scores);

/**
 * The K/V seam over a paged store.
 * @param kv  the store
 * @return store = paged_store, attend = paged_attend
 */
KvSeam paged_seam(PagedKv *kv);

#endif
