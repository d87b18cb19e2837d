/* Chapter 4 lab: paged_int8_row_bytes(), what one int8 block slot takes,
 * its scales included: the bytes the pool and the memory table count.
 * exercises/ch04/paged_int8_row_bytes.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include "ext/paged_dtype.h"
#include "lab.h"

size_t paged_int8_row_bytes(int n_heads, int head_dim)
{
    // LAB BEGIN(ch04.int8_bytes): one byte per code (n_heads x head_dim of them) plus one f32 scale per head
    return (size_t)n_heads * ((size_t)head_dim + sizeof(float));
    // LAB STUB:
    // (void)n_heads; (void)head_dim;
    // LAB_TODO("the bytes of one int8 slot: codes and scales");
    // return 0;
    // LAB END
}
