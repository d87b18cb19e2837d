/* Chapter 3 lab: kv_arena_alloc(), first fit: where a new region goes.
 * exercises/ch03/kv_arena_alloc.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=3` grades yours. */
#include "kv_arena.h"
#include "lab.h"

int kv_arena_alloc(KvArena *a, size_t bytes, size_t *offset)
{
    if (bytes == 0)
        return -1;
    // LAB BEGIN(ch03.first_fit): find the first hole (lowest address) that holds `bytes`, take its start, shrink or remove it, and take `bytes` off free_bytes
    for (int i = 0; i < a->n_holes; i++) {
        KvRange *h = &a->holes[i];
        if (h->bytes < bytes)
            continue;
        *offset = h->offset;
        h->offset += bytes;
        h->bytes -= bytes;
        if (h->bytes == 0)
            kv_arena_remove_hole(a, i);
        a->free_bytes -= bytes;
        return 0;
    }
    return -1;
    // LAB STUB:
    // (void)a; (void)offset; (void)kv_arena_remove_hole;
    // LAB_TODO("first fit: take the start of the first hole that is large enough");
    // return -1;
    // LAB END
}
