/* near-copies: the handout's leak check for answers in disguise (make
 * handout, make check-handout; scripts/check-handout.sh builds and runs it).
 *
 *   near-copies [--threshold T] [--show N] [--expect-flagged NAME,...] ANSWERS_DIR FILE...
 *
 * The exact-line check (scripts/check-handout.sh) finds a line of an answer
 * left in the handout; this finds a function that is an answer rewritten:
 * renamed variables, renamed calls, lines moved a little. Every file is cut
 * into C tokens with the comments, the preprocessor lines and the layout
 * taken away, and each token is normalised: every identifier becomes one
 * symbol (so renaming changes nothing), every number another, every string
 * and character literal a third; keywords, operators and punctuation stay.
 *
 * An answer is a function of ANSWERS_DIR/chNN/FILE.c (solutions/) that has
 * a LAB region (between "// LAB BEGIN(" and "// LAB STUB:") of at least
 * MIN_REGION tokens. Every function defined in the FILEs (the handout's
 * .c, .h, .cu and .cuh files) is compared with every answer twice:
 *
 *   whole:  2 x LCS(F, A) / (|F| + |A|)   F against the answer's whole body
 *   region: 2 x LCS(F, R) / (|F| + |R|)   F against the region alone
 *
 * (F and A are function bodies, from the opening brace: a signature that an
 * interface dictates, such as every store of the K/V seam, tells nothing)
 * where LCS is the longest common subsequence of the normalised tokens (the
 * tokens two sequences share in the same order; the ratio is 1 for a copy
 * and falls as code is added, removed or reordered). The similarity is the
 * larger of the two. Any function at or above the threshold (default
 * 0.80) is a near-copy: it is listed and the exit status is 1. A function
 * of exercises/chNN/FILE.c is not compared with the answer of
 * solutions/chNN/FILE.c (it IS that function with its region cut out,
 * which the exact-line check covers), and functions shorter than
 * MIN_FUNCTION tokens are left out (every short function looks like every
 * other once identifiers are one symbol).
 *
 * The closest pairs are printed either way (--show N, default 8), for a
 * reader to judge. --expect-flagged NAME,... inverts the check, for its
 * self-test: the exit status is 0 only when each function named is flagged.
 *
 * A maintainers' tool: the handout leaves it out. Plain C, no dependency. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_REGION 20   /* tokens: smaller regions are the exact-line check's */
#define MIN_FUNCTION 20 /* tokens */

/* Normalised token kinds beyond the interned keywords and punctuators. */
enum { TOK_IDENT = 1, TOK_NUMBER, TOK_STRING, TOK_CHAR, TOK_FIRST_INTERNED };

typedef struct {
    int kind;          /* normalised: TOK_IDENT..., or an interned keyword / punctuator */
    int line;          /* 1-based */
    const char *ident; /* the identifier's text (TOK_IDENT only), else NULL */
} Token;

typedef struct {
    Token *t;
    int n, cap;
} Tokens;

/* One function: its tokens, from the start of its declaration to its closing brace. */
typedef struct {
    const char *file;
    char name[128];
    int line;
    int *kinds;      /* [n] */
    int n;
    int *region;     /* [n_region] the kinds of the LAB region's tokens (answers only) */
    int n_region;
    char answer_key[256]; /* "chNN/FILE.c" of an answer or of an exercise, else "" */
} Function;

typedef struct {
    Function *f;
    int n, cap;
} Functions;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "near-copies: out of memory\n");
        exit(2);
    }
    return q;
}

/* ------------------------------------------------------------ tokens */

static const char *const KEYWORDS[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while",
    "_Bool", "size_t", "NULL"};
static const char *const PUNCT3[] = {"...", "<<=", ">>="};
static const char *const PUNCT2[] = {"->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "*=", "/=",
                                     "%=", "+=", "-=", "&=", "^=", "|=", "##"};

/* Interned keyword and punctuator kinds: a small table of strings. */
static char interned[256][4];
static int n_interned;

static int intern_punct(const char *s, size_t len)
{
    for (int i = 0; i < n_interned; i++)
        if (strlen(interned[i]) == len && memcmp(interned[i], s, len) == 0)
            return TOK_FIRST_INTERNED + i;
    if (n_interned == 256) {
        fprintf(stderr, "near-copies: too many distinct punctuators\n");
        exit(2);
    }
    memcpy(interned[n_interned], s, len);
    interned[n_interned][len] = '\0';
    return TOK_FIRST_INTERNED + n_interned++;
}

static int keyword_kind(const char *s, size_t len)
{
    for (size_t i = 0; i < sizeof KEYWORDS / sizeof KEYWORDS[0]; i++)
        if (strlen(KEYWORDS[i]) == len && memcmp(KEYWORDS[i], s, len) == 0)
            return TOK_FIRST_INTERNED + 256 + (int)i;
    return 0;
}

static void push(Tokens *ts, int kind, int line, const char *ident)
{
    if (ts->n == ts->cap) {
        ts->cap = ts->cap ? 2 * ts->cap : 1024;
        ts->t = xrealloc(ts->t, (size_t)ts->cap * sizeof *ts->t);
    }
    ts->t[ts->n++] = (Token){kind, line, ident};
}

/* Skips a literal that ends with @p quote (escapes honoured); returns the
 * position after it. */
static size_t skip_literal(const char *s, size_t i, char quote, int *line)
{
    for (i++; s[i] && s[i] != quote; i++) {
        if (s[i] == '\\' && s[i + 1])
            i++;
        if (s[i] == '\n')
            (*line)++;
    }
    return s[i] ? i + 1 : i;
}

/* Whether position @p i starts a preprocessor line (only blanks before it). */
static int at_line_start(const char *s, size_t i)
{
    while (i > 0 && (s[i - 1] == ' ' || s[i - 1] == '\t'))
        i--;
    return i == 0 || s[i - 1] == '\n';
}

static void tokenize(const char *s, Tokens *ts)
{
    int line = 1;
    for (size_t i = 0; s[i];) {
        char c = s[i];
        if (c == '\n') {
            line++, i++;
        } else if (isspace((unsigned char)c)) {
            i++;
        } else if (c == '/' && s[i + 1] == '/') {
            while (s[i] && s[i] != '\n')
                i++;
        } else if (c == '/' && s[i + 1] == '*') {
            for (i += 2; s[i] && !(s[i] == '*' && s[i + 1] == '/'); i++)
                line += s[i] == '\n';
            i += s[i] ? 2 : 0;
        } else if (c == '#' && at_line_start(s, i)) {
            for (; s[i] && s[i] != '\n'; i++)
                if (s[i] == '\\' && s[i + 1] == '\n')
                    i++, line++;
        } else if (c == '"' || c == '\'') {
            int at = line;
            i = skip_literal(s, i, c, &line);
            push(ts, c == '"' ? TOK_STRING : TOK_CHAR, at, NULL);
        } else if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)s[i + 1]))) {
            while (isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '_' ||
                   ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E' || s[i - 1] == 'p')))
                i++;
            push(ts, TOK_NUMBER, line, NULL);
        } else if (isalpha((unsigned char)c) || c == '_') {
            size_t start = i;
            while (isalnum((unsigned char)s[i]) || s[i] == '_')
                i++;
            int kw = keyword_kind(s + start, i - start);
            push(ts, kw ? kw : TOK_IDENT, line, kw ? NULL : strndup(s + start, i - start));
        } else {
            size_t len = 1;
            for (size_t k = 0; k < sizeof PUNCT3 / sizeof PUNCT3[0] && len == 1; k++)
                if (strncmp(s + i, PUNCT3[k], 3) == 0)
                    len = 3;
            for (size_t k = 0; k < sizeof PUNCT2 / sizeof PUNCT2[0] && len == 1; k++)
                if (strncmp(s + i, PUNCT2[k], 2) == 0)
                    len = 2;
            push(ts, intern_punct(s + i, len), line, NULL);
            i += len;
        }
    }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = xrealloc(NULL, cap);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0)
        if ((n += got) + 1 == cap)
            buf = xrealloc(buf, cap *= 2);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* ------------------------------------------------------------ functions */

static int is_punct(const Token *t, const char *p)
{
    return t->kind >= TOK_FIRST_INTERNED && t->kind < TOK_FIRST_INTERNED + 256 &&
           strcmp(interned[t->kind - TOK_FIRST_INTERNED], p) == 0;
}

/* Lines [begin, stub) of a file's LAB region, one pair per region. */
typedef struct {
    int begin, stub;
} Region;

static int find_regions(const char *text, Region *out, int max)
{
    int n = 0, line = 1;
    for (const char *p = text; *p; line++) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *q = p;
        while (q < p + len && (*q == ' ' || *q == '\t'))
            q++;
        if (strncmp(q, "// LAB BEGIN(", 13) == 0 && n < max)
            out[n] = (Region){line, 0};
        else if (strncmp(q, "// LAB STUB:", 12) == 0 && n < max && out[n].stub == 0 && out[n].begin > 0)
            out[n++].stub = line;
        p = end ? end + 1 : p + len;
    }
    return n;
}

static int in_region(int line, const Region *r, int n)
{
    for (int i = 0; i < n; i++)
        if (line > r[i].begin && line < r[i].stub)
            return 1;
    return 0;
}

/* "chNN/FILE.c" when @p path is DIR/chNN/FILE.c under a folder named
 * @p folder (solutions or exercises), else "". */
static void answer_key_of(const char *path, const char *folder, char *out, size_t n)
{
    out[0] = '\0';
    char pattern[64];
    snprintf(pattern, sizeof pattern, "%s/ch", folder);
    const char *p = strstr(path, pattern);
    while (p && p != path && p[-1] != '/')
        p = strstr(p + 1, pattern);
    if (p && strlen(p + strlen(folder) + 1) > 5 && p[strlen(folder) + 5] == '/')
        snprintf(out, n, "%s", p + strlen(folder) + 1);
}

/* Cuts a file into its function definitions: a '{' at depth 0 right after
 * a ')' opens one; it starts after the previous ';' or '}' at depth 0. */
static void add_functions(const char *path, const char *folder, int answers, Functions *fs)
{
    char *text = slurp(path);
    if (!text) {
        fprintf(stderr, "near-copies: cannot read %s\n", path);
        exit(2);
    }
    Tokens ts = {0};
    tokenize(text, &ts);
    Region regions[16];
    int n_regions = answers ? find_regions(text, regions, 16) : 0;
    char key[256];
    answer_key_of(path, folder, key, sizeof key);
    int depth = 0, start = 0;
    for (int i = 0; i < ts.n; i++) {
        const Token *t = &ts.t[i];
        if (is_punct(t, "{") && depth == 0 && i > 0 && is_punct(&ts.t[i - 1], ")")) {
            int open = i - 1, parens = 0; /* back to the '(' of the parameter list */
            for (; open >= 0; open--) {
                parens += is_punct(&ts.t[open], ")") - is_punct(&ts.t[open], "(");
                if (parens == 0)
                    break;
            }
            int end = i, d = 0;
            for (; end < ts.n; end++) {
                d += is_punct(&ts.t[end], "{") - is_punct(&ts.t[end], "}");
                if (d == 0)
                    break;
            }
            if (end == ts.n)
                end = ts.n - 1;
            if (fs->n == fs->cap) {
                fs->cap = fs->cap ? 2 * fs->cap : 256;
                fs->f = xrealloc(fs->f, (size_t)fs->cap * sizeof *fs->f);
            }
            Function *f = &fs->f[fs->n++];
            memset(f, 0, sizeof *f);
            f->file = path;
            f->line = ts.t[start].line;
            snprintf(f->name, sizeof f->name, "%s", open > 0 && ts.t[open - 1].ident ? ts.t[open - 1].ident : "?");
            /* The body only: a signature an interface dictates (every store
             * of the K/V seam has the same one) tells nothing. */
            f->n = end - i + 1;
            f->kinds = xrealloc(NULL, (size_t)f->n * sizeof(int));
            f->region = xrealloc(NULL, (size_t)f->n * sizeof(int));
            for (int k = i; k <= end; k++) {
                f->kinds[k - i] = ts.t[k].kind;
                if (in_region(ts.t[k].line, regions, n_regions))
                    f->region[f->n_region++] = ts.t[k].kind;
            }
            snprintf(f->answer_key, sizeof f->answer_key, "%s", key);
            i = end;
            start = end + 1;
            continue;
        }
        depth += is_punct(t, "{") - is_punct(t, "}");
        if (depth == 0 && (is_punct(t, ";") || is_punct(t, "}")))
            start = i + 1;
    }
    free(ts.t);
    free(text);
}

/* ------------------------------------------------------------ similarity */

static int lcs(const int *a, int n, const int *b, int m, int *row0, int *row1)
{
    memset(row0, 0, (size_t)(m + 1) * sizeof(int));
    for (int i = 1; i <= n; i++) {
        row1[0] = 0;
        for (int j = 1; j <= m; j++)
            row1[j] = a[i - 1] == b[j - 1] ? row0[j - 1] + 1 : row0[j] > row1[j - 1] ? row0[j] : row1[j - 1];
        int *swap = row0;
        row0 = row1;
        row1 = swap;
    }
    return row0[m];
}

/* 2 x LCS / (n + m), or 0 when even a full match could not reach @p floor. */
static double dice(const int *a, int n, const int *b, int m, double floor, int *row0, int *row1)
{
    int shorter = n < m ? n : m;
    if (n + m == 0 || 2.0 * shorter / (n + m) < floor)
        return 0.0;
    return 2.0 * lcs(a, n, b, m, row0, row1) / (n + m);
}

typedef struct {
    double sim;
    const Function *f, *a;
    const char *how;
} Pair;

static int by_similarity(const void *x, const void *y)
{
    double a = ((const Pair *)x)->sim, b = ((const Pair *)y)->sim;
    return (a < b) - (a > b);
}

static void collect_answers(const char *dir, Functions *answers)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "near-copies: cannot open %s\n", dir);
        exit(2);
    }
    struct dirent *e;
    char **names = NULL;
    int n = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "ch", 2) != 0)
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        DIR *s = opendir(sub);
        if (!s)
            continue;
        struct dirent *f;
        while ((f = readdir(s))) {
            size_t len = strlen(f->d_name);
            if (len < 3 || strcmp(f->d_name + len - 2, ".c") != 0)
                continue;
            names = xrealloc(names, (size_t)(n + 1) * sizeof *names);
            names[n] = xrealloc(NULL, strlen(sub) + len + 2);
            sprintf(names[n++], "%s/%s", sub, f->d_name);
        }
        closedir(s);
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        add_functions(names[i], "solutions", 1, answers);
    /* Only functions with a region big enough to tell something. */
    int kept = 0;
    for (int i = 0; i < answers->n; i++)
        if (answers->f[i].n_region >= MIN_REGION)
            answers->f[kept++] = answers->f[i];
    answers->n = kept;
}

static int flagged_name(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, name, n) == 0)
            return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    double threshold = 0.80;
    int show = 8, i = 1;
    const char *expect = NULL;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--threshold") == 0)
            threshold = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--show") == 0)
            show = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--expect-flagged") == 0)
            expect = argv[i + 1];
        else
            break;
    }
    if (argc - i < 1 || threshold <= 0.0 || threshold > 1.0) {
        fprintf(stderr, "usage: near-copies [--threshold T] [--show N] [--expect-flagged NAME,...] ANSWERS_DIR "
                        "FILE...\n");
        return 2;
    }
    Functions answers = {0}, handout = {0};
    collect_answers(argv[i], &answers);
    if (answers.n == 0) {
        fprintf(stderr, "near-copies: no function with a LAB region of %d tokens or more in %s\n", MIN_REGION,
                argv[i]);
        return 2;
    }
    for (int k = i + 1; k < argc; k++)
        add_functions(argv[k], "exercises", 0, &handout);
    int longest = 1;
    for (int k = 0; k < handout.n; k++)
        longest = handout.f[k].n > longest ? handout.f[k].n : longest;
    int *row0 = xrealloc(NULL, (size_t)(longest + 1) * sizeof(int));
    int *row1 = xrealloc(NULL, (size_t)(longest + 1) * sizeof(int));
    Pair *best = xrealloc(NULL, (size_t)(handout.n + 1) * sizeof *best); /* each function's closest answer */
    int n_best = 0, compared = 0;
    double floor = threshold < 0.5 ? threshold : 0.5; /* pairs that cannot reach it are not worth the LCS */
    for (int k = 0; k < handout.n; k++) {
        const Function *f = &handout.f[k];
        if (f->n < MIN_FUNCTION)
            continue;
        compared++;
        Pair p = {0.0, f, NULL, ""};
        for (int a = 0; a < answers.n; a++) {
            const Function *ans = &answers.f[a];
            if (f->answer_key[0] && strcmp(f->answer_key, ans->answer_key) == 0)
                continue; /* the exercise of this very answer */
            /* lcs() needs the longer sequence second (its rows are m + 1 long). */
            double whole = dice(ans->kinds, ans->n, f->kinds, f->n, floor, row0, row1);
            double region = dice(ans->region, ans->n_region, f->kinds, f->n, floor, row0, row1);
            if (whole > p.sim)
                p = (Pair){whole, f, ans, "whole"};
            if (region > p.sim)
                p = (Pair){region, f, ans, "region"};
        }
        if (p.a)
            best[n_best++] = p;
    }
    qsort(best, (size_t)n_best, sizeof *best, by_similarity);
    int n_flagged = 0, expected_found = 0;
    for (int k = 0; k < n_best && best[k].sim >= threshold; k++) {
        n_flagged++;
        expected_found += expect && flagged_name(expect, best[k].f->name);
    }
    printf("near-copies: %d functions compared with the %d answers whose LAB region has %d tokens or more "
           "(identifiers, numbers and literals normalised); a function %.2f or more similar to one is a "
           "near-copy\n", compared, answers.n, MIN_REGION, threshold);
    printf("near-copies: the closest pairs (similarity, the function, the answer it is closest to):\n");
    for (int k = 0; k < n_best && k < (show > n_flagged ? show : n_flagged); k++)
        printf("  %.2f %s %s:%d %s()  ~  %s %s()\n", best[k].sim, best[k].sim >= threshold ? "NEAR-COPY" : "ok",
               best[k].f->file, best[k].f->line, best[k].f->name, best[k].a->file, best[k].a->name);
    if (expect) {
        int wanted = 1;
        for (const char *p = expect; *p; p++)
            wanted += *p == ',';
        if (expected_found < wanted) {
            fprintf(stderr, "near-copies: self-test FAIL: expected %s all flagged, %d of %d were\n", expect,
                    expected_found, wanted);
            return 1;
        }
        printf("near-copies: self-test: %s flagged, as they must be\n", expect);
        return 0;
    }
    if (n_flagged) {
        fprintf(stderr, "near-copies: %d function%s of the handout %s an answer rewritten (above): restructure "
                        "(call the student's function, or do the job another way)\n",
                n_flagged, n_flagged == 1 ? "" : "s", n_flagged == 1 ? "is" : "are");
        return 1;
    }
    printf("near-copies: no function of the handout is a near-copy of an answer\n");
    return 0;
}
