/* The CUDA lab: PagedAttention's block loop, one decode step
 * (paged_attention_lab.h). exercises/cuda/paged_attention_lab.cu is
 * generated from this file by scripts/make-exercises.sh; `make lab CH=cuda`
 * grades yours, on the GPU or on the CPU emulator.
 *
 * One thread block per (head, sequence), LAB_CUDA_THREADS threads (any
 * number must do: the grader runs 1 too, to tell a race from the rest). Its
 * dynamic shared memory holds the query and one score per position:
 *
 *     q_s     [head_dim]
 *     scores  [max_blocks x block_size]
 *
 * The threads share those: a value one thread writes is read by others
 * only after a __syncthreads() between the two. (The emulator runs each
 * thread until its next barrier before the next one starts, so a missing
 * barrier reads what is not written yet, every time; a GPU does so only
 * now and then.) */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "paged_attention_lab.h"

/* A TODO in device code: thread 0 of the first block says what is missing. */
#define LAB_TODO(what)                                                                              \
    do {                                                                                            \
        if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0)                                 \
            printf("lab: TODO in lab_paged_attention_kernel: %s\n", what);                          \
    } while (0)

__global__ void lab_paged_attention_kernel(float *out, const float *q, const float *k_cache, const float *v_cache,
                                           const int *block_tables, const int *seq_lens, int max_blocks,
                                           int block_size, int n_heads, int n_kv_heads, int head_dim, float scale)
{
    extern __shared__ float smem[]; /* q_s [head_dim], then scores [max_blocks x block_size] */
    const int h = blockIdx.x, seq = blockIdx.y, tid = threadIdx.x;
    const int kv_h = h / (n_heads / n_kv_heads); /* grouped-query attention: heads share a KV head */
    const int len = seq_lens[seq];
    float *out_row = out + ((size_t)seq * n_heads + h) * head_dim; /* [head_dim] */
    const size_t row_stride = (size_t)n_kv_heads * head_dim;       /* floats per cache row */
    // LAB BEGIN(cuda.attend): copy the query into q_s; score every filled row (q . k x scale), block by block through this sequence's block table; softmax the scores; write out_row[d] = sum over rows of p x v[d]; a __syncthreads() wherever threads read what others wrote
    float *q_s = smem;                                                /* [head_dim] */
    float *scores = smem + head_dim;                                  /* [max_blocks x block_size] */
    const float *q_row = q + ((size_t)seq * n_heads + h) * head_dim; /* [head_dim] */
    for (int d = tid; d < head_dim; d += blockDim.x)
        q_s[d] = q_row[d];
    __syncthreads();
    const int *table = block_tables + (size_t)seq * max_blocks;
    const int n_rows = len; /* the filled rows: the last block may hold fewer than block_size */
    const int n_blocks = (n_rows + block_size - 1) / block_size;
    for (int b = 0; b < n_blocks; b++) {
        const float *k_block = k_cache + (size_t)table[b] * block_size * row_stride;
        for (int r = tid; r < block_size && b * block_size + r < n_rows; r += blockDim.x) {
            const float *k = k_block + r * row_stride + (size_t)kv_h * head_dim;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; d++)
                dot += q_s[d] * k[d];
            scores[b * block_size + r] = dot * scale;
        }
    }
    __syncthreads();
    /* Every thread computes the same maximum and sum: no thread waits for another. */
    float max_score = -INFINITY, sum = 0.0f;
    for (int i = 0; i < n_rows; i++)
        max_score = fmaxf(max_score, scores[i]);
    for (int i = 0; i < n_rows; i++)
        sum += expf(scores[i] - max_score);
    for (int d = tid; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int i = 0; i < n_rows; i++) {
            const float *v = v_cache + ((size_t)table[i / block_size] * block_size + i % block_size) * row_stride +
                             (size_t)kv_h * head_dim;
            acc += expf(scores[i] - max_score) * v[d];
        }
        out_row[d] = acc / sum;
    }
    // LAB STUB:
    // (void)smem; (void)q; (void)kv_h; (void)len; (void)row_stride;
    // (void)k_cache; (void)v_cache; (void)block_tables; (void)max_blocks; (void)block_size; (void)scale;
    // LAB_TODO("score the filled rows block by block through the block table, softmax, weight the values");
    // for (int d = tid; d < head_dim; d += blockDim.x)
    //     out_row[d] = 0.0f;
    // LAB END
}

/* Device copies of the step's arrays, freed by put_away(). */
typedef struct {
    float *q, *k, *v, *out;
    int *tables, *lens;
} DeviceStep;

static void put_away(DeviceStep *d)
{
    cudaFree(d->q);
    cudaFree(d->k);
    cudaFree(d->v);
    cudaFree(d->out);
    cudaFree(d->tables);
    cudaFree(d->lens);
}

static int failed(cudaError_t e, char *err, int cap)
{
    if (e == cudaSuccess)
        return 0;
    if (err && cap > 0)
        snprintf(err, (size_t)cap, "%s", cudaGetErrorString(e));
    return 1;
}

int lab_cuda_paged_attention(const LabPagedArgs *a, float *out, char *err, int cap)
{
    DeviceStep d = {0, 0, 0, 0, 0, 0};
    size_t q_n = (size_t)a->n_seqs * a->n_heads * a->head_dim;
    size_t cache_n = (size_t)a->n_phys_blocks * a->block_size * a->n_kv_heads * a->head_dim;
    size_t table_n = (size_t)a->n_seqs * a->max_blocks;
    size_t smem = ((size_t)a->head_dim + (size_t)a->max_blocks * a->block_size) * sizeof(float);
    int bad = failed(cudaMalloc((void **)&d.q, q_n * sizeof(float)), err, cap) ||
              failed(cudaMalloc((void **)&d.k, cache_n * sizeof(float)), err, cap) ||
              failed(cudaMalloc((void **)&d.v, cache_n * sizeof(float)), err, cap) ||
              failed(cudaMalloc((void **)&d.out, q_n * sizeof(float)), err, cap) ||
              failed(cudaMalloc((void **)&d.tables, table_n * sizeof(int)), err, cap) ||
              failed(cudaMalloc((void **)&d.lens, (size_t)a->n_seqs * sizeof(int)), err, cap) ||
              failed(cudaMemcpy(d.q, a->q, q_n * sizeof(float), cudaMemcpyHostToDevice), err, cap) ||
              failed(cudaMemcpy(d.k, a->k_cache, cache_n * sizeof(float), cudaMemcpyHostToDevice), err, cap) ||
              failed(cudaMemcpy(d.v, a->v_cache, cache_n * sizeof(float), cudaMemcpyHostToDevice), err, cap) ||
              failed(cudaMemcpy(d.tables, a->block_tables, table_n * sizeof(int), cudaMemcpyHostToDevice), err, cap) ||
              failed(cudaMemcpy(d.lens, a->seq_lens, (size_t)a->n_seqs * sizeof(int), cudaMemcpyHostToDevice), err,
                     cap);
    if (!bad) { /* out starts as NaN: an element the kernel never writes shows */
        memset(out, 0xff, q_n * sizeof(float));
        bad = failed(cudaMemcpy(d.out, out, q_n * sizeof(float), cudaMemcpyHostToDevice), err, cap);
    }
    if (!bad) {
        dim3 grid((unsigned)a->n_heads, (unsigned)a->n_seqs);
        unsigned threads = a->threads > 0 ? (unsigned)a->threads : LAB_CUDA_THREADS;
        lab_paged_attention_kernel<<<grid, threads, smem>>>(d.out, d.q, d.k, d.v, d.tables, d.lens,
                                                                     a->max_blocks, a->block_size, a->n_heads,
                                                                     a->n_kv_heads, a->head_dim,
                                                                     1.0f / sqrtf((float)a->head_dim));
        bad = failed(cudaGetLastError(), err, cap) || failed(cudaDeviceSynchronize(), err, cap) ||
              failed(cudaMemcpy(out, d.out, q_n * sizeof(float), cudaMemcpyDeviceToHost), err, cap);
    }
    put_away(&d);
    return bad ? -1 : 0;
}
