/* The platform layer (engine/platform/platform.h) on whichever side this build compiled:
 * POSIX here, Win32 under Wine (scripts/windows.sh). Needs no Vulkan device.
 *  1. The system: processors (1 to 4096), memory (more than 64 MiB, less than 1 PiB), the
 *     thread's CPU time grows with a busy loop and stays within the process's.
 *  2. The environment: a variable set is read back by getenv and plat_getenv, replaced,
 *     removed (NULL); invalid names are refused.
 *  3. Temporary folders: two calls give two different, existing, empty folders whose names
 *     start with the prefix; a prefix holding a separator is refused; removed, they are
 *     gone; a folder that is not empty is not removed.
 *  4. Files in such a folder: plat_mkdirs of nested folders, atomic writes replacing a
 *     file (no temporary left behind), read back byte for byte, sizes and times from
 *     plat_file_stat, listings, plat_remove_file.
 *  5. Locks: a second lock on the same file is refused within the process and names the
 *     holder's note; free again after plat_file_unlock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "platform/platform.h"

static void test_system(void)
{
    long cpus = plat_cpu_count();
    TH_CHECK(cpus >= 1 && cpus <= 4096, "plat_cpu_count: %ld", cpus);
    uint64_t mem = plat_physical_memory();
    TH_CHECK(mem > (64ull << 20) && mem < (1ull << 50), "plat_physical_memory: %llu bytes",
             (unsigned long long)mem);
    printf("system: %ld processors, %.2f GiB of memory\n", cpus, (double)mem / (1 << 30));

    double t0 = plat_thread_cpu_time(), w0 = plat_now();
    volatile double x = 0;
    while (plat_now() - w0 < 0.2) /* about 0.2 s of work (less if the machine is busy) */
        for (int i = 0; i < 100000; i++)
            x += (double)i * 1e-9;
    double t1 = plat_thread_cpu_time(), p1 = plat_cpu_time();
    TH_CHECK(t1 - t0 > 0.01, "thread CPU time grew by %.4f s over a 0.2 s busy loop", t1 - t0);
    TH_CHECK(t1 <= p1 + 0.02, "thread CPU time %.4f s within the process's %.4f s", t1, p1);
}

static void test_environment(void)
{
    const char *name = "VKT_TEST_PLATFORM_VARIABLE";
    TH_CHECK(plat_setenv(name, "first value") == 0, "set");
    const char *v = getenv(name);
    TH_CHECK(v && strcmp(v, "first value") == 0, "getenv after set: %s", v ? v : "(null)");
    TH_CHECK(plat_setenv(name, "second") == 0, "replace");
    v = plat_getenv(name);
    TH_CHECK(v && strcmp(v, "second") == 0, "plat_getenv after replace: %s", v ? v : "(null)");
    TH_CHECK(plat_setenv(name, NULL) == 0, "remove");
    TH_CHECK(getenv(name) == NULL && plat_getenv(name) == NULL, "removed");
    TH_CHECK(plat_setenv(name, NULL) == 0, "removing a missing variable succeeds");
    TH_CHECK(plat_setenv("", "x") == -1 && plat_setenv(NULL, "x") == -1 &&
                 plat_setenv("A=B", "x") == -1,
             "empty, NULL and '=' names refused");
}

static int count_entries(const char *dir)
{
    char **names;
    size_t n;
    if (plat_list_dir(dir, &names, &n) != 0)
        return -1;
    plat_free_names(names, n);
    return (int)n;
}

static int has_name(char **names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return 1;
    return 0;
}

/* The last component of a path ('/' or '\' separated). */
static const char *base_name(const char *path)
{
    const char *b = path;
    for (const char *p = path; *p; p++)
        if (*p == '/' || *p == '\\')
            b = p + 1;
    return b;
}

static void test_files(const char *dir)
{
    char sub[600], path[700], path2[700];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    TH_CHECK(plat_mkdirs(sub) == 0 && count_entries(sub) == 0, "mkdirs %s", sub);
    TH_CHECK(plat_mkdirs(sub) == 0, "mkdirs of an existing folder succeeds");
    snprintf(path, sizeof path, "%s/data.bin", sub);
    unsigned char data[3000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 7 + 3);
    TH_CHECK(plat_write_file_atomic(path, "old", 3) == 0, "first write");
    TH_CHECK(plat_write_file_atomic(path, data, sizeof data) == 0, "replacing write");
    void *back;
    size_t size;
    if (TH_CHECK(plat_read_file(path, &back, &size) == 0, "read back")) {
        TH_CHECK(size == sizeof data && memcmp(back, data, size) == 0,
                 "read back %zu bytes equal to the %zu written", size, sizeof data);
        free(back);
    }
    uint64_t st_size = 0;
    int64_t mtime = 0;
    double now = plat_wall_time();
    TH_CHECK(plat_file_stat(path, &st_size, &mtime) == 0 && st_size == sizeof data,
             "stat size %llu", (unsigned long long)st_size);
    TH_CHECK(mtime / 1e9 > now - 3600 && mtime / 1e9 < now + 3600,
             "mtime %.0f within an hour of the wall clock %.0f", mtime / 1e9, now);
    snprintf(path2, sizeof path2, "%s/other.txt", sub);
    TH_CHECK(plat_write_file_atomic(path2, "x\n", 2) == 0, "second file");
    char **names;
    size_t n;
    if (TH_CHECK(plat_list_dir(sub, &names, &n) == 0, "list %s", sub)) {
        TH_CHECK(n == 2 && has_name(names, n, "data.bin") && has_name(names, n, "other.txt"),
                 "the listing is the two files and nothing else (%zu entries: no temporary "
                 "file left behind)", n);
        plat_free_names(names, n);
    }
    snprintf(path, sizeof path, "%s/no-such-folder", dir);
    TH_CHECK(plat_list_dir(path, &names, &n) != 0, "listing a missing folder fails");
    TH_CHECK(plat_file_stat(path, NULL, NULL) != 0, "stat of a missing path fails");

    /* 5. Locks */
    snprintf(path, sizeof path, "%s/lock", sub);
    plat_file_lock *a = NULL, *b = NULL;
    char other[128];
    TH_CHECK(plat_file_lock_try(path, "holder 1", &a, other, sizeof other) == 0 && a,
             "first lock: %s", other);
    int rc = plat_file_lock_try(path, "holder 2", &b, other, sizeof other);
    TH_CHECK(rc == 1 && !b && strcmp(other, "holder 1") == 0,
             "second lock refused (%d) naming the holder's note '%s'", rc, other);
    plat_file_unlock(a);
    TH_CHECK(plat_file_lock_try(path, "holder 2", &b, other, sizeof other) == 0 && b,
             "free again after unlock: %s", other);
    plat_file_unlock(b);
    plat_file_unlock(NULL);

    /* Clean up, checking removal on the way. */
    TH_CHECK(plat_remove_dir(sub) != 0, "a folder that is not empty is not removed");
    const char *files[] = {"data.bin", "other.txt", "lock"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", sub, files[i]);
        TH_CHECK(plat_remove_file(path) == 0, "remove %s", path);
        TH_CHECK(plat_file_stat(path, NULL, NULL) != 0, "%s is gone", path);
    }
    TH_CHECK(plat_remove_dir(sub) == 0, "remove %s", sub);
    snprintf(sub, sizeof sub, "%s/a", dir);
    TH_CHECK(plat_remove_dir(sub) == 0, "remove %s", sub);
}

static void test_temp_dirs(void)
{
    char a[512], b[512], bad[512];
    TH_CHECK(plat_make_temp_dir("vkt_test_platform_", a, sizeof a) == 0, "temp dir a");
    TH_CHECK(plat_make_temp_dir("vkt_test_platform_", b, sizeof b) == 0, "temp dir b");
    printf("temporary folders: %s, %s\n", a, b);
    TH_CHECK(strcmp(a, b) != 0, "two calls, two folders");
    TH_CHECK(strncmp(base_name(a), "vkt_test_platform_", 18) == 0 &&
                 strlen(base_name(a)) > 18,
             "the name starts with the prefix and goes on: %s", base_name(a));
    TH_CHECK(count_entries(a) == 0 && count_entries(b) == 0, "both exist and are empty");
    TH_CHECK(plat_make_temp_dir("x/y", bad, sizeof bad) == -1 && bad[0] == '\0',
             "a prefix with a separator is refused");
    TH_CHECK(plat_make_temp_dir("x", bad, 4) == -1 && bad[0] == '\0',
             "a buffer too small is refused");
    test_files(a);
    TH_CHECK(plat_remove_dir(a) == 0 && plat_remove_dir(b) == 0, "both removed");
    TH_CHECK(count_entries(a) == -1 && plat_file_stat(b, NULL, NULL) != 0, "both gone");
}

int main(void)
{
    th_init_host("test_platform");
    test_system();
    test_environment();
    test_temp_dirs();
    return th_finish();
}
