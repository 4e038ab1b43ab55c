/*
 * idx.h - reading IDX files (the format of the MNIST distribution), plain or gzipped,
 * and loading an MNIST-style data set from a directory.
 *
 * IDX layout: 2 zero bytes, a type code (0x08 = unsigned byte; the only type read
 * here), the number of dimensions (1..VKT_MAX_DIMS), then one big-endian uint32 per
 * dimension, outermost first, then the payload: prod(dims) elements, row-major, and
 * nothing after it.
 *
 * Portable C11 + zlib; knows nothing of Vulkan. Every call returns a vkt_status and, on
 * failure, writes a message naming the file and what was expected into `msg` (which may
 * be NULL when msg_size is 0); on failure the output struct is left zeroed.
 */
#ifndef VKT_DATA_IDX_H
#define VKT_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "vkt.h"

#define VKT_IDX_TYPE_U8 0x08

/* One IDX file in memory. */
typedef struct idx_array {
    uint8_t type;                  /* IDX type code; always VKT_IDX_TYPE_U8 */
    uint32_t ndim;                 /* 1..VKT_MAX_DIMS */
    uint32_t dims[VKT_MAX_DIMS];   /* outermost first; unused entries 0 */
    uint64_t count;                /* prod(dims): number of elements (= bytes for u8) */
    uint8_t *data;                 /* [count], row-major; malloc'd, never NULL on success */
} idx_array;

/* Reads `path`, plain or gzip-compressed (detected by the magic bytes 1f 8b).
 * VKT_ERROR_IO: the file cannot be opened or read. VKT_ERROR_FORMAT: empty, truncated
 * header or payload, bad magic, unsupported type code or dimension count, trailing data,
 * corrupt gzip stream. VKT_ERROR_OUT_OF_MEMORY. VKT_ERROR_INVALID_ARGUMENT: NULL path/out. */
vkt_status idx_read(const char *path, idx_array *out /* OUT */, char *msg, size_t msg_size);
/* Frees the data and zeroes the struct; NULL or a zeroed struct is a no-op. */
void idx_free(idx_array *idx);

/* Finds DIR/NAME or else DIR/NAME.gz; writes the path found into `path` (malloc'd, the
 * caller frees it). VKT_ERROR_IO naming both candidates if neither can be opened. */
vkt_status idx_find(const char *dir, const char *name, char **path /* OUT */, char *msg,
                        size_t msg_size);

/* One part of an MNIST-style data set. */
typedef struct mnist_split {
    uint32_t count;       /* N, number of samples (> 0) */
    uint32_t rows, cols;  /* image size as stored (28 x 28 for MNIST) */
    float *images;        /* [N, rows * cols], pixel / 255 in [0, 1], row-major */
    int32_t *labels;      /* [N], each in [0, VKT_MNIST_CLASSES) */
} mnist_split;

#define VKT_MNIST_CLASSES 10

typedef struct mnist_data {
    mnist_split train; /* train-images-idx3-ubyte, train-labels-idx1-ubyte */
    mnist_split test;  /* t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte */
} mnist_data;

/* Loads the four MNIST files from `dir`, each plain or with ".gz" appended (the plain
 * one preferred). Checks: images are [N, rows, cols] u8, labels [N] u8 with the same N,
 * every label < VKT_MNIST_CLASSES; train and test images have the same rows x cols.
 * VKT_ERROR_SHAPE: wrong dimension count, no images, counts or image sizes that do not
 * agree (the message names both files). VKT_ERROR_FORMAT: a label out of range (the
 * message names the file, the index and the value), or any idx_read format error.
 * VKT_ERROR_IO: a file missing. Also reads Fashion-MNIST (same names and format). */
vkt_status mnist_load(const char *dir, mnist_data *out /* OUT */, char *msg,
                          size_t msg_size);
/* Frees both splits and zeroes the struct; NULL is a no-op. */
void mnist_free(mnist_data *mnist);

#endif /* VKT_DATA_IDX_H */
