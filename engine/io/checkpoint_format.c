/* checkpoint_format.c - the checkpoint file's bytes (docs/checkpoint.md): a
 * little-endian encoder, and a parser that checks every length and the checksums before
 * it trusts a byte, so garbage gives VKT_ERROR_FORMAT and a reason, never a crash. */
#include "io/checkpoint.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "io/bytes.h"
#include "platform/platform.h"

/* ---- encoding ------------------------------------------------------------------ */

static unsigned char *grow(ckpt_buf *b, size_t n)
{
    if (b->oom)
        return NULL;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    unsigned char *at = b->p + b->n;
    b->n += n;
    return at;
}

void ckpt_put_u32(ckpt_buf *b, uint32_t v)
{
    unsigned char *p = grow(b, 4);
    if (p)
        io_wr(p, v, 4);
}

void ckpt_put_u64(ckpt_buf *b, uint64_t v)
{
    unsigned char *p = grow(b, 8);
    if (p)
        io_wr(p, v, 8);
}

void ckpt_put_f64(ckpt_buf *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8); /* IEEE-754 binary64, stored little-endian like the integers */
    ckpt_put_u64(b, u);
}

void ckpt_put_bytes(ckpt_buf *b, const void *data, size_t n)
{
    unsigned char *p = grow(b, n);
    if (p && n)
        memcpy(p, data, n);
}

void ckpt_put_f32s(ckpt_buf *b, const float *v, uint64_t n)
{
    unsigned char *p = grow(b, (size_t)n * 4);
    for (uint64_t i = 0; p && i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        io_wr(p + 4 * i, u, 4);
    }
}

size_t ckpt_begin_section(ckpt_buf *b, const char tag[4])
{
    ckpt_put_bytes(b, tag, 4);
    ckpt_put_u32(b, 0);
    size_t at = b->n;
    ckpt_put_u64(b, 0); /* body bytes, filled by ckpt_end_section */
    return at;
}

void ckpt_end_section(ckpt_buf *b, size_t at)
{
    if (!b->oom)
        io_wr(b->p + at, b->n - at - 8, 8);
}

void ckpt_begin(ckpt_buf *b) { grow(b, CKPT_HEADER_BYTES); }

void ckpt_finish(ckpt_buf *b)
{
    if (b->oom)
        return;
    unsigned char *h = b->p;
    size_t payload = b->n - CKPT_HEADER_BYTES;
    memset(h, 0, CKPT_HEADER_BYTES);
    memcpy(h, CKPT_MAGIC, 8);
    io_wr(h + 8, CKPT_VERSION, 4);
    io_wr(h + 12, CKPT_HEADER_BYTES, 4);
    io_wr(h + 16, payload, 8);
    io_wr(h + 24, (uint32_t)crc32(0L, h + CKPT_HEADER_BYTES, (uInt)payload), 4);
    io_wr(h + 28, (uint32_t)crc32(0L, h, 28), 4);
}

void ckpt_read_f32s(const unsigned char *src, float *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u = io_rd32(src + 4 * i);
        memcpy(&dst[i], &u, 4);
    }
}

int ckpt_host_little_endian(void)
{
    const uint32_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 1;
}

/* ---- parsing ------------------------------------------------------------------- */

/* A bounds-checked reader over [p, end). */
typedef struct cursor {
    const unsigned char *p, *end;
} cursor;

static int take(cursor *c, uint64_t n, const unsigned char **out)
{
    if ((uint64_t)(c->end - c->p) < n)
        return 0;
    *out = c->p;
    c->p += n;
    return 1;
}

static int get32(cursor *c, uint32_t *v)
{
    const unsigned char *p;
    if (!take(c, 4, &p))
        return 0;
    *v = io_rd32(p);
    return 1;
}

static int get64(cursor *c, uint64_t *v)
{
    const unsigned char *p;
    if (!take(c, 8, &p))
        return 0;
    *v = io_rd64(p);
    return 1;
}

static vkt_status parse_meta(cursor *c, ckpt *k, char *why, size_t ws)
{
    uint32_t reserved;
    if (!get64(c, &k->step) || !get64(c, &k->dropout_step) || !get32(c, &k->replicas) ||
        !get32(c, &k->mode) || !get32(c, &k->batch) || !get32(c, &reserved) ||
        c->p != c->end)
        return io_bad(why, ws, "section META is not 32 bytes");
    return VKT_OK;
}

static vkt_status parse_data(cursor *c, ckpt *k, char *why, size_t ws)
{
    uint32_t reserved;
    if (!get32(c, &k->has_loader) || !get32(c, &reserved) || !get64(c, &k->epoch) ||
        !get64(c, &k->batch_index) || !get64(c, &k->seed) || c->p != c->end)
        return io_bad(why, ws, "section DATA is not 32 bytes");
    if (k->has_loader > 1)
        return io_bad(why, ws, "section DATA: loader flag %u is not 0 or 1", k->has_loader);
    return VKT_OK;
}

static vkt_status parse_norm(cursor *c, ckpt *k, char *why, size_t ws)
{
    uint64_t bits;
    if (!get64(c, &bits) || !get64(c, &k->norm_step) || c->p != c->end)
        return io_bad(why, ws, "section NORM is not 16 bytes");
    memcpy(&k->norm_rms, &bits, 8);
    if (!(k->norm_rms >= 0 && k->norm_rms <= 3.5e38)) /* NaN fails too */
        return io_bad(why, ws, "section NORM: the reference RMS %g is not a finite value >= 0",
                   k->norm_rms);
    k->has_norm = 1;
    return VKT_OK;
}

static vkt_status parse_scal(cursor *c, ckpt *k, char *why, size_t ws)
{
    uint32_t reserved;
    uint64_t bits;
    if (!get32(c, &k->scal_scaling) || !get32(c, &reserved) || !get64(c, &bits) ||
        !get32(c, &k->scal_clean) || !get32(c, &k->scal_in_a_row) ||
        !get64(c, &k->scal_skipped) || c->p != c->end)
        return io_bad(why, ws, "section SCAL is not 32 bytes");
    memcpy(&k->scal_scale, &bits, 8);
    if (k->scal_scaling > 1)
        return io_bad(why, ws, "section SCAL: scaling flag %u is not 0 or 1", k->scal_scaling);
    /* at least 1 (1 without scaling) and an fp32 value: growth stops at 2^32, but a run may
     * start above it (loss_scale 2^40) and save while it halves; NaN and inf fail */
    if (!(k->scal_scale >= 1.0 && k->scal_scale <= FLT_MAX))
        return io_bad(why, ws, "section SCAL: the loss scale %g is not a finite fp32 value of "
                      "at least 1", k->scal_scale);
    if (k->scal_in_a_row > k->scal_skipped)
        return io_bad(why, ws, "section SCAL: %u skipped steps in a row but %llu in all",
                   k->scal_in_a_row, (unsigned long long)k->scal_skipped);
    k->has_scal = 1;
    return VKT_OK;
}

static vkt_status parse_tensor(cursor *c, ckpt_tensor *t, uint32_t i, char *why, size_t ws)
{
    uint32_t len, ndim;
    const unsigned char *name;
    if (!get32(c, &len) || len == 0 || len > CKPT_NAME_MAX || !take(c, len, &name))
        return io_bad(why, ws, "parameter %u: bad or truncated name", i);
    memcpy(t->name, name, len);
    t->name[len] = '\0';
    if (strlen(t->name) != len)
        return io_bad(why, ws, "parameter %u: the name holds a NUL byte", i);
    if (!get32(c, &ndim) || ndim == 0 || ndim > VKT_MAX_DIMS)
        return io_bad(why, ws, "parameter '%s': bad or truncated rank", t->name);
    t->shape.ndim = ndim;
    uint64_t n = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        if (!get32(c, &t->shape.dims[d]) || t->shape.dims[d] == 0)
            return io_bad(why, ws, "parameter '%s': bad or truncated shape", t->name);
        n *= t->shape.dims[d]; /* at most 4 factors below 2^32: checked against count */
        if (n > ((uint64_t)1 << 40))
            return io_bad(why, ws, "parameter '%s': implausible shape", t->name);
    }
    if (!get64(c, &t->count) || t->count != n)
        return io_bad(why, ws, "parameter '%s': element count does not match its shape",
                   t->name);
    if (!take(c, n * 4, &t->data))
        return io_bad(why, ws, "parameter '%s': data truncated", t->name);
    return VKT_OK;
}

static vkt_status parse_params(cursor *c, ckpt *k, char *why, size_t ws)
{
    uint32_t reserved;
    if (!get32(c, &k->n_tensors) || !get32(c, &reserved))
        return io_bad(why, ws, "section PARM is truncated");
    /* every tensor takes at least 17 bytes: bounds the count before allocating */
    if (k->n_tensors == 0 || k->n_tensors > (uint64_t)(c->end - c->p) / 17)
        return io_bad(why, ws, "section PARM: implausible tensor count %u", k->n_tensors);
    k->tensors = calloc(k->n_tensors, sizeof *k->tensors);
    if (!k->tensors)
        return io_bad(why, ws, "out of host memory");
    for (uint32_t i = 0; i < k->n_tensors; i++) {
        vkt_status st = parse_tensor(c, &k->tensors[i], i, why, ws);
        if (st != VKT_OK)
            return st;
    }
    if (c->p != c->end)
        return io_bad(why, ws, "section PARM has %zu bytes after its tensors",
                   (size_t)(c->end - c->p));
    return VKT_OK;
}

/* The header: magic, version, sizes and both checksums. */
static vkt_status parse_header(const unsigned char *f, size_t size, ckpt *k, char *why,
                               size_t ws)
{
    if (size == 0)
        return io_bad(why, ws, "the file is empty");
    if (size < 8 || memcmp(f, CKPT_MAGIC, 8) != 0)
        return io_bad(why, ws, "not a vktrain checkpoint (bad magic)");
    if (size < CKPT_HEADER_BYTES)
        return io_bad(why, ws, "truncated: %zu bytes, shorter than the %u-byte header", size,
                   CKPT_HEADER_BYTES);
    if (io_rd32(f + 28) != (uint32_t)crc32(0L, f, 28))
        return io_bad(why, ws, "header checksum mismatch");
    k->version = io_rd32(f + 8);
    if (k->version != CKPT_VERSION)
        return io_bad(why, ws, "unsupported version %u (this build reads version %u)",
                   k->version, CKPT_VERSION);
    if (io_rd32(f + 12) != CKPT_HEADER_BYTES)
        return io_bad(why, ws, "header size %u, expected %u", io_rd32(f + 12), CKPT_HEADER_BYTES);
    uint64_t payload = io_rd64(f + 16);
    if (payload != size - CKPT_HEADER_BYTES)
        return io_bad(why, ws, "%s: the header promises %llu payload bytes, the file holds %llu",
                   payload > size - CKPT_HEADER_BYTES ? "truncated" : "trailing bytes",
                   (unsigned long long)payload,
                   (unsigned long long)(size - CKPT_HEADER_BYTES));
    uint32_t want = io_rd32(f + 24);
    uint32_t got = (uint32_t)crc32(0L, f + CKPT_HEADER_BYTES, (uInt)payload);
    if (want != got)
        return io_bad(why, ws, "checksum mismatch (stored %08x, computed %08x)", want, got);
    return VKT_OK;
}

static vkt_status parse_sections(cursor *c, ckpt *k, char *why, size_t ws)
{
    enum { REQUIRED = 4, KNOWN = 6 }; /* NORM and SCAL are optional: older files lack them */
    int seen[KNOWN] = {0};
    static const char tags[KNOWN][5] = {"META", "DATA", "PARM", "OPTM", "NORM", "SCAL"};
    while (c->p < c->end) {
        const unsigned char *tag, *body;
        uint32_t reserved;
        uint64_t len;
        if (!take(c, 4, &tag) || !get32(c, &reserved) || !get64(c, &len) ||
            !take(c, len, &body))
            return io_bad(why, ws, "a section header or body is truncated");
        cursor s = {body, body + len};
        int i = 0;
        while (i < KNOWN && memcmp(tag, tags[i], 4) != 0)
            i++;
        if (i == KNOWN)
            continue; /* a section added later in version 1: skipped */
        if (seen[i]++)
            return io_bad(why, ws, "section %s appears twice", tags[i]);
        vkt_status st = VKT_OK;
        if (i == 0)
            st = parse_meta(&s, k, why, ws);
        else if (i == 1)
            st = parse_data(&s, k, why, ws);
        else if (i == 2)
            st = parse_params(&s, k, why, ws);
        else if (i == 4)
            st = parse_norm(&s, k, why, ws);
        else if (i == 5)
            st = parse_scal(&s, k, why, ws);
        else {
            k->opt_state = body;
            k->opt_bytes = len;
        }
        if (st != VKT_OK)
            return st;
    }
    for (int i = 0; i < REQUIRED; i++)
        if (!seen[i])
            return io_bad(why, ws, "section %s is missing", tags[i]);
    return VKT_OK;
}

vkt_status ckpt_parse(void *file, size_t size, ckpt *out, char *why, size_t ws)
{
    memset(out, 0, sizeof *out);
    out->file = file;
    out->file_size = size;
    const unsigned char *f = file;
    vkt_status st = parse_header(f, size, out, why, ws);
    if (st == VKT_OK) {
        cursor c = {f + CKPT_HEADER_BYTES, f + size};
        st = parse_sections(&c, out, why, ws);
    }
    if (st != VKT_OK)
        ckpt_free(out);
    return st;
}

vkt_status ckpt_load(const char *path, ckpt *out, char *errmsg)
{
    memset(out, 0, sizeof *out);
    void *data = NULL;
    size_t size = 0;
    if (plat_read_file(path, &data, &size) != 0)
        return err_fail(errmsg, VKT_ERROR_IO, "cannot read checkpoint '%s'", path);
    char why[512];
    vkt_status st = ckpt_parse(data, size, out, why, sizeof why);
    if (st != VKT_OK)
        return err_fail(errmsg, st, "checkpoint '%s' is corrupt: %s", path, why);
    return VKT_OK;
}

void ckpt_free(ckpt *c)
{
    if (!c)
        return;
    free(c->tensors);
    free(c->file);
    memset(c, 0, sizeof *c);
}
