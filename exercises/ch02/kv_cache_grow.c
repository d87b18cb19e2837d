/* GENERATED from solutions/ch02/kv_cache_grow.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=2`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 2 lab: kv_cache_grow(), moving a full cache into a larger one
 * (--kv-alloc grow). exercises/ch02/kv_cache_grow.c is generated from this
 * file by scripts/make-exercises.sh; `make lab CH=2` grades yours. */
#include <string.h>

#include "kvcache.h"
#include "lab.h"
#include "mem.h"

int kv_cache_grow(KvCache *kv, int new_capacity, Err *err)
{
    if (new_capacity <= kv->capacity || new_capacity > kv->cfg.seq_len)
        return err_set(err, "cannot grow a KV cache of %d positions to %d (the model's seq_len is %d)", kv->capacity,
                       new_capacity, kv->cfg.seq_len);
    size_t row_bytes = (size_t)kv->kv_dim * sizeof(float);
    int n_layers = kv->cfg.n_layers;
    // TODO(lab ch02.grow): allocate new_capacity positions (mem_alloc, MEM_KV), copy rows 0..length-1 of every layer's keys and values, free the old buffer, attach the new one; count reallocations, bytes_copied and peak_held_bytes (old + new bytes, while both exist)
    (void)row_bytes; (void)n_layers;
    LAB_TODO("move the cache into a buffer of new_capacity positions and count the move");
    return err_set(err, "kv_cache_grow is not written yet (cannot grow to %d positions)", new_capacity);
    return 0;
}
