/* GENERATED from solutions/ch02/kv_cache_prepare.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=2`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 2 lab: kv_cache_prepare(), how many positions already have K/V.
 * exercises/ch02/kv_cache_prepare.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=2` grades yours. */
#include "kvcache.h"
#include "lab.h"

int kv_cache_prepare(void *ctx, int n_tokens, int *cached, Err *err)
{
    KvCache *kv = ctx;
    if (n_tokens > kv->capacity && kv_cache_make_room(kv, n_tokens, err))
        return -1;
    // TODO(lab ch02.prepare): positions 0..kv->length-1 already have K/V: report them as cached, and record that after this step 0..n_tokens-1 will
    (void)n_tokens;
    *cached = 0;
    LAB_TODO("say how many leading positions already have K/V, and remember how many will after this step");
    return 0;
}
