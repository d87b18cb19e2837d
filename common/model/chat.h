/**
 * @file chat.h
 * @brief A prompt as one user message in the model's ChatML template.
 *
 * An instruction-tuned model was trained on conversations laid out with
 * control tokens, and it answers well only when the prompt looks the same.
 * SmolLM2 uses ChatML:
 *
 *     <|im_start|>system
 *     You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
 *     <|im_start|>user
 *     What is the capital of France?<|im_end|>
 *     <|im_start|>assistant
 *
 * (each line ends in a newline, the last one too). The model writes the
 * assistant's answer and ends it with `<|im_end|>`, where generation stops.
 *
 * The file stores the layout as a Jinja template (`tokenizer.chat_template`).
 * kvlab runs no Jinja engine: it renders ChatML itself, and reads from the
 * template only what differs between ChatML models, the default system
 * message (the text between `<|im_start|>system` plus a newline and the next
 * `<|im_end|>`, inside one string literal of the template). A template
 * without a default system message gives a prompt without a system turn.
 *
 * The user text is inserted as it is: control tokens written in it (the
 * text `<|im_end|>`) become control tokens, as with Hugging Face's
 * apply_chat_template() followed by encoding.
 */
#ifndef KVLAB_CHAT_H
#define KVLAB_CHAT_H

#include <stddef.h>

#include "err.h"
#include "tokenizer.h"

/** The longest chat template kvlab reads, in bytes (4 MiB): real ones are a
 *  few KiB (SmolLM2's is under 1 KiB); a larger one in a model file is
 *  refused in one line rather than scanned. */
#define CHAT_TEMPLATE_MAX_BYTES (4 << 20)

/** What kvlab needs of a model's ChatML template. */
typedef struct {
    char *system_message; /**< the template's default system message, NUL-terminated; NULL when it has none */
    int im_start;         /**< id of `<|im_start|>` */
    int im_end;           /**< id of `<|im_end|>`: the end of a turn, where generation stops */
} ChatTemplate;

/**
 * Reads the chat template of a tokenizer opened from a GGUF file.
 * @param c    receives the template
 * @param t    the tokenizer
 * @param err  receives one line when the model has no chat template, when
 *             it is longer than CHAT_TEMPLATE_MAX_BYTES, when
 *             it is not ChatML, or when `<|im_start|>` / `<|im_end|>` are
 *             not control tokens of the vocabulary
 * @return 0 on success, -1 on failure (nothing to close then)
 */
int chat_template_open(ChatTemplate *c, const Tokenizer *t, Err *err);

/**
 * Frees the template.
 * @param c  an opened or zeroed template
 */
void chat_template_close(ChatTemplate *c);

/**
 * Renders @p user as the one user message of a conversation: the default
 * system turn (if any), the user turn, and the start of the assistant's
 * turn, `<|im_start|>assistant` and a newline.
 * @param c     the template
 * @param user  the user's message, NUL-terminated
 * @param out   receives the prompt, NUL-terminated (mem_alloc'ed: mem_free() it)
 * @param err   receives the reason on failure
 * @return 0 on success, -1 when memory runs out
 */
int chat_render(const ChatTemplate *c, const char *user, char **out, Err *err);

/**
 * Bytes chat_render() adds around the user's message (without the NUL):
 * a caller that bounds the prompt's length adds this to the message's.
 * @param c  the template
 * @return the bytes of the system turn and the turn markers
 */
size_t chat_overhead_bytes(const ChatTemplate *c);

/**
 * The token that ends the assistant's turn: generation stops there and
 * does not print it.
 * @param c  the template
 * @return the id of `<|im_end|>`
 */
int chat_end_token(const ChatTemplate *c);

#endif
