/**
 * @file tokenizer.h
 * @brief The llama2.c BPE tokenizer: text to token ids and back.
 *
 * File format (`tokenizer.bin`, `tok512.bin`): an int32 max_token_length,
 * then for each of the model's vocab_size tokens a float32 merge score, an
 * int32 byte length and that many bytes. Ids 0, 1, 2 are `<unk>`, BOS `<s>`
 * and EOS `</s>`; ids 3..258 are the 256 raw bytes `<0x00>`..`<0xFF>`.
 *
 * Encoding follows SentencePiece as llama2.c does: BOS, a dummy-prefix space,
 * one token per UTF-8 code point (or its bytes, when the code point is not
 * in the vocabulary), then repeatedly the highest-scoring merge of two
 * neighbours until none applies.
 */
#ifndef KVLAB_TOKENIZER_H
#define KVLAB_TOKENIZER_H

#include <stddef.h>

#include "err.h"

/** Token id of beginning-of-sequence; also ends generation if sampled. */
#define TOKEN_BOS 1
/** Token id of end-of-sequence. */
#define TOKEN_EOS 2

/** One vocabulary entry in the sorted index used to look strings up. */
typedef struct {
    const char *str; /**< the token's bytes, NUL-terminated */
    int id;          /**< its token id */
} TokenIndex;

/** A loaded vocabulary. */
typedef struct {
    int vocab_size;          /**< tokens in the vocabulary */
    int max_token_length;    /**< longest token string in bytes */
    char **vocab;            /**< [vocab_size] NUL-terminated token strings */
    float *scores;           /**< [vocab_size] merge priority, higher first */
    TokenIndex *sorted;      /**< [vocab_size] vocab sorted by string */
    char *merge_buf;         /**< [2 * max_token_length + 3] concat scratch */
    unsigned char byte_pieces[512]; /**< [256][2] one-byte strings for <0xXX> */
} Tokenizer;

/**
 * Loads a tokenizer file whose vocabulary must have exactly @p vocab_size
 * entries (the model's); a file with fewer or more entries is refused.
 * @param t           receives the tokenizer
 * @param path        tokenizer file
 * @param vocab_size  the model's vocabulary size
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int tokenizer_load(Tokenizer *t, const char *path, int vocab_size, Err *err);

/**
 * Builds a tokenizer from an in-memory image of the file format.
 * @param t           receives the tokenizer
 * @param image       bytes of a tokenizer file
 * @param bytes       size of the image
 * @param vocab_size  the model's vocabulary size
 * @param err         receives the reason on failure
 * @return 0 on success, -1 on failure
 */
int tokenizer_open_image(Tokenizer *t, const void *image, size_t bytes, int vocab_size, Err *err);

/**
 * Frees everything tokenizer_load() allocated.
 * @param t  a loaded or zeroed tokenizer
 */
void tokenizer_free(Tokenizer *t);

/**
 * Encodes UTF-8 text. @p tokens must hold strlen(text) + 3 ids (BOS, dummy
 * prefix, at most one id per byte, EOS).
 * @param t         the tokenizer
 * @param text      NUL-terminated UTF-8 text
 * @param bos       prepend BOS (1) when nonzero
 * @param eos       append EOS (2) when nonzero
 * @param tokens    receives the ids
 * @param n_tokens  receives how many ids were written
 * @param err       receives the reason on failure
 * @return 0 on success, -1 when the vocabulary lacks the byte tokens needed
 */
int tokenizer_encode(const Tokenizer *t, const char *text, int bos, int eos, int *tokens, int *n_tokens,
                     Err *err);

/**
 * The text of @p token when it follows @p prev_token: a leading space is
 * dropped right after BOS (SentencePiece's dummy prefix), and raw-byte
 * tokens like `<0x0A>` become that byte.
 * @param t           the tokenizer
 * @param prev_token  the token before (for the BOS rule)
 * @param token       the token to decode
 * @return a string owned by the tokenizer
 */
const char *tokenizer_decode(const Tokenizer *t, int prev_token, int token);

/**
 * Whether a decoded piece is worth printing: llama2.c skips single bytes
 * that are neither printable nor white space (stray control bytes).
 * @param piece  a string from tokenizer_decode()
 * @return nonzero when the piece should be printed
 */
int tokenizer_piece_is_printable(const char *piece);

#endif
