/*
 * checkpoint.h - internals of the checkpoint file (docs/checkpoint.md): encoding the
 * sections into one little-endian buffer with a CRC32 of the payload, and parsing a
 * buffer back with every length and checksum validated before anything is used.
 * The io layer knows the file format and the folder of checkpoints, never the trainer:
 * saving and restoring a trainer are engine/parallel/trainer_checkpoint*.c.
 */
#ifndef VKT_IO_CHECKPOINT_H
#define VKT_IO_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "platform/platform.h"
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
void ckpt_put_f64(ckpt_buf *b, double v);
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
    /* NORM (optional: older files lack it): the divergence guard's reference, the RMS of
     * the trained parameters at the start of the run and the step it was measured at */
    int has_norm;
    double norm_rms;
    uint64_t norm_step;
    /* SCAL (optional: written by runs that skip non-finite steps, fp16's loss scaling
     * among them): whether the scale moved (fp16), the scale the next step starts from,
     * clean steps since it last changed, skipped steps in a row and in all */
    int has_scal;
    uint32_t scal_scaling, scal_clean, scal_in_a_row;
    double scal_scale;
    uint64_t scal_skipped;
} ckpt;

/* Parses and validates a whole file image (takes ownership of `file`, a malloc'd
 * buffer, even on failure). On failure returns VKT_ERROR_FORMAT with the reason (such
 * as "checksum mismatch") in why; nothing is kept. */
vkt_status ckpt_parse(void *file, size_t size, ckpt *out, char *why, size_t why_size);
/* Reads and parses `path`: VKT_ERROR_IO if it cannot be read, VKT_ERROR_FORMAT with
 * "checkpoint 'path' is corrupt: <why>" in errmsg (VKT_ERRMSG_SIZE). */
vkt_status ckpt_load(const char *path, ckpt *out, char *errmsg);
void ckpt_free(ckpt *c);
/* Bytes of a checkpoint's path. */
#define CKPT_PATH_SIZE 4096
/* Copies n little-endian floats into host floats. */
void ckpt_read_f32s(const unsigned char *src, float *dst, uint64_t n);
/* 1 on little-endian hosts, the only ones the optimizer blob (host order) is written
 * by; checkpoints refuse other hosts with VKT_ERROR_INTERNAL. */
int ckpt_host_little_endian(void);


/* ---- a folder of checkpoints `ckpt-<step>.vkt` (checkpoint_dir.c) ---- */

/* The path of step's checkpoint in dir. */
void ckpt_dir_step_path(char *buf, size_t size, const char *dir, uint64_t step);
/* Appends a line to notes (may be NULL, size bytes), whole or not at all: a message that
 * does not fit (with room left for the count) is counted in a last line "... and <n> more
 * like these", so no message is ever cut. */
void ckpt_dir_note(char *notes, size_t size, const char *msg);
/* The folder's lock for one operation on an existing folder, unless this process holds
 * it already (*held NULL then): another process's lock is VKT_ERROR_STATE, with the
 * message in errmsg (VKT_ERRMSG_SIZE). A folder that cannot be locked (read-only, say)
 * is used without. Release with plat_file_unlock(*held). */
vkt_status ckpt_dir_enter(const char *dir, plat_file_lock **held, char *errmsg);
/* Remembers that `path`, as it is now, is a whole checkpoint (verified: not parsed again
 * while its size and modification time stay). */
void ckpt_dir_verified(const char *path);
/* Keeps the newest `keep` checkpoints of dir that verify (0: all), the one just saved
 * (`saved`) always among them; deletes older ones; moves corrupt ones aside; notes what
 * it did and what it could not read. Also removes temporary files of interrupted saves. */
vkt_status ckpt_dir_retain(const char *dir, uint32_t keep, uint64_t saved, char *notes,
                           size_t notes_size);
/* Whether a parsed checkpoint may be used (the trainer's question: do its parameters fit
 * the model, and had training not diverged?): VKT_OK; VKT_ERROR_DIVERGED with the reason
 * in msg (VKT_ERRMSG_SIZE): an older one is tried and this one moved aside as
 * <path>.diverged; any other status ends the search with that error (no fallback). */
typedef vkt_status (*ckpt_accept_fn)(void *user, const char *path, const ckpt *k, char *msg);
/* The newest checkpoint of dir that parses (and that `accept`, if not NULL, accepts), into
 * *out and its path (*found 0 if none); corrupt and diverged newer ones are described in
 * notes and, with `move` (the caller holds the folder) moved aside once an older usable
 * one is found. With none usable: VKT_ERROR_FORMAT, or VKT_ERROR_DIVERGED if a diverged
 * one was among them, and every file stays. */
vkt_status ckpt_dir_find_latest(const char *dir, ckpt *out, char *path, size_t path_size,
                                int *found, char *notes, size_t notes_size, char *errmsg,
                                int move, ckpt_accept_fn accept, void *user);
/* The step of the newest checkpoint of dir that verifies: 1, or 0 if none. */
int ckpt_dir_newest_valid(const char *dir, uint64_t *step);

#endif
