/*
 * safetensors.h - reading safetensors files (docs/import.md) and assigning their tensors to
 * a model's parameters by name, through a name map.
 *
 * The file: an 8-byte little-endian header length N, N bytes of JSON (an object: each
 * tensor's name -> {"dtype", "shape", "data_offsets": [begin, end]}, and optionally
 * "__metadata__": an object of strings), then the data, each tensor's little-endian
 * row-major bytes at [begin, end) of it. The reader (safetensors.c) trusts nothing: the
 * JSON is read by a strict parser for exactly this schema (UTF-8 checked, duplicate keys,
 * unknown keys and dtypes refused), and the byte ranges must tile the data exactly (no
 * overlap, no hole, nothing past the end), each the size its dtype and shape say.
 * Assigning (safetensors_map.c) converts F32, F16, BF16 and F64 to float, transposes
 * where the map says so, and refuses every missing, unused, mismatched or non-finite
 * tensor with a message naming it. The io layer knows no graph: the caller lists the
 * parameters (name, shape, offset in its flat array).
 */
#ifndef VKT_IO_SAFETENSORS_H
#define VKT_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "vkt.h"

#define ST_MAX_DIMS 16       /* dimensions of a tensor the reader accepts */

/* One dtype of the format: its name, bytes per element, and its conversion to float
 * (NULL: known, so its tensors' sizes are checked, but not loadable into parameters). */
typedef struct st_dtype {
    const char *name;
    uint32_t bytes;
    void (*to_f32)(const unsigned char *src, float *dst, uint64_t n);
} st_dtype;

/* One tensor of a parsed file. */
typedef struct st_tensor {
    const char *name;           /* decoded UTF-8, NUL-terminated (no NUL inside) */
    const st_dtype *dtype;
    uint32_t ndim;
    uint64_t dims[ST_MAX_DIMS];
    uint64_t count;             /* elements: the product of dims (1 for ndim 0) */
    uint64_t begin, end;        /* bytes of the data part */
    const unsigned char *data;  /* into the file image, not aligned */
} st_tensor;

/* A parsed file. Every pointer points into memory the struct owns. */
typedef struct st_file {
    void *file;
    size_t size;
    char *strings;              /* the decoded names and metadata */
    uint32_t n_tensors;
    st_tensor *tensors;         /* in header order */
    uint32_t n_meta;            /* __metadata__ pairs, in header order */
    const char **meta_keys, **meta_values;
} st_file;

/* Parses and validates a whole file image (takes ownership of `file`, a malloc'd buffer,
 * even on failure). On failure: VKT_ERROR_FORMAT with the reason in why ("header byte
 * 40: ..."), nothing kept. */
vkt_status st_parse(void *file, size_t size, st_file *out, char *why, size_t why_size);
/* Reads and parses `path`: VKT_ERROR_IO if it cannot be read, VKT_ERROR_FORMAT with
 * "safetensors file 'path' is invalid: <why>" in errmsg (VKT_ERRMSG_SIZE). */
vkt_status st_load(const char *path, st_file *out, char *errmsg);
void st_free(st_file *f);
/* The tensor named `name`, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);
/* The dtype table's row named `name` (NULL: not a dtype of the format). */
const st_dtype *st_dtype_named(const char *name);
/* The loadable dtypes' names as text ("F32, F16, BF16, F64"). */
const char *st_loadable_dtypes(void);
/* Shape as text: "[3,4]" ("[]" for a scalar). */
void st_shape_text(const uint64_t *dims, uint32_t ndim, char *buf, size_t size);

/* ---- the name map and the assignment (safetensors_map.c) ---- */

/* One line of a name map:
 *   PARAM TENSOR [transpose]   PARAM's values are the file's TENSOR (transposed: 2-D)
 *   PARAM -                    PARAM keeps the values it has (nothing from the file)
 *   - TENSOR                   the file's TENSOR is left unused without an error
 *   - *                        every tensor no parameter takes is left unused */
typedef struct st_map_line {
    const char *param;          /* NULL for "- TENSOR" */
    const char *tensor;         /* NULL for "PARAM -"; "*" in "- *" */
    int transpose;
    uint32_t line;              /* 1-based line of the text */
} st_map_line;

typedef struct st_map {
    char *text;                 /* a copy of the text, cut into the names */
    uint32_t n;
    st_map_line *lines;
} st_map;

/* Parses a map's text (NULL or "": an empty map). Errors: VKT_ERROR_FORMAT with "line L:
 * <why>" in why (a line of other than 2 or 3 words, a third word other than "transpose",
 * "- -", a parameter named twice, "- *" with another word). */
vkt_status st_map_parse(const char *text, st_map *out, char *why, size_t why_size);
void st_map_free(st_map *m);

/* A parameter to assign: its name, shape and place in the caller's flat array. */
typedef struct st_param {
    const char *name;
    vkt_shape shape;
    uint64_t count;
    uint64_t offset;            /* elements into flat */
} st_param;

/* What an assignment did. */
typedef struct st_result {
    uint32_t loaded, transposed, kept, ignored;
} st_result;

/* Writes every parameter's values from the file into flat[offset, offset + count): the
 * tensor the map names for it, else the tensor of its own name. Refused, with nothing
 * reported as done (flat may be partly written): a map line naming no parameter; a
 * parameter with no tensor; a tensor of another shape (transposed or not), of a dtype
 * that cannot be loaded, or holding a NaN or an infinity (after conversion); a tensor no
 * parameter takes and the map does not leave unused. The message (errmsg,
 * VKT_ERRMSG_SIZE) names the file (`path`) and lists the problems, as many as fit; the
 * status is the first problem's (VKT_ERROR_SHAPE for a mismatch, VKT_ERROR_FORMAT for a
 * dtype or a value, VKT_ERROR_INVALID_ARGUMENT for the map). */
vkt_status st_assign(const st_file *f, const char *path, const st_map *map,
                     const st_param *params, uint32_t n_params, float *flat,
                     st_result *result, char *errmsg);

#endif
