/* Chapter 4 extension: the pool on the device.
 * Adds: the pool's blocks in device memory, copy-on-write repeated there.
 * Option: --device cuda. Taught in: book/ch04-paged.md, "Extension: the
 * blocks on the device".
 * The K/V bytes of the block pool live in device memory, block for block
 * and in the host pool's layout; the pool's books, the block tables, the
 * reference counts and every scheduling decision stay on the host. See
 * paged_device.h. */
#include "paged_device.h"

#include <string.h>

#include "serving_device.h"

/* ------------------------------------------------------------ the pool on the device */

#ifdef KVLAB_CUDA

#include "cuda_check.h"

/* The pool's blocks on the device, and the block tables the host uploads.
 * The blocks have the host pool's layout (block_pool.h), in the device's
 * element type:
 *
 *     blocks: [n_blocks][n_layers][2 (K, V)][block_size][kv_dim]
 *
 * so one layer's K in one block is block_size rows of kv_dim, as on the
 * CPU, and a block of every layer is one contiguous run (one copy for
 * copy-on-write). The kernels see a layer's K (or V) of block 0 as the
 * first of rows that count 2 x n_layers x block_size to a block. */
typedef struct {
    const Device *dev;
    ModelConfig cfg;
    Dtype type;                 /* element type of K/V */
    int kv_dim, n_layers;
    int block_size, n_blocks, max_seqs, max_blocks, max_tokens;
    size_t block_bytes;         /* n_layers x 2 x block_size x kv_dim x element bytes: BlockPool.bytes_per_block */
    void *blocks;               /* [n_blocks][n_layers][2][block_size][kv_dim] of type (kv) */
    int *tables_host;           /* [max_seqs][max_blocks] block ids, -1 = none */
    int *tables;                /* the same on the device */
    long long *slots_host;      /* [max_tokens] row of each entry, in rows of block_rows() to a block */
    long long *slots;           /* device */
    int *entry_host;            /* [max_tokens] table row (sequence) of each entry */
    int *entry;                 /* device */
    float *scratch;             /* split attention partials (kvk_paged_attention_pick_scratch_floats()) */
    int *pairs;                 /* [max_seqs][2] block copies (device) */
    const PagedServer *server;  /* the server whose running requests' tables each step takes, or NULL */
} DevicePool;

/* Rows of kv_dim elements from a block's first row to the next block's. */
static long long block_rows(const DevicePool *s) { return 2LL * s->n_layers * s->block_size; }

/* K (which 0) or V (which 1) of one layer in block 0: what the kernels
 * count rows from (block_pool_keys(), block_pool_values() of block 0). */
static void *layer_rows(const DevicePool *s, int layer, int which)
{
    size_t row_bytes = (size_t)s->kv_dim * dtype_bytes(s->type);
    return (char *)s->blocks + (size_t)(2 * layer + which) * (size_t)s->block_size * row_bytes;
}

static int set_table(DevicePool *s, int seq, const int *blocks, int n, Err *err);

/* Only running requests are fed, and each one's table covers every
 * position fed: their tables are what a step needs. */
static int take_tables(DevicePool *s, Err *err)
{
    const PagedServer *server = s->server;
    for (int k = 0; k < server->n_running; k++) {
        int i = server->running[k];
        const BlockTable *t = &server->kv.tables.tables[i];
        if (set_table(s, i, t->blocks, t->n_blocks, err))
            return -1;
    }
    return 0;
}

static int pool_begin_step(void *ctx, const DeviceStep *st, Err *err)
{
    DevicePool *s = ctx;
    if (s->server && take_tables(s, err)) /* the block tables the schedule left */
        return -1;
    if (st->n > s->max_tokens)
        return err_set(err, "a step of %d tokens exceeds the K/V store's %d", st->n, s->max_tokens);
    for (int i = 0; i < st->n; i++) {
        const BatchEntry *e = &st->entries[i];
        int block = e->pos / s->block_size;
        if (e->seq < 0 || e->seq >= s->max_seqs || block >= s->max_blocks ||
            s->tables_host[(size_t)e->seq * s->max_blocks + block] < 0)
            return err_set(err, "sequence %d position %d has no block", e->seq, e->pos);
        /* Row pos % block_size of the block the table names. */
        s->slots_host[i] = (long long)s->tables_host[(size_t)e->seq * s->max_blocks + block] * block_rows(s) +
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

static int pool_store(void *ctx, int layer, const DeviceStep *st, const float *k, const float *v, Err *err)
{
    DevicePool *s = ctx;
    return kvk_kv_write(device_kv_write_version(s->kv_dim), s->type, layer_rows(s, layer, 0), layer_rows(s, layer, 1),
                        k, v, s->slots, st->n, s->kv_dim, s->dev->stream, err);
}

static int pool_attend(void *ctx, int layer, const DeviceStep *st, const float *q, float *out, Err *err)
{
    DevicePool *s = ctx;
    KvkBlockTables tables = {s->tables, s->max_blocks, s->entry, s->block_size, s->n_layers};
    /* The kernels pick the version and its split from n and the GPU's
     * occupancy (n only: a captured graph stays valid). */
    KvkHeads h = device_kv_heads(&s->cfg);
    return kvk_paged_attention(kvk_paged_attention_pick(s->type, h, st->n), s->type, out, q, s->blocks, layer, tables,
                               st->pos, st->n, s->cfg.seq_len, h, s->scratch, s->dev->stream, err);
}

static void pool_free(void *ctx)
{
    DevicePool *s = ctx;
    void *dev_bufs[] = {s->blocks, s->tables, s->slots, s->entry, s->scratch, s->pairs};
    for (size_t i = 0; i < sizeof dev_bufs / sizeof dev_bufs[0]; i++)
        device_free(dev_bufs[i], NULL);
    mem_free(s->tables_host);
    mem_free(s->slots_host);
    mem_free(s->entry_host);
    mem_free(s);
}

static int pool_alloc(DevicePool *s, Err *err)
{
    size_t table_ints = (size_t)s->max_seqs * (size_t)s->max_blocks;
    s->tables_host = mem_alloc_array(MEM_KV_METADATA, table_ints, sizeof(int));
    s->slots_host = mem_alloc_array(MEM_KV_METADATA, (size_t)s->max_tokens, sizeof(long long));
    s->entry_host = mem_alloc_array(MEM_KV_METADATA, (size_t)s->max_tokens, sizeof(int));
    if (!s->tables_host || !s->slots_host || !s->entry_host)
        return err_set(err, "out of memory for block tables");
    memset(s->tables_host, 0xff, table_ints * sizeof(int)); /* -1: no block */
    size_t scratch = kvk_paged_attention_pick_scratch_floats(s->type, device_kv_heads(&s->cfg), s->max_tokens,
                                                             s->cfg.seq_len);
    if (device_alloc(&s->tables, table_ints * sizeof(int), MEM_KV_METADATA, err) ||
        device_alloc(&s->slots, (size_t)s->max_tokens * sizeof(long long), MEM_KV_METADATA, err) ||
        device_alloc(&s->entry, (size_t)s->max_tokens * sizeof(int), MEM_KV_METADATA, err) ||
        device_alloc(&s->scratch, scratch * sizeof(float), MEM_ACTIVATIONS, err) ||
        device_alloc(&s->pairs, 2 * (size_t)s->max_seqs * sizeof(int), MEM_KV_METADATA, err))
        return -1;
    return device_alloc(&s->blocks, (size_t)s->n_blocks * s->block_bytes, MEM_KV, err);
}

int device_kv_open_paged(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, int n_blocks,
                         int block_size, int max_seqs, int max_tokens, Err *err)
{
    memset(kv, 0, sizeof *kv);
    if (n_blocks <= 0 || block_size <= 0 || (block_size & (block_size - 1)) || max_seqs <= 0 || max_tokens <= 0)
        return err_set(err, "paged K/V: bad shape (%d blocks of %d, %d sequences, %d tokens)", n_blocks, block_size,
                       max_seqs, max_tokens);
    if (!kvk_paged_attention_pick(t, device_kv_heads(cfg), 1))
        return err_set(err, "paged attention does not support head_dim %d in %s", model_head_dim(cfg),
                       dtype_name(t));
    DevicePool *s = mem_alloc(MEM_KV_METADATA, sizeof *s);
    if (!s)
        return err_set(err, "out of memory");
    s->dev = dev;
    s->cfg = *cfg;
    s->type = t;
    s->kv_dim = model_kv_dim(cfg);
    s->n_layers = cfg->n_layers;
    s->block_size = block_size;
    s->n_blocks = n_blocks;
    s->max_seqs = max_seqs;
    s->max_blocks = (cfg->seq_len + block_size - 1) / block_size;
    s->max_tokens = max_tokens;
    /* The host pool's block_shape_bytes(), at the device's element size. */
    s->block_bytes = (size_t)block_rows(s) * (size_t)s->kv_dim * dtype_bytes(t);
    if (pool_alloc(s, err)) {
        pool_free(s);
        return -1;
    }
    kv->seam = (DeviceKvSeam){.ctx = s, .begin_step = pool_begin_step, .store = pool_store, .attend = pool_attend,
                              .graph_safe = 1};
    kv->close = pool_free;
    kv->kv_type = t;
    return 0;
}

int device_kv_paged_set_table(DeviceKv *kv, int seq, const int *blocks, int n, Err *err)
{
    if (kv->close != pool_free)
        return err_set(err, "device_kv_paged_set_table: not a paged store");
    return set_table(kv->seam.ctx, seq, blocks, n, err);
}

static int set_table(DevicePool *s, int seq, const int *blocks, int n, Err *err)
{
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
    if (kv->close != pool_free)
        return err_set(err, "device_kv_paged_copy_blocks: not a paged store");
    DevicePool *s = kv->seam.ctx;
    if (n < 0 || n > s->max_seqs)
        return err_set(err, "%d block copies at once (at most %d)", n, s->max_seqs);
    for (int i = 0; i < 2 * n; i++)
        if (pairs[i] < 0 || pairs[i] >= s->n_blocks)
            return err_set(err, "block copy: block %d is not in the pool", pairs[i]);
    if (n == 0)
        return 0;
    CUDA_CHECK(err, cudaMemcpyAsync(s->pairs, pairs, 2 * (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                                    s->dev->stream));
    return kvk_block_copy(2, s->blocks, s->pairs, pairs, n, (long long)s->block_bytes, s->dev->stream, err);
}

void *device_kv_paged_blocks(const DeviceKv *kv, size_t *block_bytes)
{
    if (kv->close != pool_free)
        return NULL;
    const DevicePool *s = kv->seam.ctx;
    if (block_bytes)
        *block_bytes = s->block_bytes;
    return s->blocks;
}

/* The store takes the tables of the server's running requests before
 * every step (pool_begin_step()). */
static void follow_server(DeviceKv *kv, const PagedServer *server)
{
    ((DevicePool *)kv->seam.ctx)->server = server;
}

/* One block of the pool between the device and a host buffer laid out as
 * the host pool's block, [n_layers][2 (K, V)][block_size][kv_dim]: the
 * device block has that layout too, so it is one copy of block_bytes. */
static int pool_copy_block_host(DevicePool *s, int block, void *host, int to_device, Err *err)
{
    char *dev = (char *)s->blocks + (size_t)block * s->block_bytes;
    CUDA_CHECK(err, cudaMemcpyAsync(to_device ? (void *)dev : host, to_device ? host : (void *)dev, s->block_bytes,
                                    to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s->dev->stream));
    return 0;
}

int paged_device_swap_block(ServingRun *run, int block, void *host, int to_device, Err *err)
{
    DeviceKv *kv = run->device->kv.kv;
    if (kv->close != pool_free)
        return err_set(err, "paged_device_swap_block: not a paged store");
    DevicePool *s = kv->seam.ctx;
    if (block < 0 || block >= s->n_blocks)
        return err_set(err, "swap: block %d is not in the pool", block);
    /* The host buffer is pageable memory: a copy out returns once the bytes
     * are on the host, a copy in once they are staged, so the buffer may be
     * reused at once; both run in stream order with the steps' kernels. */
    if (pool_copy_block_host(s, block, host, to_device, err))
        return err_prefix(err, "--preempt swap: block %d %s the host", block, to_device ? "from" : "to");
    return 0;
}

#else /* built without CUDA: device_open() fails first */

#define NO_CUDA "this build has no CUDA support"

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

void *device_kv_paged_blocks(const DeviceKv *kv, size_t *block_bytes)
{
    (void)kv, (void)block_bytes;
    return NULL;
}

int paged_device_swap_block(ServingRun *run, int block, void *host, int to_device, Err *err)
{
    (void)run, (void)block, (void)host, (void)to_device;
    return err_set(err, NO_CUDA);
}

static void follow_server(DeviceKv *kv, const PagedServer *server)
{
    (void)kv, (void)server;
}

#endif

/* ------------------------------------------------------------ kept in step with the books */


/* BlockPool.on_copy: the same copy-on-write, queued on the device's stream
 * as the scheduler makes it. Copies run in the order they were decided: a
 * block a copy reads may be freed and handed out again later in the same
 * schedule(), and the device must read it before anything overwrites it. */
static void repeat_copy(void *ctx, int dst, int src)
{
    ServingDeviceKv *d = ctx;
    if (d->fault.msg[0])
        return; /* the first failure is the one reported */
    int pair[2] = {src, dst}; /* (source, destination), device_kv_paged_copy_blocks() */
    if (device_kv_paged_copy_blocks(d->kv, pair, 1, &d->fault))
        err_prefix(&d->fault, "copying block %d to block %d on the device", src, dst);
}

int paged_device_open(PagedServer *s, ServingRun *run, Err *err)
{
    ServingDeviceKv *d = &run->device->kv;
    const DeviceRun *r = &run->device->run;
    BlockPool *p = &s->kv.pool;
    if ((size_t)p->shape.elem_bytes != dtype_bytes(r->kv_type))
        return err_set(err, "--device cuda: the pool counts %d-byte K/V elements, but %s takes %zu",
                       p->shape.elem_bytes, dtype_name(r->kv_type), dtype_bytes(r->kv_type));
    if (device_kv_open_paged(d->kv, &r->dev, &s->kv.cfg, r->kv_type, p->n_blocks, p->shape.block_size, run->n_reqs,
                             run->max_step_tokens, err))
        return err_prefix(err, "--device cuda");
    d->chapter = s;
    follow_server(d->kv, s);
    p->on_copy = repeat_copy;
    p->on_copy_ctx = d;
    return 0;
}
