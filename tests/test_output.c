/* Outputs never clobber (engine/platform/output_*.c, engine/io/output.c; README, "Outputs
 * never clobber"), on whichever side this build compiled: POSIX here, Win32 under Wine.
 * Needs no Vulkan device.
 *  1. Regular files: a new name is created, an existing file replaced whole (POSIX: its
 *     permission bits kept), no temporary file left behind; plat_read_head reads its start.
 *  2. Long names: a final name of 255 bytes (also one of 2-byte UTF-8 characters, whose
 *     temporary name must not cut a character) is written; 256 bytes fail with the
 *     system's reason and leave nothing.
 *  3. What is never replaced: a folder (refused, still a folder); a character device
 *     (POSIX /dev/null, Win32 NUL) written in place with PLAT_WRITE_STREAM and still a
 *     device afterwards, refused without it; /dev/full reports the full device; a FIFO
 *     (POSIX) streamed into, its reader getting every byte, still a FIFO.
 *  4. Links (POSIX): writing through a symbolic link replaces the file it names and keeps
 *     the link; a link to a missing file creates that file.
 *  5. Identity: plat_same_file for "./" spellings, hard and symbolic links; not for two
 *     files with equal contents or a missing one.
 *  6. vkt_file_write: an output that is one of its inputs (another spelling, a link) or a
 *     vktrain checkpoint is VKT_ERROR_INVALID_ARGUMENT naming it, the file untouched.
 *  7. plat_create_new: creates once; a second time EEXIST. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if !defined(_WIN32)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#include "harness.h"
#include "platform/platform.h"

static char g_tmp[512];

static int count_entries(const char *dir)
{
    char **names;
    size_t n;
    if (plat_list_dir(dir, &names, &n) != 0)
        return -1;
    plat_free_names(names, n);
    return (int)n;
}

/* Whether `path` holds exactly `n` bytes equal to `want`. */
static int holds(const char *path, const void *want, size_t n)
{
    void *got;
    size_t size;
    if (plat_read_file(path, &got, &size) != 0)
        return 0;
    int ok = size == n && memcmp(got, want, n) == 0;
    free(got);
    return ok;
}

static void test_regular(const char *dir)
{
    char path[700], why[512];
    snprintf(path, sizeof path, "%s/out.bin", dir);
    TH_CHECK(plat_write_file(path, "first", 5, PLAT_WRITE_STREAM, why, sizeof why) == 0,
             "a new file: %s", why);
    TH_CHECK(holds(path, "first", 5) && plat_file_kind_of(path) == PLAT_KIND_FILE,
             "created, a regular file");
#if !defined(_WIN32)
    TH_CHECK(chmod(path, 0600) == 0, "chmod 0600");
#endif
    TH_CHECK(plat_write_file(path, "second!", 7, PLAT_WRITE_STREAM, why, sizeof why) == 0,
             "replaced: %s", why);
    TH_CHECK(holds(path, "second!", 7), "the new contents, whole");
    char head[16] = "";
    TH_CHECK(plat_read_head(path, head, 3) == 3 && memcmp(head, "sec", 3) == 0 &&
                 plat_read_head(path, head, sizeof head) == 7 &&
                 plat_read_head("/no/such/file", head, 3) == -1,
             "plat_read_head: 3 of 7 bytes, all 7 when asked for more, -1 for no file");
#if !defined(_WIN32)
    struct stat sb;
    TH_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600,
             "permission bits kept: %o", (unsigned)(sb.st_mode & 0777));
#endif
    TH_CHECK(count_entries(dir) == 1, "no temporary file left (%d entries)", count_entries(dir));
    TH_CHECK(plat_remove_file(path) == 0, "remove");
}

static void test_long_names(const char *dir)
{
    char name[300], path[1024], why[512];
    memset(name, 'n', 255);
    name[255] = '\0';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TH_CHECK(plat_write_file(path, "x", 1, PLAT_WRITE_STREAM, why, sizeof why) == 0,
             "a 255-byte name: %s", why);
    TH_CHECK(holds(path, "x", 1) && count_entries(dir) == 1, "written, nothing else left");
    plat_remove_file(path);
    /* 127 x "é" (2 bytes) + "x": 255 bytes; the temporary name keeps whole characters */
    size_t n = 0;
    for (int i = 0; i < 127; i++) {
        name[n++] = (char)0xC3;
        name[n++] = (char)0xA9;
    }
    name[n++] = 'x';
    name[n] = '\0';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TH_CHECK(plat_write_file(path, "y", 1, PLAT_WRITE_STREAM, why, sizeof why) == 0,
             "a 255-byte name of 2-byte characters: %s", why);
    TH_CHECK(holds(path, "y", 1) && count_entries(dir) == 1, "written, nothing else left");
    plat_remove_file(path);
    memset(name, 'm', 256);
    name[256] = '\0';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    why[0] = '\0';
    TH_CHECK(plat_write_file(path, "z", 1, PLAT_WRITE_STREAM, why, sizeof why) == -1 &&
                 strstr(why, "cannot write '") != NULL,
             "a 256-byte name fails with a reason: %.80s...", why);
    TH_CHECK(count_entries(dir) == 0, "and leaves nothing (%d entries)", count_entries(dir));
}

static void test_never_replaced(const char *dir)
{
    char sub[700], why[512];
    snprintf(sub, sizeof sub, "%s/folder", dir);
    TH_CHECK(plat_mkdirs(sub) == 0, "mkdir");
    for (int flags = 0; flags <= PLAT_WRITE_STREAM; flags++) {
        why[0] = '\0';
        TH_CHECK(plat_write_file(sub, "x", 1, flags, why, sizeof why) == -1 &&
                     strstr(why, "folder") && plat_file_kind_of(sub) == PLAT_KIND_DIR &&
                     count_entries(sub) == 0,
                 "a folder is refused (flags %d), still an empty folder: %s", flags, why);
    }
    plat_remove_dir(sub);
    TH_CHECK(count_entries(dir) == 0, "nothing left in the test folder");
#if defined(_WIN32)
    const char *null_dev = "NUL";
#else
    const char *null_dev = "/dev/null";
#endif
    char data[5000];
    memset(data, 'd', sizeof data);
    TH_CHECK(plat_file_kind_of(null_dev) == PLAT_KIND_CHAR, "%s is a character device",
             null_dev);
    TH_CHECK(plat_write_file(null_dev, data, sizeof data, PLAT_WRITE_STREAM, why, sizeof why) ==
                 0, "written into %s in place: %s", null_dev, why);
    TH_CHECK(plat_file_kind_of(null_dev) == PLAT_KIND_CHAR, "%s is still a character device",
             null_dev);
    why[0] = '\0';
    TH_CHECK(plat_write_file(null_dev, data, sizeof data, 0, why, sizeof why) == -1 &&
                 strstr(why, "never replaced") && plat_file_kind_of(null_dev) == PLAT_KIND_CHAR,
             "without PLAT_WRITE_STREAM refused, still a device: %s", why);
    TH_CHECK(plat_write_file_atomic(null_dev, data, 1) == -1 &&
                 plat_file_kind_of(null_dev) == PLAT_KIND_CHAR,
             "plat_write_file_atomic (checkpoints) refuses it too");
#if !defined(_WIN32)
    if (plat_file_kind_of("/dev/full") == PLAT_KIND_CHAR) {
        why[0] = '\0';
        TH_CHECK(plat_write_file("/dev/full", data, sizeof data, PLAT_WRITE_STREAM, why,
                                 sizeof why) == -1 &&
                     strstr(why, strerror(ENOSPC)) && plat_file_kind_of("/dev/full") ==
                                                          PLAT_KIND_CHAR,
                 "/dev/full: the write fails naming the full device, still a device: %s", why);
    }
    /* A FIFO: the reader opens first (non-blocking), so the write's open does not wait,
     * and the 5000 bytes fit the pipe's buffer (64 KiB on Linux, 16 KiB or more on
     * macOS), so nothing blocks. A FIFO replaced by a file would leave the reader empty. */
    char fifo[700];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    if (TH_CHECK(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno))) {
        int rd = open(fifo, O_RDONLY | O_NONBLOCK);
        TH_CHECK(rd >= 0, "open the reader");
        TH_CHECK(plat_write_file(fifo, data, sizeof data, PLAT_WRITE_STREAM, why, sizeof why) ==
                     0, "streamed into the FIFO: %s", why);
        char got[6000];
        size_t have = 0;
        ssize_t r;
        while (rd >= 0 && have < sizeof got && (r = read(rd, got + have, sizeof got - have)) > 0)
            have += (size_t)r;
        TH_CHECK(have == sizeof data && memcmp(got, data, have) == 0,
                 "the reader got the %zu bytes (%zu)", sizeof data, have);
        TH_CHECK(plat_file_kind_of(fifo) == PLAT_KIND_PIPE && count_entries(dir) == 1,
                 "still a FIFO, nothing else in the folder");
        if (rd >= 0)
            close(rd);
        plat_remove_file(fifo);
    }
#endif
}

#if !defined(_WIN32)
static void test_links(const char *dir)
{
    char target[700], link_path[700], why[512], missing[700], dangling[700];
    snprintf(target, sizeof target, "%s/target.bin", dir);
    snprintf(link_path, sizeof link_path, "%s/link.bin", dir);
    TH_CHECK(plat_write_file(target, "old", 3, 0, why, sizeof why) == 0, "target: %s", why);
    TH_CHECK(symlink("target.bin", link_path) == 0, "symlink");
    TH_CHECK(plat_write_file(link_path, "through", 7, PLAT_WRITE_STREAM, why, sizeof why) == 0,
             "written through the link: %s", why);
    struct stat sb;
    TH_CHECK(lstat(link_path, &sb) == 0 && S_ISLNK(sb.st_mode), "the link is still a link");
    TH_CHECK(holds(target, "through", 7), "the file it names has the new contents");
    snprintf(missing, sizeof missing, "%s/missing.bin", dir);
    snprintf(dangling, sizeof dangling, "%s/dangling.bin", dir);
    TH_CHECK(symlink("missing.bin", dangling) == 0, "a link to a missing file");
    TH_CHECK(plat_write_file(dangling, "new", 3, PLAT_WRITE_STREAM, why, sizeof why) == 0 &&
                 holds(missing, "new", 3) && lstat(dangling, &sb) == 0 && S_ISLNK(sb.st_mode),
             "creates the file it names, the link kept: %s", why);
    char final[700];
    TH_CHECK(plat_final_path(dangling, final, sizeof final) == 0 && strcmp(final, missing) == 0,
             "plat_final_path follows the link: %s", final);

    /* identity */
    char dotted[800], hard[700], copy[700];
    snprintf(dotted, sizeof dotted, "%s/./target.bin", dir);
    snprintf(hard, sizeof hard, "%s/hard.bin", dir);
    snprintf(copy, sizeof copy, "%s/copy.bin", dir);
    TH_CHECK(link(target, hard) == 0, "hard link");
    TH_CHECK(plat_write_file(copy, "through", 7, 0, why, sizeof why) == 0, "an equal copy");
    TH_CHECK(plat_same_file(target, dotted) && plat_same_file(target, hard) &&
                 plat_same_file(link_path, target),
             "the same file: './', a hard link, a symbolic link");
    TH_CHECK(!plat_same_file(target, copy) && !plat_same_file(target, "/no/such/file") &&
                 !plat_same_file("/no/such/file", "/no/such/file"),
             "not the same: an equal copy, a missing file");

    /* vkt_file_write's rule: the input, by identity, and checkpoints */
    const char *inputs[] = {"/no/such/input", target};
    TH_CHECK(vkt_file_write(dotted, "clobber", 7, inputs, 2) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_last_error(), dotted) && strstr(vkt_last_error(), target) &&
                 strstr(vkt_last_error(), "never replaces an input"),
             "an input by another spelling is refused: %s", vkt_last_error());
    TH_CHECK(vkt_file_write(link_path, "clobber", 7, inputs, 2) == VKT_ERROR_INVALID_ARGUMENT,
             "an input through a link is refused: %s", vkt_last_error());
    TH_CHECK(holds(target, "through", 7), "the input untouched");
    char ckpt_path[700];
    snprintf(ckpt_path, sizeof ckpt_path, "%s/saved.vkt", dir);
    TH_CHECK(plat_write_file(ckpt_path, "VKTCKPT\0rest", 12, 0, why, sizeof why) == 0, "a file "
             "starting as a checkpoint does");
    TH_CHECK(vkt_file_write(ckpt_path, "x", 1, NULL, 0) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_last_error(), "checkpoint") && holds(ckpt_path, "VKTCKPT\0rest", 12),
             "a checkpoint is refused, untouched: %s", vkt_last_error());
    TH_CHECK(vkt_file_write(copy, "fine", 4, inputs, 2) == VKT_OK && holds(copy, "fine", 4),
             "another file is written: %s", vkt_last_error());
    TH_CHECK(vkt_file_write("/dev/null", "fine", 4, inputs, 2) == VKT_OK &&
                 plat_file_kind_of("/dev/null") == PLAT_KIND_CHAR,
             "/dev/null through the public call, still a device: %s", vkt_last_error());
    TH_CHECK(vkt_file_write(dir, "x", 1, NULL, 0) == VKT_ERROR_INVALID_ARGUMENT &&
                 strstr(vkt_last_error(), "a folder"),
             "a folder is refused: %s", vkt_last_error());
    const char *names[] = {"target.bin", "link.bin", "missing.bin", "dangling.bin", "hard.bin",
                           "copy.bin", "saved.vkt"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        plat_remove_file(p);
    }
    TH_CHECK(count_entries(dir) == 0, "no temporary file left (%d entries)", count_entries(dir));
}
#endif

static void test_create_new(const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/new.csv", dir);
    FILE *f = plat_create_new(path);
    TH_CHECK(f && fputs("a\n", f) >= 0 && fclose(f) == 0, "created");
    errno = 0;
    FILE *g = plat_create_new(path);
    TH_CHECK(!g && errno == EEXIST, "a second time: NULL, EEXIST (%s)", strerror(errno));
    if (g)
        fclose(g);
    TH_CHECK(holds(path, "a\n", 2), "the first file untouched");
    plat_remove_file(path);
}

int main(void)
{
    th_init_host("test_output");
    th_temp_dir("test_output", g_tmp, sizeof g_tmp);
    test_regular(g_tmp);
    test_long_names(g_tmp);
    test_never_replaced(g_tmp);
#if !defined(_WIN32)
    test_links(g_tmp);
#endif
    test_create_new(g_tmp);
    th_remove_tree(g_tmp);
    return th_finish();
}
