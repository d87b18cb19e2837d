/* Chapter 3 extension: the buddy allocator of buddy.h.
 * Adds: a second arena, power-of-two blocks merged only with their buddy.
 * Option: --arena buddy. Taught in: book/ch03-batching.md, "Extension: the
 * buddy arena". The free blocks are one list in address order (as the
 * first-fit arena keeps its holes), small enough to scan: a block's buddy
 * is found by its offset, a free block to split by its size. */
#include "buddy.h"

#include <string.h>

#include "mem.h"

#define BUDDY_MAX_SLOTS (1 << 30)

int buddy_block_slots(int slots)
{
    int size = 1;
    while (size < slots)
        size *= 2;
    return size;
}

int buddy_largest_top_for(int n_slots)
{
    int size = 1;
    while (size <= n_slots / 2)
        size *= 2;
    return size;
}

static int order_of(int size)
{
    int k = 0;
    while ((1 << k) < size)
        k++;
    return k;
}

/* The top-level blocks: the largest power of two left, again and again.
 * Each starts at the sum of larger powers of two, so at a multiple of its
 * own size, as every block inside it will. */
static int count_tops(int n_slots)
{
    int n = 0;
    for (int left = n_slots; left > 0; left -= buddy_largest_top_for(left))
        n++;
    return n;
}

int buddy_init(BuddyArena *a, int n_slots, int max_regions, Err *err)
{
    memset(a, 0, sizeof *a);
    if (n_slots < 1 || n_slots > BUDDY_MAX_SLOTS)
        return err_set(err, "a buddy arena of %d slots: give 1 to %d", n_slots, BUDDY_MAX_SLOTS);
    if (max_regions < 1)
        return err_set(err, "a buddy arena for %d regions holds nothing", max_regions);
    int n_tops = count_tops(n_slots), levels = order_of(buddy_largest_top_for(n_slots));
    a->tops = mem_alloc_array(MEM_KV_METADATA, (size_t)n_tops, sizeof(BuddyBlock));
    /* A free block that is not a whole top-level block has a buddy that is
     * not free, so some live region lies under that buddy; a region has at
     * most `levels` such buddies above it. */
    a->max_free = n_tops + max_regions * levels;
    a->free = mem_alloc_array(MEM_KV_METADATA, (size_t)a->max_free, sizeof(BuddyBlock));
    if (!a->tops || !a->free) {
        buddy_free(a);
        return err_set(err, "out of memory for a buddy arena of %d slots", n_slots);
    }
    int offset = 0;
    for (int i = 0; i < n_tops; i++) {
        int size = buddy_largest_top_for(n_slots - offset);
        a->tops[i] = a->free[i] = (BuddyBlock){.offset = offset, .order = order_of(size)};
        offset += size;
    }
    a->n_tops = a->n_free = n_tops;
    a->n_slots = a->free_slots = n_slots;
    return 0;
}

void buddy_free(BuddyArena *a)
{
    mem_free(a->tops);
    mem_free(a->free);
    memset(a, 0, sizeof *a);
}

int buddy_largest_top(const BuddyArena *a)
{
    return a->n_tops > 0 ? 1 << a->tops[0].order : 0;
}

int buddy_largest_free(const BuddyArena *a)
{
    int largest = 0;
    for (int i = 0; i < a->n_free; i++)
        if ((1 << a->free[i].order) > largest)
            largest = 1 << a->free[i].order;
    return largest;
}

static void remove_free(BuddyArena *a, int i)
{
    memmove(&a->free[i], &a->free[i + 1], (size_t)(a->n_free - i - 1) * sizeof(BuddyBlock));
    a->n_free--;
}

/* Keeps the list in address order. The caller has checked there is room. */
static void insert_free(BuddyArena *a, BuddyBlock block)
{
    int i = 0;
    while (i < a->n_free && a->free[i].offset < block.offset)
        i++;
    memmove(&a->free[i + 1], &a->free[i], (size_t)(a->n_free - i) * sizeof(BuddyBlock));
    a->free[i] = block;
    a->n_free++;
}

/* The smallest free block of at least 2^order slots, the lowest address
 * among equals; -1 when none. */
static int smallest_free_at_least(const BuddyArena *a, int order)
{
    int best = -1;
    for (int i = 0; i < a->n_free; i++)
        if (a->free[i].order >= order && (best < 0 || a->free[i].order < a->free[best].order))
            best = i;
    return best;
}

int buddy_alloc(BuddyArena *a, int slots, int *offset)
{
    if (slots < 1 || slots > BUDDY_MAX_SLOTS)
        return -1;
    int order = order_of(buddy_block_slots(slots));
    int i = smallest_free_at_least(a, order);
    if (i < 0)
        return -1;
    BuddyBlock block = a->free[i];
    if (a->n_free - 1 + (block.order - order) > a->max_free)
        return -1; /* more live regions than buddy_init() was told of */
    remove_free(a, i);
    /* Split: keep the lower half, free the upper one, until it fits. */
    while (block.order > order) {
        block.order--;
        insert_free(a, (BuddyBlock){.offset = block.offset + (1 << block.order), .order = block.order});
    }
    a->free_slots -= 1 << order;
    *offset = block.offset;
    return 1 << order;
}

/* The top-level block that holds slot @p offset, or -1. */
static int top_of(const BuddyArena *a, int offset)
{
    for (int i = 0; i < a->n_tops; i++)
        if (offset >= a->tops[i].offset && offset < a->tops[i].offset + (1 << a->tops[i].order))
            return i;
    return -1;
}

static int find_free(const BuddyArena *a, int offset, int order)
{
    for (int i = 0; i < a->n_free; i++)
        if (a->free[i].offset == offset && a->free[i].order == order)
            return i;
    return -1;
}

/* Whether [offset, offset + size) overlaps a free block. */
static int overlaps_free(const BuddyArena *a, int offset, int size)
{
    for (int i = 0; i < a->n_free; i++) {
        int lo = a->free[i].offset, hi = lo + (1 << a->free[i].order);
        if (lo < offset + size && offset < hi)
            return 1;
    }
    return 0;
}

int buddy_release(BuddyArena *a, int offset, int slots, Err *err)
{
    int t = top_of(a, offset);
    if (slots < 1 || slots != buddy_block_slots(slots) || t < 0 || slots > (1 << a->tops[t].order) ||
        (offset - a->tops[t].offset) % slots != 0)
        return err_set(err, "release of %d slots at slot %d: not a block of this buddy arena", slots, offset);
    if (overlaps_free(a, offset, slots))
        return err_set(err, "release of %d slots at slot %d overlaps free slots: freed twice, or the wrong size",
                       slots, offset);
    BuddyBlock block = {.offset = offset, .order = order_of(slots)};
    /* Merge up while the buddy is free and whole; a top-level block has none. */
    while (block.order < a->tops[t].order) {
        int buddy = block.offset ^ (1 << block.order);
        int i = find_free(a, buddy, block.order);
        if (i < 0)
            break;
        remove_free(a, i);
        if (buddy < block.offset)
            block.offset = buddy;
        block.order++;
    }
    if (a->n_free == a->max_free)
        return err_set(err, "more than %d free blocks: more regions are live than the arena was set up for",
                       a->max_free);
    insert_free(a, block);
    a->free_slots += slots;
    return 0;
}
