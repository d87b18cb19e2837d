/**
 * @file kvsim_swap.h
 * @brief kvsim's `--scenario paper-fig19`: recomputing a preempted request
 *        against swapping its blocks out and back in, at 7B and 13B scale.
 *
 * The PagedAttention paper (Kwon et al., SOSP 2023, section 7.3 and Fig. 19)
 * compares vLLM's two ways of preempting: recomputation costs FLOPs (the
 * request's positions run through the model again), swapping costs bytes
 * over PCIe and, because vLLM copies block by block, one transfer per block
 * and per K and V tensor of every layer. Which is cheaper depends on the
 * block size and the length. This module models both with stated
 * assumptions (a GPU's FLOP/s, HBM and PCIe bandwidth, a fixed cost per
 * copy) and finds where they cross; chapter 4's `--preempt swap` counts the
 * same bytes and FLOPs for a real run (paged_recompute_flops()).
 */
#ifndef KVLAB_KVSIM_SWAP_H
#define KVLAB_KVSIM_SWAP_H

#include <stdio.h>

#include "err.h"
#include "model.h"

/** What bounds a GPU's swapping and recomputation, from its datasheet. */
typedef struct {
    const char *name;   /**< e.g. "a100-40gb" */
    const char *label;  /**< e.g. "A100 40 GB SXM4" */
    double flops;       /**< dense FP16 tensor-core peak, FLOP/s */
    double hbm;         /**< memory bandwidth, B/s */
    double pcie;        /**< host link, B/s each way */
    const char *source; /**< where the three numbers come from */
} KvsimSwapGpu;

/** The numbers no datasheet gives: this project's assumptions, each an option. */
typedef struct {
    double copy_latency; /**< fixed cost of one host-device copy (cudaMemcpyAsync), s */
    double pcie_share;   /**< share of the link's bandwidth a copy achieves, 0..1 */
    double mfu;          /**< share of the peak FLOP/s a recomputation (a prefill) achieves, 0..1 */
    int elem_bytes;      /**< bytes per K/V element and per weight (2: fp16) */
} KvsimSwapAssumptions;

/** What one preemption of a request of n_tokens costs, each way in seconds. */
typedef struct {
    long blocks;            /**< blocks the request holds: ceil(n_tokens / block_size) */
    double bytes;           /**< bytes a swap moves each way: whole blocks */
    long copies_vllm;       /**< copies each way with vLLM's layout: blocks x 2 x n_layers */
    double swap_vllm;       /**< one way (out, or in) with vLLM's layout */
    double swap_one_copy;   /**< one way with one copy per block (kvlab's host block layout) */
    double flops;           /**< FLOPs of recomputing the n_tokens positions */
    double recompute;       /**< recomputation inside a step that reads the weights anyway: FLOPs / achieved FLOP/s */
    double recompute_alone; /**< recomputation as a step of its own: max(that, all weights read once from HBM) */
} KvsimSwapCost;

/**
 * Looks up a GPU: "a100-40gb", "a100-80gb", "h100-80gb".
 * @param name  preset name
 * @param gpu   receives the preset
 * @return 0 if known, -1 otherwise
 */
int kvsim_swap_gpu(const char *name, KvsimSwapGpu *gpu);

/**
 * The model shapes of the comparison: "llama-7b" (dim 4096, hidden 11008,
 * 32 layers of 32 heads, vocabulary 32000) and "llama-13b" (5120, 13824,
 * 40 layers of 40 heads), as the LLaMA checkpoints' configurations give
 * them.
 * @param name  preset name
 * @param cfg   receives the shape (seq_len 2048)
 * @return 0 if known, -1 otherwise
 */
int kvsim_swap_model(const char *name, ModelConfig *cfg);

/**
 * Weights of a model: every projection of every layer, the embedding and
 * the classifier.
 * @param c  the shape
 * @return parameters
 */
double kvsim_swap_params(const ModelConfig *c);

/**
 * The cost of preempting a request that holds @p n_tokens positions, both
 * ways (see ::KvsimSwapCost).
 * @param c           the model
 * @param gpu         the GPU
 * @param a           the assumptions
 * @param n_tokens    positions with K/V, >= 1
 * @param block_size  tokens per block, >= 1
 * @param out         receives the costs
 */
void kvsim_swap_cost(const ModelConfig *c, const KvsimSwapGpu *gpu, const KvsimSwapAssumptions *a, long n_tokens,
                     int block_size, KvsimSwapCost *out);

/**
 * Where swapping starts to pay: the smallest block size among 1, 2, 4, ...,
 * 256 at which swapping out and back in costs less than recomputing.
 * @param c          the model
 * @param gpu        the GPU
 * @param a          the assumptions
 * @param n_tokens   positions with K/V
 * @param one_copy   1: one copy per block (kvlab's layout); 0: vLLM's
 * @param alone      1: against a recomputation run as a step of its own; 0: inside a step
 * @return the block size, or 0 when recomputing is cheaper at every block size
 */
int kvsim_swap_crossover(const ModelConfig *c, const KvsimSwapGpu *gpu, const KvsimSwapAssumptions *a, long n_tokens,
                         int one_copy, int alone);

/**
 * Whether kvsim was asked for this scenario (argv holds `--scenario
 * paper-fig19`, or `--scenario=paper-fig19`).
 * @param argc  from main
 * @param argv  from main
 * @return 1 if so
 */
int kvsim_swap_requested(int argc, char **argv);

/**
 * One line describing the scenario, for `kvsim --scenario list`.
 * @param f  stream
 */
void kvsim_swap_describe(FILE *f);

/**
 * The scenario as a program: its options (--gpu, --length, --copy-latency,
 * --pcie-share, --mfu, --dtype, --json, --help), the assumptions, a table
 * per model by block size, and where swapping and recomputation cross by
 * sequence length. Prints on stdout; a bad option is one line on stderr.
 * @param argc  from main
 * @param argv  from main
 * @return the exit status: 0, or 1 on bad input
 */
int kvsim_swap_main(int argc, char **argv);

#endif
