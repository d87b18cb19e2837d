/* Chapter 5's lines of the memory table and keys of the JSON report,
 * after chapter 4's: what the cache saved, what it keeps, and what "KV
 * cache usage" means once free blocks may hold cached K/V. */
#include <stdio.h>

#include "mem.h"
#include "prefix.h"

/* Up to this many rows of the cached-blocks-over-time table. */
#define TIMELINE_ROWS 8

static long evictions(const PrefixCache *c)
{
    return c->mode == PREFIX_CACHE_HASH ? c->hash.evictions : c->mode == PREFIX_CACHE_RADIX ? c->radix.evictions : 0;
}

static int blocks_cached_now(const PrefixCache *c)
{
    return c->mode == PREFIX_CACHE_HASH    ? c->hash.n_registered
           : c->mode == PREFIX_CACHE_RADIX ? c->radix.n_blocks_in_tree
                                           : 0;
}

/* The cache's kv_metadata: its table or tree, the token ids of what it
 * holds, and what it knows of each request. */
static size_t metadata_bytes(const PrefixCache *c)
{
    size_t n = (size_t)c->server->kv.pool.n_blocks, bs = (size_t)c->block_size, reqs = (size_t)c->run->n_reqs;
    size_t books = reqs * (3 * sizeof(int) + sizeof(uint64_t) + sizeof(long));
    size_t chain = n * sizeof(HashChainEntry) + n * bs * sizeof(int); /* entries, token ids; + buckets */
    if (c->mode == PREFIX_CACHE_HASH)
        return books + chain + (size_t)c->hash.n_buckets * sizeof(int);
    if (c->mode == PREFIX_CACHE_RADIX) /* the nodes and links, over a hash chain of its own */
        return books + (n + 1) * sizeof(RadixNode) + 3 * n * sizeof(int) + chain +
               (size_t)c->radix.blocks.n_buckets * sizeof(int);
    return books;
}

static void print_over_time(FILE *f, const PrefixCache *c)
{
    if (c->n_samples == 0)
        return;
    int total = c->server->kv.pool.n_blocks;
    fprintf(f, "  over time      step   held   cached-free   free   KV cache usage (free cached / used cached)\n");
    int rows = c->n_samples < TIMELINE_ROWS ? c->n_samples : TIMELINE_ROWS;
    for (int k = 0; k < rows; k++) {
        int i = rows == 1 ? 0 : (int)((long)k * (c->n_samples - 1) / (rows - 1));
        const PrefixSample *x = &c->samples[i];
        fprintf(f, "  %14s %5ld %6d %13d %6d   %5.1f%% / %5.1f%%\n", "", x->step, x->held, x->cached_free,
                total - x->held - x->cached_free, 100.0 * x->held / total,
                100.0 * (x->held + x->cached_free) / total);
    }
}

void prefix_report_table(FILE *f, void *ctx, const ServingRun *run)
{
    const PrefixCache *c = ctx;
    paged_report_table(f, c->server, run);
    long computed = c->query_tokens - c->hit_tokens;
    double steps = c->steps ? (double)c->steps : 1.0;
    fprintf(f, "prefix cache (%s, block size %d)\n", prefix_cache_mode_name(c->mode), c->block_size);
    fprintf(f, "  prompts        %ld admissions needed K/V for %ld positions: %ld cached (hit rate %.1f%%), "
               "%ld computed\n",
            c->admissions, c->query_tokens, c->hit_tokens, 100.0 * prefix_cache_hit_rate(c), computed);
    fprintf(f, "  last block     %ld cached positions recomputed: a fully cached sequence computes its last block "
               "again, for its logits\n",
            c->recomputed_tokens);
    if (c->mode != PREFIX_CACHE_OFF) {
        fprintf(f, "  cached blocks  %d at the end, %d of them free; at most %d cached but free after a step; %ld "
                   "evictions; %ld computed twice at once\n",
                blocks_cached_now(c), c->server->kv.pool.n_parked, c->cached_free_peak, evictions(c), c->duplicates);
        if (c->mode == PREFIX_CACHE_RADIX)
            fprintf(f, "  radix tree     %d nodes now; %ld edges split\n", c->radix.n_nodes, c->radix.splits);
    }
    print_over_time(f, c);
    fprintf(f, "  KV cache usage peak %.1f%%, average %.1f%% counting cached-but-free blocks as free (vLLM's "
               "kv_cache_usage); peak %.1f%%, average %.1f%% counting them as used\n",
            100.0 * c->usage_peak, 100.0 * c->usage_sum / steps, 100.0 * c->usage_with_cached_peak,
            100.0 * c->usage_with_cached_sum / steps);
    fprintf(f, "  first token    after %.1f ms on average, %.1f ms at most, of serving time (every request of a file "
               "arrives at step 0)\n",
            c->ttft_count ? 1e3 * c->ttft_sum / c->ttft_count : 0.0, 1e3 * c->ttft_max);
    fprintf(f, "  at the peak    step %ld: %d blocks held, %d of them shared by two or more tables, saving %d "
               "blocks (chapter 4's \"sharing\" line counts prefix sharing too)\n",
            c->held_peak_step, c->held_peak, c->shared_at_peak, c->saved_at_peak);
    char a[32];
    fprintf(f, "  metadata       %s of kv_metadata for the cache (in chapter 4's total above)\n",
            cli_format_bytes(a, sizeof a, (double)metadata_bytes(c)));
    fprintf(f, "  waste          cached-but-free blocks are free memory, not reservations: they are in no part of "
               "the breakdown above, and \"used\" in chapter 4's lines counts only blocks a table holds\n");
}

static void json_timeline(JsonWriter *j, const PrefixCache *c)
{
    json_begin_array(j, "cached_free_timeline");
    for (int i = 0; i < c->n_samples; i++) {
        int was_pretty = j->pretty;
        json_begin_array(j, NULL);
        j->pretty = 0; /* one [step, held, cached_free] triple per line */
        json_int(j, NULL, c->samples[i].step);
        json_int(j, NULL, c->samples[i].held);
        json_int(j, NULL, c->samples[i].cached_free);
        json_end_array(j);
        j->pretty = was_pretty;
    }
    json_end_array(j);
}

void prefix_report_json(JsonWriter *j, void *ctx, const ServingRun *run)
{
    const PrefixCache *c = ctx;
    double steps = c->steps ? (double)c->steps : 1.0;
    paged_report_json(j, c->server, run);
    json_string(j, "prefix_cache", prefix_cache_mode_name(c->mode));
    json_int(j, "prefix_cache_admissions", c->admissions);
    json_int(j, "prefix_cache_query_tokens", c->query_tokens);
    json_int(j, "prefix_cache_hit_tokens", c->hit_tokens);
    json_int(j, "prefill_tokens_computed", c->query_tokens - c->hit_tokens);
    json_double(j, "prefix_cache_hit_rate", prefix_cache_hit_rate(c));
    json_int(j, "prefix_cache_recomputed_tokens", c->recomputed_tokens);
    json_int(j, "prefix_cache_evictions", evictions(c));
    json_int(j, "prefix_cache_duplicates", c->duplicates);
    json_int(j, "cached_blocks_at_end", blocks_cached_now(c));
    json_int(j, "prefix_cache_metadata_bytes", (long long)metadata_bytes(c));
    json_int(j, "cached_free_blocks_peak", c->cached_free_peak);
    json_int(j, "blocks_held_peak", c->held_peak);
    json_int(j, "blocks_held_peak_step", c->held_peak_step);
    json_int(j, "blocks_shared_at_peak", c->shared_at_peak);
    json_int(j, "blocks_saved_at_peak", c->saved_at_peak);
    json_double(j, "kv_cache_usage_peak", c->usage_peak);
    json_double(j, "kv_cache_usage_avg", c->usage_sum / steps);
    json_double(j, "kv_cache_usage_with_cached_peak", c->usage_with_cached_peak);
    json_double(j, "kv_cache_usage_with_cached_avg", c->usage_with_cached_sum / steps);
    json_double(j, "time_to_first_token_mean_s", c->ttft_count ? c->ttft_sum / c->ttft_count : 0.0);
    json_double(j, "time_to_first_token_max_s", c->ttft_max);
    json_timeline(j, c);
}
