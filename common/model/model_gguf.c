#include "model_gguf.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

int model_weight_type_from_gguf(uint32_t gguf_type, WeightType *out)
{
    switch (gguf_type) {
    case GGUF_TENSOR_F32: *out = WEIGHT_F32; return 0;
    case GGUF_TENSOR_F16: *out = WEIGHT_F16; return 0;
    case GGUF_TENSOR_BF16: *out = WEIGHT_BF16; return 0;
    case GGUF_TENSOR_Q8_0: *out = WEIGHT_Q8_0; return 0;
    case GGUF_TENSOR_Q4_0: *out = WEIGHT_Q4_0; return 0;
    case GGUF_TENSOR_Q4_1: *out = WEIGHT_Q4_1; return 0;
    default: return -1;
    }
}

/* A count from the metadata as an int (the configuration's type). */
static int get_int(const GgufFile *f, const char *key, int *out, Err *err)
{
    uint32_t v;
    if (gguf_get_u32(f, key, &v, err))
        return -1;
    if (v > INT_MAX)
        return err_set(err, "metadata key '%s' is %u; more than %d is not a plausible model", key, v, INT_MAX);
    *out = (int)v;
    return 0;
}

static int get_int_or(const GgufFile *f, const char *key, int fallback, int *out, Err *err)
{
    if (!gguf_find(f, key)) {
        *out = fallback;
        return 0;
    }
    return get_int(f, key, out, err);
}

static int read_architecture(const GgufFile *f, Err *err)
{
    GgufString arch;
    if (gguf_get_string(f, "general.architecture", &arch, err))
        return -1;
    char name[64];
    if (!gguf_string_eq(arch, "llama"))
        return err_set(err, "architecture '%s' is not supported (kvlab runs 'llama')",
                       gguf_string_printable(arch, name, sizeof name));
    return 0;
}

/* RoPE variants kvlab does not compute: partial rotation, scaled RoPE. */
static int check_rope(const GgufFile *f, const ModelConfig *c, Err *err)
{
    int rot = 0;
    if (get_int_or(f, "llama.rope.dimension_count", model_head_dim(c), &rot, err))
        return -1;
    if (rot != model_head_dim(c))
        return err_set(err, "llama.rope.dimension_count is %d; kvlab rotates whole heads of %d", rot,
                       model_head_dim(c));
    if (gguf_find(f, "llama.rope.scaling.type")) {
        GgufString s;
        if (gguf_get_string(f, "llama.rope.scaling.type", &s, err))
            return -1;
        char name[64];
        if (!gguf_string_eq(s, "none"))
            return err_set(err, "llama.rope.scaling.type is '%s'; kvlab computes plain RoPE only",
                           gguf_string_printable(s, name, sizeof name));
    }
    return 0;
}

static int read_config(const GgufFile *f, Model *m, Err *err)
{
    ModelConfig *c = &m->cfg;
    if (read_architecture(f, err) || get_int(f, "llama.block_count", &c->n_layers, err) ||
        get_int(f, "llama.embedding_length", &c->dim, err) ||
        get_int(f, "llama.feed_forward_length", &c->hidden_dim, err) ||
        get_int(f, "llama.attention.head_count", &c->n_heads, err) ||
        get_int_or(f, "llama.attention.head_count_kv", c->n_heads, &c->n_kv_heads, err) ||
        get_int(f, "llama.context_length", &c->seq_len, err) ||
        gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &m->rms_eps, err))
        return -1;
    m->rope_theta = MODEL_DEFAULT_ROPE_THETA;
    if (gguf_find(f, "llama.rope.freq_base") && gguf_get_f32(f, "llama.rope.freq_base", &m->rope_theta, err))
        return -1;
    /* Written so that NaN fails too. */
    if (!(m->rms_eps > 0.0f && m->rms_eps < 1.0f))
        return err_set(err, "llama.attention.layer_norm_rms_epsilon is %g; it must be in (0, 1)", (double)m->rms_eps);
    if (!(m->rope_theta > 1.0f && m->rope_theta < 1e12f))
        return err_set(err, "llama.rope.freq_base is %g; it must be above 1", (double)m->rope_theta);
    /* The vocabulary is the embedding table's row count. */
    const GgufTensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb)
        return err_set(err, "tensor 'token_embd.weight' is missing");
    if (emb->n_dims != 2 || emb->dims[1] > INT_MAX)
        return err_set(err, "tensor 'token_embd.weight' is not a [dim, vocab] matrix");
    c->vocab_size = (int)emb->dims[1];
    int vocab = 0;
    if (get_int_or(f, "llama.vocab_size", c->vocab_size, &vocab, err))
        return -1;
    if (vocab != c->vocab_size)
        return err_set(err, "llama.vocab_size is %d but token_embd.weight has %d rows", vocab, c->vocab_size);
    if (model_config_validate(c, err))
        return -1;
    return check_rope(f, c, err);
}

/* What binding the tensors adds up. */
typedef struct {
    const GgufFile *f;
    size_t bytes, f32_bytes;
    unsigned types;
} Binder;

static const GgufTensor *find_tensor(Binder *b, const char *name, Err *err)
{
    const GgufTensor *t = gguf_find_tensor(b->f, name);
    if (!t)
        err_set(err, "tensor '%s' is missing", name);
    return t;
}

static int bind_matrix(Binder *b, const char *name, int rows, int cols, WeightMatrix *out, Err *err)
{
    const GgufTensor *t = find_tensor(b, name, err);
    if (!t)
        return -1;
    WeightType wt;
    if (model_weight_type_from_gguf(t->type, &wt))
        return err_set(err, "tensor '%s' is %s; kvlab computes with F32, F16, BF16, Q8_0, Q4_0 and Q4_1", name,
                       gguf_tensor_type_name(t->type));
    if (t->n_elements != (uint64_t)rows * (uint64_t)cols || t->dims[0] != (uint64_t)cols)
        return err_set(err, "tensor '%s' has shape [%llu, %llu], the configuration needs [%d, %d]", name,
                       (unsigned long long)t->dims[0], (unsigned long long)(t->n_elements / t->dims[0]), cols, rows);
    if (wt == WEIGHT_F32 && (uintptr_t)t->data % sizeof(float) != 0)
        return err_set(err, "tensor '%s': f32 data at an address that is not a multiple of 4", name);
    *out = weight_matrix(t->data, wt, rows, cols);
    b->bytes += (size_t)t->bytes;
    b->f32_bytes += (size_t)t->n_elements * sizeof(float);
    b->types |= 1u << wt;
    return 0;
}

static int bind_norm(Binder *b, const char *name, int n, const float **out, Err *err)
{
    const GgufTensor *t = find_tensor(b, name, err);
    if (!t)
        return -1;
    if (t->type != GGUF_TENSOR_F32)
        return err_set(err, "tensor '%s' is %s; norm weights must be F32", name, gguf_tensor_type_name(t->type));
    if (t->n_elements != (uint64_t)n)
        return err_set(err, "tensor '%s' has %llu elements, the configuration needs %d", name,
                       (unsigned long long)t->n_elements, n);
    if ((uintptr_t)t->data % sizeof(float) != 0)
        return err_set(err, "tensor '%s': f32 data at an address that is not a multiple of 4", name);
    *out = t->data;
    b->bytes += (size_t)t->bytes;
    b->f32_bytes += (size_t)t->bytes;
    return 0;
}

static int bind_layer(Binder *b, const ModelConfig *c, int l, LayerWeights *lw, Err *err)
{
    int dim = c->dim, kv = model_kv_dim(c), hid = c->hidden_dim;
    char name[64];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix), name)
    return bind_norm(b, NAME("attn_norm"), dim, &lw->rms_att, err) ||
                   bind_matrix(b, NAME("attn_q"), dim, dim, &lw->wq, err) ||
                   bind_matrix(b, NAME("attn_k"), kv, dim, &lw->wk, err) ||
                   bind_matrix(b, NAME("attn_v"), kv, dim, &lw->wv, err) ||
                   bind_matrix(b, NAME("attn_output"), dim, dim, &lw->wo, err) ||
                   bind_norm(b, NAME("ffn_norm"), dim, &lw->rms_ffn, err) ||
                   bind_matrix(b, NAME("ffn_gate"), hid, dim, &lw->w1, err) ||
                   bind_matrix(b, NAME("ffn_down"), dim, hid, &lw->w2, err) ||
                   bind_matrix(b, NAME("ffn_up"), hid, dim, &lw->w3, err)
               ? -1
               : 0;
#undef NAME
}

int model_from_gguf(Model *m, Err *err)
{
    ModelConfig *c = &m->cfg;
    if (read_config(&m->gguf, m, err))
        return -1;
    m->format = MODEL_FORMAT_GGUF;
    Binder b = {.f = &m->gguf};
    ModelWeights *w = &m->w;
    if (bind_matrix(&b, "token_embd.weight", c->vocab_size, c->dim, &w->token_embedding, err) ||
        bind_norm(&b, "output_norm.weight", c->dim, &w->rms_final, err))
        return -1;
    for (int l = 0; l < c->n_layers; l++)
        if (bind_layer(&b, c, l, &w->layers[l], err))
            return -1;
    m->shared_classifier = gguf_find_tensor(&m->gguf, "output.weight") == NULL;
    if (m->shared_classifier)
        w->wcls = w->token_embedding;
    else if (bind_matrix(&b, "output.weight", c->vocab_size, c->dim, &w->wcls, err))
        return -1;
    if (gguf_check_no_overlap(&m->gguf, err))
        return -1;
    m->weight_bytes = b.bytes;
    m->weight_f32_bytes = b.f32_bytes;
    m->stored_types = b.types;
    return 0;
}
