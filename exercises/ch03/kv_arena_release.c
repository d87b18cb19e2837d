/* GENERATED from solutions/ch03/kv_arena_release.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=3`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 3 lab: kv_arena_release(), a freed region becomes a hole merged
 * with its neighbours. exercises/ch03/kv_arena_release.c is generated from
 * this file by scripts/make-exercises.sh; `make lab CH=3` grades yours. */
#include "kv_arena.h"
#include "lab.h"

int kv_arena_release(KvArena *a, size_t offset, size_t bytes, Err *err)
{
    if (bytes == 0 || offset > a->capacity || bytes > a->capacity - offset)
        return err_set(err, "release of [%zu, +%zu) is outside the arena of %zu bytes", offset, bytes, a->capacity);
    int i = kv_arena_first_hole_after(a, offset);
    /* The range must lie strictly between hole i-1 and hole i: touching
     * them is fine (that is a merge), overlapping them is a double free. */
    if ((i > 0 && a->holes[i - 1].offset + a->holes[i - 1].bytes > offset) ||
        (i < a->n_holes && offset + bytes > a->holes[i].offset))
        return err_set(err, "release of [%zu, +%zu) overlaps free memory: freed twice, or the wrong size", offset,
                       bytes);
    // TODO(lab ch03.coalesce): make [offset, offset+bytes) a hole before holes[i]; merge it with holes[i-1] and holes[i] when they touch; add `bytes` to free_bytes
    (void)kv_arena_insert_hole;
    LAB_TODO("turn the released range into a hole, merged with its neighbours");
    return 0;
}
