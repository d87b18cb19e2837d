/* Chapter 2 lab: kv_cache_attend(), attention over the cached positions.
 * exercises/ch02/kv_cache_attend.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=2` grades yours. */
#include <string.h>

#include "kvcache.h"
#include "lab.h"
#include "ops.h"

void kv_cache_attend(void *ctx, int layer, const BatchEntry *e, int head, const float *q, float *out, float *scores)
{
    KvCache *kv = ctx;
    const ModelConfig *c = &kv->cfg;
    int head_dim = model_head_dim(c), kv_dim = kv->kv_dim;
    // LAB BEGIN(ch02.attend): find this layer's rows and this head's KV slice (KV head = head / kv_mul) in the cache, then attention_reference() over positions 0..e->pos with a stride of kv_dim
    size_t layer_rows = (size_t)layer * (size_t)kv->capacity * (size_t)kv_dim; /* start of [capacity][kv_dim] */
    size_t head_offset = (size_t)(head / model_kv_mul(c)) * (size_t)head_dim;   /* the KV head's slice of a row */
    const float *k_head = kv->keys + layer_rows + head_offset;   /* [pos][kv_dim], read head_dim floats per row */
    const float *v_head = kv->values + layer_rows + head_offset; /* same layout */
    /* Causal: the token sees itself and everything before it. The shared
     * reference does chapter 1's arithmetic in chapter 1's order. */
    attention_reference(out, q, k_head, v_head, e->pos + 1, kv_dim, head_dim, scores);
    // LAB STUB:
    // (void)q; (void)scores; (void)e; (void)head; (void)kv_dim; (void)layer;
    // memset(out, 0, (size_t)head_dim * sizeof(float));
    // LAB_TODO("causal attention of one head over the cached positions 0..e->pos");
    // LAB END
}
