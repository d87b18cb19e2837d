#include "kv_ref.h"

void kv_write_reference(void *k_layer, void *v_layer, Dtype t, const float *k, const float *v,
                        const long long *slots, int n, int kv_dim)
{
    size_t row_bytes = (size_t)kv_dim * dtype_bytes(t);
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0)
            continue;
        size_t at = (size_t)slots[i] * row_bytes;
        dtype_from_f32((char *)k_layer + at, k + (size_t)i * kv_dim, (size_t)kv_dim, t);
        dtype_from_f32((char *)v_layer + at, v + (size_t)i * kv_dim, (size_t)kv_dim, t);
    }
}
