/**
 * @file mem.h
 * @brief The memory ledger: every byte kvlab allocates, by category and place.
 *
 * The point of the course is to see where memory goes, so no buffer is
 * allocated behind the ledger's back. Host buffers come from mem_alloc(),
 * which records them; memory that is obtained another way (the mmap of a
 * checkpoint, a cudaMalloc on the device) is recorded with mem_track() and
 * mem_untrack(). The ledger keeps the current and the peak bytes of each
 * category, and the peak of their sum, for the host and for the device.
 *
 * The ledger is process-wide, like the allocator it wraps. It is not
 * thread-safe: kvlab allocates only outside its parallel regions.
 */
#ifndef KVLAB_MEM_H
#define KVLAB_MEM_H

#include <stddef.h>

/** What a buffer is for; the rows of every memory table. */
typedef enum {
    MEM_WEIGHTS,      /**< model parameters (mapped or uploaded) */
    MEM_ACTIVATIONS,  /**< per-step scratch: residual stream, q, scores, logits */
    MEM_KV,           /**< storage for keys and values of past tokens */
    MEM_KV_METADATA,  /**< bookkeeping about KV: block tables, free lists, maps */
    MEM_CATEGORY_COUNT
} MemCategory;

/** Where a buffer lives. */
typedef enum {
    MEM_HOST,   /**< CPU memory */
    MEM_DEVICE, /**< GPU memory */
    MEM_SWAP,   /**< host memory set apart as swap space for the K/V blocks of preempted
                     requests (vLLM's CPU swap space; chapter 4's --preempt swap): counted
                     apart from MEM_HOST, as its own device, so that the host columns keep
                     meaning what the program itself needs */
    MEM_PLACE_COUNT
} MemPlace;

/** Alignment of every mem_alloc() buffer in bytes (one cache line). */
#define MEM_ALIGN 64

/**
 * Allocates @p bytes of zeroed host memory, 64-byte aligned, and records it.
 * A request larger than the machine's physical memory fails at once.
 * @param cat    category to charge
 * @param bytes  size; 0 is allowed and returns a valid, freeable pointer
 * @return the buffer, or NULL when the system is out of memory
 */
void *mem_alloc(MemCategory cat, size_t bytes);

/**
 * mem_alloc() for a place other than the host's own memory: the buffer is
 * ordinary host memory, recorded under @p place (MEM_SWAP). mem_free()
 * takes it off the same place.
 * @param cat    category to charge
 * @param place  where the ledger counts it
 * @param bytes  size; 0 is allowed
 * @return the zeroed buffer, or NULL when the system is out of memory
 */
void *mem_alloc_at(MemCategory cat, MemPlace place, size_t bytes);

/**
 * Allocates an array of @p count elements of @p elem_size bytes, checking
 * the product for overflow.
 * @param cat        category to charge
 * @param count      number of elements
 * @param elem_size  size of one element in bytes
 * @return the zeroed buffer, or NULL on overflow or out of memory
 */
void *mem_alloc_array(MemCategory cat, size_t count, size_t elem_size);

/**
 * Frees a buffer from mem_alloc() and takes it off the ledger.
 * @param p  the buffer, or NULL (ignored)
 */
void mem_free(void *p);

/**
 * Size in bytes that mem_alloc() was asked for when it returned @p p.
 * @param p  a live buffer from mem_alloc(), or NULL
 * @return its size (0 for NULL)
 */
size_t mem_size(const void *p);

/**
 * Records @p bytes obtained outside mem_alloc() (mmap, cudaMalloc).
 * @param cat    category to charge
 * @param place  host or device
 * @param bytes  size of the allocation
 */
void mem_track(MemCategory cat, MemPlace place, size_t bytes);

/**
 * Records that @p bytes recorded with mem_track() were released.
 * @param cat    category charged when it was tracked
 * @param place  host or device
 * @param bytes  size of the allocation
 */
void mem_untrack(MemCategory cat, MemPlace place, size_t bytes);

/**
 * Bytes of a category held right now.
 * @param cat    category
 * @param place  host or device
 * @return current bytes
 */
size_t mem_current(MemCategory cat, MemPlace place);

/**
 * Largest number of bytes a category has held at any moment.
 * @param cat    category
 * @param place  host or device
 * @return peak bytes
 */
size_t mem_peak(MemCategory cat, MemPlace place);

/**
 * Largest number of bytes of all categories together held at any moment.
 * This is not the sum of the per-category peaks: those need not coincide.
 * @param place  host or device
 * @return peak of the total
 */
size_t mem_peak_total(MemPlace place);

/**
 * Number of mem_alloc() buffers not yet freed (for leak tests).
 * @return live buffer count
 */
long mem_live_buffers(void);

/**
 * Clears all counters. Only for tests and for programs that measure several
 * runs in one process; live buffers stay valid but are forgotten.
 */
void mem_reset(void);

/**
 * Physical memory of this machine, for refusing a K/V budget that could
 * never be allocated before a run starts.
 * @return bytes of RAM, or 0 when the system does not say
 */
size_t mem_physical_bytes(void);

/**
 * Memory the system could give this program now without swapping (Linux's
 * MemAvailable), for sizing a default K/V budget to the machine.
 * @return bytes, or mem_physical_bytes() where the system does not say
 */
size_t mem_available_bytes(void);

/**
 * Human-readable name of a category ("weights", "activations", "kv",
 * "kv_metadata"), also used as a JSON key.
 * @param cat  category
 * @return a static string
 */
const char *mem_category_name(MemCategory cat);

#endif
