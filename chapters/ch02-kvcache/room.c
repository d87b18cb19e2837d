/* Chapter 2: when the contiguous cache doubles. kv_cache_prepare() (the
 * lab) asks here for room before a step, and the room is made by the lab's
 * kv_cache_grow(). It is a file apart from kvcache.c, which hands the lab
 * to the loop, so that calls between the files go one way only (make
 * check-layout). */
#include "kvcache.h"

int kv_cache_grow_target(const KvCache *kv, int n_tokens, int *target, Err *err)
{
    int seq_len = kv->cfg.seq_len;
    if (n_tokens > seq_len || kv->policy == KV_ALLOC_MAX)
        return err_set(err, "the sequence needs %d positions; the KV cache holds %d (seq_len %d)", n_tokens,
                       kv->capacity, seq_len);
    *target = kv->capacity;
    while (*target < n_tokens)
        *target = 2 * *target < seq_len ? 2 * *target : seq_len;
    return 0;
}

int kv_cache_make_room(KvCache *kv, int n_tokens, Err *err)
{
    int target = 0;
    if (kv_cache_grow_target(kv, n_tokens, &target, err))
        return -1;
    return kv_cache_grow(kv, target, err);
}
