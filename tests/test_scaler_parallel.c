/* fp16's dynamic loss scaling and the skipping of non-finite steps with pipeline stages
 * and with async replicas (README "Mixed precision"; one replica and sync replicas:
 * test_autocast.c, checkpoints: test_scaler_checkpoint.c). Overflows are forced: a start
 * scale of 2^40 (interval 4) makes the fp16 gradients overflow until the scale halved to
 * one that fits.
 *
 * Pipeline stages (2 stages, 2 micro-batches): the first step is skipped with every
 * parameter of both stages bit for bit unchanged; at every step both stages' parameters
 * change or neither does (they skip together) and the skip count grows by at most one a
 * step (counted once, not once per stage); the scale halves per skip and the run recovers
 * (the loss falls); the skips and scales step by step equal the unsplit one-replica run's
 * (the same verdicts: every overflow is the whole model's), and its parameters stay near
 * that run's; 2 data-parallel copies of the 2 stages (4 contexts, each voting at the
 * barrier) skip and recover as 1 copy with 2 micro-batches does (26 skips, the same
 * loss). A limit of 3 skips in a row stops the 4th with VKT_ERROR_DIVERGED; in fp32
 * with nonfinite_skips a step fed a NaN is skipped by every stage and the next applies,
 * and so is a step whose gradient is finite but whose squares pass fp32's range, as one
 * replica skips it (huge_step).
 *
 * Async replicas (2, one process): each replica has its own scaler and skips its own
 * update, which adds nothing to the master; vkt_trainer_skipped reports the replicas'
 * skips summed and the smallest scale; each skip halves its replica's scale, so the
 * summed count is at least what one replica needs (the first step's overflow is seen by
 * both), and the run recovers. The limit stops an async run with VKT_ERROR_DIVERGED. A
 * checkpoint keeps the summary (the sum, the smallest scale): every replica of the
 * resumed run starts from it (async_checkpoint). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "scaler_mlp.h"

#define SCALE_2_40 1099511627776.0f

typedef enum layout { ONE, PIPELINE, ASYNC } layout;
static const char *const layout_name[] = {"one replica", "2 stages", "2 async replicas"};

static uint32_t copies_ = 1; /* pipeline copies (data parallel) */

static vkt_trainer *make(scaler_mlp *n, layout l, vkt_precision p, float scale, uint32_t skips,
                         uint32_t micro)
{
    uint32_t two[2] = {0, 0};
    vkt_trainer_options o = {.batch = 16, .precision = p, .loss_scale = scale,
                             .loss_scale_interval = 4, .nonfinite_skips = skips,
                             .stages = 1 /* the placement unused */};
    uint32_t four[4] = {0, 0, 0, 0};
    if (l == PIPELINE) {
        o.stages = 2;
        o.micro_batches = micro;
        if (copies_ == 2) { /* 2 copies of the 2 stages: contexts copy d's stage s */
            o.devices = four;
            o.device_count = 4;
        }
    } else if (l == ASYNC) {
        o.mode = VKT_PARALLEL_ASYNC;
        o.devices = two;
        o.device_count = 2;
    }
    o.optimizer.kind = VKT_OPTIMIZER_ADAM;
    o.optimizer.lr = 0.01f;
    vkt_trainer *t = NULL;
    TH_CHECK(vkt_trainer_create(th_instance, n->g, n->loss, &o, &t) == VKT_OK,
             "trainer (%s, %s): %s", layout_name[l], vkt_precision_name(p), vkt_last_error());
    return t;
}

static int changed(vkt_trainer *t, const vkt_tensor *w, float *was, uint64_t count)
{
    float *now = th_alloc_floats(count);
    vkt_trainer_read(t, w, now, count);
    int c = memcmp(now, was, count * sizeof *now) != 0;
    memcpy(was, now, count * sizeof *now);
    free(now);
    return c;
}

enum { W1 = 12 * 20, W2 = 20 * 5, RUN = 50 };

typedef struct trace {
    uint64_t skipped[RUN];
    float scale[RUN], loss[RUN];
    float *params; /* [RUN][count]: after each step */
    float *init;   /* before the first */
} trace;

/* RUN steps on the batch, the skip count and scale after each; with `together`, that
 * both stages' parameters changed or neither at each step. */
static int run(scaler_mlp *n, vkt_trainer *t, trace *tr, int together)
{
    vkt_feed f[2] = {{n->x, n->X}, {n->y, n->Y}};
    float w1[W1], w2[W2];
    vkt_trainer_read(t, n->w1, w1, W1);
    vkt_trainer_read(t, n->w2, w2, W2);
    int apart = 0, ok = 1;
    uint64_t count = vkt_trainer_param_count(t);
    tr->params = th_alloc_floats(RUN * count);
    tr->init = th_alloc_floats(count);
    vkt_trainer_read_params(t, tr->init, count);
    for (int s = 0; s < RUN && ok; s++) {
        ok = TH_OK(NULL, vkt_trainer_step(t, f, 2, &tr->loss[s]));
        vkt_trainer_read_params(t, tr->params + s * count, count);
        vkt_trainer_skipped(t, &tr->skipped[s], &tr->scale[s]);
        int c1 = changed(t, n->w1, w1, W1), c2 = changed(t, n->w2, w2, W2);
        uint64_t before = s ? tr->skipped[s - 1] : 0;
        int skip = tr->skipped[s] == before + 1;
        apart += c1 != c2 || skip == c1 || tr->skipped[s] > before + 1;
    }
    if (together)
        TH_CHECK(!apart, "at every step both stages applied or both skipped, counted once: "
                 "%d steps otherwise", apart);
    return ok;
}

/* 2 stages with `micro` micro-batches against one replica: with one micro-batch the
 * same arithmetic (bit for bit). With two, each micro-batch's backward is of its own mean
 * loss (8 rows), its fp16 gradient up to twice the whole batch's before the host sums
 * them with weight 1/2: it overflows at a scale the whole batch's fits, so the schedules
 * agree through one replica's first skipping and may part by a halving (measured: 21
 * skips in a row against 20, 26 in all against 25); compared up to the first step whose
 * skip or scale differs. */
static void pipeline(scaler_mlp *n, uint32_t micro)
{
    vkt_trainer *p = make(n, PIPELINE, VKT_PRECISION_FP16, SCALE_2_40, 0, micro);
    vkt_trainer *u = make(n, ONE, VKT_PRECISION_FP16, SCALE_2_40, 0, 1);
    if (!p || !u) {
        vkt_trainer_destroy(p);
        vkt_trainer_destroy(u);
        return;
    }
    vkt_pipeline_stage_stats s0, s1;
    TH_CHECK(vkt_trainer_stage_stats_get(p, 0, &s0) == VKT_OK &&
                 vkt_trainer_stage_stats_get(p, 1, &s1) == VKT_OK && s0.param_bytes &&
                 s1.param_bytes, "both stages hold parameters (%llu, %llu bytes)",
             (unsigned long long)s0.param_bytes, (unsigned long long)s1.param_bytes);
    trace a = {0}, b = {0};
    if (run(n, p, &a, 1) && run(n, u, &b, 0)) {
        TH_CHECK(a.skipped[0] == 1 && a.scale[0] == SCALE_2_40 / 2 &&
                     !memcmp(a.params, a.init, vkt_trainer_param_count(p) * 4),
                 "%u micro-batch(es): the first step skipped (%llu), the scale halved (%g), "
                 "the parameters unchanged", micro, (unsigned long long)a.skipped[0],
                 (double)a.scale[0]);
        uint64_t fit = 0;
        while (fit < RUN && a.skipped[fit] == fit + 1)
            fit++;
        TH_CHECK(fit >= 10 && fit < 32 && a.loss[RUN - 1] < 0.5f * a.loss[fit],
                 "pipeline: %llu skips in a row to scale %g, then it learns: loss %.4f -> %.4f",
                 (unsigned long long)fit, (double)a.scale[fit - 1], a.loss[fit],
                 a.loss[RUN - 1]);
        uint64_t fit1 = 0; /* one replica's */
        while (fit1 < RUN && b.skipped[fit1] == fit1 + 1)
            fit1++;
        int same = 0;
        while (same < RUN && a.skipped[same] == b.skipped[same] && a.scale[same] == b.scale[same])
            same++;
        uint64_t count = vkt_trainer_param_count(p);
        const float *pa = a.params + (same - 1) * count, *pb = b.params + (same - 1) * count;
        double worst = 0;
        for (uint64_t i = 0; i < count; i++) {
            double d = fabs((double)pa[i] - pb[i]) / (1e-3 + fabs(pb[i]));
            worst = d > worst ? d : worst;
        }
        if (micro == 1 && copies_ == 1)
            TH_CHECK(same == RUN && worst == 0, "1 micro-batch: the skips, scales and "
                     "parameters equal one replica's at every step (first difference at step "
                     "%d; at step %d parameters within %.2e)", same + 1, same, worst);
        else
            TH_CHECK(same >= (int)fit1 && worst < 1e-2 &&
                         a.skipped[RUN - 1] <= b.skipped[RUN - 1] + 2,
                     "%u copies x %u micro-batches: the skips and scales equal one replica's "
                     "through its %llu skips (to step %d), the parameters there within %.2e "
                     "(relative); %llu skips in all against %llu", copies_, micro,
                     (unsigned long long)fit1, same,
                     worst,
                     (unsigned long long)a.skipped[RUN - 1],
                     (unsigned long long)b.skipped[RUN - 1]);
        printf("%u cop%s of 2 stages x %u micro-batch(es) from 2^40: %llu skipped (one replica "
               "%llu), scale %g (%g), loss %.4f -> %.4f; the same verdicts as one replica to step "
               "%d, the parameters there within %.2e\n", copies_, copies_ > 1 ? "ies" : "y", micro,
               (unsigned long long)a.skipped[RUN - 1],
               (unsigned long long)b.skipped[RUN - 1], (double)a.scale[RUN - 1],
               (double)b.scale[RUN - 1], a.loss[0], a.loss[RUN - 1], same, worst);
    }
    free(a.params);
    free(b.params);
    free(a.init);
    free(b.init);
    vkt_trainer_destroy(p);
    vkt_trainer_destroy(u);
}

/* The 4th skip in a row with a limit of 3 stops the run. */
static void limit(scaler_mlp *n, layout l)
{
    vkt_trainer *t = make(n, l, VKT_PRECISION_FP16, SCALE_2_40, 3, 2);
    if (!t)
        return;
    vkt_feed f[2] = {{n->x, n->X}, {n->y, n->Y}};
    vkt_status st = VKT_OK;
    int k = 0;
    if (l == ASYNC) { /* each replica counts its own: stops within the first steps */
        vkt_dataset *ds = NULL;
        (void)f;
        if (!TH_OK(NULL, vkt_dataset_create(16, 12, 5, n->X, n->Y, &ds)))
            goto out;
        st = vkt_trainer_fit(t, ds, n->x, n->y, 20, 1, NULL, NULL);
        vkt_dataset_destroy(ds);
        k = 4; /* a replica's 4th step: the message says so */
    } else
        for (; k < 6 && st == VKT_OK; k++)
            st = vkt_trainer_step(t, f, 2, NULL);
    TH_CHECK(st == VKT_ERROR_DIVERGED && k == 4 && strstr(vkt_trainer_errmsg(t), "4 steps in a row")
                 && strstr(vkt_trainer_errmsg(t), "non-finite gradients"),
             "%s: the 4th skip in a row stops it (step %d, %s): %s", layout_name[l], k,
             vkt_status_name(st), vkt_trainer_errmsg(t));
out:
    vkt_trainer_destroy(t);
}

/* fp32 with nonfinite_skips: a NaN step skipped by every stage, the next applies. */
static void nan_step(scaler_mlp *n)
{
    vkt_trainer *t = make(n, PIPELINE, VKT_PRECISION_FP32, 0, 2, 2);
    if (t)
        scaler_mlp_nan_step(t, n, "pipeline");
    vkt_trainer_destroy(t);
}

/* fp32 with nonfinite_skips: a step whose gradient is finite but whose squares pass
 * fp32's range (an input of 1e25: dW1 ~ 1e25) is skipped by one replica (its guarded
 * optimizer sums the squares, optim_update.comp), so by the pipeline's stages too: the
 * same count, every parameter unchanged (else Adam's second moment holds an infinity
 * from then on); and the next step applies. */
static void huge_step(scaler_mlp *n)
{
    float Xbig[16 * 12];
    memcpy(Xbig, n->X, sizeof Xbig);
    Xbig[7] = 1e25f;
    vkt_feed f[2] = {{n->x, n->X}, {n->y, n->Y}}, fbig[2] = {{n->x, Xbig}, {n->y, n->Y}};
    for (int l = ONE; l <= PIPELINE; l++) {
        vkt_trainer *t = make(n, (layout)l, VKT_PRECISION_FP32, 0, 2, 2);
        if (!t)
            continue;
        uint64_t count = vkt_trainer_param_count(t), skipped = 0;
        float *before = th_alloc_floats(count), *after = th_alloc_floats(count), scale = 0;
        TH_OK(NULL, vkt_trainer_step(t, f, 2, NULL));
        TH_OK(NULL, vkt_trainer_read_params(t, before, count));
        TH_OK(NULL, vkt_trainer_step(t, fbig, 2, NULL));
        TH_OK(NULL, vkt_trainer_read_params(t, after, count));
        vkt_trainer_skipped(t, &skipped, &scale);
        TH_CHECK(skipped == 1 && !memcmp(before, after, count * sizeof *after),
                 "%s fp32: the step whose gradient's squares overflow fp32 skipped (%llu "
                 "skipped), the parameters unchanged", layout_name[l],
                 (unsigned long long)skipped);
        TH_OK(NULL, vkt_trainer_step(t, f, 2, NULL));
        TH_OK(NULL, vkt_trainer_read_params(t, after, count));
        int moved = memcmp(before, after, count * sizeof *after) != 0, finite = 1;
        for (uint64_t i = 0; i < count; i++)
            finite &= isfinite(after[i]) != 0;
        TH_CHECK(moved && finite, "%s: and the next one applies, every parameter finite",
                 layout_name[l]);
        free(before);
        free(after);
        vkt_trainer_destroy(t);
    }
}

static void async(scaler_mlp *n)
{
    vkt_trainer *t = make(n, ASYNC, VKT_PRECISION_FP16, SCALE_2_40, 0, 1);
    vkt_trainer *one = make(n, ONE, VKT_PRECISION_FP16, SCALE_2_40, 0, 1);
    vkt_dataset *ds = NULL;
    if (!t || !one || !TH_OK(NULL, vkt_dataset_create(16, 12, 5, n->X, n->Y, &ds)))
        goto out;
    uint64_t count = vkt_trainer_param_count(t), skipped = 0, alone = 0;
    float *before = th_alloc_floats(count), *after = th_alloc_floats(count), scale = 0;
    float scale1 = 0;
    TH_OK(NULL, vkt_trainer_read_params(t, before, count));
    TH_OK(NULL, vkt_trainer_fit(t, ds, n->x, n->y, 1, 1, NULL, NULL));
    TH_OK(NULL, vkt_trainer_read_params(t, after, count));
    vkt_trainer_skipped(t, &skipped, &scale);
    TH_CHECK(skipped == 2 && scale == SCALE_2_40 / 2 && !memcmp(before, after, count * 4),
             "async: both replicas' first updates skipped (%llu in all), the master unchanged, "
             "scale %g", (unsigned long long)skipped, (double)scale);
    TH_OK(NULL, vkt_trainer_fit(t, ds, n->x, n->y, 59, 1, NULL, NULL));
    vkt_trainer_skipped(t, &skipped, &scale);
    /* one replica alone on the same batch: how many halvings fit needs */
    vkt_feed f[2] = {{n->x, n->X}, {n->y, n->Y}};
    float first = 0, loss = 0;
    for (int s = 0; s < 60; s++)
        TH_OK(NULL, vkt_trainer_step(one, f, 2, s ? &loss : &first));
    vkt_trainer_skipped(one, &alone, &scale1);
    vkt_eval_result ev = {0};
    TH_OK(NULL, vkt_trainer_evaluate(t, ds, n->x, n->z, &ev));
    float l2 = ev.loss;
    TH_CHECK(skipped >= alone && skipped <= 2 * alone + 2 * 15 && scale >= 1024.0f &&
                 l2 < 0.5f * first,
             "async recovers: %llu skips summed over 2 replicas (one replica alone %llu), the "
             "smallest scale %g; loss %.4f (one replica's first %.4f)",
             (unsigned long long)skipped, (unsigned long long)alone, (double)scale, l2, first);
    printf("2 async replicas from 2^40: %llu skipped in all over 60 steps each (one replica "
           "alone: %llu), smallest scale %g; loss %.4f\n", (unsigned long long)skipped,
           (unsigned long long)alone, (double)scale, l2);
    free(before);
    free(after);
out:
    vkt_dataset_destroy(ds);
    vkt_trainer_destroy(t);
    vkt_trainer_destroy(one);
}

/* Async replicas through a checkpoint: saved in the middle of the skipping, the file
 * holds the replicas' skips summed and the smallest scale; a fresh async trainer (default
 * start scale) restored reports them, and every replica goes on from that scale: the next
 * step skips on both (2 more, the scale halved again), as the run that went on, with the
 * same parameters (still the initial ones: nothing applied yet). The saved scale, 2^34,
 * is above where growth stops (2^32): a run started higher saves and resumes too. */
static void async_checkpoint(scaler_mlp *n)
{
    char dir[512], path[600];
    th_temp_dir("scaler_async", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/ckpt", dir);
    vkt_trainer *a = make(n, ASYNC, VKT_PRECISION_FP16, SCALE_2_40, 0, 1);
    vkt_trainer *b = make(n, ASYNC, VKT_PRECISION_FP16, 0, 0, 1);
    vkt_dataset *ds = NULL;
    if (!a || !b || !TH_OK(NULL, vkt_dataset_create(16, 12, 5, n->X, n->Y, &ds)))
        goto out;
    uint64_t sa = 0, sb = 0, count = vkt_trainer_param_count(a);
    float ca = 0, cb = 0;
    TH_OK(NULL, vkt_trainer_fit(a, ds, n->x, n->y, 6, 1, NULL, NULL)); /* to 2^34 */
    TH_OK(NULL, vkt_trainer_save(a, path));
    vkt_trainer_skipped(a, &sa, &ca);
    if (TH_OK(NULL, vkt_trainer_restore(b, path))) {
        vkt_trainer_skipped(b, &sb, &cb);
        TH_CHECK(sa == 12 && ca == SCALE_2_40 / 64 && sb == sa && cb == ca,
                 "async, saved after 6 steps of 2 replicas: %llu skips, scale %g; restored: "
                 "%llu, %g", (unsigned long long)sa, (double)ca, (unsigned long long)sb,
                 (double)cb);
        TH_OK(NULL, vkt_trainer_fit(a, ds, n->x, n->y, 1, 1, NULL, NULL));
        TH_OK(NULL, vkt_trainer_fit(b, ds, n->x, n->y, 1, 1, NULL, NULL));
        vkt_trainer_skipped(a, &sa, &ca);
        vkt_trainer_skipped(b, &sb, &cb);
        float *pa = th_alloc_floats(count), *pb = th_alloc_floats(count);
        vkt_trainer_read_params(a, pa, count);
        vkt_trainer_read_params(b, pb, count);
        TH_CHECK(sb == 14 && cb == SCALE_2_40 / 128 && sa == sb && ca == cb &&
                     !memcmp(pa, pb, count * sizeof *pa),
                 "resumed, each replica from the file's scale: %llu skips, scale %g; the run "
                 "that went on: %llu, %g; parameters %s", (unsigned long long)sb, (double)cb,
                 (unsigned long long)sa, (double)ca,
                 memcmp(pa, pb, count * 4) ? "differ" : "equal");
        free(pa);
        free(pb);
    }
out:
    vkt_dataset_destroy(ds);
    vkt_trainer_destroy(a);
    vkt_trainer_destroy(b);
    th_remove_tree(dir);
}

int main(void)
{
    th_init("test_scaler_parallel");
    scaler_mlp n = {0};
    scaler_mlp_make(&n);
    pipeline(&n, 1);
    pipeline(&n, 2);
    copies_ = 2; /* 2 x 2 contexts: each votes at the barrier */
    pipeline(&n, 1);
    copies_ = 1;
    limit(&n, PIPELINE);
    nan_step(&n);
    huge_step(&n);
    async(&n);
    limit(&n, ASYNC);
    async_checkpoint(&n);
    vkt_graph_destroy(n.g);
    return th_finish();
}
