/**
 * @file attention_case.h
 * @brief An attention case, shared by the checks of the contiguous and the
 *        paged attention kernels.
 *
 * Shared by the contiguous kernel's check (attention_check.c) and the
 * paged kernel's (paged_attention_check.c): a
 * batch of queries over K/V held both contiguously (each sequence from a
 * base row) and in shuffled blocks of a chapter 4 block pool (a block
 * table per sequence), with the same values, so that the contiguous and
 * the paged kernels read the same numbers and their times compare.
 *
 * References: attention_reference() (common/cpu/ops.c) for the contiguous
 * kernel; chapter 4's paged_attention() (the lab's answer,
 * solutions/ch04/) over the pool for the paged one, which must itself give
 * attention_reference()'s bits (the case refuses to judge any kernel by it
 * otherwise). The pool holds ATTN_PAGED_LAYERS layers and every element no
 * sequence holds is NaN; the kernels attend the last layer, so a kernel
 * that finds the wrong layer, or K where V is, reads NaN.
 *
 * CUDA builds only.
 */
#ifndef KVLAB_ATTENTION_CASE_H
#define KVLAB_ATTENTION_CASE_H

#include "block_pool.h"
#include "kcase.h"

/** The tolerance of both attention kernels (attention_check.c says why). */
#define ATTN_TOLERANCE 5e-5

/** Layers of a case's pool: the kernels attend the last one. */
#define ATTN_PAGED_LAYERS 2

/** What a case is. */
typedef struct {
    /**
     * 1 the whole sequence (chapter 1: len entries of one sequence), 2 one
     * decode token over a long cache (chapter 2), 3 a batch of decode
     * tokens over sequences of mixed lengths, the last one full (chapter 3,
     * and chapter 4's decode step)
     */
    int kind;
    int n_seqs;     /**< sequences */
    int len;        /**< the longest sequence's length */
    int heads;      /**< query heads */
    int kv_heads;   /**< K/V heads */
    int head_dim;   /**< width of a head */
    int block_size; /**< tokens per block of the paged copy */
    Dtype t;        /**< K/V type */
} AttnShape;

/** A case built on the host and the device. */
typedef struct {
    AttnShape s;          /**< what it is */
    int n;                /**< entries */
    int max_pos;          /**< 1 + the largest position */
    int max_blocks;       /**< entries of each block table */
    long long rows;       /**< contiguous rows */
    float *q;             /**< [n][heads * head_dim] */
    float *k;             /**< [rows][kv_dim] keys as stored (rounded to t) */
    float *v;             /**< [rows][kv_dim] values as stored */
    long long *base;      /**< [n] first row of each entry's sequence */
    int *pos;             /**< [n] position of each entry */
    int *entry_table;     /**< [n] table row of each entry */
    int *tables;          /**< [n_seqs][max_blocks] block ids, -1 past a sequence's blocks */
    int *table_blocks;    /**< [n_seqs] blocks each table holds */
    int n_blocks;         /**< blocks in the pool */
    BlockPool pool;       /**< storage [n_blocks][ATTN_PAGED_LAYERS][2][block_size][kv_dim] (paged only) */
    float *want;          /**< [n][heads * head_dim] attention_reference() */
    float *mag;           /**< [n][heads * head_dim] each output's magnitude, sum_t a_t |v_td| */
    float *want_paged;    /**< [n][heads * head_dim] paged_attention() over the pool */
    float *d_q;           /**< device copy of q */
    float *d_out;         /**< device output */
    float *d_scratch;     /**< device scratch for every version */
    void *d_k;            /**< device keys, type t */
    void *d_v;            /**< device values, type t */
    void *d_pool;         /**< device pool, type t (paged only) */
    long long *d_base;    /**< device copy of base */
    int *d_pos;           /**< device copy of pos */
    int *d_entry;         /**< device copy of entry_table */
    int *d_tables;        /**< device copy of tables */
} AttnCase;

/**
 * The shapes both kernels are checked on (the caller sets the type).
 * @param quick  1: the small ones only (tests, the CPU emulator, compute-sanitizer)
 * @param n      receives how many
 * @return the shapes
 */
const AttnShape *attn_case_shapes(int quick, size_t *n);

/**
 * Runs `each` on every case: every shape of attn_case_shapes() in every
 * type, built paged or not; stops at the first error.
 * @param run    the run
 * @param paged  1: build the pool and its reference too
 * @param each   what to do with a case (0 or -1)
 * @param err    receives the reason on failure
 * @return 0 or -1
 */
int attn_case_for_each(KcaseRun *run, int paged, int (*each)(KcaseRun *run, AttnCase *c, Err *err), Err *err);

/**
 * Builds a case on the host and the device.
 * @param c      receives the case (close it with attn_case_close())
 * @param s      the shape
 * @param paged  1: also the pool and its reference, which needs the lab's
 *               paged_attention()
 * @param dev    the device
 * @param err    receives the reason on failure
 * @return 0 or -1 (nothing left to free)
 */
int attn_case_open(AttnCase *c, const AttnShape *s, int paged, const Device *dev, Err *err);

/**
 * Frees a case.
 * @param c  an opened or zeroed case
 */
void attn_case_close(AttnCase *c);

/**
 * The case in words: "decode 4096: 1 x 12/12 heads of 64", and when paged
 * ", blocks of 16".
 * @param c      the case
 * @param paged  1: name the block size
 * @param out    receives the text
 * @param size   its size
 */
void attn_case_label(const AttnCase *c, int paged, char *out, size_t size);

/**
 * Runs one version of the contiguous or the paged kernel on the case,
 * checks all its outputs and reports the result (timed if it passed).
 * @param run      the run
 * @param c        the case
 * @param paged    0 contiguous, 1 paged
 * @param version  the version
 * @param us       receives its time (0: not timed, or failed)
 * @param err      receives the reason when it could not run
 * @return 0 or -1
 */
int attn_case_version(KcaseRun *run, AttnCase *c, int paged, int version, double *us, Err *err);

/**
 * Times one version that passes its check, without reporting it.
 * @param run      the run
 * @param c        the case
 * @param paged    0 contiguous, 1 paged
 * @param version  the version
 * @param us       receives its time (0 when the version does not take the
 *                 shape or fails the check)
 * @param err      receives the reason when it could not run
 * @return 0 or -1
 */
int attn_case_time_quietly(KcaseRun *run, AttnCase *c, int paged, int version, double *us, Err *err);

#endif
