/* Chapter 4's report: the chapter's lines of the memory table and keys of
 * the JSON report, from the books account.c keeps. An extension that is
 * on adds its own lines after the chapter's (ext/budget.c) or a key among
 * them (ext/beam.c). */
#include <stdio.h>

#include "mem.h"
#include "paged.h"

/* ------------------------------------------------------------ report */

/* Blocks saved by sharing over the blocks the same sequences would hold
 * unshared: at the step of peak use, and over all steps. */
static double saved_fraction_at_peak(const PagedSharing *sh)
{
    return sh->logical_at_peak > 0 ? (double)sh->saved_at_peak / (double)sh->logical_at_peak : 0.0;
}

static double saved_fraction_avg(const PagedServer *s)
{
    return s->sharing->logical_sum > 0 ? s->blocks_saved_sum / s->sharing->logical_sum : 0.0;
}

/* Up to this many rows of the blocks-over-time table. */
#define TIMELINE_ROWS 8

static void print_blocks_over_time(FILE *f, const PagedServer *s, const KvTimeline *t)
{
    const BlockPool *p = &s->kv.pool;
    if (t->n_samples == 0)
        return;
    fprintf(f, "  over time      step   used   free   KV used/reserved\n");
    int rows = t->n_samples < TIMELINE_ROWS ? t->n_samples : TIMELINE_ROWS;
    for (int k = 0; k < rows; k++) {
        /* Evenly spaced samples, always including the first and the last. */
        int i = rows == 1 ? 0 : (int)((long)k * (t->n_samples - 1) / (rows - 1));
        const KvSample *x = &t->samples[i];
        int used = (int)(x->reserved / p->bytes_per_block);
        fprintf(f, "  %14s %5ld %6d %6d   %5.1f%%\n", "", x->step, used, p->n_blocks - used,
                x->reserved ? 100.0 * (double)x->used / (double)x->reserved : 0.0);
    }
}

void paged_report_table(FILE *f, void *ctx, const ServingRun *run)
{
    const PagedServer *s = ctx;
    const BlockPool *p = &s->kv.pool;
    char a[32], b[32];
    double fr[4];
    kv_breakdown_fractions(&run->breakdown, fr);
    fprintf(f, "paged KV (block size %d)\n", p->shape.block_size);
    fprintf(f, "  blocks         %d total x %s; peak %d used (step %ld); at the end %d used, %d free\n", p->n_blocks,
            cli_format_bytes(a, sizeof a, (double)p->bytes_per_block), s->blocks_peak_used, s->blocks_peak_step,
            block_pool_used(p), block_pool_available(p));
    print_blocks_over_time(f, s, &run->timeline);
    fprintf(f, "  slack          only in last blocks: at most %zu token rows at once; %.1f%% of reserved "
               "byte-steps never filled\n",
            s->slack_tokens_peak, 100.0 * fr[2]);
    fprintf(f, "  block tables   %d x %d entries = %s (kv_metadata; with free list and refcounts %s)\n",
            s->kv.tables.count, s->kv.tables.capacity,
            cli_format_bytes(a, sizeof a, (double)block_tables_bytes(s->kv.tables.count, s->kv.tables.capacity)),
            cli_format_bytes(b, sizeof b, (double)mem_current(MEM_KV_METADATA, MEM_HOST)));
    fprintf(f, "  preemptions    %ld (%s)\n", s->preemptions,
            s->hooks.preemption_note ? s->hooks.preemption_note /* an extension's way (ext/swap.c) */
                                     : "recomputed from prompt + generated tokens when readmitted");
    fprintf(f, "  sharing        forks saved up to %d blocks at once (%.1f on average); %ld copy-on-write copies\n",
            s->blocks_saved_peak, s->steps_accounted ? s->blocks_saved_sum / (double)s->steps_accounted : 0.0,
            s->cow_copies);
    if (s->sharing)
        fprintf(f, "                 %.1f%% of the blocks the same sequences would hold unshared, at peak use "
                   "(step %ld); %.1f%% over all steps%s\n", 100.0 * saved_fraction_at_peak(s->sharing),
                s->blocks_peak_step, 100.0 * saved_fraction_avg(s), s->sharing->note ? s->sharing->note : "");
    if (s->hooks.report_table) /* an extension's lines (ext/budget.c) */
        s->hooks.report_table(f, s, run);
}

static void json_blocks_timeline(JsonWriter *j, const PagedServer *s, const KvTimeline *t)
{
    json_begin_array(j, "blocks_timeline");
    for (int i = 0; i < t->n_samples; i++) {
        int was_pretty = j->pretty, used = (int)(t->samples[i].reserved / s->kv.pool.bytes_per_block);
        json_begin_array(j, NULL);
        j->pretty = 0; /* one [step, used, free] triple per line */
        json_int(j, NULL, t->samples[i].step);
        json_int(j, NULL, used);
        json_int(j, NULL, s->kv.pool.n_blocks - used);
        json_end_array(j);
        j->pretty = was_pretty;
    }
    json_end_array(j);
}

void paged_report_json(JsonWriter *j, void *ctx, const ServingRun *run)
{
    const PagedServer *s = ctx;
    const BlockPool *p = &s->kv.pool;
    json_int(j, "block_size", p->shape.block_size);
    json_int(j, "blocks_total", p->n_blocks);
    json_int(j, "bytes_per_block", (long long)p->bytes_per_block);
    json_int(j, "blocks_peak_used", s->blocks_peak_used);
    json_int(j, "preemptions", s->preemptions);
    json_int(j, "blocks_saved_by_sharing", s->blocks_saved_peak);
    json_double(j, "blocks_saved_by_sharing_avg",
                s->steps_accounted ? s->blocks_saved_sum / (double)s->steps_accounted : 0.0);
    json_int(j, "cow_copies", s->cow_copies);
    if (s->sharing) { /* with forks only (PagedServer.sharing): the default report stays as it was */
        json_double(j, "sharing_saved_fraction", saved_fraction_at_peak(s->sharing));
        json_double(j, "sharing_saved_fraction_avg", saved_fraction_avg(s));
        if (s->hooks.sharing_json) /* an extension's keys (ext/beam.c) */
            s->hooks.sharing_json(j, s);
    }
    json_int(j, "watermark_blocks", s->watermark_blocks);
    json_int(j, "max_batched_tokens", s->max_batched_tokens);
    json_int(j, "slack_tokens_peak", (long long)s->slack_tokens_peak);
    json_int(j, "block_table_bytes", (long long)block_tables_bytes(s->kv.tables.count, s->kv.tables.capacity));
    json_int(j, "kv_metadata_bytes", (long long)mem_current(MEM_KV_METADATA, MEM_HOST));
    json_blocks_timeline(j, s, &run->timeline);
    if (s->hooks.report_json) /* an extension's keys (ext/budget.c) */
        s->hooks.report_json(j, s, run);
}
