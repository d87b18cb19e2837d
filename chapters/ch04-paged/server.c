/* Chapter 4's server: setting up the pool, the block tables and the queue
 * for a run, and one step of the serving loop, written out in full. The
 * extensions its options ask for are opened, planned with and closed here,
 * each behind the guard paged.h lists. */
#include <limits.h>
#include <string.h>

#include "ext/beam.h"
#include "ext/budget.h"
#include "ext/paged_device.h"
#include "ext/paged_trace.h"
#include "mem.h"
#include "scheduler.h"

/* The step budget of the chapter's own schedule, which admits whole
 * prompts only: a prompt of the model's full length must fit in one step,
 * and 2048 tokens keep the matmuls busy when prompts are short. kvlab
 * takes max(seq_len, 2048) as its own default; vLLM's default has changed
 * over its versions (and with chunked prefill, ext/budget.c, the budget is
 * whatever --max-num-batched-tokens says). */
#define PAGED_MIN_BATCHED_TOKENS 2048

/* ------------------------------------------------------------ set-up */

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

void paged_print_setup(const PagedServer *s, const ServingRun *run, const char *name, FILE *log)
{
    const BlockPool *p = &s->kv.pool;
    const ModelConfig *c = &run->model->cfg;
    size_t budget = serving_kv_budget(run);
    char a[32], b[32], d[32];
    int full = block_count_for_tokens(c->seq_len, p->shape.block_size);
    const char *kv_bytes_note = p->storage ? "" : " (accounting only: no K/V bytes allocated)";
    if (run->device)
        kv_bytes_note = " (K/V bytes on the device)";
    fprintf(log, "%s: KV budget %s: %d blocks of %d tokens x %zu B = %s each (%ld tokens; %s left over)\n", name,
            cli_format_bytes(a, sizeof a, (double)budget), p->n_blocks, p->shape.block_size, paged_bytes_per_token(s),
            cli_format_bytes(b, sizeof b, (double)p->bytes_per_block), (long)p->n_blocks * p->shape.block_size,
            cli_format_bytes(d, sizeof d, (double)(budget - (size_t)p->n_blocks * p->bytes_per_block)));
    fprintf(log, "%s: max concurrency at the model's full length (%d tokens = %d blocks): %d; "
                 "watermark %d blocks; step budget %d tokens\n",
            name, c->seq_len, full, p->n_blocks / full, s->watermark_blocks, s->max_batched_tokens);
    fprintf(log, "%s: block tables %d x %d entries = %s of kv_metadata%s\n", name, s->kv.tables.count,
            s->kv.tables.capacity,
            cli_format_bytes(a, sizeof a, (double)block_tables_bytes(s->kv.tables.count, s->kv.tables.capacity)),
            kv_bytes_note);
    if (s->budget) /* ext/budget.c */
        budget_print_setup(log, s, run, name);
}

/* The pool's element size follows the run's bytes per token, so that the
 * simulator can count an f16 cache; stored K/V on the CPU are f32. */
static int pool_shape(const ServingRun *run, BlockShape *shape, Err *err)
{
    const ModelConfig *c = &run->model->cfg;
    size_t per_elem_token = 2u * (size_t)c->n_layers * (size_t)model_kv_dim(c);
    *shape = (BlockShape){.block_size = run->opts->block_size, .n_layers = c->n_layers, .kv_dim = model_kv_dim(c),
                          .elem_bytes = (int)(run->kv_bytes_per_token / per_elem_token)};
    if ((size_t)shape->elem_bytes * per_elem_token != run->kv_bytes_per_token)
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

int paged_check(const ServingRun *run, Err *err)
{
    if (budget_wanted(run->opts) && budget_check(run, err)) /* ext/budget.c */
        return -1;
    if (run->opts->beam_width > 0) /* --beam: a prompt's beams run together (ext/beam.c) */
        return beam_check(run, err);
    return paged_check_fits(run, 1, "", err);
}

static int open_pool(PagedServer *s, ServingRun *run, Err *err)
{
    BlockShape shape;
    int n_blocks;
    if (pool_blocks(run, &shape, &n_blocks, err))
        return -1;
    if (block_pool_init(&s->kv.pool, &shape, n_blocks, !run->no_kv_storage, err))
        return -1;
    int capacity = block_count_for_tokens(run->model->cfg.seq_len, shape.block_size);
    return block_tables_init(&s->kv.tables, run->n_reqs, capacity, err);
}

/* The queue and the measurement books are the scheduler's, not K/V
 * bookkeeping a server keeps per block: they are charged to activations. */
static int open_books(PagedServer *s, const ServingRun *run, Err *err)
{
    int n = s->kv.pool.n_blocks;
    s->running = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(int));
    s->block_filled = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(int));
    s->block_track = mem_alloc_array(MEM_ACTIVATIONS, (size_t)n, sizeof(KvReservationTrack));
    if (!s->running || !s->block_filled || !s->block_track)
        return err_set(err, "out of memory for the scheduler of %d requests and %d blocks", run->n_reqs, n);
    return 0;
}

int paged_open(ServingRun *run, PagedServer **server, FILE *log, Err *err)
{
    const CliOptions *o = run->opts;
    *server = NULL;
    if (o->n_samples > 1 && o->temperature <= 0.0f)
        return err_set(err, "--n %d needs --temperature > 0: greedy samples of one prompt would all be equal",
                       o->n_samples);
    PagedServer *s = mem_alloc(MEM_ACTIVATIONS, sizeof *s);
    if (!s)
        return err_set(err, "out of memory");
    *server = s;
    s->kv.cfg = run->model->cfg;
    if (open_pool(s, run, err) || open_books(s, run, err))
        return -1;
    s->watermark_blocks = watermark_blocks(s->kv.pool.n_blocks, o->watermark);
    int seq_len = run->model->cfg.seq_len;
    s->max_batched_tokens = seq_len > PAGED_MIN_BATCHED_TOKENS ? seq_len : PAGED_MIN_BATCHED_TOKENS;
    /* Decodes always run (one token per running request); admission keeps
     * decodes + prompts within the budget, so a step never exceeds the
     * larger of the two. */
    int max_step_tokens = s->max_batched_tokens > run->n_reqs ? s->max_batched_tokens : run->n_reqs;
    if (budget_wanted(o) && budget_open(s, run, &max_step_tokens, err)) /* ext/budget.c */
        return -1;
    if ((o->n_samples > 1 || o->beam_width > 0) && !(s->sharing = mem_alloc(MEM_ACTIVATIONS, sizeof *s->sharing)))
        return err_set(err, "out of memory");
    if (o->beam_width > 0 && beam_open(s, run, &max_step_tokens, err)) /* --beam (ext/beam.c) */
        return -1;
    paged_reject_unfitting(s, run, 1, "");
    if (log)
        paged_print_setup(s, run, "ch04-paged", log);
    if (serving_open_steps(run, max_step_tokens, run->n_reqs, err))
        return -1;
    if (run->device && paged_device_open(s, run, err)) /* --device cuda (ext/device.c) */
        return -1;
    if ((run->trace || o->show_tables >= 0) && paged_trace_open(s, run, log, err)) /* ext/trace.c */
        return -1;
    return 0;
}

void paged_close(PagedServer *s)
{
    if (!s)
        return;
    budget_close(s);
    beam_close(s->beam);
    for (int i = 0; i < s->kv.tables.count; i++)
        block_table_release(&s->kv.pool, &s->kv.tables.tables[i], NULL, NULL);
    block_tables_free(&s->kv.tables);
    block_pool_free(&s->kv.pool);
    mem_free(s->running);
    mem_free(s->block_filled);
    mem_free(s->block_track);
    mem_free(s->sharing);
    mem_free(s);
}

/* ------------------------------------------------------------ one step */

int paged_plan(PagedServer *s, ServingRun *run, Err *err)
{
    if (s->budget) /* --max-num-batched-tokens, --max-num-seqs, --preempt: its own scheduler (ext/budget.c) */
        return budget_schedule(s, run, err);
    return paged_schedule(s, run, err);
}

int paged_step(PagedServer *s, ServingRun *run, Err *err)
{
    if (s->beam) /* --beam: a scheduler of its own, over scheduler.h's phases (ext/beam.c) */
        return beam_step(s, run, err);
    if (!serving_step_begin(run)) /* requests that arrived join the queue; none left: done */
        return 0;
    /* Room for every running request's next token, then admissions
     * (scheduler.c): the step's batch, in run->entries. */
    if (paged_plan(s, run, err))
        return -1;
    /* The batch through the model. Attention reads K and V through the
     * block tables: the seam's attend is paged_attend(), which calls
     * paged_attention() (solutions/ch04/paged_attention.c). */
    KvSeam seam = paged_seam(&s->kv);
    if (serving_step_forward(run, &seam, err))
        return -1;
    serving_step_sample(run); /* every fed request takes its next token */
    paged_account(s, run);    /* blocks held, rows filled, the breakdown (account.c) */
    int n_finished = serving_step_finished(run);
    for (int i = 0; i < n_finished; i++) /* their blocks go back to the pool at once */
        paged_finished(s, run, &run->reqs[run->finished_now[i]]);
    serving_step_end(run);
    return 0;
}

int paged_serve(ServingRun *run, PagedServer **server, FILE *log, Err *err)
{
    if (paged_open(run, server, log, err))
        return -1;
    while (serving_unfinished(run))
        if (paged_step(*server, run, err))
            return -1;
    return 0;
}
