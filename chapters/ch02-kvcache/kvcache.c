/* Chapter 2: the contiguous cache's buffers, sizes and policies, and the
 * strategy that hands kv_cache_prepare(), kv_cache_store() and
 * kv_cache_attend() (the lab, solutions/ch02/, with kv_cache_grow()) to the
 * generation loop. */
#include "kvcache.h"

#include <string.h>

#include "mem.h"

int kv_cache_initial_capacity(KvAllocPolicy policy, int n_prompt, int seq_len)
{
    if (policy == KV_ALLOC_MAX)
        return seq_len;
    int capacity = KV_CACHE_GROW_MIN;
    while (capacity < n_prompt)
        capacity *= 2;
    return capacity < seq_len ? capacity : seq_len;
}

int kv_cache_init(KvCache *kv, const ModelConfig *cfg, KvAllocPolicy policy, int n_prompt, Err *err)
{
    memset(kv, 0, sizeof *kv);
    kv->cfg = *cfg;
    kv->policy = policy;
    kv->kv_dim = model_kv_dim(cfg);
    if (n_prompt < 1 || n_prompt > cfg->seq_len)
        return err_set(err, "a prompt of %d tokens does not fit a cache of at most %d positions", n_prompt,
                       cfg->seq_len);
    int capacity = kv_cache_initial_capacity(policy, n_prompt, cfg->seq_len);
    size_t bytes = kv_cache_bytes(cfg, capacity);
    float *storage = mem_alloc(MEM_KV, bytes);
    if (!storage)
        return err_set(err, "out of memory for a KV cache of %d positions (%zu bytes)", capacity, bytes);
    kv_cache_attach(kv, storage, capacity);
    kv->initial_capacity = capacity;
    kv->peak_held_bytes = bytes;
    return 0;
}

void kv_cache_free(KvCache *kv)
{
    mem_free(kv->storage);
    memset(kv, 0, sizeof *kv);
}

void kv_cache_usage(void *ctx, size_t *reserved, size_t *used)
{
    const KvCache *kv = ctx;
    size_t per_token = model_kv_bytes_per_token(&kv->cfg, sizeof(float));
    *reserved = (size_t)kv->capacity * per_token;
    *used = (size_t)kv->length * per_token;
}

SingleStreamKv kv_cache_strategy(KvCache *kv)
{
    return (SingleStreamKv){
        .seam = {.ctx = kv, .store = kv_cache_store, .attend = kv_cache_attend},
        .prepare = kv_cache_prepare,
        .usage = kv_cache_usage,
    };
}

const char *kv_alloc_policy_name(KvAllocPolicy policy)
{
    return policy == KV_ALLOC_GROW ? "grow" : "max";
}

int kv_alloc_policy_parse(const char *name, KvAllocPolicy *policy, Err *err)
{
    if (strcmp(name, "max") == 0)
        *policy = KV_ALLOC_MAX;
    else if (strcmp(name, "grow") == 0)
        *policy = KV_ALLOC_GROW;
    else
        return err_set(err, "--kv-alloc: '%s' is not one of max, grow", name);
    return 0;
}
