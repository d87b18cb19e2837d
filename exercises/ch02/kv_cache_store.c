/* GENERATED from solutions/ch02/kv_cache_store.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=2`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 2 lab: kv_cache_store(), appending a token's K and V to the cache.
 * exercises/ch02/kv_cache_store.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=2` grades yours. */
#include <string.h>

#include "kvcache.h"
#include "lab.h"

void kv_cache_store(void *ctx, int layer, const BatchEntry *e, const float *k, const float *v)
{
    KvCache *kv = ctx;
    int kv_dim = kv->kv_dim;
    // TODO(lab ch02.store): copy k and v into row (layer, e->pos) of kv->keys and kv->values ([n_layers][capacity][kv_dim])
    (void)layer; (void)e; (void)k; (void)v; (void)kv_dim;
    LAB_TODO("append the token's key and value at row (layer, e->pos) of the cache");
}
