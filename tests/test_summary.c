/*
 * test_summary.c - summaries (engine/io/crc32c.c, engine/io/summary.c).
 *
 * Needs no Vulkan device: it uses the harness's checks without one (th_init_host), prints the
 * closing line "test_summary: N passed, M failed" and returns nonzero on any failure.
 *
 *  1. CRC32C: the table equals its defining rule; published known answers (RFC 3720
 *     B.4 and the check value of "123456789"); continuing a CRC over pieces.
 *  2. Event protobufs and TFRecord framing: exact bytes of small events worked out by
 *     hand from the protobuf wire format.
 *  3. The writer: a temporary log folder gets one event file whose records are framed
 *     with valid lengths and CRCs, and a CSV with one row per scalar.
 *  4. Two writers in one second on one folder: the second gets its own "-2" files, the
 *     first's are neither appended to nor truncated.
 *  5. Errors: an unusable log folder (below a regular file) is VKT_ERROR_IO naming the
 *     folder; NULL arguments and bad tags are VKT_ERROR_INVALID_ARGUMENT; destroy(NULL).
 * (tests/cli/summaries.sh checks `vkt train --logdir` with an independent reader.)
 *
 * The temporary directory comes from the platform layer (th_temp_dir).
 */
#include "io/summary.h"
#include "harness.h"
#include "platform/platform.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_tmp[256];

#define CHECK TH_CHECK

static void test_crc32c(void)
{
    const uint32_t *table = crc32c_table();
    int table_ok = 1;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table_ok &= table[i] == c;
    }
    CHECK(table_ok, "the CRC32C table follows its rule");

    uint8_t zeros[32] = {0}, ones[32], up[32], down[32];
    for (int i = 0; i < 32; i++) {
        ones[i] = 0xFF;
        up[i] = (uint8_t)i;
        down[i] = (uint8_t)(31 - i);
    }
    struct { const char *name; const void *data; size_t n; uint32_t want; } v[] = {
        {"\"123456789\"", "123456789", 9, 0xE3069283u},
        {"32 zero bytes", zeros, 32, 0x8A9136AAu},
        {"32 bytes 0xFF", ones, 32, 0x62A8AB43u},
        {"0..31 ascending", up, 32, 0x46DD794Eu},
        {"31..0 descending", down, 32, 0x113FDB5Cu},
        {"empty", "", 0, 0x00000000u},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint32_t got = crc32c(0, v[i].data, v[i].n);
        CHECK(got == v[i].want, "CRC32C of %s = %08X, want %08X", v[i].name, got, v[i].want);
    }
    uint32_t part = crc32c(crc32c(0, "1234", 4), "56789", 5);
    CHECK(part == 0xE3069283u, "CRC32C continued over pieces = %08X", part);
    uint32_t c = 0xE3069283u, want = (((c >> 15) | (c << 17)) + 0xa282ead8u);
    CHECK(crc32c_masked("123456789", 9) == want, "masked CRC32C");
}

static int bytes_equal(const uint8_t *got, size_t n, const uint8_t *want, size_t m)
{
    if (n != m) {
        fprintf(stderr, "  length %zu, want %zu\n", n, m);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "  byte %zu is %02X, want %02X\n", i, got[i], want[i]);
            return 0;
        }
    return 1;
}

static void test_encoding(void)
{
    uint8_t buf[128];
    /* wall_time 1.5 (0x3FF8000000000000), step 300 (varint AC 02), tag "a", 1.0f */
    static const uint8_t scalar[] = {
        0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,       /* 1: fixed64 */
        0x10, 0xAC, 0x02,                         /* 2: varint */
        0x2A, 0x0A,                               /* 5: Summary, 10 bytes */
        0x0A, 0x08,                               /*   1: Value, 8 bytes */
        0x0A, 0x01, 'a',                          /*     1: tag */
        0x15, 0x00, 0x00, 0x80, 0x3F};            /*     2: fixed32 1.0f */
    size_t n = summary_event_encode(buf, sizeof buf, 1.5, 300, NULL, "a", 1.0f);
    CHECK(bytes_equal(buf, n, scalar, sizeof scalar), "scalar event bytes");
    /* wall_time 0, step 0, file_version "brain.Event:2" */
    static const uint8_t version[] = {
        0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x00, 0x1A, 13,
        'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
    n = summary_event_encode(buf, sizeof buf, 0.0, 0, "brain.Event:2", NULL, 0);
    CHECK(bytes_equal(buf, n, version, sizeof version), "file_version event bytes");
    n = summary_event_encode(buf, sizeof buf, 0.0, -1, NULL, NULL, 0);
    CHECK(n == 9 + 1 + 10 && buf[10] == 0xFF && buf[19] == 0x01,
          "a negative step is a 10-byte varint (%zu bytes)", n);
    CHECK(summary_event_encode(buf, 20, 1.5, 300, NULL, "a", 1.0f) == 0,
          "an event that does not fit returns 0");

    uint8_t rec[64];
    size_t m = summary_tfrecord_frame(rec, (const uint8_t *)"abc", 3);
    uint32_t len_crc = (uint32_t)rec[8] | (uint32_t)rec[9] << 8 | (uint32_t)rec[10] << 16 |
                       (uint32_t)rec[11] << 24;
    uint32_t data_crc = (uint32_t)rec[15] | (uint32_t)rec[16] << 8 |
                        (uint32_t)rec[17] << 16 | (uint32_t)rec[18] << 24;
    static const uint8_t len3[8] = {3, 0, 0, 0, 0, 0, 0, 0};
    CHECK(m == 19 && memcmp(rec, len3, 8) == 0 && memcmp(rec + 12, "abc", 3) == 0 &&
              len_crc == crc32c_masked(len3, 8) && data_crc == crc32c_masked("abc", 3),
          "TFRecord framing of \"abc\"");
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 16);
    *n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (buf)
        buf[*n] = '\0';
    return buf;
}

static void test_writer(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/logs/run1", g_tmp); /* parents are made */
    vkt_summary *w = NULL;
    if (!CHECK(vkt_summary_create(dir, &w) == VKT_OK && w, "create: %s", vkt_last_error()))
        return;
    CHECK(strncmp(vkt_summary_event_path(w), dir, strlen(dir)) == 0 &&
              strstr(vkt_summary_event_path(w), "/events.out.tfevents.") != NULL,
          "event file name %s", vkt_summary_event_path(w));
    CHECK(vkt_summary_scalar(w, "train/loss", 1, 2.5f) == VKT_OK, "scalar");
    CHECK(vkt_summary_scalar(w, "train/loss", 2, 0.125f) == VKT_OK, "scalar");
    CHECK(vkt_summary_scalar(w, "test/accuracy", 2, 0.875f) == VKT_OK, "scalar");
    CHECK(vkt_summary_flush(w) == VKT_OK, "flush");

    size_t n = 0, records = 0, off = 0;
    char *ev = read_all(vkt_summary_event_path(w), &n);
    int framed = ev != NULL;
    while (framed && off + 12 <= n) {
        const uint8_t *p = (const uint8_t *)ev + off;
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)p[i] << (8 * i);
        uint32_t lc = (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 |
                      (uint32_t)p[11] << 24;
        if (lc != crc32c_masked(p, 8) || off + 16 + len > n) {
            framed = 0;
            break;
        }
        const uint8_t *d = p + 12 + len;
        uint32_t dc = (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 |
                      (uint32_t)d[3] << 24;
        framed = dc == crc32c_masked(p + 12, len);
        off += 16 + len;
        records++;
    }
    CHECK(framed && off == n && records == 4, "event file: %zu records framed, %zu of %zu bytes",
          records, off, n);
    free(ev);
    char *csv = read_all(vkt_summary_csv_path(w), &n);
    int lines = 0;
    for (size_t i = 0; csv && i < n; i++)
        lines += csv[i] == '\n';
    CHECK(csv && strncmp(csv, "step,wall_time,tag,value\n1,", 27) == 0 && lines == 4 &&
              strstr(csv, ",train/loss,0.125\n") && strstr(csv, ",test/accuracy,0.875\n"),
          "CSV content:\n%s", csv ? csv : "(unreadable)");
    free(csv);

    /* Bad tags leave the files alone. */
    CHECK(vkt_summary_scalar(w, "a,b", 3, 1) == VKT_ERROR_INVALID_ARGUMENT &&
              strstr(vkt_summary_errmsg(w), "comma"), "a tag with a comma: %s",
          vkt_summary_errmsg(w));
    CHECK(vkt_summary_scalar(w, "", 3, 1) == VKT_ERROR_INVALID_ARGUMENT, "an empty tag");
    CHECK(vkt_summary_scalar(w, NULL, 3, 1) == VKT_ERROR_INVALID_ARGUMENT, "a NULL tag");
    vkt_summary_destroy(w);
}

/* Two writers of one second on one folder: the second gets files of its own. The first
 * pair's names are taken beforehand for every second this test can run in (with marker
 * contents), so the writer must pick "-2" names, and the taken files stay as they were. */
static void test_same_second(void)
{
    char dir[512], host[256], ev[1024], csv[1024];
    snprintf(dir, sizeof dir, "%s/same", g_tmp);
    CHECK(plat_mkdirs(dir) == 0, "mkdir %s", dir);
    plat_hostname(host, sizeof host);
    for (char *c = host; *c; c++)
        if (*c == '/' || *c == '\\')
            *c = '_';
    unsigned long long now = (unsigned long long)plat_wall_time();
    const char marker[] = "another writer's bytes\n";
    for (unsigned long long t = now - 2; t <= now + 120; t++) {
        snprintf(ev, sizeof ev, "%s/events.out.tfevents.%llu.%s", dir, t, host);
        snprintf(csv, sizeof csv, "%s/scalars.%llu.%s.csv", dir, t, host);
        CHECK(plat_write_file_atomic(ev, marker, sizeof marker - 1) == 0 &&
                  plat_write_file_atomic(csv, marker, sizeof marker - 1) == 0,
              "taken: second %llu", t);
    }
    vkt_summary *w = NULL;
    if (!CHECK(vkt_summary_create(dir, &w) == VKT_OK && w, "create: %s", vkt_last_error()))
        return;
    CHECK(vkt_summary_scalar(w, "train/loss", 1, 0.5f) == VKT_OK &&
              vkt_summary_flush(w) == VKT_OK, "a scalar");
    const char *e = vkt_summary_event_path(w), *c = vkt_summary_csv_path(w);
    unsigned long long stamp = 0;
    char tail[300] = "";
    CHECK(sscanf(strrchr(e, '/') + 1, "events.out.tfevents.%llu-2.%299s", &stamp, tail) == 2 &&
              strcmp(tail, host) == 0,
          "the event file is '<stamp>-2.<host>': %s", e);
    snprintf(csv, sizeof csv, "%s/scalars.%llu-2.%s.csv", dir, stamp, host);
    CHECK(strcmp(c, csv) == 0, "the CSV too: %s", c);
    size_t n = 0;
    char *text = read_all(c, &n);
    CHECK(text && strncmp(text, "step,wall_time,tag,value\n1,", 27) == 0,
          "the new CSV starts with its header and its own row");
    free(text);
    vkt_summary_destroy(w);
    int intact = 1;
    for (unsigned long long t = now - 2; t <= now + 120; t++) {
        snprintf(ev, sizeof ev, "%s/events.out.tfevents.%llu.%s", dir, t, host);
        char *got = read_all(ev, &n);
        intact = intact && got && n == sizeof marker - 1 && memcmp(got, marker, n) == 0;
        free(got);
        snprintf(csv, sizeof csv, "%s/scalars.%llu.%s.csv", dir, t, host);
        got = read_all(csv, &n);
        intact = intact && got && n == sizeof marker - 1 && memcmp(got, marker, n) == 0;
        free(got);
    }
    CHECK(intact, "the taken files were neither appended to nor truncated");
}

static void test_errors(void)
{
    char file[512], dir[600];
    snprintf(file, sizeof file, "%s/plain-file", g_tmp);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    snprintf(dir, sizeof dir, "%s/logs", file);
    vkt_summary *w = (vkt_summary *)&w; /* must be set to NULL */
    vkt_status st = vkt_summary_create(dir, &w);
    CHECK(st == VKT_ERROR_IO && w == NULL, "log folder below a file: %s", vkt_status_name(st));
    CHECK(strstr(vkt_last_error(), dir) && strstr(vkt_last_error(), "log folder"),
          "the message names the folder: %s", vkt_last_error());
    w = (vkt_summary *)&w;
    CHECK(vkt_summary_create(NULL, &w) == VKT_ERROR_INVALID_ARGUMENT && w == NULL, "NULL folder");
    CHECK(vkt_summary_create("", &w) == VKT_ERROR_INVALID_ARGUMENT, "empty folder name");
    CHECK(vkt_summary_create(g_tmp, NULL) == VKT_ERROR_INVALID_ARGUMENT, "NULL output");
    CHECK(vkt_summary_scalar(NULL, "x", 0, 0) == VKT_ERROR_INVALID_ARGUMENT, "NULL writer");
    CHECK(vkt_summary_flush(NULL) == VKT_ERROR_INVALID_ARGUMENT, "flush(NULL)");
    vkt_summary_destroy(NULL);
    CHECK(1, "destroy(NULL) is harmless");
}

int main(void)
{
    th_init_host("test_summary");
    th_temp_dir("test_summary", g_tmp, sizeof g_tmp);
    test_crc32c();
    test_encoding();
    test_writer();
    test_same_second();
    test_errors();
    th_remove_tree(g_tmp);
    return th_finish();
}
