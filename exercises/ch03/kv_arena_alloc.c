/* GENERATED from solutions/ch03/kv_arena_alloc.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=3`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 3 lab: kv_arena_alloc(), first fit: where a new region goes.
 * exercises/ch03/kv_arena_alloc.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=3` grades yours. */
#include "kv_arena.h"
#include "lab.h"

int kv_arena_alloc(KvArena *a, size_t bytes, size_t *offset)
{
    if (bytes == 0)
        return -1;
    // TODO(lab ch03.first_fit): find the first hole (lowest address) that holds `bytes`, take its start, shrink or remove it, and take `bytes` off free_bytes
    (void)a; (void)offset; (void)kv_arena_remove_hole;
    LAB_TODO("first fit: take the start of the first hole that is large enough");
    return -1;
}
