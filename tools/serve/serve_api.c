/* kvlab-serve's side of the OpenAI API: request bodies in, JSON out.
 * jansson parses and writes; this file only says what each key may hold. */
#include "serve_api.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int serve_error(ServeError *e, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    e->status = status;
    e->type = status == 404 ? "not_found_error" : status == 503 ? "service_unavailable" : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

void serve_params_free(ServeParams *p)
{
    free(p->prompt);
    for (int i = 0; i < p->n_stop; i++)
        free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------ typed values */

/* A key that is absent or null is "not given" (OpenAI's clients send null
 * for parameters left at their default). */
static int given(const json_t *v)
{
    return v && !json_is_null(v);
}

static int get_number(const json_t *v, const char *key, double lo, double hi, float *out, int *has, ServeError *e)
{
    if (!given(v))
        return 0;
    if (!json_is_number(v))
        return serve_error(e, 400, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return serve_error(e, 400, key, "'%s' must be between %g and %g, got %g", key, lo, hi, x);
    *out = (float)x;
    *has = 1;
    return 0;
}

static int get_int(const json_t *v, const char *key, long long lo, long long hi, long long *out, ServeError *e)
{
    if (!given(v))
        return 0;
    if (!json_is_integer(v))
        return serve_error(e, 400, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return serve_error(e, 400, key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(const json_t *v, const char *key, int *out, ServeError *e)
{
    if (!given(v))
        return 0;
    if (!json_is_boolean(v))
        return serve_error(e, 400, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static char *dup_string(const json_t *v)
{
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, json_string_value(v), n);
        s[n] = '\0';
    }
    return s;
}

/* A prompt or a message is text without NUL bytes (the tokenizer reads C strings). */
static int check_text(const json_t *v, const char *key, ServeError *e)
{
    if (strlen(json_string_value(v)) != json_string_length(v))
        return serve_error(e, 400, key, "'%s' holds a NUL character", key);
    return 0;
}

static int get_stop(const json_t *v, ServeParams *p, ServeError *e)
{
    if (!given(v))
        return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0 || check_text(v, "stop", e))
            return json_string_length(v) == 0 ? serve_error(e, 400, "stop", "'stop' strings must not be empty") : -1;
        return (p->stop[p->n_stop++] = dup_string(v)) ? 0 : serve_error(e, 500, NULL, "out of memory");
    }
    if (!json_is_array(v) || json_array_size(v) > SERVE_MAX_STOP)
        return serve_error(e, 400, "stop", "'stop' must be a string or a list of at most %d strings", SERVE_MAX_STOP);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s) || json_string_length(s) == 0)
            return serve_error(e, 400, "stop", "'stop' must be a string or a list of at most %d non-empty strings",
                               SERVE_MAX_STOP);
        if (check_text(s, "stop", e))
            return -1;
        if (!(p->stop[p->n_stop++] = dup_string(s)))
            return serve_error(e, 500, NULL, "out of memory");
    }
    return 0;
}

/* ------------------------------------------------------------ prompts */

static int get_prompt(const json_t *v, ServeParams *p, ServeError *e)
{
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0); /* ["text"]: one prompt, as the clients send a batch of one */
    if (!json_is_string(v))
        return serve_error(e, 400, "prompt", "'prompt' must be a string (token ids and batches of prompts are not "
                                             "supported by kvlab-serve)");
    if (check_text(v, "prompt", e))
        return -1;
    return (p->prompt = dup_string(v)) ? 0 : serve_error(e, 500, NULL, "out of memory");
}

/* A message's content: a string, or a list of {"type": "text", "text": ...} parts. */
static int message_text(const json_t *content, char *buf, size_t *len, ServeError *e)
{
    if (json_is_string(content)) {
        if (check_text(content, "messages", e))
            return -1;
        size_t n = json_string_length(content);
        if (buf)
            memcpy(buf + *len, json_string_value(content), n);
        *len += n;
        return 0;
    }
    if (!json_is_array(content))
        return serve_error(e, 400, "messages", "a message's 'content' must be a string or a list of text parts");
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") != 0 || !json_is_string(text))
            return serve_error(e, 400, "messages", "only text parts are supported in a message's 'content'");
        if (message_text(text, buf, len, e))
            return -1;
    }
    return 0;
}

/* Appends a piece to the rendering (buf NULL: only counts). */
static void put(char *buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    if (buf)
        memcpy(buf + *len, s, n);
    *len += n;
}

/* The conversation in ChatML, as common/model/chat.c renders one user
 * message: the template's default system turn unless the first message is
 * the system's, every turn, then the start of the assistant's. One user
 * message renders byte for byte as chat_render() does. */
static int render_chat(const json_t *messages, const char *system_message, char *buf, size_t *len, ServeError *e)
{
    size_t i;
    json_t *m;
    *len = 0;
    const char *first_role = json_string_value(json_object_get(json_array_get(messages, 0), "role"));
    if (system_message && !(first_role && strcmp(first_role, "system") == 0)) {
        put(buf, len, "<|im_start|>system\n");
        put(buf, len, system_message);
        put(buf, len, "<|im_end|>\n");
    }
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role)
            return serve_error(e, 400, "messages", "each message must be an object with a 'role' and a 'content'");
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "developer"))
            return serve_error(e, 400, "messages", "message role '%.40s' is not supported (system, developer, user, "
                                                   "assistant)", role);
        put(buf, len, "<|im_start|>");
        put(buf, len, strcmp(role, "developer") == 0 ? "system" : role);
        put(buf, len, "\n");
        if (message_text(json_object_get(m, "content"), buf, len, e))
            return -1;
        put(buf, len, "<|im_end|>\n");
    }
    put(buf, len, "<|im_start|>assistant\n");
    return 0;
}

static int get_messages(const json_t *v, const char *system_message, ServeParams *p, ServeError *e)
{
    if (!json_is_array(v) || json_array_size(v) == 0)
        return serve_error(e, 400, "messages", "'messages' must be a non-empty list");
    size_t len;
    if (render_chat(v, system_message, NULL, &len, e))
        return -1;
    if (!(p->prompt = malloc(len + 1)))
        return serve_error(e, 500, NULL, "out of memory");
    render_chat(v, system_message, p->prompt, &len, e);
    p->prompt[len] = '\0';
    return 0;
}

/* ------------------------------------------------------------ the keys */

/* Keys OpenAI defines that kvlab-serve accepts only at their default value
 * (false, null, 1, an empty object): anything else is refused by name. */
static int refuse_unsupported(const char *key, const json_t *v, ServeError *e)
{
    int at_default = !given(v) || json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 1 &&
                                                        strcmp(key, "best_of") == 0) ||
                     (json_is_object(v) && json_object_size(v) == 0) || (json_is_array(v) && json_array_size(v) == 0);
    if (at_default)
        return 0;
    return serve_error(e, 400, key, "'%s' is not supported by kvlab-serve", key);
}

static int is_one_of(const char *key, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(key, list[i]) == 0)
            return 1;
    return 0;
}

static const char *const IGNORED[] = {"user", "metadata", "store", "service_tier", "parallel_tool_calls", NULL};
static const char *const UNSUPPORTED[] = {"logprobs", "top_logprobs", "echo", "suffix", "best_of", "logit_bias",
                                          "tools", "tool_choice", "functions", "function_call", "response_format",
                                          "modalities", "audio", "prediction", "reasoning_effort",
                                          "web_search_options", NULL};

static int parse_key(const char *key, json_t *v, ServeKind kind, const char *system_message, ServeParams *p,
                     ServeError *e)
{
    long long x = 0;
    if (strcmp(key, "model") == 0 || is_one_of(key, IGNORED))
        return 0; /* model: checked by the caller */
    if (kind == SERVE_COMPLETION && strcmp(key, "prompt") == 0)
        return get_prompt(v, p, e);
    if (kind == SERVE_CHAT && strcmp(key, "messages") == 0)
        return get_messages(v, system_message, p, e);
    if (strcmp(key, "max_tokens") == 0 || (kind == SERVE_CHAT && strcmp(key, "max_completion_tokens") == 0)) {
        x = p->max_tokens;
        if (get_int(v, key, 1, 1 << 30, &x, e))
            return -1;
        p->max_tokens = (int)x;
        return 0;
    }
    if (strcmp(key, "temperature") == 0)
        return get_number(v, key, 0.0, 2.0, &p->temperature, &p->has_temperature, e);
    if (strcmp(key, "top_p") == 0) {
        if (get_number(v, key, 0.0, 1.0, &p->top_p, &p->has_top_p, e))
            return -1;
        return p->has_top_p && p->top_p <= 0.0f ? serve_error(e, 400, key, "'top_p' must be in (0, 1]") : 0;
    }
    if (strcmp(key, "presence_penalty") == 0)
        return get_number(v, key, -2.0, 2.0, &p->presence_penalty, &p->has_presence, e);
    if (strcmp(key, "frequency_penalty") == 0)
        return get_number(v, key, -2.0, 2.0, &p->frequency_penalty, &p->has_frequency, e);
    if (strcmp(key, "n") == 0) {
        x = p->n;
        if (get_int(v, key, 1, SERVE_MAX_N, &x, e))
            return -1;
        p->n = (int)x;
        return 0;
    }
    if (strcmp(key, "seed") == 0) {
        p->has_seed = given(v);
        return get_int(v, key, -(1LL << 62), 1LL << 62, &p->seed, e);
    }
    if (strcmp(key, "stop") == 0)
        return get_stop(v, p, e);
    if (strcmp(key, "stream") == 0)
        return get_bool(v, key, &p->stream, e);
    if (strcmp(key, "return_token_ids") == 0)
        return get_bool(v, key, &p->return_token_ids, e);
    if (strcmp(key, "stream_options") == 0) {
        if (!given(v))
            return 0;
        json_t *usage = json_object_get(v, "include_usage");
        if (!json_is_object(v) || json_object_size(v) != (usage ? 1u : 0u))
            return serve_error(e, 400, key, "'stream_options' may hold only 'include_usage'");
        return get_bool(usage, "stream_options.include_usage", &p->include_usage, e);
    }
    if (is_one_of(key, UNSUPPORTED))
        return refuse_unsupported(key, v, e);
    return serve_error(e, 400, key, "Unrecognized request argument supplied: %.60s", key);
}

int serve_parse_request(const char *body, size_t len, ServeKind kind, const char *model_name,
                        const char *system_message, ServeParams *out, ServeError *e)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->n = 1;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return serve_error(e, 400, NULL, "the body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                           jerr.column);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = serve_error(e, 400, NULL, "the body must be a JSON object");
    } else {
        json_t *model = json_object_get(root, "model");
        if (given(model) && !json_is_string(model))
            rc = serve_error(e, 400, "model", "'model' must be a string");
        else if (given(model) && strcmp(json_string_value(model), model_name) != 0)
            rc = serve_error(e, 404, "model", "The model `%.80s` does not exist (this server serves `%.80s`)",
                             json_string_value(model), model_name);
        const char *key;
        json_t *v;
        json_object_foreach(root, key, v) {
            if (rc == 0)
                rc = parse_key(key, v, kind, system_message, out, e);
        }
        if (rc == 0 && !out->prompt)
            rc = kind == SERVE_CHAT ? serve_error(e, 400, "messages", "'messages' is required")
                                    : serve_error(e, 400, "prompt", "'prompt' is required");
        if (rc == 0 && out->include_usage && !out->stream)
            rc = serve_error(e, 400, "stream_options", "'stream_options' is only allowed with 'stream': true");
    }
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------ responses */

/* json_dumps, then the reference dropped: every builder ends here. */
static char *finish_json(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}


/* Text for a JSON string: the model's bytes, with any byte that is not
 * part of valid UTF-8 (a token may end inside a character) replaced by
 * U+FFFD, as JSON needs. */
static json_t *json_text(const char *text, size_t len)
{
    json_t *s = json_stringn(text, len);
    if (s)
        return s;
    char *clean = malloc(3 * len + 1);
    size_t n = 0;
    for (size_t i = 0; clean && i < len;) {
        json_t *one = NULL;
        unsigned char b = (unsigned char)text[i];
        size_t take = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1; /* the character's bytes, by its lead byte */
        if (i + take <= len && (one = json_stringn(text + i, take))) {
            memcpy(clean + n, text + i, take);
            n += take;
            i += take;
        } else {
            memcpy(clean + n, "\xEF\xBF\xBD", 3);
            n += 3;
            i++;
        }
        json_decref(one);
    }
    s = clean ? json_stringn(clean, n) : NULL;
    free(clean);
    return s;
}

/* The message may quote the body (a key, jansson's reason) and be cut
 * inside a character: json_text() keeps it valid UTF-8. */
char *serve_error_json(const ServeError *e)
{
    json_t *err = json_pack("{s:o, s:s, s:o, s:i}", "message", json_text(e->message, strlen(e->message)), "type",
                            e->type, "param", e->param[0] ? json_text(e->param, strlen(e->param)) : json_null(),
                            "code", e->status);
    return finish_json(json_pack("{s:o}", "error", err));
}

static json_t *usage_object(const ServeResponseHead *h)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", h->prompt_tokens, "completion_tokens", h->completion_tokens,
                     "total_tokens", h->prompt_tokens + h->completion_tokens);
}

static json_t *token_ids(const ServeChoiceView *c)
{
    json_t *a = json_array();
    for (int i = 0; a && i < c->n_token_ids; i++)
        json_array_append_new(a, json_integer(c->token_ids[i]));
    return a;
}

static json_t *head_object(const ServeResponseHead *h, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", h->id, "object", object, "created", (json_int_t)h->created,
                     "model", h->model);
}

static json_t *choice_object(const ServeResponseHead *h, int index, const ServeChoiceView *c)
{
    json_t *text = json_text(c->text, c->len);
    json_t *o = h->kind == SERVE_CHAT
                    ? json_pack("{s:i, s:{s:s, s:o}, s:n, s:s?}", "index", index, "message", "role", "assistant",
                                "content", text, "logprobs", "finish_reason", c->finish)
                    : json_pack("{s:i, s:o, s:n, s:s?}", "index", index, "text", text, "logprobs", "finish_reason",
                                c->finish);
    if (o && c->token_ids)
        json_object_set_new(o, "token_ids", token_ids(c));
    return o;
}

char *serve_response_json(const ServeResponseHead *h, const ServeChoiceView *choices, int n)
{
    json_t *o = head_object(h, h->kind == SERVE_CHAT ? "chat.completion" : "text_completion");
    json_t *list = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(list, choice_object(h, i, &choices[i]));
    json_object_set_new(o, "choices", list);
    json_object_set_new(o, "usage", usage_object(h));
    return finish_json(o);
}

char *serve_chunk_json(const ServeResponseHead *h, int index, const ServeChoiceView *c, int first)
{
    json_t *choice;
    if (h->kind == SERVE_CHAT) {
        json_t *delta = json_object();
        if (first)
            json_object_set_new(delta, "role", json_stringn("assistant", 9)); /* not json_string(): kvlab's JSON
                                                                                writer (json.h) has that name */
        if (c->len > 0 || (first && !c->finish))
            json_object_set_new(delta, "content", json_text(c->text, c->len));
        choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", index, "delta", delta, "logprobs", "finish_reason",
                           c->finish);
    } else {
        choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", index, "text", json_text(c->text, c->len),
                           "logprobs", "finish_reason", c->finish);
    }
    if (choice && c->token_ids)
        json_object_set_new(choice, "token_ids", token_ids(c));
    json_t *o = head_object(h, h->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    return finish_json(o);
}

char *serve_usage_chunk_json(const ServeResponseHead *h)
{
    json_t *o = head_object(h, h->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_object(h));
    return finish_json(o);
}

char *serve_models_json(const char *model, long long created, int max_model_len)
{
    return finish_json(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i}]}", "object", "list", "data", "id", model,
                                 "object", "model", "created", (json_int_t)created, "owned_by", "kvlab",
                                 "max_model_len", max_model_len));
}
