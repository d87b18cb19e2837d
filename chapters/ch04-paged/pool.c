/* Chapter 4's pool for a run: its blocks' shape and number from the KV
 * budget, budgets the pool cannot be made from refused, and the requests
 * that could never fit it rejected (for one request, or for the requests
 * an extension runs together: ext/beam.c's groups of beams). */
#include <limits.h>

#include "mem.h"
#include "scheduler.h"

/* Positions of a request that ever need K/V: all but its last token, which
 * is sampled and never fed. */
static int cache_blocks_at_most(const Request *r, int block_size)
{
    return block_count_for_tokens(r->max_tokens - 1, block_size);
}

void paged_reject_unfitting(PagedServer *s, ServingRun *run, int width, const char *note)
{
    const BlockPool *p = &s->kv.pool;
    int usable = p->n_blocks - s->watermark_blocks;
    for (int i = 0; i < run->n_reqs; i++) {
        Request *r = &run->reqs[i];
        int need = cache_blocks_at_most(r, p->shape.block_size) * width;
        if (r->phase == REQ_WAITING && need > usable)
            serving_reject(run, r,
                           "it may need %d blocks of %d tokens (%d positions%s) but the whole pool has %d "
                           "(%d above the watermark)", need, p->shape.block_size, r->max_tokens - 1, note,
                           p->n_blocks, usable);
    }
}

/* The pool's element size follows the run's bytes per token, so that the
 * simulator can count an f16 cache; --kv-dtype int8 adds the scales stored
 * after each row, 4 B per KV head (ext/dtype.h stores the rows). */
static int pool_shape(const ServingRun *run, BlockShape *shape, Err *err)
{
    const ModelConfig *c = &run->model->cfg;
    int scale_bytes = c->n_kv_heads * (int)kv_dtype_scale_bytes(serving_kv_dtype(run)); /* per stored row */
    size_t per_elem_token = 2u * (size_t)c->n_layers * (size_t)model_kv_dim(c);
    size_t scales_per_token = 2u * (size_t)c->n_layers * (size_t)scale_bytes;
    size_t elem_part = run->kv_bytes_per_token > scales_per_token ? run->kv_bytes_per_token - scales_per_token : 0;
    *shape = (BlockShape){.block_size = run->opts->block_size, .n_layers = c->n_layers, .kv_dim = model_kv_dim(c),
                          .elem_bytes = (int)(elem_part / per_elem_token), .scale_bytes = scale_bytes};
    if ((size_t)shape->elem_bytes * per_elem_token + scales_per_token != run->kv_bytes_per_token)
        return err_set(err, "%zu B per token is not 2 x layers x kv_dim elements", run->kv_bytes_per_token);
    return 0;
}

/* Blocks kept free when admitting: --watermark percent of the pool. */
static int watermark_blocks(int n_blocks, int percent)
{
    return (int)((long)n_blocks * percent / 100);
}

/* How many blocks the budget makes, refusing a budget that holds none, more
 * than a block id can name, or (with K/V stored here) more than the
 * machine's memory. */
static int pool_blocks(const ServingRun *run, BlockShape *shape, int *n_blocks, Err *err)
{
    if (pool_shape(run, shape, err))
        return -1;
    size_t budget = serving_kv_budget(run), per_block = block_shape_bytes(shape);
    size_t n = budget / per_block, ram = mem_physical_bytes();
    char a[32], b[32];
    if (n < 1)
        return err_set(err, "KV budget %s holds no block: one block of %d tokens takes %s (%zu B per token)",
                       cli_format_bytes(a, sizeof a, (double)budget), shape->block_size,
                       cli_format_bytes(b, sizeof b, (double)per_block), run->kv_bytes_per_token);
    if (n > INT_MAX / BLOCK_SIZE_MAX)
        return err_set(err, "KV budget %s is %zu blocks, more than this pool can index",
                       cli_format_bytes(a, sizeof a, (double)budget), n);
    if (!run->no_kv_storage && ram > 0 && budget > ram)
        return err_set(err,
                       "--kv-budget %s is more than this machine's memory (%s); budgets at real-model scale are "
                       "for the capacity simulator (accounting only)",
                       cli_format_bytes(a, sizeof a, (double)budget), cli_format_bytes(b, sizeof b, (double)ram));
    *n_blocks = (int)n;
    return 0;
}

int paged_check_fits(const ServingRun *run, int width, const char *note, Err *err)
{
    BlockShape shape;
    int n_blocks;
    if (pool_blocks(run, &shape, &n_blocks, err))
        return -1;
    /* As chapter 3 does: a pool that no request fits would reject them all. */
    int usable = n_blocks - watermark_blocks(n_blocks, run->opts->watermark), smallest = -1;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        if (r->phase != REQ_WAITING)
            continue;
        if (cache_blocks_at_most(r, shape.block_size) * width <= usable)
            return 0;
        if (smallest < 0 || r->max_tokens < run->reqs[smallest].max_tokens)
            smallest = i;
    }
    if (smallest < 0)
        return 0;
    const Request *r = &run->reqs[smallest];
    char a[32];
    return err_set(err,
                   "--kv-budget %s holds no request: the smallest (request %d) may need %d blocks of %d tokens "
                   "(%d positions%s) but the whole pool has %d (%d above the watermark)",
                   cli_format_bytes(a, sizeof a, (double)serving_kv_budget(run)), r->spec->id,
                   cache_blocks_at_most(r, shape.block_size) * width, shape.block_size, r->max_tokens - 1, note,
                   n_blocks, usable);
}

int paged_open_pool(PagedServer *s, ServingRun *run, Err *err)
{
    BlockShape shape;
    int n_blocks;
    if (pool_blocks(run, &shape, &n_blocks, err))
        return -1;
    if (block_pool_init(&s->kv.pool, &shape, n_blocks, !run->no_kv_storage, err))
        return -1;
    s->watermark_blocks = watermark_blocks(n_blocks, run->opts->watermark);
    int capacity = block_count_for_tokens(run->model->cfg.seq_len, shape.block_size);
    return block_tables_init(&s->kv.tables, run->n_reqs, capacity, err);
}

