/* Chapter 1 lab: recompute everything, keep nothing.
 *
 * The exercise version of this file (exercises/ch01/naive.c) is generated
 * from this one by scripts/make-exercises.sh: each region between LAB BEGIN
 * and LAB END is replaced by its stub. Run `make lab CH=1` to test yours. */
#include "naive.h"

#include <string.h>

#include "lab.h"
#include "mem.h"
#include "ops.h"

int naive_kv_init(NaiveKv *kv, const ModelConfig *cfg, Err *err)
{
    memset(kv, 0, sizeof *kv);
    kv->cfg = *cfg;
    kv->capacity = cfg->seq_len;
    size_t rows = (size_t)cfg->seq_len * (size_t)model_kv_dim(cfg);
    kv->keys = mem_alloc_array(MEM_ACTIVATIONS, rows, sizeof(float));
    kv->values = mem_alloc_array(MEM_ACTIVATIONS, rows, sizeof(float));
    if (!kv->keys || !kv->values) {
        naive_kv_free(kv);
        return err_set(err, "out of memory for transient K/V of %d positions", cfg->seq_len);
    }
    return 0;
}

void naive_kv_free(NaiveKv *kv)
{
    mem_free(kv->keys);
    mem_free(kv->values);
    memset(kv, 0, sizeof *kv);
}

int naive_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    (void)ctx;
    (void)n_tokens;
    (void)err;
    // LAB BEGIN(ch01.prepare): nothing survives a step, so how many positions can this step skip?
    *cached = 0;
    // LAB STUB:
    // LAB_TODO("say how many leading positions already have K/V (chapter 1 keeps none)");
    // *cached = n_tokens; /* wrong on purpose: claims everything is cached */
    // LAB END
    return 0;
}

void naive_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    NaiveKv *kv = ctx;
    (void)layer; /* one layer at a time: the next layer overwrites this one */
    int kv_dim = model_kv_dim(&kv->cfg);
    // LAB BEGIN(ch01.store): copy k and v into row e->pos of kv->keys and kv->values ([capacity][kv_dim])
    memcpy(kv->keys + (size_t)e->pos * kv_dim, k, (size_t)kv_dim * sizeof(float));
    memcpy(kv->values + (size_t)e->pos * kv_dim, v, (size_t)kv_dim * sizeof(float));
    // LAB STUB:
    // (void)kv_dim; (void)e; (void)k; (void)v;
    // LAB_TODO("copy the token's key and value into row e->pos of the transient buffers");
    // LAB END
}

void naive_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *scores)
{
    NaiveKv *kv = ctx;
    (void)layer;
    const ModelConfig *c = &kv->cfg;
    int head_dim = model_head_dim(c), kv_dim = model_kv_dim(c);
    // LAB BEGIN(ch01.attend): scores over positions 0..e->pos, softmax, weighted sum of values; head h reads KV head h / kv_mul
    const float *k_head = kv->keys + (head / model_kv_mul(c)) * head_dim;   /* [pos][kv_dim], this head's slice */
    const float *v_head = kv->values + (head / model_kv_mul(c)) * head_dim; /* same layout */
    int n_pos = e->pos + 1; /* causal: the token sees itself and everything before it */
    for (int t = 0; t < n_pos; t++)
        scores[t] = attention_score(q, k_head + (size_t)t * kv_dim, head_dim);
    softmax(scores, n_pos);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int t = 0; t < n_pos; t++)
        attention_accumulate(out, scores[t], v_head + (size_t)t * kv_dim, head_dim);
    // LAB STUB:
    // (void)q; (void)scores; (void)e; (void)head; (void)kv_dim;
    // memset(out, 0, (size_t)head_dim * sizeof(float));
    // LAB_TODO("causal attention of one head over positions 0..e->pos");
    // LAB END
}

SingleStreamKv naive_strategy(NaiveKv *kv)
{
    return (SingleStreamKv){
        .seam = {.ctx = kv, .store = naive_store, .attend = naive_attend},
        .prepare = naive_prepare,
        .usage = NULL, /* nothing is kept between steps */
    };
}
