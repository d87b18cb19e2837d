/* Chapter 2 lab: keep each token's K and V, computed once.
 *
 * The exercise version of this file (exercises/ch02/kvcache.c) is generated
 * from this one by scripts/make-exercises.sh: each region between LAB BEGIN
 * and LAB END is replaced by its stub. Run `make lab CH=2` to test yours. */
#include "kvcache.h"

#include <string.h>

#include "lab.h"
#include "mem.h"
#include "ops.h"

int kv_cache_initial_capacity(KvAllocPolicy policy, int n_prompt, int seq_len)
{
    if (policy == KV_ALLOC_MAX)
        return seq_len;
    int capacity = KV_CACHE_GROW_MIN;
    while (capacity < n_prompt)
        capacity *= 2;
    return capacity < seq_len ? capacity : seq_len;
}

size_t kv_cache_bytes(const ModelConfig *cfg, int capacity)
{
    return 2 * (size_t)cfg->n_layers * (size_t)capacity * (size_t)model_kv_dim(cfg) * sizeof(float);
}

/* Points keys and values at the two halves of one allocation. */
static void kv_cache_attach(KvCache *kv, float *storage, int capacity)
{
    size_t half = (size_t)kv->cfg.n_layers * (size_t)capacity * (size_t)kv->kv_dim;
    kv->storage = storage;
    kv->keys = storage;        /* [n_layers][capacity][kv_dim] */
    kv->values = storage + half; /* [n_layers][capacity][kv_dim] */
    kv->capacity = capacity;
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

int kv_cache_grow(KvCache *kv, int new_capacity, Err *err)
{
    if (new_capacity <= kv->capacity || new_capacity > kv->cfg.seq_len)
        return err_set(err, "cannot grow a KV cache of %d positions to %d (the model's seq_len is %d)", kv->capacity,
                       new_capacity, kv->cfg.seq_len);
    size_t row_bytes = (size_t)kv->kv_dim * sizeof(float);
    int n_layers = kv->cfg.n_layers;
    // LAB BEGIN(ch02.grow): allocate new_capacity positions (mem_alloc, MEM_KV), copy rows 0..length-1 of every layer's keys and values, free the old buffer, attach the new one; count reallocations, bytes_copied and peak_held_bytes (old + new bytes, while both exist)
    size_t old_bytes = kv_cache_bytes(&kv->cfg, kv->capacity);
    size_t new_bytes = kv_cache_bytes(&kv->cfg, new_capacity);
    float *storage = mem_alloc(MEM_KV, new_bytes);
    if (!storage)
        return err_set(err, "out of memory growing the KV cache to %d positions (%zu bytes)", new_capacity, new_bytes);
    /* Both buffers exist until the old one is freed: that is the peak. */
    if (old_bytes + new_bytes > kv->peak_held_bytes)
        kv->peak_held_bytes = old_bytes + new_bytes;
    float *old_keys = kv->keys, *old_values = kv->values;
    int old_capacity = kv->capacity;
    float *old_storage = kv->storage;
    kv_cache_attach(kv, storage, new_capacity);
    /* The layer stride changes with the capacity, so each layer's block of
     * rows moves separately: [layer][capacity][kv_dim]. */
    size_t block = (size_t)kv->length * row_bytes;
    for (int l = 0; l < n_layers; l++) {
        size_t from = (size_t)l * (size_t)old_capacity * (size_t)kv->kv_dim;
        size_t to = (size_t)l * (size_t)new_capacity * (size_t)kv->kv_dim;
        memcpy(kv->keys + to, old_keys + from, block);
        memcpy(kv->values + to, old_values + from, block);
    }
    mem_free(old_storage);
    kv->reallocations++;
    kv->bytes_copied += 2 * (size_t)n_layers * block;
    // LAB STUB:
    // (void)row_bytes; (void)n_layers;
    // LAB_TODO("move the cache into a buffer of new_capacity positions and count the move");
    // return err_set(err, "kv_cache_grow is not written yet (cannot grow to %d positions)", new_capacity);
    // LAB END
    return 0;
}

/* Makes room for n_tokens positions: the grow policy doubles until they
 * fit (one reallocation, however many doublings); max never has to. */
static int kv_cache_make_room(KvCache *kv, int n_tokens, Err *err)
{
    int seq_len = kv->cfg.seq_len;
    if (n_tokens > seq_len || kv->policy == KV_ALLOC_MAX)
        return err_set(err, "the sequence needs %d positions; the KV cache holds %d (seq_len %d)", n_tokens,
                       kv->capacity, seq_len);
    int target = kv->capacity;
    while (target < n_tokens)
        target = 2 * target < seq_len ? 2 * target : seq_len;
    return kv_cache_grow(kv, target, err);
}

int kv_cache_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    KvCache *kv = ctx;
    if (n_tokens > kv->capacity && kv_cache_make_room(kv, n_tokens, err))
        return -1;
    // LAB BEGIN(ch02.prepare): positions 0..kv->length-1 already have K/V: report them as cached, and record that after this step 0..n_tokens-1 will
    if (n_tokens <= kv->length)
        return err_set(err, "the sequence has %d tokens but the cache already holds %d: nothing new to run", n_tokens,
                       kv->length);
    *cached = kv->length;
    kv->length = n_tokens;
    // LAB STUB:
    // (void)n_tokens;
    // *cached = 0;
    // LAB_TODO("say how many leading positions already have K/V, and remember how many will after this step");
    // LAB END
    return 0;
}

void kv_cache_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    KvCache *kv = ctx;
    int kv_dim = kv->kv_dim;
    // LAB BEGIN(ch02.store): copy k and v into row (layer, e->pos) of kv->keys and kv->values ([n_layers][capacity][kv_dim])
    size_t row = ((size_t)layer * (size_t)kv->capacity + (size_t)e->pos) * (size_t)kv_dim;
    memcpy(kv->keys + row, k, (size_t)kv_dim * sizeof(float));
    memcpy(kv->values + row, v, (size_t)kv_dim * sizeof(float));
    // LAB STUB:
    // (void)layer; (void)e; (void)k; (void)v; (void)kv_dim;
    // LAB_TODO("append the token's key and value at row (layer, e->pos) of the cache");
    // LAB END
}

void kv_cache_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *scores)
{
    KvCache *kv = ctx;
    const ModelConfig *c = &kv->cfg;
    int head_dim = model_head_dim(c), kv_dim = kv->kv_dim;
    // LAB BEGIN(ch02.attend): find this layer's rows and this head's KV slice (KV head = head / kv_mul) in the cache, then attention_reference() over positions 0..e->pos with a stride of kv_dim
    size_t layer_rows = (size_t)layer * (size_t)kv->capacity * (size_t)kv_dim; /* start of [capacity][kv_dim] */
    size_t head_offset = (size_t)(head / model_kv_mul(c)) * (size_t)head_dim;   /* the KV head's slice of a row */
    const float *k_head = kv->keys + layer_rows + head_offset;   /* [pos][kv_dim], read head_dim floats per row */
    const float *v_head = kv->values + layer_rows + head_offset; /* same layout */
    /* Causal: the token sees itself and everything before it. The shared
     * reference does chapter 1's arithmetic in chapter 1's order. */
    attention_reference(out, q, k_head, v_head, e->pos + 1, kv_dim, head_dim, scores);
    // LAB STUB:
    // (void)q; (void)scores; (void)e; (void)head; (void)kv_dim; (void)layer;
    // memset(out, 0, (size_t)head_dim * sizeof(float));
    // LAB_TODO("causal attention of one head over the cached positions 0..e->pos");
    // LAB END
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
