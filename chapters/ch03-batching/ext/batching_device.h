/**
 * @file batching_device.h
 * @brief Chapter 3 extension: the arena's K/V on the device
 *        (`--device cuda`).
 *
 * **Adds** a device arena of token slots: the chapter keeps only the books
 * on the host (the arena runs without storage), and its K/V bytes live in
 * a device store of rows (common/cuda/device_kv.h) in which each request
 * owns a region of consecutive rows: the region at byte offset o of the
 * books is the slots from o / bytes_per_token on. Every move the books
 * make (`--reserve grow`) is repeated on the device through the on_move
 * hook, in the order the books made it.
 *
 * **Turned on by** `--device cuda` (`--kv-dtype`: the element type).
 *
 * **Taught in** book/ch03-batching.md, "Extension: the arena on the
 * device", and book/appendix-kernels.md (the kernels).
 *
 * **Where the core calls it**: batching_open() calls
 * batching_device_open(), and batching_step() calls batching_device_sync()
 * after each schedule, both when run->device is set.
 */
#ifndef KVLAB_CH03_BATCHING_DEVICE_H
#define KVLAB_CH03_BATCHING_DEVICE_H

#include "batching.h"
#include "device_kv.h"

/**
 * `--device cuda`: an arena of token slots on the device
 * (device_kv_open_arena()), one slot per bytes_per_token of the books'
 * arena; hooks on_move to repeat every move there. batching_open() calls it.
 * @param b    the state
 * @param run  the run (run->device set, the step buffers sized)
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int batching_device_open(BatchingState *b, ServingRun *run, Err *err);

/**
 * `--device cuda`, after each schedule: tells the device store where every
 * request's region is now (device_kv_arena_place(); none: 0 rows).
 * @param b    the state
 * @param run  the run
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int batching_device_sync(const BatchingState *b, ServingRun *run, Err *err);

/**
 * This chapter's device store (chapters/ch03-batching/ext/device.c): one
 * arena [layer][arena_rows][kv_dim] in which each sequence owns a
 * contiguous region of rows (placed by the chapter's allocator).
 * @param kv          receives the store
 * @param dev         the device
 * @param cfg         model shape
 * @param t           element type of K/V
 * @param arena_rows  token slots in the arena
 * @param max_seqs    sequence ids are 0..max_seqs-1
 * @param max_tokens  most entries of a step
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_open_arena(DeviceKv *kv, const Device *dev, const ModelConfig *cfg, Dtype t, long long arena_rows,
                         int max_seqs, int max_tokens, Err *err);

/**
 * Tells an arena store where a sequence's region is (before the steps
 * that use it). A region can move (grow): the chapter copies the rows.
 * @param kv         an arena store
 * @param seq        sequence id
 * @param first_row  first row of the region
 * @param rows       rows in the region (0: the sequence has none)
 * @param err        receives the reason on failure
 * @return 0 on success, -1 if the region leaves the arena
 */
int device_kv_arena_place(DeviceKv *kv, int seq, long long first_row, long long rows, Err *err);

/**
 * Copies rows of every layer (K and V) inside an arena: what chapter 3's
 * grow policy does when a region moves to a larger hole.
 * @param kv       an arena store
 * @param src_row  first row to copy
 * @param dst_row  first row of the destination (ranges must not overlap)
 * @param rows     rows to copy
 * @param err      receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int device_kv_arena_copy_rows(DeviceKv *kv, long long src_row, long long dst_row, long long rows, Err *err);

#endif
