/* Chapter 4: a paged KV cache with continuous batching. K/V live in
 * fixed-size blocks from one pool, found through a block table per request;
 * attention reads them through the table; requests join the batch the
 * moment their blocks are free. See paged.h and block_pool.h for the idea,
 * solutions/ch04/ for the code a student writes. This file only wires the
 * chapter into the shared serving program (common/serving.c). */
#include "paged.h"
#include "serving.h"

int main(int argc, char **argv)
{
    return run_serving_main(paged_chapter(), argc, argv);
}
