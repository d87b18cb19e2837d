/* Chapter 4's weighted sum of values, a block at a time: PagedAttention
 * (the lab, solutions/ch04/paged_attention.c) hands paged_accumulate_rows()
 * the rows of one block and their weights. The seam that calls
 * paged_attention() is in seam.c. */
#include <string.h>

#include "paged.h"

/* Eight running sums at a time in one vector register (GCC's vector
 * extension; -ffp-contract=off keeps every a * v and + apart, as in the
 * scalar loop), four registers side by side so that wide heads keep four
 * independent chains of additions in flight; the rest of the head one
 * float at a time. Every out[i] gets its terms in row order either way. */
#define ROW_LANES 8

void paged_accumulate_rows(float *out, const float *a, const float *rows, int n_rows, int stride, int head_dim)
{
    int i = 0;
#if defined(__GNUC__)
    typedef float Lanes __attribute__((vector_size(ROW_LANES * sizeof(float))));
    for (; i + 4 * ROW_LANES <= head_dim; i += 4 * ROW_LANES) {
        Lanes acc[4], v;
        memcpy(acc, out + i, sizeof acc);
        for (int j = 0; j < n_rows; j++)
            for (int k = 0; k < 4; k++) {
                memcpy(&v, rows + (size_t)j * (size_t)stride + i + k * ROW_LANES, sizeof v);
                acc[k] += a[j] * v;
            }
        memcpy(out + i, acc, sizeof acc);
    }
    for (; i + ROW_LANES <= head_dim; i += ROW_LANES) {
        Lanes acc, v;
        memcpy(&acc, out + i, sizeof acc);
        for (int j = 0; j < n_rows; j++) {
            memcpy(&v, rows + (size_t)j * (size_t)stride + i, sizeof v);
            acc += a[j] * v;
        }
        memcpy(out + i, &acc, sizeof acc);
    }
#endif
    for (; i < head_dim; i++) {
        float acc = out[i];
        for (int j = 0; j < n_rows; j++)
            acc += a[j] * rows[(size_t)j * (size_t)stride + i];
        out[i] = acc;
    }
}
