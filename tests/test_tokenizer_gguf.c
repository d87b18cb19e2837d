/* The tokenizer of a GGUF file: SmolLM2-135M-Instruct's ids against golden
 * files made with Hugging Face `tokenizers` (tests/data/README.md), its
 * ChatML prompts against the file's template rendered by Jinja2, random
 * texts against a plain reference written here on the file's own strings,
 * round trips, streaming decode, long prompts, and tokenizer metadata that
 * must be refused in one line. The SmolLM2 tests print SKIP without
 * ../shared/models. */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assets.h"
#include "chat.h"
#include "gguf.h"
#include "gguf_write.h"
#include "helpers.h"
#include "mem.h"
#include "suites.h"
#include "tokenizer.h"

#define SMOLLM2 "SmolLM2-135M-Instruct.Q4_1.gguf"

/* The file and its tokenizer, opened once per test. */
typedef struct {
    GgufFile file;
    Tokenizer t;
} Smollm2;

static int open_smollm2(Smollm2 *s, const char *test)
{
    const char *path = test_shared_file(SMOLLM2);
    if (!path) {
        test_skip(test, TEST_NOT_FOUND(SMOLLM2));
        return -1;
    }
    Err err = {{0}};
    ck_assert_msg(gguf_open(&s->file, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_open_gguf(&s->t, &s->file, &err) == 0, "%s", err.msg);
    return 0;
}

static void close_smollm2(Smollm2 *s)
{
    tokenizer_free(&s->t);
    gguf_close(&s->file);
}

static int *encode(const Tokenizer *t, const char *text, int *n)
{
    int *ids = malloc((strlen(text) + 3) * sizeof(int));
    Err err = {{0}};
    ck_assert_msg(tokenizer_encode(t, text, 1, 0, ids, n, &err) == 0, "'%s': %s", text, err.msg);
    return ids;
}

/* decode(ids) as one byte string, through the stream as a printer would. */
static char *decode_all(const Tokenizer *t, const int *ids, int n, size_t *len)
{
    DecodeStream s;
    Err err = {{0}};
    ck_assert(decode_stream_init(&s, t, -1, &err) == 0);
    size_t cap = 16;
    for (int i = 0; i < n; i++)
        cap += (size_t)tokenizer_max_piece_bytes(t);
    char *out = malloc(cap);
    size_t at = 0, k;
    for (int i = 0; i < n; i++) {
        const char *text = decode_stream_push(&s, ids[i], &k);
        memcpy(out + at, text, k);
        at += k;
    }
    const char *rest = decode_stream_finish(&s, &k);
    memcpy(out + at, rest, k);
    at += k;
    out[at] = '\0';
    decode_stream_free(&s);
    *len = at;
    return out;
}

/* ------------------------------------------------------------ golden files */

/* One row of a golden file: tab-separated fields (empty ones kept). */
#define MAX_FIELDS 4
typedef struct {
    char *field[MAX_FIELDS];
    int n;
} Row;

static int next_row(char **cursor, Row *row)
{
    while (**cursor == '#') /* comment lines */
        *cursor = strchr(*cursor, '\n') ? strchr(*cursor, '\n') + 1 : *cursor + strlen(*cursor);
    if (**cursor == '\0')
        return 0;
    char *line = *cursor, *end = strchr(line, '\n');
    ck_assert_msg(end != NULL, "a golden line lacks its newline");
    *end = '\0';
    *cursor = end + 1;
    row->n = 0;
    for (char *f = line;; row->n++) {
        ck_assert_int_lt(row->n, MAX_FIELDS);
        row->field[row->n] = f;
        char *tab = strchr(f, '\t');
        if (!tab) {
            row->n++;
            break;
        }
        *tab = '\0';
        f = tab + 1;
    }
    return 1;
}

/* Hex to bytes, NUL-terminated; returns the byte count. */
static size_t unhex(const char *hex, char *out)
{
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        ck_assert(sscanf(hex + 2 * i, "%2x", &v) == 1);
        out[i] = (char)v;
    }
    out[n] = '\0';
    return n;
}

static int parse_ids(const char *text, int *out, int max)
{
    int n = 0;
    for (const char *p = text; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        ck_assert_msg(end != p && n < max, "bad id list '%s'", text);
        out[n++] = (int)v;
        p = *end == ' ' ? end + 1 : end;
    }
    return n;
}

static char *slurp_golden(const char *relpath)
{
    char path[PATH_MAX];
    ck_assert_msg(assets_find_project_file(relpath, path, sizeof path) == 0, "%s is missing", relpath);
    return test_slurp(path);
}

static void expect_ids(const char *name, const int *got, int n, const int *want, int n_want)
{
    ck_assert_msg(n == n_want, "%s: %d ids, the golden has %d", name, n, n_want);
    for (int i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "%s: id %d is %d, the golden has %d", name, i, got[i], want[i]);
}

START_TEST(smollm2_ids_match_hugging_face)
{
    Smollm2 s;
    if (open_smollm2(&s, "smollm2_ids_match_hugging_face"))
        return;
    char *golden = slurp_golden("tests/data/smollm2-tokens.tsv"), *cursor = golden;
    Row row;
    int rows = 0, round_trips = 0;
    static char text[4096], back[4096];
    static int want[4096];
    while (next_row(&cursor, &row)) {
        ck_assert_int_eq(row.n, 4);
        const char *name = row.field[0];
        unhex(row.field[1], text);
        size_t back_len = unhex(row.field[3], back);
        int n_want = parse_ids(row.field[2], want, 4096), n;
        int *ids = encode(&s.t, text, &n);
        expect_ids(name, ids, n, want, n_want);
        size_t len;
        char *decoded = decode_all(&s.t, ids, n, &len);
        ck_assert_msg(len == back_len && memcmp(decoded, back, len) == 0, "%s: decodes to '%s', Hugging Face to '%s'",
                      name, decoded, back);
        /* Round trip, unless the text has bytes without a token (dropped). */
        if (strcmp(back, text) == 0)
            round_trips++;
        else
            ck_assert_msg(strcmp(name, "bytes_without_token") == 0, "%s does not come back as it was", name);
        free(decoded);
        free(ids);
        rows++;
    }
    ck_assert_msg(rows >= 30, "only %d golden texts", rows);
    ck_assert_int_eq(round_trips, rows - 1);
    free(golden);
    close_smollm2(&s);
}
END_TEST

START_TEST(smollm2_chat_prompts_match_the_template)
{
    Smollm2 s;
    if (open_smollm2(&s, "smollm2_chat_prompts_match_the_template"))
        return;
    ChatTemplate chat;
    Err err = {{0}};
    ck_assert_msg(chat_template_open(&chat, &s.t, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(chat.system_message, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    ck_assert_int_eq(chat.im_start, 1);
    ck_assert_int_eq(chat_end_token(&chat), 2);
    ck_assert(tokenizer_is_stop(&s.t, chat_end_token(&chat)));
    char *golden = slurp_golden("tests/data/smollm2-chat.tsv"), *cursor = golden;
    Row row;
    static char user[4096], rendered[8192];
    static int want[4096];
    int rows = 0;
    while (next_row(&cursor, &row)) {
        ck_assert_int_eq(row.n, 4);
        const char *name = row.field[0];
        unhex(row.field[1], user);
        unhex(row.field[2], rendered);
        char *prompt;
        ck_assert(chat_render(&chat, user, &prompt, &err) == 0);
        ck_assert_msg(strcmp(prompt, rendered) == 0, "%s: rendered\n%s\nJinja2 rendered\n%s", name, prompt, rendered);
        ck_assert_uint_eq(strlen(prompt), strlen(user) + chat_overhead_bytes(&chat));
        int n;
        int *ids = encode(&s.t, prompt, &n);
        expect_ids(name, ids, n, want, parse_ids(row.field[3], want, 4096));
        /* The README's fact: the France question is 37 prompt tokens. */
        if (strcmp(name, "france") == 0)
            ck_assert_int_eq(n, 37);
        free(ids);
        mem_free(prompt);
        rows++;
    }
    ck_assert_int_ge(rows, 5);
    free(golden);
    chat_template_close(&chat);
    close_smollm2(&s);
}
END_TEST

START_TEST(smollm2_published_facts)
{
    Smollm2 s;
    if (open_smollm2(&s, "smollm2_published_facts"))
        return;
    int n;
    int *ids = encode(&s.t, "Once upon a time", &n); /* no BOS: add_bos_token is false */
    expect_ids("Once upon a time", ids, n, (const int[]){6403, 1980, 253, 655}, 4);
    free(ids);
    size_t len;
    char *text = decode_all(&s.t, (const int[]){504, 3575, 282, 4649, 314, 7042, 30}, 7, &len);
    ck_assert_str_eq(text, "The capital of France is Paris.");
    free(text);
    ck_assert_int_eq(s.t.vocab_size, 49152);
    ck_assert_int_eq(s.t.bos_id, 1);
    ck_assert_int_eq(s.t.eos_id, 2);
    ck_assert_int_eq(s.t.add_bos, 0);
    /* Its longest token stands for 81 bytes (id 46778), so no text of more
     * than 81 x seq_len bytes fits seq_len tokens. */
    ck_assert_int_eq(tokenizer_max_piece_bytes(&s.t), 81);
    ck_assert_int_eq(s.t.piece_len[46778], 81);
    ck_assert_uint_eq(tokenizer_max_text_bytes(&s.t, 8192), 81 * 8192);
    close_smollm2(&s);
}
END_TEST

/* 😀 is two tokens, " \xF0\x9F\x98" and "\x80": the stream prints the
 * space first and the emoji only when its last byte comes. */
START_TEST(smollm2_stream_waits_for_whole_characters)
{
    Smollm2 s;
    if (open_smollm2(&s, "smollm2_stream_waits_for_whole_characters"))
        return;
    int n;
    int *ids = encode(&s.t, " \xf0\x9f\x98\x80", &n);
    expect_ids("space emoji", ids, n, (const int[]){40303, 218}, 2);
    DecodeStream st;
    Err err = {{0}};
    ck_assert(decode_stream_init(&st, &s.t, -1, &err) == 0);
    size_t len;
    const char *out = decode_stream_push(&st, ids[0], &len);
    ck_assert(len == 1 && out[0] == ' ');
    out = decode_stream_push(&st, ids[1], &len);
    ck_assert(len == 4 && memcmp(out, "\xf0\x9f\x98\x80", 4) == 0);
    decode_stream_free(&st);
    free(ids);
    close_smollm2(&s);
}
END_TEST

/* ------------------------------------------------------------ an independent reference */

/* Byte-level BPE written from its definition, on the file's own strings:
 * control tokens split off (leftmost, longest), pieces from the
 * pre-tokenizer, each piece's bytes as GPT-2 characters, then the merge of
 * lowest rank (leftmost on ties) found by scanning the pairs, until none is
 * left; the ids are looked up by string at the end. */
typedef struct {
    const char *s;
    size_t len;
    int value; /* token id or merge rank */
} Entry;

static int compare_entry(const void *a, const void *b)
{
    const Entry *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static Entry *sorted_strings(const GgufFile *f, const char *key, uint64_t *count)
{
    const GgufKv *kv;
    Err err = {{0}};
    ck_assert(gguf_get_array(f, key, GGUF_STRING, count, &kv, &err) == 0);
    Entry *e = malloc(*count * sizeof *e);
    for (uint64_t i = 0; i < *count; i++) {
        GgufString s = gguf_array_string(kv, i);
        e[i] = (Entry){s.data, (size_t)s.len, (int)i};
    }
    qsort(e, *count, sizeof *e, compare_entry);
    return e;
}

static int find_entry(const Entry *e, uint64_t n, const char *s, size_t len)
{
    Entry key = {s, len, 0};
    const Entry *hit = bsearch(&key, e, n, sizeof *e, compare_entry);
    return hit ? hit->value : -1;
}

typedef struct {
    const Entry *vocab, *merges;
    uint64_t n_vocab, n_merges;
    int *out;
    int n;
} Reference;

#define MAX_SYMBOL 256
static int reference_piece(void *ctx, const char *piece, size_t len, Err *err)
{
    (void)err;
    Reference *r = ctx;
    char (*sym)[MAX_SYMBOL] = malloc(len * MAX_SYMBOL);
    int n = 0;
    for (size_t i = 0; i < len; i++) {
        int b = (unsigned char)piece[i], k = 0;
        for (int x = 0; x < b; x++)
            k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174));
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        int cp = keep ? b : 256 + k;
        char c[3] = {(char)cp, 0, 0};
        if (cp >= 0x80) {
            c[0] = (char)(0xC0 | (cp >> 6));
            c[1] = (char)(0x80 | (cp & 0x3F));
        }
        if (find_entry(r->vocab, r->n_vocab, c, strlen(c)) >= 0) /* a byte without a token is dropped */
            snprintf(sym[n++], MAX_SYMBOL, "%s", c);
    }
    for (;;) {
        int best = -1, best_rank = INT_MAX;
        for (int i = 0; i + 1 < n; i++) {
            char pair[2 * MAX_SYMBOL + 1];
            snprintf(pair, sizeof pair, "%s %s", sym[i], sym[i + 1]);
            int rank = find_entry(r->merges, r->n_merges, pair, strlen(pair));
            if (rank >= 0 && rank < best_rank) {
                best = i;
                best_rank = rank;
            }
        }
        if (best < 0)
            break;
        size_t left = strlen(sym[best]), right = strlen(sym[best + 1]);
        ck_assert_uint_lt(left + right, MAX_SYMBOL);
        memcpy(sym[best] + left, sym[best + 1], right + 1);
        memmove(sym[best + 1], sym[best + 2], (size_t)(n - best - 2) * MAX_SYMBOL);
        n--;
    }
    for (int i = 0; i < n; i++) {
        r->out[r->n] = find_entry(r->vocab, r->n_vocab, sym[i], strlen(sym[i]));
        ck_assert_msg(r->out[r->n] >= 0, "the reference merged into '%s', which is not a token", sym[i]);
        r->n++;
    }
    free(sym);
    return 0;
}

/* The control tokens the random texts below can contain (and one more). */
static const char *const CONTROL_TEXTS[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>"};

static int reference_encode(Reference *r, const Tokenizer *t, const char *text, int *out)
{
    r->out = out;
    r->n = 0;
    Err err = {{0}};
    size_t len = strlen(text), start = 0;
    for (size_t at = 0; at <= len; at++) {
        int control = -1;
        size_t clen = 0;
        for (size_t c = 0; at < len && c < sizeof CONTROL_TEXTS / sizeof CONTROL_TEXTS[0]; c++) {
            size_t n = strlen(CONTROL_TEXTS[c]);
            if (strncmp(text + at, CONTROL_TEXTS[c], n) == 0 && n > clen) {
                control = find_entry(r->vocab, r->n_vocab, CONTROL_TEXTS[c], n);
                clen = n;
            }
        }
        if (control < 0 && at < len)
            continue;
        ck_assert(bpe_pretok_split(t->bpe->pretok, text + start, at - start, reference_piece, r, &err) == 0);
        if (control >= 0)
            out[r->n++] = control;
        at += clen ? clen - 1 : 0;
        start = at + 1;
    }
    return r->n;
}

static void random_text(char *out, size_t max, unsigned *seed)
{
    static const char *const UNITS[] = {
        "a", "e", "t", "h", "the", " the", "ing", "er", "s", " ", "  ", "\n", "\n\n", "\t", "1", "23", "'s", "'t",
        "'", ".", ",", "!", "?", "...", "-", "(", ")", "\xc3\xa9", "\xc3\xbc", "\xe6\x97\xa5", "\xe6\x9c\xac",
        "\xf0\x9f\x98\x80", "\xe2\x80\x99", "<|im_start|>", "<|im_end|>", "<|im", "|>", "<", "Hello", "World",
        "\xc2\xa0", "\r\n", "http://", "x", "Q", "\xd0\x9f", "\xce\xb1", "\x07", "\x04"};
    size_t n = 0;
    int count = (int)(rand_r(seed) % 80);
    for (int i = 0; i < count; i++) {
        const char *u = UNITS[rand_r(seed) % (sizeof UNITS / sizeof UNITS[0])];
        if (n + strlen(u) + 1 > max)
            break;
        memcpy(out + n, u, strlen(u));
        n += strlen(u);
    }
    out[n] = '\0';
}

START_TEST(smollm2_matches_a_plain_reference)
{
    Smollm2 s;
    if (open_smollm2(&s, "smollm2_matches_a_plain_reference"))
        return;
    Reference r;
    Entry *vocab = sorted_strings(&s.file, "tokenizer.ggml.tokens", &r.n_vocab);
    Entry *merges = sorted_strings(&s.file, "tokenizer.ggml.merges", &r.n_merges);
    r.vocab = vocab;
    r.merges = merges;
    unsigned seed = 77;
    static char text[1024];
    static int want[1100];
    for (int trial = 0; trial < 400; trial++) {
        random_text(text, sizeof text, &seed);
        int n, n_want = reference_encode(&r, &s.t, text, want);
        int *ids = encode(&s.t, text, &n);
        char name[64];
        snprintf(name, sizeof name, "random text %d", trial);
        expect_ids(name, ids, n, want, n_want);
        /* Round trip, but for \x04 (no token: dropped). */
        if (!strchr(text, '\x04')) {
            size_t len;
            char *back = decode_all(&s.t, ids, n, &len);
            ck_assert_msg(len == strlen(text) && strcmp(back, text) == 0, "%s did not come back", name);
            free(back);
        }
        free(ids);
    }
    free(vocab);
    free(merges);
    close_smollm2(&s);
}
END_TEST

/* Any bytes that all have a token, valid UTF-8 or not, come back exactly. */
START_TEST(smollm2_round_trips_random_bytes)
{
    Smollm2 s;
    if (open_smollm2(&s, "smollm2_round_trips_random_bytes"))
        return;
    unsigned seed = 5;
    char text[300];
    for (int trial = 0; trial < 500; trial++) {
        size_t n = rand_r(&seed) % 299;
        for (size_t i = 0; i < n; i++) {
            int b;
            do
                b = (int)(rand_r(&seed) % 256);
            while (b == 0 || s.t.bpe->byte_token[b] < 0);
            text[i] = (char)b;
        }
        text[n] = '\0';
        int k;
        int *ids = encode(&s.t, text, &k);
        size_t len;
        char *back = decode_all(&s.t, ids, k, &len);
        ck_assert_msg(len == n && memcmp(back, text, n) == 0, "trial %d: %zu random bytes did not come back", trial,
                      n);
        free(back);
        free(ids);
    }
    close_smollm2(&s);
}
END_TEST

/* Not a benchmark: a hang guard (see tests/test_tokenizer.c). */
START_TEST(smollm2_long_prompts_finish)
{
    Smollm2 s;
    if (open_smollm2(&s, "smollm2_long_prompts_finish"))
        return;
    size_t len = 200 * 1000;
    char *text = malloc(len + 1);
    static const char STORY[] = "Once upon a time, in 2024, there were 3 cats.  They said: \"it's fine!!!\"\n";
    for (int kind = 0; kind < 4; kind++) {
        for (size_t i = 0; i < len; i++)
            text[i] = kind == 0 ? STORY[i % (sizeof STORY - 1)] : "a! 7"[kind - 1];
        text[len] = '\0';
        int n;
        int *ids = encode(&s.t, text, &n);
        ck_assert_msg(n > 0 && n <= (int)len, "kind %d: %d ids", kind, n);
        free(ids);
    }
    free(text);
    close_smollm2(&s);
}
END_TEST

/* ------------------------------------------------------------ refused metadata */

/* A small gpt2 tokenizer in GGUF form, with one thing changed by @p breakage. */
typedef enum {
    KEEP, NO_MODEL, MODEL_LLAMA, NO_PRE, PRE_UNKNOWN, TOKENS_NOT_STRINGS, NO_MERGES, MERGE_UNKNOWN,
    TYPES_SHORT, TYPES_NOT_I32, BOS_OUT_OF_RANGE, ADD_BOS_NOT_BOOL, TEMPLATE_NOT_STRING
} Breakage;

static void write_tokenizer_gguf(Breakage breakage, void **image, size_t *bytes)
{
    static const char *const TOKENS[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "ab", "Ġ"};
    static const int32_t TYPES[] = {3, 3, 3, 1, 1, 1, 1};
    const char *merges[] = {breakage == MERGE_UNKNOWN ? "a c" : "a b"};
    GgufWriter w;
    gguf_writer_init(&w);
    if (breakage != NO_MODEL)
        gguf_writer_string(&w, "tokenizer.ggml.model", breakage == MODEL_LLAMA ? "llama" : "gpt2");
    if (breakage != NO_PRE)
        gguf_writer_string(&w, "tokenizer.ggml.pre", breakage == PRE_UNKNOWN ? "deepseek" : "smollm");
    if (breakage == TOKENS_NOT_STRINGS)
        gguf_writer_array32(&w, "tokenizer.ggml.tokens", GGUF_I32, TYPES, 7);
    else
        gguf_writer_string_array(&w, "tokenizer.ggml.tokens", TOKENS, 7);
    if (breakage == TYPES_NOT_I32)
        gguf_writer_string_array(&w, "tokenizer.ggml.token_type", TOKENS, 7);
    else
        gguf_writer_array32(&w, "tokenizer.ggml.token_type", GGUF_I32, TYPES, breakage == TYPES_SHORT ? 6 : 7);
    if (breakage != NO_MERGES)
        gguf_writer_string_array(&w, "tokenizer.ggml.merges", merges, 1);
    gguf_writer_u32(&w, "tokenizer.ggml.bos_token_id", breakage == BOS_OUT_OF_RANGE ? 7 : 1);
    gguf_writer_u32(&w, "tokenizer.ggml.eos_token_id", 2);
    if (breakage == ADD_BOS_NOT_BOOL)
        gguf_writer_u32(&w, "tokenizer.ggml.add_bos_token", 1);
    else
        gguf_writer_bool(&w, "tokenizer.ggml.add_bos_token", 0);
    if (breakage == TEMPLATE_NOT_STRING)
        gguf_writer_u32(&w, "tokenizer.chat_template", 5);
    else
        gguf_writer_string(&w, "tokenizer.chat_template", "{{ '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}");
    Err err = {{0}};
    ck_assert_msg(gguf_writer_finish(&w, image, bytes, &err) == 0, "%s", err.msg);
    gguf_writer_free(&w);
}

static int open_written(Breakage breakage, Tokenizer *t, Err *err)
{
    void *image;
    size_t bytes;
    write_tokenizer_gguf(breakage, &image, &bytes);
    GgufFile f;
    ck_assert_msg(gguf_parse_image(&f, image, bytes, err) == 0, "%s", err->msg);
    int rc = tokenizer_open_gguf(t, &f, err);
    gguf_close(&f);
    mem_free(image);
    return rc;
}

START_TEST(small_gguf_tokenizer_works)
{
    Tokenizer t;
    Err err = {{0}};
    ck_assert_msg(open_written(KEEP, &t, &err) == 0, "%s", err.msg);
    int n;
    int *ids = encode(&t, "<|im_start|>ab a", &n);
    expect_ids("small", ids, n, (const int[]){1, 5, 6, 3}, 4);
    free(ids);
    /* The escaped \n of the template's literal counts as its newline. */
    ChatTemplate chat;
    ck_assert_msg(chat_template_open(&chat, &t, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(chat.system_message, "Be brief.");
    chat_template_close(&chat);
    tokenizer_free(&t);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

START_TEST(bad_tokenizer_metadata_is_refused)
{
    static const struct {
        Breakage breakage;
        const char *word;
    } CASES[] = {
        {NO_MODEL, "tokenizer.ggml.model"},
        {MODEL_LLAMA, "tokenizer.ggml.model 'llama' is not supported"},
        {NO_PRE, "tokenizer.ggml.pre"},
        {PRE_UNKNOWN, "pre-tokenizer 'deepseek' is not supported"},
        {TOKENS_NOT_STRINGS, "tokenizer.ggml.tokens"},
        {NO_MERGES, "tokenizer.ggml.merges"},
        {MERGE_UNKNOWN, "merge 0 'a c' names a token that is not in the vocabulary"},
        {TYPES_SHORT, "tokenizer.ggml.token_type has 6 entries for 7 tokens"},
        {TYPES_NOT_I32, "tokenizer.ggml.token_type"},
        {BOS_OUT_OF_RANGE, "BOS token id 7 is outside the vocabulary of 7"},
        {ADD_BOS_NOT_BOOL, "tokenizer.ggml.add_bos_token"},
        {TEMPLATE_NOT_STRING, "tokenizer.chat_template"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        long live = mem_live_buffers();
        Tokenizer t;
        Err err = {{0}};
        ck_assert_msg(open_written(CASES[i].breakage, &t, &err) == -1, "case %zu (%s) was accepted", i, CASES[i].word);
        ck_assert_msg(strstr(err.msg, CASES[i].word), "case %zu: '%s' lacks '%s'", i, err.msg, CASES[i].word);
        ck_assert_msg(!strchr(err.msg, '\n'), "case %zu: not one line: '%s'", i, err.msg);
        ck_assert_msg(mem_live_buffers() == live, "case %zu leaked %ld buffers", i, mem_live_buffers() - live);
    }
}
END_TEST

Suite *suite_tokenizer_gguf(void)
{
    Suite *s = suite_create("tokenizer_gguf");
    TCase *tc = tcase_create("tokenizer_gguf");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, smollm2_ids_match_hugging_face);
    tcase_add_test(tc, smollm2_chat_prompts_match_the_template);
    tcase_add_test(tc, smollm2_published_facts);
    tcase_add_test(tc, smollm2_stream_waits_for_whole_characters);
    tcase_add_test(tc, smollm2_matches_a_plain_reference);
    tcase_add_test(tc, smollm2_round_trips_random_bytes);
    tcase_add_test(tc, smollm2_long_prompts_finish);
    tcase_add_test(tc, small_gguf_tokenizer_works);
    tcase_add_test(tc, bad_tokenizer_metadata_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(tokenizer_gguf)
