/**
 * @file device.h
 * @brief The CUDA device: opening it, device memory through the ledger,
 *        and what a program reports about it.
 *
 * This header needs no CUDA headers, and every function exists in every
 * build: in a build without CUDA (no nvcc, or CUDA=0) device_open() fails
 * with "built without CUDA support", so `--device cuda` gives one clear
 * line instead of a link error or a crash. On a machine without a GPU or
 * driver, device_open() says that instead.
 *
 * Every byte kvlab allocates on the device goes through device_alloc(),
 * which records it in the ledger (mem.h) as MEM_DEVICE under its category.
 * What the ledger cannot see (the CUDA context, cuBLAS's own buffers, the
 * allocator's rounding) shows up in the difference between the
 * cudaMemGetInfo() readings that the report prints beside it.
 */
#ifndef KVLAB_DEVICE_H
#define KVLAB_DEVICE_H

#include <stddef.h>
#include <stdio.h>

#include "err.h"
#include "json.h"
#include "mem.h"

struct CUstream_st;   /* cudaStream_t without the CUDA headers */
struct KvkBlas;       /* a cuBLAS handle with its stream and workspace (kernels.h) */

/** An open CUDA device: its stream, its cuBLAS handle, its memory readings. */
typedef struct {
    int ordinal;                     /**< CUDA device number (always 0: pick with CUDA_VISIBLE_DEVICES) */
    char name[256];                  /**< e.g. "NVIDIA H200" */
    int cc_major;                    /**< compute capability, major (9 for Hopper) */
    int cc_minor;                    /**< compute capability, minor */
    int sm_count;                    /**< streaming multiprocessors */
    size_t mem_total;                /**< cudaMemGetInfo total */
    size_t mem_free_at_open;         /**< free right after the context was created, before kvlab allocated */
    size_t mem_free_now;             /**< free at the last device_mem_refresh() */
    struct CUstream_st *stream;      /**< every kernel and copy of kvlab goes here, in order */
    struct KvkBlas *blas;            /**< cuBLAS handle bound to stream, with blas_workspace */
    void *blas_workspace;            /**< [blas_workspace_bytes] given to cuBLAS, so the ledger sees it */
    size_t blas_workspace_bytes;     /**< 32 MiB on Hopper and later, 4 MiB before */
    int is_open;                     /**< 1 between device_open() and device_close() */
} Device;

/**
 * Whether this build has CUDA support at all.
 * @return 1 if built with nvcc (KVLAB_CUDA), else 0
 */
int device_compiled_in(void);

/**
 * Whether a CUDA device can be used, without creating a context (cheap:
 * for tests and tools that decide whether to skip).
 * @param err  receives why not: no CUDA in this build, no driver, no device
 * @return 0 when a device is there, -1 otherwise
 */
int device_probe(Err *err);

/**
 * Opens device 0: checks that a driver and a device exist, creates the
 * context, a stream and a cuBLAS handle (with a workspace from the ledger),
 * and takes the first cudaMemGetInfo reading.
 * @param d    receives the device
 * @param err  receives one line: no CUDA support in this build, no driver,
 *             no device, or the failing call with file:line
 * @return 0 on success, -1 on failure (nothing to close then)
 */
int device_open(Device *d, Err *err);

/**
 * Destroys the stream and the cuBLAS handle and frees the workspace.
 * Buffers from device_alloc() must have been freed before.
 * @param d  an open or zeroed device
 */
void device_close(Device *d);

/**
 * Waits until everything queued on the device's stream has run, and
 * reports an error any of it raised.
 * @param d    the device
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_sync(const Device *d, Err *err);

/**
 * cudaMalloc through the ledger: records @p bytes as MEM_DEVICE under
 * @p cat. Use the device_alloc() macro, which passes file and line.
 * @param ptr    receives the device pointer (NULL for 0 bytes)
 * @param bytes  size
 * @param cat    ledger category
 * @param file   caller's file, for the message
 * @param line   caller's line
 * @param err    receives the reason on failure (says how much was free)
 * @return 0 on success, -1 on failure
 */
int device_alloc_at(void **ptr, size_t bytes, MemCategory cat, const char *file, int line, Err *err);

/** cudaMalloc through the ledger, with the caller's file and line. */
#define device_alloc(ptr, bytes, cat, err) device_alloc_at((void **)(ptr), (bytes), (cat), __FILE__, __LINE__, (err))

/**
 * cudaFree of a buffer from device_alloc(), taken off the ledger.
 * @param ptr  the buffer, or NULL (ignored)
 * @param err  receives the reason on failure (may be NULL in cleanup paths)
 * @return 0 on success, -1 if cudaFree failed or ptr is not a live buffer
 */
int device_free(void *ptr, Err *err);

/**
 * Size of a live buffer from device_alloc().
 * @param ptr  the buffer
 * @return its size in bytes, or 0 if it is not a live buffer
 */
size_t device_buffer_bytes(const void *ptr);

/**
 * Number of device buffers not yet freed (for leak tests).
 * @return live buffer count
 */
long device_live_buffers(void);

/**
 * A count that grows with every device_alloc() and device_free(): a CUDA
 * graph captured when it had one value may point at buffers that are gone
 * when it has another (device_forward() captures again then).
 * @return the count
 */
unsigned long device_buffer_epoch(void);

/**
 * Takes a new cudaMemGetInfo reading into d->mem_free_now.
 * @param d    the device
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_mem_refresh(Device *d, Err *err);

/**
 * Prints the device lines of the memory table: name, cudaMemGetInfo at
 * open and at the last refresh, and what the ledger accounts for.
 * @param f  stream
 * @param d  an open device
 */
void device_report_table(FILE *f, const Device *d);

/**
 * Writes the device keys of the JSON report: device_name,
 * device_compute_capability, device_memory_total_bytes,
 * device_memory_free_at_start_bytes, device_memory_free_at_end_bytes.
 * @param j  the writer, inside the report's object
 * @param d  an open device
 */
void device_report_json(JsonWriter *j, const Device *d);

#endif
