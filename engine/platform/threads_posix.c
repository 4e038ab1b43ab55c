/* Threads, monitors and barriers over POSIX threads (the barrier is built from a mutex
 * and a condition variable: pthread_barrier is missing on macOS). */
#include "platform.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct plat_thread {
    pthread_t id;
    plat_thread_fn fn;
    void *arg;
};

static void *trampoline(void *p)
{
    plat_thread *t = p;
    t->fn(t->arg);
    return NULL;
}

int plat_thread_start(plat_thread **out, plat_thread_fn fn, void *arg)
{
    plat_thread *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->fn = fn;
    t->arg = arg;
    if (pthread_create(&t->id, NULL, trampoline, t) != 0) {
        free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void plat_thread_join(plat_thread *t)
{
    if (!t)
        return;
    pthread_join(t->id, NULL);
    free(t);
}

struct plat_monitor {
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

plat_monitor *plat_monitor_create(void)
{
    plat_monitor *m = calloc(1, sizeof *m);
    if (m && (pthread_mutex_init(&m->mu, NULL) || pthread_cond_init(&m->cv, NULL))) {
        free(m);
        return NULL;
    }
    return m;
}

void plat_monitor_destroy(plat_monitor *m)
{
    if (!m)
        return;
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void plat_monitor_lock(plat_monitor *m) { pthread_mutex_lock(&m->mu); }
void plat_monitor_unlock(plat_monitor *m) { pthread_mutex_unlock(&m->mu); }
void plat_monitor_wait(plat_monitor *m) { pthread_cond_wait(&m->cv, &m->mu); }
void plat_monitor_broadcast(plat_monitor *m) { pthread_cond_broadcast(&m->cv); }

struct plat_barrier {
    plat_monitor *mon;
    unsigned count, arrived;
    unsigned long generation;
    int votes, result; /* OR of this round's votes; the result of the last round */
};

plat_barrier *plat_barrier_create(unsigned count)
{
    plat_barrier *b = calloc(1, sizeof *b);
    if (b && !(b->mon = plat_monitor_create())) {
        free(b);
        return NULL;
    }
    if (b)
        b->count = count;
    return b;
}

void plat_barrier_destroy(plat_barrier *b)
{
    if (!b)
        return;
    plat_monitor_destroy(b->mon);
    free(b);
}

int plat_barrier_wait(plat_barrier *b, int vote)
{
    plat_monitor_lock(b->mon);
    unsigned long gen = b->generation;
    b->votes |= vote != 0;
    if (++b->arrived == b->count) {
        b->result = b->votes;
        b->votes = 0;
        b->arrived = 0;
        b->generation++;
        plat_monitor_broadcast(b->mon);
    } else {
        while (gen == b->generation)
            plat_monitor_wait(b->mon);
    }
    /* The result cannot change before every thread of this round has read it: the
     * next round completes only once all of them have arrived there. */
    int result = b->result;
    plat_monitor_unlock(b->mon);
    return result;
}

void plat_sleep(double seconds)
{
    if (seconds <= 0)
        return;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
