#include "generate.h"

#include <stdint.h>
#include <string.h>

#include "mem.h"

int generation_init(Generation *g, const Model *m, const Tokenizer *t, const char *prompt, Err *err)
{
    memset(g, 0, sizeof *g);
    int seq_len = m->cfg.seq_len, max_tokens = model_max_tokens(&m->cfg);
    if (prompt[0] == '\0')
        return err_set(err, "the prompt is empty; give some text with --prompt");
    size_t text_len = strlen(prompt), fits = tokenizer_max_text_bytes(t, seq_len);
    if (text_len > fits)
        return err_set(err, "the prompt is %zu bytes, more than the %zu that the model's seq_len of %d tokens can "
                       "hold (a token stands for at most %d bytes)", text_len, fits, seq_len,
                       tokenizer_max_piece_bytes(t));
    int *ids = mem_alloc_array(MEM_ACTIVATIONS, text_len + 3, sizeof(int));
    if (!ids)
        return err_set(err, "out of memory for a prompt of %zu bytes", text_len);
    int n_ids;
    if (tokenizer_encode(t, prompt, 1, 0, ids, &n_ids, err)) {
        mem_free(ids);
        return err_prefix(err, "cannot encode the prompt");
    }
    if (n_ids == 0) {
        mem_free(ids);
        return err_set(err, "the prompt encodes to no token (the vocabulary has no token for any of its bytes, and "
                       "the model adds no BOS), so there is nothing to generate from");
    }
    if (n_ids > seq_len) {
        mem_free(ids);
        return err_set(err, "the prompt is %d tokens long; the model's seq_len is %d", n_ids, seq_len);
    }
    g->tokens = mem_alloc_array(MEM_ACTIVATIONS, (size_t)max_tokens, sizeof(int));
    g->entries = mem_alloc_array(MEM_ACTIVATIONS, (size_t)seq_len, sizeof(BatchEntry));
    g->step_seconds = mem_alloc_array(MEM_ACTIVATIONS, (size_t)max_tokens + 1, sizeof(double));
    if (!g->tokens || !g->entries || !g->step_seconds) {
        mem_free(ids);
        generation_free(g);
        return err_set(err, "out of memory");
    }
    memcpy(g->tokens, ids, (size_t)n_ids * sizeof(int));
    mem_free(ids);
    g->n_prompt = g->n_tokens = n_ids;
    g->end_token = -1;
    g->echo_prompt = 1;
    return 0;
}

int generation_init_chat(Generation *g, const Model *m, const Tokenizer *t, const ChatTemplate *chat,
                         const char *message, Err *err)
{
    memset(g, 0, sizeof *g);
    if (message[0] == '\0')
        return err_set(err, "the prompt is empty; give some text with --prompt");
    /* Measured before rendering: a message far too long costs no copy. */
    int seq_len = m->cfg.seq_len;
    size_t overhead = chat_overhead_bytes(chat), fits = tokenizer_max_text_bytes(t, seq_len);
    size_t message_len = strlen(message);
    if (message_len > fits || overhead > fits - message_len)
        return err_set(err, "the prompt is %zu bytes, %zu with the chat template, more than the %zu that the model's "
                       "seq_len of %d tokens can hold (a token stands for at most %d bytes)", message_len,
                       message_len + overhead, fits, seq_len, tokenizer_max_piece_bytes(t));
    char *prompt;
    if (chat_render(chat, message, &prompt, err))
        return -1;
    int rc = generation_init(g, m, t, prompt, err);
    mem_free(prompt);
    if (rc)
        return -1;
    g->end_token = chat_end_token(chat);
    g->echo_prompt = 0;
    return 0;
}

void generation_free(Generation *g)
{
    mem_free(g->tokens);
    mem_free(g->entries);
    mem_free(g->step_seconds);
    memset(g, 0, sizeof *g);
}

/* The batch of one step: positions cached..n_tokens-1; only the last one
 * needs logits, since only its prediction is sampled. */
static int plan_step(Generation *g, int cached)
{
    int n = 0;
    for (int pos = cached; pos < g->n_tokens; pos++, n++)
        g->entries[n] = (BatchEntry){.seq = 0, .pos = pos, .token = g->tokens[pos], .logits_row = -1};
    if (n > 0)
        g->entries[n - 1].logits_row = 0;
    return n;
}

/* Prints the text that token i completes (whole UTF-8 characters only). */
static void print_next(FILE *out, DecodeStream *text, int token)
{
    size_t len;
    const char *piece = decode_stream_push(text, token, &len);
    fwrite(piece, 1, len, out);
}

/* The prompt as text: without its BOS (llama2.c), whole when the tokenizer
 * adds none (SmolLM2); nothing of it with --chat. Starts @p text after the
 * last prompt token that is not printed. */
static int print_prompt(const Generation *g, const Tokenizer *t, FILE *out, DecodeStream *text, Err *err)
{
    int first = g->n_prompt > 0 && t->add_bos && g->tokens[0] == t->bos_id ? 1 : 0;
    if (!g->echo_prompt)
        first = g->n_prompt;
    if (decode_stream_init(text, t, first > 0 ? g->tokens[first - 1] : -1, err))
        return -1;
    for (int i = first; i < g->n_prompt; i++)
        print_next(out, text, g->tokens[i]);
    fflush(out);
    return 0;
}

static int is_end(const Generation *g, const Tokenizer *t, int token)
{
    return tokenizer_is_stop(t, token) || (g->end_token >= 0 && token == g->end_token);
}

/* The steps themselves; @p text is NULL when nothing is printed. */
/* An output (a token or the stop) taken at @p s seconds from the start:
 * what the latency of a single stream is made of (latency.h). */
static void note_output(Generation *g, double s)
{
    if (g->n_outputs++ == 0)
        g->first_output_s = s;
    g->last_output_s = s;
}

static int run_steps(Generation *g, const Model *m, const Tokenizer *t, Sampler *s, ForwardState *fs,
                     const SingleStreamKv *kv, int steps, FILE *out, DecodeStream *text, double start, Err *err)
{
    int max_tokens = model_max_tokens(&m->cfg);
    g->finish = FINISH_LENGTH;
    for (int made = 0; made < steps; made++) {
        if (g->n_tokens >= max_tokens) {
            g->finish = FINISH_SEQ_LEN;
            break;
        }
        double t0 = now_seconds();
        int cached;
        if (kv->prepare(kv->seam.ctx, g->n_tokens, &cached, err))
            return -1;
        int n = plan_step(g, cached);
        if (cached < 0)
            return err_set(err, "the K/V strategy reported %d cached positions", cached);
        if (n == 0)
            return err_set(err, "the step has no tokens to run: the K/V strategy claims all %d positions are cached",
                           g->n_tokens);
        float *logits;
        if (kv->step) {
            if (kv->step(kv->step_ctx, g->entries, n, &logits, err))
                return -1;
        } else {
            if (n > fs->max_tokens)
                return err_set(err, "a step of %d tokens exceeds the activation buffers (%d)", n, fs->max_tokens);
            forward(m, fs, &kv->seam, g->entries, n);
            logits = fs->logits;
        }
        int next = sampler_sample_seq(s, logits, g->tokens, g->n_prompt, g->n_tokens);
        double t1 = now_seconds();
        g->positions_run += n;
        g->step_seconds[g->n_tokens] = t1 - t0;
        note_output(g, t1 - start);
        if (kv->usage) {
            size_t reserved, used;
            kv->usage(kv->seam.ctx, &reserved, &used);
            kv_timeline_record(&g->kv, made, reserved, used);
        }
        if (is_end(g, t, next)) {
            g->finish = FINISH_STOP;
            break;
        }
        g->tokens[g->n_tokens++] = next;
        if (text) {
            print_next(out, text, next);
            fflush(out);
        }
    }
    return 0;
}

int generate(Generation *g, const Model *m, const Tokenizer *t, Sampler *s, ForwardState *fs,
             const SingleStreamKv *kv, int steps, FILE *out, Err *err)
{
    /* The stream's one buffer is allocated here, before the first step. */
    DecodeStream text;
    if (out && print_prompt(g, t, out, &text, err))
        return -1;
    double start = now_seconds();
    int rc = run_steps(g, m, t, s, fs, kv, steps, out, out ? &text : NULL, start, err);
    g->elapsed_s = now_seconds() - start;
    if (out) {
        size_t len;
        decode_stream_finish(&text, &len); /* a character the last token left unfinished */
        if (rc == 0) {
            /* The text ends in whole UTF-8 characters: a character that
             * --steps (or the end of the context) cut off is shown as the
             * replacement character U+FFFD, not as its first bytes. */
            if (len > 0)
                fputs("\xEF\xBF\xBD", out);
            fputc('\n', out);
        }
        fflush(out);
        decode_stream_free(&text);
    }
    return rc;
}
