#include "bpe_merge.h"

#include <stdint.h>

#include "mem.h"

/* Scratch of the tokenizers: small, short-lived, charged where the
 * tokenizer's own tables are. */
#define MERGE_MEM MEM_ACTIVATIONS

int merge_work_reserve(MergeWork *work, int n, Err *err)
{
    if (n <= work->capacity)
        return 0;
    if (n > INT32_MAX / 3)
        return err_set(err, "a sequence of %d tokens is too long to merge", n);
    int capacity = work->capacity > 0 ? work->capacity : 64;
    while (capacity < n)
        capacity = capacity > INT32_MAX / 6 ? n : 2 * capacity;
    MergeSymbol *symbols = mem_alloc_array(MERGE_MEM, (size_t)capacity, sizeof *symbols);
    MergeCandidate *heap = mem_alloc_array(MERGE_MEM, 3 * (size_t)capacity, sizeof *heap);
    if (!symbols || !heap) {
        mem_free(symbols);
        mem_free(heap);
        return err_set(err, "out of memory for merging %d tokens", n);
    }
    merge_work_free(work);
    work->symbols = symbols;
    work->heap = heap;
    work->capacity = capacity;
    return 0;
}

void merge_work_free(MergeWork *work)
{
    mem_free(work->symbols);
    mem_free(work->heap);
    work->symbols = NULL;
    work->heap = NULL;
    work->capacity = 0;
}

/* Heap order: lower key first, then the leftmost pair. */
static int goes_before(const MergeCandidate *a, const MergeCandidate *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    return a->left < b->left;
}

static void heap_push(MergeCandidate *heap, int *size, MergeCandidate c)
{
    int i = (*size)++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!goes_before(&c, &heap[parent]))
            break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = c;
}

static MergeCandidate heap_pop(MergeCandidate *heap, int *size)
{
    MergeCandidate top = heap[0], last = heap[--(*size)];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= *size)
            break;
        if (child + 1 < *size && goes_before(&heap[child + 1], &heap[child]))
            child++;
        if (!goes_before(&heap[child], &last))
            break;
        heap[i] = heap[child];
        i = child;
    }
    if (*size > 0)
        heap[i] = last;
    return top;
}

/* Pushes the pair that starts at symbol `left`, if it merges. */
static void push_pair(MergeWork *w, int *size, int left, PairMergeFn merge, const void *ctx)
{
    int right = w->symbols[left].next;
    PairMerge m;
    if (right < 0 || !merge(ctx, w->symbols[left].id, w->symbols[right].id, &m))
        return;
    heap_push(w->heap, size, (MergeCandidate){.key = m.key, .left = left, .merged_id = m.merged_id});
}

/* A heap entry is stale when its left symbol was merged away, lost its
 * right neighbour, or now forms a different pair (one of the two symbols
 * took part in another merge since it was pushed). */
static int still_valid(const MergeWork *w, const MergeCandidate *c, PairMergeFn merge, const void *ctx)
{
    const MergeSymbol *left = &w->symbols[c->left];
    if (left->id < 0 || left->next < 0)
        return 0;
    PairMerge now;
    return merge(ctx, left->id, w->symbols[left->next].id, &now) && now.merged_id == c->merged_id &&
           now.key == c->key;
}

int merge_tokens(MergeWork *work, int *ids, int n, PairMergeFn merge, const void *ctx)
{
    if (n < 2)
        return n;
    MergeSymbol *s = work->symbols; /* [n] */
    for (int i = 0; i < n; i++)
        s[i] = (MergeSymbol){.id = ids[i], .prev = i - 1, .next = i + 1 < n ? i + 1 : -1};
    int size = 0;
    for (int i = 0; i + 1 < n; i++)
        push_pair(work, &size, i, merge, ctx);
    while (size > 0) {
        MergeCandidate c = heap_pop(work->heap, &size);
        if (!still_valid(work, &c, merge, ctx))
            continue;
        /* The right symbol joins the left one, which keeps its place. */
        int left = c.left, right = s[left].next;
        s[left].id = c.merged_id;
        s[left].next = s[right].next;
        if (s[right].next >= 0)
            s[s[right].next].prev = left;
        s[right].id = -1;
        if (s[left].prev >= 0)
            push_pair(work, &size, s[left].prev, merge, ctx);
        push_pair(work, &size, left, merge, ctx);
    }
    int out = 0;
    for (int i = 0; i >= 0; i = s[i].next)
        ids[out++] = s[i].id;
    return out;
}
