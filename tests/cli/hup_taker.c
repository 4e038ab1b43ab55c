/* hup_taker.c - a shared library whose constructor does what UCX's libucs does when Debian
 * 13's Open MPI 5 loads it before vkt's main: it puts a handler of its own on SIGHUP,
 * whatever was there (an ignored SIGHUP under nohup included). tests/cli/signals.sh
 * preloads it to check that vkt keeps a SIGHUP it was started with ignored
 * (plat_signals_note_start, from vkt's .preinit_array, which runs before this). */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void on_hup(int sig)
{
    (void)sig;
    static const char msg[] = "hup_taker: SIGHUP reached the library's handler\n";
    (void)!write(2, msg, sizeof msg - 1);
}

__attribute__((constructor)) static void take_hup(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_hup;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, NULL);
}
