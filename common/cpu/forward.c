#include "forward.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mem.h"
#include "ops.h"

typedef struct {
    float **slot;
    size_t count;
} Buffer;

static void forward_buffers(ForwardState *s, const ModelConfig *c, int threads, Buffer out[13])
{
    size_t T = (size_t)s->max_tokens, dim = (size_t)c->dim, kv = (size_t)model_kv_dim(c);
    size_t hid = (size_t)c->hidden_dim, half = (size_t)model_head_dim(c) / 2, L = (size_t)s->max_logits;
    Buffer b[13] = {
        {&s->x, T * dim},      {&s->xb, T * dim},     {&s->xb2, T * dim},
        {&s->q, T * dim},      {&s->k, T * kv},       {&s->v, T * kv},
        {&s->hb, T * hid},     {&s->hb2, T * hid},    {&s->scores, (size_t)threads * (size_t)c->seq_len},
        {&s->logit_x, L * dim}, {&s->logits, L * (size_t)c->vocab_size},
        {&s->rope_cos, (size_t)c->seq_len * half}, {&s->rope_sin, (size_t)c->seq_len * half},
    };
    memcpy(out, b, sizeof b);
}

size_t forward_state_bytes(const ModelConfig *cfg, int max_tokens, int max_logits, int threads)
{
    ForwardState s = {.max_tokens = max_tokens, .max_logits = max_logits};
    Buffer b[13];
    forward_buffers(&s, cfg, threads, b);
    size_t total = 0;
    for (int i = 0; i < 13; i++)
        total += b[i].count * sizeof(float);
    return total;
}

int forward_state_init(ForwardState *s, const ModelConfig *cfg, int max_tokens, int max_logits, Err *err)
{
    memset(s, 0, sizeof *s);
    if (max_tokens <= 0 || max_logits <= 0)
        return err_set(err, "forward capacity must be positive (tokens %d, logits %d)", max_tokens, max_logits);
    s->max_tokens = max_tokens;
    s->max_logits = max_logits;
    s->score_rows = ops_threads();
    Buffer b[13];
    forward_buffers(s, cfg, s->score_rows, b);
    for (int i = 0; i < 13; i++) {
        *b[i].slot = mem_alloc_array(MEM_ACTIVATIONS, b[i].count, sizeof(float));
        if (!*b[i].slot) {
            forward_state_free(s);
            return err_set(err, "out of memory for activations of %d tokens", max_tokens);
        }
    }
    s->rope_theta = MODEL_DEFAULT_ROPE_THETA;
    rope_tables(s->rope_cos, s->rope_sin, cfg->seq_len, model_head_dim(cfg));
    return 0;
}

void forward_state_free(ForwardState *s)
{
    float *bufs[] = {s->x, s->xb, s->xb2, s->q, s->k, s->v, s->hb, s->hb2,
                     s->scores, s->logit_x, s->logits, s->rope_cos, s->rope_sin};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mem_free(bufs[i]);
    memset(s, 0, sizeof *s);
}

/* Self-attention of every (entry, head) pair through the seam. The pairs
 * are independent, so they run in parallel; each thread has its own row of
 * score scratch. */
static void attend_all(const ModelConfig *c, ForwardState *s, const KvSeam *kv, int layer, const BatchEntry *e,
                       int n)
{
    int hd = model_head_dim(c), dim = c->dim, pairs = n * c->n_heads;
    long work = (long)pairs * (e[n - 1].pos + 1) * hd;
    (void)work;
#pragma omp parallel for schedule(dynamic, 4) if (work >= (1 << 15) && pairs > 1)
    for (int p = 0; p < pairs; p++) {
        int i = p / c->n_heads, h = p % c->n_heads;
#ifdef _OPENMP
        int row = omp_get_thread_num() % s->score_rows;
#else
        int row = 0;
#endif
        float *scores = s->scores + (long)row * c->seq_len;
        kv->attend(kv->ctx, layer, &e[i], h, s->q + (long)i * dim + h * hd, s->xb + (long)i * dim + h * hd,
                   scores);
    }
}

int forward_default_threads(const ModelConfig *cfg)
{
    if (cfg->dim < 256)
        return 1;
    return getenv("OMP_NUM_THREADS") ? 0 : 1;
}

void forward(const Model *m, ForwardState *s, const KvSeam *kv, const BatchEntry *e, int n)
{
    const ModelConfig *c = &m->cfg;
    const ModelWeights *w = &m->w;
    const int dim = c->dim, kv_dim = model_kv_dim(c), hid = c->hidden_dim, hd = model_head_dim(c);
    const float eps = m->rms_eps;

    if (s->rope_theta != m->rope_theta) {
        /* Sized for the configuration at init; only the base was not known. */
        rope_tables_theta(s->rope_cos, s->rope_sin, c->seq_len, hd, m->rope_theta);
        s->rope_theta = m->rope_theta;
    }

    /* The embedding of a token is one row of the table, turned into f32
     * (a copy for an f32 model). */
    for (int i = 0; i < n; i++)
        weight_dequantize_row(&w->token_embedding, e[i].token, s->x + (long)i * dim);

    for (int l = 0; l < c->n_layers; l++) {
        const LayerWeights *lw = &w->layers[l];
        /* Attention block: x += Wo . attention(RoPE(Wq xn), RoPE(Wk xn), Wv xn) */
        for (int i = 0; i < n; i++)
            rmsnorm_eps(s->xb + (long)i * dim, s->x + (long)i * dim, lw->rms_att, dim, eps);
        float *qkv_out[3] = {s->q, s->k, s->v};
        const WeightMatrix *qkv[3] = {&lw->wq, &lw->wk, &lw->wv};
        matmul_weights_group(qkv_out, s->xb, qkv, 3, n);
        for (int i = 0; i < n; i++) {
            const float *cos_row = s->rope_cos + (long)e[i].pos * (hd / 2);
            const float *sin_row = s->rope_sin + (long)e[i].pos * (hd / 2);
            rope_rotate(s->q + (long)i * dim, dim, hd, cos_row, sin_row);
            rope_rotate(s->k + (long)i * kv_dim, kv_dim, hd, cos_row, sin_row);
        }
        /* The seam: K/V of every token go where the chapter keeps them, then
         * every query reads them back from there. */
        for (int i = 0; i < n; i++)
            kv->store(kv->ctx, l, &e[i], s->k + (long)i * kv_dim, s->v + (long)i * kv_dim);
        attend_all(c, s, kv, l, e, n);
        matmul_weights(s->xb2, s->xb, &lw->wo, n);
        add_inplace(s->x, s->xb2, n * dim);

        /* Feed-forward block: x += W2 . (silu(W1 xn) * W3 xn) */
        for (int i = 0; i < n; i++)
            rmsnorm_eps(s->xb + (long)i * dim, s->x + (long)i * dim, lw->rms_ffn, dim, eps);
        float *gate_up_out[2] = {s->hb, s->hb2};
        const WeightMatrix *gate_up[2] = {&lw->w1, &lw->w3};
        matmul_weights_group(gate_up_out, s->xb, gate_up, 2, n);
        swiglu(s->hb, s->hb2, n * hid);
        matmul_weights(s->xb, s->hb, &lw->w2, n);
        add_inplace(s->x, s->xb, n * dim);
    }

    /* Only the entries that asked for logits pay for the classifier. */
    int rows = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].logits_row < 0)
            continue;
        rmsnorm_eps(s->logit_x + (long)e[i].logits_row * dim, s->x + (long)i * dim, w->rms_final, dim, eps);
        rows = e[i].logits_row + 1 > rows ? e[i].logits_row + 1 : rows;
    }
    if (rows > 0)
        matmul_weights(s->logits, s->logit_x, &w->wcls, rows);
}

int forward_check_context(const ModelConfig *cfg, int threads, Err *err)
{
    size_t bytes = forward_state_bytes(cfg, cfg->seq_len, 1, threads), physical = mem_physical_bytes();
    if (physical && bytes > physical)
        return err_set(err, "the model declares a context of %d positions: the activations of a step that long take "
                       "%.2f GiB, more than this machine's %.2f GiB of memory", cfg->seq_len,
                       (double)bytes / (1u << 30), (double)physical / (1u << 30));
    return 0;
}
