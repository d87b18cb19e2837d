/**
 * @file device_forward.h
 * @brief The transformer forward pass on a CUDA device, and the device K/V
 *        seam.
 *
 * This is common/forward.c again, operation for operation and in the same
 * order (embedding; per layer RMSNorm, Q/K/V projections, RoPE, store K/V,
 * attention, output projection, residual, RMSNorm, SwiGLU feed-forward,
 * residual; final RMSNorm of the rows that want logits; classifier), with
 * each operation a kernel from kernels/ or a cuBLAS call. The weights are
 * uploaded once (device_model_upload()); activations stay on the device;
 * only the logits come back. Like the CPU pass it is written once, for
 * every chapter: what a chapter changes goes through the device K/V seam.
 *
 * ## Why the device seam differs from the CPU seam
 *
 * The CPU ::KvSeam is called per token (store) and per (token, head)
 * (attend). On a GPU each call would be a kernel launch of a few
 * microseconds doing nanoseconds of work: a 64-request decode step of a
 * 12-layer, 12-head model would be 64 x 12 x 13 = 9,984 launches. So the
 * device seam works on the whole batch at once:
 *
 * | CPU seam (per call)                       | device seam (per step / layer)                       |
 * |-------------------------------------------|------------------------------------------------------|
 * | store(layer, entry, k, v)                 | begin_step: the host turns every entry into a slot    |
 * |   decides where entry's K/V row goes       |   (the slot mapping) and uploads it once per step;   |
 * |                                           | store(layer): one kv_write launch writes all n rows  |
 * | attend(layer, entry, head, q, out)         | attend(layer): one attention launch for all n x      |
 * |   reads positions 0..pos of entry's seq    |   n_heads pairs, finding rows through what           |
 * |                                           |   begin_step uploaded (base rows or block tables)    |
 *
 * The mapping is exact: slot[i] is the row the CPU store would write for
 * entry i, and the attention kernel reads, for (entry i, head h), the rows
 * the CPU attend would read, in the same positions 0..pos. The order of
 * work in a layer is the same too: every K/V of the batch is stored before
 * any entry attends, so a prompt fed as one batch sees its own tokens.
 *
 * How each chapter plugs in (each chapter's device.c implements its store,
 * on what common/cuda/device_kv.h shares; its table lists them):
 * - chapter 1: a transient [seq_len][kv_dim] buffer reused by every layer;
 *   slot = position; attention over rows 0..pos.
 * - chapter 2: one request's cache [layer][capacity][kv_dim] (max or grow);
 *   slot = position.
 * - chapter 3: one arena [layer][arena_rows][kv_dim]; a request owns the
 *   rows of its region; slot = region start + position; attention base row
 *   = region start.
 * - chapter 4: one pool [n_blocks][n_layers][2][block_size][kv_dim], the
 *   CPU pool's layout; a token's row in layer l is row pos % bs of block
 *   table[pos / bs], in that layer's K (or V); attention reads through the
 *   block tables (PagedAttention), copy-on-write copies whole blocks
 *   (kvk_block_copy).
 */
#ifndef KVLAB_DEVICE_FORWARD_H
#define KVLAB_DEVICE_FORWARD_H

#include "device.h"
#include "dtype.h"
#include "err.h"
#include "forward.h"
#include "model.h"

/** The model's weights on the device, uploaded once. */
typedef struct {
    ModelConfig cfg;       /**< the model's shape */
    float rope_theta;      /**< the model's RoPE base (for the tables) */
    Dtype wtype;           /**< type of the embedding table and every matrix */
    void *token_embedding; /**< [vocab_size][dim] of wtype */
    float *rms_att;        /**< [n_layers][dim] (norm weights stay f32: they are tiny) */
    float *rms_ffn;        /**< [n_layers][dim] */
    float *rms_final;      /**< [dim] */
    void *wq;              /**< [n_layers][dim][dim] of wtype */
    void *wk;              /**< [n_layers][kv_dim][dim] */
    void *wv;              /**< [n_layers][kv_dim][dim] */
    void *wo;              /**< [n_layers][dim][dim] */
    void *w1;              /**< [n_layers][hidden_dim][dim] */
    void *w2;              /**< [n_layers][dim][hidden_dim] */
    void *w3;              /**< [n_layers][hidden_dim][dim] */
    void *wcls;            /**< [vocab_size][dim]; the embedding table when shared */
    size_t bytes;          /**< device bytes of all of the above */
} DeviceModel;

/**
 * Uploads a model's weights (charged to weights on the device). Matrices
 * stored quantized (a GGUF model) are dequantized exactly on the host, row
 * by row; f16/bf16 are converted on the host in chunks, rounding to
 * nearest even. A model whose RMSNorm epsilon is not 1e-5 is refused (the
 * kernels have it built in).
 * @param dm     receives the device weights
 * @param m      the model (host)
 * @param wtype  type to store the embedding table and matrices in
 * @param dev    an open device
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int device_model_upload(DeviceModel *dm, const Model *m, Dtype wtype, const Device *dev, Err *err);

/**
 * Frees the device weights.
 * @param dm  an uploaded or zeroed model
 */
void device_model_free(DeviceModel *dm);

/** A forward step as the K/V seam sees it. */
typedef struct {
    const BatchEntry *entries; /**< [n] the batch (host) */
    int n;                     /**< entries */
    const int *pos;            /**< [n] positions of the entries (device) */
    int max_pos;               /**< 1 + the largest position in the batch */
    int logit_rows;            /**< rows of logits this step fills */
} DeviceStep;

/** The device K/V seam: what each chapter implements on the GPU. */
typedef struct {
    void *ctx; /**< the chapter's device K/V store */
    /**
     * Before the layers: turn the batch into the store's metadata (slot
     * mapping, base rows or block tables) and upload it, once per step.
     * @param ctx   the store
     * @param step  the batch
     * @param err   receives the reason on failure
     * @return 0 on success, -1 on failure
     */
    int (*begin_step)(void *ctx, const DeviceStep *step, Err *err);
    /**
     * Writes the K and V of every entry of one layer into the store.
     * @param ctx    the store
     * @param layer  layer index
     * @param step   the batch
     * @param k      [n][kv_dim] keys, RoPE applied (device)
     * @param v      [n][kv_dim] values (device)
     * @param err    receives the reason on failure
     * @return 0 on success, -1 on failure
     */
    int (*store)(void *ctx, int layer, const DeviceStep *step, const float *k, const float *v, Err *err);
    /**
     * Attention of every (entry, head) of one layer.
     * @param ctx    the store
     * @param layer  layer index
     * @param step   the batch
     * @param q      [n][dim] queries, RoPE applied (device)
     * @param out    [n][dim] receives the attention output (device)
     * @param err    receives the reason on failure
     * @return 0 on success, -1 on failure
     */
    int (*attend)(void *ctx, int layer, const DeviceStep *step, const float *q, float *out, Err *err);
    /**
     * 1 when store and attend launch the same kernels with the same
     * arguments for the same n, whatever the positions (everything that
     * changes lives in device memory that begin_step rewrites): then a
     * step can be captured once as a CUDA graph and replayed.
     */
    int graph_safe;
} DeviceKvSeam;

/**
 * Everything the launches of a captured step depend on, besides what lives
 * in device memory that each step rewrites before the replay (tokens,
 * positions, logit sources: upload_step; slots, base rows, block tables:
 * the store's begin_step). A graph records its kernels' arguments by
 * value: the weights, activation and store buffers (their addresses), the
 * stream, and the shapes. So it is replayed only while all of these are
 * the ones it was captured with:
 * - n and logit_rows: the grids, and the store's choice of kernel version
 *   (graph_safe promises that a store's launches depend on n only);
 * - the model, the store and the device (the addresses of their
 *   structures) and the stream;
 * - the device buffer epoch (device_buffer_epoch()): no device buffer was
 *   allocated or freed since, so every address the graph holds is still the
 *   buffer it was (a store closed and another opened at the same address
 *   changes the epoch).
 */
typedef struct {
    int n;                /**< entries */
    int logit_rows;       /**< logit rows */
    const void *model;    /**< the DeviceModel */
    const void *store;    /**< the seam's ctx */
    const void *stream;   /**< the device's stream */
    unsigned long epoch;  /**< device_buffer_epoch() at capture */
} DeviceGraphKey;

/** Device activations of a forward step, sized once for the largest batch. */
typedef struct {
    int max_tokens;       /**< capacity in batch entries */
    int max_logits;       /**< capacity in logits rows */
    float *x;             /**< [max_tokens][dim] residual stream (device) */
    float *xb;            /**< [max_tokens][dim] normed input / attention output */
    float *xb2;           /**< [max_tokens][dim] projection output */
    float *q;             /**< [max_tokens][dim] */
    float *k;             /**< [max_tokens][kv_dim] */
    float *v;             /**< [max_tokens][kv_dim] */
    float *hb;            /**< [max_tokens][hidden_dim] */
    float *hb2;           /**< [max_tokens][hidden_dim] */
    void *x_typed;        /**< [max(max_tokens, max_logits)][max(dim, hidden_dim)] matmul input in the weights' type (f16/bf16 only) */
    float *logit_x;       /**< [max_logits][dim] */
    float *logits;        /**< [max_logits][vocab_size] (device) */
    float *rope_cos;      /**< [seq_len][head_dim/2] the CPU's tables */
    float *rope_sin;      /**< [seq_len][head_dim/2] */
    int *step_ints;       /**< [2 max_tokens + max_logits] tokens, positions, logit source rows (device) */
    int *step_ints_host;  /**< the same, staged on the host */
    float *logits_host;   /**< [max_logits][vocab_size] what the sampler reads (host) */
    void *step_start;     /**< cudaEvent_t recorded before the step's kernels */
    void *step_stop;      /**< cudaEvent_t recorded after them */
    float last_step_ms;   /**< device time of the last step's kernels (no host work, no copies) */
    void *graph;          /**< cudaGraphExec_t of a captured step, or NULL */
    DeviceGraphKey graph_key; /**< what the captured step's launches depend on */
} DeviceForwardState;

/**
 * Allocates the device activations (charged to activations on the device)
 * and the host logits.
 * @param s           receives the buffers
 * @param dm          the device model (for shapes and weight type)
 * @param max_tokens  most entries one step will get
 * @param max_logits  most entries of one step that want logits
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int device_forward_state_init(DeviceForwardState *s, const DeviceModel *dm, int max_tokens, int max_logits,
                              Err *err);

/**
 * Frees the buffers (and a captured graph).
 * @param s  an initialised or zeroed state
 */
void device_forward_state_free(DeviceForwardState *s);

/**
 * Runs the model on a batch of tokens on the device and copies the logits
 * of every entry with logits_row >= 0 to s->logits_host[logits_row]. Waits
 * for the device; allocates nothing.
 * @param dev        the device
 * @param dm         the weights
 * @param s          activations with room for the batch
 * @param kv         the chapter's device K/V seam
 * @param entries    [n] the tokens (host)
 * @param n          1..s->max_tokens
 * @param use_graph  1: after running a step of a new shape, capture it as a
 *                   CUDA graph, and replay that graph while its
 *                   ::DeviceGraphKey stays the same (only when
 *                   kv->graph_safe); 0: launch everything each time
 * @param err        receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_forward(const Device *dev, const DeviceModel *dm, DeviceForwardState *s, const DeviceKvSeam *kv,
                   const BatchEntry *entries, int n, int use_graph, Err *err);

#endif
