/* trainer_checkpoint_dir.c - a trainer and a folder of checkpoints (the folder itself:
 * engine/io/checkpoint_dir.c): saving with the newest few valid ones kept, and restoring
 * the newest valid one (across ranks the chief reads and shares it). */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "parallel/trainer.h"
#include "platform/platform.h"

/* After the guard refused a save: nothing was written or deleted; which checkpoint to go
 * back to. */
static void say_what_stays(vkt_trainer *t, const char *dir)
{
    uint64_t step = 0;
    if (ckpt_dir_newest_valid(dir, &step))
        trainer_fail(t, VKT_ERROR_DIVERGED, "%s; not saved, nothing deleted: the newest "
                     "checkpoint, %s/ckpt-%llu.vkt, is from before the divergence: resume "
                     "from it with a smaller learning rate or gradient clipping", t->guard_msg, dir,
                     (unsigned long long)step);
    else
        trainer_fail(t, VKT_ERROR_DIVERGED, "%s; not saved (no checkpoint in '%s' yet): start "
                     "again with a smaller learning rate or gradient clipping", t->guard_msg,
                     dir);
}

vkt_status vkt_checkpoint_save_dir_v2(vkt_trainer *t, const char *dir, uint32_t keep,
                                      char *notes, size_t notes_size)
{
    if (notes && notes_size)
        notes[0] = '\0';
    if (!t || !dir)
        return err_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_checkpoint_save_dir: trainer and dir are required");
    if (!trainer_is_chief(t)) /* across ranks the chief alone writes; every rank checks */
        return trainer_ckpt_check(t);
    if (plat_mkdirs(dir) != 0)
        return trainer_fail(t, VKT_ERROR_IO, "cannot create the checkpoint directory '%s'",
                            dir);
    plat_file_lock *held;
    vkt_status st = ckpt_dir_enter(dir, &held, t->errmsg);
    if (st != VKT_OK)
        return st;
    char path[CKPT_PATH_SIZE];
    uint64_t step = vkt_trainer_checkpoint_step(t);
    ckpt_dir_step_path(path, sizeof path, dir, step);
    if ((st = vkt_trainer_save(t, path)) == VKT_OK) {
        ckpt_dir_verified(path); /* written and renamed whole just now */
        if ((st = ckpt_dir_retain(dir, keep, step, notes, notes_size)) != VKT_OK)
            trainer_fail(t, st, "%s", vkt_last_error());
    } else if (st == VKT_ERROR_DIVERGED) {
        say_what_stays(t, dir);
    }
    plat_file_unlock(held);
    return st;
}

vkt_status vkt_checkpoint_save_dir(vkt_trainer *t, const char *dir, uint32_t keep)
{
    return vkt_checkpoint_save_dir_v2(t, dir, keep, NULL, 0);
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
        return err_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_checkpoint_restore_latest: trainer and dir are required");
    ckpt k = {0};
    char path[CKPT_PATH_SIZE] = "";
    int found = 0;
    vkt_status st = VKT_OK;
    plat_file_lock *held = NULL;
    if (trainer_is_chief(t) && /* across ranks the chief reads and shares */
        (st = ckpt_dir_enter(dir, &held, t->errmsg)) == VKT_OK)
        st = ckpt_dir_find_latest(dir, &k, path, sizeof path, &found, notes, notes_size,
                                  t->errmsg, 1, trainer_ckpt_usable, t);
    plat_file_unlock(held);
    if ((st = trainer_ckpt_share(t, st, &found, &k, path, sizeof path)) != VKT_OK || !found)
        return st;
    st = trainer_ckpt_restore(t, path, &k);
    if (st == VKT_OK) {
        if (out_found)
            *out_found = 1;
        if (out_step)
            *out_step = k.step;
    }
    ckpt_free(&k);
    return st;
}
