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
    // LAB BEGIN(ch02.prepare): positions 0..kv->length-1 already have K/V: report them as cached, and record that after this step 0..n_tokens-1 will
    if (n_tokens <= kv->length)
        return err_set(err, "the sequence has %d tokens but the cache already holds %d: nothing new to run", n_tokens,
                       kv->length);
    *cached = kv->length;
    kv->length = n_tokens;
    // LAB STUB:
    // (void)n_tokens;
    // *cached = 0;
    // LAB_TODO("say how many leading positions already have K/V, and remember how many will after this step");
    // LAB END
    return 0;
}
