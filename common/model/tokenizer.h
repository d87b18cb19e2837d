/**
 * @file tokenizer.h
 * @brief Text to token ids and back, for both kinds of tokenizer kvlab
 *        reads: llama2.c's files and the byte-level BPE of a GGUF model.
 *
 * Programs call the same functions for both kinds: tokenizer_encode(),
 * tokenizer_decode() (or the DecodeStream below, which prints whole UTF-8
 * characters), tokenizer_is_stop() and tokenizer_max_text_bytes().
 *
 * **llama2.c** (`tokenizer.bin`, `tok512.bin`): an int32 max_token_length,
 * then for each of the model's vocab_size tokens a float32 merge score, an
 * int32 byte length and that many bytes. Ids 0, 1, 2 are `<unk>`, BOS `<s>`
 * and EOS `</s>`; ids 3..258 are the 256 raw bytes `<0x00>`..`<0xFF>`.
 * Encoding follows SentencePiece as llama2.c does: BOS, a dummy-prefix space,
 * one token per UTF-8 code point (or its bytes, when the code point is not
 * in the vocabulary), then repeatedly the highest-scoring merge of two
 * neighbours (the first one on equal scores) until none applies.
 *
 * **GPT-2 byte-level BPE** (a GGUF file's `tokenizer.ggml.*` keys, with
 * `tokenizer.ggml.model` = "gpt2"): control tokens matched whole, the
 * pre-tokenizer's pieces, merges by rank; see bpe.h. BOS only when the file
 * says `add_bos_token`; SmolLM2's does not.
 *
 * Both kinds merge with a priority queue over neighbouring pairs
 * (bpe_merge.h): a 1 MB text takes a fraction of a second, not hours.
 */
#ifndef KVLAB_TOKENIZER_H
#define KVLAB_TOKENIZER_H

#include <stddef.h>

#include "bpe.h"
#include "err.h"
#include "gguf.h"

/** Token id of beginning-of-sequence in llama2.c vocabularies; also ends generation if sampled. */
#define TOKEN_BOS 1
/** Token id of end-of-sequence in llama2.c vocabularies. */
#define TOKEN_EOS 2

/** Which algorithm a Tokenizer runs. */
typedef enum {
    TOKENIZER_LLAMA2C = 0, /**< llama2.c's file: SentencePiece-style merges by score */
    TOKENIZER_GPT2 = 1,    /**< GPT-2 byte-level BPE from GGUF metadata */
} TokenizerKind;

/** One vocabulary entry in the sorted index used to look strings up. */
typedef struct {
    const char *str; /**< the token's bytes, NUL-terminated */
    int id;          /**< its token id */
} TokenIndex;

/** A loaded vocabulary of either kind. */
typedef struct {
    TokenizerKind kind;      /**< which algorithm encodes */
    int vocab_size;          /**< tokens in the vocabulary */
    int max_token_length;    /**< longest token string in bytes (GPT-2: longest decoded piece) */
    char **vocab;            /**< [vocab_size] NUL-terminated token strings; GPT-2: the bytes each token decodes to */
    float *scores;           /**< [vocab_size] merge priority, higher first (llama2.c only) */
    TokenIndex *sorted;      /**< [vocab_size] vocab sorted by string (llama2.c only) */
    char *merge_buf;         /**< [2 * max_token_length + 3] concat scratch (llama2.c only) */
    unsigned char byte_pieces[512]; /**< [256][2] one-byte strings for <0xXX> (llama2.c only) */
    int bos_id;              /**< beginning of sequence (llama2.c: 1), -1 when none */
    int eos_id;              /**< end of sequence (llama2.c: 2; SmolLM2: `<|im_end|>` = 2), -1 when none */
    int add_bos;             /**< whether a prompt starts with BOS (llama2.c: always) */
    int *piece_len;          /**< [vocab_size] bytes of each vocab entry (GPT-2 only: pieces may hold NUL) */
    char *piece_arena;       /**< the bytes vocab[] points into (GPT-2 only) */
    Bpe *bpe;                /**< merges, control tokens, pre-tokenizer (GPT-2 only) */
    char *chat_template;     /**< the file's `tokenizer.chat_template`, NUL-terminated; NULL when absent */
} Tokenizer;

/** A GPT-2 byte-level BPE tokenizer as plain arrays (what a GGUF file holds). */
typedef struct {
    BpeSpec bpe;             /**< vocabulary, token types, merges, pre-tokenizer */
    int bos_id;              /**< `tokenizer.ggml.bos_token_id`, -1 when absent */
    int eos_id;              /**< `tokenizer.ggml.eos_token_id`, -1 when absent */
    int add_bos;             /**< `tokenizer.ggml.add_bos_token`; 0 when absent */
    BpeString chat_template; /**< `tokenizer.chat_template`; data NULL when absent */
} TokenizerBpeSpec;

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
 * Builds a GPT-2 byte-level BPE tokenizer from plain arrays; everything it
 * needs is copied, so @p spec may go away afterwards.
 * @param t     receives the tokenizer
 * @param spec  vocabulary, merges, special ids and chat template
 * @param err   receives the reason on failure (a merge naming an unknown
 *              token, a repeated merge, an unknown pre-tokenizer, ids out of range)
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int tokenizer_open_bpe(Tokenizer *t, const TokenizerBpeSpec *spec, Err *err);

/**
 * Opens the tokenizer stored in a GGUF file's metadata:
 * `tokenizer.ggml.model` must be "gpt2" (byte-level BPE) and
 * `tokenizer.ggml.pre` a known pre-tokenizer ("smollm"); it reads
 * `tokenizer.ggml.tokens`, `.token_type` (absent: all normal), `.merges`,
 * `.bos_token_id`, `.eos_token_id`, `.add_bos_token` (absent: no BOS) and
 * `tokenizer.chat_template` (optional). Everything is copied: the file may
 * be closed afterwards. The caller checks that the vocabulary has as many
 * tokens as the model has embedding rows.
 * @param t    receives the tokenizer
 * @param f    an opened GGUF file
 * @param err  receives one line on failure (a missing key, a wrong type, a
 *             merge naming an unknown token, an unsupported model or pre-tokenizer)
 * @return 0 on success, -1 on failure (nothing to free then)
 */
int tokenizer_open_gguf(Tokenizer *t, const GgufFile *f, Err *err);

/**
 * Frees everything a tokenizer_load(), tokenizer_open_image() or
 * tokenizer_open_bpe() allocated.
 * @param t  a loaded or zeroed tokenizer
 */
void tokenizer_free(Tokenizer *t);

/**
 * Encodes text. @p tokens must hold strlen(text) + 3 ids (BOS, dummy
 * prefix, at most one id per byte, EOS).
 * @param t         the tokenizer
 * @param text      NUL-terminated text, normally UTF-8 (GPT-2 encodes any
 *                  bytes; llama2.c falls back to byte tokens)
 * @param bos       nonzero for the start of a sequence: prepends BOS when the
 *                  tokenizer uses one (llama2.c always, GGUF per add_bos_token)
 * @param eos       append EOS when nonzero (and the tokenizer has one)
 * @param tokens    receives the ids
 * @param n_tokens  receives how many ids were written
 * @param err       receives the reason on failure
 * @return 0 on success, -1 when the vocabulary lacks the byte tokens needed
 */
int tokenizer_encode(const Tokenizer *t, const char *text, int bos, int eos, int *tokens, int *n_tokens,
                     Err *err);

/**
 * The text of @p token when it follows @p prev_token. llama2.c: a leading
 * space is dropped right after BOS (SentencePiece's dummy prefix), and
 * raw-byte tokens like `<0x0A>` become that byte. GPT-2: the bytes the token
 * stands for (part of a UTF-8 character, possibly; a piece holding a NUL
 * byte ends there: tokenizer_piece() gives the length).
 * @param t           the tokenizer
 * @param prev_token  the token before (for the BOS rule); -1 when none
 * @param token       the token to decode
 * @return a string owned by the tokenizer ("" for an id out of range)
 */
const char *tokenizer_decode(const Tokenizer *t, int prev_token, int token);

/**
 * tokenizer_decode() with the length of the piece, which may hold NUL bytes.
 * @param t           the tokenizer
 * @param prev_token  the token before; -1 when none
 * @param token       the token to decode
 * @param len         receives the piece's length in bytes
 * @return the piece's bytes, owned by the tokenizer
 */
const char *tokenizer_piece(const Tokenizer *t, int prev_token, int token, size_t *len);

/**
 * Whether a decoded piece is worth printing: llama2.c skips single bytes
 * that are neither printable nor white space (stray control bytes).
 * @param piece  a string from tokenizer_decode()
 * @return nonzero when the piece should be printed
 */
int tokenizer_piece_is_printable(const char *piece);

/**
 * Whether generation ends when the model picks @p token: llama2.c's BOS or
 * EOS, a GGUF model's EOS (`<|im_end|>` for SmolLM2). The token is not printed.
 * @param t      the tokenizer
 * @param token  the sampled token
 * @return nonzero when generation stops
 */
int tokenizer_is_stop(const Tokenizer *t, int token);

/**
 * The most bytes of text one token can stand for: no text of more than
 * n × this many bytes encodes to n tokens or fewer.
 * @param t  the tokenizer
 * @return bytes, at least 1
 */
int tokenizer_max_piece_bytes(const Tokenizer *t);

/**
 * The longest text that may encode to @p max_tokens tokens or fewer: a
 * prompt longer than this is refused before tokenizing it (it cannot fit
 * seq_len), so that a 1 MB prompt costs nothing.
 * @param t           the tokenizer
 * @param max_tokens  tokens there is room for (e.g. seq_len)
 * @return max_tokens × tokenizer_max_piece_bytes(), saturated at SIZE_MAX
 */
size_t tokenizer_max_text_bytes(const Tokenizer *t, int max_tokens);

/**
 * Turns a stream of generated tokens into text that is only ever cut
 * between whole UTF-8 characters: a token that ends inside a multi-byte
 * character (byte-level BPE splits 😀 into several tokens) holds its bytes
 * back until the character is complete. Invalid bytes are passed on as they
 * are, so the concatenated output is exactly the tokens' bytes (control
 * tokens such as `<|im_start|>` as their text). For llama2.c vocabularies
 * the pieces are what llama2.c prints: the BOS rule, stray control bytes
 * skipped, BOS and EOS themselves never. One stream per sequence; it
 * allocates only in decode_stream_init().
 */
typedef struct {
    const Tokenizer *t;     /**< the tokenizer */
    int prev_token;         /**< the token before the next one, -1 when none */
    unsigned char held[4];  /**< bytes of a character not complete yet */
    int n_held;             /**< how many (at most 3) */
    char *out;              /**< [max_piece_bytes + 8] the text returned by the last call */
} DecodeStream;

/**
 * Starts a stream.
 * @param s           receives the stream
 * @param t           the tokenizer (must outlive the stream)
 * @param prev_token  the token before the first one pushed (BOS after a
 *                    llama2.c prompt's start), -1 when none
 * @param err         receives the reason on failure
 * @return 0 on success, -1 when memory runs out
 */
int decode_stream_init(DecodeStream *s, const Tokenizer *t, int prev_token, Err *err);

/**
 * Adds one token and returns the text that is complete now.
 * @param s      the stream
 * @param token  the next token
 * @param len    receives the text's length (0: nothing to print yet)
 * @return the text, owned by the stream, valid until the next call (NUL-terminated)
 */
const char *decode_stream_push(DecodeStream *s, int token, size_t *len);

/**
 * Ends the sequence: returns the bytes still held (an incomplete character
 * at the very end, passed on as it is) and empties the stream.
 * @param s    the stream
 * @param len  receives their count
 * @return the bytes, owned by the stream
 */
const char *decode_stream_finish(DecodeStream *s, size_t *len);

/**
 * Frees the stream's buffer.
 * @param s  an initialised or zeroed stream
 */
void decode_stream_free(DecodeStream *s);

#endif
