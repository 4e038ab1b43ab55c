/*
 * checkpoint.h - internals of the checkpoint file (docs/checkpoint.md): encoding the
 * sections into one little-endian buffer with a CRC32 of the payload, and parsing a
 * buffer back with every length and checksum validated before anything is used.
 * The io layer: it knows the file format, and the trainer only through
 * engine/parallel/trainer.h (checkpoint.c).
 */
#ifndef VKT_IO_CHECKPOINT_H
#define VKT_IO_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "vkt.h"

#define CKPT_MAGIC "VKTCKPT"   /* 8 bytes with the NUL */
#define CKPT_VERSION 1u
#define CKPT_HEADER_BYTES 32u
#define CKPT_NAME_MAX 255u     /* bytes of a parameter name */

/* A growable byte buffer the encoder appends little-endian values to. */
typedef struct ckpt_buf {
    unsigned char *p;
    size_t n, cap;
    int oom;                   /* an append failed: the buffer is incomplete */
} ckpt_buf;

void ckpt_put_u32(ckpt_buf *b, uint32_t v);
void ckpt_put_u64(ckpt_buf *b, uint64_t v);
void ckpt_put_bytes(ckpt_buf *b, const void *data, size_t n);
void ckpt_put_f32s(ckpt_buf *b, const float *v, uint64_t n);
/* Starts a section (tag of 4 characters); returns where its length goes. */
size_t ckpt_begin_section(ckpt_buf *b, const char tag[4]);
void ckpt_end_section(ckpt_buf *b, size_t at);
/* Reserves the 32-byte header; ckpt_finish fills it once the payload is complete. */
void ckpt_begin(ckpt_buf *b);
void ckpt_finish(ckpt_buf *b);

/* One parameter tensor as stored: data points into the parsed file (count
 * little-endian floats, not necessarily aligned: use ckpt_read_f32s). */
typedef struct ckpt_tensor {
    char name[CKPT_NAME_MAX + 1];
    vkt_shape shape;
    uint64_t count;
    const unsigned char *data;
} ckpt_tensor;

/* A parsed checkpoint. Pointers point into `file`, owned by it. */
typedef struct ckpt {
    void *file;
    size_t file_size;
    uint32_t version;
    /* META */
    uint64_t step, dropout_step;
    uint32_t replicas, mode, batch;
    /* DATA */
    uint32_t has_loader;
    uint64_t epoch, batch_index, seed;
    /* PARM */
    uint32_t n_tensors;
    ckpt_tensor *tensors;
    /* OPTM */
    const unsigned char *opt_state;
    uint64_t opt_bytes;
} ckpt;

/* Parses and validates a whole file image (takes ownership of `file`, a malloc'd
 * buffer, even on failure). On failure returns VKT_ERROR_FORMAT with the reason (such
 * as "checksum mismatch") in why; nothing is kept. */
vkt_status ckpt_parse(void *file, size_t size, ckpt *out, char *why, size_t why_size);
/* Reads and parses `path`: VKT_ERROR_IO if it cannot be read, VKT_ERROR_FORMAT with
 * "checkpoint 'path' is corrupt: <why>" in errmsg (VKT_ERRMSG_SIZE). */
vkt_status ckpt_load(const char *path, ckpt *out, char *errmsg);
void ckpt_free(ckpt *c);
/* Restores a parsed checkpoint into every replica of a trainer (checkpoint.c); checks
 * the parameters' names and shapes and the optimizer state first, so a mismatch
 * (VKT_ERROR_SHAPE, naming the tensor) changes nothing. `path` names it in messages. */
vkt_status ckpt_restore(vkt_trainer *t, const char *path, const ckpt *k);
/* Across ranks (collective): the chief's outcome of reading a checkpoint (status st,
 * *found, the parsed k, its path) to every rank, which parses the same bytes into k.
 * Without a world: returns st. */
#define CKPT_PATH_SIZE 4096
vkt_status ckpt_share(vkt_trainer *t, vkt_status st, int *found, ckpt *k, char *path,
                      size_t path_size);
/* Copies n little-endian floats into host floats. */
void ckpt_read_f32s(const unsigned char *src, float *dst, uint64_t n);
/* 1 on little-endian hosts, the only ones the optimizer blob (host order) is written
 * by; checkpoints refuse other hosts with VKT_ERROR_INTERNAL. */
int ckpt_host_little_endian(void);

#endif
