/* Chapter 2 on the device (--device cuda): one request's contiguous cache
 * [layer][position][kv_dim] in device memory, reserved for seq_len
 * (--kv-alloc max) or grown by doubling (--kv-alloc grow): a row store
 * (common/cuda/device_kv.h) with the growth and its costs. */
#include "kvcache.h"

#include <string.h>

#ifdef KVLAB_CUDA

#include "cuda_check.h"

/* The row store, and what growing it has cost (chapter 2's table). */
typedef struct {
    DeviceRowStore rows;    /* first: the seam's context is this struct */
    int grow;               /* 1: --kv-alloc grow */
    int initial_rows;       /* capacity when opened */
    int reallocations;      /* moves to a larger cache */
    size_t bytes_copied;    /* K/V bytes those moves copied */
    size_t peak_held_bytes; /* most K/V bytes allocated at once (old + new while growing) */
} DeviceCache;

/* Chapter 2, grow: move to a cache twice as large (or to seq_len), copying
 * the stored rows of every layer. Old and new both exist during the copy:
 * the ledger's device peak shows that transient. */
static int regrow(DeviceCache *c, int n_tokens, Err *err)
{
    DeviceRowStore *s = &c->rows;
    long long capacity = s->cache.rows;
    while (capacity < n_tokens)
        capacity *= 2;
    if (capacity > s->cfg.seq_len)
        capacity = s->cfg.seq_len;
    DeviceKvLayers bigger = s->cache;
    bigger.rows = capacity;
    bigger.k = bigger.v = NULL;
    TRY(device_kv_layers_alloc(&bigger, err));
    size_t held = (size_t)bigger.layers * 2 * (device_kv_layer_bytes(&bigger) + device_kv_layer_bytes(&s->cache));
    if (held > c->peak_held_bytes)
        c->peak_held_bytes = held;
    size_t used = (size_t)s->stored * device_kv_row_bytes(&s->cache);
    size_t old_pitch = device_kv_layer_bytes(&s->cache), new_pitch = device_kv_layer_bytes(&bigger);
    if (used > 0) {
        cudaError_t rk = cudaMemcpy2DAsync(bigger.k, new_pitch, s->cache.k, old_pitch, used, (size_t)s->cache.layers,
                                           cudaMemcpyDeviceToDevice, s->dev->stream);
        cudaError_t rv = rk != cudaSuccess ? rk
                                           : cudaMemcpy2DAsync(bigger.v, new_pitch, s->cache.v, old_pitch, used,
                                                               (size_t)s->cache.layers, cudaMemcpyDeviceToDevice,
                                                               s->dev->stream);
        if (rv != cudaSuccess || device_sync(s->dev, err)) {
            device_kv_layers_free(&bigger);
            if (rv != cudaSuccess)
                return err_set(err, "%s:%d: cudaMemcpy2DAsync (growing the cache): %s", __FILE__, __LINE__,
                               cudaGetErrorString(rv));
            return -1;
        }
    }
    device_kv_layers_free(&s->cache);
    s->cache = bigger;
    c->reallocations++;
    c->bytes_copied += 2 * used * (size_t)s->cache.layers;
    return 0;
}

static int cache_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    DeviceCache *c = ctx;
    DeviceRowStore *s = &c->rows;
    if (n_tokens > s->cfg.seq_len)
        return err_set(err, "%d positions exceed the model's seq_len %d", n_tokens, s->cfg.seq_len);
    if (n_tokens > s->cache.rows) {
        if (!c->grow)
            return err_set(err, "%d positions exceed the %lld reserved", n_tokens, s->cache.rows);
        TRY(regrow(c, n_tokens, err));
    }
    *cached = s->stored < n_tokens ? s->stored : n_tokens - 1;
    return 0;
}

static void cache_usage(void *ctx, size_t *reserved, size_t *used)
{
    const DeviceRowStore *s = ctx;
    size_t per_position = 2 * (size_t)s->cache.layers * device_kv_row_bytes(&s->cache);
    *reserved = (size_t)s->cache.rows * per_position;
    *used = (size_t)s->stored * per_position;
}

int device_kv_open_contiguous(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int grow,
                              int n_prompt, int max_tokens, Err *err)
{
    long long rows = cfg->seq_len;
    if (grow) {
        rows = 16;
        while (rows < n_prompt)
            rows *= 2;
        if (rows > cfg->seq_len)
            rows = cfg->seq_len;
    }
    TRY(device_row_store_open(kv, sizeof(DeviceCache), "contiguous", dev, cfg, t, cfg->n_layers, rows, MEM_KV,
                              max_tokens, 0, err));
    DeviceCache *c = kv->seam.ctx;
    c->grow = grow;
    c->initial_rows = (int)rows;
    c->peak_held_bytes = (size_t)c->rows.cache.layers * 2 * device_kv_layer_bytes(&c->rows.cache);
    kv->prepare = cache_prepare;
    kv->usage = cache_usage;
    /* A grown cache moves: kernel arguments captured in a graph would point
     * at the old one. */
    kv->seam.graph_safe = !grow;
    return 0;
}

void device_kv_contiguous_stats(const DeviceKv *kv, DeviceContiguousStats *stats)
{
    memset(stats, 0, sizeof *stats);
    const DeviceCache *c = (const DeviceCache *)device_row_store_of(kv, "contiguous");
    if (!c)
        return;
    stats->capacity = (int)c->rows.cache.rows;
    stats->initial_capacity = c->initial_rows;
    stats->length = c->rows.stored;
    stats->reallocations = c->reallocations;
    stats->bytes_copied = c->bytes_copied;
    stats->peak_held_bytes = c->peak_held_bytes;
}

#else /* built without CUDA: device_open() fails first */

int device_kv_open_contiguous(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int grow,
                              int n_prompt, int max_tokens, Err *err)
{
    (void)dev, (void)cfg, (void)t, (void)grow, (void)n_prompt, (void)max_tokens;
    memset(kv, 0, sizeof *kv);
    return err_set(err, "this build has no CUDA support");
}

void device_kv_contiguous_stats(const DeviceKv *kv, DeviceContiguousStats *stats)
{
    (void)kv;
    memset(stats, 0, sizeof *stats);
}

#endif

int kv_cache_device_open(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype kv_type,
                         const CliOptions *opts, int n_prompt, int *max_step, Err *err)
{
    *max_step = n_prompt; /* the prompt in one step, then one token per step */
    return device_kv_open_contiguous(kv, dev, cfg, kv_type, strcmp(opts->kv_alloc, "grow") == 0, n_prompt,
                                     *max_step, err);
}
