/*
 * platform.h - the only OS-specific code: dynamic loading, clocks, files, directories,
 * environment. Everything above this layer is portable C11.
 */
#ifndef VKT_PLATFORM_H
#define VKT_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

/* Dynamic libraries. On failure returns NULL and writes the system's reason to `why`. */
void *vkt_dl_open(const char *path, char *why, size_t why_size);
void *vkt_dl_symbol(void *lib, const char *name);
void vkt_dl_close(void *lib);
/* The platform's default name of the Vulkan loader ("libvulkan.so.1" on Linux). */
const char *vkt_dl_vulkan_name(void);

/* Monotonic clock in seconds; process CPU time in seconds. */
double vkt_now(void);
double vkt_cpu_time(void);
/* Wall-clock time in seconds since the Unix epoch (UTC), for time stamps in files.
 * The machine's host name into buf ("localhost" if unknown), always NUL-terminated.
 * (engine/platform/host_posix.c) */
double vkt_wall_time(void);
void vkt_hostname(char *buf, size_t size);
/* The folder holding this process's executable, symbolic links resolved, without a
 * trailing separator, into buf (always NUL-terminated). Returns 0 on success, -1 if the
 * system cannot tell or it does not fit. Linux: /proc/self/exe; macOS:
 * _NSGetExecutablePath; Win32: GetModuleFileNameW. An installed vkt finds its data from
 * here (../share/vktrain). */
int vkt_exe_dir(char *buf, size_t size);

/* Environment variable or NULL. */
const char *vkt_getenv(const char *name);

/* Creates a directory and its parents (like mkdir -p). Returns 0 on success. */
int vkt_mkdirs(const char *path);

/* Reads a whole file into a malloc'd buffer; returns 0 on success. */
int vkt_read_file(const char *path, void **data, size_t *size);
/* Writes a file atomically: temporary file in the same directory, fsync, rename, fsync
 * of the directory. A crash at any moment leaves either the old or the new file. */
int vkt_write_file_atomic(const char *path, const void *data, size_t size);

/* The names of the entries of a directory ("." and ".." left out), as one malloc'd
 * array of malloc'd strings; free with vkt_free_names. Returns 0 on success. */
int vkt_list_dir(const char *dir, char ***names, size_t *count);
void vkt_free_names(char **names, size_t count);
/* Removes a file; returns 0 on success. */
int vkt_remove_file(const char *path);
/* Whether `path` exists; if so its size in bytes and modification time in nanoseconds
 * since the epoch (either pointer may be NULL). Returns 0 if it exists. */
int vkt_file_stat(const char *path, uint64_t *size, int64_t *mtime_ns);

/* This process's id (for messages and lock files). */
long vkt_process_id(void);

/* An exclusive advisory lock on a file (created if missing; the file is left in place on
 * release), held until vkt_file_unlock or until the process ends, however it ends: a
 * killed process leaves no lock behind. Locks taken through different calls conflict even
 * within one process. The holder writes `note` (one line, such as its pid) into the file,
 * so that another process finding the lock taken can say who holds it.
 * Returns 0 with *out set; 1 if another holds it, with the holder's note in `other` ("" if
 * it has not written one yet); -1 on failure, with the system's reason in `other`. POSIX:
 * flock(2) on the open file (not fcntl record locks, which a process shares among all its
 * descriptors); Win32 would use LockFileEx with LOCKFILE_FAIL_IMMEDIATELY. */
typedef struct vkt_file_lock vkt_file_lock;
int vkt_file_lock_try(const char *path, const char *note, vkt_file_lock **out,
                      char *other, size_t other_size);
/* Releases the lock (NULL is harmless). */
void vkt_file_unlock(vkt_file_lock *lock);

/* Threads, a mutex + condition pair, and a reusable barrier. */
typedef struct vkt_thread vkt_thread;
typedef void (*vkt_thread_fn)(void *arg);
/* Returns 0 on success. */
int vkt_thread_start(vkt_thread **out, vkt_thread_fn fn, void *arg);
void vkt_thread_join(vkt_thread *t);

typedef struct vkt_barrier vkt_barrier;
vkt_barrier *vkt_barrier_create(unsigned count);
void vkt_barrier_destroy(vkt_barrier *b);
/* Blocks until `count` threads have arrived; reusable. Each thread brings a vote; all
 * get back the OR of the votes of this round, so they can decide together (e.g. to
 * stop after an error) without racing on a shared flag. */
int vkt_barrier_wait(vkt_barrier *b, int vote);

typedef struct vkt_monitor vkt_monitor; /* a mutex with one condition variable */
vkt_monitor *vkt_monitor_create(void);
void vkt_monitor_destroy(vkt_monitor *m);
void vkt_monitor_lock(vkt_monitor *m);
void vkt_monitor_unlock(vkt_monitor *m);
void vkt_monitor_wait(vkt_monitor *m);      /* lock held */
void vkt_monitor_broadcast(vkt_monitor *m); /* lock held */

/* Sleeps for a number of seconds. */
void vkt_sleep(double seconds);

/* Termination requests: SIGINT (Ctrl-C) and SIGTERM on POSIX (signals_posix.c); a Win32
 * version would use SetConsoleCtrlHandler, reporting Ctrl-C as SIGINT and Ctrl-Break,
 * closing the console, logoff and shutdown as SIGTERM (the C numbers of <signal.h>).
 * vkt_signals_catch installs, for the whole process, handlers that only record the first
 * request (async-signal-safe: one lock-free atomic store); a second request restores the
 * default action and raises the signal again, ending the process at once (status 128 + n).
 * A signal ignored when it is called stays ignored. Idempotent; returns 0 on success.
 * vkt_signals_pending: the first request's signal number, 0 if none (any thread may ask).
 * vkt_signals_release: restores the handlers found by vkt_signals_catch and forgets the
 * request. */
int vkt_signals_catch(void);
int vkt_signals_pending(void);
void vkt_signals_release(void);

/* Whether stdout is a terminal. */
int vkt_stdout_is_tty(void);

#endif /* VKT_PLATFORM_H */
