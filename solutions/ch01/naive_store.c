/* Chapter 1 lab: naive_store(), keeping a token's K and V for the rest of
 * the layer. exercises/ch01/naive_store.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=1` grades yours. */
#include <string.h>

#include "lab.h"
#include "naive.h"

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
