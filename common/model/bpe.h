/**
 * @file bpe.h
 * @brief GPT-2 byte-level BPE (the tokenizer of SmolLM2, GPT-2, Llama 3...):
 *        the vocabulary and merges as a GGUF file stores them, and encoding.
 *
 * Byte-level BPE works on bytes, so that every text can be encoded without
 * an unknown token. To keep the vocabulary printable, each of the 256 bytes
 * is written as one Unicode character (GPT-2's byte-to-unicode table):
 * the printable bytes `!`..`~`, `¡`..`¬` and `®`..`ÿ` stand for themselves,
 * the 68 others (control bytes, space, 0x7F-0xA0, 0xAD) become U+0100
 * onwards in byte order, so a space is `Ġ` (U+0120) and a newline `Ċ`
 * (U+010A). The token " the" is stored as "Ġthe".
 *
 * Encoding a text:
 * 1. control tokens (GGUF token type 3, such as `<|im_start|>`, and
 *    user-defined ones, type 4) are found in the text as whole strings,
 *    the leftmost first and the longest there, and become their ids;
 * 2. the text between them is cut into pieces by the pre-tokenizer
 *    (bpe_pretok.h);
 * 3. each piece starts as one token per byte, and neighbouring tokens are
 *    merged by the merge list: "Ġ t" at position 0 of the list merges
 *    before anything at position 1 (its rank), the leftmost pair on equal
 *    ranks, until no pair of the list is left (bpe_merge.h, O(n log n)).
 *
 * A byte the vocabulary has no token for (SmolLM2 lacks 21 of the 256:
 * 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5-0xFF) is
 * dropped, as Hugging Face `tokenizers` does for a BPE model without an
 * unknown token (SmolLM2's has none) and as llama.cpp does; such bytes
 * never come back from decoding.
 */
#ifndef KVLAB_BPE_H
#define KVLAB_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "bpe_merge.h"
#include "bpe_pretok.h"
#include "err.h"

/** GGUF token type of a normal token. */
#define BPE_TYPE_NORMAL 1
/** GGUF token type of a control token (`<|im_start|>`), matched as a whole in text. */
#define BPE_TYPE_CONTROL 3
/** GGUF token type of a user-defined token, matched as a whole in text too. */
#define BPE_TYPE_USER_DEFINED 4

/** A string that is not NUL-terminated (GGUF strings point into the file). */
typedef struct {
    const char *data; /**< its bytes */
    size_t len;       /**< their count */
} BpeString;

/** A vocabulary as plain arrays, the way GGUF stores it. */
typedef struct {
    int vocab_size;           /**< tokens */
    const BpeString *tokens;  /**< [vocab_size] byte-level strings ("Ġthe"); control tokens as plain text */
    const int32_t *types;     /**< [vocab_size] GGUF token types, or NULL: all normal */
    int n_merges;             /**< merges */
    const BpeString *merges;  /**< [n_merges] "left right", both byte-level; rank = index */
    const char *pre;          /**< pre-tokenizer name ("smollm") */
} BpeSpec;

/** A control token: its text, matched whole in the input. */
typedef struct {
    const char *text; /**< its bytes (points into the tokenizer's pieces) */
    size_t len;       /**< their count, at least 1 */
    int id;           /**< its token id */
} BpeControl;

/** A byte-level BPE vocabulary ready to encode. */
typedef struct {
    int vocab_size;          /**< tokens */
    int byte_token[256];     /**< [byte] id of the one-byte token, -1 when the vocabulary lacks it */
    uint64_t *pair_keys;     /**< [pair_slots] left id << 32 | right id; UINT64_MAX when the slot is empty */
    int32_t *pair_rank;      /**< [pair_slots] rank of the merge in that slot */
    int32_t *pair_merged;    /**< [pair_slots] the token the pair merges into */
    size_t pair_slots;       /**< slots in the hash table, a power of two */
    BpeControl *controls;    /**< [n_controls] control and user-defined tokens */
    int n_controls;          /**< how many */
    unsigned char control_first[256]; /**< [byte] 1 when some control token starts with it */
    BpePretok *pretok;       /**< the pre-tokenizer */
} Bpe;

/**
 * The bytes a token stands for: its byte-level characters mapped back to
 * bytes, or, for control and user-defined tokens (and any token holding a
 * character outside the byte table), its text as it is.
 * @param token  the token's string as stored
 * @param type   its GGUF type (BPE_TYPE_NORMAL when unknown)
 * @param out    receives the bytes; needs @p token.len bytes at most
 * @return the number of bytes written
 */
size_t bpe_token_bytes(BpeString token, int32_t type, unsigned char *out);

/**
 * Builds the encoding tables. Every merge must name two tokens of the
 * vocabulary and their concatenation, once; the pre-tokenizer must be known.
 * @param b       receives the tables
 * @param spec    the vocabulary (only read during the call)
 * @param pieces  [vocab_size] each token's bytes, from bpe_token_bytes()
 *                (control tokens are matched against these; must outlive @p b)
 * @param piece_len [vocab_size] their lengths
 * @param err     receives the reason on failure
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int bpe_open(Bpe *b, const BpeSpec *spec, char *const *pieces, const int *piece_len, Err *err);

/**
 * Frees the tables.
 * @param b  opened or zeroed tables
 */
void bpe_close(Bpe *b);

/**
 * Encodes text: control tokens, pre-tokenizer pieces, merges.
 * @param b         the tables
 * @param text      the bytes (any bytes: invalid UTF-8 is encoded byte by byte)
 * @param len       their count
 * @param tokens    receives the ids; room for @p len ids (one per byte at most)
 * @param n_tokens  receives how many were written
 * @param err       receives the reason on failure
 * @return 0 on success, -1 when memory runs out or the matcher fails
 */
int bpe_encode(const Bpe *b, const char *text, size_t len, int *tokens, int *n_tokens, Err *err);

#endif
