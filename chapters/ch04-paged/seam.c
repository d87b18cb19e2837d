/* Chapter 4's K/V seam: paged_store() writes a token's K and V into the
 * slot its block table names, paged_attend() hands one query head to
 * paged_attention() (the lab, solutions/ch04/paged_attention.c), whose
 * weighted sum of values takes a block at a time through
 * paged_accumulate_rows() (paged_kv.c); paged_server_seam() picks the seam
 * a step runs with: this one, or with --kv-dtype the typed pool's
 * (ext/dtype.c). */
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

KvSeam paged_seam(PagedKv *kv)
{
    return (KvSeam){.ctx = kv, .store = paged_store, .attend = paged_attend};
}

KvSeam paged_server_seam(PagedServer *s)
{
    if (s->hooks.seam) /* an extension stores the rows its own way (ext/dtype.c) */
        return s->hooks.seam(s);
    return paged_seam(&s->kv);
}
