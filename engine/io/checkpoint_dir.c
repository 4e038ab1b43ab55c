/* checkpoint_dir.c - a directory of checkpoints `ckpt-<step>.vkt`: saving with the
 * newest few kept, finding and restoring the newest valid one (a corrupt newer file is
 * reported and skipped), and exporting one as safetensors. */
#include "io/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "parallel/trainer.h"
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
    if (vkt_list_dir(dir, &names, &count) != 0)
        return VKT_OK; /* no directory yet: no checkpoints */
    uint64_t *v = malloc((count ? count : 1) * sizeof *v);
    if (!v) {
        vkt_free_names(names, count);
        return vkt_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (size_t i = 0; i < count; i++) {
        if (parse_name(names[i], &v[*n])) {
            (*n)++;
        } else if (clean && strncmp(names[i], "ckpt-", 5) == 0 &&
                   strstr(names[i], ".vkt.tmp.")) {
            char path[PATH_SIZE];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            vkt_remove_file(path);
        }
    }
    vkt_free_names(names, count);
    qsort(v, *n, sizeof *v, newest_first);
    *steps = v;
    return VKT_OK;
}

static void step_path(char *buf, size_t size, const char *dir, uint64_t step)
{
    snprintf(buf, size, "%s/ckpt-%llu.vkt", dir, (unsigned long long)step);
}

vkt_status vkt_checkpoint_save_dir(vkt_trainer *t, const char *dir, uint32_t keep)
{
    if (!t || !dir)
        return vkt_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_checkpoint_save_dir: trainer and dir are required");
    if (!trainer_is_chief(t)) /* across ranks the chief alone writes */
        return VKT_OK;
    if (vkt_mkdirs(dir) != 0)
        return trainer_fail(t, VKT_ERROR_IO, "cannot create the checkpoint directory '%s'",
                            dir);
    char path[PATH_SIZE];
    step_path(path, sizeof path, dir, vkt_trainer_checkpoint_step(t));
    vkt_status st = vkt_trainer_save(t, path);
    if (st != VKT_OK)
        return st;
    uint64_t *steps;
    size_t n;
    if ((st = list_steps(dir, 1, &steps, &n)) != VKT_OK)
        return trainer_fail(t, st, "%s", vkt_last_error());
    for (size_t i = keep; keep && i < n; i++) { /* older than the newest `keep` */
        step_path(path, sizeof path, dir, steps[i]);
        vkt_remove_file(path);
    }
    free(steps);
    return VKT_OK;
}

static void note(char *notes, size_t size, const char *msg)
{
    if (!notes || !size)
        return;
    size_t used = strlen(notes);
    if (used + 1 < size)
        snprintf(notes + used, size - used, "%s%s", used ? "\n" : "", msg);
}

/* The newest checkpoint of dir that parses; corrupt newer ones are described in notes. */
static vkt_status find_latest(const char *dir, ckpt *out, char *path, size_t path_size,
                              int *found, char *notes, size_t notes_size, char *errmsg)
{
    uint64_t *steps;
    size_t n;
    *found = 0;
    vkt_status st = list_steps(dir, 0, &steps, &n);
    if (st != VKT_OK)
        return vkt_fail(errmsg, st, "%s", vkt_last_error());
    vkt_status last = VKT_OK;
    char msg[VKT_ERRMSG_SIZE] = "";
    for (size_t i = 0; i < n && !*found; i++) {
        step_path(path, path_size, dir, steps[i]);
        last = ckpt_load(path, out, msg);
        if (last == VKT_OK) {
            *found = 1;
        } else {
            note(notes, notes_size, msg);
            vkt_fail(errmsg, last, "%s", msg);
        }
    }
    free(steps);
    if (!*found && n > 0)
        return vkt_fail(errmsg, last, "no valid checkpoint in '%s': %s", dir, msg);
    return VKT_OK;
}

vkt_status vkt_checkpoint_restore_latest(vkt_trainer *t, const char *dir, int *out_found,
                                         uint64_t *out_step, char *notes, size_t notes_size)
{
    if (out_found)
        *out_found = 0;
    if (out_step)
        *out_step = 0;
    if (notes && notes_size)
        notes[0] = '\0';
    if (!t || !dir)
        return vkt_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_checkpoint_restore_latest: trainer and dir are required");
    ckpt k = {0};
    char path[PATH_SIZE] = "";
    int found = 0;
    vkt_status st = VKT_OK;
    if (trainer_is_chief(t)) /* across ranks the chief reads and shares */
        st = find_latest(dir, &k, path, sizeof path, &found, notes, notes_size, t->errmsg);
    if ((st = ckpt_share(t, st, &found, &k, path, sizeof path)) != VKT_OK || !found)
        return st;
    st = ckpt_restore(t, path, &k);
    if (st == VKT_OK) {
        if (out_found)
            *out_found = 1;
        if (out_step)
            *out_step = k.step;
    }
    ckpt_free(&k);
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

/* The header: {"name":{"dtype":"F32","shape":[...],"data_offsets":[begin,end]},...}. */
static void safetensors_header(const ckpt *k, ckpt_buf *h)
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
        json_text(h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (uint32_t d = 0; d < c->shape.ndim; d++) {
            snprintf(num, sizeof num, "%s%u", d ? "," : "", c->shape.dims[d]);
            json_text(h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + c->count * 4));
        json_text(h, num);
        at += c->count * 4;
    }
    json_text(h, "}");
    while (h->n % 8) /* the data starts 8-byte aligned */
        json_text(h, " ");
}

vkt_status vkt_checkpoint_export_safetensors_v2(const char *dir, const char *out_path,
                                                uint64_t *out_step, char *notes,
                                                size_t notes_size)
{
    if (out_step)
        *out_step = 0;
    if (notes && notes_size)
        notes[0] = '\0';
    if (!dir || !out_path)
        return vkt_fail(NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_checkpoint_export_safetensors: dir and out_path are required");
    ckpt k;
    char path[PATH_SIZE];
    int found = 0;
    vkt_status st = find_latest(dir, &k, path, sizeof path, &found, notes, notes_size, NULL);
    if (st != VKT_OK)
        return st;
    if (!found)
        return vkt_fail(NULL, VKT_ERROR_IO, "no checkpoint (ckpt-<step>.vkt) in '%s'", dir);
    ckpt_buf h = {0}, f = {0};
    safetensors_header(&k, &h);
    ckpt_put_u64(&f, h.n); /* little-endian header length */
    ckpt_put_bytes(&f, h.p, h.n);
    for (uint32_t i = 0; i < k.n_tensors; i++) /* stored little-endian already */
        ckpt_put_bytes(&f, k.tensors[i].data, k.tensors[i].count * 4);
    if (h.oom || f.oom)
        st = vkt_fail(NULL, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    else if (vkt_write_file_atomic(out_path, f.p, f.n) != 0)
        st = vkt_fail(NULL, VKT_ERROR_IO, "cannot write '%s'", out_path);
    if (st == VKT_OK && out_step)
        *out_step = k.step;
    free(h.p);
    free(f.p);
    ckpt_free(&k);
    return st;
}

vkt_status vkt_checkpoint_export_safetensors(const char *dir, const char *out_path,
                                             uint64_t *out_step)
{
    return vkt_checkpoint_export_safetensors_v2(dir, out_path, out_step, NULL, 0);
}
