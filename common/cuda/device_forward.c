#include "device_forward.h"

#include <string.h>

#include "mem.h"
#include "ops.h"

#ifdef KVLAB_CUDA

#include "cuda_check.h"
#include "kernels.h"

/* Versions of the small kernels the forward pass uses: the fastest of each
 * file (kernel-check times them all). */
#define RMSNORM_VERSION 2
#define ROPE_VERSION 2
#define SWIGLU_VERSION 2
#define RESIDUAL_VERSION 2
#define EMBEDDING_VERSION 1
#define MATMUL_VERSION 2

/* ------------------------------------------------------------ weights */

/* Host elements converted per chunk when uploading weights. */
#define UPLOAD_CHUNK ((size_t)1 << 20)

/* Copies count elements of type t from a host staging buffer to dst + at
 * (in elements), through the device's stream, synchronised before the
 * staging buffer is reused. */
static int copy_chunk(void *dst, size_t at, const void *stage, size_t count, Dtype t, const Device *dev, Err *err)
{
    cudaError_t e = cudaMemcpyAsync((char *)dst + at * dtype_bytes(t), stage, count * dtype_bytes(t),
                                    cudaMemcpyHostToDevice, dev->stream);
    if (e != cudaSuccess)
        return err_set(err, "%s:%d: cudaMemcpyAsync (weights): %s", __FILE__, __LINE__, cudaGetErrorString(e));
    return device_sync(dev, err);
}

/* Uploads the matrices of the layers (or one matrix), back to back, as
 * type t into a new device buffer [n][rows][cols]. A matrix in any stored
 * type (quant.h) is dequantized exactly, row by row, on the host, then
 * rounded to t (nearest even for f16/bf16). */
static int upload_matrices(void **dst, const WeightMatrix *const *w, int n, Dtype t, const Device *dev,
                           size_t *bytes, Err *err)
{
    size_t rows = (size_t)w[0]->rows, cols = (size_t)w[0]->cols;
    if (device_alloc(dst, (size_t)n * rows * cols * dtype_bytes(t), MEM_WEIGHTS, err))
        return -1;
    size_t chunk_rows = UPLOAD_CHUNK / cols ? UPLOAD_CHUNK / cols : 1;
    float *f32 = mem_alloc_array(MEM_ACTIVATIONS, chunk_rows * cols, sizeof(float));
    void *typed = t == DTYPE_F32 ? NULL : mem_alloc_array(MEM_ACTIVATIONS, chunk_rows * cols, dtype_bytes(t));
    int rc = !f32 || (t != DTYPE_F32 && !typed) ? err_set(err, "out of host memory for the weight upload") : 0;
    for (int l = 0; l < n && rc == 0; l++)
        for (size_t r0 = 0; r0 < rows && rc == 0; r0 += chunk_rows) {
            size_t nr = rows - r0 < chunk_rows ? rows - r0 : chunk_rows;
            for (size_t r = 0; r < nr; r++)
                weight_dequantize_row(w[l], (int)(r0 + r), f32 + r * cols);
            if (typed)
                dtype_from_f32(typed, f32, nr * cols, t);
            rc = copy_chunk(*dst, ((size_t)l * rows + r0) * cols, typed ? typed : f32, nr * cols, t, dev, err);
        }
    mem_free(f32);
    mem_free(typed);
    *bytes += (size_t)n * rows * cols * dtype_bytes(t);
    return rc;
}

/* The norm weights of the layers, [n][dim] f32. */
static int upload_norms(float **dst, const float *const *src, int n, int dim, const Device *dev, size_t *bytes,
                        Err *err)
{
    if (device_alloc((void **)dst, (size_t)n * dim * sizeof(float), MEM_WEIGHTS, err))
        return -1;
    for (int l = 0; l < n; l++)
        if (copy_chunk(*dst, (size_t)l * dim, src[l], (size_t)dim, DTYPE_F32, dev, err))
            return -1;
    *bytes += (size_t)n * dim * sizeof(float);
    return 0;
}

int device_model_upload(DeviceModel *dm, const Model *m, Dtype wtype, const Device *dev, Err *err)
{
    memset(dm, 0, sizeof *dm);
    const ModelConfig *c = &m->cfg;
    const ModelWeights *w = &m->w;
    dm->cfg = *c;
    dm->wtype = wtype;
    dm->rope_theta = m->rope_theta;
    if (m->rms_eps != 1e-5f)
        return err_set(err, "the CUDA kernels use RMSNorm epsilon 1e-5; this model's is %g", (double)m->rms_eps);
    int L = c->n_layers;
    const WeightMatrix *mats[7][MODEL_MAX_LAYERS];
    const float *norms[2][MODEL_MAX_LAYERS];
    for (int l = 0; l < L; l++) {
        const LayerWeights *lw = &w->layers[l];
        const WeightMatrix *row[7] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w1, &lw->w2, &lw->w3};
        for (int i = 0; i < 7; i++)
            mats[i][l] = row[i];
        norms[0][l] = lw->rms_att;
        norms[1][l] = lw->rms_ffn;
    }
    void **mat_dst[7] = {&dm->wq, &dm->wk, &dm->wv, &dm->wo, &dm->w1, &dm->w2, &dm->w3};
    const WeightMatrix *emb = &w->token_embedding, *cls = &w->wcls;
    int rc = upload_matrices(&dm->token_embedding, &emb, 1, wtype, dev, &dm->bytes, err) ||
             upload_norms(&dm->rms_att, norms[0], L, c->dim, dev, &dm->bytes, err) ||
             upload_norms(&dm->rms_ffn, norms[1], L, c->dim, dev, &dm->bytes, err) ||
             upload_norms(&dm->rms_final, &w->rms_final, 1, c->dim, dev, &dm->bytes, err);
    for (int i = 0; i < 7 && rc == 0; i++)
        rc = upload_matrices(mat_dst[i], mats[i], L, wtype, dev, &dm->bytes, err);
    /* A shared classifier is the embedding table: not uploaded twice. */
    if (rc == 0 && !m->shared_classifier)
        rc = upload_matrices(&dm->wcls, &cls, 1, wtype, dev, &dm->bytes, err);
    if (rc) {
        device_model_free(dm);
        return err_prefix(err, "uploading the weights");
    }
    if (m->shared_classifier)
        dm->wcls = dm->token_embedding;
    return 0;
}

void device_model_free(DeviceModel *dm)
{
    if (dm->wcls != dm->token_embedding)
        device_free(dm->wcls, NULL);
    void *bufs[] = {dm->token_embedding, dm->rms_att, dm->rms_ffn, dm->rms_final, dm->wq, dm->wk,
                    dm->wv,              dm->wo,      dm->w1,      dm->w2,        dm->w3};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        device_free(bufs[i], NULL);
    memset(dm, 0, sizeof *dm);
}

/* -------------------------------------------------------- activations */

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Synchronous copies, then a device-wide wait: the tables are in place
 * before any stream can use them. */
static int upload_rope_tables(DeviceForwardState *s, const float *cos_host, const float *sin_host, size_t bytes,
                              Err *err)
{
    CUDA_CHECK(err, cudaMemcpy(s->rope_cos, cos_host, bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(err, cudaMemcpy(s->rope_sin, sin_host, bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(err, cudaDeviceSynchronize());
    return 0;
}

static int create_step_events(DeviceForwardState *s, Err *err)
{
    cudaEvent_t start, stop;
    CUDA_CHECK(err, cudaEventCreate(&start));
    s->step_start = start;
    CUDA_CHECK(err, cudaEventCreate(&stop));
    s->step_stop = stop;
    return 0;
}

int device_forward_state_init(DeviceForwardState *s, const DeviceModel *dm, int max_tokens, int max_logits,
                              Err *err)
{
    memset(s, 0, sizeof *s);
    const ModelConfig *c = &dm->cfg;
    if (max_tokens <= 0 || max_logits <= 0)
        return err_set(err, "forward capacity must be positive (tokens %d, logits %d)", max_tokens, max_logits);
    s->max_tokens = max_tokens;
    s->max_logits = max_logits;
    size_t T = (size_t)max_tokens, dim = (size_t)c->dim, kv = (size_t)model_kv_dim(c), hid = (size_t)c->hidden_dim;
    size_t Lg = (size_t)max_logits, vocab = (size_t)c->vocab_size, half = (size_t)model_head_dim(c) / 2;
    size_t typed = dm->wtype == DTYPE_F32 ? 0 : max_size(T, Lg) * max_size(dim, hid) * dtype_bytes(dm->wtype);
    size_t ints = 2 * T + Lg;
    struct {
        void **slot;
        size_t bytes;
    } bufs[] = {
        {(void **)&s->x, T * dim * 4},       {(void **)&s->xb, T * dim * 4},   {(void **)&s->xb2, T * dim * 4},
        {(void **)&s->q, T * dim * 4},       {(void **)&s->k, T * kv * 4},     {(void **)&s->v, T * kv * 4},
        {(void **)&s->hb, T * hid * 4},      {(void **)&s->hb2, T * hid * 4},  {&s->x_typed, typed},
        {(void **)&s->logit_x, Lg * dim * 4}, {(void **)&s->logits, Lg * vocab * 4},
        {(void **)&s->rope_cos, (size_t)c->seq_len * half * 4},
        {(void **)&s->rope_sin, (size_t)c->seq_len * half * 4}, {(void **)&s->step_ints, ints * sizeof(int)},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (device_alloc(bufs[i].slot, bufs[i].bytes, MEM_ACTIVATIONS, err)) {
            device_forward_state_free(s);
            return -1;
        }
    s->step_ints_host = mem_alloc_array(MEM_ACTIVATIONS, ints, sizeof(int));
    s->logits_host = mem_alloc_array(MEM_ACTIVATIONS, Lg * vocab, sizeof(float));
    float *cos_host = mem_alloc_array(MEM_ACTIVATIONS, (size_t)c->seq_len * half, sizeof(float));
    float *sin_host = mem_alloc_array(MEM_ACTIVATIONS, (size_t)c->seq_len * half, sizeof(float));
    int rc = 0;
    if (!s->step_ints_host || !s->logits_host || !cos_host || !sin_host) {
        rc = err_set(err, "out of host memory for the device forward state");
    } else {
        /* The CPU's own tables, so that RoPE is bitwise the same. */
        rope_tables_theta(cos_host, sin_host, c->seq_len, model_head_dim(c), dm->rope_theta);
        rc = upload_rope_tables(s, cos_host, sin_host, (size_t)c->seq_len * half * sizeof(float), err);
    }
    mem_free(cos_host);
    mem_free(sin_host);
    if (rc == 0)
        rc = create_step_events(s, err);
    if (rc)
        device_forward_state_free(s);
    return rc;
}

void device_forward_state_free(DeviceForwardState *s)
{
    if (s->graph)
        cudaGraphExecDestroy((cudaGraphExec_t)s->graph);
    if (s->step_start)
        cudaEventDestroy((cudaEvent_t)s->step_start);
    if (s->step_stop)
        cudaEventDestroy((cudaEvent_t)s->step_stop);
    void *bufs[] = {s->x,       s->xb,     s->xb2,      s->q,        s->k,       s->v,
                    s->hb,      s->hb2,    s->x_typed,  s->logit_x,  s->logits,  s->rope_cos,
                    s->rope_sin, s->step_ints};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        device_free(bufs[i], NULL);
    mem_free(s->step_ints_host);
    mem_free(s->logits_host);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ one step */

/* Device pointers into step_ints. */
static int *step_tokens(const DeviceForwardState *s) { return s->step_ints; }
static int *step_positions(const DeviceForwardState *s) { return s->step_ints + s->max_tokens; }
static int *step_logit_sources(const DeviceForwardState *s) { return s->step_ints + 2 * s->max_tokens; }

/* Host side of a step: tokens, positions and which entry each logits row
 * comes from, uploaded in one copy; then the K/V store's own metadata. */
static int upload_step(const Device *dev, DeviceForwardState *s, const DeviceKvSeam *kv, const ModelConfig *c,
                       const BatchEntry *e, int n, DeviceStep *step, Err *err)
{
    if (n < 1 || n > s->max_tokens)
        return err_set(err, "a step of %d tokens does not fit the device buffers (1..%d)", n, s->max_tokens);
    int *tokens = s->step_ints_host, *pos = tokens + s->max_tokens, *logit_src = pos + s->max_tokens;
    int rows = 0, max_pos = 0;
    memset(logit_src, 0, (size_t)s->max_logits * sizeof(int)); /* unused rows read entry 0: harmless */
    for (int i = 0; i < n; i++) {
        if (e[i].token < 0 || e[i].token >= c->vocab_size || e[i].pos < 0 || e[i].pos >= c->seq_len)
            return err_set(err, "batch entry %d: token %d at position %d is out of range", i, e[i].token, e[i].pos);
        tokens[i] = e[i].token;
        pos[i] = e[i].pos;
        max_pos = e[i].pos + 1 > max_pos ? e[i].pos + 1 : max_pos;
        if (e[i].logits_row >= s->max_logits)
            return err_set(err, "batch entry %d wants logits row %d of %d", i, e[i].logits_row, s->max_logits);
        if (e[i].logits_row >= 0) {
            logit_src[e[i].logits_row] = i;
            rows = e[i].logits_row + 1 > rows ? e[i].logits_row + 1 : rows;
        }
    }
    size_t bytes = (size_t)(2 * s->max_tokens + s->max_logits) * sizeof(int);
    CUDA_CHECK(err, cudaMemcpyAsync(s->step_ints, s->step_ints_host, bytes, cudaMemcpyHostToDevice, dev->stream));
    *step = (DeviceStep){.entries = e, .n = n, .pos = step_positions(s), .max_pos = max_pos, .logit_rows = rows};
    return kv->begin_step(kv->ctx, step, err);
}

/* The matmul input in the weights' type: x itself for f32 weights, else
 * converted into x_typed (cublasGemmEx multiplies like types). */
static int matmul_input(const DeviceModel *dm, DeviceForwardState *s, const float *x, long long count,
                        const void **in, cudaStream_t stream, Err *err)
{
    if (dm->wtype == DTYPE_F32) {
        *in = x;
        return 0;
    }
    *in = s->x_typed;
    return kvk_convert_from_f32(s->x_typed, dm->wtype, x, count, stream, err);
}

/* Layer l's matrix of a [n_layers][rows][cols] weight of the model's type. */
static const void *layer_matrix(const DeviceModel *dm, const void *w, int l, long long rows, long long cols)
{
    return (const char *)w + (size_t)l * (size_t)(rows * cols) * dtype_bytes(dm->wtype);
}

/* Everything of a step that runs on the device: the same operations in the
 * same order as forward() in forward.c. Only launches; nothing waits, so
 * this can be captured as a CUDA graph. */
static int run_layers(const Device *dev, const DeviceModel *dm, DeviceForwardState *s, const DeviceKvSeam *kv,
                      const DeviceStep *st, Err *err)
{
    const ModelConfig *c = &dm->cfg;
    const int n = st->n, dim = c->dim, kv_dim = model_kv_dim(c), hid = c->hidden_dim, hd = model_head_dim(c);
    cudaStream_t stream = dev->stream;
    const Dtype wt = dm->wtype;
    const void *in;

    TRY(kvk_embedding(EMBEDDING_VERSION, s->x, dm->token_embedding, wt, step_tokens(s), n, dim, stream, err));
    for (int l = 0; l < c->n_layers; l++) {
        /* Attention block: x += Wo . attention(RoPE(Wq xn), RoPE(Wk xn), Wv xn) */
        TRY(kvk_rmsnorm(RMSNORM_VERSION, s->xb, s->x, dm->rms_att + (size_t)l * dim, NULL, n, dim, stream, err));
        TRY(matmul_input(dm, s, s->xb, (long long)n * dim, &in, stream, err));
        TRY(kvk_matmul(MATMUL_VERSION, dev->blas, s->q, in, layer_matrix(dm, dm->wq, l, dim, dim), wt, n, dim, dim,
                       stream, err));
        TRY(kvk_matmul(MATMUL_VERSION, dev->blas, s->k, in, layer_matrix(dm, dm->wk, l, kv_dim, dim), wt, n, dim,
                       kv_dim, stream, err));
        TRY(kvk_matmul(MATMUL_VERSION, dev->blas, s->v, in, layer_matrix(dm, dm->wv, l, kv_dim, dim), wt, n, dim,
                       kv_dim, stream, err));
        TRY(kvk_rope(ROPE_VERSION, s->q, s->k, step_positions(s), s->rope_cos, s->rope_sin, n, dim, kv_dim, hd,
                     stream, err));
        /* The seam: K/V of every token go where the chapter keeps them, then
         * every query reads them back from there. */
        TRY(kv->store(kv->ctx, l, st, s->k, s->v, err));
        TRY(kv->attend(kv->ctx, l, st, s->q, s->xb, err));
        TRY(matmul_input(dm, s, s->xb, (long long)n * dim, &in, stream, err));
        TRY(kvk_matmul(MATMUL_VERSION, dev->blas, s->xb2, in, layer_matrix(dm, dm->wo, l, dim, dim), wt, n, dim, dim,
                       stream, err));
        TRY(kvk_residual_add(RESIDUAL_VERSION, s->x, s->xb2, (long long)n * dim, stream, err));

        /* Feed-forward block: x += W2 . (silu(W1 xn) * W3 xn) */
        TRY(kvk_rmsnorm(RMSNORM_VERSION, s->xb, s->x, dm->rms_ffn + (size_t)l * dim, NULL, n, dim, stream, err));
        TRY(matmul_input(dm, s, s->xb, (long long)n * dim, &in, stream, err));
        TRY(kvk_matmul(MATMUL_VERSION, dev->blas, s->hb, in, layer_matrix(dm, dm->w1, l, hid, dim), wt, n, dim, hid,
                       stream, err));
        TRY(kvk_matmul(MATMUL_VERSION, dev->blas, s->hb2, in, layer_matrix(dm, dm->w3, l, hid, dim), wt, n, dim, hid,
                       stream, err));
        TRY(kvk_swiglu(SWIGLU_VERSION, s->hb, s->hb2, (long long)n * hid, stream, err));
        TRY(matmul_input(dm, s, s->hb, (long long)n * hid, &in, stream, err));
        TRY(kvk_matmul(MATMUL_VERSION, dev->blas, s->xb, in, layer_matrix(dm, dm->w2, l, dim, hid), wt, n, hid, dim,
                       stream, err));
        TRY(kvk_residual_add(RESIDUAL_VERSION, s->x, s->xb, (long long)n * dim, stream, err));
    }

    /* Only the entries that asked for logits pay for the classifier. */
    if (st->logit_rows == 0)
        return 0;
    TRY(kvk_rmsnorm(RMSNORM_VERSION, s->logit_x, s->x, dm->rms_final, step_logit_sources(s), st->logit_rows, dim,
                    stream, err));
    TRY(matmul_input(dm, s, s->logit_x, (long long)st->logit_rows * dim, &in, stream, err));
    return kvk_matmul(MATMUL_VERSION, dev->blas, s->logits, in, dm->wcls, wt, st->logit_rows, dim, c->vocab_size,
                      stream, err);
}

static DeviceGraphKey graph_key_of(const Device *dev, const DeviceModel *dm, const DeviceKvSeam *kv,
                                   const DeviceStep *st)
{
    return (DeviceGraphKey){.n = st->n, .logit_rows = st->logit_rows, .model = dm, .store = kv->ctx,
                            .stream = dev->stream, .epoch = device_buffer_epoch()};
}

static int same_graph_key(const DeviceGraphKey *a, const DeviceGraphKey *b)
{
    return a->n == b->n && a->logit_rows == b->logit_rows && a->model == b->model && a->store == b->store &&
           a->stream == b->stream && a->epoch == b->epoch;
}

/* Captures run_layers() as a CUDA graph (kernels and cuBLAS calls recorded,
 * not run) and instantiates it; replaying it costs one launch instead of
 * about 15 per layer. */
static int capture_step(const Device *dev, const DeviceModel *dm, DeviceForwardState *s, const DeviceKvSeam *kv,
                        const DeviceStep *st, Err *err)
{
    if (s->graph) {
        CUDA_CHECK(err, cudaGraphExecDestroy((cudaGraphExec_t)s->graph));
        s->graph = NULL;
    }
    CUDA_CHECK(err, cudaStreamBeginCapture(dev->stream, cudaStreamCaptureModeThreadLocal));
    int rc = run_layers(dev, dm, s, kv, st, err);
    cudaGraph_t graph = NULL;
    cudaError_t end = cudaStreamEndCapture(dev->stream, &graph); /* always end the capture */
    if (rc != 0) {
        if (graph)
            cudaGraphDestroy(graph);
        return -1;
    }
    CUDA_CHECK(err, end);
    cudaGraphExec_t exec;
    cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(err, inst);
    s->graph = exec;
    s->graph_key = graph_key_of(dev, dm, kv, st);
    return 0;
}

int device_forward(const Device *dev, const DeviceModel *dm, DeviceForwardState *s, const DeviceKvSeam *kv,
                   const BatchEntry *entries, int n, int use_graph, Err *err)
{
    DeviceStep st;
    TRY(upload_step(dev, s, kv, &dm->cfg, entries, n, &st, err));
    int graphed = use_graph && kv->graph_safe;
    DeviceGraphKey key = graph_key_of(dev, dm, kv, &st);
    int replay = graphed && s->graph && same_graph_key(&s->graph_key, &key);
    CUDA_CHECK(err, cudaEventRecord((cudaEvent_t)s->step_start, dev->stream));
    if (replay)
        CUDA_CHECK(err, cudaGraphLaunch((cudaGraphExec_t)s->graph, dev->stream));
    else
        TRY(run_layers(dev, dm, s, kv, &st, err));
    CUDA_CHECK(err, cudaEventRecord((cudaEvent_t)s->step_stop, dev->stream));
    /* A new shape runs once for real first (so that cuBLAS and the lazily
     * loaded kernels are set up outside a capture), then is captured for the
     * steps that follow. Capturing records work without running it. */
    if (graphed && !replay)
        TRY(capture_step(dev, dm, s, kv, &st, err));
    if (st.logit_rows > 0)
        CUDA_CHECK(err, cudaMemcpyAsync(s->logits_host, s->logits,
                                        (size_t)st.logit_rows * (size_t)dm->cfg.vocab_size * sizeof(float),
                                        cudaMemcpyDeviceToHost, dev->stream));
    TRY(device_sync(dev, err));
    CUDA_CHECK(err, cudaEventElapsedTime(&s->last_step_ms, (cudaEvent_t)s->step_start, (cudaEvent_t)s->step_stop));
    return 0;
}

#else /* built without CUDA: device_open() fails first, so these are never reached */

#define NO_CUDA "this build has no CUDA support"

int device_model_upload(DeviceModel *dm, const Model *m, Dtype wtype, const Device *dev, Err *err)
{
    (void)m, (void)wtype, (void)dev;
    memset(dm, 0, sizeof *dm);
    return err_set(err, NO_CUDA);
}

void device_model_free(DeviceModel *dm) { memset(dm, 0, sizeof *dm); }

int device_forward_state_init(DeviceForwardState *s, const DeviceModel *dm, int max_tokens, int max_logits, Err *err)
{
    (void)dm, (void)max_tokens, (void)max_logits;
    memset(s, 0, sizeof *s);
    return err_set(err, NO_CUDA);
}

void device_forward_state_free(DeviceForwardState *s) { memset(s, 0, sizeof *s); }

int device_forward(const Device *dev, const DeviceModel *dm, DeviceForwardState *s, const DeviceKvSeam *kv,
                   const BatchEntry *entries, int n, int use_graph, Err *err)
{
    (void)dev, (void)dm, (void)s, (void)kv, (void)entries, (void)n, (void)use_graph;
    return err_set(err, NO_CUDA);
}

#endif
