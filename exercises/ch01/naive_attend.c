/* GENERATED from solutions/ch01/naive_attend.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=1`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
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
    // TODO(lab ch01.attend): scores over positions 0..e->pos, softmax, weighted sum of values; head h reads KV head h / kv_mul
    (void)q; (void)scores; (void)e; (void)head; (void)kv_dim;
    memset(out, 0, (size_t)head_dim * sizeof(float));
    LAB_TODO("causal attention of one head over positions 0..e->pos");
}
