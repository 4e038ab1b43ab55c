/* Child processes, POSIX side (platform.h; the Win32 side is process_win32.c). */
#include "platform.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>

extern char **environ;

struct plat_process {
    pid_t pid;
};

int plat_process_start(const char *const *argv, plat_process **out)
{
    *out = NULL;
    if (!argv || !argv[0])
        return -1;
    plat_process *p = malloc(sizeof *p);
    if (!p)
        return -1;
    /* posix_spawn takes char *const[]: it does not write through them. */
    if (posix_spawn(&p->pid, argv[0], NULL, NULL, (char *const *)argv, environ) != 0) {
        free(p);
        return -1;
    }
    *out = p;
    return 0;
}

long plat_process_pid(const plat_process *p) { return p ? (long)p->pid : -1; }

int plat_process_kill(plat_process *p) { return p && kill(p->pid, SIGKILL) == 0 ? 0 : -1; }

int plat_process_wait(plat_process *p)
{
    if (!p)
        return -1;
    int status = 0;
    pid_t got;
    do
        got = waitpid(p->pid, &status, 0);
    while (got < 0 && errno == EINTR);
    free(p);
    if (got < 0)
        return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}
