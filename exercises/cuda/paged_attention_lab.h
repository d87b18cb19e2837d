/* GENERATED from solutions/cuda/paged_attention_lab.h by scripts/make-exercises.sh.
 * Students: this is your copy. Write the regions marked TODO(lab ...),
 * then run `make lab CH=cuda`. Maintainers: edit the solution instead and
 * run `make exercises`; CI checks that the two agree. */
/**
 * @file paged_attention_lab.h
 * @brief The CUDA lab: PagedAttention's block loop for one decode step, as
 * a kernel (paged_attention_lab.cu), launched by
 * lab_cuda_paged_attention() and graded against a CPU reference
 * (make lab CH=cuda: on the GPU where there is one, else on the CPU
 * emulator).
 *
 * The cache is a pool of blocks, as in chapter 4. One row holds the K (or
 * V) vectors of every KV head for one position:
 *
 *     k_cache, v_cache  [n_phys_blocks][block_size][n_kv_heads][head_dim]
 *
 * Sequence s holds seq_lens[s] positions; its logical block b lives in
 * physical block block_tables[s x max_blocks + b]. Only the first
 * seq_lens[s] rows are filled: the rest of the last block is whatever was
 * there before.
 */
#ifndef KVLAB_CUDA_LAB_H
#define KVLAB_CUDA_LAB_H

#ifdef __cplusplus
extern "C" {
#endif

/** Threads per block of the lab's kernel: one warp. */
#define LAB_CUDA_THREADS 32

/** One decode step's attention over a paged cache (host arrays). */
typedef struct {
    const float *q;          /**< [n_seqs][n_heads][head_dim]: this step's queries */
    const float *k_cache;    /**< [n_phys_blocks][block_size][n_kv_heads][head_dim] */
    const float *v_cache;    /**< same layout as k_cache */
    const int *block_tables; /**< [n_seqs][max_blocks]: physical block of each logical block */
    const int *seq_lens;     /**< [n_seqs]: positions cached, 1 .. max_blocks x block_size */
    int n_seqs, n_heads, n_kv_heads, head_dim;
    int block_size, max_blocks, n_phys_blocks;
    int threads; /**< threads per block: LAB_CUDA_THREADS when 0 (the grader tries 1 to tell a race) */
} LabPagedArgs;

/**
 * Runs the lab's kernel on a copy of @p a in device memory.
 * @param a    the step
 * @param out  receives [n_seqs][n_heads][head_dim]: each head's attention output
 * @param err  receives the CUDA error's text on failure (may be NULL)
 * @param cap  size of err
 * @return 0, or -1 on a CUDA error (err says which)
 */
int lab_cuda_paged_attention(const LabPagedArgs *a, float *out, char *err, int cap);

#ifdef __cplusplus
}
#endif

#endif
