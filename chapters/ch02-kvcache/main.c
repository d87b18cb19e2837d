/* Chapter 2: the contiguous KV cache. Each token's K and V are computed
 * once and appended to one buffer per request; see kvcache.h for the idea
 * and where each part of it lives, and solutions/ch02/ for the code a
 * student writes. */
#include <stdio.h>

#include "cli.h"
#include "kvcache.h"
#include "kvcache_dtype.h"
#include "run_single.h"

static const CliProgram PROGRAM = {
    .name = "ch02-kvcache",
    .summary = "Chapter 2: greedy decoding with a contiguous KV cache per request "
               "(each token's K and V computed once).",
    .features = CLI_MODEL | CLI_PROMPT | CLI_CHAT | CLI_SAMPLING | CLI_KV_ALLOC | CLI_DEVICE | CLI_KV_DTYPE,
};

/* The run uses one of three caches, never two: the CPU cache, the CPU cache
 * in a smaller element type (--kv-dtype, the extension in kvcache_dtype.c),
 * or with --device cuda the device cache in run.dev.kv. */
typedef struct {
    SingleRun run;
    KvAllocPolicy policy;
    KvDtype dtype;      /* --kv-dtype */
    KvCache cache;      /* the CPU cache (f32) */
    KvCacheTyped typed; /* the CPU cache in another type */
} Chapter2;

/* What the table and the JSON say about the cache, read from the store the
 * run used. */
typedef struct {
    ModelConfig cfg;
    KvAllocPolicy policy;
    KvDtype dtype; /* the stored K/V's element type */
    int capacity, length, initial_capacity, reallocations;
    size_t bytes_copied, peak_held_bytes;
    const char *where; /* "" on the CPU */
} CacheFacts;

static CacheFacts cache_facts(const Chapter2 *c2)
{
    const KvCache *c = c2->dtype == KV_DTYPE_FP32 ? &c2->cache : &c2->typed.book;
    if (!c2->run.on_device)
        return (CacheFacts){c->cfg, c->policy, c2->dtype, c->capacity, c->length, c->initial_capacity,
                            c->reallocations, c->bytes_copied, c->peak_held_bytes, ""};
    DeviceContiguousStats s;
    device_kv_contiguous_stats(&c2->run.dev.kv, &s);
    return (CacheFacts){c2->run.assets.model.cfg, c2->policy, single_run_kv_dtype(&c2->run), s.capacity,
                        s.length, s.initial_capacity, s.reallocations, s.bytes_copied, s.peak_held_bytes,
                        " (device memory)"};
}

/* Capacity in positions after the run, and the formula that gives its bytes. */
static void formula_lines(FILE *f, const CacheFacts *k)
{
    const ModelConfig *c = &k->cfg;
    char a[32], b[32], head[64];
    size_t per_token = kv_dtype_bytes_per_token(c, k->dtype);
    size_t reserved = (size_t)k->capacity * per_token, used = (size_t)k->length * per_token;
    fprintf(f, "KV cache policy: --kv-alloc %s%s\n", kv_alloc_policy_name(k->policy), k->where);
    if (k->dtype != KV_DTYPE_FP32 && !*k->where) /* the device's types are in its own lines */
        fprintf(f, "  element type   --kv-dtype %s%s\n", kv_dtype_name(k->dtype),
                k->dtype == KV_DTYPE_INT8 ? ", one f32 scale per token and KV head beside the codes" : "");
    fprintf(f, "  formula        2 x %d layers x %d kv heads x %s x positions\n", c->n_layers, c->n_kv_heads,
            kv_dtype_head_formula(head, sizeof head, k->dtype, model_head_dim(c)));
    fprintf(f, "  reserved       %d positions = %zu B (%s)\n", k->capacity, reserved,
            cli_format_bytes(a, sizeof a, (double)reserved));
    fprintf(f, "  used           %d positions = %zu B (%s), %.1f%% of the reservation\n", k->length, used,
            cli_format_bytes(b, sizeof b, (double)used), reserved ? 100.0 * (double)used / (double)reserved : 0.0);
}

static void cache_table(FILE *f, void *ctx, const Generation *g)
{
    (void)g;
    char a[32];
    CacheFacts k = cache_facts(ctx);
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

static void cache_json(JsonWriter *j, void *ctx, const Generation *g)
{
    (void)g;
    CacheFacts k = cache_facts(ctx);
    json_string(j, "kv_alloc", kv_alloc_policy_name(k.policy));
    if (!*k.where) /* the device report has its own kv_dtype */
        json_string(j, "kv_dtype", kv_dtype_name(k.dtype));
    json_int(j, "kv_capacity_tokens", k.capacity);
    json_int(j, "kv_length_tokens", k.length);
    json_int(j, "kv_initial_capacity_tokens", k.initial_capacity);
    json_int(j, "kv_reallocations", k.reallocations);
    json_int(j, "kv_bytes_copied", (long long)k.bytes_copied);
    json_int(j, "kv_transient_peak_bytes", (long long)k.peak_held_bytes);
}

/* The cache under --kv-alloc, and the strategy the loop reaches it through. */
static int open_cache(Chapter2 *c2, SingleStreamKv *kv)
{
    SingleRun *run = &c2->run;
    if (kv_alloc_policy_parse(run->opts.kv_alloc, &c2->policy, &run->err))
        return -1;
    c2->dtype = single_run_kv_dtype(run);
    if (run->on_device) /* --device cuda: the same cache under the same policy, on the GPU */
        return single_run_start_device(run, kv_cache_device_open, kv);
    int n_prompt = run->gen.n_prompt;
    if (c2->dtype != KV_DTYPE_FP32) { /* --kv-dtype: the extension, kvcache_dtype.c */
        if (kv_cache_typed_init(&c2->typed, &run->assets.model.cfg, c2->policy, c2->dtype, n_prompt, &run->err))
            return -1;
        *kv = kv_cache_typed_strategy(&c2->typed);
        return single_run_start(run, n_prompt);
    }
    if (kv_cache_init(&c2->cache, &run->assets.model.cfg, c2->policy, n_prompt, &run->err))
        return -1;
    *kv = kv_cache_strategy(&c2->cache);
    return single_run_start(run, n_prompt); /* the first step feeds the whole prompt; later steps one token */
}

int main(int argc, char **argv)
{
    Chapter2 c2 = {0};
    SingleStreamKv kv;
    /* The loop (generate(), common/serving/generate.c) asks
     * kv_cache_prepare() how many positions already have K/V (all but the
     * newest token), runs only the new ones through the model, which
     * appends their K/V (kv_cache_store()) and attends over the cache
     * (kv_cache_attend()), and samples the next token. */
    int ok = single_run_open(&c2.run, &PROGRAM, argc, argv) == 0 && open_cache(&c2, &kv) == 0 &&
             single_run_generate(&c2.run, &kv) == 0;
    if (ok)
        single_run_report(&c2.run, 1, cache_table, cache_json, &c2);
    kv_cache_free(&c2.cache);
    kv_cache_typed_free(&c2.typed);
    return single_run_close(&c2.run);
}
