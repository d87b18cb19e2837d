/* GENERATED from solutions/ch04/paged_int8_store_row.c by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=4`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/* Chapter 4 lab: paged_int8_store_row(), one token's K (or V) row of one
 * layer quantized to int8 into its block slot, each KV head with its own
 * scale kept in the slot beside its codes (ext/paged_dtype.h).
 * exercises/ch04/paged_int8_store_row.c is generated from this file by
 * scripts/make-exercises.sh; `make lab CH=4` grades yours. */
#include <math.h>
#include <string.h>

#include "ext/paged_dtype.h"
#include "lab.h"

void paged_int8_store_row(unsigned char *slot, const float *x, int n_heads, int head_dim)
{
    int8_t *codes = (int8_t *)slot;                                    /* [n_heads][head_dim] */
    unsigned char *scales = slot + (size_t)n_heads * (size_t)head_dim; /* [n_heads] f32, after every code */
    // TODO(lab ch04.int8_store): for each head h (values x[h * head_dim ...]): its scale is its own largest |x| / KV_INT8_MAX; each code is x / scale rounded to nearest, ties to even (nearbyintf), kept within -KV_INT8_MAX..KV_INT8_MAX (a NaN gives 0); write the head's codes at codes[h * head_dim ...] and copy its scale (memcpy: the slot is bytes) to scales + h * sizeof(float)
    (void)x; (void)codes; (void)scales;
    memset(slot, 0, (size_t)n_heads * ((size_t)head_dim + sizeof(float)));
    LAB_TODO("quantize each head of the row to int8 codes with its own scale, stored after the codes");
}
