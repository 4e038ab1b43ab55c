/*
 * platform.h - the only OS-specific code: dynamic loading, clocks, files, directories,
 * environment. Everything above this layer is portable C11.
 */
#ifndef VKT_PLATFORM_H
#define VKT_PLATFORM_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Dynamic libraries. On failure returns NULL and writes the system's reason to `why`. */
void *plat_dl_open(const char *path, char *why, size_t why_size);
void *plat_dl_symbol(void *lib, const char *name);
void plat_dl_close(void *lib);
/* The platform's default name of the Vulkan loader ("libvulkan.so.1" on Linux). */
const char *plat_dl_vulkan_name(void);

/* Monotonic clock in seconds; process CPU time in seconds. */
double plat_now(void);
double plat_cpu_time(void);
/* Wall-clock time in seconds since the Unix epoch (UTC), for time stamps in files.
 * The machine's host name into buf ("localhost" if unknown), always NUL-terminated.
 * (engine/platform/host_posix.c) */
double plat_wall_time(void);
void plat_hostname(char *buf, size_t size);
/* The folder holding this process's executable, symbolic links resolved, without a
 * trailing separator, into buf (always NUL-terminated). Returns 0 on success, -1 if the
 * system cannot tell or it does not fit. Linux: /proc/self/exe; macOS:
 * _NSGetExecutablePath; Win32: GetModuleFileNameW. An installed vkt finds its data from
 * here (../share/vktrain). */
int plat_exe_dir(char *buf, size_t size);

/* Environment variable or NULL. */
const char *plat_getenv(const char *name);

/* Creates a directory and its parents (like mkdir -p). Returns 0 on success. */
int plat_mkdirs(const char *path);

/* Reads a whole file into a malloc'd buffer; returns 0 on success. */
int plat_read_file(const char *path, void **data, size_t *size);
/* Reads up to n bytes from the start of a file into buf; returns how many (fewer at the
 * end of a short file), -1 if it cannot be opened or read (engine/platform/output_*.c). */
long plat_read_head(const char *path, void *buf, size_t n);

/* Output files (engine/platform/output*.c): the one rule by which
 * the engine writes a file, whatever its name.
 * plat_write_file writes `data` to what `path` names now, links followed:
 *  - nothing yet, or a regular file: a temporary file in the same folder, flushed to the
 *    disk, renamed over the name, the folder flushed (Win32: MOVEFILE_WRITE_THROUGH), so a
 *    crash at any moment leaves the old or the new file whole. The temporary name is
 *    "." + at most PLAT_TEMP_PREFIX bytes of the name (never half a UTF-8 character) +
 *    ".<pid>.<n>.tmp", so any legal final name fits. A symbolic link keeps pointing where
 *    it did: the file it names is replaced (or created). POSIX keeps a replaced file's
 *    permission bits.
 *  - a character device (/dev/null, /dev/full, a terminal; Win32: NUL, CON) or a pipe
 *    (a FIFO; Win32: a named pipe), with PLAT_WRITE_STREAM: opened for writing, neither
 *    created nor truncated, and written in place; a failed write (ENOSPC on /dev/full) is
 *    an error. Never replaced.
 *  - anything else (a folder, a block device, a socket; a device or pipe without
 *    PLAT_WRITE_STREAM): refused, nothing written.
 * Returns 0; -1 with the reason, naming `path`, in why (why_size bytes; may be NULL).
 * plat_write_file_atomic(path, data, size) is plat_write_file(path, data, size, 0, NULL,
 * 0): checkpoints and caches, which must be regular files. */
#define PLAT_WRITE_STREAM 1
#define PLAT_TEMP_PREFIX 32
int plat_write_file(const char *path, const void *data, size_t size, int flags, char *why,
                    size_t why_size);
int plat_write_file_atomic(const char *path, const void *data, size_t size);
/* What a path names, links followed (PLAT_KIND_NONE: nothing, or it cannot be looked at),
 * and its name for messages ("a folder", "a character device", ...). */
typedef enum plat_file_kind {
    PLAT_KIND_NONE,
    PLAT_KIND_FILE,
    PLAT_KIND_DIR,
    PLAT_KIND_CHAR,
    PLAT_KIND_PIPE,
    PLAT_KIND_BLOCK,
    PLAT_KIND_OTHER
} plat_file_kind;
plat_file_kind plat_file_kind_of(const char *path);
const char *plat_file_kind_name(plat_file_kind kind);
/* plat_write_file's refusal of `path`, which is `kind` (never replaced), into why; and the
 * reason of any failure formatted into why (why_size bytes; may be NULL). Both return -1
 * (engine/platform/output.c). */
int plat_write_refused(const char *path, plat_file_kind kind, int flags, char *why,
                       size_t why_size);
int plat_why(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* `path` with its last component's links followed, into buf: the name plat_write_file
 * writes (a link to a missing file gives that file's name). Win32: `path` itself.
 * Returns 0, -1 if it does not fit or a link cannot be read. */
int plat_final_path(const char *path, char *buf, size_t size);
/* The identity of the file `path` names, links followed: device and inode (POSIX), volume
 * serial number and file index (Win32). Returns 0 with *id, -1 if it does not exist or
 * cannot be opened. plat_same_file: 1 if both exist and are one file (hard links, links,
 * "./" and ".." spellings alike), else 0. */
typedef struct plat_file_id {
    uint64_t volume, index;
} plat_file_id;
int plat_file_identity(const char *path, plat_file_id *id);
int plat_same_file(const char *a, const char *b);
/* Creates `path` only if nothing has that name (O_EXCL; Win32 CREATE_NEW) and opens it
 * for writing in binary. NULL on failure, errno EEXIST if the name is taken. */
FILE *plat_create_new(const char *path);

/* The names of the entries of a directory ("." and ".." left out), as one malloc'd
 * array of malloc'd strings; free with plat_free_names. Returns 0 on success. */
int plat_list_dir(const char *dir, char ***names, size_t *count);
void plat_free_names(char **names, size_t count);
/* Removes a file; returns 0 on success. */
int plat_remove_file(const char *path);
/* Whether `path` exists; if so its size in bytes and modification time in nanoseconds
 * since the epoch (either pointer may be NULL). Returns 0 if it exists. */
int plat_file_stat(const char *path, uint64_t *size, int64_t *mtime_ns);

/* This process's id (for messages and lock files). */
long plat_process_id(void);

/* An exclusive advisory lock on a file (created if missing; the file is left in place on
 * release), held until plat_file_unlock or until the process ends, however it ends: a
 * killed process leaves no lock behind. Locks taken through different calls conflict even
 * within one process. The holder writes `note` (one line, such as its pid) into the file,
 * so that another process finding the lock taken can say who holds it.
 * Returns 0 with *out set; 1 if another holds it, with the holder's note in `other` ("" if
 * it has not written one yet); -1 on failure, with the system's reason in `other`. POSIX:
 * flock(2) on the open file (not fcntl record locks, which a process shares among all its
 * descriptors); Win32 would use LockFileEx with LOCKFILE_FAIL_IMMEDIATELY. */
typedef struct plat_file_lock plat_file_lock;
int plat_file_lock_try(const char *path, const char *note, plat_file_lock **out,
                      char *other, size_t other_size);
/* Releases the lock (NULL is harmless). */
void plat_file_unlock(plat_file_lock *lock);

/* Threads, a mutex + condition pair, and a reusable barrier. */
typedef struct plat_thread plat_thread;
typedef void (*plat_thread_fn)(void *arg);
/* Returns 0 on success. */
int plat_thread_start(plat_thread **out, plat_thread_fn fn, void *arg);
void plat_thread_join(plat_thread *t);

typedef struct plat_barrier plat_barrier;
plat_barrier *plat_barrier_create(unsigned count);
void plat_barrier_destroy(plat_barrier *b);
/* Blocks until `count` threads have arrived; reusable. Each thread brings a vote; all
 * get back the OR of the votes of this round, so they can decide together (e.g. to
 * stop after an error) without racing on a shared flag. */
int plat_barrier_wait(plat_barrier *b, int vote);

typedef struct plat_monitor plat_monitor; /* a mutex with one condition variable */
plat_monitor *plat_monitor_create(void);
void plat_monitor_destroy(plat_monitor *m);
void plat_monitor_lock(plat_monitor *m);
void plat_monitor_unlock(plat_monitor *m);
void plat_monitor_wait(plat_monitor *m);      /* lock held */
void plat_monitor_broadcast(plat_monitor *m); /* lock held */

/* Sleeps for a number of seconds. */
void plat_sleep(double seconds);

/* Termination requests: SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal or ssh session
 * closed) on POSIX (signals_posix.c); on Win32 (signals_win32.c) a console control
 * handler reporting Ctrl-C as SIGINT, closing the console as PLAT_SIGHUP, and Ctrl-Break,
 * logoff and shutdown as SIGTERM (the C numbers of <signal.h>; Win32's has no SIGHUP, so
 * PLAT_SIGHUP is POSIX's number, 1, there). Where the system ends the process once the
 * handler returns (Win32's close, logoff, shutdown), the handler waits instead, so the
 * program can save and exit within the system's grace time.
 * plat_signals_catch installs, for the whole process, handlers that only record the first
 * request (async-signal-safe: one lock-free atomic store); a second request restores the
 * default action and raises the signal again, ending the process at once (status 128 + n).
 * A signal ignored when it is called stays ignored. Idempotent; returns 0 on success.
 * plat_signals_pending: the first request's signal number, 0 if none (any thread may ask).
 * plat_signals_release: restores the handlers found by plat_signals_catch and forgets the
 * request. plat_signal_name: "SIGINT", "SIGTERM", "SIGHUP", else "a signal".
 * plat_signals_note_start records which of those signals the process was started with
 * ignored (nohup, a script's background job), for plat_signals_catch to keep them ignored
 * even if something replaced that since: a shared library's constructor may, and those run
 * before main (Debian 13's Open MPI 5 loads UCX, whose libucs puts its debug handler on
 * SIGHUP). An executable calls it from its .preinit_array, which runs before every shared
 * library's constructor (tools/vkt.c); without that call only what main finds counts. A
 * no-op on Win32. */
#ifdef SIGHUP
#define PLAT_SIGHUP SIGHUP
#else
#define PLAT_SIGHUP 1
#endif
const char *plat_signal_name(int sig);
int plat_signals_catch(void);
void plat_signals_note_start(void);
int plat_signals_pending(void);
void plat_signals_release(void);

/* The system (engine/platform/system_posix.c, system_win32.c): what programs and tests
 * ask of the machine and of their own process beyond files.
 * plat_cpu_count: the processors online, at least 1 (sysconf(_SC_NPROCESSORS_ONLN);
 * GetActiveProcessorCount). plat_physical_memory: the machine's memory in bytes, 0 if the
 * system cannot tell (sysconf pages x page size; GlobalMemoryStatusEx).
 * plat_thread_cpu_time: the calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID;
 * GetThreadTimes). */
long plat_cpu_count(void);
uint64_t plat_physical_memory(void);
/* `bytes` of memory at a multiple of `alignment` (a power of two; host memory a device
 * imports), NULL when out of memory; freed by plat_aligned_free (NULL: nothing). */
void *plat_aligned_alloc(size_t alignment, size_t bytes);
void plat_aligned_free(void *p);
double plat_thread_cpu_time(void);
/* Sets an environment variable of this process (value NULL removes it); what later
 * getenv / plat_getenv calls see, and on Win32 what DLLs loaded later (the Vulkan loader)
 * see too. Not thread-safe: call it while no other thread reads the environment.
 * Returns 0 on success, -1 for a NULL or empty name, one holding '=', or a system error. */
int plat_setenv(const char *name, const char *value);
/* Creates a new, empty folder under the system's folder for temporary files ($TMPDIR,
 * else /tmp; Win32: GetTempPathW), named `prefix` followed by random characters, and
 * writes its path into buf (always NUL-terminated). POSIX: mode 0700 (mkdtemp); Win32:
 * the access list it inherits from the user's temporary folder. `prefix` is a plain name
 * (no separators). Returns 0 on success, -1 on failure (buf then ""). */
int plat_make_temp_dir(const char *prefix, char *buf, size_t size);
/* Removes an empty folder; returns 0 on success. */
int plat_remove_dir(const char *path);

/* Child processes (engine/platform/process_posix.c, process_win32.c), for tests that
 * need a second process (a lock held elsewhere, then the holder killed).
 * plat_process_start runs the program argv[0] (a path) with the arguments argv[0..]
 * (NULL-terminated), the environment, standard streams and working folder inherited
 * (posix_spawn; CreateProcessW, each argument quoted as the C runtime parses it). Returns
 * 0 with *out set, -1 on failure (*out NULL). plat_process_pid: its process id, as
 * plat_process_id says inside it. plat_process_kill ends it at once, however busy
 * (SIGKILL; TerminateProcess). plat_process_wait waits for its end, frees it, and
 * returns its exit status, 128 + n if signal n ended it, -1 on failure. */
typedef struct plat_process plat_process;
int plat_process_start(const char *const *argv, plat_process **out);
long plat_process_pid(const plat_process *p);
int plat_process_kill(plat_process *p);
int plat_process_wait(plat_process *p);

/* Whether stdout is a terminal. */
int plat_stdout_is_tty(void);

#endif /* VKT_PLATFORM_H */
