/* vkt bench allreduce: under `mpirun -np R`, the in-place float sum across ranks through
 * vktrain's path (nonblocking allreduce polled with a sleep backoff, heartbeats, a
 * deadline) against a plain blocking MPI_Allreduce, size by size, as nccl-tests reports
 * it: time, and bus bandwidth busbw = algbw * 2(R-1)/R (what each rank's link carries in
 * a ring). Each size is measured in several rounds and the fastest round's mean is kept
 * for each path, so a passing load on a shared machine falls on both alike (as the
 * other `vkt bench` figures). Only rank 0 prints; the last line is `result: ...`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_SIZES 32

typedef struct bench_args {
    uint64_t sizes[MAX_SIZES];
    uint32_t n_sizes;
    uint32_t iters;        /* 0: by size */
    uint32_t rounds;       /* per size; the fastest is kept */
    uint32_t poll_max_us;  /* 0: the world's default */
    double timeout;
} bench_args;

/* "4K", "1M", "64M", "4096": bytes, binary suffixes. 0 when malformed. */
static uint64_t parse_bytes(const char *s)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return 0;
    int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20
              : *end == 'G' || *end == 'g' ? 30 : 0;
    if (shift)
        end++;
    if (*end && strcmp(end, "iB") && strcmp(end, "B"))
        return 0;
    if (v > (UINT64_MAX >> shift))
        return 0; /* would wrap: refused, not taken as a smaller size */
    return (uint64_t)v << shift;
}

/* "A..B" (A, 4A, 16A, ... up to B) or a comma list. */
static int parse_sizes(const char *s, bench_args *a)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *dots = strstr(buf, "..");
    a->n_sizes = 0;
    if (dots) {
        *dots = 0;
        uint64_t lo = parse_bytes(buf), hi = parse_bytes(dots + 2);
        for (uint64_t b = lo; lo && b <= hi && a->n_sizes < MAX_SIZES; b *= 4)
            a->sizes[a->n_sizes++] = b;
    } else {
        for (char *tok = strtok(buf, ","); tok && a->n_sizes < MAX_SIZES; tok = strtok(NULL, ",")) {
            uint64_t b = parse_bytes(tok);
            if (!b)
                return 0;
            a->sizes[a->n_sizes++] = b;
        }
    }
    for (uint32_t i = 0; i < a->n_sizes; i++)
        if (a->sizes[i] % 4)
            return 0; /* whole floats */
    return a->n_sizes > 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: mpirun -np R vkt bench allreduce [--sizes 4K..64M|4K,1M,...] "
                    "[--iters N] [--rounds N] [--poll-us US] [--timeout S]\n");
    return 2;
}

static int parse_args(int argc, char **argv, bench_args *a)
{
    memset(a, 0, sizeof *a);
    a->timeout = 120;
    a->rounds = 3;
    parse_sizes("4K..64M", a);
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n = 0;
        if (strcmp(argv[i], "--sizes") == 0 && v) {
            if (!parse_sizes(v, a))
                return usage();
        } else if (strcmp(argv[i], "--iters") == 0 && v) {
            if (!cli_parse_uint(v, 1, UINT32_MAX, &n))
                return usage();
            a->iters = (uint32_t)n;
        } else if (strcmp(argv[i], "--rounds") == 0 && v) {
            if (!cli_parse_uint(v, 1, UINT32_MAX, &n))
                return usage();
            a->rounds = (uint32_t)n;
        } else if (strcmp(argv[i], "--poll-us") == 0 && v) {
            if (!cli_parse_uint(v, 0, UINT32_MAX, &n))
                return usage();
            a->poll_max_us = (uint32_t)n;
        } else if (strcmp(argv[i], "--timeout") == 0 && v) {
            if (!cli_parse_double(v, 0.001, 1e6, &a->timeout))
                return usage();
        } else {
            return usage();
        }
        i++;
    }
    return 0;
}

/* Enough iterations that small sizes average out noise, few enough that 64 MiB at four
 * ranks on two cores stays within seconds. */
static uint32_t iters_for(const bench_args *a, uint64_t bytes)
{
    if (a->iters)
        return a->iters;
    return bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 20 : 8;
}

static void print_size(uint64_t b)
{
    if (b >= (1u << 20))
        printf("%6llu MiB", (unsigned long long)(b >> 20));
    else
        printf("%6llu KiB", (unsigned long long)(b >> 10));
}

static int run(vkt_world *w, const bench_args *a)
{
    uint32_t R = vkt_world_size(w);
    int chief = vkt_world_is_chief(w);
    double factor = 2.0 * (R - 1) / R, busbw_4m = 0, min_ratio = 0;
    int have_ratio = 0;
    if (chief) {
        printf("allreduce: %u ranks, in-place float sum; per path the mean time of the "
               "slowest rank, fastest of %u rounds; busbw = bytes/time * 2(R-1)/R\n", R,
               a->rounds);
        printf("%10s %10s %10s %10s %10s %8s\n", "size", "vkt ms", "vkt GB/s", "mpi ms",
               "mpi GB/s", "vkt/mpi");
    }
    for (uint32_t i = 0; i < a->n_sizes; i++) {
        uint64_t b = a->sizes[i];
        double tv = 0, tm = 0;
        for (uint32_t r = 0; r < a->rounds; r++) {
            double v = 0, m = 0;
            vkt_status st = vkt_world_bench_allreduce(w, b, iters_for(a, b), &v, &m);
            if (st != VKT_OK) {
                cli_fail("bench allreduce", st, vkt_world_errmsg(w));
                vkt_world_abort(w, st == VKT_ERROR_TIMEOUT ? 3 : 1, vkt_world_errmsg(w));
            }
            tv = r == 0 || v < tv ? v : tv;
            tm = r == 0 || m < tm ? m : tm;
        }
        double bv = (double)b / tv * factor * 1e-9, bm = (double)b / tm * factor * 1e-9;
        double ratio = tm / tv; /* vkt's busbw over MPI's */
        if (b == (4u << 20))
            busbw_4m = bv;
        if (b >= (1u << 20) && (!have_ratio || ratio < min_ratio)) {
            min_ratio = ratio;
            have_ratio = 1;
        }
        if (chief) {
            print_size(b);
            printf(" %10.3f %10.2f %10.3f %10.2f %8.2f\n", tv * 1e3, bv, tm * 1e3, bm, ratio);
            fflush(stdout);
        }
    }
    if (chief) {
        printf("result: ranks=%u busbw_gbps_at_4M=", R);
        if (busbw_4m > 0)
            printf("%.2f", busbw_4m);
        else
            printf("n/a");
        printf(" vkt_vs_mpi_at_1M_and_above=");
        if (have_ratio)
            printf("%.2f\n", min_ratio);
        else
            printf("n/a\n");
    }
    return 0;
}

int cmd_bench_allreduce(int argc, char **argv)
{
    bench_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    vkt_world *w = NULL;
    vkt_world_options o = {.timeout_seconds = a.timeout, .poll_max_us = a.poll_max_us};
    vkt_status st = vkt_world_init(NULL, NULL, &o, &w);
    if (st != VKT_OK)
        return cli_fail("bench allreduce", st, vkt_last_error());
    if (vkt_world_size(w) < 2) {
        fprintf(stderr, "vkt bench allreduce: one rank, nothing to measure; run it under an "
                        "MPI launcher: mpirun -np 2 vkt bench allreduce\n");
        vkt_world_finalize(w);
        return 1;
    }
    rc = run(w, &a);
    vkt_world_finalize(w);
    return rc;
}
