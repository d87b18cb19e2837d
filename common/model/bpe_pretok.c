#include "bpe_pretok.h"

#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "mem.h"

/* PCRE2's memory (compiled patterns, match data) goes through the ledger
 * like every other host allocation, charged with the tokenizer's tables. */
#define PRETOK_MEM MEM_ACTIVATIONS

/* GPT-2's pre-tokenizer pattern, as Hugging Face's ByteLevel uses it:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with one correction. PCRE2 counts U+180E MONGOLIAN VOWEL SEPARATOR as
 * white space (it keeps it in its \h list), Unicode has not since 6.3, and
 * neither does Oniguruma, which Hugging Face uses. So here white space is
 * [^\S\x{180E}] (\s without it), and U+180E joins the "other" class. */
#define SPACE "[^\\S\\x{180E}]"
#define NOT_SPACE "[\\S\\x{180E}]"
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+"
                                   "| ?(?:[^\\s\\p{L}\\p{N}]|\\x{180E})+"
                                   "|" SPACE "+(?!" NOT_SPACE ")|" SPACE "+";
/* One number character: the Digits pre-tokenizer isolates each. */
static const char NUMBER_PATTERN[] = "\\p{N}";

struct BpePretok {
    pcre2_general_context *memory; /* routes PCRE2's allocations to mem_alloc */
    pcre2_code *numbers;           /* NUMBER_PATTERN */
    pcre2_code *words;             /* GPT2_PATTERN */
};

static void *pcre_alloc(PCRE2_SIZE bytes, void *unused)
{
    (void)unused;
    return mem_alloc(PRETOK_MEM, bytes);
}

static void pcre_free(void *p, void *unused)
{
    (void)unused;
    mem_free(p);
}

static int compile(const BpePretok *p, const char *pattern, pcre2_code **out, Err *err)
{
    int code;
    PCRE2_SIZE at;
    pcre2_compile_context *cc = pcre2_compile_context_create(p->memory);
    if (!cc)
        return err_set(err, "out of memory for the pre-tokenizer");
    *out = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                         &code, &at, cc);
    pcre2_compile_context_free(cc);
    if (*out)
        return 0;
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(code, msg, sizeof msg);
    return err_set(err, "PCRE2 cannot compile the pre-tokenizer pattern at offset %zu: %s", (size_t)at,
                   (const char *)msg);
}

int bpe_pretok_open(BpePretok **out, const char *name, Err *err)
{
    *out = NULL;
    if (strcmp(name, "smollm") != 0)
        return err_set(err, "pre-tokenizer '%s' is not supported (kvlab knows 'smollm')", name);
    BpePretok *p = mem_alloc(PRETOK_MEM, sizeof *p);
    if (!p)
        return err_set(err, "out of memory for the pre-tokenizer");
    memset(p, 0, sizeof *p);
    p->memory = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    if (!p->memory) {
        mem_free(p);
        return err_set(err, "out of memory for the pre-tokenizer");
    }
    if (compile(p, NUMBER_PATTERN, &p->numbers, err) || compile(p, GPT2_PATTERN, &p->words, err)) {
        bpe_pretok_close(p);
        return -1;
    }
    *out = p;
    return 0;
}

void bpe_pretok_close(BpePretok *p)
{
    if (!p)
        return;
    pcre2_code_free(p->numbers);
    pcre2_code_free(p->words);
    pcre2_general_context_free(p->memory);
    mem_free(p);
}

/* Finds the next match of @p code in text[from..len); 1 with its bounds,
 * 0 when there is none, -1 on a matcher error. */
static int find(const pcre2_code *code, const char *text, size_t len, size_t from, pcre2_match_data *md,
                size_t *start, size_t *end, Err *err)
{
    /* The caller checked the UTF-8; without PCRE2_NO_UTF_CHECK, PCRE2
     * would check text[from..len) again on every call: O(n²) in all. */
    int rc = pcre2_match(code, (PCRE2_SPTR)text, len, from, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return err_set(err, "the pre-tokenizer failed at byte %zu: %s", from, (const char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *start = ov[0];
    *end = ov[1];
    return 1;
}

/* Pass 2: GPT-2's pattern over text that holds no number character. The
 * bytes between two matches (only ever invalid UTF-8) are a piece too. */
static int split_words(const BpePretok *p, const char *text, size_t len, pcre2_match_data *md, BpePieceFn fn,
                       void *ctx, Err *err)
{
    size_t at = 0;
    while (at < len) {
        size_t start = len, end = len;
        int found = find(p->words, text, len, at, md, &start, &end, err);
        if (found < 0)
            return -1;
        if (found && end == start)
            return err_set(err, "the pre-tokenizer matched nothing at byte %zu", start);
        if (start > at && fn(ctx, text + at, start - at, err))
            return -1;
        if (found && fn(ctx, text + start, end - start, err))
            return -1;
        at = end;
    }
    return 0;
}

/* Both passes over well-formed UTF-8: each number character is a piece,
 * GPT-2's pattern cuts what lies between them. */
static int split_valid(const BpePretok *p, const char *text, size_t len, pcre2_match_data *md, BpePieceFn fn,
                       void *ctx, Err *err)
{
    size_t at = 0;
    while (at < len) {
        size_t start = len, end = len;
        int found = find(p->numbers, text, len, at, md, &start, &end, err);
        if (found < 0 || split_words(p, text + at, start - at, md, fn, ctx, err))
            return -1;
        if (found && fn(ctx, text + start, end - start, err))
            return -1;
        at = end;
    }
    return 0;
}

/* Length of the well-formed UTF-8 character at s[0..n) (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF), 0 if none starts there. */
static size_t utf8_char_at(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xC2 && s[0] <= 0xDF   ? 2
                 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                                : 0;
    if (len == 0 || len > n)
        return 0;
    /* The second byte's range depends on the first (overlongs, surrogates, > U+10FFFF). */
    unsigned lo = s[0] == 0xE0 ? 0xA0 : s[0] == 0xF0 ? 0x90 : 0x80;
    unsigned hi = s[0] == 0xED ? 0x9F : s[0] == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

int bpe_pretok_split(const BpePretok *p, const char *text, size_t len, BpePieceFn fn, void *ctx, Err *err)
{
    pcre2_match_data *md = pcre2_match_data_create(1, p->memory);
    if (!md)
        return err_set(err, "out of memory for the pre-tokenizer");
    const unsigned char *u = (const unsigned char *)text;
    int rc = 0;
    size_t at = 0;
    /* Alternate runs of well-formed UTF-8, which the patterns cut, and runs
     * of bytes that start no character, which are a piece each: no pattern
     * could match across them, and its look-ahead sees them as an end. */
    while (at < len && rc == 0) {
        size_t end = at, n;
        while (end < len && (n = utf8_char_at(u + end, len - end)) > 0)
            end += n;
        if (end > at) {
            rc = split_valid(p, text + at, end - at, md, fn, ctx, err);
        } else {
            while (end < len && utf8_char_at(u + end, len - end) == 0)
                end++;
            rc = fn(ctx, text + at, end - at, err);
        }
        at = end;
    }
    pcre2_match_data_free(md);
    return rc;
}
