/* test_reduce_avg: the replicas' gradient average on their shared device (kt_reduce_avg,
 * shaders/reduce_avg.comp) against its CPU reference (kref_weighted_sum: the host's
 * scalar loop) and the host's vectorized sum (reduce_sum), bitwise, on awkward sizes and
 * offsets, with 1 to 13 inputs (chained dispatches past REDUCE_AVG_INPUTS) whose buffers
 * belong to two contexts sharing one VkDevice; a buffer of another device is refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/train_ops.h"
#include "parallel/reduce_sum.h"
#include "push_reduce.h"

#define MAX_K 13

static void fill(float *x, uint64_t n)
{
    th_fill_uniform(x, n, -2, 2);
    for (uint64_t i = 0; i < n; i += 7) /* zeros of both signs: 0 + (-0) is +0 */
        x[i] = i % 14 ? -0.0f : 0.0f;
}

/* k inputs of n elements at `off` elements into buffers of alternating contexts. */
static void one_case(vkt_context *c[2], uint32_t k, uint64_t n, uint64_t off)
{
    vkt_buffer *in[MAX_K] = {0}, *out = NULL;
    vkt_view g[MAX_K];
    float *host[MAX_K], w[MAX_K];
    float *want = malloc(n * 4), *sum = malloc(n * 4), *got = malloc(n * 4);
    for (uint32_t q = 0; q < k; q++) {
        host[q] = malloc(n * 4);
        fill(host[q], n);
        w[q] = q % 3 == 0 ? 1.0f / 3.0f : (float)(q + 1) / 17.0f;
        TH_OK(c[q % 2], vkt_buffer_create(c[q % 2], (off + n) * 4, VKT_MEMORY_DEVICE, &in[q]));
        TH_OK(c[q % 2], vkt_buffer_write(in[q], off * 4, host[q], n * 4));
        g[q] = (vkt_view){in[q], off};
    }
    TH_OK(c[1], vkt_buffer_create(c[1], (n + 3) * 4, VKT_MEMORY_DEVICE, &out));
    vkt_stream *s = th_stream(c[0], 0);
    TH_OK(c[0], kt_reduce_avg(s, (vkt_view){out, 3}, g, w, k, n));
    TH_OK(c[0], vkt_stream_run(s));
    TH_OK(c[1], vkt_buffer_read(out, 12, got, n * 4));
    kref_weighted_sum(want, (const float *const *)host, w, k, n);
    float *dst[1] = {sum};
    reduce_sum(dst, 1, (const float *const *)host, w, k, n);
    uint64_t bad = 0, bad_host = 0;
    for (uint64_t i = 0; i < n; i++) {
        bad += memcmp(&got[i], &want[i], 4) != 0;
        bad_host += memcmp(&sum[i], &want[i], 4) != 0;
    }
    TH_CHECK(bad == 0, "%u inputs x %llu elements at offset %llu: the device's average equals "
             "the reference bitwise (%llu differ)", k, (unsigned long long)n,
             (unsigned long long)off, (unsigned long long)bad);
    TH_CHECK(bad_host == 0, "%u inputs x %llu: the host's vectorized sum equals it too (%llu "
             "differ)", k, (unsigned long long)n, (unsigned long long)bad_host);
    vkt_stream_destroy(s);
    for (uint32_t q = 0; q < k; q++) {
        vkt_buffer_destroy(in[q]);
        free(host[q]);
    }
    vkt_buffer_destroy(out);
    free(want);
    free(sum);
    free(got);
}

int main(void)
{
    th_init("test_reduce_avg");
    vkt_context *c[2] = {th_context(VKT_KERNELS_AUTO), NULL};
    vkt_context_options o = {0};
    TH_OK(NULL, gpu_context_create_shared(th_instance, &o, c[0], &c[1]));
    if (!c[1])
        return th_finish();
    static const uint32_t ks[] = {1, 2, 3, REDUCE_AVG_INPUTS, REDUCE_AVG_INPUTS + 1, MAX_K};
    static const uint64_t ns[] = {1, 5, 1023, 4099, 70001};
    for (size_t a = 0; a < sizeof ks / sizeof *ks; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            one_case(c, ks[a], ns[b], (a + b) % 3 ? 1 + a : 0);

    /* bad arguments: a clear error, nothing recorded */
    vkt_context *other = NULL;
    TH_OK(NULL, vkt_context_create(th_instance, &o, &other));
    vkt_buffer *mine = NULL, *theirs = NULL;
    TH_OK(c[0], vkt_buffer_create(c[0], 64, VKT_MEMORY_DEVICE, &mine));
    if (other)
        TH_OK(other, vkt_buffer_create(other, 64, VKT_MEMORY_DEVICE, &theirs));
    vkt_stream *s = th_stream(c[0], 0);
    vkt_view g[2] = {{mine, 0}, {theirs, 0}};
    float w[2] = {0.5f, 0.5f};
    if (theirs) {
        TH_STATUS(c[0], kt_reduce_avg(s, (vkt_view){mine, 0}, g, w, 2, 16),
                  VKT_ERROR_INVALID_ARGUMENT);
        TH_CHECK(strstr(vkt_context_errmsg(c[0]), "another context's device") != NULL,
                 "a buffer of another VkDevice is refused, named: %s", vkt_context_errmsg(c[0]));
    }
    TH_STATUS(c[0], kt_reduce_avg(s, (vkt_view){mine, 0}, g, w, 0, 16),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_STATUS(c[0], kt_reduce_avg(s, (vkt_view){mine, 0}, g, w, 1, 17),
              VKT_ERROR_INVALID_ARGUMENT); /* past the buffer */
    vkt_stream_destroy(s);
    vkt_buffer_destroy(mine);
    vkt_context_destroy(other);
    vkt_context_destroy(c[1]);
    return th_finish();
}
