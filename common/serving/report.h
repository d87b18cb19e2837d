/**
 * @file report.h
 * @brief The memory table every program prints, and its JSON twin.
 *
 * At exit each program prints, on stderr, the ledger (weights, activations,
 * kv, kv_metadata: current and peak, host and device), then the KV cache in
 * the course's terms: bytes per token from the formula, bytes reserved,
 * bytes that hold real tokens, and their ratio. With `--json FILE` the same
 * numbers go to one JSON object. Chapters add their own lines and keys
 * through the extra hooks.
 */
#ifndef KVLAB_REPORT_H
#define KVLAB_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "err.h"
#include "json.h"
#include "kv_dtype.h"
#include "model.h"

/** One sample of KV memory over the run (for plots). */
typedef struct {
    long step;       /**< forward step number */
    size_t reserved; /**< KV bytes reserved at that step */
    size_t used;     /**< KV bytes holding tokens at that step */
} KvSample;

/** Most samples a timeline keeps; beyond that it keeps every other one. */
#define KV_TIMELINE_CAP 2048

/**
 * KV reserved and used over the run: the current values, the peaks, the
 * per-step average utilization, and a timeline with a fixed capacity (when
 * full, every other sample is dropped and the stride doubles, so recording
 * never allocates).
 */
typedef struct {
    size_t reserved;                 /**< KV bytes reserved now */
    size_t used;                     /**< KV bytes holding tokens now */
    size_t peak_reserved;            /**< largest reserved seen */
    size_t peak_used;                /**< largest used seen */
    double util_at_peak;             /**< used / reserved at the step of peak use */
    double util_sum;                 /**< sum over steps with reserved > 0 of used / reserved */
    long util_steps;                 /**< number of such steps */
    long steps;                      /**< samples offered */
    long stride;                     /**< keep one sample in stride */
    int n_samples;                   /**< samples kept */
    KvSample samples[KV_TIMELINE_CAP]; /**< the kept samples, oldest first */
} KvTimeline;

/**
 * Records the KV state after a step.
 * @param t         the timeline
 * @param step      step number
 * @param reserved  KV bytes reserved
 * @param used      KV bytes holding tokens
 */
void kv_timeline_record(KvTimeline *t, long step, size_t reserved, size_t used);

/**
 * Utilization averaged over the steps recorded (steps with nothing
 * reserved do not count).
 * @param t  the timeline
 * @return used/reserved averaged over steps, or 0 if none
 */
double kv_timeline_avg_utilization(const KvTimeline *t);

/** Everything a program reports at exit. */
typedef struct {
    const char *chapter;          /**< e.g. "ch02-kvcache" */
    const char *device;           /**< "cpu" or "cuda" */
    const char *model_path;       /**< where the model came from */
    ModelConfig cfg;              /**< the model's shape */
    const Model *model;           /**< the model, for its weights as stored and in f32 (may be NULL) */
    KvDtype kv_dtype;             /**< the stored K/V's element type (f32 unless --kv-dtype says otherwise) */
    const KvTimeline *kv;         /**< KV over the run (may be NULL: no cache) */
    long tokens_generated;        /**< new tokens produced (all requests) */
    double elapsed_s;             /**< wall time of generation */
    /** Adds chapter-specific lines to the table (may be NULL). */
    void (*extra_table)(FILE *f, const void *extra);
    /** Adds the latency block after the time line (may be NULL). */
    void (*latency_table)(FILE *f, const void *extra);
    /** Adds chapter-specific keys to the JSON object (may be NULL). */
    void (*extra_json)(JsonWriter *j, const void *extra);
    const void *extra;            /**< passed to the hooks */
} RunReport;

/**
 * Prints the memory table.
 * @param f  stream (stderr in the programs)
 * @param r  the report
 */
void report_print(FILE *f, const RunReport *r);

/**
 * Finds out before a run whether an output file (--json, --out) can be
 * written, so that a bad path is refused before any output and before the
 * work, not after it (outfile_check(): a FIFO or a device is refused, an
 * existing file is left as it was).
 * @param option  the option that named the file, for the message ("--json")
 * @param path    the file
 * @param err     receives "OPTION PATH: cannot create: reason" on failure
 *                (a FIFO: "it is a FIFO, not a regular file")
 * @return 0 when the file can be written, -1 otherwise
 */
int report_check_writable(const char *option, const char *path, Err *err);

/**
 * Writes the report as one JSON object (keys in the README), through
 * outfile_open() and outfile_commit(): on failure the old file is left as
 * it was.
 * @param path  output file
 * @param r     the report
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int report_write_json(const char *path, const RunReport *r, Err *err);

/**
 * Seconds on a monotonic clock, for timing.
 * @return seconds since an arbitrary origin
 */
double now_seconds(void);

/**
 * CPU time of the whole process (every thread), for comparing a step's
 * work with a model of it on a machine that other programs share.
 * @return seconds since an arbitrary origin
 */
double process_cpu_seconds(void);

#endif
