/* Chapter 3's arena and reservation policies, around the lab's
 * kv_arena_alloc() (first fit), kv_arena_release() (merging holes) and
 * reserve_initial_tokens() (solutions/ch03/). */
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

/* ------------------------------------------------------------ policies */

static const char *const POLICY_NAMES[] = {"max", "request", "pow2", "grow"};

int reserve_policy_parse(const char *name, ReservePolicy *policy, Err *err)
{
    for (int p = RESERVE_MAX; p <= RESERVE_GROW; p++)
        if (strcmp(name, POLICY_NAMES[p]) == 0) {
            *policy = (ReservePolicy)p;
            return 0;
        }
    return err_set(err, "--reserve: '%s' is not one of max, request, pow2, grow", name);
}

const char *reserve_policy_name(ReservePolicy policy)
{
    return policy >= RESERVE_MAX && policy <= RESERVE_GROW ? POLICY_NAMES[policy] : "?";
}

int reserve_round_up_pow2(int n)
{
    int p = 1;
    while (p < n)
        p *= 2;
    return p;
}

static int min_int(int a, int b) { return a < b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

int reserve_grown_tokens(int current, int needed, int seq_len)
{
    int tokens = current > 0 ? current : 1;
    while (tokens < needed && tokens < seq_len)
        tokens *= 2;
    return min_int(tokens, seq_len);
}

int reserve_largest_tokens(ReservePolicy policy, int max_tokens, int seq_len)
{
    if (policy == RESERVE_GROW) /* first region or the last doubling, whichever is larger */
        return min_int(reserve_round_up_pow2(max_int(max_tokens, RESERVE_GROW_MIN_TOKENS)), seq_len);
    return reserve_initial_tokens(policy, max_tokens, max_tokens, seq_len);
}
