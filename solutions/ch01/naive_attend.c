/* Chapter 1 lab: naive_attend(), causal attention of one head over the
 * positions computed in this step. exercises/ch01/naive_attend.c is
 * generated from this file by scripts/make-exercises.sh; `make lab CH=1`
 * grades yours. */
#include <string.h>

#include "lab.h"
#include "naive.h"
#include "ops.h"

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
