/*
 * test_idx.c - the IDX reader and the MNIST loader (engine/data/idx.c).
 *
 * Needs no Vulkan device: it uses the harness's checks without one (th_init_host), prints the
 * closing line "test_idx: N passed, M failed" and returns nonzero on any failure.
 *
 *  1. The shipped data set (VKT_DATA_DIR, else data/mnist found from the working
 *     directory or from this source file's path): 8000/2000 samples of 28x28, labels in
 *     0..9, every class at least 100 times in each split, pixels in [0, 1].
 *  2. Small IDX files written to a temporary directory, plain and gzip, read back equal.
 *  3. Malformed files: each rejected with the expected status and a message that names
 *     the file.
 *  4. Small data sets in the temporary directory: loaded, or rejected (counts that do
 *     not agree, labels >= 10, missing files, wrong shapes).
 *
 * The temporary directory comes from the platform layer (th_temp_dir).
 */
#include "data/idx.h"
#include "harness.h"
#include "platform/platform.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static char g_tmp[256];  /* the temporary directory */

#define CHECK TH_CHECK

/* ------------------------------------------------------------------------------ */
/* Writing test files                                                             */
/* ------------------------------------------------------------------------------ */

/* g_tmp/name into a static buffer (one at a time is enough here). */
static const char *tmp_path(const char *name)
{
    static char buf[2][512];
    static int which;
    which ^= 1;
    snprintf(buf[which], sizeof buf[which], "%s/%s", g_tmp, name);
    return buf[which];
}

/* Writes bytes as they are, or gzip-compressed. Returns 1 on success. */
static int write_bytes(const char *path, const void *data, size_t n, int gzip)
{
    if (gzip) {
        gzFile gz = gzopen(path, "wb9");
        if (!gz)
            return 0;
        int ok = n == 0 || gzwrite(gz, data, (unsigned)n) == (int)n;
        return gzclose(gz) == Z_OK && ok;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Reads a whole (small) file; malloc'd, caller frees. */
static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

/* An IDX image in memory: magic (0, 0, type, ndim), dims, payload; returns its length.
 * `buf` must hold 4 + 4 * ndim + payload_n bytes. */
static size_t make_idx(unsigned char *buf, unsigned type, unsigned ndim, const uint32_t *dims,
                       const unsigned char *payload, size_t payload_n)
{
    buf[0] = 0;
    buf[1] = 0;
    buf[2] = (unsigned char)type;
    buf[3] = (unsigned char)ndim;
    for (unsigned i = 0; i < ndim; i++) {
        buf[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        buf[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        buf[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        buf[7 + 4 * i] = (unsigned char)dims[i];
    }
    if (payload_n)
        memcpy(buf + 4 + 4 * ndim, payload, payload_n);
    return 4 + 4 * ndim + payload_n;
}

/* A u8 IDX file of the given dims whose byte i is fill(i); plain or gzip. */
static int write_idx(const char *path, unsigned ndim, const uint32_t *dims, int gzip,
                     unsigned char (*fill)(size_t))
{
    size_t count = 1;
    for (unsigned i = 0; i < ndim; i++)
        count *= dims[i];
    unsigned char *payload = malloc(count + 1);
    unsigned char *buf = malloc(4 + 4 * ndim + count + 1);
    int ok = payload && buf;
    if (ok) {
        for (size_t i = 0; i < count; i++)
            payload[i] = fill(i);
        size_t n = make_idx(buf, VKT_IDX_TYPE_U8, ndim, dims, payload, count);
        ok = write_bytes(path, buf, n, gzip);
    }
    free(payload);
    free(buf);
    return ok;
}

static unsigned char fill_pattern(size_t i) { return (unsigned char)((i * 37u + 11u) % 251u); }
static unsigned char fill_label(size_t i) { return (unsigned char)(i % 10); }
static unsigned char fill_zero(size_t i) { (void)i; return 0; }

/* ------------------------------------------------------------------------------ */
/* 1. The shipped data set                                                        */
/* ------------------------------------------------------------------------------ */

static int has_mnist(const char *dir)
{
    char *p = NULL;
    vkt_status st = idx_find(dir, "train-images-idx3-ubyte", &p, NULL, 0);
    free(p);
    return st == VKT_OK;
}

/* VKT_DATA_DIR, else data/mnist relative to the working directory or its parents, else
 * relative to this source file (absolute __FILE__ in CMake builds). */
static const char *find_data_dir(void)
{
    static char buf[1024];
    const char *env = getenv("VKT_DATA_DIR");
    if (env && env[0])
        return env;
    static const char *const rel[] = {"data/mnist", "../data/mnist", "../../data/mnist",
                                      "../../../data/mnist"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++)
        if (has_mnist(rel[i]))
            return rel[i];
    const char *slash = strrchr(__FILE__, '/');
    if (slash && (size_t)(slash - __FILE__) + 32 < sizeof buf) {
        snprintf(buf, sizeof buf, "%.*s/../data/mnist", (int)(slash - __FILE__), __FILE__);
        if (has_mnist(buf))
            return buf;
    }
    return "data/mnist";
}

static void check_split(const char *what, const mnist_split *s, uint32_t want_n)
{
    CHECK(s->count == want_n, "%s: %u samples, expected %u", what, s->count, want_n);
    CHECK(s->rows == 28 && s->cols == 28, "%s: images %ux%u, expected 28x28", what, s->rows,
          s->cols);
    unsigned hist[VKT_MNIST_CLASSES] = {0};
    unsigned bad_labels = 0;
    for (uint32_t i = 0; i < s->count; i++) {
        if (s->labels[i] < 0 || s->labels[i] >= VKT_MNIST_CLASSES)
            bad_labels++;
        else
            hist[s->labels[i]]++;
    }
    CHECK(bad_labels == 0, "%s: %u labels out of 0..9", what, bad_labels);
    printf("%s histogram:", what);
    for (int c = 0; c < VKT_MNIST_CLASSES; c++) {
        printf(" %u", hist[c]);
        CHECK(hist[c] >= 100, "%s: class %d has %u samples, expected at least 100", what, c,
              hist[c]);
    }
    printf("\n");
    uint64_t n = (uint64_t)s->count * s->rows * s->cols, out_of_range = 0;
    double sum = 0;
    float maxv = 0;
    for (uint64_t i = 0; i < n; i++) {
        float v = s->images[i];
        out_of_range += !(v >= 0.0f && v <= 1.0f);
        sum += v;
        maxv = v > maxv ? v : maxv;
    }
    double mean = n ? sum / (double)n : 0;
    CHECK(out_of_range == 0, "%s: %llu pixels outside [0, 1]", what,
          (unsigned long long)out_of_range);
    /* MNIST ink: mean intensity about 0.13, and full-ink pixels exist. */
    CHECK(mean > 0.08 && mean < 0.2 && maxv == 1.0f, "%s: mean pixel %.4f, max %.4f", what,
          mean, maxv);
}

static void test_shipped_data(void)
{
    const char *dir = find_data_dir();
    mnist_data m;
    char msg[1024] = "";
    vkt_status st = mnist_load(dir, &m, msg, sizeof msg);
    if (!CHECK(st == VKT_OK, "mnist_load(%s): %s: %s (set VKT_DATA_DIR)", dir,
               vkt_status_name(st), msg))
        return;
    printf("data set: %s\n", dir);
    check_split("train", &m.train, 8000);
    check_split("test", &m.test, 2000);
    mnist_free(&m);
    CHECK(m.train.images == NULL && m.test.labels == NULL, "mnist_free zeroes");
}

/* ------------------------------------------------------------------------------ */
/* 2. Round trips                                                                 */
/* ------------------------------------------------------------------------------ */

static void round_trip(const char *name, unsigned ndim, const uint32_t *dims, int gzip)
{
    const char *path = tmp_path(name);
    if (!CHECK(write_idx(path, ndim, dims, gzip, fill_pattern), "cannot write %s", path))
        return;
    idx_array idx;
    char msg[512] = "";
    vkt_status st = idx_read(path, &idx, msg, sizeof msg);
    if (!CHECK(st == VKT_OK, "%s: %s: %s", name, vkt_status_name(st), msg))
        return;
    uint64_t count = 1;
    int dims_ok = idx.ndim == ndim && idx.type == VKT_IDX_TYPE_U8;
    for (unsigned i = 0; i < ndim; i++) {
        dims_ok = dims_ok && idx.dims[i] == dims[i];
        count *= dims[i];
    }
    CHECK(dims_ok && idx.count == count, "%s: dims or count differ", name);
    size_t wrong = 0;
    for (uint64_t i = 0; i < idx.count && i < count; i++)
        wrong += idx.data[i] != fill_pattern((size_t)i);
    CHECK(wrong == 0, "%s: %zu bytes differ", name, wrong);
    idx_free(&idx);
    CHECK(idx.data == NULL && idx.count == 0, "idx_free zeroes");
}

static void test_round_trips(void)
{
    const uint32_t d3[3] = {3, 4, 5}, d1[1] = {7}, d4[4] = {2, 3, 4, 5}, big[3] = {300, 64, 64};
    round_trip("rt3", 3, d3, 0);
    round_trip("rt3.gz", 3, d3, 1);
    round_trip("rt1", 1, d1, 0);
    round_trip("rt1.gz", 1, d1, 1);
    round_trip("rt4.gz", 4, d4, 1);
    /* 1.2 MB: more than the reader's first allocation, so the buffer must grow. */
    round_trip("rtbig", 3, big, 0);
    round_trip("rtbig.gz", 3, big, 1);
    const uint32_t empty[2] = {0, 5};
    round_trip("rtempty", 2, empty, 0); /* zero elements is a valid IDX file */

    /* idx_find: the plain name first, else .gz. */
    char *p = NULL;
    CHECK(idx_find(g_tmp, "rt3", &p, NULL, 0) == VKT_OK && p &&
              strcmp(p, tmp_path("rt3")) == 0, "find rt3: %s", p ? p : "(null)");
    free(p);
    p = NULL;
    CHECK(idx_find(g_tmp, "rt4", &p, NULL, 0) == VKT_OK && p &&
              strcmp(p, tmp_path("rt4.gz")) == 0, "find rt4 -> rt4.gz: %s", p ? p : "(null)");
    free(p);
    remove(tmp_path("rt3"));
    remove(tmp_path("rt3.gz"));
    remove(tmp_path("rt1"));
    remove(tmp_path("rt1.gz"));
    remove(tmp_path("rt4.gz"));
    remove(tmp_path("rtbig"));
    remove(tmp_path("rtbig.gz"));
    remove(tmp_path("rtempty"));
}

/* ------------------------------------------------------------------------------ */
/* 3. Malformed files                                                             */
/* ------------------------------------------------------------------------------ */

/* Reads `name` (in the temp dir) and expects `want`, a message naming the file, and
 * (if not NULL) containing `needle`. */
static void expect_reject(const char *name, vkt_status want, const char *needle)
{
    const char *path = tmp_path(name);
    idx_array idx;
    char msg[1024] = "";
    vkt_status st = idx_read(path, &idx, msg, sizeof msg);
    CHECK(st == want, "%s: got %s, expected %s (%s)", name, vkt_status_name(st),
          vkt_status_name(want), msg);
    CHECK(strstr(msg, path) != NULL, "%s: message does not name the file: %s", name, msg);
    CHECK(!needle || strstr(msg, needle), "%s: message lacks \"%s\": %s", name, needle, msg);
    CHECK(idx.data == NULL && idx.ndim == 0, "%s: output not zeroed on failure", name);
    if (st != VKT_OK)
        printf("  rejected as expected: %s\n", msg);
    idx_free(&idx);
    remove(path);
}

/* Writes raw bytes (plain or gzip) as `name` and expects a rejection. */
static void reject_bytes(const char *name, const unsigned char *buf, size_t n, int gzip,
                         vkt_status want, const char *needle)
{
    if (!CHECK(write_bytes(tmp_path(name), buf, n, gzip), "cannot write %s", name))
        return;
    expect_reject(name, want, needle);
}

/* A gzip file of a valid IDX image, then `mutate` applied to its compressed bytes. */
static void reject_gzip_mutated(const char *name, void (*mutate)(unsigned char *, size_t *))
{
    const uint32_t dims[3] = {50, 28, 28};
    const char *path = tmp_path(name);
    if (!CHECK(write_idx(path, 3, dims, 1, fill_pattern), "cannot write %s", name))
        return;
    size_t n = 0;
    unsigned char *gz = read_bytes(path, &n);
    if (CHECK(gz && n > 64, "cannot read back %s", name)) {
        mutate(gz, &n);
        CHECK(write_bytes(path, gz, n, 0), "cannot rewrite %s", name);
        expect_reject(name, VKT_ERROR_FORMAT, NULL);
    }
    free(gz);
}

/* Flip bytes in the middle of the deflate data. */
static void flip_middle(unsigned char *b, size_t *n)
{
    for (size_t i = *n / 2; i < *n / 2 + 8; i++)
        b[i] ^= 0xA5;
}
/* Flip one byte of the CRC-32 in the 8-byte trailer: only the check catches it. */
static void flip_crc(unsigned char *b, size_t *n) { b[*n - 7] ^= 0x01; }
/* Cut the compressed stream in half. */
static void cut_half(unsigned char *b, size_t *n) { (void)b; *n /= 2; }

static void test_rejects(void)
{
    unsigned char buf[256], payload[64];
    memset(payload, 7, sizeof payload);
    const uint32_t d3[3] = {3, 4, 5}, d5[5] = {1, 1, 1, 1, 1};
    size_t n = make_idx(buf, 0x08, 3, d3, payload, 60);

    reject_bytes("trunc_payload", buf, n - 1, 0, VKT_ERROR_FORMAT, "truncated payload");
    reject_bytes("trunc_payload.gz", buf, n - 1, 1, VKT_ERROR_FORMAT, "truncated payload");
    reject_bytes("trunc_header", buf, 4 + 4 * 2, 0, VKT_ERROR_FORMAT, "truncated header");
    reject_bytes("trunc_magic", buf, 3, 0, VKT_ERROR_FORMAT, "truncated header");
    reject_bytes("trailing", buf, n + 4, 0, VKT_ERROR_FORMAT, "trailing");
    reject_bytes("trailing.gz", buf, n + 4, 1, VKT_ERROR_FORMAT, "trailing");
    reject_bytes("empty", buf, 0, 0, VKT_ERROR_FORMAT, "empty");
    reject_bytes("empty.gz", buf, 0, 1, VKT_ERROR_FORMAT, "empty");

    unsigned char bad[256];
    memcpy(bad, buf, n);
    bad[1] = 0x01;
    reject_bytes("bad_magic", bad, n, 0, VKT_ERROR_FORMAT, "magic");
    memcpy(bad, "PK\x03\x04", 4); /* a zip file, say */
    reject_bytes("zip_magic", bad, n, 0, VKT_ERROR_FORMAT, "magic");
    memcpy(bad, buf, n);
    bad[2] = 0x0D; /* float32: valid IDX, not supported */
    reject_bytes("type_f32", bad, n, 0, VKT_ERROR_FORMAT, "0x0D");
    bad[2] = 0x42;
    reject_bytes("type_bogus", bad, n, 0, VKT_ERROR_FORMAT, "0x42");

    n = make_idx(buf, 0x08, 5, d5, payload, 1);
    reject_bytes("five_dims", buf, n, 0, VKT_ERROR_FORMAT, "5 dimensions");
    n = make_idx(buf, 0x08, 0, d5, payload, 0);
    reject_bytes("zero_dims", buf, n, 0, VKT_ERROR_FORMAT, "0 dimensions");

    reject_gzip_mutated("corrupt_middle.gz", flip_middle);
    reject_gzip_mutated("corrupt_crc.gz", flip_crc);
    reject_gzip_mutated("corrupt_cut.gz", cut_half);

    expect_reject("does_not_exist", VKT_ERROR_IO, "cannot open");

    idx_array idx;
    CHECK(idx_read(NULL, &idx, NULL, 0) == VKT_ERROR_INVALID_ARGUMENT, "NULL path");
    CHECK(idx_read("x", NULL, NULL, 0) == VKT_ERROR_INVALID_ARGUMENT, "NULL out");
    idx_free(NULL);
    mnist_free(NULL);
}

/* ------------------------------------------------------------------------------ */
/* 4. Small data sets                                                             */
/* ------------------------------------------------------------------------------ */

#define DS_IMG_TRAIN "train-images-idx3-ubyte"
#define DS_LAB_TRAIN "train-labels-idx1-ubyte"
#define DS_IMG_TEST "t10k-images-idx3-ubyte"
#define DS_LAB_TEST "t10k-labels-idx1-ubyte"

static void remove_dataset(void)
{
    static const char *const names[4] = {DS_IMG_TRAIN, DS_LAB_TRAIN, DS_IMG_TEST, DS_LAB_TEST};
    char gz[128];
    for (int i = 0; i < 4; i++) {
        snprintf(gz, sizeof gz, "%s.gz", names[i]);
        remove(tmp_path(names[i]));
        remove(tmp_path(gz));
    }
}

/* A valid data set of 4x3 images: 20 train (gzip), 10 test (plain). */
static int write_dataset(void)
{
    remove_dataset();
    const uint32_t tr_img[3] = {20, 4, 3}, tr_lab[1] = {20};
    const uint32_t te_img[3] = {10, 4, 3}, te_lab[1] = {10};
    return write_idx(tmp_path(DS_IMG_TRAIN ".gz"), 3, tr_img, 1, fill_pattern) &&
           write_idx(tmp_path(DS_LAB_TRAIN ".gz"), 1, tr_lab, 1, fill_label) &&
           write_idx(tmp_path(DS_IMG_TEST), 3, te_img, 0, fill_pattern) &&
           write_idx(tmp_path(DS_LAB_TEST), 1, te_lab, 0, fill_label);
}

/* Loads the temp dir; expects `want` and, on failure, a message naming `file`. */
static void expect_dataset(const char *what, vkt_status want, const char *file,
                           const char *needle)
{
    mnist_data m;
    char msg[1024] = "";
    vkt_status st = mnist_load(g_tmp, &m, msg, sizeof msg);
    CHECK(st == want, "%s: got %s, expected %s (%s)", what, vkt_status_name(st),
          vkt_status_name(want), msg);
    if (want != VKT_OK) {
        CHECK(strstr(msg, file) != NULL, "%s: message does not name %s: %s", what, file, msg);
        CHECK(!needle || strstr(msg, needle), "%s: message lacks \"%s\": %s", what, needle,
              msg);
        CHECK(m.train.images == NULL && m.test.images == NULL, "%s: output not zeroed", what);
        printf("  rejected as expected: %s\n", msg);
    }
    mnist_free(&m);
}

static void test_dataset_ok(void)
{
    if (!CHECK(write_dataset(), "cannot write the small data set"))
        return;
    mnist_data m;
    char msg[1024] = "";
    vkt_status st = mnist_load(g_tmp, &m, msg, sizeof msg);
    if (!CHECK(st == VKT_OK, "small data set: %s: %s", vkt_status_name(st), msg))
        return;
    CHECK(m.train.count == 20 && m.test.count == 10 && m.train.rows == 4 &&
              m.train.cols == 3 && m.test.rows == 4 && m.test.cols == 3,
          "small data set: counts %u/%u, size %ux%u", m.train.count, m.test.count,
          m.train.rows, m.train.cols);
    size_t wrong = 0;
    for (size_t i = 0; i < 20 * 12; i++)
        wrong += m.train.images[i] != (float)fill_pattern(i) * (1.0f / 255.0f);
    for (size_t i = 0; i < 10; i++)
        wrong += m.test.labels[i] != (int32_t)(i % 10);
    CHECK(wrong == 0, "small data set: %zu values differ", wrong);
    mnist_free(&m);
}

static void test_dataset_rejects(void)
{
    const uint32_t lab19[1] = {19}, lab10[1] = {10}, img2d[2] = {10, 12},
                   img55[3] = {10, 5, 5}, img0[3] = {0, 4, 3}, lab0[1] = {0};
    CHECK(write_dataset(), "write");
    CHECK(write_idx(tmp_path(DS_LAB_TRAIN ".gz"), 1, lab19, 1, fill_label), "write");
    expect_dataset("label count mismatch", VKT_ERROR_SHAPE, DS_LAB_TRAIN ".gz", DS_IMG_TRAIN);

    CHECK(write_dataset(), "write");
    unsigned char buf[64], labels[10];
    for (int i = 0; i < 10; i++)
        labels[i] = (unsigned char)(i == 6 ? 10 : i);
    size_t n = make_idx(buf, 0x08, 1, lab10, labels, 10);
    CHECK(write_bytes(tmp_path(DS_LAB_TEST), buf, n, 0), "write");
    expect_dataset("label >= 10", VKT_ERROR_FORMAT, DS_LAB_TEST, "label 10 at index 6");

    CHECK(write_dataset(), "write");
    remove(tmp_path(DS_LAB_TEST));
    expect_dataset("missing labels", VKT_ERROR_IO, DS_LAB_TEST, ".gz");

    CHECK(write_dataset(), "write");
    CHECK(write_idx(tmp_path(DS_IMG_TEST), 2, img2d, 0, fill_zero), "write");
    expect_dataset("2-D images", VKT_ERROR_SHAPE, DS_IMG_TEST, "3 dimensions");

    CHECK(write_dataset(), "write");
    CHECK(write_idx(tmp_path(DS_IMG_TEST), 3, img55, 0, fill_zero), "write");
    expect_dataset("image size differs", VKT_ERROR_SHAPE, DS_IMG_TEST, DS_IMG_TRAIN);

    CHECK(write_dataset(), "write");
    CHECK(write_idx(tmp_path(DS_IMG_TEST), 3, img0, 0, fill_zero), "write");
    CHECK(write_idx(tmp_path(DS_LAB_TEST), 1, lab0, 0, fill_zero), "write");
    expect_dataset("no images", VKT_ERROR_SHAPE, DS_IMG_TEST, "no images");

    CHECK(write_dataset(), "write");
    CHECK(write_bytes(tmp_path(DS_IMG_TRAIN ".gz"), "\x1f\x8b\x08", 3, 0), "write");
    expect_dataset("corrupt gzip images", VKT_ERROR_FORMAT, DS_IMG_TRAIN ".gz", "gzip");

    mnist_data m;
    CHECK(mnist_load(NULL, &m, NULL, 0) == VKT_ERROR_INVALID_ARGUMENT, "NULL dir");
    remove_dataset();
}

int main(void)
{
    th_init_host("test_idx");
    th_temp_dir("test_idx", g_tmp, sizeof g_tmp);
    test_shipped_data();
    test_round_trips();
    test_rejects();
    test_dataset_ok();
    test_dataset_rejects();
    if (plat_remove_dir(g_tmp) != 0)
        CHECK(0, "temporary directory %s not empty at the end", g_tmp);
    return th_finish();
}
