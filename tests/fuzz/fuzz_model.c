/* libFuzzer target: the llama2.c checkpoint loader (legacy and ak42 v1,
 * common/model/model.c), on bytes in memory as model_load() sees its
 * mapping.
 *
 * A checkpoint that opens must be exactly as large as its header says,
 * its shape must pass model_config_validate(), and every tensor view must
 * lie inside the image: the first and last float of each are read, so
 * that ASan catches a view that points past the end. Weights may be NaN or
 * Inf; reading them must not crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "model.h"

/* Reads the first and last float of a tensor of n floats. */
static float touch(const float *t, size_t n)
{
    return n ? t[0] + t[n - 1] : 0.0f;
}

static void check_model(const Model *m, size_t bytes)
{
    const ModelConfig *c = &m->cfg;
    if (model_config_validate(c, NULL) != 0 || m->weight_bytes > bytes)
        abort();
    size_t L = (size_t)c->n_layers, dim = (size_t)c->dim, kv = (size_t)model_kv_dim(c);
    size_t hid = (size_t)c->hidden_dim, vocab = (size_t)c->vocab_size;
    const ModelWeights *w = &m->w;
    volatile float sum = 0.0f;
    sum += touch(w->token_embedding, vocab * dim);
    sum += touch(w->rms_att, L * dim);
    sum += touch(w->wq, L * dim * dim);
    sum += touch(w->wk, L * kv * dim);
    sum += touch(w->wv, L * kv * dim);
    sum += touch(w->wo, L * dim * dim);
    sum += touch(w->rms_ffn, L * dim);
    sum += touch(w->w1, L * hid * dim);
    sum += touch(w->w2, L * dim * hid);
    sum += touch(w->w3, L * hid * dim);
    sum += touch(w->rms_final, dim);
    sum += touch(w->wcls, vocab * dim);
    (void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* model_load() hands the loader a page-aligned mapping; a ledger
     * buffer is 64-byte aligned, and sized exactly, so reads past the end
     * are caught. */
    void *image = mem_alloc(MEM_WEIGHTS, size);
    if (!image)
        return 0;
    memcpy(image, data, size);
    Model m;
    Err err = {{0}};
    if (model_open_image(&m, image, size, &err) == 0) {
        check_model(&m, size);
        model_free(&m);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    mem_free(image);
    if (mem_live_buffers() != 0)
        abort();
    return 0;
}
