/* vkt bench <what>: measured figures printed as a table, last line `result: ...`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Checks 256 sampled entries of C = A*B (packed N x N) against a host dot product in
 * double. Returns the largest relative error. */
static double check_samples(const float *a, const float *b, const float *c, uint32_t n)
{
    double worst = 0;
    for (int s = 0; s < 256; s++) {
        uint32_t i = (uint32_t)(rnd() * 0.5f * (float)n + (float)n * 0.5f) % n;
        uint32_t j = (uint32_t)(rnd() * 0.5f * (float)n + (float)n * 0.5f) % n;
        double want = 0, scale = 0;
        for (uint32_t k = 0; k < n; k++) {
            want += (double)a[(size_t)i * n + k] * b[(size_t)k * n + j];
            scale += fabs((double)a[(size_t)i * n + k] * b[(size_t)k * n + j]);
        }
        double err = fabs(c[(size_t)i * n + j] - want) / (scale > 0 ? scale : 1);
        if (err > worst)
            worst = err;
    }
    return worst;
}

typedef struct gemm_run {
    double gflops, seconds;
    double max_err;
    int ok;
} gemm_run;

/* A and B of type t (fp32, or fp16/bf16: converted on the host, and the check then uses
 * the rounded values), C fp32. */
static vkt_status bench_one(vkt_context *ctx, uint32_t n, vkt_dtype t, double min_seconds,
                            gemm_run *out)
{
    size_t elems = (size_t)n * n, es = vkt_dtype_size(t);
    float *a = malloc(elems * 4), *b = malloc(elems * 4), *c = malloc(elems * 4);
    void *ab = malloc(2 * elems * es);
    vkt_buffer *buf = NULL;
    vkt_stream *s = NULL;
    vkt_status st = (a && b && c && ab) ? VKT_OK : VKT_ERROR_OUT_OF_MEMORY;
    if (st == VKT_OK)
        st = vkt_buffer_create(ctx, 2 * elems * es + elems * 4, VKT_MEMORY_DEVICE, &buf);
    if (st == VKT_OK) {
        for (size_t i = 0; i < elems; i++) {
            a[i] = rnd();
            b[i] = rnd();
        }
        vkt_convert(VKT_DTYPE_FP32, a, t, ab, elems);
        vkt_convert(VKT_DTYPE_FP32, b, t, (char *)ab + elems * es, elems);
        vkt_convert(t, ab, VKT_DTYPE_FP32, a, elems); /* the values the device multiplies */
        vkt_convert(t, (char *)ab + elems * es, VKT_DTYPE_FP32, b, elems);
        st = vkt_buffer_write(buf, 0, ab, 2 * elems * es);
    }
    if (st == VKT_OK)
        st = vkt_stream_create(ctx, NULL, &s);
    uint64_t c_at = 2 * elems * es / 4; /* C after A and B, in fp32 elements */
    if (st == VKT_OK) {
        vkt_gemm_desc d = {.m = n, .n = n, .k = n, .alpha = 1.0f, .beta = 0.0f,
                           .a = {buf, 0}, .b = {buf, elems}, .c = {buf, c_at},
                           .a_type = t, .b_type = t};
        st = vkt_gemm(s, &d);
    }
    if (st == VKT_OK)
        st = vkt_stream_run(s); /* warm-up: pipeline creation, first touch */
    int reps = 0;
    double total = 0, best = 1e30;
    while (st == VKT_OK && (reps < 2 || total < min_seconds)) {
        double t0 = cli_now();
        st = vkt_stream_run(s);
        double dt = cli_now() - t0;
        total += dt;
        if (dt < best)
            best = dt;
        reps++;
    }
    if (st == VKT_OK)
        st = vkt_buffer_read(buf, c_at * 4, c, elems * 4);
    if (st == VKT_OK) {
        out->seconds = best;
        out->gflops = 2.0 * n * (double)n * n / best * 1e-9;
        out->max_err = check_samples(a, b, c, n);
        /* fp32 accumulation of exact 16-bit products: (K + 2) 2^-24 of the sum of |a b|,
         * twice that for matrix units (README, "16-bit GEMM"), doubled again as margin */
        out->ok = out->max_err < (t == VKT_DTYPE_FP32 ? 1e-5 : (n + 2.0) * 0x1p-22);
    }
    vkt_stream_destroy(s);
    vkt_buffer_destroy(buf);
    free(ab);
    free(a);
    free(b);
    free(c);
    return st;
}

/* ---- the GEMMs of one training step of a 784-256-128-10 MLP, batch 128 ------------- */

typedef struct mlp_gemm {
    const char *name;
    int ta, tb;
    uint32_t m, n, k;
    float beta;
} mlp_gemm;

/* Forward Y = X W; backward dW = X^T dY (trans_a), dX = dY W^T (trans_b); the "+=" rows
 * accumulate into C (beta = 1), as gradient accumulation does. The input gradient of
 * the first layer is not needed and not listed. */
static const mlp_gemm mlp_gemms[] = {
    {"fwd1  X·W1", 0, 0, 128, 256, 784, 0.0f},
    {"fwd2  H1·W2", 0, 0, 128, 128, 256, 0.0f},
    {"fwd3  H2·W3", 0, 0, 128, 10, 128, 0.0f},
    {"dW3   H2^T·dY3", 1, 0, 128, 10, 128, 0.0f},
    {"dH2   dY3·W3^T", 0, 1, 128, 128, 10, 0.0f},
    {"dW2   H1^T·dY2", 1, 0, 256, 128, 128, 0.0f},
    {"dH1   dY2·W2^T", 0, 1, 128, 256, 128, 0.0f},
    {"dW1   X^T·dY1", 1, 0, 784, 256, 128, 0.0f},
    {"dW1+= X^T·dY1", 1, 0, 784, 256, 128, 1.0f},
    {"dW2+= H1^T·dY2", 1, 0, 256, 128, 128, 1.0f},
};

#define MLP_REPS 16 /* dispatches recorded per run; each is timed by its timestamps */
#define MAX_SHAPES 64 /* --shape options of one run (bench/gpu.sh passes two models' GEMMs) */

/* Largest relative error of 256 sampled entries of C (= op(A) op(B) + beta * C0). */
static double check_general(const mlp_gemm *g, const float *a, const float *b, const float *c0,
                            const float *c)
{
    double worst = 0;
    for (int s = 0; s < 256; s++) {
        uint32_t i = (uint32_t)((rnd() + 1.0f) * 0.5f * (float)g->m) % g->m;
        uint32_t j = (uint32_t)((rnd() + 1.0f) * 0.5f * (float)g->n) % g->n;
        double want = g->beta * (double)c0[(size_t)i * g->n + j], scale = fabs(want);
        for (uint32_t k = 0; k < g->k; k++) {
            double x = g->ta ? a[(size_t)k * g->m + i] : a[(size_t)i * g->k + k];
            double y = g->tb ? b[(size_t)j * g->k + k] : b[(size_t)k * g->n + j];
            want += x * y;
            scale += fabs(x * y);
        }
        double err = fabs(c[(size_t)i * g->n + j] - want) / (scale > 0 ? scale : 1);
        if (err > worst)
            worst = err;
    }
    return worst;
}

/* Times one GEMM: MLP_REPS dispatches into one stream (C is the same, so each waits for
 * the previous one), several runs; the figure is the fastest dispatch by timestamps.
 * The check runs on a separate single dispatch. Packed operands, 16-byte aligned. */
static vkt_status bench_mlp_one(vkt_context *ctx, const mlp_gemm *g, double min_seconds,
                                double *out_us, double *out_err)
{
    size_t na = (size_t)g->m * g->k, nb = (size_t)g->k * g->n, nc = (size_t)g->m * g->n;
    size_t oa = 0, ob = (na + 63) / 64 * 64, oc = ob + (nb + 63) / 64 * 64;
    float *host = malloc((oc + nc) * 4), *c = malloc(nc * 4);
    vkt_buffer *buf = NULL;
    vkt_stream *s = NULL, *once = NULL;
    vkt_stream_options so = {.timestamps = 1};
    vkt_status st = (host && c) ? VKT_OK : VKT_ERROR_OUT_OF_MEMORY;
    if (st == VKT_OK) {
        for (size_t i = 0; i < oc + nc; i++)
            host[i] = rnd();
        st = vkt_buffer_create(ctx, (oc + nc) * 4, VKT_MEMORY_DEVICE, &buf);
    }
    if (st == VKT_OK)
        st = vkt_buffer_write(buf, 0, host, (oc + nc) * 4);
    vkt_gemm_desc d = {.trans_a = g->ta, .trans_b = g->tb, .m = g->m, .n = g->n, .k = g->k,
                       .alpha = 1.0f, .beta = g->beta,
                       .a = {buf, oa}, .b = {buf, ob}, .c = {buf, oc}};
    if (st == VKT_OK)
        st = vkt_stream_create(ctx, NULL, &once);
    if (st == VKT_OK)
        st = vkt_gemm(once, &d);
    if (st == VKT_OK)
        st = vkt_stream_run(once);
    if (st == VKT_OK)
        st = vkt_buffer_read(buf, oc * 4, c, nc * 4);
    if (st == VKT_OK)
        *out_err = check_general(g, host + oa, host + ob, host + oc, c);
    if (st == VKT_OK)
        st = vkt_stream_create(ctx, &so, &s);
    for (int r = 0; st == VKT_OK && r < MLP_REPS; r++)
        st = vkt_gemm(s, &d);
    double best = 1e30, total = 0;
    for (int run = 0; st == VKT_OK && (run < 3 || total < min_seconds); run++) {
        double t0 = cli_now();
        st = vkt_stream_run(s);
        total += cli_now() - t0;
        vkt_timing t[MLP_REPS];
        uint32_t n = 0;
        if (st == VKT_OK)
            st = vkt_stream_timings(s, t, MLP_REPS, &n);
        for (uint32_t i = 0; st == VKT_OK && i < n; i++)
            if (run > 0 && t[i].microseconds < best) /* run 0 warms up */
                best = t[i].microseconds;
    }
    *out_us = best;
    vkt_stream_destroy(s);
    vkt_stream_destroy(once);
    vkt_buffer_destroy(buf);
    free(host);
    free(c);
    return st;
}

static int bench_mlp(vkt_context *ctx, const mlp_gemm *list, size_t count, double min_seconds)
{
    printf("%-16s %2s %2s %5s %5s %5s %4s %10s %9s %12s %6s\n", "GEMM", "ta", "tb", "M", "N",
           "K", "beta", "us", "GFLOP/s", "max rel err", "check");
    double total_us = 0;
    int all_ok = 1;
    vkt_status st = VKT_OK;
    for (size_t i = 0; i < count && st == VKT_OK; i++) {
        const mlp_gemm *g = &list[i];
        double us = 0, err = 0;
        st = bench_mlp_one(ctx, g, min_seconds, &us, &err);
        if (st != VKT_OK)
            break;
        int ok = err < 1e-5;
        all_ok &= ok;
        if (g->beta == 0.0f)
            total_us += us;
        printf("%-16s %2d %2d %5u %5u %5u %4g %10.1f %9.2f %12.2e %6s\n", g->name, g->ta, g->tb,
               g->m, g->n, g->k, g->beta, us, 2.0 * g->m * g->n * g->k / us * 1e-3, err,
               ok ? "ok" : "FAIL");
        fflush(stdout);
    }
    if (st != VKT_OK)
        return cli_fail("bench gemm --mlp", st, vkt_context_errmsg(ctx));
    if (!all_ok)
        return cli_fail("bench gemm --mlp", VKT_ERROR_INTERNAL, "GEMM result check failed");
    if (list == mlp_gemms)
        printf("result: mlp_step_gemm_us=%.1f\n", total_us);
    return 0;
}

/* "256,512,1024" -> sizes; returns the count, 0 on a malformed list. */
static uint32_t parse_sizes(const char *text, uint32_t *sizes, uint32_t cap)
{
    uint32_t n = 0;
    const char *p = text;
    while (*p && n < cap) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v == 0 || v > 16384)
            return 0;
        sizes[n++] = (uint32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return 0;
    }
    return *p ? 0 : n;
}

static int bench_gemm(int argc, char **argv)
{
    uint32_t sizes[8] = {256, 512, 1024, 2048}, n_sizes = 4;
    double min_seconds = 1.0;
    int mlp = 0; /* 1: the MLP list, 2: the --shape list */
    mlp_gemm shapes[MAX_SHAPES];
    size_t n_shapes = 0;
    vkt_dtype dtype = VKT_DTYPE_FP32;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            if ((n_sizes = parse_sizes(argv[++i], sizes, 8)) == 0) {
                fprintf(stderr, "vkt bench gemm: --sizes takes a list such as 256,512\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--min-seconds") == 0 && i + 1 < argc) {
            min_seconds = atof(argv[++i]);
        } else if (strcmp(argv[i], "--mlp") == 0) {
            mlp = 1;
        } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            const char *name = argv[++i];
            for (dtype = VKT_DTYPE_FP32; dtype < VKT_DTYPE_COUNT; dtype++)
                if (strcmp(name, vkt_dtype_name(dtype)) == 0)
                    break;
            if (dtype == VKT_DTYPE_COUNT) {
                fprintf(stderr, "vkt bench gemm: --dtype '%s': not fp32, fp16 or bf16\n", name);
                return 2;
            }
        } else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            int ta, tb;
            mlp_gemm shape = {0};
            if (n_shapes == MAX_SHAPES) {
                fprintf(stderr, "vkt bench gemm: at most %d --shape options\n", MAX_SHAPES);
                return 2;
            }
            if (sscanf(argv[++i], "%u,%u,%u,%d,%d,%f", &shape.m, &shape.n, &shape.k, &ta, &tb,
                       &shape.beta) != 6 || !shape.m || !shape.n || !shape.k) {
                fprintf(stderr, "vkt bench gemm: --shape takes M,N,K,trans_a,trans_b,beta\n");
                return 2;
            }
            shape.ta = ta, shape.tb = tb, shape.name = "shape";
            shapes[n_shapes++] = shape;
            mlp = 2;
        } else {
            fprintf(stderr,
                    "usage: vkt bench gemm [--sizes 256,512,...] [--min-seconds S] [--mlp]\n"
                    "                      [--shape M,N,K,trans_a,trans_b,beta]...\n"
                    "                      [--dtype fp32|fp16|bf16]  (A and B; --sizes only)\n");
            return 2;
        }
    }
    if (mlp && dtype != VKT_DTYPE_FP32) {
        fprintf(stderr, "vkt bench gemm: --dtype applies to --sizes (square products) only\n");
        return 2;
    }
    vkt_instance *inst = cli_instance();
    if (!inst)
        return 1;
    vkt_context *ctx = NULL;
    vkt_status st = vkt_context_create(inst, NULL, &ctx);
    if (st != VKT_OK) {
        cli_fail("cannot create a context", st, vkt_last_error());
        vkt_instance_destroy(inst);
        return 1;
    }
    vkt_device_info info;
    vkt_context_device_info(ctx, &info);
    const char *threads = getenv("LP_NUM_THREADS");
    printf("device: %s (%s kernels)%s%s\n", info.name,
           vkt_context_kernel_variant(ctx) == VKT_KERNELS_CPU ? "cpu" : "gpu",
           threads ? ", LP_NUM_THREADS=" : "", threads ? threads : "");
    if (dtype != VKT_DTYPE_FP32)
        printf("A and B in %s, C in fp32, accumulated in fp32\n", vkt_dtype_name(dtype));
    if (mlp) {
        int rc = mlp == 1 ? bench_mlp(ctx, mlp_gemms, sizeof mlp_gemms / sizeof mlp_gemms[0],
                                      min_seconds)
                          : bench_mlp(ctx, shapes, n_shapes, min_seconds);
        vkt_context_destroy(ctx);
        vkt_instance_destroy(inst);
        return rc;
    }
    printf("%6s %12s %10s %12s %6s\n", "N", "seconds", "GFLOP/s", "max rel err", "check");
    double g1024 = -1;
    int all_ok = 1;
    for (uint32_t i = 0; i < n_sizes && st == VKT_OK; i++) {
        gemm_run r = {0};
        st = bench_one(ctx, sizes[i], dtype, min_seconds, &r);
        if (st != VKT_OK)
            break;
        printf("%6u %12.6f %10.2f %12.2e %6s\n", sizes[i], r.seconds, r.gflops, r.max_err,
               r.ok ? "ok" : "FAIL");
        fflush(stdout);
        all_ok &= r.ok;
        if (sizes[i] == 1024)
            g1024 = r.gflops;
    }
    int rc = 0;
    if (st != VKT_OK)
        rc = cli_fail("bench gemm", st, vkt_context_errmsg(ctx));
    else if (!all_ok)
        rc = cli_fail("bench gemm", VKT_ERROR_INTERNAL, "GEMM result check failed");
    if (rc == 0 && g1024 >= 0)
        printf("result: gemm_%s1024_gflops=%.2f\n",
               dtype == VKT_DTYPE_FP32 ? "" : dtype == VKT_DTYPE_FP16 ? "fp16_" : "bf16_",
               g1024);
    vkt_context_destroy(ctx);
    vkt_instance_destroy(inst);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "gemm") == 0)
        return bench_gemm(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "train") == 0)
        return cmd_bench_train(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "parallel") == 0)
        return cmd_bench_parallel(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "layers") == 0)
        return cmd_bench_layers(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "allreduce") == 0)
        return cmd_bench_allreduce(argc - 2, argv + 2);
    fprintf(stderr, "usage: vkt bench gemm|train|parallel|layers|allreduce [options]\n");
    return 2;
}
