/* Chapter 4 extension: the token budget with chunked prefill, the cap on
 * running requests and preemption's costs (swapping itself is swap.c).
 * Options: --max-num-batched-tokens, --max-num-seqs, --preempt,
 * --swap-space. Taught in: book/ch04-paged.md, "Extension: a token budget
 * and chunked prefill".
 * A scheduler of its own over the core's phases (scheduler.h): decodes
 * first, then the next chunk of a prompt still being prefilled, then
 * first-come, first-served admission while blocks, the step's token budget
 * and --max-num-seqs allow. Decodes always go first, so a long prompt never
 * holds running requests back by more than the budget. See budget.h. */
#include "budget.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "scheduler.h"
#include "swap.h"

/* ------------------------------------------------------------ options */

int budget_wanted(const CliOptions *o)
{
    return o->max_num_batched_tokens || o->max_num_seqs || o->preempt || o->swap_space;
}

/* Running requests the options allow: --max-num-seqs, or the budget (one
 * decode token each must fit a step), or 0 for no limit. */
static int running_limit(const CliOptions *o)
{
    return o->max_num_seqs ? o->max_num_seqs : o->max_num_batched_tokens;
}

int budget_check(const ServingRun *run, Err *err)
{
    const CliOptions *o = run->opts;
    int budget = o->max_num_batched_tokens, seqs = o->max_num_seqs, limit = running_limit(o);
    if (o->swap_space && !swap_wanted(o))
        return err_set(err, "--swap-space needs --preempt swap (recomputation keeps nothing on the host)");
    if (budget && seqs > budget)
        return err_set(err,
                       "--max-num-seqs %d is more than --max-num-batched-tokens %d: every running request may need "
                       "a decode token in the same step, and decodes are never cut (vLLM refuses this too)",
                       seqs, budget);
    if (limit && o->n_samples > limit)
        return err_set(err, "--n %d: the samples of a prompt are admitted together, but at most %d requests may run "
                       "(%s)", o->n_samples, limit, seqs ? "--max-num-seqs" : "--max-num-batched-tokens");
    return swap_wanted(o) ? swap_check(run, err) : 0;
}

int budget_max_running(const PagedServer *s, const ServingRun *run)
{
    if (s->budget->max_num_seqs > run->n_reqs)
        return run->n_reqs;
    return s->budget->max_num_seqs;
}

/* Tokens of every request at its longest: no step can feed more. */
static int all_positions(const ServingRun *run)
{
    long n = 0;
    for (int i = 0; i < run->n_reqs; i++)
        n += run->reqs[i].max_tokens;
    return n < 1 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
}

static void note_first_tokens(void *ctx, const ServingRun *run);

int budget_open(PagedServer *s, ServingRun *run, int *max_step_tokens, Err *err)
{
    const CliOptions *o = run->opts;
    if (budget_check(run, err))
        return -1;
    PagedBudget *b = mem_alloc(MEM_ACTIVATIONS, sizeof *b);
    if (!b)
        return err_set(err, "out of memory");
    s->budget = b;
    s->hooks.close[s->hooks.n_close++] = budget_close; /* also when the rest of the opening fails */
    s->hooks.plan = budget_schedule;
    s->hooks.print_setup = budget_print_setup;
    s->hooks.report_table = budget_report_table;
    s->hooks.report_json = budget_report_json;
    b->chunked_prefill = o->max_num_batched_tokens > 0;
    if (b->chunked_prefill)
        s->max_batched_tokens = o->max_num_batched_tokens;
    b->max_num_seqs = running_limit(o) ? running_limit(o) : run->n_reqs;
    b->follows = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(int));
    b->first_token_step = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(long));
    b->sorted_steps = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(long));
    if (!b->follows || !b->first_token_step || !b->sorted_steps)
        return err_set(err, "out of memory for the books of %d requests", run->n_reqs);
    for (int i = 0; i < run->n_reqs; i++) {
        b->follows[i] = -1;
        b->first_token_step[i] = -1;
    }
    /* Decodes always run (one token per running request); admission keeps
     * decodes + prompts within the budget, so a step never exceeds the
     * larger of the two (with --max-num-batched-tokens, the budget itself:
     * no more requests run than it has tokens), nor what the whole file
     * holds (a budget larger than that needs no larger buffers). */
    int decodes = budget_max_running(s, run);
    *max_step_tokens = s->max_batched_tokens > decodes ? s->max_batched_tokens : decodes;
    if (*max_step_tokens > all_positions(run))
        *max_step_tokens = all_positions(run);
    if (serving_add_observer(run, note_first_tokens, b, NULL, err))
        return -1;
    b->run = run; /* budget_close() takes the observer off */
    return swap_wanted(o) ? swap_open(s, run, err) : 0;
}

void budget_close(PagedServer *s)
{
    PagedBudget *b = s->budget;
    if (!b)
        return;
    swap_close(s);
    if (b->run)
        serving_remove_observer(b->run, b);
    mem_free(b->follows);
    mem_free(b->first_token_step);
    mem_free(b->sorted_steps);
    mem_free(b);
    s->budget = NULL;
}

void budget_print_setup(FILE *log, const PagedServer *s, const ServingRun *run, const char *name)
{
    fprintf(log, "%s: scheduler: a budget of %d tokens a step, %s; at most %d running; ", name, s->max_batched_tokens,
            s->budget->chunked_prefill ? "decodes first, then prompts in chunks" : "whole prompts",
            budget_max_running(s, run));
    if (s->swap)
        swap_print_setup(log, s->swap);
    else
        fprintf(log, "preemption recomputes\n");
}

/* ------------------------------------------------------------ preemption */

/* What a recomputation will cost, for the report next to the swaps. */
static void count_recomputation(PagedServer *s, const Request *r)
{
    PagedBudget *b = s->budget;
    b->recomputed_tokens += r->n_cached;
    b->recompute_flops += paged_recompute_flops(&s->kv.cfg, r->n_cached);
    b->recompute_blocks += s->kv.tables.tables[r->index].n_blocks;
}

/* The most recently admitted request goes back to the queue: with
 * --preempt swap its blocks wait on the host (swap.c), else they are
 * freed now and its prompt and generated tokens are recomputed when it is
 * admitted again. */
static Request *preempt_newest(PagedServer *s, ServingRun *run, Err *err)
{
    Request *victim = &run->reqs[s->running[s->n_running - 1]];
    int swapped = 0;
    if (s->swap && victim->n_cached > 0 && (swapped = swap_out_request(s, run, victim, err)) < 0)
        return NULL;
    if (!swapped)
        count_recomputation(s, victim);
    s->budget->follows[victim->index] = -1; /* a fork waiting for a prompt starts again with it */
    paged_preempt(s, run, victim);          /* a swapped-out table is empty already */
    return victim;
}

/* ------------------------------------------------------------ room for positions */

/* The core's room, and with --preempt swap the note that the blocks about
 * to be written are no longer their host copies. */
static int room_for_token(PagedServer *s, Request *r)
{
    if (paged_make_room(s, r))
        return -1;
    if (s->swap)
        swap_note_writes(s, &s->kv.tables.tables[r->index], r->n_tokens - 1, r->n_tokens);
    return 0;
}

static int room_upto(PagedServer *s, Request *r, int end)
{
    if (paged_make_room_upto(s, r, end))
        return -1;
    if (s->swap)
        swap_note_writes(s, &s->kv.tables.tables[r->index], r->n_cached, end);
    return 0;
}

/* ------------------------------------------------------------ feeding */

/* Forked samples of r's prompt that waited for its last chunk: now that
 * the chunk is in this step, their tables point at r's blocks and they
 * sample from r's logits row, as when the whole prompt ran at once. */
static int release_followers(PagedServer *s, ServingRun *run, const Request *r, Err *err)
{
    for (int k = 0; k < s->n_running; k++) {
        Request *f = &run->reqs[s->running[k]];
        if (s->budget->follows[f->index] != r->index)
            continue;
        s->budget->follows[f->index] = -1;
        paged_fork(s, run, r, f);
        if (serving_share_logits(run, r, f, err))
            return -1;
    }
    return 0;
}

/* Feeds r's positions n_cached..end-1; a prompt's last chunk also lets
 * its waiting forks go. */
static int feed_until(PagedServer *s, ServingRun *run, Request *r, int end, Err *err)
{
    if (serving_feed_upto(run, r, end, err))
        return -1;
    return end == r->n_tokens ? release_followers(s, run, r, err) : 0;
}

/* A fork waiting for its prompt's last chunk: nothing of its own to feed. */
static int is_following(const PagedServer *s, const Request *r)
{
    return s->budget->follows[r->index] >= 0;
}

/* ------------------------------------------------------------ decodes */

/* As the core's paged_schedule_decodes(), with this scheduler's
 * preemption and its feeding (a prompt's last position can be a decode's
 * one token, and its forks then go). Decodes come first and are never
 * cut: --max-num-seqs <= --max-num-batched-tokens leaves room for all. */
static int schedule_decodes(PagedServer *s, ServingRun *run, int *preempted, Err *err)
{
    for (int i = 0; i < s->n_running; i++) {
        Request *r = &run->reqs[s->running[i]];
        if (r->n_tokens - r->n_cached != 1 || is_following(s, r))
            continue; /* a prompt still in chunks (next pass), a fork that waits, or one fed already */
        int evicted_self = 0;
        while (!evicted_self && room_for_token(s, r) != 0) {
            Request *victim = preempt_newest(s, run, err);
            if (!victim)
                return -1;
            evicted_self = victim == r;
            *preempted = 1;
        }
        if (evicted_self)
            break;
        if (feed_until(s, run, r, r->n_tokens, err))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ prompt chunks */

/* Tokens this step still has room for. */
static int budget_left(const PagedServer *s, const ServingRun *run)
{
    return s->max_batched_tokens - run->n_entries;
}

/* The end of r's next chunk: as many of its positions without K/V as the
 * budget left and the free blocks allow (a shared block at its start needs
 * one for its copy). */
static int chunk_end(const PagedServer *s, const ServingRun *run, const Request *r)
{
    const BlockPool *p = &s->kv.pool;
    const BlockTable *t = &s->kv.tables.tables[r->index];
    int bs = p->shape.block_size, start = r->n_cached;
    int cow = start < t->n_blocks * bs && block_table_blocks_to_write(p, t, start);
    int room = (t->n_blocks + block_pool_available(p) - cow) * bs, end = r->n_tokens;
    if (end > start + budget_left(s, run))
        end = start + budget_left(s, run);
    if (end > room)
        end = room;
    if (end > t->capacity * bs)
        end = t->capacity * bs;
    return end;
}

/* Prompts (or recomputations) admitted in an earlier step and not yet
 * complete take the budget the decodes left, oldest first; at most the
 * newest admission is one. They never preempt: the decodes before them
 * were fed already, and the oldest requests come first. */
static int schedule_prompt_chunks(PagedServer *s, ServingRun *run, Err *err)
{
    for (int i = 0; i < s->n_running && budget_left(s, run) > 0; i++) {
        Request *r = &run->reqs[s->running[i]];
        if (r->n_tokens - r->n_cached <= 1 || is_following(s, r))
            continue;
        int end = chunk_end(s, run, r);
        if (end <= r->n_cached || room_upto(s, r, end))
            continue; /* no block free for it this step */
        if (feed_until(s, run, r, end, err))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ admission */

/* Admits request i and the samples forked from it, feeding i's positions
 * up to @p end (its whole prompt, or with a strict budget a first chunk):
 * a swapped-out request first gets its blocks back, then room for the
 * positions; each sibling's table points at the same blocks (one more
 * holder each) and it samples from i's logits row, once i's prompt is
 * complete: in this step, or (chunked) in the step of its last chunk. */
static int admit_group(PagedServer *s, ServingRun *run, int i, int group, int end, const PagedCachedPrefix *hit,
                       Err *err)
{
    Request *r = &run->reqs[i];
    if (swap_is_out(s, i) && swap_in_request(s, run, r, err))
        return -1;
    if (paged_admit_first(s, run, r, end, hit))
        return 1; /* not admitted (only an unfinished lab allocator gets here) */
    if (s->swap)
        swap_note_writes(s, &s->kv.tables.tables[i], r->n_cached, end);
    for (int k = 1; k < group; k++) {
        Request *sibling = &run->reqs[i + k];
        paged_start_running(s, run, sibling);
        if (end < r->n_tokens)
            s->budget->follows[sibling->index] = r->index; /* forked when the prompt's last chunk runs */
        else
            paged_fork(s, run, r, sibling);
    }
    if (serving_feed_upto(run, r, end, err))
        return -1;
    for (int k = 1; k < group && end == r->n_tokens; k++)
        if (serving_share_logits(run, r, &run->reqs[i + k], err))
            return -1;
    return 0;
}

/* The first position admission feeds, and the blocks it takes up to end:
 * those of a swapped-out request come back from the host, the others as
 * the core counts them (a cache above the pool may hold some). */
static int admission_start(const PagedServer *s, const ServingRun *run, int i, const PagedCachedPrefix *hit)
{
    if (swap_is_out(s, i))
        return s->swap->cached[i];
    return hit->n_blocks ? hit->n_blocks * s->kv.pool.shape.block_size : run->reqs[i].n_cached;
}

static int admission_blocks(const PagedServer *s, int i, int start, int end, const PagedCachedPrefix *hit)
{
    return swap_is_out(s, i) ? swap_blocks_to_admit(s, i, start, end) : paged_blocks_to_admit(s, end, hit);
}

/* The core's first come, first served over the waiting requests, with a
 * first chunk of a prompt when the budget is strict (it is then the last
 * admission of the step) and at most --max-num-seqs running. */
static int admit_waiting(PagedServer *s, ServingRun *run, Err *err)
{
    int max_running = budget_max_running(s, run), i = paged_first_waiting(s, run);
    while ((i = paged_next_waiting(run, i)) >= 0) {
        Request *r = &run->reqs[i];
        int group = paged_fork_group_size(run, i);
        PagedCachedPrefix hit = paged_cached_prefix(s, r);
        int start = admission_start(s, run, i, &hit), end = r->n_tokens;
        if (s->budget->chunked_prefill && end > start + budget_left(s, run))
            end = start + budget_left(s, run);
        if (s->n_running + group > max_running ||
            !paged_admission_fits(s, run, start, end, admission_blocks(s, i, start, end, &hit)))
            break;
        int rc = admit_group(s, run, i, group, end, &hit, err);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
        i += group;
    }
    return 0;
}

static void note_step(PagedBudget *b, const ServingRun *run);

int budget_schedule(PagedServer *s, ServingRun *run, Err *err)
{
    int preempted = 0;
    if (schedule_decodes(s, run, &preempted, err) || schedule_prompt_chunks(s, run, err))
        return -1;
    /* A step that had to preempt is short of blocks: admitting now would
     * only preempt again (vLLM's v1 scheduler does the same). */
    if (!preempted && admit_waiting(s, run, err))
        return -1;
    note_step(s->budget, run);
    return 0;
}

/* ------------------------------------------------------------ books */

/* A decode token: the one new token of a request that has generated
 * before (a prompt's last position, or a recomputed one, is prompt work). */
static int is_decode(const ServingRun *run, const BatchEntry *e)
{
    const Request *r = &run->reqs[e->seq];
    return e->pos == r->n_cached && e->pos == r->n_tokens - 1 && r->n_tokens > r->n_prompt;
}

/* Keeps a step's size; when full, every other sample goes and the stride
 * doubles, so that recording never allocates (as KvTimeline does). */
static void keep_step(PagedBudget *sc, long step, int tokens, int prompt)
{
    if (sc->timeline_stride == 0)
        sc->timeline_stride = 1;
    if (sc->timeline_steps++ % sc->timeline_stride != 0)
        return;
    if (sc->timeline_n == PAGED_STEP_SAMPLES) {
        for (int i = 0; i < PAGED_STEP_SAMPLES / 2; i++)
            sc->timeline[i] = sc->timeline[2 * i];
        sc->timeline_n = PAGED_STEP_SAMPLES / 2;
        sc->timeline_stride *= 2;
        if ((sc->timeline_steps - 1) % sc->timeline_stride != 0)
            return;
    }
    sc->timeline[sc->timeline_n++] = (PagedStepSample){step, tokens, prompt};
}

static void note_step(PagedBudget *sc, const ServingRun *run)
{
    int decodes = 0;
    long reads = 0;
    for (int i = 0; i < run->n_entries; i++) {
        decodes += is_decode(run, &run->entries[i]);
        reads += run->entries[i].pos + 1;
    }
    int prompt = run->n_entries - decodes;
    keep_step(sc, run->step, run->n_entries, prompt);
    if (run->n_entries > sc->max_step_tokens)
        sc->max_step_tokens = run->n_entries;
    if (reads > sc->max_step_kv_reads)
        sc->max_step_kv_reads = reads;
    if (decodes > 0 && prompt > 0) {
        sc->steps_mixed++;
        if (prompt > sc->max_prompt_beside_decodes)
            sc->max_prompt_beside_decodes = prompt;
    }
}

/* The run's observer, after each step's sampling: the step in which each
 * request took its first token. */
static void note_first_tokens(void *ctx, const ServingRun *run)
{
    PagedBudget *b = ctx;
    for (int i = 0; i < run->n_takers; i++)
        if (b->first_token_step[run->taker_req[i]] < 0)
            b->first_token_step[run->taker_req[i]] = run->step;
}

static int compare_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int budget_first_token_steps(const PagedServer *s, const ServingRun *run, long *min, double *median, long *max)
{
    const PagedBudget *sc = s->budget;
    int n = 0;
    for (int i = 0; i < run->n_reqs; i++)
        if (sc->first_token_step[i] >= 0)
            sc->sorted_steps[n++] = sc->first_token_step[i] - run->reqs[i].arrival_step + 1;
    *min = *max = 0;
    *median = 0.0;
    if (n == 0)
        return 0;
    qsort(sc->sorted_steps, (size_t)n, sizeof(long), compare_long);
    *min = sc->sorted_steps[0];
    *max = sc->sorted_steps[n - 1];
    *median = n % 2 ? (double)sc->sorted_steps[n / 2]
                    : 0.5 * (double)(sc->sorted_steps[n / 2 - 1] + sc->sorted_steps[n / 2]);
    return n;
}

/* ------------------------------------------------------------ report */

static void print_budget(FILE *f, const PagedServer *s, const ServingRun *run)
{
    const PagedBudget *sc = s->budget;
    fprintf(f, "scheduler\n");
    fprintf(f, "  token budget   %d a step, %s; at most %d running\n", s->max_batched_tokens,
            sc->chunked_prefill ? "decodes first, then prompts in chunks" : "whole prompts",
            budget_max_running(s, run));
    fprintf(f, "  largest step   %d tokens; attention read at most %ld K/V positions in one step\n",
            sc->max_step_tokens, sc->max_step_kv_reads);
    fprintf(f, "  decodes        shared %ld of %ld steps with prompt positions, at most %d of them\n", sc->steps_mixed,
            run->busy_steps, sc->max_prompt_beside_decodes);
    long lo, hi;
    double mid;
    int n = budget_first_token_steps(s, run, &lo, &mid, &hi);
    fprintf(f, "  first token    after %ld / %.1f / %ld steps (min / median / max over %d requests, arrival step "
               "counted)\n", lo, mid, hi, n);
}

static void print_preemption(FILE *f, const PagedServer *s)
{
    const PagedBudget *sc = s->budget;
    char a[32];
    double block = (double)s->kv.pool.bytes_per_block;
    if (s->swap) /* --preempt swap (swap.c) */
        swap_report_table(f, s);
    if (!s->swap || sc->recomputed_tokens > 0) {
        fprintf(f, "  recomputation  %ld positions = %.4g GFLOP%s\n", sc->recomputed_tokens, sc->recompute_flops / 1e9,
                s->swap ? " (the preemptions that found the swap space full)" : "");
        fprintf(f, "  cost           swapping their %ld blocks instead would have moved %s (out and back in)\n",
                sc->recompute_blocks, cli_format_bytes(a, sizeof a, 2.0 * block * (double)sc->recompute_blocks));
    }
}

void budget_report_table(FILE *f, const PagedServer *s, const ServingRun *run)
{
    print_budget(f, s, run);
    print_preemption(f, s);
}

void budget_report_json(JsonWriter *j, const PagedServer *s, const ServingRun *run)
{
    const PagedBudget *sc = s->budget;
    json_int(j, "max_num_batched_tokens", s->max_batched_tokens);
    json_bool(j, "chunked_prefill", sc->chunked_prefill);
    json_int(j, "max_num_seqs", budget_max_running(s, run));
    json_string(j, "preempt", s->swap ? "swap" : "recompute");
    json_int(j, "max_step_tokens", sc->max_step_tokens);
    json_int(j, "max_step_kv_reads", sc->max_step_kv_reads);
    json_int(j, "steps_decodes_behind_prompt", sc->steps_mixed);
    json_int(j, "max_prompt_tokens_beside_decodes", sc->max_prompt_beside_decodes);
    long lo, hi;
    double mid;
    int n = budget_first_token_steps(s, run, &lo, &mid, &hi);
    json_begin_object(j, "first_token_steps");
    json_int(j, "requests", n);
    json_int(j, "min", lo);
    json_double(j, "median", mid);
    json_int(j, "max", hi);
    json_end_object(j);
    swap_report_json(j, s);
    json_int(j, "recomputed_tokens", sc->recomputed_tokens);
    json_double(j, "recompute_flops", sc->recompute_flops);
    json_int(j, "recompute_blocks", sc->recompute_blocks);
    json_begin_array(j, "step_tokens_timeline");
    for (int i = 0; i < sc->timeline_n; i++) {
        int was_pretty = j->pretty;
        json_begin_array(j, NULL);
        j->pretty = 0; /* one [step, tokens, prompt tokens] triple per line */
        json_int(j, NULL, sc->timeline[i].step);
        json_int(j, NULL, sc->timeline[i].tokens);
        json_int(j, NULL, sc->timeline[i].prompt_tokens);
        json_end_array(j);
        j->pretty = was_pretty;
    }
    json_end_array(j);
}
