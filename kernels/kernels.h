/**
 * @file kernels.h
 * @brief The CUDA kernels of kvlab, callable from C.
 *
 * One file per operation in kernels/, each with several versions that go
 * from the plain transcription of the CPU loop to the fast form; every file
 * opens with a comment on what each version teaches, in the manner of
 * llm.c's dev/cuda. Every kernel has its CPU reference (ops.h; chapter 4's
 * paged_attention() and block_pool_copy() for the paged kernels;
 * kernels/check/kv_ref.h for kv_write), and `build/kernel-check` validates
 * each version against it before timing it.
 *
 * Conventions for every launcher:
 * - Pointers are device pointers unless the name ends in _host.
 * - `version` counts from 1 (v1 is the simplest); the fastest version that
 *   supports a shape is what the forward pass uses.
 * - Activations are f32; K/V caches and weights may be f32, f16 or bf16
 *   (::Dtype). All arithmetic accumulates in f32.
 * - Work is queued on @p stream; nothing waits. A launcher returns 0, or -1
 *   with a one-line message (file:line, what failed) when the arguments are
 *   not supported or the launch itself fails. Errors inside a kernel show
 *   up at the next synchronising call, which the caller checks.
 *
 * Where K/V live on the device. Chapters 1 to 3 store a layer of K (or V)
 * as `[rows][kv_dim]`, one row per token slot, and the kernels are given
 * the layer's base pointer: chapter 2 uses row = position, chapter 3 row =
 * start of the request's region + position. Chapter 4's pool has the CPU
 * pool's layout (block_pool.h),
 * `[n_blocks][n_layers][2 (K, V)][block_size][kv_dim]`, so that one block of every layer is one contiguous run (a
 * copy-on-write is one copy, as on the CPU) and the CPU's paged_attention()
 * reads the same bytes the kernels read. Inside a block, one layer's K is
 * still `[block_size][kv_dim]` rows, so kv_write and PagedAttention read and
 * write whole rows as in the other chapters; only the distance from one
 * block to the next differs (2 x n_layers x block_size rows).
 */
#ifndef KVLAB_KERNELS_H
#define KVLAB_KERNELS_H

#include <stddef.h>

#include <cuda_runtime_api.h>

/* The common/ headers are C: give their functions C linkage in .cu files. */
#ifdef __cplusplus
extern "C" {
#endif

#include "dtype.h"
#include "err.h"

/** One version of a kernel: a short name and the lesson it holds. */
typedef struct {
    const char *name;    /**< e.g. "block-reduce" */
    const char *teaches; /**< one sentence */
} KvkVersion;

/** Threads per block of the attention kernels (four warps). */
#define KVK_ATTENTION_THREADS 128

/** Positions per partition of the split (sequence-parallel) kernels: attention v4, paged attention v2. */
#define KVK_SPLIT_PARTITION 256

/** Attention head shape. */
typedef struct {
    int n_heads;    /**< query heads */
    int n_kv_heads; /**< K/V heads; query head h reads K/V head h / (n_heads / n_kv_heads) */
    int head_dim;   /**< width of one head */
} KvkHeads;

/* -------------------------------------------------------------- launch.cu */

/**
 * The message of a failed launch check (KVK_CHECK_LAUNCH in
 * kernel_common.cuh, after every launch). A launch error (a bad
 * configuration, too many resources, no machine code for this GPU) names
 * the kernel just launched. A fault of an earlier kernel or copy (an
 * illegal or misaligned address, a trap, an ECC error) also comes back
 * from the check after a later launch, and keeps coming back from every
 * call: that one says it happened before this launch, and that
 * compute-sanitizer finds where, instead of blaming this kernel.
 * @param err   receives the message
 * @param code  the cudaError_t the check got
 * @param what  the kernel launched, e.g. "attention v3"
 * @param file  the launcher's file
 * @param line  the launcher's line
 * @return -1
 */
int kvk_launch_error(Err *err, int code, const char *what, const char *file, int line);

/**
 * Whether a CUDA error code is a fault of a kernel or copy that ran (an
 * error the context keeps, "sticky") rather than a refused launch.
 * @param code  a cudaError_t
 * @return 1 for a fault that happened on the device, 0 otherwise
 */
int kvk_error_is_device_fault(int code);

/* ------------------------------------------------------------ rmsnorm.cu */

/** Versions of kvk_rmsnorm(). */
extern const KvkVersion kvk_rmsnorm_versions[];
/** Number of versions of kvk_rmsnorm(). */
extern const int kvk_rmsnorm_n_versions;

/**
 * RMSNorm of rows: out[r] = rmsnorm(x[row_map ? row_map[r] : r], weight).
 * Reference: rmsnorm() in ops.h.
 * @param version  1..kvk_rmsnorm_n_versions
 * @param out      [rows][dim]
 * @param x        [*][dim]; must not alias out
 * @param weight   [dim]
 * @param row_map  [rows] source row of each output row, or NULL for the identity
 * @param rows     rows to normalise
 * @param dim      width
 * @param stream   CUDA stream
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_rmsnorm(int version, float *out, const float *x, const float *weight, const int *row_map, int rows, int dim,
                cudaStream_t stream, Err *err);

/* --------------------------------------------------------------- rope.cu */

/** Versions of kvk_rope(). */
extern const KvkVersion kvk_rope_versions[];
/** Number of versions of kvk_rope(). */
extern const int kvk_rope_n_versions;

/**
 * Rotary position embedding of the queries and keys of n tokens, with the
 * CPU's own cos/sin tables. Bitwise equal to rope_rotate() in ops.h.
 * @param version    1..kvk_rope_n_versions
 * @param q          [n][q_width] rotated in place
 * @param k          [n][k_width] rotated in place
 * @param pos        [n] position of each token
 * @param cos_table  [seq_len][head_dim/2] from rope_tables()
 * @param sin_table  [seq_len][head_dim/2]
 * @param n          tokens
 * @param q_width    n_heads x head_dim
 * @param k_width    n_kv_heads x head_dim
 * @param head_dim   head width (even)
 * @param stream     CUDA stream
 * @param err        receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_rope(int version, float *q, float *k, const int *pos, const float *cos_table, const float *sin_table, int n,
             int q_width, int k_width, int head_dim, cudaStream_t stream, Err *err);

/* ------------------------------------------------------------- swiglu.cu */

/** Versions of kvk_swiglu(). */
extern const KvkVersion kvk_swiglu_versions[];
/** Number of versions of kvk_swiglu(). */
extern const int kvk_swiglu_n_versions;

/**
 * SwiGLU gate: gate[i] = silu(gate[i]) * up[i]. Reference: swiglu() in ops.h.
 * @param version  1..kvk_swiglu_n_versions
 * @param gate     [n] in and out
 * @param up       [n]
 * @param n        elements
 * @param stream   CUDA stream
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_swiglu(int version, float *gate, const float *up, long long n, cudaStream_t stream, Err *err);

/* ---------------------------------------------------------- embedding.cu */

/** Versions of kvk_embedding(). */
extern const KvkVersion kvk_embedding_versions[];
/** Number of versions of kvk_embedding(). */
extern const int kvk_embedding_n_versions;

/**
 * Embedding lookup: out[i] = table[tokens[i]] converted to f32 (the memcpy
 * at the top of forward() in forward.c).
 * @param version     1..kvk_embedding_n_versions
 * @param out         [n][dim]
 * @param table       [vocab][dim] of @p table_type
 * @param table_type  element type of the table
 * @param tokens      [n] token ids (already checked to be < vocab)
 * @param n           tokens
 * @param dim         width
 * @param stream      CUDA stream
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_embedding(int version, float *out, const void *table, Dtype table_type, const int *tokens, int n, int dim,
                  cudaStream_t stream, Err *err);

/* ----------------------------------------------------------- residual.cu */

/** Versions of kvk_residual_add(). */
extern const KvkVersion kvk_residual_versions[];
/** Number of versions of kvk_residual_add(). */
extern const int kvk_residual_n_versions;

/**
 * Residual connection: out[i] += other[i]. Reference: add_inplace() in ops.h.
 * @param version  1..kvk_residual_n_versions
 * @param out      [n]
 * @param other    [n]
 * @param n        elements
 * @param stream   CUDA stream
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_residual_add(int version, float *out, const float *other, long long n, cudaStream_t stream, Err *err);

/* ------------------------------------------------------------ convert.cu */

/**
 * Converts f32 to a stored type on the device (round to nearest even, the
 * same bits as dtype_from_f32() on the host).
 * @param dst     [n] of type @p t
 * @param t       destination type
 * @param src     [n] f32
 * @param n       elements
 * @param stream  CUDA stream
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_convert_from_f32(void *dst, Dtype t, const float *src, long long n, cudaStream_t stream, Err *err);

/* ------------------------------------------------------------- matmul.cu */

/** Versions of kvk_matmul(). */
extern const KvkVersion kvk_matmul_versions[];
/** Number of versions of kvk_matmul(). */
extern const int kvk_matmul_n_versions;

/**
 * A cuBLAS handle bound to a stream and a workspace (opaque). cuBLAS resets
 * a handle's workspace to its own pool whenever its stream is set, so the
 * stream is set once, at creation, and again (with the workspace right
 * after) only when kvk_matmul() is given another stream.
 */
typedef struct KvkBlas KvkBlas;

/**
 * Loads cuBLAS (with dlopen, the first time) and creates a handle that
 * queues its work on @p stream and uses @p workspace instead of allocating
 * its own.
 * @param blas             receives the handle
 * @param stream           CUDA stream
 * @param workspace        device buffer for cuBLAS (256-byte aligned, from
 *                         the ledger), or NULL to let cuBLAS use its own pool
 * @param workspace_bytes  its size
 * @param err              receives the reason on failure (library not found, ...)
 * @return 0 on success, -1 on failure
 */
int kvk_blas_create(KvkBlas **blas, cudaStream_t stream, void *workspace, size_t workspace_bytes, Err *err);

/**
 * Destroys a handle from kvk_blas_create().
 * @param blas  the handle, or NULL
 */
void kvk_blas_destroy(KvkBlas *blas);

/**
 * How many times kvk_matmul() had to bind the handle to another stream
 * than the one before (each time the workspace was set again).
 * @param blas  a handle, or NULL
 * @return the count (0 for NULL)
 */
long kvk_blas_rebinds(const KvkBlas *blas);

/**
 * Matrix product over a batch of tokens, as matmul() in ops.h:
 * out[t][o] = sum_i w[o][i] x[t][i], accumulated in f32. With f32 weights
 * x is f32; with f16/bf16 weights x must already be of the same type
 * (kvk_convert_from_f32()), as tensor cores multiply like types.
 * @param version  1 (a plain kernel, one thread per output) or 2 (cuBLAS:
 *                 cublasSgemm for f32, cublasGemmEx for f16/bf16)
 * @param blas     cuBLAS handle (used by version 2); bound to @p stream
 *                 if it was bound to another, its workspace set again
 * @param out      [n][out_dim] f32
 * @param x        [n][in_dim] of type @p t
 * @param w        [out_dim][in_dim] of type @p t
 * @param t        element type of w and x
 * @param n        tokens
 * @param in_dim   input width
 * @param out_dim  output width
 * @param stream   CUDA stream
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_matmul(int version, KvkBlas *blas, float *out, const void *x, const void *w, Dtype t, int n,
               int in_dim, int out_dim, cudaStream_t stream, Err *err);

/* ----------------------------------------------------------- kv_write.cu */

/** Versions of kvk_kv_write(). */
extern const KvkVersion kvk_kv_write_versions[];
/** Number of versions of kvk_kv_write(). */
extern const int kvk_kv_write_n_versions;

/**
 * Writes the K and V of n tokens into their cache slots, converting to the
 * cache's type: k_layer[slots[i]] = k[i]. A negative slot is skipped.
 * Reference: kv_write_reference() in kv_ref.h. Chapter 4 passes one
 * layer's K and V of block 0 of its pool, and rows that count 2 x n_layers
 * x block_size to a block (chapters/ch04-paged/device.c).
 * @param version  1..kvk_kv_write_n_versions
 * @param t        element type of the cache
 * @param k_layer  [rows][kv_dim] of type t
 * @param v_layer  [rows][kv_dim] of type t
 * @param k        [n][kv_dim] f32
 * @param v        [n][kv_dim] f32
 * @param slots    [n] row of each token (the slot mapping)
 * @param n        tokens
 * @param kv_dim   width of a row
 * @param stream   CUDA stream
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_kv_write(int version, Dtype t, void *k_layer, void *v_layer, const float *k, const float *v,
                 const long long *slots, int n, int kv_dim, cudaStream_t stream, Err *err);

/* ---------------------------------------------------------- attention.cu */

/** Versions of kvk_attention(). */
extern const KvkVersion kvk_attention_versions[];
/** Number of versions of kvk_attention(). */
extern const int kvk_attention_n_versions;

/**
 * Causal attention of n query tokens over K/V rows that are contiguous per
 * sequence: entry i attends rows base_row[i] .. base_row[i] + pos[i].
 * Chapter 1 (the whole sequence: n = t entries, base 0), chapter 2 (a
 * contiguous cache: base 0) and chapter 3 (reserved regions in one arena:
 * base = region start) are all this call. Reference: attention_reference()
 * in ops.h, per (entry, head).
 * @param version   1..kvk_attention_n_versions
 * @param t         element type of the cache
 * @param out       [n][n_heads * head_dim] f32
 * @param q         [n][n_heads * head_dim] f32, RoPE applied
 * @param k_layer   [rows][kv_dim] of type t
 * @param v_layer   [rows][kv_dim] of type t
 * @param base_row  [n] row of position 0 of each entry's sequence
 * @param pos       [n] position of each entry
 * @param n         entries
 * @param max_pos   1 + the largest pos (sizes shared memory and scratch)
 * @param h         head shape
 * @param scratch   [kvk_attention_scratch_floats()] or NULL when that is 0
 *                  (v1: the scores; v4: the partitions' partial results)
 * @param stream    CUDA stream
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_attention(int version, Dtype t, float *out, const float *q, const void *k_layer, const void *v_layer,
                  const long long *base_row, const int *pos, int n, int max_pos, KvkHeads h, float *scratch,
                  cudaStream_t stream, Err *err);

/**
 * Scratch a version of kvk_attention() needs.
 * @param version  the version
 * @param n        entries
 * @param max_pos  1 + the largest position
 * @param h        head shape
 * @return floats of scratch (0: none)
 */
size_t kvk_attention_scratch_floats(int version, int n, int max_pos, KvkHeads h);

/**
 * Whether a version of kvk_attention() supports a shape.
 * @param version  the version
 * @param t        cache type
 * @param h        head shape
 * @param max_pos  1 + the largest position
 * @return 1 if supported
 */
int kvk_attention_supports(int version, Dtype t, KvkHeads h, int max_pos);

/**
 * The fastest version of kvk_attention() that supports a shape without
 * scratch.
 * @param t        cache type
 * @param h        head shape
 * @param max_pos  1 + the largest position that will be asked for
 * @return the version, or 0 when none does
 */
int kvk_attention_pick(Dtype t, KvkHeads h, int max_pos);

/* ---------------------------------------------------- paged_attention.cu */

/** Versions of kvk_paged_attention(). */
extern const KvkVersion kvk_paged_attention_versions[];
/** Number of versions of kvk_paged_attention(). */
extern const int kvk_paged_attention_n_versions;

/**
 * Where the blocks of each entry's sequence are, and what a block holds
 * (chapter 4). A block is `[n_layers][2 (K, V)][block_size][kv_dim]`
 * elements, the layout of the CPU's block pool (block_pool.h): K of layer
 * l in block b starts ((b x n_layers + l) x 2) x block_size rows into the
 * pool, its V block_size rows after that.
 */
typedef struct {
    const int *block_tables; /**< [n_tables][max_blocks] block ids, device */
    int max_blocks;          /**< row length of block_tables */
    const int *entry_table;  /**< [n] row of block_tables that entry i reads, device */
    int block_size;          /**< tokens per block, a power of two */
    int n_layers;            /**< layers in every block */
} KvkBlockTables;

/**
 * PagedAttention: causal attention of n query tokens of one layer whose
 * K/V rows are found through block tables: position p of entry i is row
 * p % block_size of block table[p / block_size], in that block's K (or V)
 * of @p layer. Reference: paged_attention() of chapter 4 (the lab,
 * solutions/ch04/paged_attention.c), which reads the same layout on the
 * CPU.
 * @param version   1 (one pass, the teaching version), 2 (split along the
 *                  sequence into KVK_SPLIT_PARTITION-position partitions,
 *                  then a reduction) or 3 (the fast version: several keys
 *                  in flight, the query heads of a GQA group from one read
 *                  of K/V, split only as far as the GPU's occupancy asks)
 * @param t         element type of the cache
 * @param out       [n][n_heads * head_dim] f32
 * @param q         [n][n_heads * head_dim] f32
 * @param pool      [n_blocks][n_layers][2][block_size][kv_dim] of type t
 * @param layer     the layer attended, 0..tables.n_layers-1
 * @param tables    the block tables
 * @param pos       [n] position of each entry (device memory: the kernels
 *                  read it when they run, so a CUDA graph can replay a
 *                  launch with new positions)
 * @param n         entries
 * @param max_pos   more than every pos[i] (versions 2 and 3 size their
 *                  partition grid from it; an entry at or past it gets NaN
 *                  from them, never another entry's partials). Passing the
 *                  model's seq_len keeps the launch the same at every step.
 * @param h         head shape
 * @param scratch   [kvk_paged_attention_scratch_floats()] or NULL when that is 0
 * @param stream    CUDA stream
 * @param err       receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_paged_attention(int version, Dtype t, float *out, const float *q, const void *pool, int layer,
                        KvkBlockTables tables, const int *pos, int n, int max_pos, KvkHeads h, float *scratch,
                        cudaStream_t stream, Err *err);

/**
 * Scratch a call of kvk_paged_attention() needs: the partitions' partial
 * results of version 2, and of version 3 when it splits (which it decides
 * from n, max_pos, the shape and the GPU's occupancy).
 * @param version  the version
 * @param t        cache type
 * @param n        entries of the call
 * @param max_pos  1 + the largest position
 * @param h        head shape
 * @return floats of scratch (0: none)
 */
size_t kvk_paged_attention_scratch_floats(int version, Dtype t, int n, int max_pos, KvkHeads h);

/**
 * Whether a version of kvk_paged_attention() supports a shape: versions 1
 * and 2 take every head that splits into 16-byte vectors (8 or fewer per
 * lane); version 3 the heads of 1, 2, 4, 8, 16, 32 or 12 such vectors.
 * @param version  the version
 * @param t        cache type
 * @param h        head shape
 * @return 1 if supported
 */
int kvk_paged_attention_supports(int version, Dtype t, KvkHeads h);

/**
 * The version of kvk_paged_attention() the forward pass uses for a step
 * of n entries: 3 where it supports the shape; otherwise 2 (split) when
 * n x n_heads blocks of version 1 would not fill the blocks the GPU holds
 * at once, else 1. Depends on n and the device only, so a captured CUDA
 * graph stays valid.
 * @param t  cache type
 * @param h  head shape
 * @param n  entries of the step
 * @return the version, or 0 when none supports the shape
 */
int kvk_paged_attention_pick(Dtype t, KvkHeads h, int n);

/**
 * The scratch kvk_paged_attention_pick()'s versions need for any step of
 * at most @p max_n entries.
 * @param t        cache type
 * @param h        head shape
 * @param max_n    most entries of a step
 * @param max_pos  the max_pos the calls will pass
 * @return floats of scratch (0: none)
 */
size_t kvk_paged_attention_pick_scratch_floats(Dtype t, KvkHeads h, int max_n, int max_pos);

/* --------------------------------------------------------- block_copy.cu */

/** Versions of kvk_block_copy(). */
extern const KvkVersion kvk_block_copy_versions[];
/** Number of versions of kvk_block_copy(). */
extern const int kvk_block_copy_n_versions;

/**
 * Copies whole blocks for copy-on-write: for each pair (src, dst), the
 * @p block_bytes bytes of block src (every layer, K and V: one contiguous
 * run in chapter 4's layout) go to block dst, pair after pair: in (a, b),
 * (b, c) block c gets a's bytes. Reference: block_pool_copy() of chapter 4
 * (block_pool.h), the same copy on the CPU's pool. Version 2 runs the
 * pairs of one launch at the same time, so it launches once per wave of
 * independent pairs (kvk_block_copy_waves()); given no @p pairs_host it
 * launches once, and then no pair may read or write a block that another
 * pair writes.
 * @param version      1 (one cudaMemcpyAsync per block) or 2 (one kernel
 *                     for every block of a wave)
 * @param pool         [n_blocks][block_bytes] bytes
 * @param pairs        [n_pairs][2] (src, dst) on the device (version 2)
 * @param pairs_host   [n_pairs][2] the same on the host (version 1; for
 *                     version 2, to find the waves), or NULL (version 2)
 * @param n_pairs      blocks to copy
 * @param block_bytes  bytes of one block (n_layers x 2 x block_size x
 *                     kv_dim x element size)
 * @param stream       CUDA stream
 * @param err          receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int kvk_block_copy(int version, void *pool, const int *pairs, const int *pairs_host, int n_pairs,
                   long long block_bytes, cudaStream_t stream, Err *err);

/**
 * Launches kvk_block_copy() version 2 makes for these pairs: one per wave
 * of pairs that do not depend on each other (a wave ends before a pair
 * that reads or writes a block an earlier pair of the wave writes, or
 * writes one it reads). Host only.
 * @param pairs_host  [n_pairs][2] (src, dst)
 * @param n_pairs     pairs
 * @return the number of launches (0 for no pairs)
 */
int kvk_block_copy_waves(const int *pairs_host, int n_pairs);

#ifdef __cplusplus
}
#endif

#endif
