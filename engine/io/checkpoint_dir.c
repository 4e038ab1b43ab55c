/* checkpoint_dir.c - a directory of checkpoints `ckpt-<step>.vkt`: their names, keeping
 * the newest few valid ones (corrupt ones moved aside, never counted), finding the newest
 * valid one (a corrupt newer file is reported and moved aside), the folder's lock (one
 * run per folder), and exporting one as safetensors. Saving a trainer into the folder and
 * restoring from it are the trainer's (engine/parallel/trainer_checkpoint_dir.c). */
#include "io/checkpoint.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/output.h"
#include "kernels/dtype_table.h"
#include "platform/platform.h"

#define PATH_SIZE CKPT_PATH_SIZE

/* The step of a name "ckpt-<digits>.vkt"; 0 if the name is not one. */
static int parse_name(const char *name, uint64_t *step)
{
    if (strncmp(name, "ckpt-", 5) != 0)
        return 0;
    const char *p = name + 5;
    uint64_t v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 19) {
        v = v * 10 + (uint64_t)(*p++ - '0');
        digits++;
    }
    if (!digits || strcmp(p, ".vkt") != 0)
        return 0;
    *step = v;
    return 1;
}

/* A temporary file of an interrupted save: ".ckpt-<step>.vkt.<pid>.<n>.tmp"
 * (plat_write_file's name), or "ckpt-<step>.vkt.tmp.<pid>.<n>" (before it). */
static int is_save_temp(const char *name)
{
    size_t n = strlen(name);
    if (strncmp(name, ".ckpt-", 6) == 0)
        return n > 4 && strcmp(name + n - 4, ".tmp") == 0;
    return strncmp(name, "ckpt-", 5) == 0 && strstr(name, ".vkt.tmp.") != NULL;
}

static int newest_first(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of the checkpoints in dir, newest first (malloc'd; *n = 0 if none or no
 * directory). Also removes temporary files of interrupted saves when `clean`. */
static vkt_status list_steps(const char *dir, int clean, uint64_t **steps, size_t *n)
{
    char **names = NULL;
    size_t count = 0;
    *steps = NULL;
    *n = 0;
    if (plat_list_dir(dir, &names, &count) != 0)
        return VKT_OK; /* no directory yet: no checkpoints */
    uint64_t *v = malloc((count ? count : 1) * sizeof *v);
    if (!v) {
        plat_free_names(names, count);
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (size_t i = 0; i < count; i++) {
        if (parse_name(names[i], &v[*n])) {
            (*n)++;
        } else if (clean && is_save_temp(names[i])) {
            char path[PATH_SIZE];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            plat_remove_file(path);
        }
    }
    plat_free_names(names, count);
    qsort(v, *n, sizeof *v, newest_first);
    *steps = v;
    return VKT_OK;
}

void ckpt_dir_step_path(char *buf, size_t size, const char *dir, uint64_t step)
{
    snprintf(buf, size, "%s/ckpt-%llu.vkt", dir, (unsigned long long)step);
}

/* Room kept for the last line "... and <n> more like these" (n up to 10 digits). */
#define NOTE_MORE "... and "
#define NOTE_MORE_ROOM 40

void ckpt_dir_note(char *notes, size_t size, const char *msg)
{
    if (!notes || !size)
        return;
    size_t used = strlen(notes), n = strlen(msg);
    char *last = strrchr(notes, '\n');
    last = last ? last + 1 : notes;
    unsigned more = 0;
    if (strncmp(last, NOTE_MORE, strlen(NOTE_MORE)) == 0 &&
        sscanf(last + strlen(NOTE_MORE), "%u", &more) == 1) {
        /* full already: count this one too (the line has room: NOTE_MORE_ROOM) */
        snprintf(last, size - (size_t)(last - notes), NOTE_MORE "%u more like these", more + 1);
        return;
    }
    /* a message goes in whole, leaving room for the count line, or not at all */
    if (used + (used ? 1 : 0) + n + NOTE_MORE_ROOM < size)
        snprintf(notes + used, size - used, "%s%s", used ? "\n" : "", msg);
    else if (used + NOTE_MORE_ROOM < size)
        snprintf(notes + used, size - used, "%s" NOTE_MORE "1 more like these",
                 used ? "\n" : "");
}

/* ---- the folder's lock ----------------------------------------------------------- */

/* A hidden file, so listings of the folder show the checkpoints alone. */
#define LOCK_NAME ".vkt.lock"

struct vkt_checkpoint_lock {
    plat_file_lock *file;
};

/* What a holder writes into the lock file: "pid 1234 on host". */
static void own_note(char *buf, size_t size)
{
    char host[256];
    plat_hostname(host, sizeof host);
    snprintf(buf, size, "pid %ld on %s", plat_process_id(), host);
}

/* Tries the lock of `dir` (which exists). Returns 0 locked (*held set), 1 held by this
 * process already (through vkt_checkpoint_dir_lock or another trainer's operation), 2
 * held by another process (its note in `other`), -1 no lock possible (reason in other). */
static int try_lock(const char *dir, plat_file_lock **held, char *other, size_t other_size)
{
    char path[PATH_SIZE], mine[300];
    snprintf(path, sizeof path, "%s/%s", dir, LOCK_NAME);
    own_note(mine, sizeof mine);
    int r = plat_file_lock_try(path, mine, held, other, other_size);
    if (r == 1) /* the holder's note tells this process from another */
        return other[0] && strcmp(other, mine) == 0 ? 1 : 2;
    return r;
}

static vkt_status busy(char *errmsg, const char *dir, const char *other)
{
    return err_fail(errmsg, VKT_ERROR_STATE, "checkpoint folder '%s' is in use by another run"
                    "%s%s%s: two runs on one folder would delete each other's checkpoints; "
                    "wait for it to end or use another folder", dir, other[0] ? " (" : "",
                    other, other[0] ? ")" : "");
}

vkt_status vkt_checkpoint_dir_lock(const char *dir, vkt_checkpoint_lock **out)
{
    if (out)
        *out = NULL;
    if (!dir || !out)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_checkpoint_dir_lock: dir and out are required");
    if (plat_mkdirs(dir) != 0)
        return err_fail(NULL, VKT_ERROR_IO, "cannot create the checkpoint folder '%s'", dir);
    vkt_checkpoint_lock *l = calloc(1, sizeof *l);
    if (!l)
        return err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    char other[300];
    int r = try_lock(dir, &l->file, other, sizeof other);
    if (r == 0) {
        *out = l;
        return VKT_OK;
    }
    free(l);
    if (r == 1)
        return err_fail(NULL, VKT_ERROR_STATE, "checkpoint folder '%s' is already locked by "
                        "this process", dir);
    if (r == 2)
        return busy(NULL, dir, other);
    return err_fail(NULL, VKT_ERROR_IO, "cannot lock the checkpoint folder '%s' (%s/%s): %s",
                    dir, dir, LOCK_NAME, other);
}

void vkt_checkpoint_dir_unlock(vkt_checkpoint_lock *lock)
{
    if (!lock)
        return;
    plat_file_unlock(lock->file);
    free(lock);
}

/* The lock for one operation on an existing folder, unless this process holds it:
 * another process's lock is VKT_ERROR_STATE. A folder that cannot be locked (read-only,
 * say) is used without (saving there fails on its own). */
vkt_status ckpt_dir_enter(const char *dir, plat_file_lock **held, char *errmsg)
{
    char other[300];
    *held = NULL;
    if (plat_file_stat(dir, NULL, NULL) != 0)
        return VKT_OK; /* no folder: nothing to read, nothing to protect */
    return try_lock(dir, held, other, sizeof other) == 2 ? busy(errmsg, dir, other) : VKT_OK;
}

/* ---- verification, cached by path, size and modification time --------------------- */

enum { VERIFIED_SLOTS = 32 };
static struct {
    char path[512];
    uint64_t size;
    int64_t mtime_ns;
} verified[VERIFIED_SLOTS];
static unsigned verified_next;
static atomic_flag verified_busy = ATOMIC_FLAG_INIT; /* a short spin: table lookups only */

static void verified_lock(void)
{
    while (atomic_flag_test_and_set_explicit(&verified_busy, memory_order_acquire))
        ;
}

static void verified_unlock(void) { atomic_flag_clear_explicit(&verified_busy, memory_order_release); }

static int verified_find(const char *path, uint64_t size, int64_t mtime)
{
    int hit = 0;
    verified_lock();
    for (unsigned i = 0; i < VERIFIED_SLOTS && !hit; i++)
        hit = verified[i].size == size && verified[i].mtime_ns == mtime &&
              strcmp(verified[i].path, path) == 0;
    verified_unlock();
    return hit;
}

/* Remembers that `path` as it is now parsed with its checksums. */
void ckpt_dir_verified(const char *path)
{
    uint64_t size;
    int64_t mtime;
    if (strlen(path) >= sizeof verified[0].path || plat_file_stat(path, &size, &mtime) != 0)
        return;
    verified_lock();
    unsigned i = verified_next++ % VERIFIED_SLOTS;
    snprintf(verified[i].path, sizeof verified[i].path, "%s", path);
    verified[i].size = size;
    verified[i].mtime_ns = mtime;
    verified_unlock();
}

/* Whether `path` is a whole checkpoint (header, checksums, sections): VKT_OK,
 * VKT_ERROR_FORMAT (corrupt) or VKT_ERROR_IO (unreadable), with the message in `msg`. */
static vkt_status verify(const char *path, char *msg)
{
    uint64_t size;
    int64_t mtime;
    if (plat_file_stat(path, &size, &mtime) == 0 && verified_find(path, size, mtime))
        return VKT_OK;
    ckpt k;
    vkt_status st = ckpt_load(path, &k, msg);
    if (st == VKT_OK) {
        ckpt_free(&k);
        ckpt_dir_verified(path);
    }
    return st;
}

/* Renames a corrupt (or diverged) checkpoint to <path><suffix> (".corrupt",
 * ".diverged"; then <path><suffix>.2, ...: older evidence is kept), so that it is neither
 * used, nor counted, nor deleted; notes what happened. */
static void move_aside(const char *path, const char *suffix, const char *msg, char *notes,
                       size_t notes_size)
{
    char to[PATH_SIZE + 32], line[VKT_ERRMSG_SIZE + PATH_SIZE + 64];
    int moved = 0;
    for (int i = 1; i < 100 && !moved; i++) {
        if (i == 1)
            snprintf(to, sizeof to, "%s%s", path, suffix);
        else
            snprintf(to, sizeof to, "%s%s.%d", path, suffix, i);
        moved = plat_file_stat(to, NULL, NULL) != 0 && rename(path, to) == 0;
    }
    if (moved)
        snprintf(line, sizeof line, "%s (moved aside to '%s')", msg, to);
    else
        snprintf(line, sizeof line, "%s (could not be moved aside)", msg);
    ckpt_dir_note(notes, notes_size, line);
}

/* ---- saving with retention --------------------------------------------------------- */

/* Keeps the newest `keep` checkpoints that verify (0: all), the one just saved (`saved`)
 * always among them; deletes older ones; moves corrupt ones within reach aside instead of
 * counting them; leaves unreadable ones in place (noted). Also removes temporary files of
 * interrupted saves. */
vkt_status ckpt_dir_retain(const char *dir, uint32_t keep, uint64_t saved, char *notes,
                           size_t notes_size)
{
    uint64_t *steps;
    size_t n;
    vkt_status st = list_steps(dir, 1, &steps, &n);
    if (st != VKT_OK)
        return st;
    uint32_t valid = 0;
    for (size_t i = 0; i < n; i++) { /* newest first */
        char path[PATH_SIZE], msg[VKT_ERRMSG_SIZE];
        ckpt_dir_step_path(path, sizeof path, dir, steps[i]);
        if (steps[i] == saved) {
            valid++;
        } else if (keep && valid >= keep) {
            plat_remove_file(path); /* older than the newest `keep` valid ones */
        } else if ((st = verify(path, msg)) == VKT_OK) {
            valid++;
        } else if (st == VKT_ERROR_FORMAT) {
            move_aside(path, ".corrupt", msg, notes, notes_size);
        } else {
            ckpt_dir_note(notes, notes_size, msg); /* unreadable: neither counted nor deleted */
        }
    }
    free(steps);
    return VKT_OK;
}

int ckpt_dir_newest_valid(const char *dir, uint64_t *step)
{
    uint64_t *steps;
    size_t n;
    int found = 0;
    if (list_steps(dir, 0, &steps, &n) != VKT_OK)
        return 0;
    char path[PATH_SIZE], msg[VKT_ERRMSG_SIZE];
    for (size_t i = 0; i < n && !found; i++) { /* newest first */
        ckpt_dir_step_path(path, sizeof path, dir, steps[i]);
        if ((found = verify(path, msg) == VKT_OK))
            *step = steps[i];
    }
    free(steps);
    return found;
}

/* Why the newest checkpoints were passed over: their status and message, newest first. */
typedef struct skipped {
    vkt_status st;
    char *msg;
} skipped;

/* After the search: each checkpoint passed over is noted, and with `move` (once a usable
 * one was found) a corrupt one moved aside as .corrupt, a diverged one as .diverged. */
static void report_skipped(const char *dir, const uint64_t *steps, skipped *s, size_t n,
                           int move, char *notes, size_t notes_size)
{
    char path[PATH_SIZE];
    for (size_t j = 0; j < n; j++) {
        if (s[j].st == VKT_OK)
            continue;
        const char *msg = s[j].msg ? s[j].msg : "corrupt";
        ckpt_dir_step_path(path, sizeof path, dir, steps[j]);
        if (move && s[j].st == VKT_ERROR_FORMAT)
            move_aside(path, ".corrupt", msg, notes, notes_size);
        else if (move && s[j].st == VKT_ERROR_DIVERGED)
            move_aside(path, ".diverged", msg, notes, notes_size);
        else
            ckpt_dir_note(notes, notes_size, msg);
        free(s[j].msg);
    }
}

/* The newest checkpoint of dir that parses and that `accept` takes; corrupt and diverged
 * newer ones are described in notes, and with `move` (the caller holds the folder) moved
 * aside once an older usable one is found (with none found, every file stays, and so
 * does the error). */
vkt_status ckpt_dir_find_latest(const char *dir, ckpt *out, char *path, size_t path_size,
                                int *found, char *notes, size_t notes_size, char *errmsg,
                                int move, ckpt_accept_fn accept, void *user)
{
    uint64_t *steps;
    size_t n;
    *found = 0;
    vkt_status st = list_steps(dir, 0, &steps, &n);
    if (st != VKT_OK)
        return err_fail(errmsg, st, "%s", vkt_last_error());
    skipped *s = calloc(n ? n : 1, sizeof *s);
    if (!s) {
        free(steps);
        return err_fail(errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    vkt_status last = VKT_OK;
    char msg[VKT_ERRMSG_SIZE] = "";
    size_t i = 0, diverged = n; /* the newest diverged one */
    for (; i < n && !*found; i++) {
        ckpt_dir_step_path(path, path_size, dir, steps[i]);
        last = ckpt_load(path, out, msg);
        if (last == VKT_OK && accept && (last = accept(user, path, out, msg)) != VKT_OK)
            ckpt_free(out);
        if (last == VKT_OK) {
            *found = 1;
            continue;
        }
        if (last != VKT_ERROR_FORMAT && last != VKT_ERROR_IO && last != VKT_ERROR_DIVERGED)
            break; /* another model, say: no fallback */
        s[i].st = last;
        s[i].msg = strdup(msg);
        diverged = last == VKT_ERROR_DIVERGED && diverged == n ? i : diverged;
        err_fail(errmsg, last, "%s", msg);
    }
    if (!*found && i < n) /* the search ended on an error */
        st = err_fail(errmsg, last, "%s", msg);
    else if (!*found && diverged < n)
        st = err_fail(errmsg, VKT_ERROR_DIVERGED, "no checkpoint in '%s' is from before "
                      "training diverged (the newest: %s); the files stay: move them out of "
                      "the folder to start again from step 0", dir,
                      s[diverged].msg ? s[diverged].msg : "diverged");
    else if (!*found && n > 0)
        st = err_fail(errmsg, last, "no valid checkpoint in '%s': %s", dir, msg);
    report_skipped(dir, steps, s, i, move && *found, notes, notes_size); /* frees the msgs */
    free(s);
    free(steps);
    return st;
}

/* ---- safetensors ---------------------------------------------------------------- */

static void json_string(ckpt_buf *b, const char *s)
{
    ckpt_put_bytes(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            ckpt_put_bytes(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            ckpt_put_bytes(b, esc, 6);
        } else {
            ckpt_put_bytes(b, &c, 1);
        }
    }
    ckpt_put_bytes(b, "\"", 1);
}

static void json_text(ckpt_buf *b, const char *s) { ckpt_put_bytes(b, s, strlen(s)); }

/* The header: {"name":{"dtype":"F32","shape":[...],"data_offsets":[begin,end]},...}, with
 * the safetensors name and size of `dtype`'s row. */
static void safetensors_header(const ckpt *k, const kdt_info *dt, ckpt_buf *h)
{
    char num[96];
    json_text(h, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"vktrain\",\"step\":\"");
    snprintf(num, sizeof num, "%llu\"}", (unsigned long long)k->step);
    json_text(h, num);
    uint64_t at = 0;
    for (uint32_t i = 0; i < k->n_tensors; i++) {
        const ckpt_tensor *c = &k->tensors[i];
        json_text(h, ",");
        json_string(h, c->name);
        json_text(h, ":{\"dtype\":\"");
        json_text(h, dt->safetensors);
        json_text(h, "\",\"shape\":[");
        for (uint32_t d = 0; d < c->shape.ndim; d++) {
            snprintf(num, sizeof num, "%s%u", d ? "," : "", c->shape.dims[d]);
            json_text(h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + c->count * dt->size));
        json_text(h, num);
        at += c->count * dt->size;
    }
    json_text(h, "}");
    while (h->n % 8) /* the data starts 8-byte aligned */
        json_text(h, " ");
}

/* Tensor c's values (fp32, little-endian in the checkpoint) appended to f as `dtype`,
 * little-endian, rounded as vkt_convert rounds. A finite value that becomes an infinity
 * (fp16 past 65504) is VKT_ERROR_INVALID_ARGUMENT naming the tensor: never a silent
 * infinity in a file meant for inference. */
static vkt_status put_tensor(ckpt_buf *f, const ckpt_tensor *c, vkt_dtype dtype)
{
    if (dtype == VKT_DTYPE_FP32) {
        ckpt_put_bytes(f, c->data, c->count * 4);
        return VKT_OK;
    }
    enum { CHUNK = 1024 };
    float v[CHUNK], back[CHUNK];
    uint16_t h[CHUNK];
    unsigned char out[2 * CHUNK];
    for (uint64_t i0 = 0; i0 < c->count; i0 += CHUNK) {
        size_t n = c->count - i0 < CHUNK ? (size_t)(c->count - i0) : CHUNK;
        for (size_t i = 0; i < n; i++) {
            const unsigned char *p = c->data + 4 * (i0 + i);
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&v[i], &u, 4);
        }
        vkt_convert(VKT_DTYPE_FP32, v, dtype, h, n);
        vkt_convert(dtype, h, VKT_DTYPE_FP32, back, n);
        for (size_t i = 0; i < n; i++) {
            if (isfinite(v[i]) && !isfinite(back[i]))
                return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                                "tensor '%s' element %llu is %g, past the largest finite %s; "
                                "export it as fp32 or bf16", c->name,
                                (unsigned long long)(i0 + i), (double)v[i],
                                vkt_dtype_name(dtype));
            out[2 * i] = (unsigned char)(h[i] & 0xff);
            out[2 * i + 1] = (unsigned char)(h[i] >> 8);
        }
        ckpt_put_bytes(f, out, 2 * n);
    }
    return VKT_OK;
}

/* Whether a name in a checkpoint folder belongs to the folder: a checkpoint, a corrupt one
 * moved aside (ckpt-<step>.vkt.corrupt...), a save's temporary file, the lock. */
static int folder_name(const char *name)
{
    return strncmp(name, "ckpt-", 5) == 0 || strncmp(name, ".ckpt-", 6) == 0 ||
           strcmp(name, LOCK_NAME) == 0;
}

/* An export never replaces a file of the checkpoint folder, compared by identity (links
 * and other spellings of the path alike), nor creates one there that would be taken for a
 * checkpoint; then the general rule (io_output_check: no other checkpoint, no folder...). */
static vkt_status export_target_ok(const char *dir, const char *out)
{
    char **names = NULL, p[PATH_SIZE], final[PATH_SIZE];
    size_t count = 0;
    vkt_status st = VKT_OK;
    if (plat_list_dir(dir, &names, &count) == 0) {
        for (size_t i = 0; i < count && st == VKT_OK; i++) {
            if (!folder_name(names[i]) ||
                snprintf(p, sizeof p, "%s/%s", dir, names[i]) >= (int)sizeof p ||
                !plat_same_file(out, p))
                continue;
            st = err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                          "the output '%s' is %s%s%s of the checkpoint folder '%s': an export "
                          "never replaces a checkpoint or a file of its folder; choose another "
                          "file", out, strcmp(out, p) ? "the same file as '" : "a file",
                          strcmp(out, p) ? p : "", strcmp(out, p) ? "'" : "", dir);
        }
        plat_free_names(names, count);
    }
    if (st != VKT_OK)
        return st;
    if (plat_final_path(out, final, sizeof final) == 0) { /* a new name in the folder */
        char *slash = strrchr(final, '/');
#if defined(_WIN32)
        char *back = strrchr(final, '\\');
        if (back && (!slash || back > slash))
            slash = back;
#endif
        const char *base = slash ? slash + 1 : final;
        if (slash)
            *slash = '\0';
        if (folder_name(base) && plat_same_file(slash ? (final[0] ? final : "/") : ".", dir))
            return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                            "the output '%s' would be taken for a checkpoint of the folder "
                            "'%s' (ckpt-...): an export never writes one; choose another "
                            "name", out, dir);
    }
    return io_output_check(out, NULL, 0, NULL);
}

vkt_status vkt_checkpoint_export_safetensors_v3(const char *dir, const char *out_path,
                                                vkt_dtype dtype, uint64_t *out_step,
                                                char *notes, size_t notes_size)
{
    if (out_step)
        *out_step = 0;
    if (notes && notes_size)
        notes[0] = '\0';
    if (!dir || !out_path)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_checkpoint_export_safetensors: dir and out_path are required");
    const kdt_info *dt = kdt_info_of(dtype);
    if (!dt)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_checkpoint_export_safetensors: dtype %d is not a vkt_dtype (fp32 "
                        "0, fp16 1, bf16 2)", (int)dtype);
    vkt_status st = export_target_ok(dir, out_path);
    if (st != VKT_OK)
        return st;
    ckpt k;
    char path[PATH_SIZE];
    int found = 0;
    st = ckpt_dir_find_latest(dir, &k, path, sizeof path, &found, notes, notes_size, NULL, 0,
                              NULL, NULL);
    if (st != VKT_OK)
        return st;
    if (!found)
        return err_fail(NULL, VKT_ERROR_IO, "no checkpoint (ckpt-<step>.vkt) in '%s'", dir);
    ckpt_buf h = {0}, f = {0};
    safetensors_header(&k, dt, &h);
    ckpt_put_u64(&f, h.n); /* little-endian header length */
    ckpt_put_bytes(&f, h.p, h.n);
    for (uint32_t i = 0; i < k.n_tensors && st == VKT_OK; i++)
        st = put_tensor(&f, &k.tensors[i], dtype);
    if (st == VKT_OK && (h.oom || f.oom))
        st = err_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    else if (st == VKT_OK) {
        const char *inputs[] = {path};
        st = io_output_write(out_path, f.p, f.n, inputs, 1, NULL);
    }
    if (st == VKT_OK && out_step)
        *out_step = k.step;
    free(h.p);
    free(f.p);
    ckpt_free(&k);
    return st;
}

vkt_status vkt_checkpoint_export_safetensors_v2(const char *dir, const char *out_path,
                                                uint64_t *out_step, char *notes,
                                                size_t notes_size)
{
    return vkt_checkpoint_export_safetensors_v3(dir, out_path, VKT_DTYPE_FP32, out_step, notes,
                                                notes_size);
}

vkt_status vkt_checkpoint_export_safetensors(const char *dir, const char *out_path,
                                             uint64_t *out_step)
{
    return vkt_checkpoint_export_safetensors_v2(dir, out_path, out_step, NULL, 0);
}
