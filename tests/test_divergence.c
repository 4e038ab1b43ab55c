/* The divergence guard (docs/checkpoint.md, "Divergence"):
 *  (a) a finite blow-up (momentum SGD at lr 40: weights grow tens of times in a step with a
 *      finite loss) is caught by the save that would write it: fit, whose progress
 *      callback saves every step into a folder kept at one checkpoint, ends with
 *      VKT_ERROR_DIVERGED naming the step and the growth; the folder keeps the last sound
 *      checkpoint (it restores), nothing newer, no temporary file; vkt_trainer_save refuses
 *      too and writes nothing. For one replica, 2 sync replicas, 2 async replicas and 2
 *      pipeline stages;
 *  (b) healthy runs (the same modes at lr 0.1, SGD at 0.5, Adam at 0.01) save every
 *      checkpoint they are asked for;
 *  (c) a non-finite parameter (written) and a non-finite optimizer moment (planted in a
 *      checkpoint) are refused, naming the tensor;
 *  (d) restoring: a checkpoint without the NORM section (as older builds wrote them)
 *      holding blown-up weights is refused by vkt_trainer_restore, the trainer unchanged;
 *      restore_latest goes back past such files to the newest sound one and moves them
 *      aside (.diverged), or, with none sound, fails with VKT_ERROR_DIVERGED and leaves
 *      the files; a file's NORM section is the reference it is measured against;
 *  (e) divergence_growth: a tighter limit refuses what the default takes, a negative one
 *      takes any growth (never a non-finite value); vkt_trainer_write_params starts the
 *      reference anew, and the checkpoint carries it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "harness.h"
#include "parallel/trainer.h" /* guard_rms: the reference the guard measures against */
#include "platform/platform.h"

enum { F = 12, H = 16, C = 4, BATCH = 12, COUNT = 120 };

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss;
} net;

/* stage_split: the second layer on stage 1 (a two-stage pipeline). */
static net make_net(int stage_split)
{
    net n = {0};
    vkt_graph_options go = {.seed = 5};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, F}}, w1 = {2, {F, H}}, b1 = {1, {H}}, w2 = {2, {H, C}},
              b2 = {1, {C}};
    vkt_init he = {.kind = VKT_INIT_HE}, gl = {.kind = VKT_INIT_GLOROT},
             small = {.kind = VKT_INIT_UNIFORM, .a = -0.1f, .b = 0.1f};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    vkt_tensor *h = vkt_relu(n.g, vkt_linear(n.g, n.x, vkt_param(n.g, "w1", &w1, &he),
                                             vkt_param(n.g, "b1", &b1, &small)));
    if (stage_split)
        vkt_graph_set_stage(n.g, 1);
    vkt_tensor *logits = vkt_linear(n.g, h, vkt_param(n.g, "w2", &w2, &gl),
                                    vkt_param(n.g, "b2", &b2, &small));
    n.loss = vkt_softmax_cross_entropy(n.g, logits, n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* A run's shape: replicas (device 0 each), mode, pipeline stages. */
typedef struct mode {
    const char *name;
    uint32_t replicas, stages;
    vkt_parallel_mode parallel;
} mode;

static vkt_trainer *make(net *n, const mode *m, vkt_optimizer_options oo, float growth)
{
    uint32_t dev[4] = {0};
    vkt_trainer_options o = {.batch = BATCH, .devices = dev, .device_count = m->replicas,
                             .mode = m->parallel, .optimizer = oo, .stages = m->stages,
                             .divergence_growth = growth};
    if (m->stages > 1)
        o.device_count = m->stages; /* one copy: stage s on entry s */
    vkt_trainer *t = NULL;
    TH_CHECK(vkt_trainer_create(th_instance, n->g, n->loss, &o, &t) == VKT_OK, "%s: %s",
             m->name, vkt_last_error());
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

static char g_tmp[200];

/* The checkpoints (ckpt-<step>.vkt) in dir, and other files (*others: temporary ones,
 * moved aside ones). */
static int count_files(const char *dir, int *others)
{
    char **names;
    size_t n;
    *others = 0;
    if (plat_list_dir(dir, &names, &n) != 0)
        return 0;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        int ck = strncmp(names[i], "ckpt-", 5) == 0 && len > 4 &&
                 strcmp(names[i] + len - 4, ".vkt") == 0;
        k += ck;
        *others += !ck && names[i][0] != '.'; /* the hidden lock file is the folder's */
    }
    plat_free_names(names, n);
    return k;
}

static int exists(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return plat_file_stat(p, NULL, NULL) == 0;
}

/* The progress callback: a checkpoint into dir after every step (it never asks to stop:
 * the guard ends the run by itself); the first refusal's status. */
typedef struct saver {
    vkt_trainer *t;
    const char *dir;
    uint32_t keep;
    uint64_t saved, refused_at;
    vkt_status refused;
} saver;

static int save_each(void *user, uint64_t step, uint64_t total, float loss)
{
    (void)total;
    (void)loss;
    saver *s = user;
    vkt_status st = vkt_checkpoint_save_dir(s->t, s->dir, s->keep);
    if (st == VKT_OK)
        s->saved++;
    else if (!s->refused) {
        s->refused = st;
        s->refused_at = step;
    }
    return 0;
}

/* (a) and (b) in one mode. */
static void blow_up(vkt_dataset *d, const mode *m)
{
    net n = make_net(m->stages > 1);
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    vkt_trainer *t = make(&n, m, oo, 0);
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, m->name);
    snprintf(path, sizeof path, "%s/one.vkt", g_tmp);
    int others;
    if (!t)
        goto done;
    /* healthy: every step saved (keep 0: all kept) */
    saver s = {.t = t, .dir = dir, .keep = 0};
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 6, 1, save_each, &s));
    TH_CHECK(s.saved == 6 && !s.refused && count_files(dir, &others) == 6 && !others,
             "%s, lr 0.1: %llu of 6 steps saved, %d files", m->name,
             (unsigned long long)s.saved, count_files(dir, &others));
    /* lr 40: the weights blow up, the loss stays finite */
    oo.lr = 40;
    TH_OK(NULL, vkt_trainer_set_optimizer(t, &oo));
    s = (saver){.t = t, .dir = dir, .keep = 1};
    vkt_status st = vkt_trainer_fit(t, d, n.x, n.y, 20, 1, save_each, &s);
    char want[64];
    snprintf(want, sizeof want, "training diverged by step %llu: ",
             (unsigned long long)s.refused_at);
    TH_CHECK(st == VKT_ERROR_DIVERGED && s.refused == VKT_ERROR_DIVERGED &&
                 s.refused_at >= 7 && s.refused_at <= 9 &&
                 strstr(vkt_trainer_errmsg(t), want) &&
                 strstr(vkt_trainer_errmsg(t), "the parameters' RMS is ") &&
                 vkt_trainer_step_count(t) == s.refused_at,
             "%s, lr 40: fit %s at step %llu (refused at %llu): %s", m->name,
             vkt_status_name(st), (unsigned long long)vkt_trainer_step_count(t),
             (unsigned long long)s.refused_at, vkt_trainer_errmsg(t));
    /* the folder: nothing deleted by the refused save (all 6 if the first save at lr 40
     * was refused, else the last sound one alone: keep 1), and it restores */
    char last[64];
    snprintf(last, sizeof last, "ckpt-%llu.vkt", (unsigned long long)s.refused_at - 1);
    int want_files = s.refused_at == 7 ? 6 : 1;
    TH_CHECK(count_files(dir, &others) == want_files && !others && exists(dir, last),
             "%s: the folder holds %d checkpoints (want %d; %s: %d), %d other files", m->name,
             count_files(dir, &others), want_files, last, exists(dir, last), others);
    /* the diverged trainer saves nothing, by any call */
    TH_STATUS(NULL, vkt_trainer_save(t, path), VKT_ERROR_DIVERGED);
    TH_CHECK(plat_file_stat(path, NULL, NULL) != 0 &&
                 strstr(vkt_trainer_errmsg(t), "; not saved (a smaller learning rate"),
             "%s: vkt_trainer_save: %s", m->name, vkt_trainer_errmsg(t));
    TH_STATUS(NULL, vkt_checkpoint_save_dir(t, dir, 1), VKT_ERROR_DIVERGED);
    TH_CHECK(strstr(vkt_trainer_errmsg(t), "not saved, nothing deleted: the newest checkpoint, ") &&
                 strstr(vkt_trainer_errmsg(t), last),
             "%s: save_dir names the checkpoint to go back to: %s", m->name,
             vkt_trainer_errmsg(t));
    int found = 0;
    uint64_t step = 0;
    TH_OK(NULL, vkt_checkpoint_restore_latest(t, dir, &found, &step, NULL, 0));
    TH_CHECK(found && step == s.refused_at - 1, "%s: back at step %llu", m->name,
             (unsigned long long)step);
done:
    th_remove_tree(dir);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* (b) with other optimizers, one replica. */
static void healthy(vkt_dataset *d, vkt_optimizer_options oo, const char *name)
{
    net n = make_net(0);
    mode one = {name, 1, 1, VKT_PARALLEL_SYNC};
    vkt_trainer *t = make(&n, &one, oo, 0);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
    saver s = {.t = t, .dir = dir, .keep = 0};
    int others;
    if (t) {
        TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 40, 1, save_each, &s));
        TH_CHECK(s.saved == 40 && count_files(dir, &others) == 40, "%s: %llu of 40 saved (%s)",
                 name, (unsigned long long)s.saved, vkt_trainer_errmsg(t));
    }
    th_remove_tree(dir);
    vkt_trainer_destroy(t);
    vkt_graph_destroy(n.g);
}

/* ---- checkpoint files rewritten as a test needs (the format: docs/checkpoint.md) ---- */

typedef struct edit {
    float scale;      /* every parameter times this (1: as saved) */
    int drop_norm;    /* leave the NORM section out (as older builds wrote) */
    double norm_rms;  /* > 0: the NORM section's reference becomes this */
    float last_moment; /* != 0: the optimizer state's last float becomes this */
} edit;

static void le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* from -> to, with the edit applied and the checksums made right again. */
static int rewrite(const char *from, const char *to, edit e)
{
    void *data;
    size_t size;
    if (plat_read_file(from, &data, &size) != 0)
        return 0;
    unsigned char *f = data, *out = malloc(size), *o = out + 32;
    memcpy(out, f, 32);
    for (size_t p = 32; p + 16 <= size;) {
        uint64_t len;
        memcpy(&len, f + p + 8, 8);
        unsigned char *body = o + 16;
        int drop = e.drop_norm && memcmp(f + p, "NORM", 4) == 0;
        if (!drop) {
            memcpy(o, f + p, 16 + len);
            o += 16 + len;
        }
        if (!drop && memcmp(f + p, "PARM", 4) == 0) { /* per tensor: name, dims, floats */
            uint32_t count, q = 8;
            memcpy(&count, body, 4);
            for (uint32_t i = 0; i < count; i++) {
                uint32_t l, nd;
                uint64_t c;
                memcpy(&l, body + q, 4);
                memcpy(&nd, body + q + 4 + l, 4);
                q += 8 + l + 4 * nd;
                memcpy(&c, body + q, 8);
                q += 8;
                for (uint64_t j = 0; j < c; j++, q += 4) {
                    float v;
                    memcpy(&v, body + q, 4);
                    v *= e.scale;
                    memcpy(body + q, &v, 4);
                }
            }
        }
        if (!drop && memcmp(f + p, "NORM", 4) == 0 && e.norm_rms > 0)
            memcpy(body, &e.norm_rms, 8);
        if (!drop && memcmp(f + p, "OPTM", 4) == 0 && e.last_moment != 0)
            memcpy(body + len - 4, &e.last_moment, 4);
        p += 16 + len;
    }
    uint64_t payload = (uint64_t)(o - out) - 32;
    memcpy(out + 16, &payload, 8);
    le32(out + 24, (uint32_t)crc32(0L, out + 32, (uInt)payload));
    le32(out + 28, (uint32_t)crc32(0L, out, 28));
    int ok = plat_write_file_atomic(to, out, 32 + payload) == 0;
    free(out);
    free(data);
    return ok;
}

static vkt_trainer *fresh(net *n, float growth)
{
    mode one = {"one", 1, 1, VKT_PARALLEL_SYNC};
    vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f};
    return make(n, &one, oo, growth);
}

/* (c), (d), (e) */
static void files(vkt_dataset *d)
{
    net n = make_net(0);
    vkt_trainer *t = fresh(&n, 0), *u = fresh(&n, 0), *tight = fresh(&n, 2),
                *loose = fresh(&n, -1);
    char dir[300], good[400], path[400], other[400];
    snprintf(dir, sizeof dir, "%s/files", g_tmp);
    snprintf(good, sizeof good, "%s/good.vkt", g_tmp);
    snprintf(path, sizeof path, "%s/edited.vkt", g_tmp);
    if (!t || !u || !tight || !loose)
        goto done;
    uint64_t np = vkt_trainer_param_count(t);
    float *p0 = th_alloc_floats(np), *p1 = th_alloc_floats(np);
    TH_OK(NULL, vkt_trainer_fit(t, d, n.x, n.y, 5, 1, NULL, NULL));
    TH_OK(NULL, vkt_trainer_save(t, good));

    /* (d) a file without NORM (an older build's) 1000 times larger: refused, unchanged */
    TH_CHECK(rewrite(good, path, (edit){.scale = 1000, .drop_norm = 1}), "rewrite");
    TH_OK(NULL, vkt_trainer_read_params(u, p0, np));
    TH_STATUS(NULL, vkt_trainer_restore(u, path), VKT_ERROR_DIVERGED);
    TH_OK(NULL, vkt_trainer_read_params(u, p1, np));
    TH_CHECK(strstr(vkt_trainer_errmsg(u), "edited.vkt' (step 5) holds a diverged model: the "
                    "parameters' RMS is ") && strstr(vkt_trainer_errmsg(u), "(the limit is 10x") &&
                 memcmp(p0, p1, np * 4) == 0 && vkt_trainer_step_count(u) == 0,
             "an older build's blown-up checkpoint: %s", vkt_trainer_errmsg(u));
    /* 3 times larger: within the default limit, not within 2x; any growth with -1 */
    TH_CHECK(rewrite(good, path, (edit){.scale = 3, .drop_norm = 1}), "rewrite");
    TH_OK(NULL, vkt_trainer_restore(u, path));
    TH_STATUS(NULL, vkt_trainer_restore(tight, path), VKT_ERROR_DIVERGED);
    TH_CHECK(strstr(vkt_trainer_errmsg(tight), "(the limit is 2x"), "divergence_growth 2: %s",
             vkt_trainer_errmsg(tight));
    TH_CHECK(rewrite(good, path, (edit){.scale = 1e6f, .drop_norm = 1}), "rewrite");
    TH_OK(NULL, vkt_trainer_restore(loose, path));
    /* the NORM section is the reference: 3 times larger measured against a quarter of the
     * start is about 12 times its reference */
    char quarter[64];
    snprintf(quarter, sizeof quarter, "times its %.3g at step 0", t->guard_rms / 4);
    TH_CHECK(rewrite(good, path, (edit){.scale = 3, .norm_rms = t->guard_rms / 4}), "rewrite");
    TH_STATUS(NULL, vkt_trainer_restore(u, path), VKT_ERROR_DIVERGED);
    TH_CHECK(strstr(vkt_trainer_errmsg(u), quarter), "NORM's reference (%s): %s", quarter,
             vkt_trainer_errmsg(u));

    /* (c) a non-finite optimizer moment, planted; a non-finite parameter, written */
    TH_CHECK(rewrite(good, path, (edit){.scale = 1, .last_moment = INFINITY}), "rewrite");
    TH_STATUS(NULL, vkt_trainer_restore(u, path), VKT_ERROR_DIVERGED);
    TH_CHECK(strstr(vkt_trainer_errmsg(u), "holds a diverged model: the optimizer's state of "
                    "parameter '") && strstr(vkt_trainer_errmsg(u), "' holds inf"),
             "a non-finite moment: %s", vkt_trainer_errmsg(u));
    TH_OK(NULL, vkt_trainer_read_params(t, p0, np));
    p0[3] = NAN;
    TH_OK(NULL, vkt_trainer_write_params(t, p0, np));
    snprintf(other, sizeof other, "%s/nan.vkt", g_tmp);
    TH_STATUS(NULL, vkt_trainer_save(t, other), VKT_ERROR_DIVERGED);
    TH_CHECK(strstr(vkt_trainer_errmsg(t), "by step 5: parameter '") &&
                 strstr(vkt_trainer_errmsg(t), "' holds nan") &&
                 plat_file_stat(other, NULL, NULL) != 0, "a NaN parameter: %s",
             vkt_trainer_errmsg(t));
    TH_STATUS(NULL, vkt_trainer_save(loose, other), VKT_OK); /* (restored 1e6 times: sound) */
    TH_OK(NULL, vkt_trainer_write_params(loose, p0, np));
    TH_STATUS(NULL, vkt_trainer_save(loose, other), VKT_ERROR_DIVERGED);

    /* (e) written parameters are a new start, carried by the checkpoint */
    TH_OK(NULL, vkt_trainer_restore(t, good));
    TH_OK(NULL, vkt_trainer_read_params(t, p0, np));
    for (uint64_t i = 0; i < np; i++)
        p0[i] *= 1000;
    TH_OK(NULL, vkt_trainer_write_params(t, p0, np));
    TH_OK(NULL, vkt_trainer_save(t, other));
    TH_OK(NULL, vkt_trainer_restore(u, other)); /* 1000 x u's start, 1 x the file's */
    TH_CHECK(rewrite(other, path, (edit){.scale = 1, .drop_norm = 1}), "rewrite");
    TH_STATUS(NULL, vkt_trainer_restore(tight, path), VKT_ERROR_DIVERGED);

    /* (d) a folder: sound 5, blown-up 8 and 9 (older builds'); back to 5, the others
     * moved aside; with none sound, an error and nothing moved */
    TH_CHECK(plat_mkdirs(dir) == 0, "mkdir");
    char p5[400], p8[400], p9[400], notes[4096];
    snprintf(p5, sizeof p5, "%s/ckpt-5.vkt", dir);
    snprintf(p8, sizeof p8, "%s/ckpt-8.vkt", dir);
    snprintf(p9, sizeof p9, "%s/ckpt-9.vkt", dir);
    TH_CHECK(rewrite(good, p5, (edit){.scale = 1}) &&
                 rewrite(good, p8, (edit){.scale = 1e4f, .drop_norm = 1}) &&
                 rewrite(good, p9, (edit){.scale = 1e20f, .drop_norm = 1}), "rewrite");
    int found = 0, others;
    uint64_t step = 0;
    vkt_trainer *v = fresh(&n, 0);
    if (v) {
        TH_OK(NULL, vkt_checkpoint_restore_latest(v, dir, &found, &step, notes, sizeof notes));
        TH_CHECK(found && step == 5 && exists(dir, "ckpt-9.vkt.diverged") &&
                     exists(dir, "ckpt-8.vkt.diverged") && count_files(dir, &others) == 1,
                 "back to step %llu past two diverged ones", (unsigned long long)step);
        TH_CHECK(strstr(notes, "ckpt-9.vkt' (step 5) holds a diverged model") &&
                     strstr(notes, "(moved aside to '") && strchr(notes, '\n'),
                 "restore_latest notes: %s", notes);
    }
    plat_remove_file(p5); /* 8 and 9 again, and nothing sound */
    TH_CHECK(rewrite(good, p8, (edit){.scale = 1e4f, .drop_norm = 1}) &&
                 rewrite(good, p9, (edit){.scale = 1e20f, .drop_norm = 1}), "rewrite");
    vkt_trainer_destroy(v);
    v = fresh(&n, 0);
    if (v) {
        TH_STATUS(NULL, vkt_checkpoint_restore_latest(v, dir, &found, &step, notes,
                                                      sizeof notes), VKT_ERROR_DIVERGED);
        TH_CHECK(!found && vkt_trainer_step_count(v) == 0 &&
                     strstr(vkt_trainer_errmsg(v), "is from before training diverged") &&
                     strstr(vkt_trainer_errmsg(v), "move them out of the folder") &&
                     exists(dir, "ckpt-8.vkt") && exists(dir, "ckpt-9.vkt"),
                 "only diverged ones: %s", vkt_trainer_errmsg(v));
    }
    vkt_trainer_destroy(v);
    free(p0);
    free(p1);
done:
    vkt_trainer_destroy(t);
    vkt_trainer_destroy(u);
    vkt_trainer_destroy(tight);
    vkt_trainer_destroy(loose);
    vkt_graph_destroy(n.g);
}

int main(void)
{
    th_init("test_divergence");
    th_temp_dir("test_divergence", g_tmp, sizeof g_tmp);
    vkt_dataset *d = synthetic();
    static const mode modes[] = {{"one_replica", 1, 1, VKT_PARALLEL_SYNC},
                                 {"sync_replicas", 2, 1, VKT_PARALLEL_SYNC},
                                 {"async_replicas", 2, 1, VKT_PARALLEL_ASYNC},
                                 {"pipeline_stages", 1, 2, VKT_PARALLEL_SYNC}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        blow_up(d, &modes[i]);
    healthy(d, (vkt_optimizer_options){.kind = VKT_OPTIMIZER_SGD, .lr = 0.5f}, "sgd_0.5");
    healthy(d, (vkt_optimizer_options){.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f}, "adam_0.01");
    files(d);
    vkt_dataset_destroy(d);
    th_remove_tree(g_tmp);
    return th_finish();
}
