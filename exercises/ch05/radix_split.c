/* GENERATED from solutions/ch05/radix_split.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=5`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 5 lab: radix_split(), an edge cut in two where a path leaves it.
 * exercises/ch05/radix_split.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=5` grades yours. */
#include "lab.h"
#include "radix_tree.h"

void radix_split(RadixTree *t, int node, int block)
{
    // TODO(lab ch05.radix_split): a new node (radix_new_node()) below node takes block, the rest of the edge and node's children, and becomes node's only child; fix every link and count
    (void)t; (void)node; (void)block;
    LAB_TODO("cut the edge before block: a new node below takes block, the rest and the children");
}
