/**
 * @file assets.h
 * @brief Finding and opening a model and its tokenizer.
 *
 * Every program runs without arguments. Without `--model` it looks for
 * `stories260K.bin` (with `tok512.bin`) in `models/`, then in
 * `../shared/models/`, first relative to the working directory and then to
 * the project root the executable was built in; if neither exists it makes a
 * synthetic model of the same shape, and says so. Without `--tokenizer` it
 * picks the file that fits the model's vocabulary (`tok512.bin` for 512
 * tokens, `tokenizer.bin` for 32,000) next to the model or in those folders;
 * a GGUF model (`--model file.gguf`) brings its own tokenizer in its
 * metadata. `--weight-dtype f32` on the CPU dequantizes a quantized model's
 * matrices at load (model_dequantize()).
 */
#ifndef KVLAB_ASSETS_H
#define KVLAB_ASSETS_H

#include <limits.h>

#include "cli.h"
#include "err.h"
#include "model.h"
#include "tokenizer.h"

#ifndef PATH_MAX
/** Longest file path kvlab handles, where <limits.h> does not define it. */
#define PATH_MAX 4096
/**
 * Finds a file of the project (e.g. "data/requests-mixed.tsv") relative to
 * the working directory, then to each ancestor of the executable's folder.
 * @param relpath  path relative to the project root
 * @param out      receives the path
 * @param n        size of out
 * @return 0 if found, -1 otherwise
 */
int assets_find_project_file(const char *relpath, char *out, size_t n);

#endif

/** A model and tokenizer ready to use, and where they came from. */
typedef struct {
    Model model;                   /**< the loaded model */
    Tokenizer tokenizer;           /**< its tokenizer */
    char model_path[PATH_MAX];     /**< file, or "(synthetic stories260K)" */
    char tokenizer_path[PATH_MAX]; /**< file, or "(synthetic)" */
    int synthetic;                 /**< 1 when no model file was found */
    void *synthetic_image;         /**< the generated checkpoint, when synthetic */
} Assets;

/**
 * Opens the model and tokenizer named by the options, or the defaults.
 * @param a     receives everything
 * @param opts  --model and --tokenizer (either may be NULL), --weight-dtype and --device
 * @param err   receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to close then)
 */
int assets_open(Assets *a, const CliOptions *opts, Err *err);

/**
 * Releases the model, the tokenizer and any synthetic image.
 * @param a  assets from assets_open(), or zeroed
 */
void assets_close(Assets *a);

/**
 * One line for stderr that says which model and tokenizer are in use.
 * @param a    open assets
 * @param buf  output buffer
 * @param n    its size
 * @return buf
 */
const char *assets_describe(const Assets *a, char *buf, size_t n);

/**
 * Searches the default folders for a file name and writes the first path
 * that exists.
 * @param name  a file name such as "stories260K.bin"
 * @param out   receives the path
 * @param n     size of out
 * @return 0 if found, -1 otherwise
 */
int assets_find(const char *name, char *out, size_t n);

/**
 * Finds a file of the project (e.g. "data/requests-mixed.tsv") relative to
 * the working directory, then to each ancestor of the executable's folder.
 * @param relpath  path relative to the project root
 * @param out      receives the path
 * @param n        size of out
 * @return 0 if found, -1 otherwise
 */
int assets_find_project_file(const char *relpath, char *out, size_t n);

#endif
