/* Bug hunt "radix_refcount": a radix tree with lock counts (radix_lock.h). */
#include <string.h>

#include "radix_lock.h"

void radix_init(RadixTree *t)
{
    memset(t, 0, sizeof *t);
    t->nodes[0].in_use = 1;
    t->nodes[0].parent = -1;
}

static int new_node(RadixTree *t, int parent)
{
    for (int i = 1; i < RADIX_MAX_NODES; i++) {
        RadixNode *n = &t->nodes[i];
        if (!n->in_use && t->nodes[parent].n_children < RADIX_MAX_CHILDREN) {
            memset(n, 0, sizeof *n);
            n->in_use = 1;
            n->parent = parent;
            t->nodes[parent].children[t->nodes[parent].n_children++] = i;
            return i;
        }
    }
    return -1;
}

static void replace_child(RadixNode *parent, int old_id, int new_id)
{
    for (int i = 0; i < parent->n_children; i++)
        if (parent->children[i] == old_id)
            parent->children[i] = new_id;
}

/* Splits node id after its first k tokens: a new node takes those k and
 * becomes id's parent. Returns the new node, or -1. */
static int split(RadixTree *t, int id, int k)
{
    RadixNode *child = &t->nodes[id];
    int top = new_node(t, child->parent);
    if (top < 0)
        return -1;
    RadixNode *up = &t->nodes[top];
    RadixNode *parent = &t->nodes[child->parent];
    parent->n_children--; /* new_node() appended top; it takes id's place instead */
    replace_child(parent, id, top);
    memcpy(up->tokens, child->tokens, (size_t)k * sizeof *up->tokens);
    up->n_tokens = k;
    child->n_tokens -= k;
    memmove(child->tokens, child->tokens + k, (size_t)child->n_tokens * sizeof *child->tokens);
    up->children[up->n_children++] = id;
    child->parent = top;
    up->last_use = child->last_use;
    // BUG BEGIN(bughunt.radix_refcount): the node made by a split starts unlocked, although every request that locked the split node holds its tokens too: unlocking drives it below zero, and it can be evicted while a request reads it (mini-sglang PR #44)
    up->lock_ref = child->lock_ref;
    // BUG PLANTED:
    // BUG END
    return top;
}

static int child_starting_with(const RadixTree *t, int id, int token)
{
    const RadixNode *n = &t->nodes[id];
    for (int i = 0; i < n->n_children; i++)
        if (t->nodes[n->children[i]].tokens[0] == token)
            return n->children[i];
    return -1;
}

int radix_match(RadixTree *t, const int *tokens, int n, int *node)
{
    int id = 0, matched = 0;
    t->tick++;
    while (matched < n) {
        int c = child_starting_with(t, id, tokens[matched]);
        if (c < 0)
            break;
        RadixNode *cn = &t->nodes[c];
        int k = 0;
        while (k < cn->n_tokens && matched + k < n && cn->tokens[k] == tokens[matched + k])
            k++;
        if (k < cn->n_tokens && (c = split(t, c, k)) < 0)
            return -1;
        t->nodes[c].last_use = t->tick;
        id = c;
        matched += k;
    }
    *node = id;
    return matched;
}

int radix_insert(RadixTree *t, const int *tokens, int n)
{
    int id;
    int matched = radix_match(t, tokens, n, &id);
    if (matched < 0)
        return -1;
    if (matched == n)
        return id;
    if (n - matched > RADIX_MAX_EDGE)
        return -1;
    int leaf = new_node(t, id);
    if (leaf < 0)
        return -1;
    RadixNode *l = &t->nodes[leaf];
    memcpy(l->tokens, tokens + matched, (size_t)(n - matched) * sizeof *tokens);
    l->n_tokens = n - matched;
    l->last_use = t->tick;
    return leaf;
}

void radix_lock(RadixTree *t, int node)
{
    for (int id = node; id > 0; id = t->nodes[id].parent)
        t->nodes[id].lock_ref++;
}

void radix_unlock(RadixTree *t, int node)
{
    for (int id = node; id > 0; id = t->nodes[id].parent)
        t->nodes[id].lock_ref--;
}

static void remove_leaf(RadixTree *t, int id)
{
    RadixNode *parent = &t->nodes[t->nodes[id].parent];
    replace_child(parent, id, parent->children[parent->n_children - 1]);
    parent->n_children--;
    t->nodes[id].in_use = 0;
}

int radix_evict(RadixTree *t, int n_tokens)
{
    int freed = 0;
    while (freed < n_tokens) {
        int victim = -1;
        for (int i = 1; i < RADIX_MAX_NODES; i++) {
            const RadixNode *n = &t->nodes[i];
            if (n->in_use && n->n_children == 0 && n->lock_ref == 0 &&
                (victim < 0 || n->last_use < t->nodes[victim].last_use))
                victim = i;
        }
        if (victim < 0)
            break;
        freed += t->nodes[victim].n_tokens;
        remove_leaf(t, victim);
    }
    return freed;
}
