/* GENERATED from solutions/ch01/naive_prepare.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=1`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 1 lab: naive_prepare(), how many positions a step may skip.
 * exercises/ch01/naive_prepare.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=1` grades yours. */
#include "lab.h"
#include "naive.h"

int naive_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    (void)ctx;
    (void)n_tokens;
    (void)err;
    // TODO(lab ch01.prepare): nothing survives a step, so how many positions can this step skip?
    LAB_TODO("say how many leading positions already have K/V (chapter 1 keeps none)");
    *cached = n_tokens; /* wrong on purpose: claims everything is cached */
    return 0;
}
