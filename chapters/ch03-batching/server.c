/* Chapter 3's server: setting up the arena for a run, reading
 * --batching, refusing impossible budgets, one step of the serving loop
 * written out in full, the accounting after each step, and the chapter's
 * lines of the memory table. The scheduling is in batching.c, whom to admit
 * in the lab (solutions/ch03/batching_admit.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "batching.h"
#include "ext/batching_device.h"
#include "ext/batching_trace.h"
#include "mem.h"

/* ------------------------------------------------------------ checks */

/* Bytes of the largest region request r can ever hold (a buddy block
 * rounds it up to a power of two of positions). */
static size_t largest_bytes(ReservePolicy policy, ArenaKind arena, const ServingRun *run, const Request *r)
{
    int tokens = reserve_largest_tokens(policy, r->max_tokens, run->model->cfg.seq_len);
    return (size_t)arena_region_slots(arena, tokens) * run->kv_bytes_per_token;
}

/* The largest region a budget can ever place: all of it with first fit,
 * its largest top-level block with the buddy allocator. */
static size_t largest_placeable(ArenaKind arena, size_t budget, size_t bytes_per_token)
{
    return arena_ops(arena)->largest_placeable(budget, bytes_per_token);
}

int batching_check(const ServingRun *run, Err *err)
{
    ReservePolicy policy;
    BatchingMode mode;
    ArenaKind arena = ARENA_FIRST_FIT;
    if (reserve_policy_parse(run->opts->reserve, &policy, err) ||
        batching_mode_parse(run->opts->batching, &mode, err) || arena_kind_parse(run->opts->arena, &arena, err))
        return -1;
    size_t budget = serving_kv_budget(run), smallest = 0;
    int smallest_id = -1;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        if (r->phase == REQ_DONE)
            continue;
        size_t bytes = largest_bytes(policy, arena, run, r);
        if (smallest_id < 0 || bytes < smallest) {
            smallest = bytes;
            smallest_id = r->spec->id;
        }
    }
    char a[32], b[32], c[32];
    const ArenaOps *ops = arena_ops(arena); /* its own refusal first (the buddy extension's) */
    if (ops->refuse && smallest_id >= 0 && ops->refuse(run, policy, smallest, smallest_id, err))
        return -1;
    if (smallest_id >= 0 && smallest > budget)
        return err_set(err,
                       "--kv-budget %s holds no request: the smallest reservation under --reserve %s is %zu "
                       "positions x %zu B = %s (request %d)",
                       cli_format_bytes(a, sizeof a, (double)budget), reserve_policy_name(policy),
                       smallest / run->kv_bytes_per_token, run->kv_bytes_per_token,
                       cli_format_bytes(b, sizeof b, (double)smallest), smallest_id);
    size_t ram = mem_physical_bytes();
    if (!run->no_kv_storage && ram > 0 && budget > ram)
        return err_set(err,
                       "--kv-budget %s is more than this machine's memory (%s); budgets at real-model scale are "
                       "for the capacity simulator (accounting only)",
                       cli_format_bytes(a, sizeof a, (double)budget), cli_format_bytes(c, sizeof c, (double)ram));
    return 0;
}

/* ------------------------------------------------------------ open/close */

void batching_close(BatchingState *b)
{
    if (!b)
        return;
    kv_arena_free(&b->arena);
    if (arena_ops(b->arena_kind)->close) /* the books an allocator keeps of its own */
        arena_ops(b->arena_kind)->close(b);
    mem_free(b->storage);
    mem_free(b->regions);
    mem_free(b->batch);
    mem_free(b);
}

/* Requests whose largest region exceeds the whole budget can never finish. */
static void reject_oversized(BatchingState *b, ServingRun *run)
{
    char need[32], budget[32];
    for (int i = 0; i < run->n_reqs; i++) {
        Request *r = &run->reqs[i];
        size_t bytes = largest_bytes(b->policy, b->arena_kind, run, r);
        size_t room = largest_placeable(b->arena_kind, b->arena.capacity, b->bytes_per_token);
        if (r->phase == REQ_DONE || bytes <= room)
            continue;
        if (arena_ops(b->arena_kind)->reject) /* in the allocator's own words */
            arena_ops(b->arena_kind)->reject(b, run, r, bytes, room);
        else
            serving_reject(run, r, "its largest reservation under --reserve %s is %zu positions (%s) but the whole KV "
                           "budget is %s", reserve_policy_name(b->policy), bytes / b->bytes_per_token,
                           cli_format_bytes(need, sizeof need, (double)bytes),
                           cli_format_bytes(budget, sizeof budget, (double)b->arena.capacity));
        if (b->log)
            fprintf(b->log, "ch03-batching: request %d rejected: %s\n", r->spec->id, r->note);
    }
}

static int descending(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a < b) - (a > b);
}

/* The most tokens one step can feed: every prompt of the largest possible
 * batch at once, and never more positions than the arena holds. Both bound
 * a continuous step too, where prompts and decodes mix: it feeds at most
 * max_batch running requests, each at most max_tokens positions, and every
 * fed position is in its request's region (see batching.h). */
static int step_capacity(const BatchingState *b, const ServingRun *run, Err *err)
{
    int *lengths = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(int));
    if (!lengths)
        return err_set(err, "out of memory for %d request lengths", run->n_reqs);
    int n = 0;
    for (int i = 0; i < run->n_reqs; i++)
        if (run->reqs[i].phase != REQ_DONE)
            lengths[n++] = run->reqs[i].max_tokens;
    qsort(lengths, (size_t)n, sizeof(int), descending);
    size_t sum = 0;
    for (int i = 0; i < n && i < b->max_batch; i++)
        sum += (size_t)lengths[i];
    mem_free(lengths);
    size_t positions = b->arena.capacity / b->bytes_per_token;
    if (sum > positions)
        sum = positions;
    if (sum > (size_t)INT32_MAX)
        sum = (size_t)INT32_MAX;
    return sum > 0 ? (int)sum : 1;
}

static void describe_setup(const BatchingState *b, const ServingRun *run, FILE *log)
{
    if (!log)
        return;
    const ModelConfig *c = &b->cfg;
    char a[32], m[32];
    fprintf(log, "ch03-batching: KV budget %s = %zu positions of %zu B; --batching %s, --reserve %s, --max-batch "
            "%d%s%s\n", cli_format_bytes(a, sizeof a, (double)b->arena.capacity), b->arena.capacity / b->bytes_per_token,
            b->bytes_per_token, batching_mode_name(b->mode), reserve_policy_name(b->policy), run->opts->max_batch,
            b->arena_kind == ARENA_BUDDY ? ", --arena buddy" : "",
            b->storage ? "" : run->device ? " (K/V bytes on the device)" : " (accounting only: no K/V bytes)");
    int lo = c->seq_len, hi = 0, n = 0;
    double sum = 0;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        if (r->phase == REQ_DONE)
            continue;
        int t = reserve_initial_tokens(b->policy, r->n_tokens, r->max_tokens, c->seq_len);
        lo = t < lo ? t : lo;
        hi = t > hi ? t : hi;
        sum += t;
        n++;
    }
    if (n == 0)
        return;
    double mean_bytes = sum / n * (double)b->bytes_per_token;
    const char *what = b->policy == RESERVE_GROW ? "first regions" : "reservations";
    if (lo == hi)
        fprintf(log, "ch03-batching: %s of %d positions (%s): the budget holds %.1f of them\n", what, lo,
                cli_format_bytes(m, sizeof m, mean_bytes), (double)b->arena.capacity / mean_bytes);
    else
        fprintf(log, "ch03-batching: %s of %d to %d positions, %.1f on average (%s): the budget holds %.1f of the "
                "average\n", what, lo, hi, sum / n, cli_format_bytes(m, sizeof m, mean_bytes),
                (double)b->arena.capacity / mean_bytes);
    if (b->policy == RESERVE_GROW)
        fprintf(log, "ch03-batching: a full region doubles by moving to a larger hole (first fit; its K/V are "
                "copied)\n");
}

int batching_open(ServingRun *run, BatchingState **state, FILE *log, Err *err)
{
    *state = NULL;
    if (batching_check(run, err))
        return -1;
    BatchingState *b = mem_alloc(MEM_KV_METADATA, sizeof *b);
    if (!b)
        return err_set(err, "out of memory for the batching state");
    *state = b;
    reserve_policy_parse(run->opts->reserve, &b->policy, err);
    batching_mode_parse(run->opts->batching, &b->mode, err);
    arena_kind_parse(run->opts->arena, &b->arena_kind, err);
    b->told_head = -1;
    b->first_waiting = 0;
    b->cfg = run->model->cfg;
    b->bytes_per_token = run->kv_bytes_per_token;
    b->log = log;
    b->max_batch = run->opts->max_batch < run->n_reqs ? run->opts->max_batch : run->n_reqs;
    if (b->max_batch < 1)
        b->max_batch = 1;
    size_t budget = serving_kv_budget(run);
    /* Live regions: a full batch, plus the new region of a move in progress. */
    if (kv_arena_init(&b->arena, budget, b->max_batch + 1, err))
        return -1;
    const ArenaOps *arena = arena_ops(b->arena_kind); /* first fit, or --arena buddy (ext/buddy_arena.c) */
    if (arena->open && arena->open(b, budget, err)) /* books of its own beside the arena */
        return -1;
    b->regions = mem_alloc_array(MEM_KV_METADATA, (size_t)run->n_reqs, sizeof(KvRegion));
    b->batch = mem_alloc_array(MEM_KV_METADATA, (size_t)b->max_batch, sizeof(int));
    if (!b->regions || !b->batch)
        return err_set(err, "out of memory for %d regions", run->n_reqs);
    if (!run->no_kv_storage) {
        if (b->bytes_per_token != model_kv_bytes_per_token(&b->cfg, sizeof(float)))
            return err_set(err, "the K/V storage holds floats; %zu bytes per position is not that",
                           b->bytes_per_token);
        b->storage = mem_alloc(MEM_KV, budget);
        if (!b->storage) {
            char a[32];
            return err_set(err, "out of memory for a KV arena of %s", cli_format_bytes(a, sizeof a, (double)budget));
        }
    }
    describe_setup(b, run, log);
    reject_oversized(b, run);
    int max_step_tokens = step_capacity(b, run, err);
    if (max_step_tokens < 0 || serving_open_steps(run, max_step_tokens, b->max_batch, err))
        return -1;
    if (run->device && batching_device_open(b, run, err)) /* --device cuda (ext/device.c) */
        return -1;
    if ((run->trace || run->opts->show_tables >= 0) && batching_trace_open(b, run, log, err)) /* ext/trace.c */
        return -1;
    return 0;
}

KvSeam batching_seam(BatchingState *b)
{
    return (KvSeam){.ctx = b, .store = batching_store, .attend = batching_attend};
}

/* ------------------------------------------------------------ one step */

int batching_step(BatchingState *b, ServingRun *run, Err *err)
{
    if (!serving_step_begin(run)) /* requests that arrived join the queue; none left: done */
        return 0;
    /* Room for the running requests, admissions (static: only when a batch
     * starts; continuous: every step), and the step's batch in run->entries
     * (batching.c). */
    if (batching_schedule(b, run, err))
        return -1;
    /* --device cuda: the device learns where every region is now (ext/device.c). */
    if (run->device && batching_device_sync(b, run, err))
        return -1;
    /* The batch through the model; each request's K and V are read from
     * its own region (batching_attend()). */
    KvSeam seam = batching_seam(b);
    if (serving_step_forward(run, &seam, err))
        return -1;
    serving_step_sample(run); /* every fed request takes its next token */
    batching_account(b, run); /* where the arena's bytes went this step */
    int n_finished = serving_step_finished(run);
    for (int i = 0; i < n_finished; i++) /* static: the batch may end; continuous: the region goes at once */
        batching_finished(b, run, &run->reqs[run->finished_now[i]]);
    serving_step_end(run);
    return 0;
}

int batching_serve(ServingRun *run, BatchingState **state, FILE *log, Err *err)
{
    if (batching_open(run, state, log, err))
        return -1;
    while (serving_unfinished(run))
        if (batching_step(*state, run, err))
            return -1;
    return 0;
}

/* ------------------------------------------------------------ accounting */

void batching_account(BatchingState *b, ServingRun *run)
{
    serving_account_holders(run, b->batch, b->n_batch); /* only the batch's members hold a region */
    run->breakdown.external_fragmentation += (double)b->step_external;
    b->stats.steps++;
    b->stats.free_fraction_sum += (double)batching_free_bytes(b) / (double)b->arena.capacity;
    b->stats.reserved_sum += (double)(b->arena.capacity - batching_free_bytes(b));
    /* Held by finished: from the step after the one a request finished in
     * (in that step it still computed its last token), until it lets go. */
    for (int k = 0; k < b->n_batch; k++) {
        const Request *r = &run->reqs[b->batch[k]];
        if (r->phase == REQ_DONE && r->finished_step < run->step)
            b->stats.finished_held_sum += (double)b->regions[r->index].tokens * (double)b->bytes_per_token;
    }
    if (batching_free_pieces(b) > b->stats.max_holes)
        b->stats.max_holes = batching_free_pieces(b);
}

static double safe_div(double a, double b) { return b > 0 ? a / b : 0.0; }

void batching_report_table(FILE *f, void *ctx, const ServingRun *run)
{
    const BatchingState *b = ctx;
    const BatchingStats *s = &b->stats;
    char a[32], c[32];
    fprintf(f, "%s batching (--reserve %s, --max-batch %d)\n", batching_mode_name(b->mode),
            reserve_policy_name(b->policy), run->opts->max_batch);
    if (b->mode == BATCHING_CONTINUOUS)
        fprintf(f, "  batch          started %ld time%s in an empty arena; %ld admissions joined a running batch; "
                "at most %d requests in it\n", s->batches, s->batches == 1 ? "" : "s", s->joined_running,
                s->largest_batch);
    else
        fprintf(f, "  batches        %ld, the largest of %d requests\n", s->batches, s->largest_batch);
    fprintf(f, "  reservations   %ld, %.1f positions on average (%s)%s\n", s->reservations,
            safe_div(s->reserved_tokens_sum, (double)s->reservations),
            cli_format_bytes(a, sizeof a, safe_div(s->reserved_tokens_sum, (double)s->reservations) *
                                              (double)b->bytes_per_token),
            b->policy == RESERVE_GROW ? " when admitted" : "");
    fprintf(f, "  arena          %s%s; free %.1f%% of it on average; %s: at most %d\n",
            cli_format_bytes(a, sizeof a, (double)b->arena.capacity), b->arena_kind == ARENA_BUDDY ? ", buddy" : "",
            100.0 * safe_div(s->free_fraction_sum, (double)s->steps),
            b->arena_kind == ARENA_BUDDY ? "free blocks" : "holes", s->max_holes);
    if (b->policy == RESERVE_GROW)
        fprintf(f, "  growth         %ld moves copied %s; %ld requeues (%ld positions recomputed)\n", s->grow_moves,
                cli_format_bytes(c, sizeof c, s->grow_bytes_copied), s->requeues, s->positions_recomputed);
    if (b->mode == BATCHING_STATIC)
        fprintf(f, "  finished       %.1f%% of the reserved byte-steps belong to requests that had finished and "
                "wait for their batch to end\n", 100.0 * safe_div(s->finished_held_sum, s->reserved_sum));
    else
        fprintf(f, "  finished       requests release their region in the step they finish: none is held\n");
    fprintf(f, "  refusals       %ld for lack of free memory, %ld by fragmentation (at %ld steps)\n",
            s->refusals_no_space, s->refusals_fragmentation, s->external_steps);
}

void batching_report_json(JsonWriter *j, void *ctx, const ServingRun *run)
{
    const BatchingState *b = ctx;
    const BatchingStats *s = &b->stats;
    (void)run;
    json_string(j, "batching", batching_mode_name(b->mode));
    json_string(j, "reserve", reserve_policy_name(b->policy));
    if (b->arena_kind == ARENA_BUDDY) /* only then: the default report stays as it was */
        json_string(j, "arena", arena_kind_name(b->arena_kind));
    json_int(j, "max_batch", b->max_batch);
    json_int(j, "kv_budget_bytes", (long long)b->arena.capacity);
    json_int(j, "batches", s->batches);
    json_int(j, "largest_batch", s->largest_batch);
    json_int(j, "joined_running", s->joined_running);
    json_double(j, "reservation_tokens_avg", safe_div(s->reserved_tokens_sum, (double)s->reservations));
    json_double(j, "kv_free_avg", safe_div(s->free_fraction_sum, (double)s->steps));
    json_int(j, "arena_max_holes", s->max_holes);
    json_double(j, "kv_held_by_finished", safe_div(s->finished_held_sum, s->reserved_sum));
    json_int(j, "grow_moves", s->grow_moves);
    json_double(j, "grow_bytes_copied", s->grow_bytes_copied);
    json_int(j, "requeues", s->requeues);
    json_int(j, "positions_recomputed", s->positions_recomputed);
    json_int(j, "refusals_no_space", s->refusals_no_space);
    json_int(j, "refusals_fragmentation", s->refusals_fragmentation);
    json_int(j, "external_fragmentation_steps", s->external_steps);
}
