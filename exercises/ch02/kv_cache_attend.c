/* GENERATED from solutions/ch02/kv_cache_attend.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=2`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
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
    // TODO(lab ch02.attend): find this layer's rows and this head's KV slice (KV head = head / kv_mul) in the cache, then attention_reference() over positions 0..e->pos with a stride of kv_dim
    (void)q; (void)scores; (void)e; (void)head; (void)kv_dim; (void)layer;
    memset(out, 0, (size_t)head_dim * sizeof(float));
    LAB_TODO("causal attention of one head over the cached positions 0..e->pos");
}
