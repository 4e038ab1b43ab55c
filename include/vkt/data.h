/*
 * vkt/data.h - the data a trainer reads, all on the host: labelled data sets (MNIST
 * folders, CSV files, arrays), token files, character corpora and their batches, and
 * loaders (shuffled batches, prefetched by a thread). Part of vkt.h, readable alone.
 * The conventions of every part (statuses, messages, NULL options, ...): vkt/base.h.
 */
#ifndef VKT_DATA_H
#define VKT_DATA_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Data sets and loaders (host side)                                              */
/* ------------------------------------------------------------------------------ */

/* A data set of `count` samples, each `features` floats and one int32 class label in
 * [0, classes). Held in host memory. */
typedef struct vkt_dataset vkt_dataset;

/* Copies x[count, features] and y[count] (y may be NULL: labels all 0, classes 0).
 * Labels outside [0, classes) are refused with a message naming the index. */
VKT_API vkt_status vkt_dataset_create(uint32_t count, uint32_t features, uint32_t classes,
                                      const float *x, const int32_t *y,
                                      vkt_dataset **out_dataset /* OUT */);
/* Loads an MNIST-style folder: train-images-idx3-ubyte, train-labels-idx1-ubyte,
 * t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each plain or with ".gz" appended.
 * Pixels become floats in [0, 1]. Truncated or corrupt files: VKT_ERROR_FORMAT (or
 * VKT_ERROR_SHAPE, VKT_ERROR_IO) with a message (vkt_last_error) naming the file. */
VKT_API vkt_status vkt_dataset_load_mnist(const char *dir, vkt_dataset **out_train /* OUT */,
                                          vkt_dataset **out_test /* OUT */);
/* Loads a CSV file with a header line of column names: the column named `label_column`
 * holds integer labels >= 0 (classes: the largest + 1), every other column a numeric
 * feature, in order. Blank lines are skipped. Errors: VKT_ERROR_FORMAT naming the file,
 * the line (and column) and what was expected (a bad number, a missing label column, a
 * ragged row, an empty file); VKT_ERROR_IO when unreadable. */
VKT_API vkt_status vkt_dataset_load_csv(const char *path, const char *label_column,
                                        vkt_dataset **out_dataset /* OUT */);
/* Reads a raw binary token file: uint8 (bytes_per_token 1) or little-endian uint16 (2).
 * *out_tokens is malloc'd (release with free). An empty file or, for uint16, an odd byte
 * count: VKT_ERROR_FORMAT naming the file and the offset. */
VKT_API vkt_status vkt_dataset_load_tokens(const char *path, uint32_t bytes_per_token,
                                           uint32_t **out_tokens /* OUT */,
                                           uint64_t *out_count /* OUT */);
VKT_API void vkt_dataset_destroy(vkt_dataset *dataset);
VKT_API uint32_t vkt_dataset_count(const vkt_dataset *dataset);
VKT_API uint32_t vkt_dataset_features(const vkt_dataset *dataset);
VKT_API uint32_t vkt_dataset_classes(const vkt_dataset *dataset);
/* Row-major [count, features] and [count]; owned by the data set. */
VKT_API const float *vkt_dataset_x(const vkt_dataset *dataset);
VKT_API const int32_t *vkt_dataset_y(const vkt_dataset *dataset);

/* A character-level corpus: a text file's bytes, its vocabulary (the distinct bytes,
 * sorted: ids are stable for a given file), a training part and a validation part (the
 * last val_fraction of the text). Split 0 is training, 1 validation. */
typedef struct vkt_text vkt_text;

VKT_API vkt_status vkt_text_load(const char *path, float val_fraction,
                                 vkt_text **out_text /* OUT */);
VKT_API void vkt_text_destroy(vkt_text *text);
VKT_API uint32_t vkt_text_vocab(const vkt_text *text);
VKT_API uint64_t vkt_text_length(const vkt_text *text, int split);
/* The id of a byte (-1: not in the vocabulary) and the byte of an id. */
VKT_API int32_t vkt_text_encode(const vkt_text *text, unsigned char c);
VKT_API unsigned char vkt_text_decode(const vkt_text *text, uint32_t id);
/* `batch` windows of `context` ids at random positions of a split: ids[b,t] as floats (for
 * vkt_embedding) and targets[b,t] = the id that follows. *rng is the generator's state
 * (splitmix64): the same state gives the same batches. */
VKT_API vkt_status vkt_text_batch(const vkt_text *text, int split, uint32_t batch, uint32_t context,
                                  uint64_t *rng, float *ids /* OUT */, int32_t *targets /* OUT */);

/* Batches of a data set in a seeded random order that is new every epoch. */
typedef struct vkt_loader vkt_loader;

typedef struct vkt_loader_options {
    uint32_t batch;     /* rows per batch (required) */
    uint64_t seed;      /* permutation seed; epoch e uses a permutation of (seed, e) */
    int no_shuffle;     /* 1: samples in stored order */
    int keep_partial;   /* 1: the last batch of an epoch may be short; default: dropped */
    /* Batches prepared ahead by a background thread (the same batches in the same order
     * as without it), 0: none, each batch gathered inside vkt_loader_next. */
    uint32_t prefetch;
} vkt_loader_options;

/* The data set must outlive the loader. */
VKT_API vkt_status vkt_loader_create(const vkt_dataset *dataset, const vkt_loader_options *options,
                                     vkt_loader **out_loader /* OUT */);
VKT_API void vkt_loader_destroy(vkt_loader *loader);
/* Copies the next batch into x[batch, features] and y[batch]; *out_rows says how many
 * rows were written (the batch, or fewer for a kept partial batch). Moves to the next
 * epoch (a new permutation) when one ends. */
VKT_API vkt_status vkt_loader_next(vkt_loader *loader, float *x /* OUT */, int32_t *y /* OUT */,
                                   uint32_t *out_rows /* OUT */);
VKT_API uint32_t vkt_loader_batches_per_epoch(const vkt_loader *loader);
/* Position: the epoch and the number of batches already taken from it (delivered by
 * vkt_loader_next, not merely prepared by the prefetch thread). */
VKT_API void vkt_loader_position(const vkt_loader *loader, uint64_t *epoch, uint64_t *batch_index);
/* Seconds vkt_loader_next spent waiting for a prefetched batch not yet ready, summed. */
VKT_API double vkt_loader_wait_seconds(const vkt_loader *loader);
/* Moves to a position (e.g. restored from a checkpoint); discards prefetched batches. */
VKT_API vkt_status vkt_loader_seek(vkt_loader *loader, uint64_t epoch, uint64_t batch_index);

#ifdef __cplusplus
}
#endif

#endif /* VKT_DATA_H */
