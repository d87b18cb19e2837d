/* The tokenizer: the published encoding of tok512, round trips through
 * encode and decode (byte fallback included), the BOS leading-space rule,
 * the same properties on the synthetic vocabulary, and files that must be
 * refused. */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "mem.h"
#include "suites.h"
#include "synth.h"
#include "tokenizer.h"

/* Texts every vocabulary must round-trip: ASCII words and punctuation,
 * leading and repeated spaces, newlines and tabs, and UTF-8 that neither
 * vocabulary has (so it goes through <0xXX> byte tokens). */
static const char *const ROUND_TRIP[] = {
    "Once upon a time",
    "Lily and Ben went to the park. They saw a big, red ball!",
    "  two leading spaces and   three inside",
    "line one\nline two\ttabbed",
    "caf\xc3\xa9",                      /* café */
    "\xe6\x97\xa5\xe6\x9c\xac",         /* 日本 */
    "smile \xf0\x9f\x98\x80 emoji",     /* 😀 */
    "x",
    "1234567890 ~!@#$%^&*()_+{}|:\"<>?",
    "\xff\xfe invalid UTF-8 \x80",      /* stray bytes: still bytes */
};
#define N_ROUND_TRIP (sizeof ROUND_TRIP / sizeof ROUND_TRIP[0])

static int compare_by_str(const void *a, const void *b)
{
    return strcmp(((const TokenIndex *)a)->str, ((const TokenIndex *)b)->str);
}

static char *read_whole(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)size);
    ck_assert_uint_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return buf;
}

/* Encodes into a buffer of exactly the documented size (strlen + 3), so
 * that the sanitizer build catches a write past it. */
static int *encode(const Tokenizer *t, const char *text, int bos, int eos, int *n)
{
    int *ids = malloc((strlen(text) + 3) * sizeof(int));
    Err err = {{0}};
    ck_assert_msg(tokenizer_encode(t, text, bos, eos, ids, n, &err) == 0, "encode '%s': %s", text, err.msg);
    ck_assert_msg(*n <= (int)strlen(text) + 3, "encode wrote %d ids for %zu bytes", *n, strlen(text));
    return ids;
}

/* Concatenates decode(prev, id) over ids[1..n-1], as the programs print. */
static char *decode_all(const Tokenizer *t, const int *ids, int n)
{
    size_t cap = 16;
    for (int i = 1; i < n; i++)
        cap += strlen(tokenizer_decode(t, ids[i - 1], ids[i]));
    char *s = calloc(cap, 1);
    for (int i = 1; i < n; i++)
        strcat(s, tokenizer_decode(t, ids[i - 1], ids[i]));
    return s;
}

static void check_round_trips(const Tokenizer *t, const char *vocab_name)
{
    for (size_t k = 0; k < N_ROUND_TRIP; k++) {
        const char *text = ROUND_TRIP[k];
        int n;
        int *ids = encode(t, text, 1, 0, &n);
        ck_assert_int_eq(ids[0], TOKEN_BOS);
        for (int i = 0; i < n; i++)
            ck_assert_msg(ids[i] >= 0 && ids[i] < t->vocab_size, "%s: id %d out of range", vocab_name, ids[i]);
        char *back = decode_all(t, ids, n);
        ck_assert_msg(strcmp(back, text) == 0, "%s: '%s' came back as '%s'", vocab_name, text, back);
        free(back);
        free(ids);
    }
}

/* Bytes that no vocabulary entry covers must come out as their <0xXX>
 * tokens (id = byte + 3), in order. */
static void check_byte_fallback(const Tokenizer *t, const char *utf8, const char *vocab_name)
{
    int n;
    int *ids = encode(t, utf8, 0, 0, &n);
    size_t len = strlen(utf8);
    /* ids[0] is the dummy-prefix space (no entry starts with " <0x"). */
    ck_assert_msg(n == (int)len + 1, "%s: '%s' gave %d ids, expected the space and %zu byte tokens", vocab_name,
                  utf8, n, len);
    for (size_t i = 0; i < len; i++) {
        int want = (unsigned char)utf8[i] + 3;
        ck_assert_msg(ids[i + 1] == want, "%s: byte %zu of '%s' is token %d, expected <0x%02X> = %d", vocab_name, i,
                      utf8, ids[i + 1], (unsigned char)utf8[i], want);
        char expect[8];
        snprintf(expect, sizeof expect, "<0x%02X>", (unsigned char)utf8[i]);
        ck_assert_str_eq(t->vocab[want], expect);
        const char *piece = tokenizer_decode(t, ids[i], ids[i + 1]);
        ck_assert_msg(strlen(piece) == 1 && piece[0] == utf8[i], "%s: <0x%02X> decodes to '%s'", vocab_name,
                      (unsigned char)utf8[i], piece);
    }
    free(ids);
}

static void check_bos_and_empty(const Tokenizer *t, const char *vocab_name)
{
    int n;
    int *ids = encode(t, "", 1, 0, &n);
    ck_assert_msg(n == 1 && ids[0] == TOKEN_BOS, "%s: empty text with BOS gave %d ids", vocab_name, n);
    free(ids);
    ids = encode(t, "", 0, 0, &n);
    ck_assert_msg(n == 0, "%s: empty text without BOS gave %d ids (no dummy prefix for nothing)", vocab_name, n);
    free(ids);
    ids = encode(t, "", 1, 1, &n);
    ck_assert_msg(n == 2 && ids[0] == TOKEN_BOS && ids[1] == TOKEN_EOS, "%s: BOS+EOS of nothing", vocab_name);
    free(ids);
    ids = encode(t, "hello", 0, 1, &n);
    ck_assert_msg(n >= 2 && ids[0] != TOKEN_BOS && ids[n - 1] == TOKEN_EOS, "%s: EOS must come last", vocab_name);
    free(ids);

    /* The leading space of the first piece is dropped after BOS only. */
    int space = -1;
    for (int i = 0; i < t->vocab_size; i++)
        if (strcmp(t->vocab[i], " ") == 0)
            space = i;
    ck_assert_msg(space >= 0, "%s has no space token", vocab_name);
    ck_assert_str_eq(tokenizer_decode(t, TOKEN_BOS, space), "");
    ck_assert_str_eq(tokenizer_decode(t, 100, space), " ");
    ids = encode(t, "hello", 1, 0, &n);
    ck_assert_msg(t->vocab[ids[1]][0] == ' ', "%s: the first piece '%s' lacks the dummy-prefix space", vocab_name,
                  t->vocab[ids[1]]);
    const char *after_bos = tokenizer_decode(t, TOKEN_BOS, ids[1]);
    const char *elsewhere = tokenizer_decode(t, ids[1], ids[1]);
    ck_assert_msg(elsewhere[0] == ' ' && strcmp(after_bos, elsewhere + 1) == 0,
                  "%s: '%s' after BOS decodes to '%s', elsewhere to '%s'", vocab_name, t->vocab[ids[1]], after_bos,
                  elsewhere);
    free(ids);
    /* Out-of-range ids decode to nothing rather than reading past the table. */
    ck_assert_str_eq(tokenizer_decode(t, 0, -1), "");
    ck_assert_str_eq(tokenizer_decode(t, 0, t->vocab_size), "");
}

static int load_tok512(Tokenizer *t)
{
    const char *path = test_shared_file("tok512.bin");
    if (!path)
        return -1;
    Err err = {{0}};
    ck_assert_msg(tokenizer_load(t, path, 512, &err) == 0, "%s", err.msg);
    return 0;
}

START_TEST(tok512_once_upon_a_time)
{
    Tokenizer t;
    if (load_tok512(&t)) {
        test_skip("tok512_once_upon_a_time", TEST_NOT_FOUND("tok512.bin"));
        return;
    }
    int n;
    int *ids = encode(&t, "Once upon a time", 1, 0, &n);
    const int want[] = {1, 403, 407, 261, 378};
    ck_assert_msg(n == 5, "got %d ids, expected 5", n);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(ids[i] == want[i], "id %d is %d, expected %d", i, ids[i], want[i]);
    free(ids);
    tokenizer_free(&t);
}
END_TEST

START_TEST(tok512_round_trips)
{
    Tokenizer t;
    if (load_tok512(&t)) {
        test_skip("tok512_round_trips", TEST_NOT_FOUND("tok512.bin"));
        return;
    }
    check_round_trips(&t, "tok512");
    check_byte_fallback(&t, "\xc3\xbc", "tok512"); /* ü */
    check_byte_fallback(&t, "\xe6\x97\xa5\xe6\x9c\xac", "tok512");
    check_byte_fallback(&t, "\xf0\x9f\x98\x80", "tok512");
    check_bos_and_empty(&t, "tok512");
    /* A code point the vocabulary does have (tok512 learned é, id 485) is
     * one token, not its two bytes: encoding gathers whole code points. */
    int n;
    int *ids = encode(&t, "\xc3\xa9", 0, 0, &n);
    ck_assert_msg(n == 2 && ids[1] == 485, "é gave %d ids (second %d), expected [space, 485]", n, n > 1 ? ids[1] : -1);
    free(ids);
    tokenizer_free(&t);
}
END_TEST

/* Merges reduce the token count: "Once upon a time" is 16 characters but
 * four pieces. The greedy merge order must also be the one by score, which
 * the published ids above pin down; here, that merging always happened. */
START_TEST(tok512_merges_shorten_common_text)
{
    Tokenizer t;
    if (load_tok512(&t)) {
        test_skip("tok512_merges_shorten_common_text", TEST_NOT_FOUND("tok512.bin"));
        return;
    }
    const char *text = "Once upon a time there was a little girl named Lily.";
    int n;
    int *ids = encode(&t, text, 1, 0, &n);
    ck_assert_msg(n < (int)strlen(text) / 2, "%d ids for %zu characters: merges did not happen", n, strlen(text));
    free(ids);
    tokenizer_free(&t);
}
END_TEST

static void load_synthetic(Tokenizer *t, int vocab)
{
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert_msg(synth_tokenizer_image(vocab, &image, &bytes, &err) == 0, "%s", err.msg);
    ck_assert_msg(tokenizer_open_image(t, image, bytes, vocab, &err) == 0, "%s", err.msg);
    mem_free(image);
}

START_TEST(synthetic_round_trips)
{
    static const int vocabs[] = {354, 512, 1000, 32000};
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        Tokenizer t;
        load_synthetic(&t, vocabs[v]);
        char name[32];
        snprintf(name, sizeof name, "synthetic %d", vocabs[v]);
        check_round_trips(&t, name);
        check_byte_fallback(&t, "\xc3\xa9", name);
        check_byte_fallback(&t, "\xe6\x97\xa5\xe6\x9c\xac", name);
        check_byte_fallback(&t, "\xf0\x9f\x98\x80", name);
        check_bos_and_empty(&t, name);
        /* With merges in the vocabulary, lowercase text gets shorter. */
        if (vocabs[v] >= 1000) {
            int n;
            int *ids = encode(&t, "the cat sat on the mat", 1, 0, &n);
            /* 23 characters with the dummy prefix: BOS + 23 ids unmerged,
             * BOS + 12 with every letter pair merged. */
            ck_assert_msg(n <= 13, "%s: %d ids: merges did not happen", name, n);
            free(ids);
        }
        tokenizer_free(&t);
    }
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

START_TEST(synthetic_needs_room_for_bytes)
{
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert_int_eq(synth_tokenizer_image(353, &image, &bytes, &err), -1);
    ck_assert_msg(strstr(err.msg, "354"), "%s", err.msg);
}
END_TEST

/* Loads an image as a file and expects a refusal whose message contains
 * @p word, names the file, and is one line. */
static void expect_refused(const void *image, size_t bytes, int vocab, const char *word)
{
    char path[PATH_MAX];
    test_write_temp(image, bytes, path);
    long live = mem_live_buffers();
    Tokenizer t;
    Err err = {{0}};
    ck_assert_msg(tokenizer_load(&t, path, vocab, &err) == -1, "a bad tokenizer (%s) was accepted", word);
    ck_assert_msg(strstr(err.msg, word) != NULL, "message '%s' lacks '%s'", err.msg, word);
    ck_assert_msg(strstr(err.msg, path) != NULL, "message '%s' does not name the file", err.msg);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "message is not one line: '%s'", err.msg);
    ck_assert_msg(mem_live_buffers() == live, "the refusal leaked %ld buffers", mem_live_buffers() - live);
    unlink(path);
}

START_TEST(vocab_size_mismatch_is_refused)
{
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert(synth_tokenizer_image(400, &image, &bytes, &err) == 0);
    expect_refused(image, bytes, 512, "has only 400 tokens, the model's vocabulary has 512");
    expect_refused(image, bytes, 399, "more tokens than the model's vocabulary of 399");
    mem_free(image);

    const char *path = test_shared_file("tok512.bin");
    if (!path) {
        test_skip("vocab_size_mismatch_is_refused (tok512 part)", TEST_NOT_FOUND("tok512.bin"));
        return;
    }
    size_t n;
    char *tok = read_whole(path, &n);
    expect_refused(tok, n, 32000, "has only 512 tokens");
    expect_refused(tok, n, 511, "more tokens");
    free(tok);
}
END_TEST

START_TEST(truncated_file_is_refused)
{
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert(synth_tokenizer_image(512, &image, &bytes, &err) == 0);
    expect_refused(image, 2, 512, "too short");
    expect_refused(image, 4, 512, "has only 0 tokens");
    expect_refused(image, bytes / 2, 512, "has only");
    expect_refused(image, bytes - 1, 512, "has only 511 tokens"); /* last token's text cut short */
    mem_free(image);
}
END_TEST

START_TEST(absurd_lengths_are_refused)
{
    void *image;
    size_t bytes;
    Err err = {{0}};
    ck_assert(synth_tokenizer_image(400, &image, &bytes, &err) == 0);
    unsigned char *bad = malloc(bytes);
    static const int32_t max_lens[] = {0, -1, 1 << 30, INT32_MIN};
    for (size_t i = 0; i < sizeof max_lens / sizeof max_lens[0]; i++) {
        memcpy(bad, image, bytes);
        memcpy(bad, &max_lens[i], 4);
        expect_refused(bad, bytes, 400, "max_token_length");
    }
    /* A token longer than max_token_length, or of negative length. The
     * first token's length field sits after max_len and its score. */
    static const int32_t lens[] = {7, -5, INT32_MAX};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        memcpy(bad, image, bytes);
        memcpy(bad + 8, &lens[i], 4);
        expect_refused(bad, bytes, 400, "token 0 has length");
    }
    free(bad);
    mem_free(image);
}
END_TEST

START_TEST(missing_and_non_regular_files)
{
    Tokenizer t;
    Err err = {{0}};
    ck_assert_int_eq(tokenizer_load(&t, "/nonexistent/tok.bin", 512, &err), -1);
    ck_assert_msg(strstr(err.msg, "/nonexistent/tok.bin") && strstr(err.msg, "cannot open"), "%s", err.msg);
    ck_assert_int_eq(tokenizer_load(&t, "/tmp", 512, &err), -1);
    ck_assert_msg(strstr(err.msg, "/tmp") && strstr(err.msg, "not a regular file"), "%s", err.msg);
    ck_assert_int_eq(tokenizer_load(&t, "/dev/null", 512, &err), -1);
    ck_assert_msg(strstr(err.msg, "/dev/null"), "%s", err.msg);
}
END_TEST

/* ------------------------------------------------------------ O(n log n) merging */

/* llama2.c's encoder as it was before the priority queue (and as run.c
 * has it): code points (or their bytes), then the best-scoring merge,
 * the first one on equal scores, found by scanning every pair, until none
 * is left. O(n^2), kept here as the reference. */
static int reference_lookup(const Tokenizer *t, const char *s)
{
    TokenIndex key = {.str = s, .id = 0};
    const TokenIndex *hit = bsearch(&key, t->sorted, (size_t)t->vocab_size, sizeof(TokenIndex), compare_by_str);
    return hit ? hit->id : -1;
}

static int reference_encode(const Tokenizer *t, const char *text, int *tokens)
{
    int n = 0;
    tokens[n++] = TOKEN_BOS;
    if (text[0])
        tokens[n++] = reference_lookup(t, " ");
    for (const char *c = text; *c;) {
        size_t len = 1;
        while (len < 4 && (c[len] & 0xC0) == 0x80)
            len++;
        char cp[5] = {0};
        memcpy(cp, c, len);
        int id = reference_lookup(t, cp);
        if (id >= 0)
            tokens[n++] = id;
        else
            for (size_t i = 0; i < len; i++)
                tokens[n++] = (unsigned char)c[i] + 3;
        c += len;
    }
    char *buf = malloc(2 * (size_t)t->max_token_length + 3);
    for (;;) {
        float best_score = -1e10f;
        int best_id = -1, best_at = -1;
        for (int i = 0; i + 1 < n; i++) {
            snprintf(buf, 2 * (size_t)t->max_token_length + 3, "%s%s", t->vocab[tokens[i]], t->vocab[tokens[i + 1]]);
            int id = reference_lookup(t, buf);
            if (id != -1 && t->scores[id] > best_score) {
                best_score = t->scores[id];
                best_id = id;
                best_at = i;
            }
        }
        if (best_at < 0)
            break;
        tokens[best_at] = best_id;
        memmove(&tokens[best_at + 1], &tokens[best_at + 2], (size_t)(n - best_at - 2) * sizeof(int));
        n--;
    }
    free(buf);
    return n;
}

/* Random text from pieces a story vocabulary knows (and some it does not). */
static void random_text(char *out, size_t max, unsigned *seed)
{
    static const char *const UNITS[] = {"a", "e", "t", "h", "o", "n", " ", " ", "the", " was", "ing", "Lily", ".",
                                        ",", "!", "\n", "  ", "'", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80",
                                        "x", "q", "Z", "1", "0", "\t"};
    size_t n = 0;
    int count = (int)(rand_r(seed) % 60);
    for (int i = 0; i < count; i++) {
        const char *u = UNITS[rand_r(seed) % (sizeof UNITS / sizeof UNITS[0])];
        if (n + strlen(u) + 1 > max)
            break;
        memcpy(out + n, u, strlen(u));
        n += strlen(u);
    }
    out[n] = '\0';
}

static void check_against_reference(const Tokenizer *t, const char *name, int trials)
{
    unsigned seed = 2024;
    char text[512];
    int want[520];
    for (int k = 0; k < trials; k++) {
        random_text(text, sizeof text, &seed);
        int n;
        int *got = encode(t, text, 1, 0, &n);
        int expect = reference_encode(t, text, want);
        ck_assert_msg(n == expect, "%s: '%s' gave %d ids, the reference %d", name, text, n, expect);
        for (int i = 0; i < n; i++)
            ck_assert_msg(got[i] == want[i], "%s: '%s': id %d is %d, the reference gives %d", name, text, i, got[i],
                          want[i]);
        free(got);
    }
}

START_TEST(merging_matches_the_quadratic_reference)
{
    static const int vocabs[] = {512, 1000, 32000};
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        Tokenizer t;
        load_synthetic(&t, vocabs[v]);
        char name[32];
        snprintf(name, sizeof name, "synthetic %d", vocabs[v]);
        check_against_reference(&t, name, 300);
        tokenizer_free(&t);
    }
    Tokenizer t;
    if (load_tok512(&t)) {
        test_skip("merging_matches_the_quadratic_reference (tok512 part)", TEST_NOT_FOUND("tok512.bin"));
        return;
    }
    check_against_reference(&t, "tok512", 1000);
    tokenizer_free(&t);
}
END_TEST

/* Not a benchmark: a hang guard. 200 KB took the O(n^2) merge about 20
 * minutes (10 KB took 3.3 s); the priority queue takes well under a second,
 * far inside the suite's time limit even under the sanitizers. */
START_TEST(long_prompts_finish)
{
    /* The time guard runs on any vocabulary; whether merges shorten the
     * story is a fact of tok512's merges only (the synthetic vocabulary's
     * merges are not English), so that part needs the real file. */
    Tokenizer t;
    int real = load_tok512(&t) == 0;
    if (!real) {
        load_synthetic(&t, 512);
        test_skip("long_prompts_finish (the merge check)", TEST_NOT_FOUND("tok512.bin"));
    }
    size_t len = 200 * 1000;
    char *text = malloc(len + 1);
    static const char STORY[] = "Once upon a time there was a little girl named Lily. She liked to play. ";
    for (int kind = 0; kind < 3; kind++) {
        for (size_t i = 0; i < len; i++)
            text[i] = kind == 0 ? STORY[i % (sizeof STORY - 1)] : kind == 1 ? 'a' : " !"[i % 2];
        text[len] = '\0';
        int n;
        int *ids = encode(&t, text, 1, 0, &n);
        /* Every byte is covered; the story merges into far fewer tokens. */
        ck_assert_msg(n > 1 && n <= (int)len + 2, "kind %d: %d ids for %zu bytes", kind, n, len);
        if (kind == 0 && real)
            ck_assert_msg(n < (int)len / 2, "the story gave %d ids for %zu bytes: merges did not happen", n, len);
        free(ids);
    }
    free(text);
    tokenizer_free(&t);
}
END_TEST

START_TEST(longest_text_that_may_fit)
{
    Tokenizer t;
    load_synthetic(&t, 1000);
    int longest = 0;
    for (int i = 0; i < t.vocab_size; i++)
        longest = (int)strlen(t.vocab[i]) > longest ? (int)strlen(t.vocab[i]) : longest;
    ck_assert_int_eq(tokenizer_max_piece_bytes(&t), longest);
    ck_assert_uint_eq(tokenizer_max_text_bytes(&t, 512), 512 * (size_t)longest);
    ck_assert_uint_eq(tokenizer_max_text_bytes(&t, 0), 0);
    ck_assert_uint_eq(tokenizer_max_text_bytes(&t, -5), 0);
    /* The bound holds: a text just past it never encodes to that few tokens. */
    char *text = malloc(512 * (size_t)longest + 2);
    memset(text, 'e', 512 * (size_t)longest + 1);
    text[512 * (size_t)longest + 1] = '\0';
    int n;
    int *ids = encode(&t, text, 0, 0, &n);
    ck_assert_msg(n > 512, "%zu bytes encoded to %d tokens", strlen(text), n);
    free(ids);
    free(text);
    ck_assert(tokenizer_is_stop(&t, TOKEN_BOS) && tokenizer_is_stop(&t, TOKEN_EOS) && !tokenizer_is_stop(&t, 0));
    tokenizer_free(&t);
}
END_TEST

/* The stream prints what print_token() prints, byte for byte. */
START_TEST(stream_prints_what_llama2c_prints)
{
    Tokenizer t;
    if (load_tok512(&t)) {
        test_skip("stream_prints_what_llama2c_prints", TEST_NOT_FOUND("tok512.bin"));
        return;
    }
    for (size_t k = 0; k < N_ROUND_TRIP; k++) {
        int n;
        int *ids = encode(&t, ROUND_TRIP[k], 1, 1, &n);
        char want[1024] = "", got[1024] = "";
        for (int i = 1; i < n - 1; i++) {
            const char *piece = tokenizer_decode(&t, ids[i - 1], ids[i]);
            if (tokenizer_piece_is_printable(piece))
                strcat(want, piece);
        }
        DecodeStream s;
        Err err = {{0}};
        ck_assert(decode_stream_init(&s, &t, ids[0], &err) == 0);
        size_t len;
        for (int i = 1; i < n; i++) { /* EOS included: the stream never prints it */
            const char *text = decode_stream_push(&s, ids[i], &len);
            strncat(got, text, len);
        }
        const char *rest = decode_stream_finish(&s, &len);
        strncat(got, rest, len);
        ck_assert_msg(strcmp(got, want) == 0, "'%s': the stream printed '%s', print_token '%s'", ROUND_TRIP[k], got,
                      want);
        decode_stream_free(&s);
        free(ids);
    }
    tokenizer_free(&t);
    ck_assert_int_eq(mem_live_buffers(), 0);
}
END_TEST

Suite *suite_tokenizer(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("tokenizer");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, tok512_once_upon_a_time);
    tcase_add_test(tc, tok512_round_trips);
    tcase_add_test(tc, tok512_merges_shorten_common_text);
    tcase_add_test(tc, synthetic_round_trips);
    tcase_add_test(tc, synthetic_needs_room_for_bytes);
    tcase_add_test(tc, vocab_size_mismatch_is_refused);
    tcase_add_test(tc, truncated_file_is_refused);
    tcase_add_test(tc, absurd_lengths_are_refused);
    tcase_add_test(tc, missing_and_non_regular_files);
    tcase_add_test(tc, merging_matches_the_quadratic_reference);
    tcase_add_test(tc, long_prompts_finish);
    tcase_add_test(tc, longest_text_that_may_fit);
    tcase_add_test(tc, stream_prints_what_llama2c_prints);
    suite_add_tcase(s, tc);
    return s;
}

REGISTER_SUITE(tokenizer)
