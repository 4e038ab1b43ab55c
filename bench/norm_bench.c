/* bench_norm: RMSNorm against LayerNorm at the kernel level (engine/kernels/norm.h), on
 * the same shapes, same device, same stream. For each shape [rows, cols] it records
 * kn_layernorm, kn_layernorm_backward (dx, dgamma, dbeta), kn_rmsnorm and
 * kn_rmsnorm_backward (dx, dgamma) into one stream with a GPU timestamp around every
 * dispatch, runs it once to warm up (pipeline creation, first touch), then `runs` times,
 * and prints the median device time of each dispatch (the fastest in brackets). Both
 * outputs y are checked against the double references, so a wrong kernel cannot post a
 * good time. Tensors start 16-byte aligned (the vec4 paths when cols % 4 == 0).
 *
 * Usage: bench_norm [--runs N] [ROWSxCOLS ...]   (default 2048x64 2048x512 256x4096
 * 2049x33; VKT_KERNELS=cpu|gpu picks the kernel variant). The last line is
 * `result: rmsnorm_over_layernorm_<rows>x<cols>=<ratio>` for the first shape (forward +
 * backward medians). Not a ctest: timings depend on the machine's load. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/norm.h"

#define MAX_RUNS 1000
#define N_KERNELS 4

static const char *const names[N_KERNELS] = {"layernorm", "layernorm_backward", "rmsnorm",
                                             "rmsnorm_backward"};

typedef struct bufs {
    vkt_buffer *x, *g, *b, *y, *st, *dy, *dx, *dg, *db, *y2, *rs, *dx2, *dg2;
} bufs;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float uniform(float lo, float hi)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)(rng >> 40) / 16777216.0f;
}

static vkt_status make(vkt_context *ctx, uint64_t n, float lo, float hi, vkt_buffer **out,
                       float *host)
{
    vkt_status st = vkt_buffer_create(ctx, 4 * n, VKT_MEMORY_DEVICE, out);
    if (st != VKT_OK)
        return st;
    for (uint64_t i = 0; i < n; i++)
        host[i] = uniform(lo, hi);
    return vkt_buffer_write(*out, 0, host, 4 * n);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static vkt_view whole(vkt_buffer *b) { return (vkt_view){b, 0}; }

/* Largest |got - want| / (1 + |want|) of y against its double reference. */
static double max_err(const float *got, const double *want, uint64_t n)
{
    double worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (1.0 + fabs(want[i]));
        if (!(e <= worst))
            worst = e; /* NaN too */
    }
    return worst;
}

/* One shape; medians[k] (microseconds) of each kernel. Returns 0 on success. */
static int bench_shape(vkt_context *ctx, uint32_t rows, uint32_t cols, uint32_t runs,
                       double medians[N_KERNELS])
{
    uint64_t n = (uint64_t)rows * cols;
    float *hx = malloc(4 * n), *hg = malloc(4 * cols), *hb = malloc(4 * cols);
    float *hdy = malloc(4 * n), *hy = malloc(4 * n), *scratch = malloc(4 * n);
    double *xd = malloc(8 * n), *gd = malloc(8 * cols), *bd = malloc(8 * cols);
    double *yd = malloc(8 * n), *times = malloc(sizeof(double) * N_KERNELS * runs);
    bufs B = {0};
    vkt_stream *s = NULL;
    int rc = 1;
    vkt_status st = VKT_ERROR_OUT_OF_MEMORY;
    if (!hx || !hg || !hb || !hdy || !hy || !scratch || !xd || !gd || !bd || !yd || !times)
        goto out;
    if ((st = make(ctx, n, -2, 3, &B.x, hx)) != VKT_OK ||
        (st = make(ctx, cols, 0.5f, 1.5f, &B.g, hg)) != VKT_OK ||
        (st = make(ctx, cols, -1, 1, &B.b, hb)) != VKT_OK ||
        (st = make(ctx, n, -1, 1, &B.dy, hdy)) != VKT_OK ||
        (st = make(ctx, n, 0, 0, &B.y, scratch)) != VKT_OK ||
        (st = make(ctx, n, 0, 0, &B.y2, scratch)) != VKT_OK ||
        (st = make(ctx, n, 0, 0, &B.dx, scratch)) != VKT_OK ||
        (st = make(ctx, n, 0, 0, &B.dx2, scratch)) != VKT_OK ||
        (st = make(ctx, 2ull * rows, 0, 0, &B.st, scratch)) != VKT_OK ||
        (st = make(ctx, rows, 0, 0, &B.rs, scratch)) != VKT_OK ||
        (st = make(ctx, cols, 0, 0, &B.dg, scratch)) != VKT_OK ||
        (st = make(ctx, cols, 0, 0, &B.db, scratch)) != VKT_OK ||
        (st = make(ctx, cols, 0, 0, &B.dg2, scratch)) != VKT_OK)
        goto out;
    vkt_stream_options so = {.timestamps = 1};
    if ((st = vkt_stream_create(ctx, &so, &s)) != VKT_OK)
        goto out;
    vkt_view dx = whole(B.dx), dg = whole(B.dg), db = whole(B.db), dx2 = whole(B.dx2);
    vkt_view dg2 = whole(B.dg2), none = {NULL, 0};
    const float eps = 1e-5f;
    if ((st = kn_layernorm(s, whole(B.x), whole(B.g), whole(B.b), whole(B.y), whole(B.st), rows,
                           cols, eps)) != VKT_OK ||
        (st = kn_layernorm_backward(s, whole(B.x), whole(B.g), whole(B.st), whole(B.dy), &dx, 0,
                                    &dg, 0, &db, 0, none, rows, cols)) != VKT_OK ||
        (st = kn_rmsnorm(s, whole(B.x), whole(B.g), whole(B.y2), whole(B.rs), rows, cols,
                         eps)) != VKT_OK ||
        (st = kn_rmsnorm_backward(s, whole(B.x), whole(B.g), whole(B.rs), whole(B.dy), &dx2, 0,
                                  &dg2, 0, none, rows, cols)) != VKT_OK ||
        (st = vkt_stream_run(s)) != VKT_OK)
        goto out;
    for (uint32_t r = 0; r < runs; r++) {
        vkt_timing t[N_KERNELS];
        uint32_t count = 0;
        if ((st = vkt_stream_run(s)) != VKT_OK ||
            (st = vkt_stream_timings(s, t, N_KERNELS, &count)) != VKT_OK)
            goto out;
        if (count != N_KERNELS) {
            fprintf(stderr, "bench_norm: %u timings, expected %d\n", count, N_KERNELS);
            goto out_quiet;
        }
        for (int k = 0; k < N_KERNELS; k++)
            times[k * runs + r] = t[k].microseconds;
    }
    /* Both forwards against their references. */
    for (uint64_t i = 0; i < n; i++)
        xd[i] = hx[i];
    for (uint32_t i = 0; i < cols; i++) {
        gd[i] = hg[i];
        bd[i] = hb[i];
    }
    double err[2];
    kn_ref_layernorm(xd, gd, bd, yd, rows, cols, eps);
    if ((st = vkt_buffer_read(B.y, 0, hy, 4 * n)) != VKT_OK)
        goto out;
    err[0] = max_err(hy, yd, n);
    kn_ref_rmsnorm(xd, gd, yd, NULL, rows, cols, eps);
    if ((st = vkt_buffer_read(B.y2, 0, hy, 4 * n)) != VKT_OK)
        goto out;
    err[1] = max_err(hy, yd, n);
    if (!(err[0] < 1e-4 && err[1] < 1e-4)) {
        fprintf(stderr, "bench_norm: [%u, %u]: y differs from the reference (layernorm %.3g, "
                "rmsnorm %.3g)\n", rows, cols, err[0], err[1]);
        goto out_quiet;
    }
    char shape[32];
    snprintf(shape, sizeof shape, "[%u, %u]", rows, cols);
    double med[N_KERNELS], best[N_KERNELS];
    for (int k = 0; k < N_KERNELS; k++) {
        qsort(times + k * runs, runs, sizeof(double), cmp_double);
        med[k] = medians[k] = times[k * runs + runs / 2];
        best[k] = times[k * runs];
    }
    double ln = med[0] + med[1], rms = med[2] + med[3];
    printf("%-14s %9.1f (%7.1f) %9.1f (%7.1f) %9.1f (%7.1f) %9.1f (%7.1f) %6.2f %6.2f %6.2f\n",
           shape, med[0], best[0], med[1], best[1], med[2], best[2], med[3], best[3],
           med[2] / med[0], med[3] / med[1], rms / ln);
    fflush(stdout);
    rc = 0;
    goto done;
out:
    fprintf(stderr, "bench_norm: [%u, %u]: %s: %s\n", rows, cols, vkt_status_name(st),
            vkt_context_errmsg(ctx));
out_quiet:
done:
    vkt_stream_destroy(s);
    vkt_buffer *all[] = {B.x, B.g, B.b, B.y, B.st, B.dy, B.dx, B.dg, B.db, B.y2, B.rs, B.dx2,
                         B.dg2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vkt_buffer_destroy(all[i]);
    free(hx);
    free(hg);
    free(hb);
    free(hdy);
    free(hy);
    free(scratch);
    free(xd);
    free(gd);
    free(bd);
    free(yd);
    free(times);
    return rc;
}

int main(int argc, char **argv)
{
    uint32_t runs = 50, shapes[64][2], n_shapes = 0;
    for (int i = 1; i < argc; i++) {
        unsigned a, b;
        char tail;
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%u%c", &a, &tail) != 1 || a == 0 || a > MAX_RUNS) {
                fprintf(stderr, "bench_norm: --runs takes a whole number in [1, %d]\n",
                        MAX_RUNS);
                return 2;
            }
            runs = a;
        } else if (sscanf(argv[i], "%ux%u%c", &a, &b, &tail) == 2 && a && b && n_shapes < 64) {
            shapes[n_shapes][0] = a;
            shapes[n_shapes++][1] = b;
        } else {
            fprintf(stderr, "usage: bench_norm [--runs N] [ROWSxCOLS ...] (at most 64 shapes, "
                            "each dimension >= 1)\n");
            return 2;
        }
    }
    if (n_shapes == 0) {
        static const uint32_t def[][2] = {{2048, 64}, {2048, 512}, {256, 4096}, {2049, 33}};
        for (; n_shapes < sizeof def / sizeof def[0]; n_shapes++) {
            shapes[n_shapes][0] = def[n_shapes][0];
            shapes[n_shapes][1] = def[n_shapes][1];
        }
    }
    vkt_instance *inst = NULL;
    vkt_context *ctx = NULL;
    vkt_status st = vkt_instance_create(NULL, &inst);
    if (st == VKT_OK)
        st = vkt_context_create(inst, &(vkt_context_options){0}, &ctx);
    if (st != VKT_OK) {
        fprintf(stderr, "bench_norm: %s: %s\n", vkt_status_name(st), vkt_last_error());
        vkt_instance_destroy(inst);
        return 1;
    }
    vkt_device_info info;
    vkt_context_device_info(ctx, &info);
    if (!info.timestamps) {
        fprintf(stderr, "bench_norm: device '%s' has no timestamps on its compute queue\n",
                info.name);
        vkt_context_destroy(ctx);
        vkt_instance_destroy(inst);
        return 1;
    }
    printf("device: %s, %s kernels; device time per dispatch in us, median of %u runs "
           "(fastest)\n", info.name,
           vkt_context_kernel_variant(ctx) == VKT_KERNELS_GPU ? "gpu" : "cpu", runs);
    printf("%-14s %19s %19s %19s %19s %6s %6s %6s\n", "shape", names[0], names[1], names[2],
           names[3], "fwd", "bwd", "both");
    int rc = 0;
    double first[N_KERNELS] = {0};
    for (uint32_t i = 0; i < n_shapes && rc == 0; i++) {
        double med[N_KERNELS];
        rc = bench_shape(ctx, shapes[i][0], shapes[i][1], runs, med);
        if (i == 0)
            memcpy(first, med, sizeof first);
    }
    if (rc == 0)
        printf("result: rmsnorm_over_layernorm_%ux%u=%.3f\n", shapes[0][0], shapes[0][1],
               (first[2] + first[3]) / (first[0] + first[1]));
    vkt_context_destroy(ctx);
    vkt_instance_destroy(inst);
    return rc;
}
