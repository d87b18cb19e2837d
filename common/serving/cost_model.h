/**
 * @file cost_model.h
 * @brief A step's time from its work: the clock that makes latency figures
 *        reproduce on any machine (`--clock model`), and that kvsim runs
 *        its 7B-70B scenarios on.
 *
 * One forward step of a batch does three kinds of work, and this model
 * charges each at one rate of the machine (::CostMachine):
 *
 *     bytes  = weight bytes (every weight is read once per step, whatever the batch)
 *            + attended positions x K/V bytes per position (each fed token reads the K/V of its context)
 *     flops  = tokens x 2 x the layers' projection weights
 *            + attended positions x 4 x dim x layers (scores and the weighted sum of values)
 *            + logits rows x 2 x dim x vocab (the classifier, only for tokens that sample)
 *
 *     t_memory  = bytes / bandwidth
 *     t_compute = flops / (FMA peak x compute share)
 *     t_step    = overhead + max(t_memory, t_compute)   (overlap: a GPU streams weights while it computes)
 *                 or overhead + t_memory + t_compute    (no overlap: kvlab's CPU kernels read, then compute)
 *               + bytes swapped this step / host-link bandwidth
 *
 * Norms, RoPE, softmax and sampling are left out (a few operations per
 * element), and so is writing the new K/V. The FLOPs are those of
 * paged_recompute_flops() in chapter 4, plus the classifier. Everything is
 * arithmetic on the step's integer counts in one fixed order, so a run
 * gives the same times, bit for bit, on every machine and every
 * `--threads`.
 *
 * A machine is a preset (GPU datasheets, and this project's build CPU) or
 * the output of `build/machine-limits`, each optionally adjusted with
 * `,key=value` (cost_machine_load()).
 */
#ifndef KVLAB_COST_MODEL_H
#define KVLAB_COST_MODEL_H

#include <stddef.h>

#include "err.h"
#include "model.h"

/** The rates a step is charged at. */
typedef struct {
    char name[48];           /**< preset name, or the file it came from */
    double read_bytes_per_s; /**< memory bandwidth: weights and K/V */
    double fma_flops_per_s;  /**< the vector units' peak (2 FLOPs per fused multiply-add) */
    double compute_share;    /**< the share of that peak a step's arithmetic reaches, (0, 1] */
    double link_bytes_per_s; /**< host link, each way: what a swapped block moves over */
    double overhead_s;       /**< fixed cost of every step (launches, scheduling, sampling) */
    int overlap;             /**< 1: memory and compute overlap (max); 0: they add up */
    const char *source;      /**< where the numbers come from (a static string) */
} CostMachine;

/** What a model's shape costs per unit of work. */
typedef struct {
    double weight_bytes;          /**< bytes of weights read once per step */
    double kv_bytes_per_position; /**< K and V of one position, every layer */
    double flops_per_token;       /**< 2 x the projection weights of every layer */
    double flops_per_attended;    /**< 4 x dim x layers: one position read by attention */
    double flops_per_logits_row;  /**< 2 x dim x vocab: the classifier for one row */
} CostShape;

/** One step's work, counted by the serving loop. */
typedef struct {
    long tokens;           /**< positions fed through the model */
    long attended;         /**< positions read by attention, over every fed token (position p reads p + 1) */
    long logits_rows;      /**< rows of logits computed */
    double transfer_bytes; /**< bytes moved between the device and the host (swap out and in) */
} StepWork;

/**
 * The cost of a model's shape.
 * @param c                   the model's shape
 * @param weight_bytes        bytes of weights a step reads (as stored: a quantized model reads fewer)
 * @param kv_bytes_per_token  K and V of one position in every layer
 * @param out                 receives the costs
 */
void cost_shape_init(const ModelConfig *c, double weight_bytes, double kv_bytes_per_token, CostShape *out);

/**
 * The modelled time of one step (see the file's comment).
 * @param m  the machine
 * @param s  the model's shape
 * @param w  the step's work
 * @return seconds
 */
double cost_step_seconds(const CostMachine *m, const CostShape *s, const StepWork *w);

/**
 * A preset: "a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb" (datasheet
 * figures: HBM bandwidth, dense FP16 tensor peak, PCIe each way; overlap,
 * no overhead, compute share 1: the roofline, the fastest the hardware
 * allows) or "kvlab-cpu" (one core of this project's 2-core build
 * machine, measured: see its source line).
 * @param name  the preset's name
 * @param m     receives the machine
 * @return 0 if known, -1 otherwise
 */
int cost_machine_preset(const char *name, CostMachine *m);

/**
 * The presets' names, comma-separated, for help texts and errors.
 * @return a static string
 */
const char *cost_machine_names(void);

/** The machine `--clock model` uses when `--machine` is not given. */
#define COST_MACHINE_DEFAULT "kvlab-cpu"

/**
 * Reads a machine: BASE[,KEY=VALUE...]. BASE is a preset name or a file
 * written by `build/machine-limits` (its read_gb_s_median and
 * fma_gflop_s_median lines; compute share 0.13, overhead 0, no overlap,
 * link = half the read bandwidth, as kvlab-cpu). Each KEY=VALUE replaces
 * one figure: bw (GB/s), flops (FMA peak, GFLOP/s), share (0 to 1),
 * link (GB/s), overhead (microseconds), overlap (0 or 1).
 * @param spec  the text of `--machine`
 * @param m     receives the machine
 * @param err   receives "--machine: reason" on failure
 * @return 0 on success, -1 on failure
 */
int cost_machine_load(const char *spec, CostMachine *m, Err *err);

/**
 * One line describing a machine, e.g. "kvlab-cpu: 12.7 GB/s, 167.8 GFLOP/s
 * FMA peak x 0.13, link 6.35 GB/s, overhead 0 us, memory then compute".
 * @param m    the machine
 * @param buf  output
 * @param n    its size
 * @return buf
 */
const char *cost_machine_describe(const CostMachine *m, char *buf, size_t n);

/** Most step ratios a ::CostCheck keeps (beyond, one step in a stride). */
#define COST_CHECK_CAP 4096

/**
 * The cost model against the wall clock over a run: each step's modelled
 * time over its measured one. The ratios of up to ::COST_CHECK_CAP steps
 * are kept (when full, every other one is dropped and the stride doubles,
 * as KvTimeline does, so recording never allocates); min, max and the
 * totals count every step.
 */
typedef struct {
    long steps;                    /**< steps compared */
    long stride;                   /**< keep one step in stride */
    int n;                         /**< ratios kept */
    double min;                    /**< smallest ratio of every step */
    double max;                    /**< largest ratio of every step */
    double modelled_s;             /**< the steps' total modelled time */
    double measured_s;             /**< the steps' total measured time */
    double ratio[COST_CHECK_CAP];  /**< the kept ratios, in step order until summarized */
} CostCheck;

/**
 * Adds a step.
 * @param c         the check
 * @param modelled  its modelled time
 * @param measured  its measured time (> 0)
 */
void cost_check_add(CostCheck *c, double modelled, double measured);

/** A CostCheck summed up. */
typedef struct {
    long steps;     /**< steps compared */
    double median;  /**< median ratio (nearest rank, over the kept steps) */
    double p10;     /**< 10th percentile ratio (the same way) */
    double p90;     /**< 90th percentile ratio */
    double min;     /**< smallest ratio of every step */
    double max;     /**< largest */
    double total;   /**< total modelled time over total measured time */
} CostCheckSummary;

/**
 * Sums up a check (sorts its kept ratios in place).
 * @param c    the check
 * @param out  receives the figures (all 0 without a step)
 */
void cost_check_summarize(CostCheck *c, CostCheckSummary *out);

#endif
