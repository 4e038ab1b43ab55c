/* Threads, monitors and barriers over Win32 (the POSIX side: threads_posix.c): threads
 * through _beginthreadex (the C runtime's per-thread state set up), a monitor as a slim
 * reader/writer lock taken exclusively with a condition variable. */
#if defined(_WIN32)
#include "platform.h"

#include <process.h>
#include <stdlib.h>
#include <windows.h>

struct vkt_thread {
    HANDLE h;
    vkt_thread_fn fn;
    void *arg;
};

static unsigned __stdcall trampoline(void *p)
{
    vkt_thread *t = p;
    t->fn(t->arg);
    return 0;
}

int vkt_thread_start(vkt_thread **out, vkt_thread_fn fn, void *arg)
{
    vkt_thread *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->fn = fn;
    t->arg = arg;
    uintptr_t h = _beginthreadex(NULL, 0, trampoline, t, 0, NULL);
    if (h == 0) {
        free(t);
        return -1;
    }
    t->h = (HANDLE)h;
    *out = t;
    return 0;
}

void vkt_thread_join(vkt_thread *t)
{
    if (!t)
        return;
    WaitForSingleObject(t->h, INFINITE);
    CloseHandle(t->h);
    free(t);
}

struct vkt_monitor {
    SRWLOCK lock;
    CONDITION_VARIABLE cv;
};

vkt_monitor *vkt_monitor_create(void)
{
    vkt_monitor *m = calloc(1, sizeof *m);
    if (m) {
        InitializeSRWLock(&m->lock);
        InitializeConditionVariable(&m->cv);
    }
    return m;
}

void vkt_monitor_destroy(vkt_monitor *m) { free(m); } /* SRW locks need no cleanup */
void vkt_monitor_lock(vkt_monitor *m) { AcquireSRWLockExclusive(&m->lock); }
void vkt_monitor_unlock(vkt_monitor *m) { ReleaseSRWLockExclusive(&m->lock); }
void vkt_monitor_wait(vkt_monitor *m) { SleepConditionVariableSRW(&m->cv, &m->lock, INFINITE, 0); }
void vkt_monitor_broadcast(vkt_monitor *m) { WakeAllConditionVariable(&m->cv); }

/* The barrier: the same generation-counting monitor as threads_posix.c. */
struct vkt_barrier {
    vkt_monitor *mon;
    unsigned count, arrived;
    unsigned long generation;
    int votes, result; /* OR of this round's votes; the result of the last round */
};

vkt_barrier *vkt_barrier_create(unsigned count)
{
    vkt_barrier *b = calloc(1, sizeof *b);
    if (b && !(b->mon = vkt_monitor_create())) {
        free(b);
        return NULL;
    }
    if (b)
        b->count = count;
    return b;
}

void vkt_barrier_destroy(vkt_barrier *b)
{
    if (!b)
        return;
    vkt_monitor_destroy(b->mon);
    free(b);
}

int vkt_barrier_wait(vkt_barrier *b, int vote)
{
    vkt_monitor_lock(b->mon);
    unsigned long gen = b->generation;
    b->votes |= vote != 0;
    if (++b->arrived == b->count) {
        b->result = b->votes;
        b->votes = 0;
        b->arrived = 0;
        b->generation++;
        vkt_monitor_broadcast(b->mon);
    } else {
        while (gen == b->generation) /* a wake-up may be spurious */
            vkt_monitor_wait(b->mon);
    }
    int result = b->result;
    vkt_monitor_unlock(b->mon);
    return result;
}

void vkt_sleep(double seconds)
{
    if (seconds <= 0)
        return;
    double ms = seconds * 1000.0;
    Sleep(ms >= 4294967294.0 ? 4294967294u : (DWORD)(ms + 0.5));
}
#endif /* _WIN32 */
