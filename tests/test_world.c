/* The transport across processes (engine/parallel/world.h).
 *
 *   test_world                     without a launcher: a one-rank world that made no
 *                                  MPI call; every collective is the identity
 *   mpirun -np R test_world --require-launcher
 *                                  the collectives against sums computed in rank order,
 *                                  with odd lengths and pieces; every rank identical
 *   mpirun -np R test_world --timeout LATE[,LATE...]
 *                                  the listed ranks skip a collective; the others time
 *                                  out (1.5 s) and abort the job with code 3 through
 *                                  vkt_world_abort, printing the watchdog's message
 *                                  (checked by the CTest's expected output)
 *   mpirun -np R test_world --stop-inside STOPPED[,STOPPED...]
 *                                  the listed ranks start the collective (their
 *                                  heartbeat goes out), then stop making MPI calls, as
 *                                  a rank stopped (SIGSTOP) or hung inside it: the
 *                                  others' waits time out and name them from the
 *                                  beats they no longer send
 *   mpirun -np R test_world --end-alone keepalive|silent
 *                                  the chief works alone 4 s before finalize (timeout
 *                                  1 s): with vkt_world_keepalive the others wait for
 *                                  it; without, they name the silent chief after 3 s
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "parallel/world.h"
#include "platform/platform.h"

#define HAS(msg, part) TH_CHECK(strstr((msg), (part)) != NULL, "message '%s' contains '%s'", \
                                (msg), (part))
#define W_OK(w, expr)                                                                     \
    TH_CHECK((expr) == VKT_OK, "%s: %s", #expr, (w) ? (w)->errmsg : vkt_last_error())

static uint64_t fnv(const void *p, uint64_t bytes)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < bytes; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Every rank holds the same bytes: the minimum and maximum of their hashes agree. */
static int same_everywhere(vkt_world *w, const void *p, uint64_t bytes)
{
    uint64_t lo = fnv(p, bytes), hi = lo;
    if (world_allreduce_u64(w, &lo, 1, WORLD_MIN, "hash min") != VKT_OK ||
        world_allreduce_u64(w, &hi, 1, WORLD_MAX, "hash max") != VKT_OK)
        return 0;
    return lo == hi;
}

/* ---- one rank, no launcher ---------------------------------------------------------- */

static void test_one_rank(void)
{
    TH_CHECK(!world_mpi_initialized(), "no MPI_Init before the world");
    vkt_world *w = NULL;
    W_OK(w, vkt_world_init(NULL, NULL, NULL, &w));
    if (!w)
        return;
    TH_CHECK(vkt_world_size(w) == 1 && vkt_world_rank(w) == 0 && vkt_world_is_chief(w),
             "one rank, the chief");
    TH_CHECK(vkt_world_local_size(w) == 1 && vkt_world_local_rank(w) == 0, "one local rank");
    TH_CHECK(!world_mpi_initialized(), "an unlaunched process makes no MPI_Init");
    TH_CHECK(w->timeout == 60.0 && w->poll_max_us == 200, "defaults: 60 s, 200 us");
    vkt_world_set_timeout(w, 5.0);
    vkt_world_set_timeout(w, -1.0); /* ignored */
    TH_CHECK(w->timeout == 5.0, "set_timeout");

    float f[5] = {1, 2, 3, 4, 5};
    W_OK(w, world_allreduce_f32(w, f, 5, "sum"));
    world_req *req = (world_req *)f;
    W_OK(w, world_iallreduce_f32(w, f, 5, "sum", &req));
    TH_CHECK(req == NULL, "nothing in flight in a one-rank world");
    TH_CHECK(world_test(w, req) == 1, "test(NULL) is done");
    W_OK(w, world_wait(w, req));
    uint64_t u[2] = {7, 9};
    W_OK(w, world_allreduce_u64(w, u, 2, WORLD_MIN, "min"));
    double d[2] = {0.5, 1.5};
    W_OK(w, vkt_world_sum(w, d, 2));
    W_OK(w, world_allreduce_f64(w, d, 2, WORLD_MAX, "max"));
    unsigned char bytes[3] = {1, 2, 3};
    W_OK(w, vkt_world_broadcast(w, bytes, 3));
    TH_CHECK(f[0] == 1 && f[4] == 5 && u[0] == 7 && u[1] == 9 && d[0] == 0.5 && d[1] == 1.5 &&
             bytes[2] == 3, "collectives over one rank are the identity");
    uint32_t send[2] = {11, 12}, recv[2] = {0, 0};
    W_OK(w, world_gather(w, send, sizeof send, recv, "gather"));
    TH_CHECK(recv[0] == 11 && recv[1] == 12, "gather copies");
    uint64_t counts[1] = {5}, displs[1] = {0};
    W_OK(w, world_allgatherv_f32(w, f, counts, displs, "allgatherv"));
    W_OK(w, world_barrier(w, "barrier"));
    W_OK(w, world_allreduce_f32_plain(w, f, 5));
    TH_CHECK(f[2] == 3, "still the identity");

    uint32_t src = 0;
    uint64_t got = 1;
    TH_CHECK(world_isend(w, 0, 3, f, 4, &req) == VKT_ERROR_STATE, "no rank to send to");
    HAS(w->errmsg, "no other rank");
    TH_CHECK(world_try_recv(w, 3, f, 4, &src, &got) == VKT_ERROR_STATE && src == UINT32_MAX &&
             got == 0, "nothing to receive");
    TH_CHECK(world_irecv(w, 0, 3, f, 4, &req) == VKT_ERROR_STATE && !req, "no rank to "
             "receive from");
    double tv = -1, tm = -1;
    W_OK(w, vkt_world_bench_allreduce(w, 4096, 2, &tv, &tm));
    TH_CHECK(tv >= 0 && tm >= 0, "the benchmark runs on one rank");
    TH_CHECK(vkt_world_bench_allreduce(w, 6, 2, &tv, &tm) == VKT_ERROR_INVALID_ARGUMENT,
             "bytes not a multiple of 4");
    TH_CHECK(w->comm_bytes == 0, "no bytes handed to MPI");
    vkt_world_finalize(w);
    TH_CHECK(!world_mpi_initialized(), "still no MPI_Init");
}

static void test_arguments(void)
{
    vkt_world *w = (vkt_world *)&w;
    vkt_world_options o = {.require_launcher = 1};
    TH_CHECK(vkt_world_init(NULL, NULL, &o, &w) == VKT_ERROR_STATE && w == NULL,
             "require_launcher without a launcher");
    HAS(vkt_last_error(), world_built_with_mpi() ? "launcher" : "without MPI");
    o = (vkt_world_options){.timeout_seconds = -1};
    TH_CHECK(vkt_world_init(NULL, NULL, &o, &w) == VKT_ERROR_INVALID_ARGUMENT, "timeout < 0");
    TH_CHECK(vkt_world_init(NULL, NULL, NULL, NULL) == VKT_ERROR_INVALID_ARGUMENT, "no out");
    /* NULL is a one-rank world. */
    TH_CHECK(vkt_world_size(NULL) == 1 && vkt_world_rank(NULL) == 0 &&
             vkt_world_is_chief(NULL) && vkt_world_local_size(NULL) == 1 &&
             vkt_world_local_rank(NULL) == 0, "NULL world accessors");
    double d = 2.5;
    TH_CHECK(vkt_world_sum(NULL, &d, 1) == VKT_OK && d == 2.5, "sum over NULL");
    TH_CHECK(vkt_world_broadcast(NULL, &d, 8) == VKT_OK, "broadcast over NULL");
    TH_CHECK(vkt_world_broadcast(NULL, NULL, 8) == VKT_ERROR_INVALID_ARGUMENT, "NULL data");
    TH_CHECK(strlen(vkt_world_errmsg(NULL)) > 0, "errmsg(NULL)");
    vkt_world_set_timeout(NULL, 1.0);
    vkt_world_finalize(NULL);
}

/* ---- several ranks --------------------------------------------------------------------- */

/* Integers as floats, so the sum is exact whatever order MPI adds in. */
static float seeded(uint32_t rank, uint64_t i) { return (float)((rank + 1) * 7 + i % 1000); }

static void test_allreduce_len(vkt_world *w, uint64_t n)
{
    float *x = th_alloc_floats(n), *want = th_alloc_floats(n);
    for (uint64_t i = 0; i < n; i++) {
        x[i] = seeded(w->rank, i);
        want[i] = 0;
        for (uint32_t r = 0; r < w->size; r++) /* in rank order */
            want[i] += seeded(r, i);
    }
    W_OK(w, world_allreduce_f32(w, x, n, "allreduce"));
    char what[64];
    snprintf(what, sizeof what, "allreduce of %llu", (unsigned long long)n);
    th_compare(what, x, want, n, 0, 0);
    TH_CHECK(same_everywhere(w, x, n * sizeof *x), "%s: every rank identical", what);
    free(x);
    free(want);
}

static void test_allreduce(vkt_world *w)
{
    test_allreduce_len(w, 1);
    test_allreduce_len(w, 255);
    test_allreduce_len(w, (1u << 20) + 3);
    /* In pieces (as beyond INT_MAX elements): 64 KiB + 12 bytes, an odd piece. */
    world_set_max_piece(w, (64u << 10) + 12);
    test_allreduce_len(w, (1u << 20) + 3);
    world_set_max_piece(w, 0);

    /* Rounded sums: MPI gives every rank the same bits (MPI-1.1 4.9.5). */
    uint64_t n = 100003;
    float *x = th_alloc_floats(n);
    th_seed(1000 + w->rank);
    th_fill_uniform(x, n, -1, 1);
    world_req *req = NULL;
    W_OK(w, world_iallreduce_f32(w, x, n, "iallreduce", &req));
    TH_CHECK(req != NULL, "a request in flight");
    int done = 0;
    for (uint32_t i = 0; i < 1000000 && !done; i++) {
        done = world_test(w, req);
        if (!done)
            world_backoff(w, i);
    }
    TH_CHECK(done == 1, "world_test completes the request");
    TH_CHECK(same_everywhere(w, x, n * sizeof *x), "rounded sums identical on every rank");
    free(x);

    uint64_t u[3] = {w->rank * 1000ull, w->rank * 1000ull + 1, 5};
    uint64_t mn[3], mx[3], sum[3];
    memcpy(mn, u, sizeof u);
    memcpy(mx, u, sizeof u);
    memcpy(sum, u, sizeof u);
    W_OK(w, world_allreduce_u64(w, mn, 3, WORLD_MIN, "u64 min"));
    W_OK(w, world_allreduce_u64(w, mx, 3, WORLD_MAX, "u64 max"));
    W_OK(w, world_allreduce_u64(w, sum, 3, WORLD_SUM, "u64 sum"));
    uint64_t R = w->size;
    TH_CHECK(mn[0] == 0 && mn[1] == 1 && mx[0] == (R - 1) * 1000 && mx[1] == (R - 1) * 1000 + 1 &&
             sum[2] == 5 * R && sum[0] == 1000 * R * (R - 1) / 2, "u64 min, max, sum");
    double d[2] = {w->rank + 0.5, 1.0};
    W_OK(w, vkt_world_sum(w, d, 2));
    TH_CHECK(d[0] == R * (R - 1) / 2.0 + 0.5 * R && d[1] == (double)R, "f64 sum: %g %g", d[0],
             d[1]);
}

static void test_bcast_len(vkt_world *w, uint64_t bytes)
{
    unsigned char *b = malloc(bytes);
    if (!TH_CHECK(b != NULL, "allocate %llu bytes", (unsigned long long)bytes))
        return;
    for (uint64_t i = 0; i < bytes; i++)
        b[i] = w->rank == 0 ? (unsigned char)((i * 2654435761u) >> 13) : 0;
    W_OK(w, vkt_world_broadcast(w, b, bytes));
    uint64_t bad = 0;
    for (uint64_t i = 0; i < bytes; i++)
        bad += b[i] != (unsigned char)((i * 2654435761u) >> 13);
    TH_CHECK(bad == 0, "broadcast of %llu bytes: %llu wrong", (unsigned long long)bytes,
             (unsigned long long)bad);
    free(b);
}

static void test_bcast(vkt_world *w)
{
    test_bcast_len(w, 1);
    test_bcast_len(w, 40u << 20);
    world_set_max_piece(w, (1u << 20) + 13); /* as 256 MiB pieces, on 3 MiB */
    test_bcast_len(w, (3u << 20) + 5);
    world_set_max_piece(w, 0);
}

static void test_gather(vkt_world *w)
{
    uint32_t R = w->size;
    for (int pieces = 0; pieces < 2; pieces++) {
        uint32_t send[257];
        for (uint32_t i = 0; i < 257; i++)
            send[i] = w->rank * 1000 + i;
        uint32_t *recv = w->rank == 0 ? calloc((size_t)R * 257, sizeof *recv) : NULL;
        world_set_max_piece(w, pieces ? 100 : 0); /* 1028 bytes in pieces of 100 */
        W_OK(w, world_gather(w, send, sizeof send, recv, "gather"));
        world_set_max_piece(w, 0);
        uint64_t bad = 0;
        for (uint32_t r = 0; recv && r < R; r++)
            for (uint32_t i = 0; i < 257; i++)
                bad += recv[r * 257 + i] != r * 1000 + i;
        TH_CHECK(bad == 0, "gather%s: %llu wrong", pieces ? " in pieces" : "",
                 (unsigned long long)bad);
        free(recv);
    }
}

static void test_allgatherv(vkt_world *w)
{
    uint32_t R = w->size;
    uint64_t counts[64], displs[64], total = 0;
    for (uint32_t r = 0; r < R && r < 64; r++) {
        counts[r] = r * 37 + 1 + (r == 1 ? 5000 : 0); /* uneven, one much larger */
        displs[r] = total;
        total += counts[r];
    }
    for (int pieces = 0; pieces < 2; pieces++) {
        float *x = th_alloc_floats(total);
        for (uint64_t i = 0; i < total; i++)
            x[i] = -1;
        for (uint64_t j = 0; j < counts[w->rank]; j++)
            x[displs[w->rank] + j] = (float)(w->rank * 100000 + j);
        world_set_max_piece(w, pieces ? 4096 : 0); /* rank 1's piece beyond a count */
        W_OK(w, world_allgatherv_f32(w, x, counts, displs, "allgatherv"));
        world_set_max_piece(w, 0);
        uint64_t bad = 0;
        for (uint32_t r = 0; r < R; r++)
            for (uint64_t j = 0; j < counts[r]; j++)
                bad += x[displs[r] + j] != (float)(r * 100000 + j);
        TH_CHECK(bad == 0, "allgatherv%s: %llu wrong", pieces ? " by broadcasts" : "",
                 (unsigned long long)bad);
        free(x);
    }
}

/* Waits up to 20 s for one message of `tag`. */
static vkt_status recv_one(vkt_world *w, int tag, void *buf, uint64_t cap, uint32_t *src,
                           uint64_t *got)
{
    double t0 = plat_now();
    for (uint32_t i = 0;; i++) {
        vkt_status st = world_try_recv(w, tag, buf, cap, src, got);
        if (st != VKT_OK || *src != UINT32_MAX || plat_now() - t0 > 20)
            return st;
        world_backoff(w, i);
    }
}

static void test_point_to_point(vkt_world *w)
{
    uint32_t R = w->size, next = (w->rank + 1) % R, prev = (w->rank + R - 1) % R;
    uint32_t out[1000], in[1000], src = 0;
    uint64_t got = 0;
    for (uint32_t i = 0; i < 1000; i++)
        out[i] = w->rank * 7919 + i;
    world_req *req = NULL;
    W_OK(w, world_isend(w, next, 7, out, sizeof out, &req));
    W_OK(w, recv_one(w, 7, in, sizeof in, &src, &got));
    TH_CHECK(src == prev && got == sizeof in, "ring: from rank %u, %llu bytes", src,
             (unsigned long long)got);
    TH_CHECK(in[0] == prev * 7919 && in[999] == prev * 7919 + 999, "ring: the payload");
    W_OK(w, world_wait(w, req));
    /* A message larger than the buffer is an error, and is consumed. */
    W_OK(w, world_isend(w, next, 8, out, 64, &req));
    TH_CHECK(recv_one(w, 8, in, 16, &src, &got) == VKT_ERROR_INTERNAL, "too large");
    HAS(w->errmsg, "exceeds the buffer");
    W_OK(w, world_wait(w, req));
    TH_CHECK(world_isend(w, R, 7, out, 4, &req) == VKT_ERROR_INVALID_ARGUMENT, "bad rank");
    W_OK(w, world_try_recv(w, 8, in, 16, &src, &got));
    TH_CHECK(src == UINT32_MAX, "nothing left");
    /* Receives posted ahead (world_irecv) match the sends of their tag in the order sent,
     * whichever is waited for first; one waited for with nothing coming is polled with
     * world_test first. */
    uint32_t ahead[3][100];
    world_req *rr[3] = {NULL}, *ss[3] = {NULL};
    for (uint32_t k = 0; k < 3; k++)
        W_OK(w, world_irecv(w, prev, 9, ahead[k], sizeof ahead[k], &rr[k]));
    TH_CHECK(world_irecv(w, R, 9, in, 4, &req) == VKT_ERROR_INVALID_ARGUMENT, "bad source");
    W_OK(w, world_barrier(w, "receives posted"));
    for (uint32_t k = 0; k < 3; k++) {
        for (uint32_t i = 0; i < 100; i++)
            out[k * 100 + i] = w->rank * 7919 + k * 100 + i;
        W_OK(w, world_isend(w, next, 9, out + k * 100, sizeof ahead[k], &ss[k]));
    }
    for (uint32_t k = 3; k-- > 0;) {
        W_OK(w, world_wait(w, rr[k]));
        TH_CHECK(ahead[k][0] == prev * 7919 + k * 100 && ahead[k][99] == prev * 7919 + k * 100 + 99,
                 "posted receive %u: %u", k, ahead[k][0]);
    }
    for (uint32_t k = 0; k < 3; k++)
        W_OK(w, world_wait(w, ss[k]));
    W_OK(w, world_barrier(w, "after the ring"));
}

static int run_ranks(int *argc, char ***argv)
{
    vkt_world *w = NULL;
    vkt_world_options o = {.timeout_seconds = 60, .require_launcher = 1};
    vkt_status st = vkt_world_init(argc, argv, &o, &w);
    if (st != VKT_OK) {
        fprintf(stderr, "test_world: %s: %s\n", vkt_status_name(st), vkt_last_error());
        return 1;
    }
    TH_CHECK(world_built_with_mpi() && world_mpi_initialized() && w->launched, "launched");
    TH_CHECK(w->size >= 2 && w->rank < w->size, "rank %u of %u", w->rank, w->size);
    TH_CHECK(w->local_size == w->size && w->local_rank == w->rank, "one host");
    w->step = 1;
    test_allreduce(w);
    test_bcast(w);
    test_gather(w);
    test_allgatherv(w);
    test_point_to_point(w);
    double tv = 0, tm = 0;
    W_OK(w, vkt_world_bench_allreduce(w, 1 << 16, 3, &tv, &tm));
    TH_CHECK(tv > 0 && tm > 0, "benchmark times %g %g", tv, tm);
    TH_CHECK(same_everywhere(w, &tv, sizeof tv), "the benchmark's max is everyone's");
    TH_CHECK(w->comm_bytes > (40u << 20) && w->comm_seconds > 0, "traffic counted");
    vkt_world_finalize(w);
    return th_finish();
}

/* The ranks in LATE sleep through a collective (inside: after starting it, without
 * polling); the others' waits time out. */
static int run_timeout(int *argc, char ***argv, const char *late_arg, int inside)
{
    char late[256]; /* MPI_Init may rewrite argv */
    snprintf(late, sizeof late, "%s", late_arg);
    vkt_world *w = NULL;
    vkt_world_options o = {.timeout_seconds = 1.5, .require_launcher = 1};
    if (vkt_world_init(argc, argv, &o, &w) != VKT_OK) {
        fprintf(stderr, "test_world: %s\n", vkt_last_error());
        return 1;
    }
    int me_late = 0;
    for (const char *p = late; *p;) {
        char *end = NULL;
        unsigned long r = strtoul(p, &end, 10);
        me_late |= end != p && r == w->rank;
        p = *end == ',' ? end + 1 : end + (*end != 0);
    }
    /* Inside: 4 MiB, so that no rank can complete without the stopped one (a few bytes
     * would leave with its first round, and the others could finish without it). */
    uint64_t n = inside ? 1u << 20 : 3;
    float *x = th_alloc_floats(n);
    for (uint64_t i = 0; i < n; i++)
        x[i] = 1;
    w->step = 40;
    if (world_allreduce_f32(w, x, n, "first allreduce") != VKT_OK)
        vkt_world_abort(w, 1, w->errmsg);
    w->step = 41;
    if (me_late) {
        world_req *req = NULL;
        /* Inside: the heartbeat and this rank's part are out; then no MPI call, so
         * (without a progress thread) this rank makes no progress and sends no beat. */
        if (inside && world_iallreduce_f32(w, x, n, "test allreduce", &req) != VKT_OK)
            vkt_world_abort(w, 1, w->errmsg);
        plat_sleep(20); /* ended by another rank's MPI_Abort long before */
        vkt_world_abort(w, 1, "the late rank was not aborted");
    }
    vkt_status st = world_allreduce_f32(w, x, n, "test allreduce");
    vkt_world_abort(w, st == VKT_ERROR_TIMEOUT ? 3 : 1,
                    st == VKT_ERROR_TIMEOUT ? w->errmsg : "expected VKT_ERROR_TIMEOUT");
    return 1;
}

/* The chief works alone for 4 s before finalize (more than the 1 s timeout + 2 s that a
 * rank waits for a silent chief), with or without vkt_world_keepalive; the others are in
 * finalize all along. With it they wait and every rank finalizes (exit 0); without it they
 * give up naming the silent chief, and leave MPI unfinalized (mpirun: non-zero). */
static int run_end_alone(int *argc, char ***argv, int keepalive)
{
    vkt_world *w = NULL;
    vkt_world_options o = {.timeout_seconds = 1, .require_launcher = 1};
    if (vkt_world_init(argc, argv, &o, &w) != VKT_OK) {
        fprintf(stderr, "test_world: %s\n", vkt_last_error());
        return 1;
    }
    float x[3] = {1, 2, 3};
    w->step = 7;
    if (world_allreduce_f32(w, x, 3, "the last allreduce") != VKT_OK)
        vkt_world_abort(w, 1, w->errmsg);
    uint32_t rank = w->rank;
    if (rank == 0) {
        if (keepalive && vkt_world_keepalive(w, 1) != VKT_OK)
            vkt_world_abort(w, 1, w->errmsg);
        plat_sleep(4); /* the chief's save, evaluation and report */
    }
    double t0 = plat_now();
    vkt_world_finalize(w);
    printf("test_world: rank %u: finalize returned after %.1f s\n", rank, plat_now() - t0);
    return 0;
}

int main(int argc, char **argv)
{
    th_init_host("test_world");
    if (argc >= 2 && strcmp(argv[1], "--require-launcher") == 0)
        return run_ranks(&argc, &argv);
    if (argc >= 3 && strcmp(argv[1], "--timeout") == 0)
        return run_timeout(&argc, &argv, argv[2], 0);
    if (argc >= 3 && strcmp(argv[1], "--stop-inside") == 0)
        return run_timeout(&argc, &argv, argv[2], 1);
    if (argc >= 3 && strcmp(argv[1], "--end-alone") == 0)
        return run_end_alone(&argc, &argv, strcmp(argv[2], "keepalive") == 0);
    test_one_rank();
    test_arguments();
    return th_finish();
}
