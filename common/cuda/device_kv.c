/* What the device K/V stores share: the per-layer storage, and the store
 * in which a sequence's positions are consecutive rows from a first row
 * (chapters 1 to 3). The chapters' own stores, built on these, live in
 * each chapter's device.c (see the table in device_kv.h). */
#include "device_kv.h"

#include <string.h>

#include "mem.h"

#ifdef KVLAB_CUDA

#include "cuda_check.h"
#include "kernels.h"

/* ------------------------------------------------------------ storage */

size_t device_kv_row_bytes(const DeviceKvLayers *c) { return (size_t)c->kv_dim * dtype_bytes(c->type); }
size_t device_kv_layer_bytes(const DeviceKvLayers *c) { return (size_t)c->rows * device_kv_row_bytes(c); }

int device_kv_layers_alloc(DeviceKvLayers *c, Err *err)
{
    size_t bytes = (size_t)c->layers * device_kv_layer_bytes(c);
    if (device_alloc(&c->k, bytes, c->cat, err) || device_alloc(&c->v, bytes, c->cat, err)) {
        device_free(c->k, NULL);
        c->k = NULL;
        return -1;
    }
    return 0;
}

void device_kv_layers_free(DeviceKvLayers *c)
{
    device_free(c->k, NULL);
    device_free(c->v, NULL);
    c->k = c->v = NULL;
}

void *device_kv_layer(const DeviceKvLayers *c, void *base, int layer)
{
    return (char *)base + (size_t)layer * device_kv_layer_bytes(c);
}

KvkHeads device_kv_heads(const ModelConfig *cfg)
{
    return (KvkHeads){cfg->n_heads, cfg->n_kv_heads, model_head_dim(cfg)};
}

int device_kv_write_version(int kv_dim) { return kv_dim % 4 == 0 ? 2 : 1; }

/* ------------------------------------- consecutive rows (chapters 1 to 3) */

/* Where position pos of sequence seq goes, or -1 with a message. */
static long long row_base(DeviceRowStore *s, const BatchEntry *e, Err *err)
{
    if (s->max_seqs == 0) {
        if (e->pos >= s->cache.rows)
            return err_set(err, "position %d is beyond the %lld reserved", e->pos, s->cache.rows);
        return 0;
    }
    if (e->seq < 0 || e->seq >= s->max_seqs || e->pos >= s->region_rows[e->seq])
        return err_set(err, "sequence %d position %d is outside its region", e->seq, e->pos);
    return s->region_first[e->seq];
}

static int rows_begin_step(void *ctx, const DeviceStep *st, Err *err)
{
    DeviceRowStore *s = ctx;
    if (st->n > s->max_tokens)
        return err_set(err, "a step of %d tokens exceeds the K/V store's %d", st->n, s->max_tokens);
    long long *slots = s->step_host, *base = s->step_host + s->max_tokens;
    for (int i = 0; i < st->n; i++) {
        long long b = row_base(s, &st->entries[i], err);
        if (b < 0)
            return -1;
        base[i] = b;
        slots[i] = b + st->entries[i].pos;
        if (st->entries[i].pos + 1 > s->stored)
            s->stored = st->entries[i].pos + 1;
    }
    CUDA_CHECK(err, cudaMemcpyAsync(s->step_dev, s->step_host, 2 * (size_t)s->max_tokens * sizeof(long long),
                                    cudaMemcpyHostToDevice, s->dev->stream));
    return 0;
}

/* A store of one layer (chapter 1) reuses it: layer l writes where layer
 * l-1 did. */
static int stored_layer(const DeviceRowStore *s, int layer) { return s->cache.layers == 1 ? 0 : layer; }

static int rows_store(void *ctx, int layer, const DeviceStep *st, const float *k, const float *v, Err *err)
{
    DeviceRowStore *s = ctx;
    int l = stored_layer(s, layer);
    return kvk_kv_write(device_kv_write_version(s->cache.kv_dim), s->cache.type,
                        device_kv_layer(&s->cache, s->cache.k, l), device_kv_layer(&s->cache, s->cache.v, l), k, v,
                        s->step_dev, st->n, s->cache.kv_dim, s->dev->stream, err);
}

static int rows_attend(void *ctx, int layer, const DeviceStep *st, const float *q, float *out, Err *err)
{
    DeviceRowStore *s = ctx;
    int l = stored_layer(s, layer);
    /* max_pos is the model's seq_len, not this step's: the launch then
     * depends on n only, so a captured step stays valid. */
    return kvk_attention(s->attention, s->cache.type, out, q, device_kv_layer(&s->cache, s->cache.k, l),
                         device_kv_layer(&s->cache, s->cache.v, l), s->step_dev + s->max_tokens, st->pos, st->n,
                         s->cfg.seq_len, device_kv_heads(&s->cfg), NULL, s->dev->stream, err);
}

static void rows_free(void *ctx)
{
    DeviceRowStore *s = ctx;
    device_kv_layers_free(&s->cache);
    device_free(s->step_dev, NULL);
    mem_free(s->step_host);
    mem_free(s->region_first);
    mem_free(s->region_rows);
    mem_free(s);
}

int device_row_store_open(DeviceKv *kv, size_t store_bytes, const char *kind, const Device *dev,
                          const ModelConfig *cfg, Dtype t, int layers, long long rows, MemCategory cat,
                          int max_tokens, int max_seqs, Err *err)
{
    memset(kv, 0, sizeof *kv);
    if (max_tokens <= 0 || rows <= 0)
        return err_set(err, "K/V store: bad capacity (%d tokens, %lld rows)", max_tokens, rows);
    int attention = kvk_attention_pick(t, device_kv_heads(cfg), cfg->seq_len);
    if (!attention)
        return err_set(err, "no attention kernel supports head_dim %d with %d positions in %s", model_head_dim(cfg),
                       cfg->seq_len, dtype_name(t));
    DeviceRowStore *s = mem_alloc(MEM_KV_METADATA, store_bytes);
    if (!s)
        return err_set(err, "out of memory");
    s->kind = kind;
    s->dev = dev;
    s->cfg = *cfg;
    s->attention = attention;
    s->max_tokens = max_tokens;
    s->max_seqs = max_seqs;
    s->cache = (DeviceKvLayers){.type = t, .kv_dim = model_kv_dim(cfg), .layers = layers, .rows = rows, .cat = cat};
    s->step_host = mem_alloc_array(MEM_KV_METADATA, 2 * (size_t)max_tokens, sizeof(long long));
    if (max_seqs > 0) {
        s->region_first = mem_alloc_array(MEM_KV_METADATA, (size_t)max_seqs, sizeof(long long));
        s->region_rows = mem_alloc_array(MEM_KV_METADATA, (size_t)max_seqs, sizeof(long long));
    }
    if (!s->step_host || (max_seqs > 0 && (!s->region_first || !s->region_rows))) {
        rows_free(s);
        return err_set(err, "out of memory");
    }
    if (device_alloc(&s->step_dev, 2 * (size_t)max_tokens * sizeof(long long), MEM_KV_METADATA, err) ||
        device_kv_layers_alloc(&s->cache, err)) {
        rows_free(s);
        return -1;
    }
    kv->seam = (DeviceKvSeam){.ctx = s, .begin_step = rows_begin_step, .store = rows_store, .attend = rows_attend,
                              .graph_safe = 1};
    kv->close = rows_free;
    kv->kv_type = t;
    return 0;
}

DeviceRowStore *device_row_store_of(const DeviceKv *kv, const char *kind)
{
    DeviceRowStore *s = kv->close == rows_free ? kv->seam.ctx : NULL;
    return s && strcmp(s->kind, kind) == 0 ? s : NULL;
}

#endif

void device_kv_close(DeviceKv *kv)
{
    if (kv->close)
        kv->close(kv->seam.ctx);
    memset(kv, 0, sizeof *kv);
}
