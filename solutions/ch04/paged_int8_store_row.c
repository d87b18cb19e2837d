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
    // LAB BEGIN(ch04.int8_store): for each head h (values x[h * head_dim ...]): its scale is its own largest |x| / KV_INT8_MAX; each code is x / scale rounded to nearest, ties to even (nearbyintf), kept within -KV_INT8_MAX..KV_INT8_MAX (a NaN gives 0); write the head's codes at codes[h * head_dim ...] and copy its scale (memcpy: the slot is bytes) to scales + h * sizeof(float)
    for (int h = 0; h < n_heads; h++) {
        const float *head = x + (size_t)h * (size_t)head_dim;
        float largest = 0.0f;
        for (int i = 0; i < head_dim; i++)
            largest = fmaxf(largest, fabsf(head[i]));
        float scale = largest / (float)KV_INT8_MAX;
        for (int i = 0; i < head_dim; i++) {
            float r = nearbyintf(head[i] / scale); /* 0 / 0 (a head of zeros) is a NaN */
            if (isnan(r))
                r = 0.0f;
            r = fminf(fmaxf(r, -(float)KV_INT8_MAX), (float)KV_INT8_MAX); /* a rounded scale can overshoot */
            codes[(size_t)h * (size_t)head_dim + (size_t)i] = (int8_t)r;
        }
        memcpy(scales + (size_t)h * sizeof scale, &scale, sizeof scale);
    }
    // LAB STUB:
    // (void)x; (void)codes; (void)scales;
    // memset(slot, 0, (size_t)n_heads * ((size_t)head_dim + sizeof(float)));
    // LAB_TODO("quantize each head of the row to int8 codes with its own scale, stored after the codes");
    // LAB END
}
