/* Chapter 3's arena, around the lab's kv_arena_alloc() (first fit) and
 * kv_arena_release() (merging holes), and the largest region a request
 * can hold under a policy, from the lab's reserve_initial_tokens()
 * (solutions/ch03/). The policies' names and sizes are in reserve.c. */
#include "kv_arena.h"

#include <string.h>

#include "mem.h"

/* ------------------------------------------------------------ the arena */

int kv_arena_init(KvArena *a, size_t capacity, int max_regions, Err *err)
{
    memset(a, 0, sizeof *a);
    if (capacity == 0)
        return err_set(err, "a KV arena of 0 bytes holds nothing");
    if (max_regions < 1)
        return err_set(err, "a KV arena for %d regions holds nothing", max_regions);
    a->max_holes = max_regions + 1;
    a->holes = mem_alloc_array(MEM_KV_METADATA, (size_t)a->max_holes, sizeof(KvRange));
    if (!a->holes)
        return err_set(err, "out of memory for the hole list of %d regions", max_regions);
    a->capacity = a->free_bytes = capacity;
    a->holes[0] = (KvRange){.offset = 0, .bytes = capacity};
    a->n_holes = 1;
    return 0;
}

void kv_arena_free(KvArena *a)
{
    mem_free(a->holes);
    memset(a, 0, sizeof *a);
}

void kv_arena_remove_hole(KvArena *a, int i)
{
    memmove(&a->holes[i], &a->holes[i + 1], (size_t)(a->n_holes - i - 1) * sizeof(KvRange));
    a->n_holes--;
}

void kv_arena_insert_hole(KvArena *a, int i, KvRange hole)
{
    memmove(&a->holes[i + 1], &a->holes[i], (size_t)(a->n_holes - i) * sizeof(KvRange));
    a->holes[i] = hole;
    a->n_holes++;
}

int kv_arena_first_hole_after(const KvArena *a, size_t offset)
{
    int i = 0;
    while (i < a->n_holes && a->holes[i].offset < offset)
        i++;
    return i;
}

size_t kv_arena_largest_hole(const KvArena *a)
{
    size_t largest = 0;
    for (int i = 0; i < a->n_holes; i++)
        if (a->holes[i].bytes > largest)
            largest = a->holes[i].bytes;
    return largest;
}

size_t kv_arena_free_in_holes_below(const KvArena *a, size_t bytes)
{
    size_t sum = 0;
    for (int i = 0; i < a->n_holes; i++)
        if (a->holes[i].bytes < bytes)
            sum += a->holes[i].bytes;
    return sum;
}

/* ------------------------------------------------------------ the largest region */

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

int reserve_largest_tokens(ReservePolicy policy, int max_tokens, int seq_len)
{
    if (policy == RESERVE_GROW) /* first region or the last doubling, whichever is larger */
        return min_int(reserve_round_up_pow2(max_int(max_tokens, RESERVE_GROW_MIN_TOKENS)), seq_len);
    return reserve_initial_tokens(policy, max_tokens, max_tokens, seq_len);
}
