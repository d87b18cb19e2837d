/* Chapter 2: the contiguous KV cache. Each token's K and V are computed
 * once and appended to one buffer per request; see kvcache.h for the idea
 * and solutions/ch02/kvcache.c for the code a student writes. This file
 * only wires the chapter into the shared program (common/run_single.c) and
 * adds the cache's lines to the memory table. */
#include <stdio.h>

#include "cli.h"
#include "kvcache.h"
#include "run_single.h"

static KvCache cache;

static int open_kv(const Model *m, const CliOptions *opts, int n_prompt, SingleStreamKv *kv, int *max_step, Err *err)
{
    KvAllocPolicy policy;
    if (kv_alloc_policy_parse(opts->kv_alloc, &policy, err) || kv_cache_init(&cache, &m->cfg, policy, n_prompt, err))
        return -1;
    *kv = kv_cache_strategy(&cache);
    *max_step = n_prompt; /* the first step feeds the whole prompt; later steps one token */
    return 0;
}

static void close_kv(SingleStreamKv *kv)
{
    (void)kv;
    kv_cache_free(&cache);
}

/* Capacity in positions after the run, and the formula that gives its bytes. */
static void formula_lines(FILE *f, const KvCache *kv)
{
    const ModelConfig *c = &kv->cfg;
    char a[32], b[32];
    size_t reserved = kv_cache_bytes(c, kv->capacity), used = kv_cache_bytes(c, kv->length);
    fprintf(f, "KV cache policy: --kv-alloc %s\n", kv_alloc_policy_name(kv->policy));
    fprintf(f, "  formula        2 x %d layers x %d kv heads x %d head_dim x 4 B x positions\n", c->n_layers,
            c->n_kv_heads, model_head_dim(c));
    fprintf(f, "  reserved       %d positions = %zu B (%s)\n", kv->capacity, reserved,
            cli_format_bytes(a, sizeof a, (double)reserved));
    fprintf(f, "  used           %d positions = %zu B (%s), %.1f%% of the reservation\n", kv->length, used,
            cli_format_bytes(b, sizeof b, (double)used), reserved ? 100.0 * (double)used / (double)reserved : 0.0);
}

static void cache_table(FILE *f, const SingleStreamKv *kv, const Generation *g)
{
    (void)kv;
    (void)g;
    char a[32];
    formula_lines(f, &cache);
    if (cache.policy == KV_ALLOC_MAX) {
        fprintf(f, "  unused         %d positions reserved for tokens that never came\n", cache.capacity - cache.length);
        return;
    }
    fprintf(f, "  started at     %d positions, doubled %d times\n", cache.initial_capacity, cache.reallocations);
    fprintf(f, "  bytes copied   %zu B by those reallocations\n", cache.bytes_copied);
    fprintf(f, "  transient peak %zu B (%s) while the old and the new buffer both existed\n", cache.peak_held_bytes,
            cli_format_bytes(a, sizeof a, (double)cache.peak_held_bytes));
}

static void cache_json(JsonWriter *j, const SingleStreamKv *kv, const Generation *g)
{
    (void)kv;
    (void)g;
    json_string(j, "kv_alloc", kv_alloc_policy_name(cache.policy));
    json_int(j, "kv_capacity_tokens", cache.capacity);
    json_int(j, "kv_length_tokens", cache.length);
    json_int(j, "kv_initial_capacity_tokens", cache.initial_capacity);
    json_int(j, "kv_reallocations", cache.reallocations);
    json_int(j, "kv_bytes_copied", (long long)cache.bytes_copied);
    json_int(j, "kv_transient_peak_bytes", (long long)cache.peak_held_bytes);
}

int main(int argc, char **argv)
{
    static const SingleStreamChapter chapter = {
        .program = {.name = "ch02-kvcache",
                    .summary = "Chapter 2: greedy decoding with a contiguous KV cache per request "
                               "(each token's K and V computed once).",
                    .features = CLI_MODEL | CLI_PROMPT | CLI_SAMPLING | CLI_KV_ALLOC},
        .kv_open = open_kv,
        .kv_close = close_kv,
        .extra_table = cache_table,
        .extra_json = cache_json,
        .keeps_kv = 1,
    };
    return run_single_main(&chapter, argc, argv);
}
