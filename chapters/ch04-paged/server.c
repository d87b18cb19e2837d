/* Chapter 4's server: setting up the pool, the block tables and the queue
 * for a run, and one step of the serving loop, written out in full. The
 * extensions its options ask for are opened here, each by its one guarded
 * call (paged.h lists them); after that the core reaches them only
 * through the hooks they filled in (PagedServer.hooks). */
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

/* ------------------------------------------------------------ set-up (the pool itself: pool.c) */

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
    if (s->hooks.print_setup) /* an extension's lines (ext/budget.c) */
        s->hooks.print_setup(log, s, run, name);
}

int paged_check(const ServingRun *run, Err *err)
{
    if (budget_wanted(run->opts) && budget_check(run, err)) /* ext/budget.c */
        return -1;
    if (run->opts->beam_width > 0) /* --beam: a prompt's beams run together (ext/beam.c) */
        return beam_check(run, err);
    return paged_check_fits(run, 1, "", err);
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
    if (paged_open_pool(s, run, err) || open_books(s, run, err))
        return -1;
    int seq_len = run->model->cfg.seq_len;
    s->max_batched_tokens = seq_len > PAGED_MIN_BATCHED_TOKENS ? seq_len : PAGED_MIN_BATCHED_TOKENS;
    /* Decodes always run (one token per running request); admission keeps
     * decodes + prompts within the budget, so a step never exceeds the
     * larger of the two. */
    int max_step_tokens = s->max_batched_tokens > run->n_reqs ? s->max_batched_tokens : run->n_reqs;
    if (budget_wanted(o) && budget_open(s, run, &max_step_tokens, err)) /* ext/budget.c */
        return -1;
    if (o->n_samples > 1 && !(s->sharing = mem_alloc(MEM_ACTIVATIONS, sizeof *s->sharing))) /* --n: forks share blocks */
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
    for (int i = 0; i < s->hooks.n_close; i++) /* the extensions' own state */
        s->hooks.close[i](s);
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
    if (s->hooks.plan) /* a scheduler of its own over scheduler.h's phases (ext/budget.c) */
        return s->hooks.plan(s, run, err);
    return paged_schedule(s, run, err);
}

int paged_step(PagedServer *s, ServingRun *run, Err *err)
{
    if (s->hooks.step) /* a step of its own over scheduler.h's phases (ext/beam.c) */
        return s->hooks.step(s, run, err);
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
