/*
 * idx.c - IDX files (plain or gzip, read through zlib) and MNIST-style data sets.
 *
 * Both plain and gzip files are read through gzopen/gzread: zlib passes a file that is
 * not gzip through unchanged, so one code path reads both; the gzip magic is sniffed
 * only to say "decompressed bytes" in messages. The payload buffer grows as bytes arrive
 * (it does not trust the header's size up front), so a lying header costs no memory
 * and a truncated file is reported with the exact number of bytes found.
 */
#include "data/idx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Largest single gzread request: it takes an unsigned length and returns an int. */
#define IDX_READ_CHUNK ((uint64_t)1 << 30)
/* First payload allocation; doubled as data arrives, up to what the header says. */
#define IDX_FIRST_ALLOC ((uint64_t)1 << 20)
/* zlib's internal buffer: larger than its 8 KiB default for fewer read calls. */
#define IDX_GZ_BUFFER (256u * 1024u)

#if defined(__GNUC__) || defined(__clang__)
#define IDX_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define IDX_PRINTF(f, a)
#endif

typedef unsigned long long ull;

/* Writes the message (if there is room for one) and returns `status`. */
static vkt_status IDX_PRINTF(4, 5)
    idx_fail(char *msg, size_t msg_size, vkt_status status, const char *fmt, ...)
{
    if (msg && msg_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msg_size, fmt, ap);
        va_end(ap);
    }
    return status;
}

static uint32_t idx_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* "[8000, 28, 28]" */
static const char *idx_dims_str(const idx_array *idx, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < idx->ndim && used < size; i++) {
        int n = snprintf(buf + used, size - used, "%s%u", i ? ", " : "[", idx->dims[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

static const char *idx_type_name(uint8_t type)
{
    switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
    }
}

/* ------------------------------------------------------------------------------ */
/* Reading bytes through zlib                                                     */
/* ------------------------------------------------------------------------------ */

typedef struct idx_reader {
    const char *path;
    gzFile gz;
    const char *dec;   /* "" or, for gzip files, " decompressed": said after byte counts */
    uint64_t offset;   /* (decompressed) bytes consumed so far */
} idx_reader;

static vkt_status idx_open(idx_reader *r, const char *path, char *msg, size_t msg_size)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    /* Sniff the gzip magic with stdio: also gives a clear error for a missing file. */
    FILE *f = fopen(path, "rb");
    if (!f)
        return idx_fail(msg, msg_size, VKT_ERROR_IO, "%s: cannot open: %s", path,
                        strerror(errno));
    unsigned char magic[2] = {0, 0};
    size_t n = fread(magic, 1, 2, f);
    fclose(f);
    r->dec = (n == 2 && magic[0] == 0x1f && magic[1] == 0x8b) ? " decompressed" : "";
    errno = 0;
    r->gz = gzopen(path, "rb");
    if (!r->gz)
        return idx_fail(msg, msg_size, errno ? VKT_ERROR_IO : VKT_ERROR_OUT_OF_MEMORY,
                        "%s: cannot open: %s", path, errno ? strerror(errno) : "gzopen failed");
    gzbuffer(r->gz, IDX_GZ_BUFFER);
    return VKT_OK;
}

static void idx_close(idx_reader *r)
{
    if (r->gz)
        gzclose(r->gz);
    r->gz = NULL;
}

/* After a gzread: turns a zlib error into a status and message. */
static vkt_status idx_check_gz(idx_reader *r, char *msg, size_t msg_size)
{
    int err = Z_OK;
    const char *what = gzerror(r->gz, &err);
    if (err == Z_OK)
        return VKT_OK;
    /* zlib's message starts with the path; the one we write names it already. */
    size_t pl = strlen(r->path);
    if (what && strncmp(what, r->path, pl) == 0 && strncmp(what + pl, ": ", 2) == 0)
        what += pl + 2;
    if (err == Z_ERRNO)
        return idx_fail(msg, msg_size, VKT_ERROR_IO, "%s: read error after %llu bytes: %s",
                        r->path, (ull)r->offset, strerror(errno));
    if (err == Z_MEM_ERROR)
        return idx_fail(msg, msg_size, VKT_ERROR_OUT_OF_MEMORY, "%s: zlib is out of memory",
                        r->path);
    /* Z_DATA_ERROR (corrupt stream, bad check value), Z_BUF_ERROR (stream cut short). */
    return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                    "%s: corrupt or truncated gzip stream (zlib: %s)", r->path,
                    what ? what : "unknown error");
}

/* Reads up to `want` bytes into buf; *got < want only at the end of the file. */
static vkt_status idx_read_bytes(idx_reader *r, uint8_t *buf, uint64_t want, uint64_t *got,
                                 char *msg, size_t msg_size)
{
    *got = 0;
    while (*got < want) {
        uint64_t ask = want - *got < IDX_READ_CHUNK ? want - *got : IDX_READ_CHUNK;
        int n = gzread(r->gz, buf + *got, (unsigned)ask);
        if (n > 0) {
            *got += (uint64_t)n;
            r->offset += (uint64_t)n; /* before the check: a message counts these too */
        }
        vkt_status st = idx_check_gz(r, msg, msg_size);
        if (st != VKT_OK)
            return st;
        if (n <= 0)
            break;
    }
    return VKT_OK;
}

/* ------------------------------------------------------------------------------ */
/* Header, payload, end                                                           */
/* ------------------------------------------------------------------------------ */

/* The 4-byte magic: 0, 0, type code, number of dimensions. */
static vkt_status idx_read_magic(idx_reader *r, idx_array *idx, char *msg, size_t msg_size)
{
    uint8_t m[4];
    uint64_t got = 0;
    vkt_status st = idx_read_bytes(r, m, 4, &got, msg, msg_size);
    if (st != VKT_OK)
        return st;
    if (got == 0)
        return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                        "%s: empty file (0 bytes%s), expected an IDX header", r->path, r->dec);
    if (got < 4)
        return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                        "%s: truncated header: %llu bytes%s, the IDX magic alone needs 4",
                        r->path, (ull)got, r->dec);
    if (m[0] != 0 || m[1] != 0)
        return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                        "%s: bad magic %02x %02x %02x %02x: not an IDX file (it must start "
                        "with two zero bytes, a type code and the number of dimensions)",
                        r->path, m[0], m[1], m[2], m[3]);
    if (m[2] != VKT_IDX_TYPE_U8)
        return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                        "%s: IDX type code 0x%02X (%s) is not supported; only 0x08 "
                        "(unsigned byte) is", r->path, m[2], idx_type_name(m[2]));
    if (m[3] < 1 || m[3] > VKT_MAX_DIMS)
        return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                        "%s: %u dimensions in the IDX header; 1 to %d are supported", r->path,
                        m[3], VKT_MAX_DIMS);
    idx->type = m[2];
    idx->ndim = m[3];
    return VKT_OK;
}

/* The dimensions (big-endian uint32 each) and their product, checked for overflow. */
static vkt_status idx_read_dims(idx_reader *r, idx_array *idx, char *msg, size_t msg_size)
{
    uint8_t d[4 * VKT_MAX_DIMS];
    uint64_t want = 4ull * idx->ndim, got = 0;
    vkt_status st = idx_read_bytes(r, d, want, &got, msg, msg_size);
    if (st != VKT_OK)
        return st;
    if (got < want)
        return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                        "%s: truncated header: %u dimensions need a %llu-byte header, the "
                        "file has %llu bytes%s", r->path, idx->ndim, (ull)(4 + want),
                        (ull)(4 + got), r->dec);
    uint64_t count = 1;
    int overflow = 0;
    for (uint32_t i = 0; i < idx->ndim; i++) {
        idx->dims[i] = idx_be32(d + 4 * i);
        if (idx->dims[i] && count > UINT64_MAX / idx->dims[i])
            overflow = 1;
        count *= idx->dims[i];
    }
    char dims[96];
    if (overflow || count > (uint64_t)SIZE_MAX)
        return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                        "%s: dimensions %s are too large to hold in memory", r->path,
                        idx_dims_str(idx, dims, sizeof dims));
    idx->count = count;
    return VKT_OK;
}

/* Reads prod(dims) bytes, growing the buffer by doubling as they arrive. */
static vkt_status idx_read_payload(idx_reader *r, idx_array *idx, char *msg, size_t msg_size)
{
    uint64_t cap = idx->count < IDX_FIRST_ALLOC ? idx->count : IDX_FIRST_ALLOC;
    uint64_t got = 0;
    idx->data = malloc(cap ? (size_t)cap : 1);
    for (;;) {
        if (!idx->data)
            return idx_fail(msg, msg_size, VKT_ERROR_OUT_OF_MEMORY,
                            "%s: out of memory for %llu payload bytes", r->path, (ull)cap);
        uint64_t n = 0;
        vkt_status st = idx_read_bytes(r, idx->data + got, cap - got, &n, msg, msg_size);
        got += n;
        if (st != VKT_OK)
            return st;
        if (got < cap)
            break; /* end of file: truncated */
        if (cap == idx->count)
            return VKT_OK;
        cap = cap * 2 < idx->count ? cap * 2 : idx->count;
        uint8_t *grown = realloc(idx->data, (size_t)cap);
        if (!grown)
            free(idx->data);
        idx->data = grown;
    }
    char dims[96];
    uint64_t header = 4 + 4ull * idx->ndim;
    return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                    "%s: truncated payload: the header says %s u8, which needs %llu payload "
                    "bytes (%llu with the header), but the file has %llu (%llu with the "
                    "header)%s", r->path, idx_dims_str(idx, dims, sizeof dims),
                    (ull)idx->count, (ull)(header + idx->count), (ull)got, (ull)(header + got),
                    r->dec[0] ? ", decompressed" : "");
}

/* The file must end right after the payload. Reading on also makes zlib check the gzip
 * trailer (CRC-32 and length), which it does only when it reaches the stream's end. */
static vkt_status idx_check_end(idx_reader *r, const idx_array *idx, char *msg, size_t msg_size)
{
    uint8_t scratch[4096];
    uint64_t extra = 0, n = 0;
    do {
        vkt_status st = idx_read_bytes(r, scratch, sizeof scratch, &n, msg, msg_size);
        if (st != VKT_OK)
            return st;
        extra += n;
    } while (n == sizeof scratch);
    if (extra == 0)
        return VKT_OK;
    char dims[96];
    uint64_t expect = 4 + 4ull * idx->ndim + idx->count;
    return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                    "%s: %llu bytes of trailing data: the header says %s u8, so the file "
                    "should have %llu bytes%s, it has %llu", r->path, (ull)extra,
                    idx_dims_str(idx, dims, sizeof dims), (ull)expect, r->dec,
                    (ull)(expect + extra));
}

vkt_status idx_read(const char *path, idx_array *out, char *msg, size_t msg_size)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!path || !out)
        return idx_fail(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                        "idx_read: path and out must not be NULL");
    idx_reader r;
    vkt_status st = idx_open(&r, path, msg, msg_size);
    if (st != VKT_OK)
        return st;
    idx_array idx;
    memset(&idx, 0, sizeof idx);
    st = idx_read_magic(&r, &idx, msg, msg_size);
    if (st == VKT_OK)
        st = idx_read_dims(&r, &idx, msg, msg_size);
    if (st == VKT_OK)
        st = idx_read_payload(&r, &idx, msg, msg_size);
    if (st == VKT_OK)
        st = idx_check_end(&r, &idx, msg, msg_size);
    idx_close(&r);
    if (st != VKT_OK) {
        idx_free(&idx);
        return st;
    }
    *out = idx;
    return VKT_OK;
}

void idx_free(idx_array *idx)
{
    if (!idx)
        return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

/* ------------------------------------------------------------------------------ */
/* Finding files                                                                  */
/* ------------------------------------------------------------------------------ */

/* DIR + "/" + NAME + SUFFIX, malloc'd; an empty DIR means the current directory. */
static char *idx_join(const char *dir, const char *name, const char *suffix)
{
    size_t dl = strlen(dir), nl = strlen(name), sl = strlen(suffix);
    int sep = dl > 0 && dir[dl - 1] != '/' && dir[dl - 1] != '\\';
    char *p = malloc(dl + (size_t)sep + nl + sl + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, dl);
    if (sep)
        p[dl] = '/';
    memcpy(p + dl + sep, name, nl);
    memcpy(p + dl + sep + nl, suffix, sl + 1);
    return p;
}

static int idx_can_open(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    fclose(f);
    return 1;
}

vkt_status idx_find(const char *dir, const char *name, char **path, char *msg,
                        size_t msg_size)
{
    if (path)
        *path = NULL;
    if (!dir || !name || !path)
        return idx_fail(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                        "idx_find: dir, name and path must not be NULL");
    /* The plain file first: it is what a user who ran gunzip expects to be read. */
    char *plain = idx_join(dir, name, "");
    char *gz = idx_join(dir, name, ".gz");
    vkt_status st = VKT_OK;
    errno = 0;
    if (!plain || !gz) {
        st = idx_fail(msg, msg_size, VKT_ERROR_OUT_OF_MEMORY, "idx_find: out of memory");
    } else if (idx_can_open(plain)) {
        *path = plain;
        plain = NULL;
    } else {
        int plain_errno = errno;
        if (idx_can_open(gz)) {
            *path = gz;
            gz = NULL;
        } else {
            st = idx_fail(msg, msg_size, VKT_ERROR_IO, "%s: cannot open it nor %s: %s", plain,
                          gz, plain_errno ? strerror(plain_errno) : "not found");
        }
    }
    free(plain);
    free(gz);
    return st;
}

/* ------------------------------------------------------------------------------ */
/* MNIST-style data sets                                                          */
/* ------------------------------------------------------------------------------ */

/* Finds and reads DIR/NAME[.gz]; *path receives the path used (caller frees). */
static vkt_status mnist_read(const char *dir, const char *name, idx_array *idx, char **path,
                             char *msg, size_t msg_size)
{
    vkt_status st = idx_find(dir, name, path, msg, msg_size);
    if (st == VKT_OK)
        st = idx_read(*path, idx, msg, msg_size);
    return st;
}

/* Images must be [N, rows, cols] with N, rows, cols > 0. */
static vkt_status mnist_check_images(const char *path, const idx_array *img, char *msg,
                                     size_t msg_size)
{
    char dims[96];
    if (img->ndim != 3)
        return idx_fail(msg, msg_size, VKT_ERROR_SHAPE,
                        "%s: images must have 3 dimensions [N, rows, cols], found %s", path,
                        idx_dims_str(img, dims, sizeof dims));
    if (img->count == 0)
        return idx_fail(msg, msg_size, VKT_ERROR_SHAPE, "%s: no images (dimensions %s)",
                        path, idx_dims_str(img, dims, sizeof dims));
    if (img->count > SIZE_MAX / sizeof(float))
        return idx_fail(msg, msg_size, VKT_ERROR_OUT_OF_MEMORY,
                        "%s: %s images are too many to hold as floats", path,
                        idx_dims_str(img, dims, sizeof dims));
    return VKT_OK;
}

/* Labels must be [N] (N from the images file) with every value < VKT_MNIST_CLASSES. */
static vkt_status mnist_check_labels(const char *path, const idx_array *lab, const char *img_path,
                                     uint32_t n, char *msg, size_t msg_size)
{
    char dims[96];
    if (lab->ndim != 1)
        return idx_fail(msg, msg_size, VKT_ERROR_SHAPE,
                        "%s: labels must have 1 dimension [N], found %s", path,
                        idx_dims_str(lab, dims, sizeof dims));
    if (lab->dims[0] != n)
        return idx_fail(msg, msg_size, VKT_ERROR_SHAPE,
                        "%s: %u labels, but %s has %u images; the counts must agree", path,
                        lab->dims[0], img_path, n);
    for (uint64_t i = 0; i < lab->count; i++)
        if (lab->data[i] >= VKT_MNIST_CLASSES)
            return idx_fail(msg, msg_size, VKT_ERROR_FORMAT,
                            "%s: label %u at index %llu is out of range; expected 0..%d",
                            path, lab->data[i], (ull)i, VKT_MNIST_CLASSES - 1);
    return VKT_OK;
}

/* Bytes -> floats in [0, 1] ([N, rows*cols]); labels -> int32 [N]. */
static vkt_status mnist_convert(const idx_array *img, const idx_array *lab, mnist_split *out,
                                const char *path, char *msg, size_t msg_size)
{
    out->images = malloc((size_t)img->count * sizeof(float));
    out->labels = malloc((size_t)lab->count * sizeof(int32_t));
    if (!out->images || !out->labels)
        return idx_fail(msg, msg_size, VKT_ERROR_OUT_OF_MEMORY,
                        "%s: out of memory for %llu pixels as floats", path, (ull)img->count);
    for (uint64_t i = 0; i < img->count; i++)
        out->images[i] = (float)img->data[i] * (1.0f / 255.0f);
    for (uint64_t i = 0; i < lab->count; i++)
        out->labels[i] = lab->data[i];
    out->count = img->dims[0];
    out->rows = img->dims[1];
    out->cols = img->dims[2];
    return VKT_OK;
}

static void mnist_split_free(mnist_split *s)
{
    free(s->images);
    free(s->labels);
    memset(s, 0, sizeof *s);
}

/* Loads one split; *img_path receives the images file's path (caller frees). */
static vkt_status mnist_load_split(const char *dir, const char *images_name,
                                   const char *labels_name, mnist_split *out,
                                   char **img_path, char *msg, size_t msg_size)
{
    idx_array img, lab;
    memset(&img, 0, sizeof img);
    memset(&lab, 0, sizeof lab);
    char *lab_path = NULL;
    vkt_status st = mnist_read(dir, images_name, &img, img_path, msg, msg_size);
    if (st == VKT_OK)
        st = mnist_check_images(*img_path, &img, msg, msg_size);
    if (st == VKT_OK)
        st = mnist_read(dir, labels_name, &lab, &lab_path, msg, msg_size);
    if (st == VKT_OK)
        st = mnist_check_labels(lab_path, &lab, *img_path, img.dims[0], msg, msg_size);
    if (st == VKT_OK)
        st = mnist_convert(&img, &lab, out, *img_path, msg, msg_size);
    if (st != VKT_OK)
        mnist_split_free(out);
    idx_free(&img);
    idx_free(&lab);
    free(lab_path);
    return st;
}

vkt_status mnist_load(const char *dir, mnist_data *out, char *msg, size_t msg_size)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!dir || !out)
        return idx_fail(msg, msg_size, VKT_ERROR_INVALID_ARGUMENT,
                        "mnist_load: dir and out must not be NULL");
    char *train_path = NULL, *test_path = NULL;
    vkt_status st = mnist_load_split(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                     &out->train, &train_path, msg, msg_size);
    if (st == VKT_OK)
        st = mnist_load_split(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
                              &out->test, &test_path, msg, msg_size);
    if (st == VKT_OK && (out->test.rows != out->train.rows || out->test.cols != out->train.cols))
        st = idx_fail(msg, msg_size, VKT_ERROR_SHAPE,
                      "%s: images are %ux%u, but those of %s are %ux%u; they must agree",
                      test_path, out->test.rows, out->test.cols, train_path, out->train.rows,
                      out->train.cols);
    free(train_path);
    free(test_path);
    if (st != VKT_OK)
        mnist_free(out);
    return st;
}

void mnist_free(mnist_data *mnist)
{
    if (!mnist)
        return;
    mnist_split_free(&mnist->train);
    mnist_split_free(&mnist->test);
}
