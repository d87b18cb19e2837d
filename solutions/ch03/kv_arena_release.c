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
    // LAB BEGIN(ch03.coalesce): make [offset, offset+bytes) a hole before holes[i]; merge it with holes[i-1] and holes[i] when they touch; add `bytes` to free_bytes
    int touches_left = i > 0 && a->holes[i - 1].offset + a->holes[i - 1].bytes == offset;
    int touches_right = i < a->n_holes && offset + bytes == a->holes[i].offset;
    if (touches_left && touches_right) {
        a->holes[i - 1].bytes += bytes + a->holes[i].bytes;
        kv_arena_remove_hole(a, i);
    } else if (touches_left) {
        a->holes[i - 1].bytes += bytes;
    } else if (touches_right) {
        a->holes[i].offset = offset;
        a->holes[i].bytes += bytes;
    } else {
        if (a->n_holes == a->max_holes)
            return err_set(err, "more than %d holes: more regions are live than the arena was set up for",
                           a->max_holes);
        kv_arena_insert_hole(a, i, (KvRange){.offset = offset, .bytes = bytes});
    }
    a->free_bytes += bytes;
    // LAB STUB:
    // (void)kv_arena_insert_hole;
    // LAB_TODO("turn the released range into a hole, merged with its neighbours");
    // LAB END
    return 0;
}
