/* The loss scaler in checkpoints (docs/checkpoint.md, section SCAL; README "Mixed
 * precision"). Forced overflows (fp16 from a start scale of 2^40, interval 4) make the
 * scale move: a run saved at step k (k in the middle of the skipping, and later, between
 * two doublings) and resumed in a fresh trainer (created with the default start scale,
 * so what it goes on with comes from the file) continues as the run that saved and went
 * on: after 40 steps the same skip count, the same scale and the same parameters bit for
 * bit, with one replica, with two sync replicas (each replica restored) and with 2
 * pipeline stages x 2 micro-batches (the driver's one scaler; across 2 ranks a stage per
 * rank, every rank judging alike from the step's tail). The run that
 * saved equals one that never saved (one replica: the update is judged in its own step).
 *
 * Other precisions and older files: the fp16 file resumed in fp32 without skipping
 * ignores the section (no skip, scale 1); in fp32 with nonfinite_skips keeps the skip
 * count and scale 1; a file without the section (as older builds wrote, and as an fp32
 * run without skipping writes) resumed in fp16 starts the scaler afresh, also in a
 * trainer whose scaler had moved; a section whose scale is NaN is VKT_ERROR_FORMAT.
 *
 * With --mpi (under mpirun, R ranks, each feeding the same global batch): async replicas
 * across ranks (the parameter server) report the world's skips on every rank and resume
 * (async_across); the resumes
 * across ranks, the chief alone reading the file (the others pass a path that does not
 * exist) and every rank going on as the run that saved; check_identical compares the ranks'
 * parameters every step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "harness.h"
#include "scaler_mlp.h"
#include "platform/platform.h"

static vkt_world *world; /* --mpi: the ranks' world; else NULL */
static uint32_t rank_;

#define SCALE_2_40 1099511627776.0f
#define STEPS 40u

static uint32_t stages_; /* 2: the trainers are 2 stages x 2 micro-batches (reps 1) */

static vkt_trainer *make(scaler_mlp *n, vkt_precision p, float scale, uint32_t skips, uint32_t reps)
{
    uint32_t devs[2] = {0, 0};
    vkt_trainer_options o = {.batch = 16, .precision = p, .loss_scale = scale,
                             .loss_scale_interval = 4, .nonfinite_skips = skips,
                             .devices = reps > 1 ? devs : NULL, .device_count = reps,
                             .world = world, .check_identical = world && !stages_ ? 1 : 0,
                             .stages = stages_ ? stages_ : 1,
                             .micro_batches = stages_ ? 2 : 0};
    o.optimizer.kind = VKT_OPTIMIZER_ADAM;
    o.optimizer.lr = 0.01f;
    vkt_trainer *t = NULL;
    TH_CHECK(vkt_trainer_create(th_instance, n->g, n->loss, &o, &t) == VKT_OK,
             "trainer (%s, %u replicas): %s", vkt_precision_name(p), reps, vkt_last_error());
    return t;
}

typedef struct outcome {
    uint64_t skipped;
    float scale;
    float *params;
} outcome;

/* Steps from..to-1 of t; with `save`, saves at step `save` (after it, so the file holds
 * step save's state) and goes on; the outcome at the end. */
static void train(scaler_mlp *n, vkt_trainer *t, uint32_t from, uint32_t to, uint32_t save,
                  const char *path, outcome *out)
{
    vkt_feed f[2] = {{n->x, n->X}, {n->y, n->Y}};
    for (uint32_t s = from; s < to; s++) {
        if (save && s == save)
            TH_OK(NULL, vkt_trainer_save(t, path));
        TH_OK(NULL, vkt_trainer_step(t, f, 2, NULL));
    }
    uint64_t count = vkt_trainer_param_count(t);
    out->params = th_alloc_floats(count);
    TH_OK(NULL, vkt_trainer_read_params(t, out->params, count));
    TH_OK(NULL, vkt_trainer_skipped(t, &out->skipped, &out->scale));
}

static int same(const outcome *a, const outcome *b, uint64_t count)
{
    return a->skipped == b->skipped && a->scale == b->scale &&
           memcmp(a->params, b->params, count * sizeof *a->params) == 0;
}

/* Saved at step k and resumed: as the run that saved and went on. */
static void resumes_alike(scaler_mlp *n, uint32_t reps, const char *dir)
{
    static const uint32_t at[2] = {12, 27};
    char path[600], what[64];
    if (stages_)
        snprintf(what, sizeof what, "%u stages x 2 micro-batches", stages_);
    else
        snprintf(what, sizeof what, "%u replica(s)", reps);
    snprintf(path, sizeof path, "%s/ckpt", dir);
    for (int i = 0; i < 2; i++) {
        vkt_trainer *a = make(n, VKT_PRECISION_FP16, SCALE_2_40, 0, reps);
        if (!a)
            return;
        outcome wa = {0}, wb = {0}, wc = {0};
        uint64_t count = vkt_trainer_param_count(a);
        train(n, a, 0, STEPS, at[i], path, &wa);
        vkt_trainer_destroy(a);
        /* the file's own state: a fresh trainer restored and not trained */
        vkt_trainer *b = make(n, VKT_PRECISION_FP16, 0, 0, reps);
        uint64_t s0 = 0;
        float sc0 = 0;
        /* across ranks only the chief reads the file */
        const char *from = rank_ == 0 ? path : "/nonexistent/elsewhere.vkt";
        if (b && TH_OK(NULL, vkt_trainer_restore(b, from))) {
            vkt_trainer_skipped(b, &s0, &sc0);
            TH_CHECK(s0 > 0 && sc0 != 65536.0f && vkt_trainer_step_count(b) == at[i],
                     "%s: the file of step %u carries %llu skips and scale %g", what, at[i],
                     (unsigned long long)s0, (double)sc0);
            train(n, b, at[i], STEPS, 0, NULL, &wb);
            TH_CHECK(same(&wa, &wb, count),
                     "%s, saved at step %u and resumed: %llu skipped, scale %g, "
                     "parameters %s; the run that went on: %llu, %g", what, at[i],
                     (unsigned long long)wb.skipped, (double)wb.scale,
                     wb.params && !memcmp(wa.params, wb.params, count * 4) ? "equal" : "differ",
                     (unsigned long long)wa.skipped, (double)wa.scale);
            printf("%s: saved at step %u (%llu skipped, scale %g), resumed to step %u:"
                   " %llu skipped, scale %g, as the run that went on\n", what, at[i],
                   (unsigned long long)s0, (double)sc0, STEPS, (unsigned long long)wb.skipped,
                   (double)wb.scale);
        }
        vkt_trainer_destroy(b);
        if (reps == 1 && i == 0 && !world) { /* saving changes nothing in the run (the
                                                  update is judged in its own step) */
            vkt_trainer *c = make(n, VKT_PRECISION_FP16, SCALE_2_40, 0, reps);
            if (c) {
                train(n, c, 0, STEPS, 0, NULL, &wc);
                TH_CHECK(same(&wa, &wc, count), "the run that saved equals one that never "
                         "saved: %llu/%llu skipped, scale %g/%g", (unsigned long long)wa.skipped,
                         (unsigned long long)wc.skipped, (double)wa.scale, (double)wc.scale);
            }
            vkt_trainer_destroy(c);
        }
        free(wa.params);
        free(wb.params);
        free(wc.params);
    }
}

static void le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* from -> to with the SCAL section left out (drop) or its scale made NaN; the checksums
 * made right again. */
static int rewrite(const char *from, const char *to, int drop)
{
    void *data;
    size_t size;
    if (plat_read_file(from, &data, &size) != 0)
        return 0;
    unsigned char *f = data, *out = malloc(size), *o = out + 32;
    memcpy(out, f, 32);
    int found = 0;
    for (size_t p = 32; p + 16 <= size;) {
        uint64_t len;
        memcpy(&len, f + p + 8, 8);
        int scal = memcmp(f + p, "SCAL", 4) == 0;
        found |= scal;
        if (!(scal && drop)) {
            memcpy(o, f + p, 16 + len);
            if (scal) {
                double nan = NAN;
                memcpy(o + 16 + 8, &nan, 8);
            }
            o += 16 + len;
        }
        p += 16 + len;
    }
    uint64_t payload = (uint64_t)(o - out) - 32;
    memcpy(out + 16, &payload, 8);
    le32(out + 24, (uint32_t)crc32(0L, out + 32, (uInt)payload));
    le32(out + 28, (uint32_t)crc32(0L, out, 28));
    int ok = found && plat_write_file_atomic(to, out, 32 + payload) == 0;
    free(out);
    free(data);
    return ok;
}

static void across_precisions(scaler_mlp *n, const char *dir)
{
    char path[600], old[600], bad[600];
    snprintf(path, sizeof path, "%s/fp16", dir);
    snprintf(old, sizeof old, "%s/old", dir);
    snprintf(bad, sizeof bad, "%s/nan", dir);
    vkt_trainer *a = make(n, VKT_PRECISION_FP16, SCALE_2_40, 0, 1);
    if (!a)
        return;
    outcome w = {0};
    train(n, a, 0, 15, 0, NULL, &w);
    TH_OK(NULL, vkt_trainer_save(a, path));
    uint64_t skipped = 0;
    float scale = 0;
    /* fp32 without skipping: ignored */
    vkt_trainer *u = make(n, VKT_PRECISION_FP32, 0, 0, 1);
    if (u && TH_OK(NULL, vkt_trainer_restore(u, path))) {
        vkt_trainer_skipped(u, &skipped, &scale);
        TH_CHECK(skipped == 0 && scale == 1.0f, "fp16's file in fp32: ignored (%llu, %g)",
                 (unsigned long long)skipped, (double)scale);
    }
    vkt_trainer_destroy(u);
    /* fp32 skipping: the count goes on, no scale */
    u = make(n, VKT_PRECISION_FP32, 0, 5, 1);
    if (u && TH_OK(NULL, vkt_trainer_restore(u, path))) {
        vkt_trainer_skipped(u, &skipped, &scale);
        TH_CHECK(skipped == w.skipped && scale == 1.0f,
                 "fp16's file in fp32 with skipping: %llu skipped (the file %llu), scale %g",
                 (unsigned long long)skipped, (unsigned long long)w.skipped, (double)scale);
    }
    vkt_trainer_destroy(u);
    /* a file without SCAL into the fp16 trainer whose scaler moved: afresh */
    TH_CHECK(w.skipped > 0 && rewrite(path, old, 1), "a file without SCAL (%llu skips before)",
             (unsigned long long)w.skipped);
    if (TH_OK(NULL, vkt_trainer_restore(a, old))) {
        vkt_trainer_skipped(a, &skipped, &scale);
        TH_CHECK(skipped == 0 && scale == SCALE_2_40 && vkt_trainer_step_count(a) == 15,
                 "a file without SCAL in fp16: the scaler afresh (%llu skipped, scale %g)",
                 (unsigned long long)skipped, (double)scale);
    }
    /* an fp32 run's file (no skipping: no SCAL) resumed in fp16 with the default start */
    u = make(n, VKT_PRECISION_FP32, 0, 0, 1);
    if (u) {
        outcome o = {0};
        train(n, u, 0, 3, 0, NULL, &o);
        free(o.params);
        TH_OK(NULL, vkt_trainer_save(u, old));
        vkt_trainer_destroy(u);
    }
    u = make(n, VKT_PRECISION_FP16, 0, 0, 1);
    if (u && TH_OK(NULL, vkt_trainer_restore(u, old))) {
        vkt_trainer_skipped(u, &skipped, &scale);
        TH_CHECK(skipped == 0 && scale == 65536.0f, "fp32's file in fp16: %llu skipped, scale %g",
                 (unsigned long long)skipped, (double)scale);
    }
    vkt_trainer_destroy(u);
    /* a NaN scale: refused as corrupt, the trainer unchanged */
    if (TH_CHECK(rewrite(path, bad, 0), "a file with a NaN scale")) {
        vkt_status st = vkt_trainer_restore(a, bad);
        TH_CHECK(st == VKT_ERROR_FORMAT && strstr(vkt_trainer_errmsg(a), "SCAL"),
                 "a NaN scale is corrupt (%s): %s", vkt_status_name(st), vkt_trainer_errmsg(a));
    }
    free(w.params);
    vkt_trainer_destroy(a);
}

/* Async replicas across ranks (the parameter server, a replica per rank): each has its
 * own scaler; every rank reports the world's (its own replica's, the others' as of their
 * last push: the skips summed, the smallest scale). Saved mid-skipping by the chief and
 * restored on every rank, every replica goes on from the file's scale: the next step
 * skips on each (the sum grows by the ranks), as the run that went on, with the same
 * parameters (still the initial ones). */
static void async_across(scaler_mlp *n, const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/async", dir);
    uint32_t R = vkt_world_size(world);
    vkt_trainer *t[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        vkt_trainer_options o = {.batch = 16, .precision = VKT_PRECISION_FP16,
                                 .loss_scale = i ? 0 : SCALE_2_40, .loss_scale_interval = 4,
                                 .mode = VKT_PARALLEL_ASYNC, .world = world, .stages = 1};
        o.optimizer.kind = VKT_OPTIMIZER_ADAM;
        o.optimizer.lr = 0.01f;
        TH_CHECK(vkt_trainer_create(th_instance, n->g, n->loss, &o, &t[i]) == VKT_OK,
                 "async across %u ranks in fp16: %s", R, vkt_last_error());
    }
    vkt_dataset *ds = NULL;
    if (!t[0] || !t[1] || !TH_OK(NULL, vkt_dataset_create(16, 12, 5, n->X, n->Y, &ds)))
        goto out;
    uint64_t sa = 0, sb = 0, count = vkt_trainer_param_count(t[0]);
    float ca = 0, cb = 0;
    TH_OK(NULL, vkt_trainer_fit(t[0], ds, n->x, n->y, 6, 1, NULL, NULL));
    vkt_trainer_skipped(t[0], &sa, &ca);
    TH_CHECK(sa == 6 * R && ca == SCALE_2_40 / 64, "async across %u ranks: every replica's 6 "
             "updates skipped, rank %u reports %llu in all, scale %g", R, rank_,
             (unsigned long long)sa, (double)ca);
    TH_OK(NULL, vkt_trainer_save(t[0], path));
    const char *from = rank_ == 0 ? path : "/nonexistent/elsewhere.vkt";
    if (TH_OK(NULL, vkt_trainer_restore(t[1], from))) {
        vkt_trainer_skipped(t[1], &sb, &cb);
        TH_CHECK(sb == sa && cb == ca, "restored on rank %u: %llu skips, scale %g", rank_,
                 (unsigned long long)sb, (double)cb);
        TH_OK(NULL, vkt_trainer_fit(t[0], ds, n->x, n->y, 1, 1, NULL, NULL));
        TH_OK(NULL, vkt_trainer_fit(t[1], ds, n->x, n->y, 1, 1, NULL, NULL));
        vkt_trainer_skipped(t[0], &sa, &ca);
        vkt_trainer_skipped(t[1], &sb, &cb);
        float *pa = th_alloc_floats(count), *pb = th_alloc_floats(count);
        vkt_trainer_read_params(t[0], pa, count);
        vkt_trainer_read_params(t[1], pb, count);
        TH_CHECK(sb == 7 * R && cb == SCALE_2_40 / 128 && sa == sb && ca == cb &&
                     !memcmp(pa, pb, count * sizeof *pa),
                 "resumed on rank %u, every replica from the file's scale: %llu skips, scale "
                 "%g; the run that went on: %llu, %g; parameters %s", rank_,
                 (unsigned long long)sb, (double)cb, (unsigned long long)sa, (double)ca,
                 memcmp(pa, pb, count * 4) ? "differ" : "equal");
        if (rank_ == 0)
            printf("async across %u ranks: saved at 6 steps (%u skips, scale 2^34), resumed: "
                   "%llu skips, scale %g, as the run that went on\n", R, 6 * R,
                   (unsigned long long)sb, (double)cb);
        free(pa);
        free(pb);
    }
out:
    vkt_dataset_destroy(ds);
    vkt_trainer_destroy(t[0]);
    vkt_trainer_destroy(t[1]);
}

int main(int argc, char **argv)
{
    int mpi = argc > 1 && strcmp(argv[1], "--mpi") == 0;
    if (mpi) {
        vkt_world_options wo = {.timeout_seconds = 120, .require_launcher = 1};
        if (vkt_world_init(&argc, &argv, &wo, &world) != VKT_OK) {
            fprintf(stderr, "test_scaler_checkpoint: %s\n", vkt_last_error());
            return 1;
        }
        rank_ = vkt_world_rank(world);
    }
    th_init("test_scaler_checkpoint");
    scaler_mlp n = {0};
    scaler_mlp_make(&n); /* th_init seeds alike on every rank: the same batch */
    char dir[512];
    th_temp_dir("scaler_ckpt", dir, sizeof dir);
    if (world) { /* the chief's folder is where every rank saves (the chief writes) */
        if (rank_ != 0)
            th_remove_tree(dir);
        vkt_world_broadcast(world, dir, sizeof dir);
    }
    resumes_alike(&n, 1, dir);
    stages_ = 2; /* across 2 ranks: a stage each, the verdict in the tail */
    if (!world || vkt_world_size(world) == 2)
        resumes_alike(&n, 1, dir);
    stages_ = 0;
    if (world)
        async_across(&n, dir);
    if (!world) {
        resumes_alike(&n, 2, dir);
        across_precisions(&n, dir);
    }
    int rc = th_finish();
    if (world) {
        double bad = rc != 0;
        vkt_world_sum(world, &bad, 1); /* every rank done before the folder goes; one rank's
                                          failure fails every rank's exit code */
        rc = bad > 0;
    }
    if (rank_ == 0)
        th_remove_tree(dir);
    vkt_graph_destroy(n.g);
    if (world)
        vkt_world_finalize(world);
    return rc;
}
