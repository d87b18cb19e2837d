/* demo-page: the page of `make demo`, one self-contained HTML file.
 *
 *   build/demo-page [--template FILE] --out FILE TRACE...
 *
 * Copies the template (tools/demo-page.html: the page's styles and script,
 * found in the project unless --template says otherwise) and puts every
 * trace (`--trace FILE` of chapters 3, 4 and those built on them; trace.h)
 * where the template says `<!-- kvlab:traces -->`, each in a
 * `<script type="application/x-ndjson" class="kvlab-trace">` element. The
 * page reads them from there: no network, no second file, it opens from
 * disk. Traces of the same requests and budget are drawn side by side;
 * the page groups them.
 *
 * A trace is copied, not parsed: the tool checks that each file starts
 * with a trace's first line and escapes every '<' as \u003c (valid inside
 * JSON strings, and a '<' can be nowhere else in JSON), so that no text in
 * a trace (a prompt, say) can end the script element early. */
#define _GNU_SOURCE /* getopt_long */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "assets.h"
#include "infile.h"
#include "mem.h"
#include "outfile.h"

#define PROGRAM "demo-page"
#define PLACEHOLDER "<!-- kvlab:traces -->"
#define TRACE_START "{\"trace\":\"kvlab\""
/* A trace of the demo is a few hundred KB; a page must stay openable. */
#define MAX_TRACE_BYTES (64u << 20)
#define MAX_TEMPLATE_BYTES (1u << 20)
#define MAX_TRACES 32

typedef struct {
    const char *template_path; /* NULL: tools/demo-page.html of the project */
    const char *out_path;
    const char *const *traces; /* [n_traces] */
    int n_traces;
} PageOptions;

static void usage(void)
{
    printf("Usage: %s [--template FILE] --out FILE TRACE...\n"
           "Writes one self-contained HTML page (styles, script and data inline) that draws the KV memory of the\n"
           "traces (--trace FILE of build/ch03-batching, build/ch04-paged and the chapters built on them) step by\n"
           "step; `make demo` writes build/demo-out/index.html with it.\n\n"
           "  --template FILE  the page's template (default: tools/demo-page.html of the project)\n"
           "  --out FILE       the page to write\n"
           "  --help           show this help\n", PROGRAM);
}

/* 0: run, 1: help printed, -1: error. */
static int parse_options(int argc, char **argv, PageOptions *o, Err *err)
{
    enum { O_TEMPLATE = 1000, O_OUT, O_HELP };
    static const struct option longopts[] = {{"template", required_argument, NULL, O_TEMPLATE},
                                             {"out", required_argument, NULL, O_OUT},
                                             {"help", no_argument, NULL, O_HELP},
                                             {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":h", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 'h': case O_HELP: usage(); return 1;
        case ':': return err_set(err, "option '%s' needs a value (see --help)", argv[optind - 1]);
        case '?': return err_set(err, "unknown option '%s' (see --help)", argv[optind - 1]);
        case O_TEMPLATE: o->template_path = optarg; break;
        case O_OUT: o->out_path = optarg; break;
        }
    }
    if (!o->out_path)
        return err_set(err, "--out FILE is needed (see --help)");
    o->traces = (const char *const *)argv + optind;
    o->n_traces = argc - optind;
    if (o->n_traces < 1)
        return err_set(err, "no trace given (write one with --trace FILE of build/ch03-batching or build/ch04-paged)");
    if (o->n_traces > MAX_TRACES)
        return err_set(err, "%d traces: at most %d fit a page", o->n_traces, MAX_TRACES);
    return outfile_check("--out", o->out_path, err);
}

/* The whole of a regular file, NUL-terminated (charged to activations). */
static char *read_file(const char *path, size_t limit, size_t *size, Err *err)
{
    int fd = infile_open(path, limit, size, err);
    if (fd < 0)
        return NULL;
    char *text = mem_alloc(MEM_ACTIVATIONS, *size + 1);
    if (!text) {
        close(fd);
        err_set(err, "%s: out of memory for %zu bytes", path, *size);
        return NULL;
    }
    int rc = infile_read_exact(fd, text, *size, path, err);
    close(fd);
    if (rc) {
        mem_free(text);
        return NULL;
    }
    text[*size] = '\0';
    return text;
}

/* A trace, in its script element: its bytes, each '<' as \u003c. */
static void write_trace(FILE *f, const char *path, const char *text, size_t size)
{
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    fprintf(f, "<script type=\"application/x-ndjson\" class=\"kvlab-trace\" data-file=\"");
    for (const char *p = name; *p; p++) /* the file's name, as an attribute */
        if (*p == '"' || *p == '<' || *p == '>' || *p == '&')
            fprintf(f, "&#%d;", *p);
        else
            fputc(*p, f);
    fprintf(f, "\">\n");
    for (size_t i = 0; i < size; i++)
        if (text[i] == '<')
            fputs("\\u003c", f);
        else
            fputc(text[i], f);
    fprintf(f, "</script>\n");
}

/* Refuses what is not a trace: an empty file, another JSON file, a file
 * with a NUL byte (no text line holds one). */
static int check_trace(const char *path, const char *text, size_t size, Err *err)
{
    if (size < strlen(TRACE_START) || strncmp(text, TRACE_START, strlen(TRACE_START)) != 0)
        return err_set(err, "%s: not a kvlab trace (its first line does not start with %s)", path, TRACE_START);
    if (memchr(text, '\0', size))
        return err_set(err, "%s: not a kvlab trace (it holds a NUL byte)", path);
    return 0;
}

static int write_page(const PageOptions *o, const char *tpl, char **texts, const size_t *sizes, Err *err)
{
    const char *at = strstr(tpl, PLACEHOLDER);
    OutFile out;
    if (outfile_open(&out, "--out", o->out_path, err))
        return -1;
    fwrite(tpl, 1, (size_t)(at - tpl), out.f);
    for (int i = 0; i < o->n_traces; i++)
        write_trace(out.f, o->traces[i], texts[i], sizes[i]);
    fputs(at + strlen(PLACEHOLDER), out.f);
    return outfile_commit(&out, err);
}

static int build_page(const PageOptions *o, Err *err)
{
    char found[PATH_MAX];
    const char *tpl_path = o->template_path;
    if (!tpl_path) {
        if (assets_find_project_file("tools/demo-page.html", found, sizeof found))
            return err_set(err, "no --template given and tools/demo-page.html not found");
        tpl_path = found;
    }
    size_t tpl_size, sizes[MAX_TRACES];
    char *texts[MAX_TRACES] = {0};
    char *tpl = read_file(tpl_path, MAX_TEMPLATE_BYTES, &tpl_size, err);
    int rc = tpl ? 0 : -1;
    const char *at = tpl ? strstr(tpl, PLACEHOLDER) : NULL;
    if (rc == 0 && (!at || strstr(at + 1, PLACEHOLDER)))
        rc = err_set(err, "%s: the template must hold %s exactly once", tpl_path, PLACEHOLDER);
    for (int i = 0; rc == 0 && i < o->n_traces; i++) {
        texts[i] = read_file(o->traces[i], MAX_TRACE_BYTES, &sizes[i], err);
        rc = texts[i] ? check_trace(o->traces[i], texts[i], sizes[i], err) : -1;
    }
    if (rc == 0)
        rc = write_page(o, tpl, texts, sizes, err);
    for (int i = 0; i < o->n_traces; i++)
        mem_free(texts[i]);
    mem_free(tpl);
    return rc;
}

int main(int argc, char **argv)
{
    PageOptions o;
    Err err = {{0}};
    int parsed = parse_options(argc, argv, &o, &err);
    if (parsed > 0)
        return 0;
    if (parsed < 0 || build_page(&o, &err)) {
        fprintf(stderr, "%s: error: %s\n", PROGRAM, err.msg);
        return 1;
    }
    return 0;
}
