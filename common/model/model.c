#include "model.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "infile.h"
#include "mem.h"
#include "model_gguf.h"

#define LEGACY_HEADER_BYTES 28u
#define AK42_HEADER_BYTES 256u
#define AK42_MAGIC 0x616b3432u /* "ak42" read as a little-endian uint32 */

/* Limits that no real Llama checkpoint reaches; anything above them is a
 * corrupt header, and rejecting it early keeps every size product far from
 * overflowing 64 bits. */
#define MAX_DIM (1 << 16)
#define MAX_HIDDEN (1 << 18)
#define MAX_LAYERS MODEL_MAX_LAYERS
#define MAX_HEADS 1024
#define MAX_VOCAB (1 << 20)
#define MAX_SEQ_LEN (1 << 20)

size_t model_kv_bytes_per_token(const ModelConfig *c, size_t elem_bytes)
{
    return 2u * (size_t)c->n_layers * (size_t)c->n_kv_heads * (size_t)model_head_dim(c) * elem_bytes;
}

static int check_range(const char *name, int value, int max, Err *err)
{
    if (value <= 0)
        return err_set(err, "%s is %d; it must be positive", name, value);
    if (value > max)
        return err_set(err, "%s is %d; more than %d is not a plausible model", name, value, max);
    return 0;
}

int model_config_validate(const ModelConfig *c, Err *err)
{
    if (check_range("dim", c->dim, MAX_DIM, err) || check_range("hidden_dim", c->hidden_dim, MAX_HIDDEN, err) ||
        check_range("n_layers", c->n_layers, MAX_LAYERS, err) || check_range("n_heads", c->n_heads, MAX_HEADS, err) ||
        check_range("n_kv_heads", c->n_kv_heads, MAX_HEADS, err) ||
        check_range("vocab_size", c->vocab_size, MAX_VOCAB, err) ||
        check_range("seq_len", c->seq_len, MAX_SEQ_LEN, err))
        return -1;
    if (c->dim % c->n_heads != 0)
        return err_set(err, "n_heads (%d) does not divide dim (%d)", c->n_heads, c->dim);
    if (model_head_dim(c) % 2 != 0)
        return err_set(err, "head size %d is odd; RoPE rotates pairs of values", model_head_dim(c));
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads != 0)
        return err_set(err, "n_heads (%d) is not a multiple of n_kv_heads (%d)", c->n_heads, c->n_kv_heads);
    if (c->vocab_size < 3)
        return err_set(err, "vocab_size is %d; the vocabulary needs at least <unk>, BOS and EOS", c->vocab_size);
    return 0;
}

static int32_t read_i32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* What the first bytes of a file say about the rest of it. */
typedef struct {
    ModelConfig cfg;
    ModelFormat format;
    int shared_classifier;
    size_t header_bytes;
} Header;

static int parse_header(const unsigned char *b, size_t n, Header *h, Err *err)
{
    if (n < LEGACY_HEADER_BYTES)
        return err_set(err, "file has %zu bytes, too short for a checkpoint header", n);
    const unsigned char *vals = b;
    if ((uint32_t)read_i32(b) == AK42_MAGIC) {
        if (n < AK42_HEADER_BYTES)
            return err_set(err, "ak42 file has %zu bytes, too short for its 256-byte header", n);
        int version = read_i32(b + 4);
        if (version != 1)
            return err_set(err, "ak42 version %d is not supported (only version 1, fp32)", version);
        vals = b + 8;
        h->format = MODEL_FORMAT_AK42_V1;
        h->header_bytes = AK42_HEADER_BYTES;
        h->shared_classifier = b[36] != 0;
    } else {
        h->format = MODEL_FORMAT_LEGACY;
        h->header_bytes = LEGACY_HEADER_BYTES;
    }
    ModelConfig *c = &h->cfg;
    c->dim = read_i32(vals);
    c->hidden_dim = read_i32(vals + 4);
    c->n_layers = read_i32(vals + 8);
    c->n_heads = read_i32(vals + 12);
    c->n_kv_heads = read_i32(vals + 16);
    c->vocab_size = read_i32(vals + 20);
    c->seq_len = read_i32(vals + 24);
    if (h->format == MODEL_FORMAT_LEGACY) {
        /* llama2.c's legacy convention: a negative vocab_size flags an
         * unshared classifier stored after the RoPE tables. */
        h->shared_classifier = c->vocab_size > 0;
        if (c->vocab_size < 0 && c->vocab_size != INT32_MIN)
            c->vocab_size = -c->vocab_size;
    }
    return model_config_validate(c, err);
}

/* Number of fp32 values in the file after the header. */
static uint64_t payload_floats(const Header *h)
{
    const ModelConfig *c = &h->cfg;
    uint64_t L = (uint64_t)c->n_layers, dim = (uint64_t)c->dim, kv = (uint64_t)model_kv_dim(c);
    uint64_t hid = (uint64_t)c->hidden_dim, vocab = (uint64_t)c->vocab_size;
    uint64_t n = vocab * dim                     /* embeddings */
                 + 2 * L * dim                   /* rms_att, rms_ffn */
                 + 2 * L * dim * dim             /* wq, wo */
                 + 2 * L * kv * dim              /* wk, wv */
                 + 3 * L * hid * dim             /* w1, w2, w3 */
                 + dim;                          /* rms_final */
    if (!h->shared_classifier)
        n += vocab * dim;
    if (h->format == MODEL_FORMAT_LEGACY)
        n += (uint64_t)c->seq_len * (uint64_t)model_head_dim(c); /* two RoPE tables of seq_len x head/2 */
    return n;
}

/* f32 views of the stacked tensors of a llama2.c payload. */
typedef struct {
    const float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *cls;
} Stacked;

static void locate_stacked(const Header *h, const float *p, Stacked *t)
{
    const ModelConfig *c = &h->cfg;
    size_t L = (size_t)c->n_layers, dim = (size_t)c->dim, kv = (size_t)model_kv_dim(c);
    size_t hid = (size_t)c->hidden_dim, vocab = (size_t)c->vocab_size;
    if (h->format == MODEL_FORMAT_LEGACY) {
        t->emb = p;       p += vocab * dim;
        t->rms_att = p;   p += L * dim;
        t->wq = p;        p += L * dim * dim;
        t->wk = p;        p += L * kv * dim;
        t->wv = p;        p += L * kv * dim;
        t->wo = p;        p += L * dim * dim;
        t->rms_ffn = p;   p += L * dim;
        t->w1 = p;        p += L * hid * dim;
        t->w2 = p;        p += L * dim * hid;
        t->w3 = p;        p += L * hid * dim;
        t->rms_final = p; p += dim;
        p += (size_t)c->seq_len * (size_t)model_head_dim(c); /* legacy RoPE tables: unused, we compute RoPE */
    } else {
        t->rms_att = p;   p += L * dim;
        t->rms_ffn = p;   p += L * dim;
        t->rms_final = p; p += dim;
        t->emb = p;       p += vocab * dim;
        t->wq = p;        p += L * dim * dim;
        t->wk = p;        p += L * kv * dim;
        t->wv = p;        p += L * kv * dim;
        t->wo = p;        p += L * dim * dim;
        t->w1 = p;        p += L * hid * dim;
        t->w2 = p;        p += L * dim * hid;
        t->w3 = p;        p += L * hid * dim;
    }
    t->cls = h->shared_classifier ? t->emb : p;
}

/* Points every tensor view at its place in the payload: layer l of a
 * stacked [n_layers][rows][cols] tensor starts l * rows * cols floats in. */
static void assign_weights(Model *m, const Header *h, const float *p)
{
    const ModelConfig *c = &h->cfg;
    int dim = c->dim, kv = model_kv_dim(c), hid = c->hidden_dim;
    Stacked t;
    locate_stacked(h, p, &t);
    ModelWeights *w = &m->w;
    w->token_embedding = weight_matrix(t.emb, WEIGHT_F32, c->vocab_size, dim);
    for (int l = 0; l < c->n_layers; l++) {
        LayerWeights *lw = &w->layers[l];
        size_t L = (size_t)l;
        lw->rms_att = t.rms_att + L * dim;
        lw->wq = weight_matrix(t.wq + L * dim * dim, WEIGHT_F32, dim, dim);
        lw->wk = weight_matrix(t.wk + L * kv * dim, WEIGHT_F32, kv, dim);
        lw->wv = weight_matrix(t.wv + L * kv * dim, WEIGHT_F32, kv, dim);
        lw->wo = weight_matrix(t.wo + L * dim * dim, WEIGHT_F32, dim, dim);
        lw->rms_ffn = t.rms_ffn + L * dim;
        lw->w1 = weight_matrix(t.w1 + L * hid * dim, WEIGHT_F32, hid, dim);
        lw->w2 = weight_matrix(t.w2 + L * dim * hid, WEIGHT_F32, dim, hid);
        lw->w3 = weight_matrix(t.w3 + L * hid * dim, WEIGHT_F32, hid, dim);
    }
    w->rms_final = t.rms_final;
    w->wcls = weight_matrix(t.cls, WEIGHT_F32, c->vocab_size, dim);
}

int model_open_image(Model *m, const void *image, size_t bytes, Err *err)
{
    memset(m, 0, sizeof *m);
    if (gguf_has_magic(image, bytes)) {
        if (gguf_parse_image(&m->gguf, image, bytes, err))
            return -1;
        if (model_from_gguf(m, err)) {
            model_free(m);
            return -1;
        }
        return 0;
    }
    Header h;
    if (parse_header(image, bytes, &h, err))
        return -1;
    uint64_t want = h.header_bytes + 4 * payload_floats(&h);
    if (bytes < want)
        return err_set(err, "truncated: the header implies %llu bytes, the file has %zu",
                       (unsigned long long)want, bytes);
    if (bytes > want)
        return err_set(err, "oversized: the header implies %llu bytes, the file has %zu (%llu extra)",
                       (unsigned long long)want, bytes, (unsigned long long)(bytes - want));
    m->cfg = h.cfg;
    m->rope_theta = MODEL_DEFAULT_ROPE_THETA; /* llama2.c files do not store them */
    m->rms_eps = MODEL_DEFAULT_RMS_EPS;
    m->format = h.format;
    m->shared_classifier = h.shared_classifier;
    uint64_t rope_floats = h.format == MODEL_FORMAT_LEGACY ? (uint64_t)h.cfg.seq_len * model_head_dim(&h.cfg) : 0;
    m->weight_bytes = (size_t)(4 * (payload_floats(&h) - rope_floats));
    m->weight_f32_bytes = m->weight_bytes;
    m->stored_types = 1u << WEIGHT_F32;
    assign_weights(m, &h, (const float *)((const char *)image + h.header_bytes));
    return 0;
}

/* Whether a file is meant as GGUF: it starts with the magic, or its name
 * ends in .gguf (so that a damaged one hears what is wrong with it as a
 * GGUF file). An unreadable file is left to the llama2.c path, which says
 * why. */
static int file_is_gguf(const char *path)
{
    size_t len = strlen(path);
    if (len >= 5 && strcmp(path + len - 5, ".gguf") == 0)
        return 1;
    Err ignored = {{0}};
    size_t size;
    int fd = infile_open(path, UINT64_MAX, &size, &ignored);
    if (fd < 0)
        return 0;
    unsigned char head[4];
    int yes = size >= 4 && read(fd, head, 4) == 4 && gguf_has_magic(head, 4);
    close(fd);
    return yes;
}

int model_read_config(const char *path, ModelConfig *cfg, Err *err)
{
    if (file_is_gguf(path)) {
        /* The shape is spread over metadata keys and tensor infos: open it
         * properly (mapping only; nothing is read that is not needed). */
        Model m;
        if (model_load(&m, path, err))
            return -1;
        *cfg = m.cfg;
        model_free(&m);
        return 0;
    }
    size_t size;
    int fd = infile_open(path, UINT64_MAX, &size, err);
    if (fd < 0)
        return -1;
    unsigned char buf[AK42_HEADER_BYTES];
    size_t n = size < sizeof buf ? size : sizeof buf;
    int read_failed = infile_read_exact(fd, buf, n, path, err);
    close(fd);
    Header h;
    if (read_failed)
        return -1;
    if (parse_header(buf, n, &h, err))
        return err_prefix(err, "%s", path);
    *cfg = h.cfg;
    return 0;
}

int model_load(Model *m, const char *path, Err *err)
{
    memset(m, 0, sizeof *m);
    if (file_is_gguf(path)) {
        if (gguf_open(&m->gguf, path, err))
            return -1;
        if (model_from_gguf(m, err)) {
            model_free(m);
            return err_prefix(err, "%s", path);
        }
        return 0;
    }
    size_t size;
    int fd = infile_open(path, UINT64_MAX, &size, err);
    if (fd < 0)
        return -1;
    if (size < LEGACY_HEADER_BYTES) {
        close(fd);
        err_set(err, "file has %zu bytes, too short for a checkpoint header", size);
        return err_prefix(err, "%s", path);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return err_set(err, "%s: cannot map: %s", path, strerror(errno));
    if (model_open_image(m, map, size, err)) {
        munmap(map, size);
        return err_prefix(err, "%s", path);
    }
    m->map = map;
    m->map_bytes = size;
    mem_track(MEM_WEIGHTS, MEM_HOST, size);
    return 0;
}

void model_free(Model *m)
{
    mem_free(m->dequantized);
    gguf_close(&m->gguf);
    if (m->map) {
        munmap(m->map, m->map_bytes);
        mem_untrack(MEM_WEIGHTS, MEM_HOST, m->map_bytes);
    }
    memset(m, 0, sizeof *m);
}

/* Every matrix view of a model, so that a loop can visit them all. */
static int matrix_views(Model *m, WeightMatrix **views, int max)
{
    int n = 0;
    views[n++] = &m->w.token_embedding;
    for (int l = 0; l < m->cfg.n_layers && n + 7 <= max; l++) {
        LayerWeights *lw = &m->w.layers[l];
        WeightMatrix *mine[7] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w1, &lw->w2, &lw->w3};
        for (int i = 0; i < 7; i++)
            views[n++] = mine[i];
    }
    if (!m->shared_classifier)
        views[n++] = &m->w.wcls;
    return n;
}

#define MAX_VIEWS (2 + 7 * MODEL_MAX_LAYERS)

int model_dequantize(Model *m, Err *err)
{
    WeightMatrix *views[MAX_VIEWS];
    int n = matrix_views(m, views, MAX_VIEWS);
    size_t floats = 0;
    for (int i = 0; i < n; i++)
        if (views[i]->type != WEIGHT_F32)
            floats += (size_t)views[i]->rows * (size_t)views[i]->cols;
    if (floats == 0)
        return 0;
    float *buf = mem_alloc_array(MEM_WEIGHTS, floats, sizeof(float));
    if (!buf)
        return err_set(err, "out of memory for %zu bytes of f32 weights (--weight-dtype f32)", floats * sizeof(float));
    float *at = buf;
    for (int i = 0; i < n; i++) {
        WeightMatrix *w = views[i];
        if (w->type == WEIGHT_F32)
            continue;
        size_t stored = (size_t)w->rows * w->row_bytes;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < w->rows; r++)
            weight_dequantize_row(w, r, at + (size_t)r * (size_t)w->cols);
        *w = weight_matrix(at, WEIGHT_F32, w->rows, w->cols);
        at += (size_t)w->rows * (size_t)w->cols;
        m->weight_bytes += (size_t)w->rows * (size_t)w->cols * sizeof(float) - stored;
    }
    if (m->shared_classifier)
        m->w.wcls = m->w.token_embedding;
    m->dequantized = buf;
    return 0;
}

const char *model_weight_types(const Model *m, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int t = 0; t < WEIGHT_TYPE_COUNT; t++)
        if (m->stored_types & (1u << t))
            at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "%s%s", at ? " + " : "", weight_type_name((WeightType)t));
    if (m->dequantized && at < n)
        snprintf(buf + at, n - at, " (dequantized to f32)");
    return buf;
}
