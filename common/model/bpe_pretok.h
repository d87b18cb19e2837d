/**
 * @file bpe_pretok.h
 * @brief The `smollm` pre-tokenizer: cutting text into the pieces that
 *        byte-level BPE then merges, one piece at a time.
 *
 * BPE never merges across a piece boundary, so the pieces decide which
 * tokens can exist: " the" can be one token, "the." cannot. SmolLM2's
 * tokenizer (Hugging Face `tokenizers`, pre-tokenizer `Sequence[Digits
 * (individual_digits), ByteLevel(use_regex, no prefix space)]`) cuts in two
 * passes:
 *
 * 1. every Unicode number character (`\p{N}`: digits, but also `²`, `½`,
 *    `Ⅻ`) becomes a piece of its own, so "2024" is four pieces;
 * 2. the text between them is cut by GPT-2's pattern
 *    `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:
 *    English contractions, a word with the space before it, a run of
 *    punctuation with the space before it, and white space, of which the
 *    last character is left to the next word (`\s+(?!\S)`), so that
 *    "a   b" is "a", "  ", " b".
 *
 * The second pass runs on each stretch between two numbers on its own, as
 * the Hugging Face pipeline does: its look-ahead never sees past a number.
 * The letter, number and space classes are Unicode's, from PCRE2 compiled
 * with UTF and UCP (Debian's `libpcre2-8`).
 *
 * Invalid UTF-8 is not refused: each run of bytes that starts no
 * well-formed character becomes a piece of its own, which byte-level BPE
 * encodes byte by byte like any other, and the patterns run on the
 * well-formed stretches between such runs (a look-ahead sees the run as an
 * end, as PCRE2's own invalid-UTF mode would).
 */
#ifndef KVLAB_BPE_PRETOK_H
#define KVLAB_BPE_PRETOK_H

#include <stddef.h>

#include "err.h"

/** The compiled patterns (opaque: PCRE2 stays inside bpe_pretok.c). */
typedef struct BpePretok BpePretok;

/**
 * Receives one piece of the text, in order.
 * @param ctx    the caller's data
 * @param piece  the piece's bytes (not NUL-terminated)
 * @param len    its length, at least 1
 * @param err    receives the reason when the callback fails
 * @return 0 to go on, -1 to stop with @p err set
 */
typedef int (*BpePieceFn)(void *ctx, const char *piece, size_t len, Err *err);

/**
 * Compiles the patterns of a pre-tokenizer.
 * @param out   receives the pre-tokenizer (free with bpe_pretok_close())
 * @param name  its name in GGUF's `tokenizer.ggml.pre`; only "smollm" is known
 * @param err   receives the reason on failure
 * @return 0 on success, -1 for an unknown name or a PCRE2 failure
 */
int bpe_pretok_open(BpePretok **out, const char *name, Err *err);

/**
 * Frees the compiled patterns.
 * @param p  a pre-tokenizer, or NULL
 */
void bpe_pretok_close(BpePretok *p);

/**
 * Cuts @p text into pieces and hands each to @p fn, in order; the pieces
 * cover the text exactly, without gaps or overlaps.
 * @param p     the pre-tokenizer
 * @param text  the bytes (may hold NUL bytes and invalid UTF-8)
 * @param len   their count
 * @param fn    receives each piece
 * @param ctx   passed to @p fn
 * @param err   receives the reason on failure
 * @return 0 on success, -1 when @p fn or the matcher failed
 */
int bpe_pretok_split(const BpePretok *p, const char *text, size_t len, BpePieceFn fn, void *ctx, Err *err);

#endif
