/* Chapter 4 extension: --kv-dtype, the block pool with smaller entries
 * (paged_dtype.h says what it adds, the option and the book chapter). It
 * calls the core (the block tables, block_table_slot(), the pool's bytes)
 * and common/cpu/kv_dtype.h; the core calls it only through the guarded
 * calls paged_dtype.h lists. */
#include "ext/paged_dtype.h"

#include <string.h>

#include "mem.h"
#include "ops.h"

int paged_dtype_wanted(const ServingRun *run)
{
    return !run->no_kv_storage && !run->device && serving_kv_dtype(run) != KV_DTYPE_FP32;
}

/* The hook paged_server_seam() calls: the stored rows' seam. */
static KvSeam dtype_seam_of(PagedServer *s)
{
    return paged_dtype_seam(s->dtype);
}

int paged_dtype_open(PagedServer *s, const ServingRun *run, Err *err)
{
    const ModelConfig *c = &run->model->cfg;
    PagedDtype *d = mem_alloc(MEM_ACTIVATIONS, sizeof *d);
    if (!d)
        return err_set(err, "out of memory");
    s->dtype = d;
    s->hooks.close[s->hooks.n_close++] = paged_dtype_close; /* also when the rest of the opening fails */
    s->hooks.seam = dtype_seam_of;
    d->kv = &s->kv;
    if (kv_row_format_init(&d->row, serving_kv_dtype(run), c->n_kv_heads, model_head_dim(c), err))
        return -1;
    d->row_bytes = d->row.type == KV_DTYPE_INT8 ? paged_int8_row_bytes(d->row.n_heads, d->row.head_dim) /* the lab */
                                                : kv_row_bytes(&d->row);
    const BlockShape *shape = &s->kv.pool.shape;
    if (d->row_bytes != (size_t)shape->kv_dim * (size_t)shape->elem_bytes + (size_t)shape->scale_bytes)
        return err_set(err, "a %s row of %zu B does not match the pool's rows", kv_dtype_name(d->row.type),
                       d->row_bytes);
    return 0;
}

void paged_dtype_close(PagedServer *s)
{
    mem_free(s->dtype);
    s->dtype = NULL;
}

unsigned char *paged_dtype_row(const PagedDtype *d, int block, int layer, int which, int offset)
{
    const BlockPool *p = &d->kv->pool;
    size_t rows = (size_t)p->shape.block_size; /* one layer's K (or V): [block_size][row_bytes] */
    size_t index = ((size_t)layer * 2u + (size_t)which) * rows + (size_t)offset;
    return (unsigned char *)p->storage + (size_t)block * p->bytes_per_block + index * d->row_bytes;
}

/* One row stored: int8 by the lab, the other types by common/cpu/kv_dtype.c. */
static void store_row(const PagedDtype *d, unsigned char *row, const float *x)
{
    if (d->row.type == KV_DTYPE_INT8)
        paged_int8_store_row(row, x, d->row.n_heads, d->row.head_dim);
    else
        kv_row_store(row, x, &d->row);
}

/* One head of a stored row as f32, the same way round. */
static void load_head(const PagedDtype *d, float *dst, const unsigned char *row, int head)
{
    if (d->row.type == KV_DTYPE_INT8)
        paged_int8_load_head(dst, row, head, d->row.n_heads, d->row.head_dim);
    else
        kv_row_load_head(dst, row, head, &d->row);
}

void paged_dtype_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    PagedDtype *d = ctx;
    const BlockTable *t = &d->kv->tables.tables[e->seq];
    int offset, block = block_table_slot(t, e->pos, d->kv->pool.shape.block_size, &offset);
    store_row(d, paged_dtype_row(d, block, layer, 0, offset), k);
    store_row(d, paged_dtype_row(d, block, layer, 1, offset), v);
}

void paged_attention_typed(const PagedDtype *d, const BlockTable *t, int layer, int kv_head, const float *q,
                           int n_pos, float *out, float *scores)
{
    const int bs = d->kv->pool.shape.block_size, hd = d->row.head_dim;
    const int n_blocks = block_count_for_tokens(n_pos, bs);
    float head[PAGED_DTYPE_ROWS * KV_DTYPE_HEAD_DIM_MAX]; /* [PAGED_DTYPE_ROWS][hd]: a few rows' heads, never the cache */
    /* Scores in position order, a block at a time: each key row's head is
     * read where it lies, turned into f32, dotted (attention_score()). */
    for (int i = 0; i < n_blocks; i++) {
        const unsigned char *keys = paged_dtype_row(d, t->blocks[i], layer, 0, 0); /* [bs][row_bytes] */
        int rows = n_pos - i * bs < bs ? n_pos - i * bs : bs; /* the last block may be partly filled */
        for (int j = 0; j < rows; j++) {
            load_head(d, head, keys + (size_t)j * d->row_bytes, kv_head);
            scores[i * bs + j] = attention_score(q, head, hd);
        }
    }
    softmax(scores, n_pos);
    memset(out, 0, (size_t)hd * sizeof(float));
    /* The weighted sum of values in position order: a few value heads of
     * the block turned into f32, then added as attention_accumulate() row
     * by row would (paged_accumulate_rows(): the same bits). */
    for (int i = 0; i < n_blocks; i++) {
        const unsigned char *values = paged_dtype_row(d, t->blocks[i], layer, 1, 0); /* [bs][row_bytes] */
        int rows = n_pos - i * bs < bs ? n_pos - i * bs : bs;
        for (int j0 = 0; j0 < rows; j0 += PAGED_DTYPE_ROWS) {
            int n = rows - j0 < PAGED_DTYPE_ROWS ? rows - j0 : PAGED_DTYPE_ROWS;
            for (int j = 0; j < n; j++)
                load_head(d, head + (size_t)j * (size_t)hd, values + (size_t)(j0 + j) * d->row_bytes, kv_head);
            paged_accumulate_rows(out, scores + i * bs + j0, head, n, hd, hd);
        }
    }
}

static void paged_dtype_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                               float *scores)
{
    const PagedDtype *d = ctx;
    paged_attention_typed(d, &d->kv->tables.tables[e->seq], layer, head / model_kv_mul(&d->kv->cfg), q, e->pos + 1,
                          out, scores);
}

KvSeam paged_dtype_seam(PagedDtype *d)
{
    return (KvSeam){.ctx = d, .store = paged_dtype_store, .attend = paged_dtype_attend};
}

void paged_dtype_load_head(const PagedDtype *d, int block, int layer, int offset, int kv_head, float *k, float *v)
{
    load_head(d, k, paged_dtype_row(d, block, layer, 0, offset), kv_head);
    load_head(d, v, paged_dtype_row(d, block, layer, 1, offset), kv_head);
}
