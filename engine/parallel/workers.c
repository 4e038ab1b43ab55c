/* One host thread per replica, each driving its replica's queue. A job is handed to
 * all of them at once; the caller waits until every one has finished it. */
#include "trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void worker(void *arg)
{
    replica *r = arg;
    vkt_trainer *t = r->t;
    uint64_t seen = 0;
    for (;;) {
        plat_monitor_lock(t->mon);
        while (!t->quit && t->job_gen == seen)
            plat_monitor_wait(t->mon);
        if (t->quit) {
            plat_monitor_unlock(t->mon);
            return;
        }
        seen = t->job_gen;
        replica_job job = t->job;
        plat_monitor_unlock(t->mon);
        job(r);
        plat_monitor_lock(t->mon);
        t->jobs_done++;
        plat_monitor_broadcast(t->mon);
        plat_monitor_unlock(t->mon);
    }
}

vkt_status trainer_workers_start(vkt_trainer *t)
{
    t->mon = plat_monitor_create();
    t->barrier = plat_barrier_create(t->n_rep);
    t->threads = calloc(t->n_rep, sizeof *t->threads);
    if (!t->mon || !t->barrier || !t->threads)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for threads");
    for (uint32_t i = 0; i < t->n_rep; i++)
        if (plat_thread_start(&t->threads[i], worker, &t->rep[i]) != 0)
            return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "cannot start thread %u", i);
    return VKT_OK;
}

void trainer_workers_stop(vkt_trainer *t)
{
    if (!t->mon)
        return;
    plat_monitor_lock(t->mon);
    t->quit = 1;
    plat_monitor_broadcast(t->mon);
    plat_monitor_unlock(t->mon);
    for (uint32_t i = 0; t->threads && i < t->n_rep; i++)
        plat_thread_join(t->threads[i]);
    free(t->threads);
    t->threads = NULL;
    plat_barrier_destroy(t->barrier);
    plat_monitor_destroy(t->mon);
    t->barrier = NULL;
    t->mon = NULL;
}

vkt_status trainer_collect(vkt_trainer *t)
{
    for (uint32_t i = 0; i < t->n_rep; i++) {
        replica *r = &t->rep[i];
        if (r->status == VKT_OK)
            continue;
        if (r->status == VKT_ERROR_DEVICE_LOST && !t->lost) { /* for good: refuse later steps */
            t->lost = 1;
            snprintf(t->lost_msg, sizeof t->lost_msg,
                     "a device was lost earlier (%.900s); destroy the trainer", r->errmsg);
        }
        return trainer_fail(t, r->status, "%s", r->errmsg);
    }
    return VKT_OK;
}

/* The devices' idle time before and after a run is the caller's, not the exposed time
 * of its steps. */
static void disarm_idle(vkt_trainer *t)
{
    vkt_context *ctx;
    for (uint32_t i = 0; (ctx = trainer_holder_context(t, i)) != NULL; i++)
        gpu_context_idle_disarm(ctx);
}

vkt_status trainer_run_all(vkt_trainer *t, replica_job job)
{
    for (uint32_t i = 0; i < t->n_rep; i++) {
        t->rep[i].status = VKT_OK;
        t->rep[i].errmsg[0] = '\0';
    }
    disarm_idle(t);
    if (t->n_rep == 1) {
        job(&t->rep[0]);
        disarm_idle(t);
        return trainer_collect(t);
    }
    plat_monitor_lock(t->mon);
    t->job = job;
    t->job_gen++;
    uint64_t target = t->jobs_done + t->n_rep;
    plat_monitor_broadcast(t->mon);
    while (t->jobs_done < target)
        plat_monitor_wait(t->mon);
    plat_monitor_unlock(t->mon);
    disarm_idle(t);
    return trainer_collect(t);
}
