/* Summaries: scalars appended to a TensorBoard event file and to a CSV file beside it.
 *
 * An event file is a sequence of TFRecords, each holding one Event protobuf, encoded by
 * hand here (the fields are few and fixed; no protobuf library needed):
 *   record: uint64 length | uint32 masked CRC32C(length bytes) | data | uint32 masked
 *           CRC32C(data), all little endian
 *   Event { double wall_time = 1; int64 step = 2; string file_version = 3;
 *           Summary summary = 5; }
 *   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
 * Wire types used: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. */
#include "summary.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/bytes.h"
#include "platform/platform.h"

#define VKT_SUMMARY_TAG_MAX VKT_MAX_TAG_BYTES
#define VKT_SUMMARY_PATH_MAX 4096
#define SUMMARY_NAME_TRIES 1000 /* writers per log folder per second */

struct vkt_summary {
    FILE *events, *csv;
    char event_path[VKT_SUMMARY_PATH_MAX];
    char csv_path[VKT_SUMMARY_PATH_MAX];
    char errmsg[VKT_ERRMSG_SIZE];
};

/* ------------------------------------------------------------------------------ */
/* Protobuf and TFRecord encoding                                                 */
/* ------------------------------------------------------------------------------ */

/* A bounded byte writer: `ok` turns 0 once something did not fit. */
typedef struct pb {
    uint8_t *p;
    size_t n, cap;
    int ok;
} pb;

static void pb_bytes(pb *b, const void *data, size_t n)
{
    if (!b->ok || n > b->cap - b->n) {
        b->ok = 0;
        return;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void pb_varint(pb *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t k = 0;
    do {
        tmp[k] = (uint8_t)(v & 0x7F);
        v >>= 7;
        if (v)
            tmp[k] |= 0x80;
        k++;
    } while (v);
    pb_bytes(b, tmp, k);
}

static void pb_le(pb *b, uint64_t v, int bytes)
{
    uint8_t tmp[8];
    io_wr(tmp, v, bytes);
    pb_bytes(b, tmp, (size_t)bytes);
}

static void pb_key(pb *b, uint32_t field, uint32_t wire) { pb_varint(b, (uint64_t)field << 3 | wire); }

static void pb_string(pb *b, uint32_t field, const void *s, size_t n)
{
    pb_key(b, field, 2);
    pb_varint(b, n);
    pb_bytes(b, s, n);
}

static size_t varint_size(uint64_t v)
{
    size_t k = 1;
    while (v >>= 7)
        k++;
    return k;
}

size_t summary_event_encode(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                        const char *file_version, const char *tag, float value)
{
    pb b = {.p = buf, .cap = cap, .ok = buf != NULL};
    uint64_t bits64;
    memcpy(&bits64, &wall_time, 8);
    pb_key(&b, 1, 1); /* wall_time: fixed64 double */
    pb_le(&b, bits64, 8);
    pb_key(&b, 2, 0); /* step: int64 varint (two's complement if negative) */
    pb_varint(&b, (uint64_t)step);
    if (file_version)
        pb_string(&b, 3, file_version, strlen(file_version));
    if (tag) {
        size_t tag_n = strlen(tag);
        /* Value = tag (key, length, bytes) + simple_value (key, 4 bytes) */
        size_t value_n = 1 + varint_size(tag_n) + tag_n + 1 + 4;
        size_t summary_n = 1 + varint_size(value_n) + value_n; /* Summary = one Value */
        uint32_t bits32;
        memcpy(&bits32, &value, 4);
        pb_key(&b, 5, 2);
        pb_varint(&b, summary_n);
        pb_key(&b, 1, 2);
        pb_varint(&b, value_n);
        pb_string(&b, 1, tag, tag_n);
        pb_key(&b, 2, 5); /* simple_value: fixed32 float */
        pb_le(&b, bits32, 4);
    }
    return b.ok ? b.n : 0;
}

size_t summary_tfrecord_frame(uint8_t *buf, const uint8_t *data, size_t n)
{
    io_wr(buf, n, 8);
    io_wr(buf + 8, crc32c_masked(buf, 8), 4);
    memmove(buf + 12, data, n);
    io_wr(buf + 12 + n, crc32c_masked(buf + 12, n), 4);
    return n + 16;
}

/* ------------------------------------------------------------------------------ */
/* The writer                                                                     */
/* ------------------------------------------------------------------------------ */

static vkt_status write_event(vkt_summary *w, double wall, int64_t step,
                              const char *file_version, const char *tag, float value)
{
    uint8_t event[VKT_SUMMARY_TAG_MAX + 64], record[sizeof event + 16];
    size_t n = summary_event_encode(event, sizeof event, wall, step, file_version, tag, value);
    if (n == 0)
        return err_fail(w->errmsg, VKT_ERROR_INTERNAL, "summary event does not fit %zu bytes",
                        sizeof event);
    size_t m = summary_tfrecord_frame(record, event, n);
    if (fwrite(record, 1, m, w->events) != m)
        return err_fail(w->errmsg, VKT_ERROR_IO, "cannot write to '%s': %s", w->event_path,
                        strerror(errno));
    return VKT_OK;
}

/* Creates the writer's two files, both new: events.out.tfevents.<stamp>.<host> and
 * scalars.<stamp>.<host>.csv, or with "-<k>" after the stamp (k = 2, 3, ...) when another
 * writer (a run started in the same second, another process) has either name: every
 * writer has files of its own, never appended to nor truncated. */
static vkt_status open_new_pair(vkt_summary *w, const char *logdir, unsigned long long stamp,
                                const char *host)
{
    for (unsigned k = 1; k <= SUMMARY_NAME_TRIES; k++) {
        char tag[32] = "";
        if (k > 1)
            snprintf(tag, sizeof tag, "-%u", k);
        int a = snprintf(w->event_path, sizeof w->event_path, "%s/events.out.tfevents.%llu%s.%s",
                         logdir, stamp, tag, host);
        int b = snprintf(w->csv_path, sizeof w->csv_path, "%s/scalars.%llu%s.%s.csv", logdir,
                         stamp, tag, host);
        if (a < 0 || b < 0 || (size_t)a >= sizeof w->event_path ||
            (size_t)b >= sizeof w->csv_path)
            return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "log folder path too long: '%s'",
                            logdir);
        if (!(w->events = plat_create_new(w->event_path))) {
            if (errno == EEXIST)
                continue;
            return err_fail(NULL, VKT_ERROR_IO, "cannot create the event file '%s': %s",
                            w->event_path, strerror(errno));
        }
        /* Binary: the same bytes ("\n" line ends) on every system, where Windows' text
         * mode would write "\r\n". */
        if ((w->csv = plat_create_new(w->csv_path)))
            return VKT_OK;
        int e = errno;
        fclose(w->events);
        w->events = NULL;
        plat_remove_file(w->event_path); /* ours, and empty: the pair is taken elsewhere */
        if (e != EEXIST)
            return err_fail(NULL, VKT_ERROR_IO, "cannot create the CSV file '%s': %s",
                            w->csv_path, strerror(e));
    }
    return err_fail(NULL, VKT_ERROR_IO, "the log folder '%s' has %d pairs of summary files "
                    "from second %llu already", logdir, SUMMARY_NAME_TRIES, stamp);
}

vkt_status vkt_summary_create(const char *logdir, vkt_summary **out)
{
    if (out)
        *out = NULL;
    if (!logdir || !*logdir || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_summary_create: needs a log folder and an output pointer");
    if (plat_mkdirs(logdir) != 0)
        return err_fail(NULL, VKT_ERROR_IO, "cannot create the log folder '%s': %s", logdir,
                        strerror(errno));
    vkt_summary *w = calloc(1, sizeof *w);
    if (!w)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    double wall = plat_wall_time();
    char host[256];
    plat_hostname(host, sizeof host);
    for (char *c = host; *c; c++) /* a host name must not make a path */
        if (*c == '/' || *c == '\\')
            *c = '_';
    unsigned long long stamp = (unsigned long long)wall;
    vkt_status st = open_new_pair(w, logdir, stamp, host);
    if (st != VKT_OK) {
        free(w);
        return st;
    }
    /* The first record names the format version, the CSV starts with its header.
     * Failures set w->errmsg and the thread's last error. */
    st = write_event(w, wall, 0, "brain.Event:2", NULL, 0.0f);
    if (st == VKT_OK && fprintf(w->csv, "step,wall_time,tag,value\n") < 0)
        st = err_fail(w->errmsg, VKT_ERROR_IO, "cannot write to '%s': %s", w->csv_path,
                      strerror(errno));
    if (st == VKT_OK)
        st = vkt_summary_flush(w);
    if (st != VKT_OK) {
        vkt_summary_destroy(w);
        return st;
    }
    *out = w;
    return VKT_OK;
}

vkt_status vkt_summary_scalar(vkt_summary *w, const char *tag, uint64_t step, float value)
{
    if (!w)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_summary_scalar: writer is NULL");
    if (!tag || !*tag || strlen(tag) > VKT_SUMMARY_TAG_MAX)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_summary_scalar: the tag must have 1 to %d bytes", VKT_SUMMARY_TAG_MAX);
    for (const char *c = tag; *c; c++)
        if (*c == ',' || *c == '\n' || *c == '\r' || *c == '"')
            return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                            "vkt_summary_scalar: tag '%s' contains a comma, quote or line "
                            "break (it is a CSV field)", tag);
    if (step > (uint64_t)INT64_MAX)
        return err_fail(w->errmsg, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_summary_scalar: step %llu exceeds int64", (unsigned long long)step);
    double wall = plat_wall_time();
    vkt_status st = write_event(w, wall, (int64_t)step, NULL, tag, value);
    if (st != VKT_OK)
        return st;
    if (fprintf(w->csv, "%llu,%.6f,%s,%.9g\n", (unsigned long long)step, wall, tag,
                (double)value) < 0)
        return err_fail(w->errmsg, VKT_ERROR_IO, "cannot write to '%s': %s", w->csv_path,
                        strerror(errno));
    return VKT_OK;
}

vkt_status vkt_summary_flush(vkt_summary *w)
{
    if (!w)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "vkt_summary_flush: writer is NULL");
    if (fflush(w->events) != 0)
        return err_fail(w->errmsg, VKT_ERROR_IO, "cannot write to '%s': %s", w->event_path,
                        strerror(errno));
    if (fflush(w->csv) != 0)
        return err_fail(w->errmsg, VKT_ERROR_IO, "cannot write to '%s': %s", w->csv_path,
                        strerror(errno));
    return VKT_OK;
}

void vkt_summary_destroy(vkt_summary *w)
{
    if (!w)
        return;
    if (w->events)
        fclose(w->events);
    if (w->csv)
        fclose(w->csv);
    free(w);
}

const char *vkt_summary_errmsg(const vkt_summary *w) { return w ? w->errmsg : ""; }
const char *vkt_summary_event_path(const vkt_summary *w) { return w ? w->event_path : ""; }
const char *vkt_summary_csv_path(const vkt_summary *w) { return w ? w->csv_path : ""; }
