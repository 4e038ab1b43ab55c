/* Threads, monitors and barriers over Win32 (the POSIX side: threads_posix.c): threads
 * through _beginthreadex (the C runtime's per-thread state set up), a monitor as a slim
 * reader/writer lock taken exclusively with a condition variable. */
#if defined(_WIN32)
#include "platform.h"

#include <process.h>
#include <stdlib.h>
#include <windows.h>

struct plat_thread {
    HANDLE h;
    plat_thread_fn fn;
    void *arg;
};

static unsigned __stdcall trampoline(void *p)
{
    plat_thread *t = p;
    t->fn(t->arg);
    return 0;
}

int plat_thread_start(plat_thread **out, plat_thread_fn fn, void *arg)
{
    plat_thread *t = calloc(1, sizeof *t);
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

void plat_thread_join(plat_thread *t)
{
    if (!t)
        return;
    WaitForSingleObject(t->h, INFINITE);
    CloseHandle(t->h);
    free(t);
}

struct plat_monitor {
    SRWLOCK lock;
    CONDITION_VARIABLE cv;
};

plat_monitor *plat_monitor_create(void)
{
    plat_monitor *m = calloc(1, sizeof *m);
    if (m) {
        InitializeSRWLock(&m->lock);
        InitializeConditionVariable(&m->cv);
    }
    return m;
}

void plat_monitor_destroy(plat_monitor *m) { free(m); } /* SRW locks need no cleanup */
void plat_monitor_lock(plat_monitor *m) { AcquireSRWLockExclusive(&m->lock); }
void plat_monitor_unlock(plat_monitor *m) { ReleaseSRWLockExclusive(&m->lock); }
void plat_monitor_wait(plat_monitor *m) { SleepConditionVariableSRW(&m->cv, &m->lock, INFINITE, 0); }
void plat_monitor_broadcast(plat_monitor *m) { WakeAllConditionVariable(&m->cv); }

/* The barrier: the same generation-counting monitor as threads_posix.c. */
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
        while (gen == b->generation) /* a wake-up may be spurious */
            plat_monitor_wait(b->mon);
    }
    int result = b->result;
    plat_monitor_unlock(b->mon);
    return result;
}

void plat_sleep(double seconds)
{
    if (seconds <= 0)
        return;
    double ms = seconds * 1000.0;
    Sleep(ms >= 4294967294.0 ? 4294967294u : (DWORD)(ms + 0.5));
}
#endif /* _WIN32 */
