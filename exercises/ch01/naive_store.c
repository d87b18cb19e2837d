/* GENERATED from solutions/ch01/naive_store.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=1`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
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
    // TODO(lab ch01.store): copy k and v into row e->pos of kv->keys and kv->values ([capacity][kv_dim])
    (void)kv_dim; (void)e; (void)k; (void)v;
    LAB_TODO("copy the token's key and value into row e->pos of the transient buffers");
}
