/* libFuzzer target: the checkpoint loader (common/model/model.c: llama2.c
 * legacy and ak42 v1, and GGUF where the reader is built in), on bytes in
 * memory as model_load() sees its mapping, then two steps of the forward
 * pass on what it loaded.
 *
 * A checkpoint that opens must have a shape model_config_validate()
 * accepts and no more weight bytes than the file has. The forward pass
 * then reads every weight of the model (each matrix, norm and embedding
 * row it uses): a view that points past the image is an ASan report, and
 * weights that are NaN or Inf must not crash anything. The logits must
 * come out, NaN or not. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "mem.h"
#include "model.h"

/* Positions fed: enough for attention to read an earlier position. */
#define STEPS 2

/* The simplest K/V store: [STEPS][layers][kv_dim] keys and values. */
typedef struct {
    int layers, kv_dim, head_dim, kv_mul;
    float *keys, *values;
} TinyKv;

static float *kv_slot(float *base, const TinyKv *kv, int pos, int layer)
{
    return base + ((size_t)pos * (size_t)kv->layers + (size_t)layer) * (size_t)kv->kv_dim;
}

static void tiny_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    TinyKv *kv = ctx;
    memcpy(kv_slot(kv->keys, kv, e->pos, layer), k, (size_t)kv->kv_dim * sizeof(float));
    memcpy(kv_slot(kv->values, kv, e->pos, layer), v, (size_t)kv->kv_dim * sizeof(float));
}

static void tiny_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out,
                        float *scores)
{
    TinyKv *kv = ctx;
    int col = (head / kv->kv_mul) * kv->head_dim;
    for (int t = 0; t <= e->pos; t++) {
        const float *k = kv_slot(kv->keys, kv, t, layer) + col;
        float s = 0.0f;
        for (int i = 0; i < kv->head_dim; i++)
            s += q[i] * k[i];
        scores[t] = s;
    }
    memset(out, 0, (size_t)kv->head_dim * sizeof(float));
    for (int t = 0; t <= e->pos; t++) {
        const float *v = kv_slot(kv->values, kv, t, layer) + col;
        for (int i = 0; i < kv->head_dim; i++)
            out[i] += scores[t] * v[i];
    }
}

/* Two forward steps, one token each. Shapes with a long context are only
 * loaded, not run: their RoPE tables alone would make each input slow. */
static void run_forward(const Model *m)
{
    const ModelConfig *c = &m->cfg;
    if (c->seq_len < STEPS || c->seq_len > 4096)
        return;
    TinyKv kv = {c->n_layers, model_kv_dim(c), model_head_dim(c), model_kv_mul(c), NULL, NULL};
    size_t floats = (size_t)STEPS * (size_t)c->n_layers * (size_t)kv.kv_dim;
    kv.keys = mem_alloc_array(MEM_KV, floats, sizeof(float));
    kv.values = mem_alloc_array(MEM_KV, floats, sizeof(float));
    ForwardState fs;
    Err err = {{0}};
    if (kv.keys && kv.values && forward_state_init(&fs, c, 1, 1, &err) == 0) {
        KvSeam seam = {&kv, tiny_store, tiny_attend};
        volatile float sink = 0.0f;
        for (int pos = 0; pos < STEPS; pos++) {
            BatchEntry e = {.seq = 0, .pos = pos, .token = pos % c->vocab_size, .logits_row = 0};
            forward(m, &fs, &seam, &e, 1);
            sink += fs.logits[0] + fs.logits[c->vocab_size - 1];
        }
        (void)sink;
        forward_state_free(&fs);
    }
    mem_free(kv.keys);
    mem_free(kv.values);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* model_load() hands the loader a page-aligned mapping; a ledger
     * buffer is 64-byte aligned and exactly as long as the input, so a
     * read past the end is caught. */
    void *image = mem_alloc(MEM_WEIGHTS, size);
    if (!image)
        return 0;
    memcpy(image, data, size);
    Model m;
    Err err = {{0}};
    if (model_open_image(&m, image, size, &err) == 0) {
        if (model_config_validate(&m.cfg, NULL) != 0 || m.weight_bytes > size)
            abort();
        run_forward(&m);
        model_free(&m);
    } else if (err.msg[0] == '\0' || strchr(err.msg, '\n')) {
        abort(); /* a refusal is one line that says why */
    }
    mem_free(image);
    if (mem_live_buffers() != 0)
        abort();
    return 0;
}
