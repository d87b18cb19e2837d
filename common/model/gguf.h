/**
 * @file gguf.h
 * @brief Reading GGUF files (llama.cpp's model format): metadata and tensors.
 *
 * A GGUF file is a little-endian byte stream:
 *
 *     magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
 *     kv_count x   (key: string, value type: u32, value)
 *     tensor_count x (name: string, n_dims: u32, dims: n_dims x u64,
 *                     type: u32, offset: u64)
 *     padding up to general.alignment (default 32)
 *     tensor data: each tensor at data_start + offset
 *
 * where a string is a u64 byte length followed by that many bytes (no NUL),
 * and an array value is an element type u32, a count u64 and the elements.
 * Version 3 is the current one; version 2 has the same layout (version 3
 * only added big-endian files, which kvlab refuses) and is read too.
 *
 * gguf_open() memory-maps the file and checks every length, count and
 * offset against the file before anything is used, so a truncated or
 * corrupt file is refused with one line instead of being read out of
 * bounds. After that, every view handed out (strings, array elements,
 * tensor data) points into the mapping and is known to lie inside it.
 * gguf_parse_image() does the same on bytes already in memory (tests, and
 * a fuzz target).
 */
#ifndef KVLAB_GGUF_H
#define KVLAB_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/** Type of a metadata value (the numbers are the file's). */
typedef enum {
    GGUF_U8 = 0,      /**< uint8 */
    GGUF_I8 = 1,      /**< int8 */
    GGUF_U16 = 2,     /**< uint16 */
    GGUF_I16 = 3,     /**< int16 */
    GGUF_U32 = 4,     /**< uint32 */
    GGUF_I32 = 5,     /**< int32 */
    GGUF_F32 = 6,     /**< float32 */
    GGUF_BOOL = 7,    /**< one byte, 0 or 1 */
    GGUF_STRING = 8,  /**< u64 length, then the bytes */
    GGUF_ARRAY = 9,   /**< element type u32, count u64, elements */
    GGUF_U64 = 10,    /**< uint64 */
    GGUF_I64 = 11,    /**< int64 */
    GGUF_F64 = 12,    /**< float64 */
    GGUF_VALUE_TYPE_COUNT
} GgufValueType;

/**
 * Type of a tensor's elements (ggml's numbering). The reader knows the
 * block size and byte size of each type listed, so it can check that a
 * tensor fits in the file; which of them the model can compute with is up
 * to the model loader.
 */
typedef enum {
    GGUF_TENSOR_F32 = 0,   /**< float32 */
    GGUF_TENSOR_F16 = 1,   /**< IEEE half */
    GGUF_TENSOR_Q4_0 = 2,  /**< blocks of 32: f16 scale, 16 bytes of 4-bit values */
    GGUF_TENSOR_Q4_1 = 3,  /**< blocks of 32: f16 scale, f16 minimum, 16 bytes of 4-bit values */
    GGUF_TENSOR_Q5_0 = 6,  /**< blocks of 32, 22 bytes */
    GGUF_TENSOR_Q5_1 = 7,  /**< blocks of 32, 24 bytes */
    GGUF_TENSOR_Q8_0 = 8,  /**< blocks of 32: f16 scale, 32 int8 values */
    GGUF_TENSOR_Q2_K = 10, /**< super-blocks of 256, 84 bytes */
    GGUF_TENSOR_Q3_K = 11, /**< super-blocks of 256, 110 bytes */
    GGUF_TENSOR_Q4_K = 12, /**< super-blocks of 256, 144 bytes */
    GGUF_TENSOR_Q5_K = 13, /**< super-blocks of 256, 176 bytes */
    GGUF_TENSOR_Q6_K = 14, /**< super-blocks of 256, 210 bytes */
    GGUF_TENSOR_Q8_K = 15, /**< super-blocks of 256, 292 bytes */
    GGUF_TENSOR_I8 = 24,   /**< int8 */
    GGUF_TENSOR_I16 = 25,  /**< int16 */
    GGUF_TENSOR_I32 = 26,  /**< int32 */
    GGUF_TENSOR_I64 = 27,  /**< int64 */
    GGUF_TENSOR_F64 = 28,  /**< float64 */
    GGUF_TENSOR_BF16 = 30, /**< bfloat16 */
} GgufTensorType;

/** Most dimensions a tensor may have (ggml's limit). */
#define GGUF_MAX_DIMS 4

/** Alignment of the tensor data when general.alignment is absent. */
#define GGUF_DEFAULT_ALIGNMENT 32

/** Bytes of text inside the file: not NUL-terminated. */
typedef struct {
    const char *data; /**< first byte, inside the mapping */
    uint64_t len;     /**< length in bytes */
} GgufString;

/** One metadata entry. */
typedef struct {
    GgufString key;             /**< e.g. "llama.block_count" */
    GgufValueType type;         /**< type of the value */
    GgufValueType elem_type;    /**< arrays: type of the elements */
    uint64_t count;             /**< arrays: number of elements; 1 otherwise */
    const unsigned char *value; /**< the value (arrays: the first element), inside the mapping */
    const uint64_t *string_at;  /**< string arrays: [count] offset of each element from value; else NULL */
} GgufKv;

/** One tensor: its shape, its type and where its bytes are. */
typedef struct {
    GgufString name;                /**< e.g. "blk.0.attn_q.weight" */
    GgufTensorType type;            /**< element type */
    uint32_t n_dims;                /**< 1..GGUF_MAX_DIMS */
    uint64_t dims[GGUF_MAX_DIMS];   /**< dims[0] varies fastest (a row); unused ones are 1 */
    uint64_t n_elements;            /**< product of the dims */
    uint64_t offset;                /**< from the start of the data section */
    uint64_t bytes;                 /**< size of the data */
    const void *data;               /**< [bytes] inside the mapping */
} GgufTensor;

/** An opened GGUF file: everything bounds-checked, views into the image. */
typedef struct {
    const unsigned char *image; /**< [size] the file's bytes */
    size_t size;                /**< length of the image */
    uint32_t version;           /**< 2 or 3 */
    uint64_t n_kv;              /**< metadata entries */
    GgufKv *kv;                 /**< [n_kv] */
    uint64_t n_tensors;         /**< tensors */
    GgufTensor *tensors;        /**< [n_tensors] in file order */
    uint32_t alignment;         /**< general.alignment, or 32 */
    uint64_t data_start;        /**< offset of the tensor data section */
    uint64_t *string_index;     /**< storage behind every GgufKv.string_at */
    void *map;                  /**< the mapping (gguf_open), or NULL for an image */
    size_t map_bytes;           /**< length of the mapping */
} GgufFile;

/**
 * Name of a tensor type as llama.cpp spells it ("Q4_1").
 * @param type  a type number from a file
 * @return a static string; "unknown" for a number the reader does not know
 */
const char *gguf_tensor_type_name(uint32_t type);

/**
 * Block size and block bytes of a tensor type (1 and the element size for
 * plain types).
 * @param type         a type number from a file
 * @param block_elems  receives elements per block
 * @param block_bytes  receives bytes per block
 * @return 0 for a known type, -1 otherwise
 */
int gguf_tensor_type_block(uint32_t type, uint64_t *block_elems, uint64_t *block_bytes);

/**
 * Parses a GGUF image already in memory and checks it entirely (header,
 * every key and value, every tensor info, every tensor's data inside the
 * image). The image must outlive the file; it is not copied. This is the
 * whole parser, with no file system involved: the entry point for a fuzz
 * target.
 * @param f      receives the parsed file
 * @param image  the bytes
 * @param size   their length
 * @param err    receives one line on failure ("truncated at byte N: ...")
 * @return 0 on success, -1 on failure (nothing to close then)
 */
int gguf_parse_image(GgufFile *f, const void *image, size_t size, Err *err);

/**
 * Opens a regular file (checked with fstat on the open descriptor, so a
 * FIFO or a directory is refused), maps it read-only and parses it with
 * gguf_parse_image(). The mapping is charged to the weights.
 * @param f     receives the file
 * @param path  the file
 * @param err   receives one line, prefixed with the path, on failure
 * @return 0 on success, -1 on failure (nothing to close then)
 */
int gguf_open(GgufFile *f, const char *path, Err *err);

/**
 * Frees the tables and unmaps the file (if gguf_open() mapped it).
 * @param f  an opened or zeroed file
 */
void gguf_close(GgufFile *f);

/**
 * Refuses a file whose tensors share bytes. Each tensor's data is its own
 * (a writer lays them out one after the other), and the memory table counts
 * every tensor's bytes once; sorted by offset, each must end before the next
 * begins.
 * @param f    a parsed file
 * @param err  receives "tensors 'A' and 'B' overlap (...)"
 * @return 0, or -1 with @p err set
 */
int gguf_check_no_overlap(const GgufFile *f, Err *err);

/**
 * Whether the first bytes of a file are the GGUF magic.
 * @param head   the first bytes
 * @param bytes  how many there are
 * @return 1 for "GGUF", 0 otherwise
 */
int gguf_has_magic(const void *head, size_t bytes);

/**
 * Finds a metadata entry.
 * @param f    the file
 * @param key  NUL-terminated key
 * @return the entry, or NULL when absent
 */
const GgufKv *gguf_find(const GgufFile *f, const char *key);

/**
 * An unsigned integer value: u8, u16, u32, u64 and the signed types are
 * accepted when the value is in 0..UINT32_MAX (converters write counts
 * and ids with varying types).
 * @param f    the file
 * @param key  the key
 * @param out  receives the value
 * @param err  receives "key K is missing", "... is a string, not an integer"
 *             or "... is out of range"
 * @return 0 on success, -1 on failure
 */
int gguf_get_u32(const GgufFile *f, const char *key, uint32_t *out, Err *err);

/**
 * A floating-point value: f32, or f64 rounded to f32.
 * @param f    the file
 * @param key  the key
 * @param out  receives the value
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int gguf_get_f32(const GgufFile *f, const char *key, float *out, Err *err);

/**
 * A boolean value (type bool only).
 * @param f    the file
 * @param key  the key
 * @param out  receives 0 or 1
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int gguf_get_bool(const GgufFile *f, const char *key, int *out, Err *err);

/**
 * A string value.
 * @param f    the file
 * @param key  the key
 * @param out  receives a view into the file
 * @param err  receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int gguf_get_string(const GgufFile *f, const char *key, GgufString *out, Err *err);

/**
 * An array whose elements have type @p elem.
 * @param f      the file
 * @param key    the key
 * @param elem   the element type required
 * @param count  receives the number of elements
 * @param kv     receives the entry, for the element accessors
 * @param err    receives the reason on failure (absent, not an array, other element type)
 * @return 0 on success, -1 on failure
 */
int gguf_get_array(const GgufFile *f, const char *key, GgufValueType elem, uint64_t *count, const GgufKv **kv,
                   Err *err);

/**
 * Element @p i of a string array, in O(1) (an index is built at open).
 * @param kv  a string array from gguf_get_array()
 * @param i   index, below kv->count
 * @return a view into the file
 */
GgufString gguf_array_string(const GgufKv *kv, uint64_t i);

/**
 * Element @p i of an i32 array.
 * @param kv  an i32 array from gguf_get_array()
 * @param i   index, below kv->count
 * @return the value
 */
int32_t gguf_array_i32(const GgufKv *kv, uint64_t i);

/**
 * Element @p i of an f32 array.
 * @param kv  an f32 array from gguf_get_array()
 * @param i   index, below kv->count
 * @return the value
 */
float gguf_array_f32(const GgufKv *kv, uint64_t i);

/**
 * Whether a file string equals a C string.
 * @param s  a string from the file
 * @param c  NUL-terminated text
 * @return 1 when equal, 0 otherwise
 */
int gguf_string_eq(GgufString s, const char *c);

/**
 * A file string made safe to quote in a one-line message: at most 48
 * bytes, every byte outside printable ASCII shown as '?', "..." when cut.
 * @param s    a string from the file
 * @param buf  output buffer (64 bytes are enough)
 * @param n    its size
 * @return buf
 */
const char *gguf_string_printable(GgufString s, char *buf, size_t n);

/**
 * Finds a tensor by name.
 * @param f     the file
 * @param name  NUL-terminated tensor name
 * @return the tensor, or NULL when absent
 */
const GgufTensor *gguf_find_tensor(const GgufFile *f, const char *name);

#endif
