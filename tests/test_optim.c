/* Optimizers and schedules: every kind against the CPU reference over several steps on
 * awkward sizes and unaligned views with guards; momentum, Nesterov, weight decay,
 * clipping (active and not), gradient scale; schedules against hand-computed values, on
 * the host and on the device; hyperparameter changes between replays of one recorded
 * stream; ranges split past maxStorageBufferRange; state round trip; convergence on a
 * quadratic; error messages. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/kernel_util.h"
#include "optim/optim.h"

#define STEPS 5

static vkt_stream_stats stats(vkt_stream *s)
{
    vkt_stream_stats st = {0};
    vkt_stream_stats_get(s, &st);
    return st;
}

static int same_stats(vkt_stream_stats a, vkt_stream_stats b)
{
    return a.dispatches == b.dispatches && a.barriers == b.barriers && a.copies == b.copies;
}

static vkt_optimizer_options resolved(const vkt_optimizer_options *o)
{
    vkt_optimizer_options r;
    memset(&r, 0, sizeof r);
    TH_CHECK(optim_resolve(NULL, "test", o, &r) == VKT_OK, "options resolve: %s",
             vkt_last_error());
    return r;
}

/* Device and reference side by side: params, grads, moments. */
typedef struct pair {
    vkt_context *ctx;
    uint64_t n;
    vkt_optimizer *opt;
    vkt_optimizer_options o; /* resolved, what the reference uses */
    th_buf p, g;
    float *hp, *hg, *rp, *rm, *rv, *got, *state;
    vkt_stream *s;
} pair;

/* A guarded tensor whose first element sits at `phase` mod 4 elements (0: 16-byte
 * aligned, the vec4 path when params, grads and moments agree), or at a random offset
 * (phase < 0). */
static th_buf buf_at(vkt_context *ctx, uint64_t n, int phase)
{
    if (phase < 0)
        return th_buf_create(ctx, n);
    th_buf b = th_buf_create(ctx, n + 4); /* the spare elements keep their sentinels */
    while (b.offset % 4 != (uint64_t)phase)
        b.offset++;
    b.n = n;
    return b;
}

static int pair_init(pair *x, vkt_context *ctx, const vkt_optimizer_options *o, uint64_t n,
                     int phase)
{
    memset(x, 0, sizeof *x);
    x->ctx = ctx;
    x->n = n;
    if (!TH_OK(ctx, vkt_optimizer_create(ctx, o, n, &x->opt)))
        return 0;
    x->o = resolved(o);
    x->p = buf_at(ctx, n, phase);
    x->g = buf_at(ctx, n, phase);
    x->hp = th_alloc_floats(n);
    x->hg = th_alloc_floats(n);
    x->rp = th_alloc_floats(n);
    x->rm = th_alloc_floats(n);
    x->rv = th_alloc_floats(n);
    x->got = th_alloc_floats(n);
    x->state = malloc(vkt_optimizer_state_size(x->opt));
    th_fill_uniform(x->hp, n, -1, 1);
    memcpy(x->rp, x->hp, n * 4);
    memset(x->rm, 0, n * 4);
    memset(x->rv, 0, n * 4);
    th_buf_write(&x->p, x->hp);
    x->s = th_stream(ctx, 0);
    return TH_OK(ctx, vkt_optimizer_record(x->opt, x->s, th_view(&x->p), th_view(&x->g)));
}

static void pair_free(pair *x)
{
    vkt_stream_destroy(x->s);
    vkt_optimizer_destroy(x->opt);
    th_buf_destroy(&x->p);
    th_buf_destroy(&x->g);
    free(x->hp);
    free(x->hg);
    free(x->rp);
    free(x->rm);
    free(x->rv);
    free(x->got);
    free(x->state);
}

static float *ref_m(pair *x)
{
    return optim_moments(&x->o) ? x->rm : NULL;
}

static float *ref_v(pair *x)
{
    return x->o.kind == VKT_OPTIMIZER_SGD ? NULL : x->rv;
}

/* One step on both sides with fresh random gradients. */
static void pair_step(pair *x, uint64_t step)
{
    th_fill_uniform(x->hg, x->n, -1, 1);
    th_buf_write(&x->g, x->hg);
    TH_OK(x->ctx, vkt_optimizer_set_step(x->opt, step));
    TH_OK(x->ctx, vkt_stream_run(x->s));
    optim_ref_step(&x->o, step, x->rp, x->hg, ref_m(x), ref_v(x), x->n);
}

/* Parameters and moments against the reference. Tolerances: the device computes in
 * float, the reference in double; a few ulps of |p| ~ 1 plus 1e-5 of an update; the
 * first moment and velocity are sums that cancel, so a few ulps of their terms (~1). */
static int pair_compare(pair *x, const char *what)
{
    char name[256];
    th_buf_read(&x->p, x->got);
    snprintf(name, sizeof name, "%s: params", what);
    int ok = th_compare(name, x->got, x->rp, x->n, 2e-6f, 1e-6f);
    uint32_t nm = optim_moments(&x->o);
    if (nm) {
        uint64_t bytes = vkt_optimizer_state_size(x->opt);
        if (TH_OK(x->ctx, vkt_optimizer_read_state(x->opt, x->state, bytes))) {
            const float *dm = (const float *)((const char *)x->state + bytes - nm * x->n * 4);
            snprintf(name, sizeof name, "%s: %s", what,
                     x->o.kind == VKT_OPTIMIZER_SGD ? "velocity" : "first moment");
            ok &= th_compare(name, dm, x->rm, x->n, 1e-5f, 1e-6f);
            if (nm == 2) {
                snprintf(name, sizeof name, "%s: second moment", what);
                ok &= th_compare(name, dm + x->n, x->rv, x->n, 1e-5f, 1e-12f);
            }
        }
    }
    return ok;
}

/* ---- against the reference ---------------------------------------------------- */

typedef struct config {
    const char *name;
    vkt_optimizer_options o;
    float clip; /* clip_norm as a multiple of the expected norm sqrt(n/3); 0 = off */
} config;

static const config configs[] = {
    {"sgd", {.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f}, 0},
    {"sgd+wd", {.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f, .weight_decay = 0.1f}, 0},
    {"sgd+momentum", {.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f, .momentum = 0.9f}, 0},
    {"sgd+nesterov+wd",
     {.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f, .momentum = 0.8f, .nesterov = 1,
      .weight_decay = 0.01f}, 0},
    {"sgd+momentum+clip(active)+step schedule",
     {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .momentum = 0.9f,
      .schedule = VKT_SCHEDULE_STEP, .step_size = 2, .gamma = 0.5f}, 0.5f},
    {"sgd+clip(inactive)", {.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f}, 3.0f},
    {"adam", {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f}, 0},
    {"adam+wd+betas", {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f, .weight_decay = 0.1f,
                       .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f}, 0},
    {"adam+clip(active)+warmup-cosine",
     {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.02f, .schedule = VKT_SCHEDULE_WARMUP_COSINE,
      .warmup_steps = 2, .total_steps = 6, .min_lr = 0.001f}, 0.5f},
    {"adam+clip(inactive)+grad_scale",
     {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f, .grad_scale = 0.5f}, 3.0f},
    {"adamw", {.kind = VKT_OPTIMIZER_ADAMW, .lr = 0.01f, .weight_decay = 0.1f}, 0},
    {"adamw+clip(active)+grad_scale",
     {.kind = VKT_OPTIMIZER_ADAMW, .lr = 0.01f, .weight_decay = 0.05f, .grad_scale = 4.0f},
     0.5f},
};
#define N_CONFIGS (sizeof configs / sizeof configs[0])

static void run_config(vkt_context *ctx, const config *c, uint64_t n, int phase)
{
    vkt_optimizer_options o = c->o;
    if (c->clip > 0) /* grads are U(-1,1): |g| ~ sqrt(n/3), times grad_scale */
        o.clip_norm = c->clip * sqrtf((float)n / 3.0f) * (o.grad_scale > 0 ? o.grad_scale : 1);
    char what[256];
    snprintf(what, sizeof what, "%s, n=%llu, %s", c->name, (unsigned long long)n,
             phase < 0 ? "random offsets" : phase == 0 ? "aligned" : "offsets 1 mod 4");
    pair x;
    if (!pair_init(&x, ctx, &o, n, phase)) {
        pair_free(&x);
        return;
    }
    vkt_stream_stats before = stats(x.s);
    uint32_t want = c->clip > 0 ? 2 : 1;
    TH_CHECK(before.dispatches == want, "%s: %u dispatches recorded, want %u", what,
             before.dispatches, want);
    int ok = 1;
    for (uint64_t step = 0; step < STEPS && ok; step++) {
        pair_step(&x, step);
        char name[300];
        snprintf(name, sizeof name, "%s, step %llu", what, (unsigned long long)step);
        ok = pair_compare(&x, name);
    }
    TH_CHECK(same_stats(before, stats(x.s)), "%s: replays recorded nothing new", what);
    th_buf_guards_ok(&x.p, what);
    th_buf_guards_ok(&x.g, what);
    pair_free(&x);
}

static void test_reference(vkt_context *ctx)
{
    static const uint64_t sizes[] = {1, 2, 7, 61, 1021, 65537};
    /* Random offsets take the element-by-element path (unless the phases happen to
     * agree), aligned ones the vec4 path with a tail; plain SGD has no moments, so
     * params and grads at 1 mod 4 give vec4s with a head of 3. */
    for (size_t c = 0; c < N_CONFIGS; c++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            run_config(ctx, &configs[c], sizes[i], -1);
            run_config(ctx, &configs[c], sizes[i], 0);
        }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        run_config(ctx, &configs[0], sizes[i], 1);
        run_config(ctx, &configs[5], sizes[i], 1);
    }
    /* Over a million elements: every kind, clipping active (norm of 2^20 squares). */
    run_config(ctx, &configs[4], (1u << 20) + 3, 0);
    run_config(ctx, &configs[8], (1u << 20) + 3, -1);
    run_config(ctx, &configs[11], (1u << 20) + 3, 0);
}

/* ---- hyperparameters change between replays of one recording ------------------ */

static void test_replay_changes(vkt_context *ctx)
{
    enum { N = 4099 };
    /* SGD: lr, momentum, Nesterov, weight decay, clipping off and on again, scale. */
    vkt_optimizer_options o = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f, .momentum = 0.9f,
                               .clip_norm = 20.0f};
    pair x;
    if (pair_init(&x, ctx, &o, N, 0)) {
        vkt_stream_stats before = stats(x.s);
        for (uint64_t step = 0; step < 8; step++) {
            switch (step) {
            case 1: o.lr = 0.2f; break;
            case 2: o.momentum = 0.5f; o.nesterov = 1; break;
            case 3: o.weight_decay = 0.3f; o.nesterov = 0; break;
            case 4: o.clip_norm = 0.0f; break;          /* clipping off */
            case 5: o.clip_norm = 5.0f; break;          /* and on again */
            case 6: o.grad_scale = 0.25f; o.momentum = 0.0f; break;
            case 7: o.schedule = VKT_SCHEDULE_STEP; o.step_size = 3; o.gamma = 0.1f; break;
            }
            if (step)
                TH_OK(ctx, vkt_optimizer_set_options(x.opt, &o));
            x.o = resolved(&o);
            pair_step(&x, step);
            char name[64];
            snprintf(name, sizeof name, "sgd, options changed before step %llu",
                     (unsigned long long)step);
            pair_compare(&x, name);
        }
        TH_CHECK(same_stats(before, stats(x.s)), "sgd: changes needed no re-recording");
    }
    pair_free(&x);

    /* Adam: lr, betas, eps, weight decay, and a jump of the step (bias correction). */
    o = (vkt_optimizer_options){.kind = VKT_OPTIMIZER_ADAM, .lr = 0.01f};
    if (pair_init(&x, ctx, &o, N, -1)) {
        vkt_stream_stats before = stats(x.s);
        static const uint64_t steps[] = {0, 1, 2, 3, 100, 101};
        for (int i = 0; i < 6; i++) {
            switch (i) {
            case 1: o.lr = 0.03f; break;
            case 2: o.beta1 = 0.5f; o.beta2 = 0.9f; break;
            case 3: o.eps = 1e-3f; o.weight_decay = 0.2f; break;
            }
            if (i)
                TH_OK(ctx, vkt_optimizer_set_options(x.opt, &o));
            x.o = resolved(&o);
            pair_step(&x, steps[i]);
            char name[64];
            snprintf(name, sizeof name, "adam, change %d (step %llu)", i,
                     (unsigned long long)steps[i]);
            pair_compare(&x, name);
        }
        TH_CHECK(vkt_optimizer_step(x.opt) == 101, "the optimizer reports its step");
        TH_CHECK(same_stats(before, stats(x.s)), "adam: changes needed no re-recording");
    }
    pair_free(&x);
}

/* ---- schedules ------------------------------------------------------------------- */

static void check_lr(const vkt_optimizer_options *o, uint64_t step, double want,
                     const char *what)
{
    float got = vkt_schedule_lr(o, step);
    TH_CHECK(fabs(got - want) <= 1e-6 * fabs(want) + 1e-9, "%s, step %llu: lr %.9g, want %.9g",
             what, (unsigned long long)step, got, want);
}

static void test_schedules(vkt_context *ctx)
{
    const double pi = 3.14159265358979323846;
    vkt_optimizer_options c = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    check_lr(&c, 0, 0.1f, "constant");
    check_lr(&c, 1000000, 0.1f, "constant");
    vkt_optimizer_options d = {0};
    check_lr(&d, 7, 0.01f, "default SGD lr");
    d.kind = VKT_OPTIMIZER_ADAM;
    check_lr(&d, 7, 0.001f, "default Adam lr");
    check_lr(NULL, 0, 0.01f, "NULL options");

    vkt_optimizer_options s = {.lr = 1.0f, .schedule = VKT_SCHEDULE_STEP, .step_size = 3,
                               .gamma = 0.5f};
    static const struct { uint64_t step; double lr; } steps[] = {
        {0, 1}, {2, 1}, {3, 0.5}, {5, 0.5}, {6, 0.25}, {8, 0.25}, {9, 0.125}, {30, 1.0 / 1024}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        check_lr(&s, steps[i].step, steps[i].lr, "step decay");
    s.gamma = 0; /* default 0.1 */
    check_lr(&s, 3, 0.1, "step decay, default gamma");
    check_lr(&s, 6, 0.01, "step decay, default gamma");

    vkt_optimizer_options w = {.lr = 1.0f, .schedule = VKT_SCHEDULE_WARMUP_COSINE,
                               .warmup_steps = 10, .total_steps = 110, .min_lr = 0.1f};
    check_lr(&w, 0, 0.1, "warmup start");
    check_lr(&w, 4, 0.5, "warmup middle");
    check_lr(&w, 9, 1.0, "warmup end");
    check_lr(&w, 10, 1.0, "cosine start");
    check_lr(&w, 35, 0.1 + 0.45 * (1 + cos(pi / 4)), "cosine quarter");
    check_lr(&w, 60, 0.55, "mid-cosine");
    check_lr(&w, 85, 0.1 + 0.45 * (1 - cos(pi / 4)), "cosine three quarters");
    check_lr(&w, 109, 0.1 + 0.45 * (1 + cos(0.99 * pi)), "cosine last step");
    check_lr(&w, 110, 0.1, "cosine end");
    check_lr(&w, 5000, 0.1, "after the end");
    vkt_optimizer_options w0 = {.lr = 2.0f, .schedule = VKT_SCHEDULE_WARMUP_COSINE,
                                .total_steps = 100};
    check_lr(&w0, 0, 2.0, "cosine without warmup, start");
    check_lr(&w0, 50, 1.0, "cosine without warmup, middle");
    check_lr(&w0, 100, 0.0, "cosine without warmup, end");
    vkt_optimizer_options bad = {.lr = 1.0f, .schedule = VKT_SCHEDULE_STEP};
    TH_CHECK(isnan(vkt_schedule_lr(&bad, 0)), "invalid options give NaN");

    /* On the device: plain SGD with gradient 1 moves every parameter by -lr(step). */
    enum { N = 3, STEPS_W = 14 };
    vkt_optimizer_options o = {.lr = 0.5f, .schedule = VKT_SCHEDULE_WARMUP_COSINE,
                               .warmup_steps = 4, .total_steps = 12, .min_lr = 0.01f};
    vkt_optimizer *opt = NULL;
    th_buf p = th_buf_create(ctx, N), g = th_buf_create(ctx, N);
    float zeros[N] = {0, 0, 0}, ones[N] = {1, 1, 1}, got[N];
    th_buf_write(&p, zeros);
    th_buf_write(&g, ones);
    vkt_stream *st = th_stream(ctx, 0);
    if (TH_OK(ctx, vkt_optimizer_create(ctx, &o, N, &opt)) &&
        TH_OK(ctx, vkt_optimizer_record(opt, st, th_view(&p), th_view(&g)))) {
        double prev = 0;
        int ok = 1;
        for (uint64_t step = 0; step < STEPS_W && ok; step++) {
            double lr;
            if (step < 4)
                lr = 0.5 * (double)(step + 1) / 4;
            else if (step >= 12)
                lr = 0.01;
            else
                lr = 0.01 + 0.245 * (1 + cos(pi * (double)(step - 4) / 8));
            TH_OK(ctx, vkt_optimizer_set_step(opt, step));
            TH_OK(ctx, vkt_stream_run(st));
            th_buf_read(&p, got);
            double delta = prev - got[0];
            ok = TH_CHECK(fabs(delta - lr) < 2e-6, "device schedule, step %llu: moved %.7g, "
                          "want lr %.7g", (unsigned long long)step, delta, lr);
            prev = got[0];
        }
    }
    vkt_stream_destroy(st);
    vkt_optimizer_destroy(opt);
    th_buf_destroy(&p);
    th_buf_destroy(&g);
}

/* ---- ranges past maxStorageBufferRange --------------------------------------- */

/* A context whose reported limit is lowered to 64 KiB, so a modest n needs several
 * bindings; gpu_dispatch refuses any binding past the lowered limit, so this also
 * checks that no binding of the optimizer exceeds it. */
static void test_split(void)
{
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    ctx->props.limits.maxStorageBufferRange = 64 * 1024;
    ctx->info.max_storage_buffer_range = 64 * 1024;
    enum { N = 50021 };
    uint32_t chunks = (uint32_t)((N + ku_chunk_elements(ctx) - 1) /
                                 ku_chunk_elements(ctx));
    TH_CHECK(chunks == 4, "%d elements make 4 chunks (got %u)", N, chunks);
    const config *cs[] = {&configs[4], &configs[8], &configs[11], &configs[2]};
    for (int c = 0; c < 4; c++) {
        vkt_optimizer_options o = cs[c]->o;
        if (cs[c]->clip > 0)
            o.clip_norm = cs[c]->clip * sqrtf(N / 3.0f) * (o.grad_scale > 0 ? o.grad_scale : 1);
        pair x;
        if (pair_init(&x, ctx, &o, N, c % 2 ? -1 : 0)) {
            uint32_t want = (cs[c]->clip > 0 ? 2 : 1) * chunks;
            TH_CHECK(stats(x.s).dispatches == want, "split %s: %u dispatches, want %u",
                     cs[c]->name, stats(x.s).dispatches, want);
            int ok = 1;
            for (uint64_t step = 0; step < 3 && ok; step++) {
                pair_step(&x, step);
                char name[300];
                snprintf(name, sizeof name, "split %s, step %llu", cs[c]->name,
                         (unsigned long long)step);
                ok = pair_compare(&x, name);
            }
            th_buf_guards_ok(&x.p, "split params");
        }
        pair_free(&x);
    }
}

/* ---- state round trip ------------------------------------------------------------ */

static void test_state(vkt_context *ctx)
{
    enum { N = 1027 };
    const config *cs[] = {&configs[3], &configs[8], &configs[11]};
    for (int c = 0; c < 3; c++) {
        vkt_optimizer_options o = cs[c]->o;
        o.clip_norm = 5.0f;
        pair a;
        vkt_optimizer *b = NULL;
        th_buf bp = th_buf_create(ctx, N);
        vkt_stream *bs = th_stream(ctx, 0);
        float *pa = th_alloc_floats(N), *pb = th_alloc_floats(N);
        if (pair_init(&a, ctx, &o, N, 0)) {
            for (uint64_t step = 0; step < 3; step++)
                pair_step(&a, step);
            uint64_t bytes = vkt_optimizer_state_size(a.opt);
            void *blob = malloc(bytes), *blob2 = malloc(bytes);
            TH_OK(ctx, vkt_optimizer_read_state(a.opt, blob, bytes));
            /* A fresh optimizer takes the state, B's params a copy of A's. */
            TH_OK(ctx, vkt_optimizer_create(ctx, &o, N, &b));
            TH_OK(ctx, vkt_optimizer_write_state(b, blob, bytes));
            TH_CHECK(vkt_optimizer_step(b) == 2, "%s: the step comes with the state",
                     cs[c]->name);
            th_buf_read(&a.p, pa);
            th_buf_write(&bp, pa);
            TH_OK(ctx, vkt_optimizer_record(b, bs, th_view(&bp), th_view(&a.g)));
            int ok = 1;
            for (uint64_t step = 3; step < 6; step++) {
                pair_step(&a, step); /* new grads in a.g, A runs */
                TH_OK(ctx, vkt_optimizer_set_step(b, step));
                TH_OK(ctx, vkt_stream_run(bs));
                th_buf_read(&a.p, pa);
                th_buf_read(&bp, pb);
                ok &= memcmp(pa, pb, N * 4) == 0;
            }
            TH_CHECK(ok, "%s: an optimizer continued from the state is bitwise identical",
                     cs[c]->name);
            TH_OK(ctx, vkt_optimizer_read_state(a.opt, blob, bytes));
            TH_OK(ctx, vkt_optimizer_read_state(b, blob2, bytes));
            TH_CHECK(memcmp(blob, blob2, bytes) == 0, "%s: and so is its state", cs[c]->name);
            /* Errors: size, corrupt header, another optimizer's state. */
            TH_STATUS(ctx, vkt_optimizer_write_state(b, blob, bytes - 4), VKT_ERROR_SHAPE);
            TH_CHECK(strstr(vkt_context_errmsg(ctx), "vkt_optimizer_state_size") != NULL,
                     "size message: %s", vkt_context_errmsg(ctx));
            ((char *)blob)[0] ^= 0x55;
            TH_STATUS(ctx, vkt_optimizer_write_state(b, blob, bytes), VKT_ERROR_FORMAT);
            ((char *)blob)[0] ^= 0x55;
            vkt_optimizer *other = NULL;
            vkt_optimizer_options oo = {.kind = VKT_OPTIMIZER_ADAMW};
            if (o.kind == VKT_OPTIMIZER_ADAMW)
                oo.kind = VKT_OPTIMIZER_ADAM;
            TH_OK(ctx, vkt_optimizer_create(ctx, &oo, N, &other));
            TH_STATUS(ctx, vkt_optimizer_write_state(other, blob, bytes), VKT_ERROR_SHAPE);
            TH_CHECK(strstr(vkt_context_errmsg(ctx), "the state is of") != NULL,
                     "kind message: %s", vkt_context_errmsg(ctx));
            vkt_optimizer_destroy(other);
            free(blob);
            free(blob2);
        }
        vkt_optimizer_destroy(b);
        vkt_stream_destroy(bs);
        th_buf_destroy(&bp);
        free(pa);
        free(pb);
        pair_free(&a);
    }
}

/* ---- convergence on a quadratic --------------------------------------------------- */

/* Minimises sum((p - target)^2) with the gradient 2 (p - target) computed on the device
 * in the same recorded stream (sub, scale, update), replayed every step. */
static void converge(vkt_context *ctx, const char *name, const vkt_optimizer_options *o,
                     uint32_t steps, float shrink, float tol)
{
    enum { N = 1001 };
    th_buf p = th_buf_create(ctx, N), t = th_buf_create(ctx, N), g = th_buf_create(ctx, N);
    float *hp = th_alloc_floats(N), *ht = th_alloc_floats(N);
    th_fill_uniform(hp, N, -1, 1);
    th_fill_uniform(ht, N, -2, 2);
    th_buf_write(&p, hp);
    th_buf_write(&t, ht);
    vkt_shape shape = {1, {N}};
    vkt_stream *s = th_stream(ctx, 0);
    vkt_optimizer *opt = NULL;
    if (TH_OK(ctx, vkt_optimizer_create(ctx, o, N, &opt)) &&
        TH_OK(ctx, vkt_binary(s, VKT_BINARY_SUB, th_view(&p), &shape, th_view(&t), &shape,
                              th_view(&g))) &&
        TH_OK(ctx, vkt_unary(s, VKT_UNARY_SCALE, 2.0f, th_view(&g), th_view(&g), N)) &&
        TH_OK(ctx, vkt_optimizer_record(opt, s, th_view(&p), th_view(&g)))) {
        for (uint32_t step = 0; step < steps; step++) {
            TH_OK(ctx, vkt_optimizer_set_step(opt, step));
            TH_OK(ctx, vkt_stream_run(s));
        }
        th_buf_read(&p, hp);
        double err = 0;
        for (int i = 0; i < N; i++) {
            double e = fabs((double)hp[i] - shrink * (double)ht[i]);
            err = e > err ? e : err;
        }
        TH_CHECK(err < tol, "%s reaches the minimum in %u steps: max error %.3g (tolerance %g)",
                 name, steps, err, tol);
    }
    vkt_optimizer_destroy(opt);
    vkt_stream_destroy(s);
    th_buf_destroy(&p);
    th_buf_destroy(&t);
    th_buf_destroy(&g);
    free(hp);
    free(ht);
}

static void test_convergence(vkt_context *ctx)
{
    vkt_optimizer_options sgd = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    converge(ctx, "sgd", &sgd, 100, 1.0f, 1e-4f);
    vkt_optimizer_options mom = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.05f, .momentum = 0.9f};
    converge(ctx, "sgd+momentum", &mom, 250, 1.0f, 1e-3f);
    mom.nesterov = 1;
    converge(ctx, "sgd+nesterov", &mom, 250, 1.0f, 1e-3f);
    /* Coupled L2: the minimum of sum((p - t)^2) + wd/2 |p|^2 is p = 2t / (2 + wd). */
    vkt_optimizer_options wd = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f, .weight_decay = 0.5f};
    converge(ctx, "sgd+weight decay", &wd, 100, 2.0f / 2.5f, 1e-4f);
    vkt_optimizer_options adam = {.kind = VKT_OPTIMIZER_ADAM, .lr = 0.05f,
                                  .schedule = VKT_SCHEDULE_WARMUP_COSINE, .warmup_steps = 10,
                                  .total_steps = 300};
    converge(ctx, "adam+warmup-cosine", &adam, 300, 1.0f, 1e-2f);
    adam.kind = VKT_OPTIMIZER_ADAMW;
    adam.clip_norm = 1.0f;
    converge(ctx, "adamw+clipping", &adam, 300, 1.0f, 1e-2f);
}

/* ---- errors ------------------------------------------------------------------------ */

static int has(vkt_context *ctx, const char *text)
{
    return TH_CHECK(strstr(vkt_context_errmsg(ctx), text) != NULL,
                    "message \"%s\" mentions \"%s\"", vkt_context_errmsg(ctx), text);
}

static void bad_create(vkt_context *ctx, vkt_optimizer_options o, const char *text)
{
    vkt_optimizer *opt = (vkt_optimizer *)&o; /* must come back NULL */
    TH_STATUS(ctx, vkt_optimizer_create(ctx, &o, 10, &opt), VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(opt == NULL, "a failed create leaves NULL");
    has(ctx, text);
}

static void test_errors(vkt_context *ctx)
{
    vkt_optimizer *opt = NULL;
    TH_STATUS(NULL, vkt_optimizer_create(NULL, NULL, 10, &opt), VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(ctx, vkt_optimizer_create(ctx, NULL, 0, &opt), VKT_ERROR_INVALID_ARGUMENT);
    has(ctx, "n_params is 0");
    bad_create(ctx, (vkt_optimizer_options){.kind = (vkt_optimizer_kind)7}, "unknown optimizer");
    bad_create(ctx, (vkt_optimizer_options){.lr = -1}, "lr is -1");
    bad_create(ctx, (vkt_optimizer_options){.lr = NAN}, "lr is nan");
    bad_create(ctx, (vkt_optimizer_options){.momentum = 1.0f}, "momentum");
    bad_create(ctx, (vkt_optimizer_options){.nesterov = 1}, "nesterov needs momentum");
    bad_create(ctx, (vkt_optimizer_options){.kind = VKT_OPTIMIZER_ADAM, .momentum = 0.9f},
               "beta1");
    bad_create(ctx, (vkt_optimizer_options){.beta1 = 0.9f}, "Adam");
    bad_create(ctx, (vkt_optimizer_options){.kind = VKT_OPTIMIZER_ADAMW, .beta2 = 1.5f},
               "beta2 is 1.5");
    bad_create(ctx, (vkt_optimizer_options){.kind = VKT_OPTIMIZER_ADAM, .eps = -1}, "eps");
    bad_create(ctx, (vkt_optimizer_options){.weight_decay = -0.1f}, "weight_decay");
    bad_create(ctx, (vkt_optimizer_options){.clip_norm = -1}, "clip_norm");
    bad_create(ctx, (vkt_optimizer_options){.schedule = (vkt_schedule_kind)9},
               "unknown schedule");
    bad_create(ctx, (vkt_optimizer_options){.schedule = VKT_SCHEDULE_STEP}, "step_size");
    bad_create(ctx, (vkt_optimizer_options){.schedule = VKT_SCHEDULE_WARMUP_COSINE},
               "total_steps");
    bad_create(ctx, (vkt_optimizer_options){.schedule = VKT_SCHEDULE_WARMUP_COSINE,
                                            .warmup_steps = 20, .total_steps = 10},
               "warmup_steps (20) exceeds total_steps (10)");
    bad_create(ctx, (vkt_optimizer_options){.lr = 0.1f, .min_lr = 0.2f,
                                            .schedule = VKT_SCHEDULE_WARMUP_COSINE,
                                            .total_steps = 10}, "min_lr");

    enum { N = 100 };
    vkt_buffer *b = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, 3 * N * 4, VKT_MEMORY_DEVICE, &b));
    vkt_stream *s = th_stream(ctx, 0);
    vkt_optimizer_options o = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.1f};
    if (TH_OK(ctx, vkt_optimizer_create(ctx, &o, N, &opt))) {
        TH_STATUS(ctx, vkt_optimizer_record(opt, s, (vkt_view){b, 2 * N + 1},
                                            (vkt_view){b, 0}), VKT_ERROR_INVALID_ARGUMENT);
        has(ctx, "params: elements [201, 301) lie outside");
        TH_STATUS(ctx, vkt_optimizer_record(opt, s, (vkt_view){b, 0}, (vkt_view){NULL, 0}),
                  VKT_ERROR_INVALID_ARGUMENT);
        has(ctx, "grads");
        TH_STATUS(ctx, vkt_optimizer_record(opt, s, (vkt_view){b, 0}, (vkt_view){b, N - 1}),
                  VKT_ERROR_INVALID_ARGUMENT);
        has(ctx, "overlap");
        TH_STATUS(ctx, vkt_optimizer_record(opt, NULL, (vkt_view){b, 0}, (vkt_view){b, N}),
                  VKT_ERROR_INVALID_ARGUMENT);
        vkt_context *other = th_context(VKT_KERNELS_AUTO);
        vkt_stream *os = th_stream(other, 0);
        TH_STATUS(ctx, vkt_optimizer_record(opt, os, (vkt_view){b, 0}, (vkt_view){b, N}),
                  VKT_ERROR_INVALID_ARGUMENT);
        has(ctx, "another context");
        vkt_stream_destroy(os);
        TH_STATUS(ctx, vkt_optimizer_set_options(opt, &(vkt_optimizer_options){
                                                          .kind = VKT_OPTIMIZER_ADAM}),
                  VKT_ERROR_INVALID_ARGUMENT);
        has(ctx, "cannot become adam");
        TH_STATUS(ctx, vkt_optimizer_set_options(opt, &(vkt_optimizer_options){.momentum = 0.9f}),
                  VKT_ERROR_STATE);
        has(ctx, "without momentum");
        TH_STATUS(ctx, vkt_optimizer_set_options(opt, &(vkt_optimizer_options){.lr = -2}),
                  VKT_ERROR_INVALID_ARGUMENT);
        /* Clipping can be turned on before recording, not after a recording without. */
        TH_OK(ctx, vkt_optimizer_set_options(opt, &(vkt_optimizer_options){.clip_norm = 1}));
        TH_OK(ctx, vkt_optimizer_set_options(opt, &o));
        TH_OK(ctx, vkt_optimizer_record(opt, s, (vkt_view){b, 0}, (vkt_view){b, N}));
        TH_STATUS(ctx, vkt_optimizer_set_options(opt, &(vkt_optimizer_options){.clip_norm = 1}),
                  VKT_ERROR_STATE);
        has(ctx, "record the update again");
        vkt_optimizer_options got;
        TH_OK(ctx, vkt_optimizer_get_options(opt, &got));
        TH_CHECK(got.lr == 0.1f && got.grad_scale == 1.0f, "get_options has the defaults");
        TH_CHECK(vkt_optimizer_size(opt) == N, "size");
        TH_STATUS(ctx, vkt_optimizer_read_state(opt, NULL, vkt_optimizer_state_size(opt)),
                  VKT_ERROR_INVALID_ARGUMENT);
    }
    TH_CHECK(strcmp(vkt_optimizer_kind_name(VKT_OPTIMIZER_ADAMW), "adamw") == 0 &&
                 strcmp(vkt_optimizer_kind_name((vkt_optimizer_kind)9), "unknown") == 0 &&
                 strcmp(vkt_schedule_kind_name(VKT_SCHEDULE_WARMUP_COSINE),
                        "warmup_cosine") == 0,
             "kind names");
    vkt_optimizer_destroy(opt);
    vkt_optimizer_destroy(NULL);
    vkt_stream_destroy(s);
    vkt_buffer_destroy(b);
}

/* ---- timing (informational) ------------------------------------------------------- */

static void report_timing(vkt_context *ctx)
{
    vkt_device_info info;
    vkt_context_device_info(ctx, &info);
    if (!info.timestamps)
        return;
    enum { N = 235146 }; /* the 784-256-128-10 MLP */
    vkt_buffer *b = NULL;
    const uint64_t G = (N + 3) / 4 * 4; /* grads 16-byte aligned: the vec4 path */
    TH_OK(ctx, vkt_buffer_create(ctx, 2 * G * 4, VKT_MEMORY_DEVICE, &b));
    vkt_stream *s = th_stream(ctx, 1);
    vkt_optimizer *opt = NULL;
    vkt_optimizer_options o = {.kind = VKT_OPTIMIZER_ADAMW, .weight_decay = 0.01f,
                               .clip_norm = 1.0f};
    TH_OK(ctx, vkt_fill(s, (vkt_view){b, 0}, 2 * G, 0.01f));
    TH_OK(ctx, vkt_stream_run(s));
    TH_OK(ctx, vkt_stream_reset(s));
    if (TH_OK(ctx, vkt_optimizer_create(ctx, &o, N, &opt)) &&
        TH_OK(ctx, vkt_optimizer_record(opt, s, (vkt_view){b, 0}, (vkt_view){b, G}))) {
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < 5; r++) {
            TH_OK(ctx, vkt_stream_run(s));
            vkt_timing t[2];
            uint32_t n = 0;
            TH_OK(ctx, vkt_stream_timings(s, t, 2, &n));
            for (uint32_t i = 0; i < n && i < 2; i++)
                best[i] = t[i].microseconds < best[i] ? t[i].microseconds : best[i];
        }
        printf("AdamW with clipping over %d parameters: norm pass %.0f us, update %.0f us\n",
               N, best[0], best[1]);
    }
    vkt_optimizer_destroy(opt);
    vkt_stream_destroy(s);
    vkt_buffer_destroy(b);
}

int main(void)
{
    th_init("test_optim");
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    test_errors(ctx);
    test_schedules(ctx);
    test_reference(ctx);
    test_replay_changes(ctx);
    test_split();
    test_state(ctx);
    test_convergence(ctx);
    report_timing(ctx);
    return th_finish();
}
