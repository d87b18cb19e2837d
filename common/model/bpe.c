#include "bpe.h"

#include <string.h>

#include "mem.h"

/* The tokenizer's tables are small and long-lived; like the llama2.c
 * tokenizer's, they are charged to activations. */
#define BPE_MEM MEM_ACTIVATIONS

/* ------------------------------------------------------------ bytes as characters */

/* Bytes that GPT-2 keeps as the character of the same code point. */
static int byte_is_printable(int b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* GPT-2's byte-to-unicode table: printable bytes stand for themselves, the
 * others take U+0100, U+0101, ... in byte order. */
static int byte_to_code_point(int b)
{
    if (byte_is_printable(b))
        return b;
    int k = 0;
    for (int i = 0; i < b; i++)
        k += !byte_is_printable(i);
    return 256 + k;
}

/* The inverse: the byte a code point stands for, or -1. */
static int code_point_to_byte(unsigned cp)
{
    if (cp < 256)
        return byte_is_printable((int)cp) ? (int)cp : -1;
    unsigned k = 0;
    for (int b = 0; b < 256; b++)
        if (!byte_is_printable(b) && k++ == cp - 256)
            return b;
    return -1;
}

/* Decodes one well-formed UTF-8 character of at most two bytes (all the
 * table's characters are below U+0800); returns its length, 0 if it is
 * anything else. */
static size_t decode_small_utf8(const unsigned char *s, size_t len, unsigned *cp)
{
    if (len >= 1 && s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (len >= 2 && s[0] >= 0xC2 && s[0] <= 0xDF && (s[1] & 0xC0) == 0x80) {
        *cp = ((unsigned)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    return 0;
}

size_t bpe_token_bytes(BpeString token, int32_t type, unsigned char *out)
{
    const unsigned char *s = (const unsigned char *)token.data;
    if (type != BPE_TYPE_CONTROL && type != BPE_TYPE_USER_DEFINED) {
        size_t n = 0, at = 0;
        while (at < token.len) {
            unsigned cp;
            size_t used = decode_small_utf8(s + at, token.len - at, &cp);
            int byte = used ? code_point_to_byte(cp) : -1;
            if (byte < 0)
                break;
            out[n++] = (unsigned char)byte;
            at += used;
        }
        if (at == token.len)
            return n;
    }
    /* Not byte-level text: the token means its own bytes, as in Hugging
     * Face's ByteLevel decoder. */
    memcpy(out, s, token.len);
    return token.len;
}

/* ------------------------------------------------------------ string lookup (open only) */

/* Open addressing over token ids, keyed by the token strings. */
typedef struct {
    const BpeString *tokens; /* [vocab_size] */
    int *slots;              /* [mask + 1] token id, -1 when empty */
    size_t mask;
} StringIndex;

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static size_t table_size_for(size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    return size;
}

static int string_index_build(StringIndex *x, const BpeString *tokens, int n, Err *err)
{
    x->tokens = tokens;
    x->mask = table_size_for((size_t)n) - 1;
    x->slots = mem_alloc_array(BPE_MEM, x->mask + 1, sizeof(int));
    if (!x->slots)
        return err_set(err, "out of memory for a vocabulary of %d tokens", n);
    memset(x->slots, 0xFF, (x->mask + 1) * sizeof(int));
    for (int id = 0; id < n; id++) {
        size_t at = hash_bytes(tokens[id].data, tokens[id].len) & x->mask;
        int dup = 0;
        while (x->slots[at] >= 0 && !dup) {
            const BpeString *s = &tokens[x->slots[at]];
            dup = s->len == tokens[id].len && memcmp(s->data, tokens[id].data, s->len) == 0;
            at = (at + 1) & x->mask;
        }
        if (!dup) /* a repeated string keeps its first id */
            x->slots[at] = id;
    }
    return 0;
}

static int string_index_find(const StringIndex *x, const char *s, size_t n)
{
    for (size_t at = hash_bytes(s, n) & x->mask; x->slots[at] >= 0; at = (at + 1) & x->mask) {
        const BpeString *t = &x->tokens[x->slots[at]];
        if (t->len == n && memcmp(t->data, s, n) == 0)
            return x->slots[at];
    }
    return -1;
}

/* ------------------------------------------------------------ merges by pair */

static uint64_t pair_key(int left, int right)
{
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

static size_t pair_slot(const Bpe *b, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 17) & (b->pair_slots - 1);
}

/* The slot holding @p key, or the empty slot where it would go. */
static size_t pair_find_slot(const Bpe *b, uint64_t key)
{
    size_t at = pair_slot(b, key);
    while (b->pair_keys[at] != UINT64_MAX && b->pair_keys[at] != key)
        at = (at + 1) & (b->pair_slots - 1);
    return at;
}

/* The rule merge_tokens() follows: the pair's merge rank is its key. */
static int bpe_pair_merge(const void *ctx, int left, int right, PairMerge *out)
{
    const Bpe *b = ctx;
    size_t at = pair_find_slot(b, pair_key(left, right));
    if (b->pair_keys[at] == UINT64_MAX)
        return 0;
    out->key = b->pair_rank[at];
    out->merged_id = b->pair_merged[at];
    return 1;
}

/* Parses merge @p rank, "left right", into the pair table. */
static int add_merge(Bpe *b, const StringIndex *index, int rank, BpeString m, char *concat, Err *err)
{
    const char *space = memchr(m.data, ' ', m.len);
    int shown = (int)(m.len > 80 ? 80 : m.len);
    if (!space || space == m.data || space + 1 == m.data + m.len ||
        memchr(space + 1, ' ', m.len - (size_t)(space - m.data) - 1))
        return err_set(err, "merge %d '%.*s' is not two tokens separated by one space", rank, shown, m.data);
    size_t left_len = (size_t)(space - m.data), right_len = m.len - left_len - 1;
    memcpy(concat, m.data, left_len);
    memcpy(concat + left_len, space + 1, right_len);
    int left = string_index_find(index, m.data, left_len);
    int right = string_index_find(index, space + 1, right_len);
    int merged = string_index_find(index, concat, left_len + right_len);
    if (left < 0 || right < 0 || merged < 0)
        return err_set(err, "merge %d '%.*s' names a token that is not in the vocabulary", rank, shown, m.data);
    uint64_t key = pair_key(left, right);
    size_t at = pair_find_slot(b, key);
    if (b->pair_keys[at] == key)
        return err_set(err, "merge %d '%.*s' repeats merge %d", rank, shown, m.data, b->pair_rank[at]);
    b->pair_keys[at] = key;
    b->pair_rank[at] = rank;
    b->pair_merged[at] = merged;
    return 0;
}

static int build_pairs(Bpe *b, const BpeSpec *spec, const StringIndex *index, Err *err)
{
    b->pair_slots = table_size_for((size_t)spec->n_merges);
    b->pair_keys = mem_alloc_array(BPE_MEM, b->pair_slots, sizeof(uint64_t));
    b->pair_rank = mem_alloc_array(BPE_MEM, b->pair_slots, sizeof(int32_t));
    b->pair_merged = mem_alloc_array(BPE_MEM, b->pair_slots, sizeof(int32_t));
    size_t longest = 0;
    for (int i = 0; i < spec->n_merges; i++)
        longest = spec->merges[i].len > longest ? spec->merges[i].len : longest;
    char *concat = mem_alloc(BPE_MEM, longest + 1);
    if (!b->pair_keys || !b->pair_rank || !b->pair_merged || !concat) {
        mem_free(concat);
        return err_set(err, "out of memory for %d merges", spec->n_merges);
    }
    memset(b->pair_keys, 0xFF, b->pair_slots * sizeof(uint64_t));
    int rc = 0;
    for (int i = 0; i < spec->n_merges && rc == 0; i++)
        rc = add_merge(b, index, i, spec->merges[i], concat, err);
    mem_free(concat);
    return rc;
}

/* ------------------------------------------------------------ open and close */

static void find_byte_tokens(Bpe *b, const StringIndex *index)
{
    for (int byte = 0; byte < 256; byte++) {
        int cp = byte_to_code_point(byte);
        char utf8[2];
        size_t n = 0;
        if (cp < 0x80) {
            utf8[n++] = (char)cp;
        } else {
            utf8[n++] = (char)(0xC0 | (cp >> 6));
            utf8[n++] = (char)(0x80 | (cp & 0x3F));
        }
        b->byte_token[byte] = string_index_find(index, utf8, n);
    }
}

static int collect_controls(Bpe *b, const BpeSpec *spec, char *const *pieces, const int *piece_len, Err *err)
{
    int n = 0;
    for (int i = 0; spec->types && i < spec->vocab_size; i++)
        n += (spec->types[i] == BPE_TYPE_CONTROL || spec->types[i] == BPE_TYPE_USER_DEFINED) && piece_len[i] > 0;
    if (n == 0)
        return 0;
    b->controls = mem_alloc_array(BPE_MEM, (size_t)n, sizeof(BpeControl));
    if (!b->controls)
        return err_set(err, "out of memory for %d control tokens", n);
    for (int i = 0; spec->types && i < spec->vocab_size; i++) {
        if ((spec->types[i] != BPE_TYPE_CONTROL && spec->types[i] != BPE_TYPE_USER_DEFINED) || piece_len[i] == 0)
            continue;
        b->controls[b->n_controls++] = (BpeControl){.text = pieces[i], .len = (size_t)piece_len[i], .id = i};
        b->control_first[(unsigned char)pieces[i][0]] = 1;
    }
    return 0;
}

int bpe_open(Bpe *b, const BpeSpec *spec, char *const *pieces, const int *piece_len, Err *err)
{
    memset(b, 0, sizeof *b);
    b->vocab_size = spec->vocab_size;
    StringIndex index = {0};
    int rc = -1;
    if (spec->vocab_size <= 0)
        err_set(err, "the vocabulary is empty");
    else if (string_index_build(&index, spec->tokens, spec->vocab_size, err) == 0 &&
             build_pairs(b, spec, &index, err) == 0 && collect_controls(b, spec, pieces, piece_len, err) == 0 &&
             bpe_pretok_open(&b->pretok, spec->pre, err) == 0) {
        find_byte_tokens(b, &index);
        rc = 0;
    }
    mem_free(index.slots);
    if (rc)
        bpe_close(b);
    return rc;
}

void bpe_close(Bpe *b)
{
    mem_free(b->pair_keys);
    mem_free(b->pair_rank);
    mem_free(b->pair_merged);
    mem_free(b->controls);
    bpe_pretok_close(b->pretok);
    memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------ encoding */

/* Where encoded ids go, and the merge scratch reused across pieces. */
typedef struct {
    const Bpe *b;
    int *tokens;    /* [capacity] */
    int n;          /* ids written */
    size_t capacity;
    MergeWork work;
} Encoder;

/* One pre-tokenizer piece: a token per byte, then merges. */
static int encode_piece(void *ctx, const char *piece, size_t len, Err *err)
{
    Encoder *e = ctx;
    const Bpe *b = e->b;
    if (len > e->capacity - (size_t)e->n)
        return err_set(err, "the token buffer is too small");
    if (merge_work_reserve(&e->work, (int)len, err))
        return -1;
    int *ids = e->tokens + e->n;
    int n = 0;
    for (size_t i = 0; i < len; i++) {
        int id = b->byte_token[(unsigned char)piece[i]];
        if (id >= 0) /* a byte without a token is dropped (see bpe.h) */
            ids[n++] = id;
    }
    e->n += merge_tokens(&e->work, ids, n, bpe_pair_merge, b);
    return 0;
}

/* The control token that starts at text[at], the longest if several do;
 * NULL when none does. */
static const BpeControl *control_at(const Bpe *b, const char *text, size_t len, size_t at)
{
    const BpeControl *best = NULL;
    if (!b->control_first[(unsigned char)text[at]])
        return NULL;
    for (int i = 0; i < b->n_controls; i++) {
        const BpeControl *c = &b->controls[i];
        if (c->len <= len - at && memcmp(text + at, c->text, c->len) == 0 && (!best || c->len > best->len))
            best = c;
    }
    return best;
}

int bpe_encode(const Bpe *b, const char *text, size_t len, int *tokens, int *n_tokens, Err *err)
{
    Encoder e = {.b = b, .tokens = tokens, .n = 0, .capacity = len};
    *n_tokens = 0;
    if (len > (size_t)INT32_MAX / 3) {
        return err_set(err, "a text of %zu bytes is too long to encode", len);
    }
    size_t start = 0, at = 0;
    int rc = 0;
    while (at < len && rc == 0) {
        const BpeControl *c = control_at(b, text, len, at);
        if (!c) {
            at++;
            continue;
        }
        rc = bpe_pretok_split(b->pretok, text + start, at - start, encode_piece, &e, err);
        if (rc == 0)
            e.tokens[e.n++] = c->id;
        at += c->len;
        start = at;
    }
    if (rc == 0)
        rc = bpe_pretok_split(b->pretok, text + start, len - start, encode_piece, &e, err);
    merge_work_free(&e.work);
    if (rc == 0)
        *n_tokens = e.n;
    return rc;
}
