#include "device_kv.h"

#include <string.h>

#include "mem.h"

enum { KV_RECOMPUTE = 1, KV_CONTIGUOUS, KV_ARENA, KV_PAGED };

#ifdef KVLAB_CUDA

#include "cuda_check.h"
#include "kernels.h"

/* ------------------------------------------------------------ storage */

/* K and V of the stored layers: [layers][rows][kv_dim] each. */
typedef struct {
    Dtype type;
    int kv_dim;
    int layers;
    long long rows;
    MemCategory cat;
    void *k; /* [layers][rows][kv_dim] of type */
    void *v; /* same */
} CacheLayers;

static size_t row_bytes(const CacheLayers *c) { return (size_t)c->kv_dim * dtype_bytes(c->type); }
static size_t layer_bytes(const CacheLayers *c) { return (size_t)c->rows * row_bytes(c); }

static int cache_alloc(CacheLayers *c, Err *err)
{
    size_t bytes = (size_t)c->layers * layer_bytes(c);
    if (device_alloc(&c->k, bytes, c->cat, err) || device_alloc(&c->v, bytes, c->cat, err)) {
        device_free(c->k, NULL);
        c->k = NULL;
        return -1;
    }
    return 0;
}

static void cache_free(CacheLayers *c)
{
    device_free(c->k, NULL);
    device_free(c->v, NULL);
    c->k = c->v = NULL;
}

static void *layer_of(const CacheLayers *c, void *base, int layer)
{
    return (char *)base + (size_t)layer * layer_bytes(c);
}

static KvkHeads heads_of(const ModelConfig *cfg)
{
    return (KvkHeads){cfg->n_heads, cfg->n_kv_heads, model_head_dim(cfg)};
}

static int kv_write_version(int kv_dim) { return kv_dim % 4 == 0 ? 2 : 1; }

/* ------------------------------------- contiguous rows (chapters 1 to 3) */

/* Chapters 1, 2 and 3: a sequence's positions are consecutive rows from a
 * base row (0, 0, or its region's first row). */
typedef struct {
    int kind;
    const Device *dev;
    ModelConfig cfg;
    CacheLayers cache;
    int attention;            /* kvk_attention version */
    int max_tokens;
    long long *step_host;     /* [2][max_tokens] slots, then base rows (host staging) */
    long long *step_dev;      /* the same on the device */
    /* chapter 2 */
    int grow;
    int stored;               /* positions 0..stored-1 hold K/V */
    int initial_rows;         /* capacity when opened */
    int reallocations;
    size_t bytes_copied;
    size_t peak_held_bytes;   /* most K/V bytes allocated at once (old + new while growing) */
    /* chapter 3 */
    int max_seqs;
    long long *region_first;  /* [max_seqs] first row of each sequence's region */
    long long *region_rows;   /* [max_seqs] rows of the region (0: none) */
} ContiguousStore;

/* Where position pos of sequence seq goes, or -1 with a message. */
static long long contiguous_base(ContiguousStore *s, const BatchEntry *e, Err *err)
{
    if (s->kind != KV_ARENA) {
        if (e->pos >= s->cache.rows)
            return err_set(err, "position %d is beyond the %lld reserved", e->pos, s->cache.rows);
        return 0;
    }
    if (e->seq < 0 || e->seq >= s->max_seqs || e->pos >= s->region_rows[e->seq])
        return err_set(err, "sequence %d position %d is outside its region", e->seq, e->pos);
    return s->region_first[e->seq];
}

static int contiguous_begin_step(void *ctx, const DeviceStep *st, Err *err)
{
    ContiguousStore *s = ctx;
    if (st->n > s->max_tokens)
        return err_set(err, "a step of %d tokens exceeds the K/V store's %d", st->n, s->max_tokens);
    long long *slots = s->step_host, *base = s->step_host + s->max_tokens;
    for (int i = 0; i < st->n; i++) {
        long long b = contiguous_base(s, &st->entries[i], err);
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

/* Chapter 1 keeps one layer and reuses it: layer l writes where layer l-1 did. */
static int stored_layer(const ContiguousStore *s, int layer) { return s->kind == KV_RECOMPUTE ? 0 : layer; }

static int contiguous_store(void *ctx, int layer, const DeviceStep *st, const float *k, const float *v, Err *err)
{
    ContiguousStore *s = ctx;
    int l = stored_layer(s, layer);
    return kvk_kv_write(kv_write_version(s->cache.kv_dim), s->cache.type, layer_of(&s->cache, s->cache.k, l),
                        layer_of(&s->cache, s->cache.v, l), k, v, s->step_dev, st->n, s->cache.kv_dim,
                        s->dev->stream, err);
}

static int contiguous_attend(void *ctx, int layer, const DeviceStep *st, const float *q, float *out, Err *err)
{
    ContiguousStore *s = ctx;
    int l = stored_layer(s, layer);
    /* max_pos is the model's seq_len, not this step's: the launch then
     * depends on n only, so a captured step stays valid. */
    return kvk_attention(s->attention, s->cache.type, out, q, layer_of(&s->cache, s->cache.k, l),
                         layer_of(&s->cache, s->cache.v, l), s->step_dev + s->max_tokens, st->pos, st->n,
                         s->cfg.seq_len, heads_of(&s->cfg), NULL, s->dev->stream, err);
}

static int recompute_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    (void)ctx, (void)n_tokens, (void)err;
    *cached = 0; /* chapter 1: nothing survives a step */
    return 0;
}

/* Chapter 2, grow: move to a cache twice as large (or to seq_len), copying
 * the stored rows of every layer. Old and new both exist during the copy:
 * the ledger's device peak shows that transient. */
static int contiguous_regrow(ContiguousStore *s, int n_tokens, Err *err)
{
    long long capacity = s->cache.rows;
    while (capacity < n_tokens)
        capacity *= 2;
    if (capacity > s->cfg.seq_len)
        capacity = s->cfg.seq_len;
    CacheLayers bigger = s->cache;
    bigger.rows = capacity;
    bigger.k = bigger.v = NULL;
    TRY(cache_alloc(&bigger, err));
    size_t held = (size_t)bigger.layers * 2 * (layer_bytes(&bigger) + layer_bytes(&s->cache));
    if (held > s->peak_held_bytes)
        s->peak_held_bytes = held;
    size_t used = (size_t)s->stored * row_bytes(&s->cache);
    if (used > 0) {
        cudaError_t rk = cudaMemcpy2DAsync(bigger.k, layer_bytes(&bigger), s->cache.k, layer_bytes(&s->cache), used,
                                           (size_t)s->cache.layers, cudaMemcpyDeviceToDevice, s->dev->stream);
        cudaError_t rv = rk != cudaSuccess ? rk
                                           : cudaMemcpy2DAsync(bigger.v, layer_bytes(&bigger), s->cache.v,
                                                               layer_bytes(&s->cache), used, (size_t)s->cache.layers,
                                                               cudaMemcpyDeviceToDevice, s->dev->stream);
        if (rv != cudaSuccess || device_sync(s->dev, err)) {
            cache_free(&bigger);
            if (rv != cudaSuccess)
                return err_set(err, "%s:%d: cudaMemcpy2DAsync (growing the cache): %s", __FILE__, __LINE__,
                               cudaGetErrorString(rv));
            return -1;
        }
    }
    cache_free(&s->cache);
    s->cache = bigger;
    s->reallocations++;
    s->bytes_copied += 2 * used * (size_t)s->cache.layers;
    return 0;
}

static int contiguous_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    ContiguousStore *s = ctx;
    if (n_tokens > s->cfg.seq_len)
        return err_set(err, "%d positions exceed the model's seq_len %d", n_tokens, s->cfg.seq_len);
    if (n_tokens > s->cache.rows) {
        if (!s->grow)
            return err_set(err, "%d positions exceed the %lld reserved", n_tokens, s->cache.rows);
        TRY(contiguous_regrow(s, n_tokens, err));
    }
    *cached = s->stored < n_tokens ? s->stored : n_tokens - 1;
    return 0;
}

static void contiguous_usage(void *ctx, size_t *reserved, size_t *used)
{
    const ContiguousStore *s = ctx;
    size_t per_position = 2 * (size_t)s->cache.layers * row_bytes(&s->cache);
    *reserved = (size_t)s->cache.rows * per_position;
    *used = (size_t)s->stored * per_position;
}

static void contiguous_free(ContiguousStore *s)
{
    cache_free(&s->cache);
    device_free(s->step_dev, NULL);
    mem_free(s->step_host);
    mem_free(s->region_first);
    mem_free(s->region_rows);
    mem_free(s);
}

/* Common part of the three contiguous stores. */
static int contiguous_open(DeviceKv *kv, int kind, const Device *dev, const ModelConfig *cfg, Dtype t,
                           int layers, long long rows, MemCategory cat, int max_tokens, int max_seqs, Err *err)
{
    memset(kv, 0, sizeof *kv);
    if (max_tokens <= 0 || rows <= 0)
        return err_set(err, "K/V store: bad capacity (%d tokens, %lld rows)", max_tokens, rows);
    int attention = kvk_attention_pick(t, heads_of(cfg), cfg->seq_len);
    if (!attention)
        return err_set(err, "no attention kernel supports head_dim %d with %d positions in %s", model_head_dim(cfg),
                       cfg->seq_len, dtype_name(t));
    ContiguousStore *s = mem_alloc(MEM_KV_METADATA, sizeof *s);
    if (!s)
        return err_set(err, "out of memory");
    s->kind = kind;
    s->dev = dev;
    s->cfg = *cfg;
    s->attention = attention;
    s->max_tokens = max_tokens;
    s->max_seqs = max_seqs;
    s->cache = (CacheLayers){.type = t, .kv_dim = model_kv_dim(cfg), .layers = layers, .rows = rows, .cat = cat};
    s->step_host = mem_alloc_array(MEM_KV_METADATA, 2 * (size_t)max_tokens, sizeof(long long));
    if (max_seqs > 0) {
        s->region_first = mem_alloc_array(MEM_KV_METADATA, (size_t)max_seqs, sizeof(long long));
        s->region_rows = mem_alloc_array(MEM_KV_METADATA, (size_t)max_seqs, sizeof(long long));
    }
    if (!s->step_host || (max_seqs > 0 && (!s->region_first || !s->region_rows))) {
        contiguous_free(s);
        return err_set(err, "out of memory");
    }
    if (device_alloc(&s->step_dev, 2 * (size_t)max_tokens * sizeof(long long), MEM_KV_METADATA, err) ||
        cache_alloc(&s->cache, err)) {
        contiguous_free(s);
        return -1;
    }
    kv->seam = (DeviceKvSeam){.ctx = s, .begin_step = contiguous_begin_step, .store = contiguous_store,
                              .attend = contiguous_attend, .graph_safe = 1};
    kv->kv_type = t;
    kv->kind = kind;
    return 0;
}

int device_kv_open_recompute(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int max_tokens,
                             Err *err)
{
    TRY(contiguous_open(kv, KV_RECOMPUTE, dev, cfg, t, 1, cfg->seq_len, MEM_ACTIVATIONS, max_tokens, 0, err));
    kv->prepare = recompute_prepare;
    return 0;
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
    TRY(contiguous_open(kv, KV_CONTIGUOUS, dev, cfg, t, cfg->n_layers, rows, MEM_KV, max_tokens, 0, err));
    ContiguousStore *s = kv->seam.ctx;
    s->grow = grow;
    s->initial_rows = (int)rows;
    s->peak_held_bytes = (size_t)s->cache.layers * 2 * layer_bytes(&s->cache);
    kv->prepare = contiguous_prepare;
    kv->usage = contiguous_usage;
    /* A grown cache moves: kernel arguments captured in a graph would point
     * at the old one. */
    kv->seam.graph_safe = !grow;
    return 0;
}

void device_kv_contiguous_stats(const DeviceKv *kv, DeviceContiguousStats *stats)
{
    memset(stats, 0, sizeof *stats);
    if (kv->kind != KV_CONTIGUOUS)
        return;
    const ContiguousStore *s = kv->seam.ctx;
    stats->capacity = (int)s->cache.rows;
    stats->initial_capacity = s->initial_rows;
    stats->length = s->stored;
    stats->reallocations = s->reallocations;
    stats->bytes_copied = s->bytes_copied;
    stats->peak_held_bytes = s->peak_held_bytes;
}

int device_kv_open_arena(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, long long arena_rows,
                         int max_seqs, int max_tokens, Err *err)
{
    if (max_seqs <= 0)
        return err_set(err, "K/V arena: needs at least one sequence");
    return contiguous_open(kv, KV_ARENA, dev, cfg, t, cfg->n_layers, arena_rows, MEM_KV, max_tokens, max_seqs, err);
}

int device_kv_arena_place(DeviceKv *kv, int seq, long long first_row, long long rows, Err *err)
{
    if (kv->kind != KV_ARENA)
        return err_set(err, "device_kv_arena_place: not an arena store");
    ContiguousStore *s = kv->seam.ctx;
    if (seq < 0 || seq >= s->max_seqs || first_row < 0 || rows < 0 || first_row + rows > s->cache.rows ||
        rows > s->cfg.seq_len)
        return err_set(err, "region [%lld, %lld) of sequence %d does not fit the arena of %lld rows", first_row,
                       first_row + rows, seq, s->cache.rows);
    s->region_first[seq] = first_row;
    s->region_rows[seq] = rows;
    return 0;
}

int device_kv_arena_copy_rows(DeviceKv *kv, long long src_row, long long dst_row, long long rows, Err *err)
{
    if (kv->kind != KV_ARENA)
        return err_set(err, "device_kv_arena_copy_rows: not an arena store");
    ContiguousStore *s = kv->seam.ctx;
    long long n = s->cache.rows;
    if (rows < 0 || src_row < 0 || dst_row < 0 || src_row + rows > n || dst_row + rows > n ||
        (src_row < dst_row + rows && dst_row < src_row + rows))
        return err_set(err, "copying rows [%lld, %lld) to [%lld, ...) leaves the arena or overlaps", src_row,
                       src_row + rows, dst_row);
    if (rows == 0)
        return 0;
    size_t rb = row_bytes(&s->cache), lb = layer_bytes(&s->cache);
    void *bases[2] = {s->cache.k, s->cache.v};
    for (int i = 0; i < 2; i++)
        CUDA_CHECK(err, cudaMemcpy2DAsync((char *)bases[i] + (size_t)dst_row * rb, lb,
                                          (char *)bases[i] + (size_t)src_row * rb, lb, (size_t)rows * rb,
                                          (size_t)s->cache.layers, cudaMemcpyDeviceToDevice, s->dev->stream));
    return 0;
}

/* ---------------------------------------------------- blocks (chapter 4) */

typedef struct {
    int kind;
    const Device *dev;
    ModelConfig cfg;
    CacheLayers cache;          /* rows = n_blocks x block_size */
    int block_size, n_blocks, max_seqs, max_blocks, max_tokens;
    int *tables_host;           /* [max_seqs][max_blocks] block ids, -1 = none */
    int *tables;                /* the same on the device */
    long long *slots_host;      /* [max_tokens] */
    long long *slots;           /* device */
    int *entry_host;            /* [max_tokens] table row (sequence) of each entry */
    int *entry;                 /* device */
    float *scratch;             /* split attention partials */
    int split_max_entries;      /* steps of at most this many entries may use the split kernel */
    int *pairs;                 /* [max_seqs][2] block copies (device) */
} PagedStore;

static int paged_begin_step(void *ctx, const DeviceStep *st, Err *err)
{
    PagedStore *s = ctx;
    if (st->n > s->max_tokens)
        return err_set(err, "a step of %d tokens exceeds the K/V store's %d", st->n, s->max_tokens);
    for (int i = 0; i < st->n; i++) {
        const BatchEntry *e = &st->entries[i];
        int block = e->pos / s->block_size;
        if (e->seq < 0 || e->seq >= s->max_seqs || block >= s->max_blocks ||
            s->tables_host[(size_t)e->seq * s->max_blocks + block] < 0)
            return err_set(err, "sequence %d position %d has no block", e->seq, e->pos);
        s->slots_host[i] = (long long)s->tables_host[(size_t)e->seq * s->max_blocks + block] * s->block_size +
                           e->pos % s->block_size;
        s->entry_host[i] = e->seq;
    }
    cudaStream_t stream = s->dev->stream;
    CUDA_CHECK(err, cudaMemcpyAsync(s->slots, s->slots_host, (size_t)st->n * sizeof(long long),
                                    cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(err, cudaMemcpyAsync(s->entry, s->entry_host, (size_t)st->n * sizeof(int), cudaMemcpyHostToDevice,
                                    stream));
    CUDA_CHECK(err, cudaMemcpyAsync(s->tables, s->tables_host,
                                    (size_t)s->max_seqs * (size_t)s->max_blocks * sizeof(int),
                                    cudaMemcpyHostToDevice, stream));
    return 0;
}

static int paged_store(void *ctx, int layer, const DeviceStep *st, const float *k, const float *v, Err *err)
{
    PagedStore *s = ctx;
    return kvk_kv_write(kv_write_version(s->cache.kv_dim), s->cache.type, layer_of(&s->cache, s->cache.k, layer),
                        layer_of(&s->cache, s->cache.v, layer), k, v, s->slots, st->n, s->cache.kv_dim,
                        s->dev->stream, err);
}

static int paged_attend(void *ctx, int layer, const DeviceStep *st, const float *q, float *out, Err *err)
{
    PagedStore *s = ctx;
    KvkBlockTables tables = {s->tables, s->max_blocks, s->entry, s->block_size};
    /* Few entries: one block per (entry, head) leaves most multiprocessors
     * idle, so split the sequence. The choice depends on n only. */
    int version = st->n <= s->split_max_entries ? 2 : 1;
    return kvk_paged_attention(version, s->cache.type, out, q, layer_of(&s->cache, s->cache.k, layer),
                               layer_of(&s->cache, s->cache.v, layer), tables, st->pos, st->n, s->cfg.seq_len,
                               heads_of(&s->cfg), s->scratch, s->dev->stream, err);
}

static void paged_free(PagedStore *s)
{
    cache_free(&s->cache);
    void *dev_bufs[] = {s->tables, s->slots, s->entry, s->scratch, s->pairs};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof dev_bufs[0]; i++)
        device_free(dev_bufs[i], NULL);
    mem_free(s->tables_host);
    mem_free(s->slots_host);
    mem_free(s->entry_host);
    mem_free(s);
}

static int paged_alloc(PagedStore *s, Err *err)
{
    size_t table_ints = (size_t)s->max_seqs * (size_t)s->max_blocks;
    s->tables_host = mem_alloc_array(MEM_KV_METADATA, table_ints, sizeof(int));
    s->slots_host = mem_alloc_array(MEM_KV_METADATA, (size_t)s->max_tokens, sizeof(long long));
    s->entry_host = mem_alloc_array(MEM_KV_METADATA, (size_t)s->max_tokens, sizeof(int));
    if (!s->tables_host || !s->slots_host || !s->entry_host)
        return err_set(err, "out of memory for block tables");
    memset(s->tables_host, 0xff, table_ints * sizeof(int)); /* -1: no block */
    KvkHeads h = heads_of(&s->cfg);
    /* Split when (entries x heads) would fill fewer than two waves of the
     * multiprocessors. */
    s->split_max_entries = (2 * s->dev->sm_count + h.n_heads - 1) / h.n_heads;
    size_t scratch = kvk_paged_attention_scratch_floats(2, s->split_max_entries, s->cfg.seq_len, h);
    if (device_alloc(&s->tables, table_ints * sizeof(int), MEM_KV_METADATA, err) ||
        device_alloc(&s->slots, (size_t)s->max_tokens * sizeof(long long), MEM_KV_METADATA, err) ||
        device_alloc(&s->entry, (size_t)s->max_tokens * sizeof(int), MEM_KV_METADATA, err) ||
        device_alloc(&s->scratch, scratch * sizeof(float), MEM_ACTIVATIONS, err) ||
        device_alloc(&s->pairs, 2 * (size_t)s->max_seqs * sizeof(int), MEM_KV_METADATA, err))
        return -1;
    return cache_alloc(&s->cache, err);
}

int device_kv_open_paged(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int n_blocks,
                         int block_size, int max_seqs, int max_tokens, Err *err)
{
    memset(kv, 0, sizeof *kv);
    if (n_blocks <= 0 || block_size <= 0 || (block_size & (block_size - 1)) || max_seqs <= 0 || max_tokens <= 0)
        return err_set(err, "paged K/V: bad shape (%d blocks of %d, %d sequences, %d tokens)", n_blocks, block_size,
                       max_seqs, max_tokens);
    if (!kvk_paged_attention_supports(t, heads_of(cfg)))
        return err_set(err, "paged attention does not support head_dim %d in %s", model_head_dim(cfg),
                       dtype_name(t));
    PagedStore *s = mem_alloc(MEM_KV_METADATA, sizeof *s);
    if (!s)
        return err_set(err, "out of memory");
    s->kind = KV_PAGED;
    s->dev = dev;
    s->cfg = *cfg;
    s->block_size = block_size;
    s->n_blocks = n_blocks;
    s->max_seqs = max_seqs;
    s->max_blocks = (cfg->seq_len + block_size - 1) / block_size;
    s->max_tokens = max_tokens;
    s->cache = (CacheLayers){.type = t, .kv_dim = model_kv_dim(cfg), .layers = cfg->n_layers,
                             .rows = (long long)n_blocks * block_size, .cat = MEM_KV};
    if (paged_alloc(s, err)) {
        paged_free(s);
        return -1;
    }
    kv->seam = (DeviceKvSeam){.ctx = s, .begin_step = paged_begin_step, .store = paged_store,
                              .attend = paged_attend, .graph_safe = 1};
    kv->kv_type = t;
    kv->kind = KV_PAGED;
    return 0;
}

int device_kv_paged_set_table(DeviceKv *kv, int seq, const int *blocks, int n, Err *err)
{
    if (kv->kind != KV_PAGED)
        return err_set(err, "device_kv_paged_set_table: not a paged store");
    PagedStore *s = kv->seam.ctx;
    if (seq < 0 || seq >= s->max_seqs || n < 0 || n > s->max_blocks)
        return err_set(err, "block table of sequence %d: %d blocks (at most %d)", seq, n, s->max_blocks);
    int *row = s->tables_host + (size_t)seq * s->max_blocks;
    for (int i = 0; i < s->max_blocks; i++) {
        if (i < n && (blocks[i] < 0 || blocks[i] >= s->n_blocks))
            return err_set(err, "block table of sequence %d: block %d is not in the pool", seq, blocks[i]);
        row[i] = i < n ? blocks[i] : -1;
    }
    return 0;
}

int device_kv_paged_copy_blocks(DeviceKv *kv, const int *pairs, int n, Err *err)
{
    if (kv->kind != KV_PAGED)
        return err_set(err, "device_kv_paged_copy_blocks: not a paged store");
    PagedStore *s = kv->seam.ctx;
    if (n < 0 || n > s->max_seqs)
        return err_set(err, "%d block copies at once (at most %d)", n, s->max_seqs);
    for (int i = 0; i < 2 * n; i++)
        if (pairs[i] < 0 || pairs[i] >= s->n_blocks)
            return err_set(err, "block copy: block %d is not in the pool", pairs[i]);
    if (n == 0)
        return 0;
    CUDA_CHECK(err, cudaMemcpyAsync(s->pairs, pairs, 2 * (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                                    s->dev->stream));
    return kvk_block_copy(2, s->cache.k, s->cache.v, s->pairs, pairs, n, s->cache.layers, s->cache.rows,
                          s->block_size, (long long)row_bytes(&s->cache), s->dev->stream, err);
}

void device_kv_close(DeviceKv *kv)
{
    if (kv->kind == KV_PAGED)
        paged_free(kv->seam.ctx);
    else if (kv->kind)
        contiguous_free(kv->seam.ctx);
    memset(kv, 0, sizeof *kv);
}

#else /* built without CUDA: device_open() fails first */

#define NO_CUDA "this build has no CUDA support"

int device_kv_open_recompute(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int max_tokens,
                             Err *err)
{
    (void)dev, (void)cfg, (void)t, (void)max_tokens;
    memset(kv, 0, sizeof *kv);
    return err_set(err, NO_CUDA);
}

int device_kv_open_contiguous(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int grow,
                              int n_prompt, int max_tokens, Err *err)
{
    (void)dev, (void)cfg, (void)t, (void)grow, (void)n_prompt, (void)max_tokens;
    memset(kv, 0, sizeof *kv);
    return err_set(err, NO_CUDA);
}

void device_kv_contiguous_stats(const DeviceKv *kv, DeviceContiguousStats *stats)
{
    (void)kv;
    memset(stats, 0, sizeof *stats);
}

int device_kv_open_arena(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, long long arena_rows,
                         int max_seqs, int max_tokens, Err *err)
{
    (void)dev, (void)cfg, (void)t, (void)arena_rows, (void)max_seqs, (void)max_tokens;
    memset(kv, 0, sizeof *kv);
    return err_set(err, NO_CUDA);
}

int device_kv_arena_place(DeviceKv *kv, int seq, long long first_row, long long rows, Err *err)
{
    (void)kv, (void)seq, (void)first_row, (void)rows;
    return err_set(err, NO_CUDA);
}

int device_kv_arena_copy_rows(DeviceKv *kv, long long src_row, long long dst_row, long long rows, Err *err)
{
    (void)kv, (void)src_row, (void)dst_row, (void)rows;
    return err_set(err, NO_CUDA);
}

int device_kv_open_paged(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int n_blocks,
                         int block_size, int max_seqs, int max_tokens, Err *err)
{
    (void)dev, (void)cfg, (void)t, (void)n_blocks, (void)block_size, (void)max_seqs, (void)max_tokens;
    memset(kv, 0, sizeof *kv);
    return err_set(err, NO_CUDA);
}

int device_kv_paged_set_table(DeviceKv *kv, int seq, const int *blocks, int n, Err *err)
{
    (void)kv, (void)seq, (void)blocks, (void)n;
    return err_set(err, NO_CUDA);
}

int device_kv_paged_copy_blocks(DeviceKv *kv, const int *pairs, int n, Err *err)
{
    (void)kv, (void)pairs, (void)n;
    return err_set(err, NO_CUDA);
}

void device_kv_close(DeviceKv *kv) { memset(kv, 0, sizeof *kv); }

#endif
