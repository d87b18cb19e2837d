#include "ops.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Parallel loops pay a fork/join of a few microseconds; below this many
 * multiply-adds a matmul runs on the calling thread only. */
#define PARALLEL_MIN_MACS (1 << 17)

#define LANES 8

/* Combines eight partial sums in a fixed tree; dot() and dot4() share it so
 * that a row gives the same bits whichever of them computed it. */
static inline float combine_lanes(const float acc[LANES])
{
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#if defined(__GNUC__)
/* Eight lanes as one value. GCC and Clang map it onto vector registers
 * (one AVX register, or two SSE ones) and do each lane's multiply and add
 * exactly as the scalar loop below would: lane l still sums a[j + l] * b[j + l]
 * over j in order, so the bits are the same. Written with plain arrays the
 * compiler vectorises the loops in a roundabout way that runs about six times
 * slower. Vectors are loaded with memcpy (no alignment assumed) and never
 * passed to or returned from a function, which would change the ABI. */
typedef float Lanes __attribute__((vector_size(LANES * sizeof(float))));
#define LANES_LOAD(dst, src) memcpy(&(dst), (src), sizeof(Lanes))
#define LANES_STORE(dst, src) memcpy((dst), &(src), sizeof(Lanes))
#endif

float dot(const float *a, const float *b, int n)
{
    float acc[LANES] = {0};
    int j = 0;
#if defined(__GNUC__)
    Lanes sum_v = {0}, av, bv;
    for (; j + LANES <= n; j += LANES) {
        LANES_LOAD(av, a + j);
        LANES_LOAD(bv, b + j);
        sum_v += av * bv;
    }
    LANES_STORE(acc, sum_v);
#else
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += a[j + l] * b[j + l];
#endif
    float sum = combine_lanes(acc);
    for (; j < n; j++)
        sum += a[j] * b[j];
    return sum;
}

/* Four rows of W against one x: each x element is loaded once for four rows.
 * Per row, the arithmetic is exactly dot()'s. */
static void dot4(const float *w, int n, const float *x, float out[4])
{
    float acc[4][LANES] = {{0}};
    const float *w0 = w, *w1 = w + n, *w2 = w + 2 * (long)n, *w3 = w + 3 * (long)n;
    int j = 0;
#if defined(__GNUC__)
    Lanes a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, xv, wv;
    for (; j + LANES <= n; j += LANES) {
        LANES_LOAD(xv, x + j);
        LANES_LOAD(wv, w0 + j);
        a0 += wv * xv;
        LANES_LOAD(wv, w1 + j);
        a1 += wv * xv;
        LANES_LOAD(wv, w2 + j);
        a2 += wv * xv;
        LANES_LOAD(wv, w3 + j);
        a3 += wv * xv;
    }
    LANES_STORE(acc[0], a0);
    LANES_STORE(acc[1], a1);
    LANES_STORE(acc[2], a2);
    LANES_STORE(acc[3], a3);
#else
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) {
            float xv = x[j + l];
            acc[0][l] += w0[j + l] * xv;
            acc[1][l] += w1[j + l] * xv;
            acc[2][l] += w2[j + l] * xv;
            acc[3][l] += w3[j + l] * xv;
        }
#endif
    for (int r = 0; r < 4; r++)
        out[r] = combine_lanes(acc[r]);
    for (; j < n; j++) {
        out[0] += w0[j] * x[j];
        out[1] += w1[j] * x[j];
        out[2] += w2[j] * x[j];
        out[3] += w3[j] * x[j];
    }
}

void matmul(float *out, const float *x, const float *w, int n_tokens, int in_dim, int out_dim)
{
    long macs = (long)n_tokens * in_dim * out_dim;
    int row_blocks = (out_dim + 3) / 4;
    (void)macs;
#pragma omp parallel for schedule(static) if (macs >= PARALLEL_MIN_MACS)
    for (int b = 0; b < row_blocks; b++) {
        int r0 = 4 * b;
        const float *wr = w + (long)r0 * in_dim;
        for (int t = 0; t < n_tokens; t++) {
            const float *xt = x + (long)t * in_dim;
            float *ot = out + (long)t * out_dim + r0;
            if (r0 + 4 <= out_dim) {
                dot4(wr, in_dim, xt, ot);
            } else {
                for (int r = 0; r < out_dim - r0; r++)
                    ot[r] = dot(wr + (long)r * in_dim, xt, in_dim);
            }
        }
    }
}

void rmsnorm(float *out, const float *x, const float *weight, int n)
{
    float ss = 0.0f;
    for (int j = 0; j < n; j++)
        ss += x[j] * x[j];
    ss /= (float)n;
    ss += 1e-5f;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < n; j++)
        out[j] = weight[j] * (ss * x[j]);
}

void softmax(float *x, int n)
{
    float max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= sum;
}

void rope_tables(float *cos_out, float *sin_out, int seq_len, int head_dim)
{
    int half = head_dim / 2;
    for (int pos = 0; pos < seq_len; pos++)
        for (int i = 0; i < half; i++) {
            float freq = 1.0f / powf(10000.0f, (float)(2 * i) / (float)head_dim);
            float angle = (float)pos * freq;
            cos_out[(long)pos * half + i] = cosf(angle);
            sin_out[(long)pos * half + i] = sinf(angle);
        }
}

void rope_rotate(float *vec, int width, int head_dim, const float *cos_row, const float *sin_row)
{
    for (int i = 0; i < width; i += 2) {
        int pair = (i % head_dim) / 2;
        float c = cos_row[pair], s = sin_row[pair];
        float v0 = vec[i], v1 = vec[i + 1];
        vec[i] = v0 * c - v1 * s;
        vec[i + 1] = v0 * s + v1 * c;
    }
}

void swiglu(float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        g = g * (1.0f / (1.0f + expf(-g)));
        gate[i] = g * up[i];
    }
}

void add_inplace(float *out, const float *other, int n)
{
    for (int i = 0; i < n; i++)
        out[i] += other[i];
}

/* out[i] = sum over t, in order, of a[t] * v[t][i]: the same sums as
 * attention_accumulate() called for t = 0, 1, ... on a zeroed out, but each
 * running sum stays in a register across all positions instead of going
 * through memory once per position. */
static void attention_weighted_sum(float *out, const float *a, const float *values, int n_pos, int stride,
                                   int head_dim)
{
    int i = 0;
#if defined(__GNUC__)
    for (; i + LANES <= head_dim; i += LANES) {
        Lanes acc = {0}, v;
        for (int t = 0; t < n_pos; t++) {
            LANES_LOAD(v, values + (long)t * stride + i);
            acc += a[t] * v;
        }
        LANES_STORE(out + i, acc);
    }
#endif
    for (; i < head_dim; i++) {
        float acc = 0.0f;
        for (int t = 0; t < n_pos; t++)
            acc += a[t] * values[(long)t * stride + i];
        out[i] = acc;
    }
}

void attention_reference(float *out, const float *q, const float *keys, const float *values, int n_pos, int stride,
                         int head_dim, float *scores)
{
    for (int t = 0; t < n_pos; t++)
        scores[t] = attention_score(q, keys + (long)t * stride, head_dim);
    softmax(scores, n_pos);
    attention_weighted_sum(out, scores, values, n_pos, stride, head_dim);
}

void ops_set_threads(int n)
{
#ifdef _OPENMP
    if (n > 0)
        omp_set_num_threads(n);
#else
    (void)n;
#endif
}

int ops_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
