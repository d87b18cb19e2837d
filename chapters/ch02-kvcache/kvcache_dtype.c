/* Extension of chapter 2: --kv-dtype, the contiguous cache with its rows in
 * a smaller element type (kvcache_dtype.h says what it adds, the option and
 * the book section). It calls the core (kv_cache_initial_capacity(),
 * kv_cache_grow_target()) and common/cpu/kv_dtype.h; the core calls it
 * only from main(), when --kv-dtype is not f32. */
#include "kvcache_dtype.h"

#include <string.h>

#include "mem.h"

size_t kv_cache_typed_bytes(const KvCacheTyped *c, int capacity)
{
    return 2 * (size_t)c->book.cfg.n_layers * (size_t)capacity * c->row_bytes;
}

/* Keys and values as the two halves of one allocation of capacity rows per layer. */
static void attach(KvCacheTyped *c, unsigned char *storage, int capacity)
{
    c->storage = storage;
    c->keys = storage;
    c->values = storage + (size_t)c->book.cfg.n_layers * (size_t)capacity * c->row_bytes;
    c->book.capacity = capacity;
}

int kv_cache_typed_init(KvCacheTyped *c, const ModelConfig *cfg, KvAllocPolicy policy, KvDtype type, int n_prompt,
                        Err *err)
{
    memset(c, 0, sizeof *c);
    if (kv_row_format_init(&c->row, type, cfg->n_kv_heads, model_head_dim(cfg), err))
        return -1;
    c->row_bytes = kv_row_bytes(&c->row);
    c->book.cfg = *cfg;
    c->book.policy = policy;
    c->book.kv_dim = model_kv_dim(cfg);
    if (n_prompt < 1 || n_prompt > cfg->seq_len)
        return err_set(err, "a prompt of %d tokens is more than the %d positions a cache can hold", n_prompt,
                       cfg->seq_len);
    int capacity = kv_cache_initial_capacity(policy, n_prompt, cfg->seq_len);
    size_t bytes = kv_cache_typed_bytes(c, capacity);
    unsigned char *storage = mem_alloc(MEM_KV, bytes);
    if (!storage)
        return err_set(err, "out of memory for a %s KV cache of %d positions (%zu bytes)", kv_dtype_name(type),
                       capacity, bytes);
    attach(c, storage, capacity);
    c->book.initial_capacity = capacity;
    c->book.peak_held_bytes = bytes;
    return 0;
}

void kv_cache_typed_free(KvCacheTyped *c)
{
    mem_free(c->storage);
    memset(c, 0, sizeof *c);
}

/* --kv-alloc grow: the core's move (kv_cache_grow()) with rows of
 * row_bytes: allocate, copy each layer's stored rows (the layer stride
 * changes with the capacity), free the old buffer, count the move. */
static int grow(KvCacheTyped *c, int new_capacity, Err *err)
{
    KvCache *b = &c->book;
    size_t old_bytes = kv_cache_typed_bytes(c, b->capacity), new_bytes = kv_cache_typed_bytes(c, new_capacity);
    unsigned char *bigger = mem_alloc(MEM_KV, new_bytes);
    if (!bigger)
        return err_set(err, "out of memory moving the %s KV cache to %d positions (%zu bytes)",
                       kv_dtype_name(c->row.type), new_capacity, new_bytes);
    b->peak_held_bytes = old_bytes + new_bytes > b->peak_held_bytes ? old_bytes + new_bytes : b->peak_held_bytes;
    unsigned char *old_storage = c->storage, *old_keys = c->keys, *old_values = c->values;
    int old_capacity = b->capacity;
    attach(c, bigger, new_capacity);
    size_t stored = (size_t)b->length * c->row_bytes; /* one layer's stored rows */
    for (int l = 0; l < b->cfg.n_layers; l++) {
        memcpy(c->keys + (size_t)l * (size_t)new_capacity * c->row_bytes,
               old_keys + (size_t)l * (size_t)old_capacity * c->row_bytes, stored);
        memcpy(c->values + (size_t)l * (size_t)new_capacity * c->row_bytes,
               old_values + (size_t)l * (size_t)old_capacity * c->row_bytes, stored);
    }
    mem_free(old_storage);
    b->reallocations++;
    b->bytes_copied += 2 * (size_t)b->cfg.n_layers * stored;
    return 0;
}

int kv_cache_typed_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    KvCacheTyped *c = ctx;
    int target = 0;
    if (n_tokens > c->book.capacity &&
        (kv_cache_grow_target(&c->book, n_tokens, &target, err) || grow(c, target, err)))
        return -1;
    /* The storage has room now; which positions are cached is the core's
     * bookkeeping, the lab's kv_cache_prepare() on the book (whose float
     * buffers stay NULL: it never needs to grow them). */
    return kv_cache_prepare(&c->book, n_tokens, cached, err);
}

/* Row (layer, pos) of one half of the cache. */
static unsigned char *row_at(const KvCacheTyped *c, unsigned char *half, int layer, int pos)
{
    return half + ((size_t)layer * (size_t)c->book.capacity + (size_t)pos) * c->row_bytes;
}

void kv_cache_typed_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    KvCacheTyped *c = ctx;
    kv_row_store(row_at(c, c->keys, layer, e->pos), k, &c->row);
    kv_row_store(row_at(c, c->values, layer, e->pos), v, &c->row);
}

void kv_cache_typed_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                           float *scores)
{
    KvCacheTyped *c = ctx;
    int kv_head = head / model_kv_mul(&c->book.cfg);
    kv_attention_rows(out, q, row_at(c, c->keys, layer, 0), row_at(c, c->values, layer, 0), e->pos + 1, c->row_bytes,
                      kv_head, &c->row, scores);
}

void kv_cache_typed_usage(void *ctx, size_t *reserved, size_t *used)
{
    const KvCacheTyped *c = ctx;
    size_t per_token = kv_dtype_bytes_per_token(&c->book.cfg, c->row.type);
    *reserved = (size_t)c->book.capacity * per_token;
    *used = (size_t)c->book.length * per_token;
}

SingleStreamKv kv_cache_typed_strategy(KvCacheTyped *c)
{
    return (SingleStreamKv){
        .seam = {.ctx = c, .store = kv_cache_typed_store, .attend = kv_cache_typed_attend},
        .prepare = kv_cache_typed_prepare,
        .usage = kv_cache_typed_usage,
    };
}
