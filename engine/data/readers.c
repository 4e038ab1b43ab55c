/* Readers beside IDX: CSV with a header (numeric features, an integer label column
 * chosen by name) and raw binary token files (uint8 or little-endian uint16). Every
 * error names the file, the line or byte offset, and what was expected. */
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

static vkt_status read_all(const char *path, char **text, size_t *size)
{
    void *data = NULL;
    if (plat_read_file(path, &data, size) != 0)
        return data_fail(VKT_ERROR_IO, "cannot read '%s': %s", path, strerror(errno));
    char *t = realloc(data, *size + 1);
    if (!t) {
        free(data);
        return data_fail(VKT_ERROR_OUT_OF_MEMORY, "out of host memory reading '%s'", path);
    }
    t[*size] = '\0';
    *text = t;
    return VKT_OK;
}

/* A NUL byte would end every string search early and drop the rows after it unseen:
 * refuse the file, naming the line and byte offset. */
static vkt_status no_nul(const char *path, const char *text, size_t size)
{
    const char *z = memchr(text, '\0', size);
    if (!z)
        return VKT_OK;
    unsigned line = 1;
    for (const char *c = text; c < z; c++)
        line += *c == '\n';
    return data_fail(VKT_ERROR_FORMAT, "'%s' line %u: a NUL byte at offset %zu (not a text "
                         "CSV file)", path, line, (size_t)(z - text));
}

/* A feature cell: a whole decimal number within float range. strtof also takes "nan",
 * "inf" and values that overflow to infinity (1e39); none of those can train. Values
 * that underflow (1e-50) round to zero or a subnormal and are kept. */
static vkt_status parse_feature(const char *path, uint32_t lineno, const char *name,
                                const char *cell, float *out)
{
    char *e = NULL;
    errno = 0;
    float v = strtof(cell, &e);
    if (!*cell || *e)
        return data_fail(VKT_ERROR_FORMAT, "'%s' line %u, column '%s': '%s' is not a "
                             "number", path, lineno, name, cell);
    if (isnan(v) || (isinf(v) && errno != ERANGE))
        return data_fail(VKT_ERROR_FORMAT, "'%s' line %u, column '%s': '%s' is not a "
                             "finite number", path, lineno, name, cell);
    if (isinf(v))
        return data_fail(VKT_ERROR_FORMAT, "'%s' line %u, column '%s': '%s' is out of "
                             "float range (magnitude above 3.4e38)", path, lineno, name, cell);
    *out = v;
    return VKT_OK;
}

/* Splits line [s, e) at commas in place into fields (NUL-terminated, spaces trimmed). */
static uint32_t split(char *s, char *e, char **fields, uint32_t max)
{
    uint32_t n = 0;
    if (e > s && e[-1] == '\r')
        e--;
    *e = '\0';
    for (char *f = s;;) {
        char *comma = strchr(f, ',');
        if (comma)
            *comma = '\0';
        while (*f == ' ' || *f == '\t')
            f++;
        char *end = f + strlen(f);
        while (end > f && (end[-1] == ' ' || end[-1] == '\t'))
            *--end = '\0';
        if (n < max)
            fields[n] = f;
        n++;
        if (!comma)
            return n;
        f = comma + 1;
    }
}

vkt_status vkt_dataset_load_csv(const char *path, const char *label_column, vkt_dataset **out)
{
    if (out)
        *out = NULL;
    if (!path || !label_column || !out)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT, "vkt_dataset_load_csv: NULL argument");
    char *text = NULL;
    size_t size = 0;
    vkt_status st = read_all(path, &text, &size);
    if (st != VKT_OK)
        return st;
    if ((st = no_nul(path, text, size)) != VKT_OK) {
        free(text);
        return st;
    }
    char **fields = NULL, **names = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    uint32_t cols = 0, label = 0, rows = 0, cap = 0, classes = 0;
    char *line = text, *end = text + size;
    if (size >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        line += 3; /* a UTF-8 byte-order mark is not part of the first column's name */
    while (line < end && (*line == '\n' || *line == '\r'))
        line++;
    if (line >= end) {
        st = data_fail(VKT_ERROR_FORMAT, "'%s' is empty: expected a header line of "
                           "column names", path);
        goto done;
    }
    char *nl = strchr(line, '\n');
    char *le = nl ? nl : end;
    cols = 1;
    for (const char *c = line; c < le; c++)
        cols += *c == ',';
    names = malloc(cols * sizeof *names);
    fields = malloc(cols * sizeof *fields);
    if (!names || !fields) {
        st = data_fail(VKT_ERROR_OUT_OF_MEMORY, "out of host memory reading '%s'", path);
        goto done;
    }
    split(line, le, names, cols);
    for (label = 0; label < cols && strcmp(names[label], label_column) != 0; label++)
        ;
    if (label == cols) {
        st = data_fail(VKT_ERROR_FORMAT, "'%s' line 1: no label column '%s' in the header "
                           "(%u columns, first '%s')", path, label_column, cols, names[0]);
        goto done;
    }
    if (cols < 2) {
        st = data_fail(VKT_ERROR_FORMAT, "'%s' line 1: expected at least one feature "
                           "column beside the label '%s'", path, label_column);
        goto done;
    }
    uint32_t lineno = 1;
    for (line = nl ? nl + 1 : end; line < end; line = nl ? nl + 1 : end) {
        lineno++;
        nl = strchr(line, '\n');
        le = nl ? nl : end;
        char *p = line;
        while (p < le && (*p == ' ' || *p == '\t' || *p == '\r'))
            p++;
        if (p == le)
            continue; /* blank line */
        uint32_t n = split(line, le, fields, cols);
        if (n != cols) {
            st = data_fail(VKT_ERROR_FORMAT, "'%s' line %u: %u fields, expected %u as in "
                               "the header (ragged row)", path, lineno, n, cols);
            goto done;
        }
        if (rows == cap) {
            cap = cap ? cap * 2 : 64;
            float *nx = realloc(x, (uint64_t)cap * (cols - 1) * sizeof *x);
            if (nx)
                x = nx;
            int32_t *ny = realloc(y, cap * sizeof *y);
            if (ny)
                y = ny;
            if (!nx || !ny) {
                st = data_fail(VKT_ERROR_OUT_OF_MEMORY, "out of host memory reading '%s'",
                                   path);
                goto done;
            }
        }
        float *row = x + (uint64_t)rows * (cols - 1);
        for (uint32_t c = 0; c < cols; c++) {
            char *e = NULL;
            errno = 0;
            if (c == label) {
                long v = strtol(fields[c], &e, 10);
                if (!*fields[c] || *e || errno || v < 0 || v > 1000000) {
                    st = data_fail(VKT_ERROR_FORMAT, "'%s' line %u, column '%s': '%s' is "
                                       "not a label (expected an integer in [0, 1000000])",
                                       path, lineno, names[c], fields[c]);
                    goto done;
                }
                y[rows] = (int32_t)v;
                if ((uint32_t)v + 1 > classes)
                    classes = (uint32_t)v + 1;
            } else {
                st = parse_feature(path, lineno, names[c], fields[c], row++);
                if (st != VKT_OK)
                    goto done;
            }
        }
        rows++;
    }
    if (rows == 0) {
        st = data_fail(VKT_ERROR_FORMAT, "'%s': no data rows after the header", path);
        goto done;
    }
    st = vkt_dataset_create(rows, cols - 1, classes, x, y, out);
done:
    free(text);
    free(names);
    free(fields);
    free(x);
    free(y);
    return st;
}

vkt_status vkt_dataset_load_tokens(const char *path, uint32_t bytes_per_token,
                                   uint32_t **out_tokens, uint64_t *out_count)
{
    if (out_tokens)
        *out_tokens = NULL;
    if (out_count)
        *out_count = 0;
    if (!path || !out_tokens || !out_count)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT,
                             "vkt_dataset_load_tokens: NULL argument");
    if (bytes_per_token != 1 && bytes_per_token != 2)
        return data_fail(VKT_ERROR_INVALID_ARGUMENT, "vkt_dataset_load_tokens: '%s': "
                             "%u bytes per token, expected 1 (uint8) or 2 (uint16)", path,
                             bytes_per_token);
    void *data = NULL;
    size_t size = 0;
    if (plat_read_file(path, &data, &size) != 0)
        return data_fail(VKT_ERROR_IO, "cannot read '%s': %s", path, strerror(errno));
    vkt_status st = VKT_OK;
    if (size == 0)
        st = data_fail(VKT_ERROR_FORMAT, "'%s' is empty: expected uint%u tokens", path,
                           bytes_per_token * 8);
    else if (size % bytes_per_token)
        st = data_fail(VKT_ERROR_FORMAT, "'%s': %zu bytes is not a whole number of "
                           "2-byte uint16 tokens (a stray byte at offset %zu)", path, size,
                           size - 1);
    uint64_t n = size / bytes_per_token;
    uint32_t *tok = st == VKT_OK ? malloc(n * sizeof *tok) : NULL;
    if (st == VKT_OK && !tok)
        st = data_fail(VKT_ERROR_OUT_OF_MEMORY, "out of host memory reading '%s'", path);
    const uint8_t *b = data;
    for (uint64_t i = 0; tok && i < n; i++) /* little endian, whatever the host */
        tok[i] = bytes_per_token == 1 ? b[i] : (uint32_t)b[2 * i] | (uint32_t)b[2 * i + 1] << 8;
    free(data);
    if (st == VKT_OK) {
        *out_tokens = tok;
        *out_count = n;
    }
    return st;
}
