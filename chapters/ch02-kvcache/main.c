/* Chapter 2: the contiguous KV cache. Each token's K and V are computed
 * once and appended to one buffer per request; see kvcache.h for the idea
 * and solutions/ch02/kvcache.c for the code a student writes. This file
 * only wires the chapter into the shared program (common/run_single.c) and
 * adds the cache's lines to the memory table. */
#include <stdio.h>

#include "cli.h"
#include "kvcache.h"
#include "run_single.h"

/* The run uses one of two stores, never both: the CPU cache, or with
 * --device cuda the device cache, which run_single's DeviceRun owns and
 * keeps open until after the report. */
static KvCache cache;
static const DeviceKv *device_cache; /* NULL on the CPU */
static ModelConfig device_cfg;
static KvAllocPolicy device_policy;

static int open_kv(const Model *m, const CliOptions *opts, int n_prompt, SingleStreamKv *kv, int *max_step, Err *err)
{
    KvAllocPolicy policy;
    if (kv_alloc_policy_parse(opts->kv_alloc, &policy, err) || kv_cache_init(&cache, &m->cfg, policy, n_prompt, err))
        return -1;
    *kv = kv_cache_strategy(&cache);
    *max_step = n_prompt; /* the first step feeds the whole prompt; later steps one token */
    return 0;
}

/* --device cuda: the same cache under the same policy, on the GPU. */
static int open_kv_device(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                          const CliOptions *opts, int n_prompt, int *max_step, Err *err)
{
    if (kv_alloc_policy_parse(opts->kv_alloc, &device_policy, err) ||
        device_run_contiguous_kv(kv, dev, cfg, kv_type, opts, n_prompt, max_step, err))
        return -1;
    device_cache = kv;
    device_cfg = *cfg;
    return 0;
}

static void close_kv(SingleStreamKv *kv)
{
    (void)kv;
    kv_cache_free(&cache);
}

/* What the table and the JSON say about the cache, read from the store the
 * run used. */
typedef struct {
    ModelConfig cfg;
    KvAllocPolicy policy;
    size_t elem_bytes; /* bytes per stored K/V element */
    int capacity, length, initial_capacity, reallocations;
    size_t bytes_copied, peak_held_bytes;
    const char *where; /* "" on the CPU */
} CacheFacts;

static CacheFacts cache_facts(void)
{
    if (!device_cache)
        return (CacheFacts){cache.cfg, cache.policy, sizeof(float), cache.capacity, cache.length,
                            cache.initial_capacity, cache.reallocations, cache.bytes_copied, cache.peak_held_bytes, ""};
    DeviceContiguousStats s;
    device_kv_contiguous_stats(device_cache, &s);
    return (CacheFacts){device_cfg, device_policy, dtype_bytes(device_cache->kv_type), s.capacity, s.length,
                        s.initial_capacity, s.reallocations, s.bytes_copied, s.peak_held_bytes, " (device memory)"};
}

/* Capacity in positions after the run, and the formula that gives its bytes. */
static void formula_lines(FILE *f, const CacheFacts *k)
{
    const ModelConfig *c = &k->cfg;
    char a[32], b[32];
    size_t per_token = model_kv_bytes_per_token(c, k->elem_bytes);
    size_t reserved = (size_t)k->capacity * per_token, used = (size_t)k->length * per_token;
    fprintf(f, "KV cache policy: --kv-alloc %s%s\n", kv_alloc_policy_name(k->policy), k->where);
    fprintf(f, "  formula        2 x %d layers x %d kv heads x %d head_dim x %zu B x positions\n", c->n_layers,
            c->n_kv_heads, model_head_dim(c), k->elem_bytes);
    fprintf(f, "  reserved       %d positions = %zu B (%s)\n", k->capacity, reserved,
            cli_format_bytes(a, sizeof a, (double)reserved));
    fprintf(f, "  used           %d positions = %zu B (%s), %.1f%% of the reservation\n", k->length, used,
            cli_format_bytes(b, sizeof b, (double)used), reserved ? 100.0 * (double)used / (double)reserved : 0.0);
}

static void cache_table(FILE *f, const SingleStreamKv *kv, const Generation *g)
{
    (void)kv;
    (void)g;
    char a[32];
    CacheFacts k = cache_facts();
    formula_lines(f, &k);
    if (k.policy == KV_ALLOC_MAX) {
        fprintf(f, "  unused         %d positions reserved for tokens that never came\n", k.capacity - k.length);
        return;
    }
    fprintf(f, "  started at     %d positions, doubled %d times\n", k.initial_capacity, k.reallocations);
    fprintf(f, "  bytes copied   %zu B by those reallocations\n", k.bytes_copied);
    fprintf(f, "  transient peak %zu B (%s) while the old and the new buffer both existed\n", k.peak_held_bytes,
            cli_format_bytes(a, sizeof a, (double)k.peak_held_bytes));
}

static void cache_json(JsonWriter *j, const SingleStreamKv *kv, const Generation *g)
{
    (void)kv;
    (void)g;
    CacheFacts k = cache_facts();
    json_string(j, "kv_alloc", kv_alloc_policy_name(k.policy));
    json_int(j, "kv_capacity_tokens", k.capacity);
    json_int(j, "kv_length_tokens", k.length);
    json_int(j, "kv_initial_capacity_tokens", k.initial_capacity);
    json_int(j, "kv_reallocations", k.reallocations);
    json_int(j, "kv_bytes_copied", (long long)k.bytes_copied);
    json_int(j, "kv_transient_peak_bytes", (long long)k.peak_held_bytes);
}

int main(int argc, char **argv)
{
    static const SingleStreamChapter chapter = {
        .program = {.name = "ch02-kvcache",
                    .summary = "Chapter 2: greedy decoding with a contiguous KV cache per request "
                               "(each token's K and V computed once).",
                    .features = CLI_MODEL | CLI_PROMPT | CLI_SAMPLING | CLI_KV_ALLOC | CLI_DEVICE},
        .kv_open = open_kv,
        .kv_close = close_kv,
        .extra_table = cache_table,
        .extra_json = cache_json,
        .keeps_kv = 1,
        .device_kv_open = open_kv_device,
    };
    return run_single_main(&chapter, argc, argv);
}
