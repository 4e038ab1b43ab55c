/* Checkpoints (docs/checkpoint.md):
 *  (a) a run stopped after k steps and resumed from its checkpoint gives losses and final
 *      parameters bitwise equal to an uninterrupted run (sync, dropout, Adam, cosine
 *      schedule, epochs crossed), also from a checkpoint saved inside the progress
 *      callback;
 *  (c) a checkpoint saved with 2 replicas restores into 1 and 3 replicas;
 *  (d) truncated, bit-flipped, empty, wrong-magic and wrong-version files, and random
 *      corruptions, are refused with VKT_ERROR_FORMAT and a reason, leaving the trainer
 *      unchanged; a checkpoint of another model names the mismatched tensor; the
 *      directory manager keeps the newest N and falls back past a corrupt newest file,
 *      which it moves aside;
 *  (e) retention counts only checkpoints that verify: a corrupt newer file is moved
 *      aside and reported, never counted, and the good ones survive (keep 1 and keep 3);
 *      the newest valid checkpoint and the one just saved are never deleted; a file
 *      corrupted after it was verified is caught (the cache keys on size and mtime);
 *  (f) the folder's lock: refused to a second handle in this process, shared with this
 *      process's save_dir/restore_latest, refused to them and to vkt_checkpoint_dir_lock
 *      while another process holds it (naming its pid, the folder unchanged), and free
 *      again once that process is killed (SIGKILL; TerminateProcess). The other process
 *      is this program again, started with --hold-lock (plat_process_start);
 *  (g) notes describe every corrupt checkpoint whole or count it in a last line "... and
 *      N more like these": never a message cut in the middle; a save removes temporary
 *      files of interrupted saves (".ckpt-<step>.vkt.<pid>.<n>.tmp", and the earlier
 *      "ckpt-<step>.vkt.tmp.<pid>.<n>"), not other programs' ones; a checkpoint is never
 *      written to a device (vkt_trainer_save to /dev/null, NUL). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "harness.h"
#include "platform/platform.h"

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss;
} net;

enum { F = 12, C = 4, BATCH = 12, STEPS = 20, COUNT = 100 };

static net make_net(uint32_t hidden, float dropout)
{
    net n = {0};
    vkt_graph_options go = {.seed = 5};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, hidden}}, b1 = {1, {hidden}},
              w2 = {2, {hidden, C}}, b2 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, gl = {.kind = VKT_INIT_GLOROT},
             small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_tensor *h = vkt_relu(n.g, vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                                             vkt_param(n.g, "b1", &b1, &small)));
    if (dropout > 0)
        h = vkt_dropout(n.g, h, dropout);
    vkt_tensor *logits = vkt_linear(n.g, h, vkt_param(n.g, "w2", &w2, &gl),
                                    vkt_param(n.g, "b2", &b2, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, logits, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

static vkt_trainer *make_trainer(net *n, uint32_t replicas)
{
    uint32_t dev[4] = {0};
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f,
                                .schedule = VKT_SCHEDULE_WARMUP_COSINE, .warmup_steps = 3,
                                .total_steps = STEPS};
    vkt_trainer_options o = {.batch = BATCH, .devices = dev, .device_count = replicas,
                             .optimizer = oo};
    vkt_trainer *t = NULL;
    vkt_status st = vkt_trainer_create(th_instance, n->g, n->loss, &o, &t);
    TH_CHECK(st == VKT_OK, "trainer: %s", vkt_last_error());
    return t;
}

static vkt_dataset *synthetic(void)
{
    float x[COUNT * F];
    int32_t y[COUNT];
    th_seed(42);
    th_fill_uniform(x, COUNT * F, -1, 1);
    for (uint32_t i = 0; i < COUNT; i++) /* the largest of the first C features */
        for (int c = 0; c < C; c++)
            y[i] = c == 0 || x[i * F + c] > x[i * F + y[i]] ? c : y[i];
    vkt_dataset *d = NULL;
    TH_OK(NULL, vkt_dataset_create(COUNT, F, C, x, y, &d));
    return d;
}

/* Records every step's loss; optionally saves into a folder at one step. */
typedef struct recorder {
    float loss[STEPS + 1];
    vkt_trainer *t;
    const char *dir;
    uint64_t save_at;
} recorder;

static int record(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    recorder *r = user;
    if (step <= STEPS)
        r->loss[step] = loss;
    if (r->dir && step == r->save_at)
        TH_OK(NULL, vkt_checkpoint_save_dir(r->t, r->dir, 2));
    return 0;
}

static char g_tmp[200], dir_a[240], dir_b[240];
static const char *g_self; /* argv[0]: the child of test_lock runs this program */

/* The checkpoints (ckpt-<step>.vkt) in dir; -1 if no folder. */
static int count_files(const char *dir)
{
    char **names;
    size_t n;
    if (plat_list_dir(dir, &names, &n) != 0)
        return -1;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        k += strncmp(names[i], "ckpt-", 5) == 0 && len > 4 &&
             strcmp(names[i] + len - 4, ".vkt") == 0;
    }
    plat_free_names(names, n);
    return k;
}

/* Resumes from `path` (at step k) and trains to STEPS; compares with the full run. */
static void resume_and_compare(vkt_dataset *d, const char *path, uint64_t k,
                               const recorder *full, const float *full_params, uint64_t np)
{
    net n = make_net(16, 0.25f);
    vkt_trainer *t = make_trainer(&n, 1);
    if (!t)
        return;
    TH_OK(NULL, vkt_trainer_restore(t, path));
    TH_CHECK(vkt_trainer_step_count(t) == k, "restored step %llu, want %llu",
             (unsigned long long)vkt_trainer_step_count(t), (unsigned long long)k);
    recorder rec = {.t = t};
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, STEPS - k, 9, record, &rec));
    for (uint64_t s = k + 1; s <= STEPS; s++)
        TH_CHECK(memcmp(&rec.loss[s], &full->loss[s], 4) == 0,
                 "resumed at %llu: loss of step %llu is %.9g, uninterrupted %.9g",
                 (unsigned long long)k, (unsigned long long)s, rec.loss[s], full->loss[s]);
    float *p = th_alloc_floats(np);
    TH_OK(NULL, vkt_trainer_read_params(t, p, np));
    TH_CHECK(memcmp(p, full_params, np * 4) == 0,
             "resumed at %llu: final parameters differ from the uninterrupted run",
             (unsigned long long)k);
    free(p);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* (a) */
static void test_resume_bitwise(vkt_dataset *d)
{
    net n = make_net(16, 0.25f);
    vkt_trainer *t = make_trainer(&n, 1);
    if (!t)
        return;
    uint64_t np = vkt_trainer_param_count(t);
    recorder full = {.t = t};
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, STEPS, 9, record, &full));
    float *want = th_alloc_floats(np);
    TH_OK(NULL, vkt_trainer_read_params(t, want, np));
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);

    /* stopped at 11 (saved at the end), and a checkpoint at 7 from the callback */
    n = make_net(16, 0.25f);
    t = make_trainer(&n, 1);
    recorder part = {.t = t, .dir = dir_a, .save_at = 7};
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 11, 9, record, &part));
    TH_OK(NULL, vkt_checkpoint_save_dir(t, dir_a, 2));
    for (int s = 1; s <= 11; s++)
        TH_CHECK(memcmp(&part.loss[s], &full.loss[s], 4) == 0, "loss %d before the stop", s);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
    TH_CHECK(count_files(dir_a) == 2, "%d files in the folder, want ckpt-7 and ckpt-11",
             count_files(dir_a));

    char p11[512], p7[512];
    snprintf(p11, sizeof p11, "%s/ckpt-11.vkt", dir_a);
    snprintf(p7, sizeof p7, "%s/ckpt-7.vkt", dir_a);
    resume_and_compare(d, p11, 11, &full, want, np);
    resume_and_compare(d, p7, 7, &full, want, np);

    /* the newest of the folder, through the directory manager */
    n = make_net(16, 0.25f);
    t = make_trainer(&n, 1);
    int found = 0;
    uint64_t step = 0;
    char notes[1024];
    TH_OK(NULL, vkt_checkpoint_restore_latest(t, dir_a, &found, &step, notes, sizeof notes));
    TH_CHECK(found && step == 11 && notes[0] == '\0', "restore_latest: found %d step %llu",
             found, (unsigned long long)step);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
    free(want);
}

/* (c) */
static void test_replica_counts(vkt_dataset *d)
{
    net n2 = make_net(16, 0);
    vkt_trainer *two = make_trainer(&n2, 2);
    if (!two)
        return;
    uint64_t np = vkt_trainer_param_count(two);
    char path[512];
    snprintf(path, sizeof path, "%s/two.vkt", dir_b);
    TH_OK(NULL, vkt_trainer_fit(two, d, n2.x, n2.y, 6, 3, NULL, NULL));
    TH_OK(NULL, vkt_trainer_save(two, path));
    float *saved = th_alloc_floats(np), *p = th_alloc_floats(np), *after = th_alloc_floats(np);
    TH_OK(NULL, vkt_trainer_read_params(two, saved, np));
    TH_OK(NULL, vkt_trainer_fit(two, d, n2.x, n2.y, 5, 3, NULL, NULL));
    TH_OK(NULL, vkt_trainer_read_params(two, after, np));
    for (uint32_t replicas = 1; replicas <= 3; replicas += 2) {
        net n = make_net(16, 0);
        vkt_trainer *t = make_trainer(&n, replicas);
        if (!t)
            continue;
        TH_OK(NULL, vkt_trainer_restore(t, path));
        TH_CHECK(vkt_trainer_step_count(t) == 6, "%u replicas: step %llu", replicas,
                 (unsigned long long)vkt_trainer_step_count(t));
        for (uint32_t r = 0; r < replicas; r++) {
            TH_OK(NULL, vkt_trainer_read_replica_params(t, r, p, np));
            TH_CHECK(memcmp(p, saved, np * 4) == 0, "%u replicas: replica %u's parameters "
                     "differ from the saved ones", replicas, r);
        }
        /* the same data order and schedule: close to the 2-replica continuation */
        TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 5, 3, NULL, NULL));
        TH_OK(NULL, vkt_trainer_read_params(t, p, np));
        th_compare("continued with another replica count", p, after, np, 1e-3f, 1e-4f);
        vkt_trainer_destroy(t);
        vkt_graph_destroy(n.g);
    }
    free(saved);
    free(p);
    free(after);
    vkt_trainer_destroy(two);
    vkt_graph_destroy(n2.g);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (n)
        fwrite(data, 1, n, f);
    fclose(f);
}

/* Restoring `bytes` must fail with `want` and a message holding `why`, leaving the
 * trainer's parameters and step as they were. */
static void expect_refused(vkt_trainer *t, const char *path, const void *bytes, size_t n,
                           vkt_status want, const char *why, const float *params, uint64_t np)
{
    write_bytes(path, bytes, n);
    vkt_status st = vkt_trainer_restore(t, path);
    const char *msg = vkt_trainer_errmsg(t);
    TH_CHECK(st == want, "%s: got %s, want %s (%s)", why, vkt_status_name(st),
             vkt_status_name(want), msg);
    TH_CHECK(strstr(msg, why) != NULL, "message '%s' does not say '%s'", msg, why);
    if (want == VKT_ERROR_FORMAT)
        TH_CHECK(strstr(msg, "corrupt") != NULL, "message '%s' does not say corrupt", msg);
    float *p = th_alloc_floats(np);
    TH_OK(NULL, vkt_trainer_read_params(t, p, np));
    TH_CHECK(memcmp(p, params, np * 4) == 0 && vkt_trainer_step_count(t) == 3,
             "%s: the trainer changed", why);
    free(p);
}

/* (d) */
static void test_corrupt(vkt_dataset *d)
{
    net n = make_net(16, 0);
    vkt_trainer *t = make_trainer(&n, 1);
    if (!t)
        return;
    uint64_t np = vkt_trainer_param_count(t);
    char good[512], bad[512];
    snprintf(good, sizeof good, "%s/good.vkt", dir_b);
    snprintf(bad, sizeof bad, "%s/bad.vkt", dir_b);
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 3, 1, NULL, NULL));
    TH_OK(NULL, vkt_trainer_save(t, good));
    float *params = th_alloc_floats(np);
    TH_OK(NULL, vkt_trainer_read_params(t, params, np));
    void *file;
    size_t size;
    TH_CHECK(plat_read_file(good, &file, &size) == 0 && size > 64, "read back");
    unsigned char *b = malloc(size);

    expect_refused(t, bad, file, 0, VKT_ERROR_FORMAT, "empty", params, np);
    expect_refused(t, bad, file, size / 2, VKT_ERROR_FORMAT, "truncated", params, np);
    expect_refused(t, bad, file, 20, VKT_ERROR_FORMAT, "truncated", params, np);
    memcpy(b, file, size);
    b[size / 2] ^= 0x10;
    expect_refused(t, bad, b, size, VKT_ERROR_FORMAT, "checksum mismatch", params, np);
    memcpy(b, file, size);
    b[0] = 'X';
    expect_refused(t, bad, b, size, VKT_ERROR_FORMAT, "bad magic", params, np);
    memcpy(b, file, size);
    b[8] = 2; /* version 2, with a header checksum that agrees */
    uint32_t crc = (uint32_t)crc32(0L, b, 28);
    for (int i = 0; i < 4; i++)
        b[28 + i] = (unsigned char)(crc >> (8 * i));
    expect_refused(t, bad, b, size, VKT_ERROR_FORMAT, "unsupported version 2", params, np);

    /* random corruptions: never a crash, always refused */
    th_seed(7);
    for (int trial = 0; trial < 200; trial++) {
        memcpy(b, file, size);
        size_t len = size;
        if (trial % 3 == 0)
            len = (size_t)(th_rand_u64() % size);
        else
            for (int k = 0; k < 1 + trial % 5; k++)
                b[th_rand_u64() % size] ^= (unsigned char)(1 + th_rand_u64() % 255);
        write_bytes(bad, b, len);
        vkt_status st = vkt_trainer_restore(t, bad);
        TH_CHECK(st == VKT_ERROR_FORMAT, "random corruption %d: %s", trial, vkt_status_name(st));
    }

    /* another model: the mismatched tensor is named */
    net other = make_net(8, 0);
    vkt_trainer *o = make_trainer(&other, 1);
    if (o) {
        vkt_status st = vkt_trainer_restore(o, good);
        const char *m = vkt_trainer_errmsg(o); /* b1 [16] or w1 [12,16], by graph order */
        TH_CHECK(st == VKT_ERROR_SHAPE && strstr(m, "does not match the model") &&
                 ((strstr(m, "'w1'") && strstr(m, "[12,16]")) ||
                  (strstr(m, "'b1'") && strstr(m, "[16] in the checkpoint and [8]"))),
                 "another model: %s: %s",
                 vkt_status_name(st), vkt_trainer_errmsg(o));
    }
    vkt_trainer_destroy(o);
    vkt_graph_destroy(other.g);

    /* the folder: a corrupt newest file is reported, moved aside, the previous one used */
    char dir[300], p5[512], p9[512];
    snprintf(dir, sizeof dir, "%s/fallback", dir_b);
    snprintf(p5, sizeof p5, "%s/ckpt-5.vkt", dir);
    snprintf(p9, sizeof p9, "%s/ckpt-9.vkt", dir);
    TH_CHECK(plat_mkdirs(dir) == 0, "mkdir");
    write_bytes(p5, file, size);
    memcpy(b, file, size);
    b[size - 3] ^= 0x01;
    write_bytes(p9, b, size);
    int found = 0;
    uint64_t step = 0;
    char notes[2048];
    TH_OK(NULL, vkt_checkpoint_restore_latest(t, dir, &found, &step, notes, sizeof notes));
    TH_CHECK(found && step == 3, "fallback: found %d step %llu", found,
             (unsigned long long)step);
    TH_CHECK(strstr(notes, "ckpt-9.vkt") && strstr(notes, "corrupt") &&
             strstr(notes, "checksum mismatch") && strstr(notes, "moved aside to '") &&
             strstr(notes, "ckpt-9.vkt.corrupt'"), "fallback notes: '%s'", notes);
    uint64_t sb = 0;
    char p9c[600];
    snprintf(p9c, sizeof p9c, "%s.corrupt", p9);
    TH_CHECK(plat_file_stat(p9, NULL, NULL) != 0 && plat_file_stat(p9c, &sb, NULL) == 0 &&
                 (size_t)sb == size,
             "the corrupt file was not moved aside whole");
    write_bytes(p9, b, size); /* corrupt again */
    write_bytes(p5, file, 10); /* both corrupt now: an error, and the files stay */
    TH_STATUS(NULL, vkt_checkpoint_restore_latest(t, dir, &found, &step, notes, sizeof notes),
              VKT_ERROR_FORMAT);
    TH_CHECK(!found, "found with only corrupt files");
    TH_CHECK(plat_file_stat(p9, NULL, NULL) == 0 && plat_file_stat(p5, &sb, NULL) == 0 &&
                 (size_t)sb == 10,
             "only corrupt files: a file was moved");
    snprintf(dir, sizeof dir, "%s/none", dir_b);
    TH_OK(NULL, vkt_checkpoint_restore_latest(t, dir, &found, &step, NULL, 0));
    TH_CHECK(!found, "found in a missing folder");
    th_remove_tree(dir);
    snprintf(dir, sizeof dir, "%s/fallback", dir_b);
    th_remove_tree(dir);

    free(b);
    free(file);
    free(params);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

static int exists(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return plat_file_stat(p, NULL, NULL) == 0;
}

/* Writes a corrupt copy of dir/ckpt-<from>.vkt as dir/ckpt-<to>.vkt (one bit flipped). */
static void plant_corrupt(const char *dir, int from, int to)
{
    char src[600], dst[600];
    snprintf(src, sizeof src, "%s/ckpt-%d.vkt", dir, from);
    snprintf(dst, sizeof dst, "%s/ckpt-%d.vkt", dir, to);
    void *f;
    size_t n;
    if (!TH_CHECK(plat_read_file(src, &f, &n) == 0 && n > 100, "read %s", src))
        return;
    ((unsigned char *)f)[n / 2] ^= 0x04;
    write_bytes(dst, f, n);
    free(f);
}

/* A fresh trainer restored from the newest valid checkpoint of dir; its step. */
static uint64_t resume_step(const char *dir)
{
    net n = make_net(16, 0);
    vkt_trainer *t = make_trainer(&n, 1);
    int found = 0;
    uint64_t step = 0;
    if (t)
        TH_OK(NULL, vkt_checkpoint_restore_latest(t, dir, &found, &step, NULL, 0));
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
    return found ? step : 0;
}

/* (e) */
static void test_retention(vkt_dataset *d)
{
    char dir[300], notes[4096];
    snprintf(dir, sizeof dir, "%s/retention", dir_b);
    net n = make_net(16, 0);
    vkt_trainer *t = make_trainer(&n, 1);
    if (!t)
        return;
    /* the report: a good ckpt-3 and a corrupt newer ckpt-9, saved at 5 with keep 1 */
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 3, 1, NULL, NULL));
    TH_OK(NULL, vkt_checkpoint_save_dir(t, dir, 0));
    plant_corrupt(dir, 3, 9);
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 2, 1, NULL, NULL));
    TH_OK(NULL, vkt_checkpoint_save_dir_v2(t, dir, 1, notes, sizeof notes));
    TH_CHECK(exists(dir, "ckpt-5.vkt") && !exists(dir, "ckpt-3.vkt") &&
             !exists(dir, "ckpt-9.vkt") && exists(dir, "ckpt-9.vkt.corrupt") &&
             count_files(dir) == 1, "keep 1 with a corrupt newer file: %d checkpoints, "
             "ckpt-5 %d, ckpt-9.vkt.corrupt %d", count_files(dir), exists(dir, "ckpt-5.vkt"),
             exists(dir, "ckpt-9.vkt.corrupt"));
    TH_CHECK(strstr(notes, "ckpt-9.vkt' is corrupt: checksum mismatch") &&
             strstr(notes, "(moved aside to '") && !strchr(notes, '\n'),
             "retention notes: '%s'", notes);
    TH_CHECK(resume_step(dir) == 5, "the next run resumes at step %llu, want 5",
             (unsigned long long)resume_step(dir));

    /* keep 3 counts valid files only: 5, 7, 9 valid; 6 and 8 corrupt; saved at 9 */
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 2, 1, NULL, NULL));
    TH_OK(NULL, vkt_checkpoint_save_dir(t, dir, 0));
    plant_corrupt(dir, 5, 6);
    plant_corrupt(dir, 7, 8);
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 2, 1, NULL, NULL));
    TH_OK(NULL, vkt_checkpoint_save_dir_v2(t, dir, 3, notes, sizeof notes));
    TH_CHECK(count_files(dir) == 3 && exists(dir, "ckpt-5.vkt") && exists(dir, "ckpt-7.vkt") &&
             exists(dir, "ckpt-9.vkt") && exists(dir, "ckpt-6.vkt.corrupt") &&
             exists(dir, "ckpt-8.vkt.corrupt"), "keep 3 with 2 corrupt among them: %d "
             "checkpoints", count_files(dir));
    TH_CHECK(strstr(notes, "ckpt-8.vkt' is corrupt") && strstr(notes, "ckpt-6.vkt' is corrupt") &&
             strchr(notes, '\n'), "keep 3 notes: '%s'", notes);

    /* a verified file corrupted since (a new mtime: 20 ms on, past the coarse clock of
     * file times) is caught, not taken from the cache; a second corrupt ckpt-8 is moved
     * aside beside the first */
    plat_sleep(0.02);
    plant_corrupt(dir, 9, 7);
    plant_corrupt(dir, 9, 8);
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 1, 1, NULL, NULL));
    TH_OK(NULL, vkt_checkpoint_save_dir_v2(t, dir, 3, notes, sizeof notes));
    TH_CHECK(count_files(dir) == 3 && exists(dir, "ckpt-10.vkt") && exists(dir, "ckpt-9.vkt") &&
             exists(dir, "ckpt-5.vkt") && exists(dir, "ckpt-7.vkt.corrupt") &&
             exists(dir, "ckpt-8.vkt.corrupt.2"), "keep 3 after corruption: %d checkpoints",
             count_files(dir));
    TH_CHECK(strstr(notes, "ckpt-8.vkt.corrupt.2')") && strstr(notes, "ckpt-7.vkt' is corrupt"),
             "keep 3 notes after corruption: '%s'", notes);

    /* never the newest valid one, never the one just saved: a trainer back at step 9
     * saves with keep 1 beside the newer ckpt-10 */
    net n2 = make_net(16, 0);
    vkt_trainer *old = make_trainer(&n2, 1);
    char p9[600];
    snprintf(p9, sizeof p9, "%s/ckpt-9.vkt", dir);
    if (old) {
        TH_OK(NULL, vkt_trainer_restore(old, p9));
        TH_OK(NULL, vkt_checkpoint_save_dir(old, dir, 1));
        TH_CHECK(count_files(dir) == 2 && exists(dir, "ckpt-10.vkt") &&
                 exists(dir, "ckpt-9.vkt"), "an older trainer's save with keep 1: %d "
                 "checkpoints, ckpt-10 %d", count_files(dir), exists(dir, "ckpt-10.vkt"));
    }
    vkt_trainer_destroy(old);
    vkt_graph_destroy(n2.g);
    TH_CHECK(resume_step(dir) == 10, "resume after retention: step %llu",
             (unsigned long long)resume_step(dir));
    th_remove_tree(dir);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* (g) Notes never cut a message: 30 corrupt newer checkpoints described into 700 bytes
 * give whole lines, each "checkpoint '...ckpt-<n>.vkt' is corrupt: ...", newest first,
 * then "... and <k> more like these" with k the rest (the count adds up to 30). */
static void test_notes_whole(vkt_dataset *d)
{
    char dir[300], notes[700], out[400];
    snprintf(dir, sizeof dir, "%s/notes", dir_b);
    snprintf(out, sizeof out, "%s/notes.safetensors", dir_b);
    net n = make_net(16, 0);
    vkt_trainer *t = make_trainer(&n, 1);
    if (!t)
        return;
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 2, 1, NULL, NULL));
    TH_OK(NULL, vkt_checkpoint_save_dir(t, dir, 0));
#if defined(_WIN32)
    const char *null_dev = "NUL";
#else
    const char *null_dev = "/dev/null";
#endif
    TH_CHECK(vkt_trainer_save(t, null_dev) == VKT_ERROR_IO &&
                 strstr(vkt_trainer_errmsg(t), "never replaced") &&
                 plat_file_kind_of(null_dev) == PLAT_KIND_CHAR,
             "a checkpoint to %s is refused, the device kept: %s", null_dev,
             vkt_trainer_errmsg(t));
    for (int i = 100; i < 130; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/ckpt-%d.vkt", dir, i);
        TH_CHECK(plat_write_file_atomic(p, "junk", 4) == 0, "plant %s", p);
    }
    uint64_t step = 0;
    TH_OK(NULL, vkt_checkpoint_export_safetensors_v2(dir, out, &step, notes, sizeof notes));
    int whole = 0, more = -1, bad = 0, expect = 129;
    for (const char *line = notes; *line;) {
        size_t len = strcspn(line, "\n");
        char want[64];
        snprintf(want, sizeof want, "ckpt-%d.vkt' is corrupt: ", expect);
        if (sscanf(line, "... and %d more like these", &more) == 1)
            bad += line[len] != '\0'; /* the count is the last line */
        else if (strstr(line, want) && len > 40 && line[len - 1] == ')')
            whole++, expect--;
        else
            bad++;
        line += len + (line[len] == '\n');
    }
    TH_CHECK(step == 2 && bad == 0 && whole >= 3 && more == 30 - whole,
             "%d whole lines newest first, then '... and %d more' (want %d), %d others: '%s'",
             whole, more, 30 - whole, bad, notes);
    /* temporary files of interrupted saves (today's name and the earlier one) are removed
     * by the next save; another program's temporary file is not ours to remove */
    const char *temps[] = {".ckpt-7.vkt.4242.0.tmp", "ckpt-7.vkt.tmp.4242.0",
                           ".model.safetensors.4242.0.tmp"};
    for (int i = 0; i < 3; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/%s", dir, temps[i]);
        TH_CHECK(plat_write_file_atomic(p, "half", 4) == 0, "plant %s", p);
    }
    TH_OK(NULL, vkt_checkpoint_save_dir(t, dir, 0));
    TH_CHECK(!exists(dir, temps[0]) && !exists(dir, temps[1]) && exists(dir, temps[2]),
             "a save removes its leftovers (%d %d) and keeps another's (%d)",
             exists(dir, temps[0]), exists(dir, temps[1]), exists(dir, temps[2]));
    th_remove_tree(dir);
    plat_remove_file(out);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* A listing of dir: names, sizes and modification times. */
static void listing(const char *dir, char *buf, size_t size)
{
    char **names;
    size_t n, used = 0;
    buf[0] = '\0';
    if (plat_list_dir(dir, &names, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        char p[600];
        uint64_t bytes;
        int64_t mtime_ns;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (plat_file_stat(p, &bytes, &mtime_ns) == 0 && used < size)
            used += (size_t)snprintf(buf + used, size - used, "%s %llu %lld\n", names[i],
                                     (unsigned long long)bytes, (long long)mtime_ns);
    }
    plat_free_names(names, n);
}

/* (f) */
static void test_lock(vkt_dataset *d)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/locked", dir_b);
    net n = make_net(16, 0);
    vkt_trainer *t = make_trainer(&n, 1);
    if (!t)
        return;
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 2, 1, NULL, NULL));

    /* this process: one handle; its save_dir and restore_latest use the folder */
    vkt_checkpoint_lock *l = NULL, *l2 = NULL;
    TH_OK(NULL, vkt_checkpoint_dir_lock(dir, &l));
    TH_STATUS(NULL, vkt_checkpoint_dir_lock(dir, &l2), VKT_ERROR_STATE);
    TH_CHECK(!l2 && strstr(vkt_last_error(), "already locked by this process"),
             "second handle: %s", vkt_last_error());
    TH_OK(NULL, vkt_checkpoint_save_dir(t, dir, 2));
    TH_CHECK(resume_step(dir) == 2, "restore under this process's lock");
    vkt_checkpoint_dir_unlock(l);
    vkt_checkpoint_dir_unlock(NULL);

    /* another process holds it: this program again, as hold_lock() below, which writes
     * 'y' into `ready` once it holds the lock */
    char ready[700];
    snprintf(ready, sizeof ready, "%s/ready", dir_b);
    const char *argv[] = {g_self, "--hold-lock", dir, ready, NULL};
    plat_process *child = NULL;
    TH_CHECK(plat_process_start(argv, &child) == 0, "start %s --hold-lock", g_self);
    char ok = 0;
    for (double t0 = plat_now(); child && plat_now() - t0 < 60 && !ok; plat_sleep(0.01)) {
        void *data;
        size_t size;
        if (plat_read_file(ready, &data, &size) == 0) {
            ok = size == 1 ? *(char *)data : '?';
            free(data);
        }
    }
    TH_CHECK(ok == 'y', "child took the lock (%c)", ok ? ok : '-');
    long child_pid = plat_process_pid(child);
    char before[4096], after[4096], pid[32];
    listing(dir, before, sizeof before);
    snprintf(pid, sizeof pid, "(pid %ld on ", child_pid);
    TH_STATUS(NULL, vkt_checkpoint_dir_lock(dir, &l), VKT_ERROR_STATE);
    TH_CHECK(!l && strstr(vkt_last_error(), dir) && strstr(vkt_last_error(), "in use by another "
             "run") && strstr(vkt_last_error(), pid), "lock held elsewhere: %s",
             vkt_last_error());
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 1, 1, NULL, NULL));
    TH_STATUS(NULL, vkt_checkpoint_save_dir(t, dir, 1), VKT_ERROR_STATE);
    TH_CHECK(strstr(vkt_trainer_errmsg(t), pid), "save_dir: %s", vkt_trainer_errmsg(t));
    int found = 1;
    uint64_t step = 0;
    TH_STATUS(NULL, vkt_checkpoint_restore_latest(t, dir, &found, &step, NULL, 0),
              VKT_ERROR_STATE);
    TH_CHECK(!found && vkt_trainer_step_count(t) == 3, "restore_latest while held elsewhere");
    listing(dir, after, sizeof after);
    TH_CHECK(strcmp(before, after) == 0, "the folder changed:\n%s---\n%s", before, after);

    /* killed: the lock is gone with it */
    if (child) {
        TH_CHECK(plat_process_kill(child) == 0, "kill the child");
        int status = plat_process_wait(child);
        TH_CHECK(status == 137, "the child ended killed: status %d", status);
    }
    TH_OK(NULL, vkt_checkpoint_dir_lock(dir, &l));
    TH_OK(NULL, vkt_checkpoint_save_dir(t, dir, 1));
    vkt_checkpoint_dir_unlock(l);
    TH_CHECK(resume_step(dir) == 3 && count_files(dir) == 1, "after the kill: step %llu, %d "
             "checkpoints", (unsigned long long)resume_step(dir), count_files(dir));
    th_remove_tree(dir);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* The child of test_lock: takes the lock of `dir`, writes 'y' (or 'n' if it could not)
 * into `ready`, and waits to be killed (at most two minutes, should the parent die). */
static int hold_lock(const char *dir, const char *ready)
{
    vkt_checkpoint_lock *l = NULL;
    int ok = vkt_checkpoint_dir_lock(dir, &l) == VKT_OK;
    if (plat_write_file_atomic(ready, ok ? "y" : "n", 1) != 0 || !ok)
        return 1;
    for (int i = 0; i < 1200; i++)
        plat_sleep(0.1);
    vkt_checkpoint_dir_unlock(l);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--hold-lock") == 0)
        return hold_lock(argv[2], argv[3]);
    g_self = argv[0];
    th_init("test_checkpoint");
    th_temp_dir("test_checkpoint", g_tmp, sizeof g_tmp);
    snprintf(dir_a, sizeof dir_a, "%s/a", g_tmp);
    snprintf(dir_b, sizeof dir_b, "%s/b", g_tmp);
    TH_CHECK(plat_mkdirs(dir_b) == 0, "mkdir %s", dir_b);
    vkt_dataset *d = synthetic();
    test_resume_bitwise(d);
    test_replica_counts(d);
    test_corrupt(d);
    test_retention(d);
    test_notes_whole(d);
    test_lock(d);
    vkt_dataset_destroy(d);
    th_remove_tree(g_tmp);
    return th_finish();
}
