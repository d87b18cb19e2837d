/* Chapter 3 lab, part 1: how much to reserve, and where to put it.
 *
 * The exercise version of this file (exercises/ch03/kv_arena.c) is generated
 * from this one by scripts/make-exercises.sh: each region between LAB BEGIN
 * and LAB END is replaced by its stub. Run `make lab CH=3` to test yours. */
#include "kv_arena.h"

#include <string.h>

#include "lab.h"
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

/* Removes hole i from the list, keeping address order. */
static void remove_hole(KvArena *a, int i)
{
    memmove(&a->holes[i], &a->holes[i + 1], (size_t)(a->n_holes - i - 1) * sizeof(KvRange));
    a->n_holes--;
}

/* Inserts a hole at index i, keeping address order. The caller checked that
 * there is room. */
static void insert_hole(KvArena *a, int i, KvRange hole)
{
    memmove(&a->holes[i + 1], &a->holes[i], (size_t)(a->n_holes - i) * sizeof(KvRange));
    a->holes[i] = hole;
    a->n_holes++;
}

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
            remove_hole(a, i);
        a->free_bytes -= bytes;
        return 0;
    }
    return -1;
    // LAB STUB:
    // (void)a; (void)offset; (void)remove_hole;
    // LAB_TODO("first fit: take the start of the first hole that is large enough");
    // return -1;
    // LAB END
}

/* Index of the first hole that starts after `offset` (holes.size if none). */
static int first_hole_after(const KvArena *a, size_t offset)
{
    int i = 0;
    while (i < a->n_holes && a->holes[i].offset < offset)
        i++;
    return i;
}

int kv_arena_release(KvArena *a, size_t offset, size_t bytes, Err *err)
{
    if (bytes == 0 || offset > a->capacity || bytes > a->capacity - offset)
        return err_set(err, "release of [%zu, +%zu) is outside the arena of %zu bytes", offset, bytes, a->capacity);
    int i = first_hole_after(a, offset);
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
        remove_hole(a, i);
    } else if (touches_left) {
        a->holes[i - 1].bytes += bytes;
    } else if (touches_right) {
        a->holes[i].offset = offset;
        a->holes[i].bytes += bytes;
    } else {
        if (a->n_holes == a->max_holes)
            return err_set(err, "more than %d holes: more regions are live than the arena was set up for",
                           a->max_holes);
        insert_hole(a, i, (KvRange){.offset = offset, .bytes = bytes});
    }
    a->free_bytes += bytes;
    // LAB STUB:
    // (void)insert_hole;
    // LAB_TODO("turn the released range into a hole, merged with its neighbours");
    // LAB END
    return 0;
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

int reserve_initial_tokens(ReservePolicy policy, int n_tokens, int max_tokens, int seq_len)
{
    // LAB BEGIN(ch03.reserve): the region size each policy reserves at admission (see the table in kv_arena.h)
    switch (policy) {
    case RESERVE_MAX:
        return seq_len;
    case RESERVE_REQUEST:
        return min_int(max_tokens, seq_len); /* the last token's K/V is never stored */
    case RESERVE_POW2:
        return min_int(reserve_round_up_pow2(max_tokens), seq_len);
    case RESERVE_GROW:
        /* Room for what it has and the token it is about to produce, so
         * that a fresh region never has to grow at once. */
        return min_int(reserve_round_up_pow2(max_int(n_tokens + 1, RESERVE_GROW_MIN_TOKENS)), seq_len);
    }
    return seq_len;
    // LAB STUB:
    // (void)policy; (void)max_tokens; (void)seq_len; (void)min_int; (void)max_int;
    // LAB_TODO("reserve seq_len, max_tokens, its power of two, or a small first region");
    // return n_tokens;
    // LAB END
}

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
