/* Chapter 3: static batching with a contiguous K/V region reserved per
 * request. See batching.h for the idea, kv_arena.h for the allocator, and
 * solutions/ch03/ for the code a student writes. This file only hands the
 * chapter to the shared serving program (common/serving.c). */
#include "batching.h"

int main(int argc, char **argv)
{
    return run_serving_main(batching_chapter(), argc, argv);
}
