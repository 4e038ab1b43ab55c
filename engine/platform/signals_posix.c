/* POSIX part of platform.h's termination requests: SIGINT, SIGTERM and SIGHUP (a closed
 * terminal or ssh session) caught by a handler
 * that only records the signal (async-signal-safe), the second one restoring the default
 * action and raising the signal again, so the process ends as the signal would end it. */
#include "platform.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

/* Written by the handler, read by any thread: a lock-free atomic is both async-signal-safe
 * (C11 7.14.1.1) and free of data races, where a volatile sig_atomic_t is only the former. */
#if ATOMIC_INT_LOCK_FREE != 2
#error "termination requests need a lock-free atomic int"
#endif
static atomic_int pending;   /* the first signal's number, 0 before it */
static atomic_int installed; /* 1 while our handlers are in place */

static const int caught[] = {SIGINT, SIGTERM, SIGHUP};
#define N_CAUGHT (sizeof caught / sizeof caught[0])
static struct sigaction previous[N_CAUGHT]; /* restored by plat_signals_release */
static int replaced[N_CAUGHT];              /* 0: the signal was ignored and stays so */
static int ignored_at_start[N_CAUGHT];      /* plat_signals_note_start's finding */

void plat_signals_note_start(void)
{
    for (size_t i = 0; i < N_CAUGHT; i++) {
        struct sigaction now;
        ignored_at_start[i] = sigaction(caught[i], NULL, &now) == 0 && now.sa_handler == SIG_IGN;
    }
}

static void on_signal(int sig)
{
    int saved = errno;
    int none = 0;
    if (!atomic_compare_exchange_strong(&pending, &none, sig)) {
        /* The second request: end now, as the default action would (status 128 + sig).
         * The signal is blocked while its handler runs, so raise() delivers it on return. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
        raise(sig);
    }
    errno = saved;
}

int plat_signals_catch(void)
{
    if (atomic_load(&installed))
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_CAUGHT; i++)
        sigaddset(&sa.sa_mask, caught[i]); /* one handler at a time */
    sa.sa_flags = SA_RESTART; /* reads, writes and waits in progress carry on */
    for (size_t i = 0; i < N_CAUGHT; i++) {
        if (sigaction(caught[i], NULL, &previous[i]) != 0)
            return -1;
        /* A signal ignored at start stays ignored (a background job of a script, nohup):
         * whoever started us chose that, also when a library's constructor has put a
         * handler of its own there since (plat_signals_note_start). */
        replaced[i] = previous[i].sa_handler != SIG_IGN && !ignored_at_start[i];
        if (!replaced[i] && previous[i].sa_handler != SIG_IGN) {
            struct sigaction ign;
            memset(&ign, 0, sizeof ign);
            ign.sa_handler = SIG_IGN;
            sigemptyset(&ign.sa_mask);
            sigaction(caught[i], &ign, NULL);
        }
        if (replaced[i] && sigaction(caught[i], &sa, NULL) != 0) {
            while (i-- > 0)
                if (replaced[i])
                    sigaction(caught[i], &previous[i], NULL);
            return -1;
        }
    }
    atomic_store(&installed, 1);
    return 0;
}

int plat_signals_pending(void) { return atomic_load(&pending); }

const char *plat_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP"
                                                                               : "a signal";
}

void plat_signals_release(void)
{
    if (!atomic_exchange(&installed, 0))
        return;
    for (size_t i = 0; i < N_CAUGHT; i++)
        if (replaced[i])
            sigaction(caught[i], &previous[i], NULL);
    atomic_store(&pending, 0);
}
