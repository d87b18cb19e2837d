/* Byte-level BPE on a small hand-made vocabulary, with no model file: the
 * priority-queue merge against a plain scan on random sequences, merges by
 * rank (the leftmost on equal ranks), the pre-tokenizer's pieces, control
 * tokens, invalid UTF-8, bytes without a token, the byte-to-unicode table,
 * vocabularies that must be refused, and the streaming decoder. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "bpe_merge.h"
#include "bpe_pretok.h"
#include "mem.h"
#include "suites.h"
#include "tokenizer.h"

/* ------------------------------------------------------------ merge_tokens against a scan */

/* A random pair rule over ids 0..N_SYMBOLS-1: table[a][b] is the merge of
 * (a, b), or key < 0 for none. Keys repeat on purpose (ties), and merged
 * ids stay in the alphabet so that merges chain. */
#define N_SYMBOLS 6
typedef struct {
    PairMerge table[N_SYMBOLS][N_SYMBOLS];
} RandomRule;

static int random_rule_merge(const void *ctx, int left, int right, PairMerge *out)
{
    const RandomRule *r = ctx;
    if (r->table[left][right].key < 0)
        return 0;
    *out = r->table[left][right];
    return 1;
}

/* The definition: merge the pair of lowest key, the leftmost on ties, until none merges. */
static int scan_merge(int *ids, int n, PairMergeFn merge, const void *ctx)
{
    for (;;) {
        int best = -1;
        PairMerge best_m = {0}, m;
        for (int i = 0; i + 1 < n; i++)
            if (merge(ctx, ids[i], ids[i + 1], &m) && (best < 0 || m.key < best_m.key)) {
                best = i;
                best_m = m;
            }
        if (best < 0)
            return n;
        ids[best] = best_m.merged_id;
        memmove(&ids[best + 1], &ids[best + 2], (size_t)(n - best - 2) * sizeof(int));
        n--;
    }
}

START_TEST(merge_matches_the_scan_on_random_sequences)
{
    srand(12345);
    MergeWork work = {0};
    Err err = {{0}};
    int ids[300], want[300];
    for (int trial = 0; trial < 2000; trial++) {
        RandomRule rule;
        for (int a = 0; a < N_SYMBOLS; a++)
            for (int b = 0; b < N_SYMBOLS; b++)
                rule.table[a][b] =
                    (PairMerge){.key = rand() % 3 == 0 ? -1 : rand() % 5, .merged_id = rand() % N_SYMBOLS};
        int n = rand() % 300;
        for (int i = 0; i < n; i++)
            ids[i] = want[i] = rand() % N_SYMBOLS;
        ck_assert_int_eq(merge_work_reserve(&work, n, &err), 0);
        int got = merge_tokens(&work, ids, n, random_rule_merge, &rule);
        int expect = scan_merge(want, n, random_rule_merge, &rule);
        ck_assert_msg(got == expect, "trial %d: %d tokens left, the scan leaves %d", trial, got, expect);
        for (int i = 0; i < got; i++)
            ck_assert_msg(ids[i] == want[i], "trial %d: token %d is %d, the scan gives %d", trial, i, ids[i], want[i]);
    }
    merge_work_free(&work);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* ------------------------------------------------------------ a small vocabulary */

/* GPT-2's byte-to-unicode table, written out independently of bpe.c. */
static void byte_level_char(int byte, char out[3])
{
    static int table[256];
    static int ready;
    if (!ready) {
        int n = 0;
        for (int b = 0; b < 256; b++) {
            int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            table[b] = keep ? b : 256 + n++;
        }
        ready = 1;
    }
    int cp = table[byte];
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = '\0';
    }
}

/* Ids 0-2 control tokens, 3 a user-defined one, 4..259 the bytes (byte b
 * is id 4 + b, except that 0x04 and 0xFF have no token), then the merges'
 * results in order. */
static const char *const CONTROLS[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im"};
static const char *const MERGES[] = {
    "a a",   /* 0: aa */
    "Ġ t",   /* 1: Ġt */
    "h e",   /* 2: he */
    "Ġt he", /* 3: Ġthe */
    "aa a",  /* 4: aaa */
    "aa aa", /* 5: aaaa */
    "b c",   /* 6: bc */
    "a b",   /* 7: ab */
};
#define N_MERGES (int)(sizeof MERGES / sizeof MERGES[0])
#define FIRST_BYTE_ID 4
#define FIRST_MERGED_ID (FIRST_BYTE_ID + 256)
#define VOCAB (FIRST_MERGED_ID + N_MERGES)

typedef struct {
    char strings[VOCAB][32];
    BpeString tokens[VOCAB];
    int32_t types[VOCAB];
    BpeString merges[N_MERGES];
    TokenizerBpeSpec spec;
} SmallVocab;

static void small_vocab(SmallVocab *v)
{
    memset(v, 0, sizeof *v);
    for (int i = 0; i < 4; i++) {
        snprintf(v->strings[i], sizeof v->strings[i], "%s", CONTROLS[i]);
        v->types[i] = i < 3 ? BPE_TYPE_CONTROL : BPE_TYPE_USER_DEFINED;
    }
    for (int b = 0; b < 256; b++) {
        byte_level_char(b, v->strings[FIRST_BYTE_ID + b]);
        /* No token for 0x04 and 0xFF: a string nothing else uses. */
        if (b == 0x04 || b == 0xFF)
            snprintf(v->strings[FIRST_BYTE_ID + b], 32, "<unused%d>", b);
        v->types[FIRST_BYTE_ID + b] = BPE_TYPE_NORMAL;
    }
    for (int m = 0; m < N_MERGES; m++) {
        char *s = v->strings[FIRST_MERGED_ID + m];
        const char *space = strchr(MERGES[m], ' ');
        snprintf(s, 32, "%.*s%s", (int)(space - MERGES[m]), MERGES[m], space + 1);
        v->types[FIRST_MERGED_ID + m] = BPE_TYPE_NORMAL;
        v->merges[m] = (BpeString){MERGES[m], strlen(MERGES[m])};
    }
    for (int i = 0; i < VOCAB; i++)
        v->tokens[i] = (BpeString){v->strings[i], strlen(v->strings[i])};
    v->spec = (TokenizerBpeSpec){
        .bpe = {.vocab_size = VOCAB, .tokens = v->tokens, .types = v->types, .n_merges = N_MERGES,
                .merges = v->merges, .pre = "smollm"},
        .bos_id = 1, .eos_id = 2, .add_bos = 0,
    };
}

static void open_small(Tokenizer *t, SmallVocab *v)
{
    small_vocab(v);
    Err err = {{0}};
    ck_assert_msg(tokenizer_open_bpe(t, &v->spec, &err) == 0, "%s", err.msg);
}

/* Encodes and compares with the expected ids (given as a -1 terminated list). */
static void expect_ids(const Tokenizer *t, const char *text, const int *want)
{
    int ids[256], n;
    Err err = {{0}};
    ck_assert_msg(tokenizer_encode(t, text, 1, 0, ids, &n, &err) == 0, "'%s': %s", text, err.msg);
    int k = 0;
    while (want[k] >= 0)
        k++;
    char got[512] = "";
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), " %d", ids[i]);
    ck_assert_msg(n == k, "'%s' gave%s (%d ids), expected %d ids", text, got, n, k);
    for (int i = 0; i < n; i++)
        ck_assert_msg(ids[i] == want[i], "'%s' gave%s; id %d should be %d", text, got, i, want[i]);
}

#define B(c) (FIRST_BYTE_ID + (unsigned char)(c))
#define M(rank) (FIRST_MERGED_ID + (rank))

START_TEST(merges_by_rank_leftmost_first)
{
    Tokenizer t;
    SmallVocab v;
    open_small(&t, &v);
    /* "aaa": both (a, a) pairs have rank 0; the left one merges first, then
     * (aa, a) has rank 4. Merging the right one first would leave a + aa. */
    expect_ids(&t, "aaa", (const int[]){M(4), -1});
    /* "aaaa": a a a a -> aa a a -> aa aa (rank 0 beats rank 4) -> aaaa. */
    expect_ids(&t, "aaaa", (const int[]){M(5), -1});
    /* "aaaaa": a a a a a -> aa a a a -> aa aa a (rank 0 at position 2),
     * then (aa, a) of rank 4 beats (aa, aa) of rank 5 -> aa aaa. */
    expect_ids(&t, "aaaaa", (const int[]){M(0), M(4), -1});
    /* "abc": (b, c) has rank 6, (a, b) rank 7: the lower rank wins though it is to the right. */
    expect_ids(&t, "abc", (const int[]){B('a'), M(6), -1});
    /* " the": Ġ t h e -> Ġt h e -> Ġt he -> Ġthe. */
    expect_ids(&t, " the", (const int[]){M(3), -1});
    /* A piece boundary stops merges: "a" and " a" are different pieces. */
    expect_ids(&t, "a a", (const int[]){B('a'), B(' '), B('a'), -1});
    /* No BOS: add_bos is 0 even though bos asks for one. */
    expect_ids(&t, "", (const int[]){-1});
    tokenizer_free(&t);
}
END_TEST

START_TEST(control_tokens_are_matched_whole)
{
    Tokenizer t;
    SmallVocab v;
    open_small(&t, &v);
    expect_ids(&t, "<|im_start|>the<|im_end|>",
               (const int[]){1, B('t'), M(2), 2, -1});
    /* The longest control token at the leftmost place: "<|im_start|>" over the user-defined "<|im". */
    expect_ids(&t, "<|im<|im_start|>", (const int[]){3, 1, -1});
    /* Not a control token: a broken one is plain text, split by the pre-tokenizer. */
    expect_ids(&t, "<|im_end", (const int[]){3, B('_'), B('e'), B('n'), B('d'), -1});
    expect_ids(&t, "x<|endoftext|>", (const int[]){B('x'), 0, -1});
    tokenizer_free(&t);
}
END_TEST

START_TEST(bytes_without_token_are_dropped)
{
    Tokenizer t;
    SmallVocab v;
    open_small(&t, &v);
    expect_ids(&t, "a\x04" "b\xff", (const int[]){B('a'), B('b'), -1});
    /* Invalid UTF-8 is encoded byte by byte. */
    expect_ids(&t, "\x80\xc3", (const int[]){B(0x80), B(0xC3), -1});
    tokenizer_free(&t);
}
END_TEST

START_TEST(pieces_decode_to_bytes)
{
    Tokenizer t;
    SmallVocab v;
    open_small(&t, &v);
    /* Every byte token decodes to its byte, including the 68 that GPT-2
     * writes as U+0100 onwards (Ġ is the space, Ċ the newline). */
    for (int b = 0; b < 256; b++) {
        if (b == 0x04 || b == 0xFF)
            continue;
        size_t len;
        const char *piece = tokenizer_piece(&t, -1, FIRST_BYTE_ID + b, &len);
        ck_assert_msg(len == 1 && (unsigned char)piece[0] == b, "byte token of 0x%02X decodes to %zu bytes", b, len);
    }
    ck_assert_str_eq(tokenizer_decode(&t, -1, M(3)), " the");
    ck_assert_str_eq(tokenizer_decode(&t, -1, 1), "<|im_start|>");
    /* A string that is not byte-level text stands for itself. */
    ck_assert_str_eq(tokenizer_decode(&t, -1, FIRST_BYTE_ID + 0x04), "<unused4>");
    ck_assert_str_eq(tokenizer_decode(&t, -1, VOCAB), "");
    ck_assert_str_eq(tokenizer_decode(&t, -1, -1), "");
    ck_assert_int_eq(tokenizer_max_piece_bytes(&t), (int)strlen("<|endoftext|>"));
    ck_assert_uint_eq(tokenizer_max_text_bytes(&t, 10), 10 * strlen("<|endoftext|>"));
    ck_assert_uint_eq(tokenizer_max_text_bytes(&t, 0), 0);
    ck_assert(tokenizer_is_stop(&t, 2));
    ck_assert(!tokenizer_is_stop(&t, 1));
    ck_assert(!tokenizer_is_stop(&t, 0));
    tokenizer_free(&t);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* ------------------------------------------------------------ the pre-tokenizer */

typedef struct {
    char pieces[32][64];
    int n;
} Pieces;

static int collect_piece(void *ctx, const char *piece, size_t len, Err *err)
{
    (void)err;
    Pieces *p = ctx;
    ck_assert_int_lt(p->n, 32);
    ck_assert_uint_lt(len, 64);
    memcpy(p->pieces[p->n], piece, len);
    p->pieces[p->n][len] = '\0';
    p->n++;
    return 0;
}

/* Splits @p text and compares the pieces with a NULL-terminated list. */
static void expect_pieces(const BpePretok *pre, const char *text, const char *const *want)
{
    Pieces got = {.n = 0};
    Err err = {{0}};
    ck_assert_msg(bpe_pretok_split(pre, text, strlen(text), collect_piece, &got, &err) == 0, "%s", err.msg);
    int k = 0;
    while (want[k])
        k++;
    char all[1024] = "";
    for (int i = 0; i < got.n; i++)
        snprintf(all + strlen(all), sizeof all - strlen(all), " [%s]", got.pieces[i]);
    ck_assert_msg(got.n == k, "'%s' gave%s: %d pieces, expected %d", text, all, got.n, k);
    for (int i = 0; i < k; i++)
        ck_assert_msg(strcmp(got.pieces[i], want[i]) == 0, "'%s' gave%s; piece %d should be [%s]", text, all, i,
                      want[i]);
}

START_TEST(pretokenizer_pieces)
{
    BpePretok *pre;
    Err err = {{0}};
    ck_assert_msg(bpe_pretok_open(&pre, "smollm", &err) == 0, "%s", err.msg);
    expect_pieces(pre, "Hello world", (const char *const[]){"Hello", " world", NULL});
    /* White space leaves its last character to the next word. */
    expect_pieces(pre, "a   b", (const char *const[]){"a", "  ", " b", NULL});
    expect_pieces(pre, "a\n\nb", (const char *const[]){"a", "\n", "\n", "b", NULL});
    expect_pieces(pre, "end  ", (const char *const[]){"end", "  ", NULL});
    /* Every number character alone; the space before it is its own piece,
     * because the pattern runs on the text between numbers. */
    expect_pieces(pre, "2024", (const char *const[]){"2", "0", "2", "4", NULL});
    expect_pieces(pre, "a 12", (const char *const[]){"a", " ", "1", "2", NULL});
    expect_pieces(pre, "x\xc2\xb2", (const char *const[]){"x", "\xc2\xb2", NULL}); /* ² is a number */
    expect_pieces(pre, "it's I'M", (const char *const[]){"it", "'s", " I", "'", "M", NULL});
    expect_pieces(pre, "x!!! y", (const char *const[]){"x", "!!!", " y", NULL});
    expect_pieces(pre, "caf\xc3\xa9 \xe6\x97\xa5", (const char *const[]){"caf\xc3\xa9", " \xe6\x97\xa5", NULL});
    /* U+180E is not white space (Unicode since 6.3, Hugging Face), though PCRE2 says it is. */
    expect_pieces(pre, "a \xe1\xa0\x8e b", (const char *const[]){"a", " \xe1\xa0\x8e", " b", NULL});
    expect_pieces(pre, "a  \xe1\xa0\x8e", (const char *const[]){"a", " ", " \xe1\xa0\x8e", NULL});
    expect_pieces(pre, "\xe1\xa0\x8e  b", (const char *const[]){"\xe1\xa0\x8e", " ", " b", NULL});
    /* Invalid UTF-8: each run of bytes that starts no character is a piece. */
    expect_pieces(pre, "ab\xff\xfe cd", (const char *const[]){"ab", "\xff\xfe", " cd", NULL});
    expect_pieces(pre, "\xe6\x97" "a", (const char *const[]){"\xe6\x97", "a", NULL});
    expect_pieces(pre, "\xed\xa0\x80", (const char *const[]){"\xed\xa0\x80", NULL}); /* a surrogate */
    expect_pieces(pre, "", (const char *const[]){NULL});
    bpe_pretok_close(pre);
    ck_assert_int_eq(bpe_pretok_open(&pre, "llama3", &err), -1);
    ck_assert_msg(strstr(err.msg, "llama3") && strstr(err.msg, "smollm"), "%s", err.msg);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* The pieces of any bytes cover them exactly, in order. */
static int append_piece(void *ctx, const char *piece, size_t len, Err *err)
{
    (void)err;
    char **at = ctx;
    ck_assert_uint_gt(len, 0);
    memcpy(*at, piece, len);
    *at += len;
    return 0;
}

START_TEST(pretokenizer_covers_random_bytes)
{
    BpePretok *pre;
    Err err = {{0}};
    ck_assert(bpe_pretok_open(&pre, "smollm", &err) == 0);
    srand(7);
    static const char *const UNITS[] = {"a", "Z", " ", "  ", "\n", "\t", "1", "'s", "'", "!", "\xc3\xa9",
                                        "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "\xff", "\x80", "\xc3", "\xe1\xa0\x8e"};
    char text[600], back[600];
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = 0;
        while (n < 500) {
            /* Odd trials: units that exercise the pattern; even ones: any byte, NUL included. */
            if (trial % 2) {
                const char *u = UNITS[rand() % (int)(sizeof UNITS / sizeof UNITS[0])];
                memcpy(text + n, u, strlen(u));
                n += strlen(u);
            } else {
                text[n++] = (char)(rand() % 256);
            }
            if (rand() % 40 == 0)
                break;
        }
        char *at = back;
        ck_assert(bpe_pretok_split(pre, text, n, append_piece, &at, &err) == 0);
        ck_assert_msg((size_t)(at - back) == n && memcmp(text, back, n) == 0,
                      "trial %d: the pieces do not cover the text", trial);
    }
    bpe_pretok_close(pre);
}
END_TEST

/* ------------------------------------------------------------ refused vocabularies */

static void expect_refused(SmallVocab *v, const char *word)
{
    Tokenizer t;
    Err err = {{0}};
    long live = mem_live_buffers();
    ck_assert_msg(tokenizer_open_bpe(&t, &v->spec, &err) == -1, "a bad vocabulary (%s) was accepted", word);
    ck_assert_msg(strstr(err.msg, word), "message '%s' lacks '%s'", err.msg, word);
    ck_assert_msg(!strchr(err.msg, '\n'), "message is not one line: '%s'", err.msg);
    ck_assert_msg(mem_live_buffers() == live, "the refusal leaked %ld buffers", mem_live_buffers() - live);
}

START_TEST(bad_vocabularies_are_refused)
{
    SmallVocab v;
    small_vocab(&v);
    v.merges[3] = (BpeString){"Ġt xyz", strlen("Ġt xyz")};
    expect_refused(&v, "merge 3 'Ġt xyz' names a token that is not in the vocabulary");
    small_vocab(&v);
    v.merges[5] = (BpeString){"a a", 3};
    expect_refused(&v, "merge 5 'a a' repeats merge 0");
    small_vocab(&v);
    v.merges[2] = (BpeString){"he", 2};
    expect_refused(&v, "not two tokens separated by one space");
    small_vocab(&v);
    v.merges[2] = (BpeString){"h  e", 4};
    expect_refused(&v, "not two tokens separated by one space");
    small_vocab(&v);
    v.spec.bpe.pre = "qwen2";
    expect_refused(&v, "pre-tokenizer 'qwen2' is not supported");
    small_vocab(&v);
    v.spec.eos_id = VOCAB;
    expect_refused(&v, "EOS token id");
    small_vocab(&v);
    v.spec.bos_id = -1;
    v.spec.add_bos = 1;
    expect_refused(&v, "no BOS token id");
    small_vocab(&v);
    v.spec.bpe.vocab_size = 0;
    expect_refused(&v, "empty");
    small_vocab(&v);
    v.spec.chat_template = (BpeString){"a\0b", 3};
    expect_refused(&v, "NUL");
}
END_TEST

/* ------------------------------------------------------------ streaming decode */

START_TEST(stream_holds_incomplete_characters)
{
    Tokenizer t;
    SmallVocab v;
    open_small(&t, &v);
    DecodeStream s;
    Err err = {{0}};
    ck_assert(decode_stream_init(&s, &t, -1, &err) == 0);
    size_t len;
    /* 😀 = F0 9F 98 80, one byte token at a time: nothing until the last. */
    const unsigned char emoji[] = {0xF0, 0x9F, 0x98, 0x80};
    for (int i = 0; i < 3; i++) {
        decode_stream_push(&s, FIRST_BYTE_ID + emoji[i], &len);
        ck_assert_msg(len == 0, "byte %d of the emoji printed %zu bytes early", i, len);
    }
    const char *out = decode_stream_push(&s, FIRST_BYTE_ID + emoji[3], &len);
    ck_assert(len == 4 && memcmp(out, emoji, 4) == 0);
    /* An ASCII token after a lead byte that never completes: both come out
     * (the lead byte first, invalid as it is). */
    decode_stream_push(&s, FIRST_BYTE_ID + 0xC3, &len);
    ck_assert_uint_eq(len, 0);
    out = decode_stream_push(&s, M(3), &len);
    ck_assert(len == 5 && memcmp(out, "\xc3 the", 5) == 0);
    /* A stray continuation byte cannot complete anything: out at once. */
    out = decode_stream_push(&s, FIRST_BYTE_ID + 0x80, &len);
    ck_assert(len == 1 && (unsigned char)out[0] == 0x80);
    /* é split in two; the end of the stream gives back a dangling lead byte. */
    decode_stream_push(&s, FIRST_BYTE_ID + 0xC3, &len);
    out = decode_stream_push(&s, FIRST_BYTE_ID + 0xA9, &len);
    ck_assert(len == 2 && memcmp(out, "\xc3\xa9", 2) == 0);
    decode_stream_push(&s, FIRST_BYTE_ID + 0xE6, &len);
    ck_assert_uint_eq(len, 0);
    out = decode_stream_finish(&s, &len);
    ck_assert(len == 1 && (unsigned char)out[0] == 0xE6);
    out = decode_stream_finish(&s, &len);
    ck_assert_uint_eq(len, 0);
    /* Control tokens come out as their text. */
    out = decode_stream_push(&s, 2, &len);
    ck_assert(len == strlen("<|im_end|>") && memcmp(out, "<|im_end|>", len) == 0);
    decode_stream_free(&s);
    tokenizer_free(&t);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

/* Length of the well-formed UTF-8 character at s[0..n), 0 if none (the
 * test's own decoder, strict like RFC 3629). */
static size_t valid_char_at(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
               : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    unsigned cp = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
    return cp >= min[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp < 0xE000) ? len : 0;
}

/* Any sequence of tokens: the stream's output, concatenated, is exactly
 * the concatenation of the pieces, and no output ends inside a well-formed
 * character of that text. */
START_TEST(stream_output_is_the_pieces)
{
    Tokenizer t;
    SmallVocab v;
    open_small(&t, &v);
    srand(99);
    Err err = {{0}};
    for (int trial = 0; trial < 500; trial++) {
        DecodeStream s;
        ck_assert(decode_stream_init(&s, &t, -1, &err) == 0);
        char want[4096], got[4096];
        unsigned char cut[4096] = {0}; /* cut[i]: an output ended right before byte i */
        size_t n_want = 0, n_got = 0, len;
        int n = rand() % 60;
        for (int i = 0; i < n; i++) {
            int id = rand() % 3 ? FIRST_BYTE_ID + 0x80 + rand() % 0x7F : rand() % VOCAB;
            const char *piece = tokenizer_piece(&t, -1, id, &len);
            memcpy(want + n_want, piece, len);
            n_want += len;
            const char *out = decode_stream_push(&s, id, &len);
            memcpy(got + n_got, out, len);
            n_got += len;
            cut[n_got] = 1;
        }
        const char *rest = decode_stream_finish(&s, &len);
        memcpy(got + n_got, rest, len);
        n_got += len;
        ck_assert_msg(n_got == n_want && memcmp(got, want, n_got) == 0, "trial %d: the stream changed the bytes",
                      trial);
        for (size_t i = 0; i < n_got;) {
            size_t c = valid_char_at((const unsigned char *)got + i, n_got - i);
            for (size_t k = 1; k < c; k++)
                ck_assert_msg(!cut[i + k], "trial %d: an output ended inside the character at byte %zu", trial, i);
            i += c ? c : 1;
        }
        decode_stream_free(&s);
    }
    tokenizer_free(&t);
}
END_TEST

Suite *suite_bpe(void)
{
    Suite *s = suite_create("bpe");
    TCase *tc = tcase_create("bpe");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, merge_matches_the_scan_on_random_sequences);
    tcase_add_test(tc, merges_by_rank_leftmost_first);
    tcase_add_test(tc, control_tokens_are_matched_whole);
    tcase_add_test(tc, bytes_without_token_are_dropped);
    tcase_add_test(tc, pieces_decode_to_bytes);
    tcase_add_test(tc, pretokenizer_pieces);
    tcase_add_test(tc, pretokenizer_covers_random_bytes);
    tcase_add_test(tc, bad_vocabularies_are_refused);
    tcase_add_test(tc, stream_holds_incomplete_characters);
    tcase_add_test(tc, stream_output_is_the_pieces);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(bpe)
