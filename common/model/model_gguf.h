/**
 * @file model_gguf.h
 * @brief A Llama model from an open GGUF file (used by model.c).
 *
 * What the file must hold, and what is refused in one line when it does
 * not:
 *
 * - `general.architecture` = "llama";
 * - `llama.block_count`, `llama.embedding_length`,
 *   `llama.feed_forward_length`, `llama.attention.head_count`,
 *   `llama.context_length`, `llama.attention.layer_norm_rms_epsilon`;
 *   optional: `llama.attention.head_count_kv` (default: no GQA),
 *   `llama.rope.freq_base` (default 10000), `llama.vocab_size` (must agree
 *   with the embedding table), `llama.rope.dimension_count` (must be the
 *   head size: kvlab rotates whole heads);
 * - `token_embd.weight` [dim, vocab] (GGUF lists the row length first),
 *   `output_norm.weight` [dim], `output.weight` [dim, vocab] or nothing
 *   (then the classifier is the embedding table, "tied"), and for each
 *   block l: `blk.l.attn_norm.weight`, `attn_q`, `attn_k`, `attn_v`,
 *   `attn_output`, `ffn_norm`, `ffn_gate` (w1), `ffn_down` (w2), `ffn_up`
 *   (w3), each `.weight`, with the shapes the configuration implies.
 *   Matrices may be F32, F16, BF16, Q8_0, Q4_0 or Q4_1; norm weights F32.
 *
 * RoPE: llama.cpp's converter permutes the rows of Q and K so that
 * rotating consecutive pairs (x[2i], x[2i+1]), as llama2.c and kvlab do,
 * equals the original model's rotation of halves. Nothing to undo here.
 */
#ifndef KVLAB_MODEL_GGUF_H
#define KVLAB_MODEL_GGUF_H

#include "err.h"
#include "model.h"

/**
 * Fills the configuration and the weight views of @p m from m->gguf,
 * which must be open. The views point into the file.
 * @param m    a model whose gguf member is open (nothing else set)
 * @param err  receives one line naming the key or tensor at fault
 * @return 0 on success, -1 on failure (the caller closes m->gguf)
 */
int model_from_gguf(Model *m, Err *err);

/**
 * The WeightType of a GGUF tensor type, if kvlab computes with it.
 * @param gguf_type  a GgufTensorType number
 * @param out        receives the type
 * @return 0 when supported, -1 otherwise
 */
int model_weight_type_from_gguf(uint32_t gguf_type, WeightType *out);

#endif
