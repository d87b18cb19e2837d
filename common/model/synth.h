/**
 * @file synth.h
 * @brief Synthetic models: deterministic random weights of any shape.
 *
 * Tests and benchmarks must never depend on a download, so kvlab can make a
 * checkpoint of any Llama shape from a seed, in either file format, plus a
 * matching tokenizer. The text such a model writes is gibberish, but every
 * property the course cares about (shapes, GQA, memory, speed, and that all
 * chapters produce the same tokens) is exercised just the same.
 */
#ifndef KVLAB_SYNTH_H
#define KVLAB_SYNTH_H

#include <stddef.h>

#include "err.h"
#include "model.h"

/** What to generate. */
typedef struct {
    ModelConfig cfg;          /**< the shape */
    int shared_classifier;    /**< 1: the classifier is the embedding table */
    int ak42;                 /**< 1: ak42 version 1 format; 0: legacy */
    unsigned long long seed;  /**< weights are a function of the seed only */
} SynthSpec;

/** What a synthetic GGUF model holds (llama architecture, no tokenizer). */
typedef struct {
    ModelConfig cfg;          /**< the shape (dim and hidden_dim multiples of 32 for block types) */
    int shared_classifier;    /**< 1: no output.weight (tied embeddings) */
    unsigned long long seed;  /**< weights are a function of the seed, shape and types only */
    WeightType matrix_type;   /**< type of the projection matrices */
    WeightType embedding_type; /**< type of token_embd.weight (and output.weight) */
    float rope_theta;         /**< llama.rope.freq_base written; 0: 10000 */
} SynthGgufSpec;

/**
 * Looks up a named shape: "tiny" (dim 32, 2 layers, GQA), "stories260K",
 * "stories15M", "stories42M", "stories110M".
 * @param name  preset name
 * @param cfg   receives the shape
 * @return 0 if known, -1 otherwise
 */
int synth_preset(const char *name, ModelConfig *cfg);

/**
 * Comma-separated list of the preset names, for help texts.
 * @return a static string
 */
const char *synth_preset_names(void);

/**
 * Builds a checkpoint file image in memory (charged to weights).
 * @param spec   what to generate
 * @param image  receives the bytes (free with mem_free())
 * @param bytes  receives the size
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int synth_model_image(const SynthSpec *spec, void **image, size_t *bytes, Err *err);

/**
 * Builds a GGUF image of a llama model with random weights (the same
 * distributions as synth_model_image()), quantized to the types asked for
 * with weight_quantize_row(), and the metadata model_load() needs
 * (llama.* keys, llama.attention.layer_norm_rms_epsilon 1e-5). Charged to
 * weights.
 * @param spec   what to generate
 * @param image  receives the bytes (free with mem_free())
 * @param bytes  receives the size
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int synth_gguf_image(const SynthGgufSpec *spec, void **image, size_t *bytes, Err *err);

/**
 * Builds a tokenizer file image for @p vocab_size tokens: the three special
 * tokens, the 256 byte tokens, the printable ASCII characters, then merged
 * strings of letters and spaces, longest last.
 * @param vocab_size  at least 354 (specials, bytes, printable ASCII)
 * @param image       receives the bytes (free with mem_free())
 * @param bytes       receives the size
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int synth_tokenizer_image(int vocab_size, void **image, size_t *bytes, Err *err);

/**
 * Writes an image to a file, atomically (outfile_write_all()): on failure
 * the old file, if any, is left as it was.
 * @param path   output file
 * @param image  bytes
 * @param bytes  size
 * @param err    receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int synth_write_file(const char *path, const void *image, size_t bytes, Err *err);

#endif
