/* Chapter 6's report: the policy, the memory bound against what the run
 * held, the perplexity of a forced continuation; the generated ids for a
 * later --kv-force. */
#include <math.h>

#include "outfile.h"
#include "window.h"

int window_bound_positions(const WindowOptions *o)
{
    return o->window ? o->window + o->sinks + o->heavy : 0;
}

int window_bound_blocks(const WindowOptions *o, int block_size)
{
    if (!o->window)
        return 0;
    return block_count_for_tokens(o->sinks, block_size) + block_count_for_tokens(o->window - 1, block_size) + 1 +
           o->heavy;
}

static const char *policy_name(const WindowOptions *o)
{
    if (!o->window)
        return "full";
    if (o->evict == WINDOW_EVICT_H2O)
        return "h2o";
    return o->sinks ? "window+sinks" : "window";
}

static double perplexity(const WindowCache *w)
{
    return w->forced_steps ? exp(w->nll_sum / (double)w->forced_steps) : 0.0;
}

void window_report_table(FILE *f, void *ctx, const ServingRun *run)
{
    const WindowCache *w = ctx;
    const PagedServer *s = w->server;
    const WindowOptions *o = &w->opt;
    char a[32];
    paged_report_table(f, w->server, run);
    if (o->window)
        fprintf(f, "  window         %s: last %d positions, %d sinks, %d heavy hitters; RoPE positions as generated\n",
                policy_name(o), o->window, o->sinks, o->heavy);
    else
        fprintf(f, "  window         none: the full cache\n");
    fprintf(f, "  decode steps   peak %d positions held (bound %d = N + S + H), peak %d blocks (bound %d) = %s\n",
            w->peak_positions, window_bound_positions(o), w->peak_blocks,
            window_bound_blocks(o, s->kv.pool.shape.block_size),
            cli_format_bytes(a, sizeof a, (double)w->peak_blocks * (double)s->kv.pool.bytes_per_block));
    fprintf(f, "  prompt steps   peak %d positions held, %d blocks (a prompt's chunk is written whole, then evicted)\n",
            w->prompt_peak_positions, w->prompt_peak_blocks);
    fprintf(f, "  evicted        %ld positions; %ld blocks back to the pool\n", w->evicted, w->blocks_returned);
    if (w->opt.force_path)
        fprintf(f, "  forced         %ld steps: perplexity %.4f, greedy token = forced token in %.2f%%\n",
                w->forced_steps, perplexity(w),
                w->forced_steps ? 100.0 * (double)w->forced_agree / (double)w->forced_steps : 0.0);
}

void window_report_json(JsonWriter *j, void *ctx, const ServingRun *run)
{
    const WindowCache *w = ctx;
    const PagedServer *s = w->server;
    const WindowOptions *o = &w->opt;
    paged_report_json(j, w->server, run);
    json_string(j, "kv_policy", policy_name(o));
    json_int(j, "kv_window", o->window);
    json_int(j, "kv_sinks", o->sinks);
    json_int(j, "kv_heavy", o->heavy);
    json_int(j, "window_bound_positions", window_bound_positions(o));
    json_int(j, "window_peak_positions", w->peak_positions);
    json_int(j, "window_bound_blocks", window_bound_blocks(o, s->kv.pool.shape.block_size));
    json_int(j, "window_peak_blocks", w->peak_blocks);
    json_int(j, "window_peak_kv_bytes", (long long)w->peak_blocks * (long long)s->kv.pool.bytes_per_block);
    json_int(j, "window_peak_kv_position_bytes", (long long)w->peak_positions * (long long)paged_bytes_per_token(s));
    json_int(j, "window_prompt_peak_positions", w->prompt_peak_positions);
    json_int(j, "window_prompt_peak_blocks", w->prompt_peak_blocks);
    json_int(j, "window_evicted", w->evicted);
    json_int(j, "window_blocks_returned", w->blocks_returned);
    if (o->force_path) {
        json_int(j, "forced_steps", w->forced_steps);
        json_double(j, "forced_perplexity", perplexity(w));
        json_double(j, "forced_agreement", w->forced_steps ? (double)w->forced_agree / (double)w->forced_steps : 0.0);
    }
}

/* --kv-argmax: per request, the greedy id of each of its forced steps. */
static int write_argmax(const WindowCache *w, const ServingRun *run, Err *err)
{
    OutFile out;
    if (outfile_open(&out, "--kv-argmax", w->opt.argmax_path, err))
        return -1;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        int steps = r->n_tokens - r->n_prompt; /* a forced file longer than the request: only the steps taken */
        if (steps > w->n_forced[i])
            steps = w->n_forced[i];
        const int *best = w->forced[i] ? w->argmax_buf + (w->forced[i] - w->force_buf) : NULL; /* [steps] */
        for (int k = 0; k < steps; k++)
            fprintf(out.f, k ? " %d" : "%d", best[k]);
        fputc('\n', out.f);
    }
    return outfile_commit(&out, err);
}

int window_write_tokens(const WindowCache *w, const ServingRun *run, Err *err)
{
    OutFile out;
    if (w->opt.argmax_path && write_argmax(w, run, err))
        return -1;
    if (!w->opt.tokens_path)
        return 0;
    if (outfile_open(&out, "--kv-tokens", w->opt.tokens_path, err))
        return -1;
    for (int i = 0; i < run->n_reqs; i++) {
        const Request *r = &run->reqs[i];
        for (int t = r->n_prompt; t < r->n_tokens; t++)
            fprintf(out.f, t > r->n_prompt ? " %d" : "%d", r->tokens[t]);
        fputc('\n', out.f);
    }
    return outfile_commit(&out, err);
}
