/**
 * @file gguf_write.h
 * @brief Writing small GGUF images in memory: synthetic models for tests
 *        and benchmarks, and deliberately broken files for the tests of
 *        the reader.
 *
 * Add metadata and tensors in the order they should appear, then
 * gguf_writer_finish() lays the file out exactly as gguf.h describes:
 * header, metadata, tensor infos, padding to the alignment, tensor data
 * (each tensor at the next multiple of the alignment). Nothing is checked
 * beyond what the layout needs, on purpose: a test may write a tensor
 * type or a shape the reader must refuse.
 */
#ifndef KVLAB_GGUF_WRITE_H
#define KVLAB_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"

/** Most metadata entries and tensors one writer holds. */
#define GGUF_WRITER_MAX_ITEMS 1024

/** A tensor to be written: its info and a view of its bytes. */
typedef struct {
    const char *name;             /**< NUL-terminated (copied) */
    uint32_t type;                /**< a GgufTensorType number, or any number for a test */
    uint32_t n_dims;              /**< dimensions written */
    uint64_t dims[GGUF_MAX_DIMS]; /**< dims[0] varies fastest */
    const void *data;             /**< [bytes], copied by gguf_writer_finish() */
    size_t bytes;                 /**< data length */
} GgufWriterTensor;

/** A GGUF image under construction. */
typedef struct {
    unsigned char *meta;     /**< encoded metadata entries, back to back */
    size_t meta_len;         /**< bytes used */
    size_t meta_cap;         /**< bytes allocated */
    uint64_t n_kv;           /**< entries in meta */
    GgufWriterTensor *tensors; /**< [GGUF_WRITER_MAX_ITEMS] */
    char *names;             /**< copies of the tensor names */
    size_t names_len;        /**< bytes used in names */
    uint64_t n_tensors;      /**< tensors added */
    uint32_t version;        /**< written in the header (3 unless changed) */
    uint32_t alignment;      /**< data alignment (32 unless general.alignment is added) */
    int failed;              /**< an allocation failed; finish reports it */
} GgufWriter;

/**
 * Starts an empty image (version 3, alignment 32).
 * @param w  the writer
 */
void gguf_writer_init(GgufWriter *w);

/**
 * Frees the writer (not an image it returned).
 * @param w  the writer
 */
void gguf_writer_free(GgufWriter *w);

/**
 * Adds a u32 entry. Adding "general.alignment" also makes the writer lay
 * the tensor data out with that alignment.
 * @param w      the writer
 * @param key    the key
 * @param value  the value
 */
void gguf_writer_u32(GgufWriter *w, const char *key, uint32_t value);

/**
 * Adds an f32 entry.
 * @param w      the writer
 * @param key    the key
 * @param value  the value
 */
void gguf_writer_f32(GgufWriter *w, const char *key, float value);

/**
 * Adds a bool entry.
 * @param w      the writer
 * @param key    the key
 * @param value  0 or 1 (written as given, so a test may write 2)
 */
void gguf_writer_bool(GgufWriter *w, const char *key, int value);

/**
 * Adds a string entry.
 * @param w      the writer
 * @param key    the key
 * @param value  NUL-terminated text
 */
void gguf_writer_string(GgufWriter *w, const char *key, const char *value);

/**
 * Adds an entry of any type from its encoded value bytes (for arrays and
 * the less common types).
 * @param w      the writer
 * @param key    the key
 * @param type   a GgufValueType number (any number, for a test)
 * @param value  the value exactly as the file stores it
 * @param bytes  its length
 */
void gguf_writer_raw(GgufWriter *w, const char *key, uint32_t type, const void *value, size_t bytes);

/**
 * Adds an array of strings.
 * @param w        the writer
 * @param key      the key
 * @param strings  [count] NUL-terminated strings
 * @param count    number of strings
 */
void gguf_writer_string_array(GgufWriter *w, const char *key, const char *const *strings, size_t count);

/**
 * Adds an array of i32 or f32 (4-byte elements).
 * @param w       the writer
 * @param key     the key
 * @param elem    GGUF_I32, GGUF_U32 or GGUF_F32
 * @param values  [count] elements
 * @param count   number of elements
 */
void gguf_writer_array32(GgufWriter *w, const char *key, GgufValueType elem, const void *values, size_t count);

/**
 * Adds a tensor (its name is copied; its data is copied at finish).
 * @param w  the writer
 * @param t  the tensor
 */
void gguf_writer_tensor(GgufWriter *w, const GgufWriterTensor *t);

/**
 * Lays out the file and returns it (charged to weights).
 * @param w      the writer
 * @param image  receives the image (mem_free() it)
 * @param bytes  receives its length
 * @param err    receives the reason on failure
 * @return 0 on success, -1 when out of memory or over GGUF_WRITER_MAX_ITEMS
 */
int gguf_writer_finish(GgufWriter *w, void **image, size_t *bytes, Err *err);

#endif
