/* Chapter 4's K/V seam: paged_store() writes a token's K and V into the
 * slot its block table names, paged_attend() hands one query head to
 * paged_attention() (the lab, solutions/ch04/paged_attention.c), whose
 * weighted sum of values takes a block at a time through
 * paged_accumulate_rows(). */
#include <string.h>

#include "paged.h"

void paged_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    PagedKv *kv = ctx;
    const BlockTable *t = &kv->tables.tables[e->seq];
    int kv_dim = kv->pool.shape.kv_dim, offset;
    int block = block_table_slot(t, e->pos, kv->pool.shape.block_size, &offset);
    size_t row = (size_t)offset * (size_t)kv_dim; /* row `offset` of the block's [block_size][kv_dim] */
    memcpy(block_pool_keys(&kv->pool, block, layer) + row, k, (size_t)kv_dim * sizeof(float));
    memcpy(block_pool_values(&kv->pool, block, layer) + row, v, (size_t)kv_dim * sizeof(float));
}

void paged_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *scores)
{
    const PagedKv *kv = ctx;
    paged_attention(&kv->pool, &kv->tables.tables[e->seq], layer, head / model_kv_mul(&kv->cfg),
                    model_head_dim(&kv->cfg), q, e->pos + 1, out, scores);
}

/* Eight running sums at a time in one vector register (GCC's vector
 * extension; -ffp-contract=off keeps every a * v and + apart, as in the
 * scalar loop), four registers side by side so that wide heads keep four
 * independent chains of additions in flight; the rest of the head one
 * float at a time. Every out[i] gets its terms in row order either way. */
#define ROW_LANES 8

void paged_accumulate_rows(float *out, const float *a, const float *rows, int n_rows, int stride, int head_dim)
{
    int i = 0;
#if defined(__GNUC__)
    typedef float Lanes __attribute__((vector_size(ROW_LANES * sizeof(float))));
    for (; i + 4 * ROW_LANES <= head_dim; i += 4 * ROW_LANES) {
        Lanes acc[4], v;
        memcpy(acc, out + i, sizeof acc);
        for (int j = 0; j < n_rows; j++)
            for (int k = 0; k < 4; k++) {
                memcpy(&v, rows + (size_t)j * (size_t)stride + i + k * ROW_LANES, sizeof v);
                acc[k] += a[j] * v;
            }
        memcpy(out + i, acc, sizeof acc);
    }
    for (; i + ROW_LANES <= head_dim; i += ROW_LANES) {
        Lanes acc, v;
        memcpy(&acc, out + i, sizeof acc);
        for (int j = 0; j < n_rows; j++) {
            memcpy(&v, rows + (size_t)j * (size_t)stride + i, sizeof v);
            acc += a[j] * v;
        }
        memcpy(out + i, &acc, sizeof acc);
    }
#endif
    for (; i < head_dim; i++) {
        float acc = out[i];
        for (int j = 0; j < n_rows; j++)
            acc += a[j] * rows[(size_t)j * (size_t)stride + i];
        out[i] = acc;
    }
}

KvSeam paged_seam(PagedKv *kv)
{
    return (KvSeam){.ctx = kv, .store = paged_store, .attend = paged_attend};
}
