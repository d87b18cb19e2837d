/* Chapter 4's scheduler options: the token budget with chunked prefill
 * (--max-num-batched-tokens), the cap on running requests
 * (--max-num-seqs) and preemption by swapping (--preempt, --swap-space):
 * their rules, their books, and what the report says about them. The
 * scheduling itself is in scheduler.c, the swap space in swap.c. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "paged.h"

/* ------------------------------------------------------------ options */

static int wants_swap(const CliOptions *o)
{
    return o->preempt && strcmp(o->preempt, "swap") == 0;
}

/* Running requests the options allow: --max-num-seqs, or the budget (one
 * decode token each must fit a step), or 0 for no limit. */
static int running_limit(const CliOptions *o)
{
    return o->max_num_seqs ? o->max_num_seqs : o->max_num_batched_tokens;
}

/* Host blocks of --swap-space (by default as many as the KV budget's). */
static size_t swap_slots(const ServingRun *run, size_t bytes_per_block)
{
    size_t bytes = run->opts->swap_space ? run->opts->swap_space : serving_kv_budget(run);
    return bytes / bytes_per_block;
}

/* A swap space that holds no block, more than a slot id names, or (with
 * bytes to hold) more than the machine's memory. */
static int check_swap_space(const ServingRun *run, Err *err)
{
    const CliOptions *o = run->opts;
    size_t per_block = (size_t)o->block_size * run->kv_bytes_per_token, slots = swap_slots(run, per_block);
    size_t ram = mem_physical_bytes();
    char a[32], b[32];
    if (slots < 1)
        return err_set(err, "--swap-space %s holds no block of %s",
                       cli_format_bytes(a, sizeof a, (double)o->swap_space),
                       cli_format_bytes(b, sizeof b, (double)per_block));
    if (slots > INT_MAX / BLOCK_SIZE_MAX)
        return err_set(err, "--swap-space %s is %zu blocks, more than the swap space can index",
                       cli_format_bytes(a, sizeof a, (double)o->swap_space), slots);
    if (!run->simulated && ram > 0 && slots * per_block > ram)
        return err_set(err, "--swap-space %s is more than this machine's memory (%s)",
                       cli_format_bytes(a, sizeof a, (double)(slots * per_block)),
                       cli_format_bytes(b, sizeof b, (double)ram));
    return 0;
}

int paged_sched_check(const ServingRun *run, Err *err)
{
    const CliOptions *o = run->opts;
    int budget = o->max_num_batched_tokens, seqs = o->max_num_seqs, limit = running_limit(o);
    if (o->swap_space && !wants_swap(o))
        return err_set(err, "--swap-space needs --preempt swap (recomputation keeps nothing on the host)");
    if (budget && seqs > budget)
        return err_set(err,
                       "--max-num-seqs %d is more than --max-num-batched-tokens %d: every running request may need "
                       "a decode token in the same step, and decodes are never cut (vLLM refuses this too)",
                       seqs, budget);
    if (limit && o->n_samples > limit)
        return err_set(err, "--n %d: the samples of a prompt are admitted together, but at most %d requests may run "
                       "(%s)", o->n_samples, limit, seqs ? "--max-num-seqs" : "--max-num-batched-tokens");
    return wants_swap(o) ? check_swap_space(run, err) : 0;
}

int paged_max_running(const PagedServer *s, const ServingRun *run)
{
    if (!s->sched || s->sched->max_num_seqs > run->n_reqs)
        return run->n_reqs;
    return s->sched->max_num_seqs;
}

static int open_swap(PagedServer *s, const ServingRun *run, Err *err)
{
    const BlockPool *p = &s->kv.pool;
    /* paged_sched_check() refused a swap space that holds no block or too many. */
    int slots = (int)swap_slots(run, p->bytes_per_block);
    /* On the device the host holds the swapped bytes; in a simulation nobody does. */
    int with_storage = p->storage != NULL || run->device != NULL;
    return swap_space_init(&s->sched->swap, p, slots, run->n_reqs, s->kv.tables.capacity, with_storage, err);
}

int paged_sched_open(PagedServer *s, const ServingRun *run, Err *err)
{
    const CliOptions *o = run->opts;
    s->sched = NULL;
    if (!o->max_num_batched_tokens && !o->max_num_seqs && !o->preempt && !o->swap_space)
        return 0; /* the chapter as it was: nothing more allocated, nothing more reported */
    if (paged_sched_check(run, err))
        return -1;
    PagedSched *sc = mem_alloc(MEM_ACTIVATIONS, sizeof *sc);
    if (!sc)
        return err_set(err, "out of memory");
    s->sched = sc;
    sc->chunked_prefill = o->max_num_batched_tokens > 0;
    if (sc->chunked_prefill)
        s->max_batched_tokens = o->max_num_batched_tokens;
    sc->max_num_seqs = running_limit(o) ? running_limit(o) : run->n_reqs;
    sc->preempt = wants_swap(o) ? PAGED_PREEMPT_SWAP : PAGED_PREEMPT_RECOMPUTE;
    sc->follows = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(int));
    sc->first_token_step = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(long));
    sc->sorted_steps = mem_alloc_array(MEM_ACTIVATIONS, (size_t)run->n_reqs, sizeof(long));
    if (!sc->follows || !sc->first_token_step || !sc->sorted_steps)
        return err_set(err, "out of memory for the books of %d requests", run->n_reqs);
    for (int i = 0; i < run->n_reqs; i++) {
        sc->follows[i] = -1;
        sc->first_token_step[i] = -1;
    }
    return sc->preempt == PAGED_PREEMPT_SWAP ? open_swap(s, run, err) : 0;
}

void paged_sched_close(PagedSched *sc)
{
    if (!sc)
        return;
    swap_space_free(&sc->swap);
    mem_free(sc->follows);
    mem_free(sc->first_token_step);
    mem_free(sc->sorted_steps);
    mem_free(sc);
}

void paged_sched_print_setup(FILE *log, const PagedServer *s, const ServingRun *run, const char *name)
{
    const PagedSched *sc = s->sched;
    char a[32];
    fprintf(log, "%s: scheduler: a budget of %d tokens a step, %s; at most %d running; ", name, s->max_batched_tokens,
            sc->chunked_prefill ? "decodes first, then prompts in chunks" : "whole prompts", paged_max_running(s, run));
    if (sc->preempt == PAGED_PREEMPT_SWAP)
        fprintf(log, "preemption swaps to %d host blocks (%s)\n", sc->swap.n_slots,
                cli_format_bytes(a, sizeof a, (double)sc->swap.n_slots * (double)sc->swap.bytes_per_block));
    else
        fprintf(log, "preemption recomputes\n");
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
static void keep_step(PagedSched *sc, long step, int tokens, int prompt)
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

void paged_sched_note_step(PagedSched *sc, const ServingRun *run)
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

void paged_sched_note_tokens(PagedServer *s, const ServingRun *run)
{
    for (int i = 0; i < run->n_takers; i++)
        if (s->sched->first_token_step[run->taker_req[i]] < 0)
            s->sched->first_token_step[run->taker_req[i]] = run->step;
}

double paged_recompute_flops(const ModelConfig *c, long n_positions)
{
    double dim = c->dim, kv_dim = model_kv_dim(c), hidden = c->hidden_dim, n = (double)n_positions;
    double weights_per_layer = 2.0 * dim * dim + 2.0 * dim * kv_dim + 3.0 * dim * hidden;
    double projections = 2.0 * weights_per_layer * n;
    /* Position p reads p + 1 positions: sum over p < n is n (n + 1) / 2. */
    double attention = 4.0 * dim * n * (n + 1.0) / 2.0;
    return c->n_layers * (projections + attention);
}

static int compare_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int paged_first_token_steps(const PagedServer *s, const ServingRun *run, long *min, double *median, long *max)
{
    const PagedSched *sc = s->sched;
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
    const PagedSched *sc = s->sched;
    fprintf(f, "scheduler\n");
    fprintf(f, "  token budget   %d a step, %s; at most %d running\n", s->max_batched_tokens,
            sc->chunked_prefill ? "decodes first, then prompts in chunks" : "whole prompts",
            paged_max_running(s, run));
    fprintf(f, "  largest step   %d tokens; attention read at most %ld K/V positions in one step\n",
            sc->max_step_tokens, sc->max_step_kv_reads);
    fprintf(f, "  decodes        shared %ld of %ld steps with prompt positions, at most %d of them\n", sc->steps_mixed,
            run->busy_steps, sc->max_prompt_beside_decodes);
    long lo, hi;
    double mid;
    int n = paged_first_token_steps(s, run, &lo, &mid, &hi);
    fprintf(f, "  first token    after %ld / %.1f / %ld steps (min / median / max over %d requests, arrival step "
               "counted)\n", lo, mid, hi, n);
}

static void print_preemption(FILE *f, const PagedServer *s)
{
    const PagedSched *sc = s->sched;
    char a[32], b[32], c[32];
    double block = (double)s->kv.pool.bytes_per_block;
    if (sc->preempt == PAGED_PREEMPT_SWAP) {
        fprintf(f, "  preemption     swap: %ld swapped out, %ld back in; %ld recomputed because the swap space (%d "
                   "blocks) was full\n", sc->swaps_out, sc->swaps_in, sc->swap_fallbacks, sc->swap.n_slots);
        fprintf(f, "  swap traffic   out %ld blocks = %s, in %ld blocks = %s (blocks x %s; shared blocks once)\n",
                sc->swap_blocks_out, cli_format_bytes(a, sizeof a, block * (double)sc->swap_blocks_out),
                sc->swap_blocks_in, cli_format_bytes(b, sizeof b, block * (double)sc->swap_blocks_in),
                cli_format_bytes(c, sizeof c, block));
        fprintf(f, "  cost           swapping moved %s for %ld positions; recomputing them would have cost %.4g "
                   "GFLOP\n", cli_format_bytes(a, sizeof a, block * (double)(sc->swap_blocks_out + sc->swap_blocks_in)),
                sc->swapped_tokens, sc->swapped_flops / 1e9);
    }
    if (sc->preempt == PAGED_PREEMPT_RECOMPUTE || sc->recomputed_tokens > 0) {
        fprintf(f, "  recomputation  %ld positions = %.4g GFLOP%s\n", sc->recomputed_tokens, sc->recompute_flops / 1e9,
                sc->preempt == PAGED_PREEMPT_SWAP ? " (the preemptions that found the swap space full)" : "");
        fprintf(f, "  cost           swapping their %ld blocks instead would have moved %s (out and back in)\n",
                sc->recompute_blocks, cli_format_bytes(a, sizeof a, 2.0 * block * (double)sc->recompute_blocks));
    }
}

void paged_sched_report_table(FILE *f, const PagedServer *s, const ServingRun *run)
{
    print_budget(f, s, run);
    print_preemption(f, s);
}

void paged_sched_report_json(JsonWriter *j, const PagedServer *s, const ServingRun *run)
{
    const PagedSched *sc = s->sched;
    long long block = (long long)s->kv.pool.bytes_per_block;
    json_int(j, "max_num_batched_tokens", s->max_batched_tokens);
    json_bool(j, "chunked_prefill", sc->chunked_prefill);
    json_int(j, "max_num_seqs", paged_max_running(s, run));
    json_string(j, "preempt", sc->preempt == PAGED_PREEMPT_SWAP ? "swap" : "recompute");
    json_int(j, "max_step_tokens", sc->max_step_tokens);
    json_int(j, "max_step_kv_reads", sc->max_step_kv_reads);
    json_int(j, "steps_decodes_behind_prompt", sc->steps_mixed);
    json_int(j, "max_prompt_tokens_beside_decodes", sc->max_prompt_beside_decodes);
    long lo, hi;
    double mid;
    int n = paged_first_token_steps(s, run, &lo, &mid, &hi);
    json_begin_object(j, "first_token_steps");
    json_int(j, "requests", n);
    json_int(j, "min", lo);
    json_double(j, "median", mid);
    json_int(j, "max", hi);
    json_end_object(j);
    json_int(j, "swap_space_blocks", sc->swap.n_slots);
    json_int(j, "swaps_out", sc->swaps_out);
    json_int(j, "swaps_in", sc->swaps_in);
    json_int(j, "swap_blocks_out", sc->swap_blocks_out);
    json_int(j, "swap_blocks_in", sc->swap_blocks_in);
    json_int(j, "swap_bytes_out", sc->swap_blocks_out * block);
    json_int(j, "swap_bytes_in", sc->swap_blocks_in * block);
    json_int(j, "swap_fallbacks", sc->swap_fallbacks);
    json_int(j, "swapped_tokens", sc->swapped_tokens);
    json_double(j, "swapped_tokens_recompute_flops", sc->swapped_flops);
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
