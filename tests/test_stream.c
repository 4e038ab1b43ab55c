/* Streams: barriers only where a later command touches what an earlier one wrote,
 * correctness of long dependent chains, replay without re-recording, timestamps,
 * state errors, and the on-disk pipeline cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "platform/platform.h"

static uint32_t barriers(vkt_stream *s)
{
    vkt_stream_stats st = {0};
    vkt_stream_stats_get(s, &st);
    return st.barriers;
}

static void test_barrier_placement(vkt_context *ctx)
{
    enum { N = 4096 };
    vkt_buffer *b = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, 8 * N * 4, VKT_MEMORY_DEVICE, &b));
    vkt_view v[8];
    for (int i = 0; i < 8; i++)
        v[i] = (vkt_view){b, (uint64_t)i * N};
    vkt_stream *s = th_stream(ctx, 0);

    /* Independent writes to disjoint ranges of one buffer: no barrier. */
    TH_OK(ctx, vkt_fill(s, v[0], N, 1.0f));
    TH_OK(ctx, vkt_fill(s, v[1], N, 2.0f));
    TH_OK(ctx, vkt_fill(s, v[2], N, 3.0f));
    TH_CHECK(barriers(s) == 0, "three independent fills need no barrier (got %u)", barriers(s));
    /* Read after write: one barrier. */
    TH_OK(ctx, vkt_copy(s, v[0], v[3], N));
    TH_CHECK(barriers(s) == 1, "copy reading a filled range needs one barrier (got %u)",
             barriers(s));
    /* Reads of ranges written before that barrier, into fresh ranges: none more. */
    TH_OK(ctx, vkt_copy(s, v[1], v[4], N));
    TH_OK(ctx, vkt_copy(s, v[2], v[5], N));
    TH_CHECK(barriers(s) == 1, "independent copies after the barrier add none (got %u)",
             barriers(s));
    /* Write after read: overwriting v[1], which a copy since the barrier read. */
    TH_OK(ctx, vkt_fill(s, v[1], N, 9.0f));
    TH_CHECK(barriers(s) == 2, "write-after-read needs a barrier (got %u)", barriers(s));
    /* Transfer commands are tracked the same way. */
    TH_OK(ctx, vkt_stream_copy(s, b, 3 * N * 4, b, 6 * N * 4, N * 4));
    TH_CHECK(barriers(s) == 2, "vkCmdCopyBuffer of data already made visible: no barrier");
    TH_OK(ctx, vkt_copy(s, v[6], v[7], N));
    TH_CHECK(barriers(s) == 3, "shader read after a transfer write: one barrier (got %u)",
             barriers(s));
    TH_OK(ctx, vkt_stream_run(s));

    float *host = th_alloc_floats(8 * N);
    TH_OK(ctx, vkt_buffer_read(b, 0, host, 8 * N * 4));
    const float want[8] = {1, 9, 3, 1, 2, 3, 1, 1};
    int ok = 1;
    for (int r = 0; r < 8; r++)
        for (int i = 0; i < N; i++)
            ok &= host[r * N + i] == want[r];
    TH_CHECK(ok, "results of the barrier-placement stream are right");
    free(host);
    vkt_stream_destroy(s);
    vkt_buffer_destroy(b);
}

/* A chain of 200 dependent commands ping-ponging between two buffers, replayed. */
static void test_chain_and_replay(vkt_context *ctx)
{
    enum { N = 10007 };
    th_buf a = th_buf_create(ctx, N), c = th_buf_create(ctx, N);
    float *x = th_alloc_floats(N), *y = th_alloc_floats(N);
    th_fill_uniform(x, N, -1, 1);
    th_buf_write(&a, x);
    vkt_stream *s = th_stream(ctx, 0);
    for (int i = 0; i < 100; i++) {
        TH_OK(ctx, vkt_copy(s, th_view(&a), th_view(&c), N));
        TH_OK(ctx, vkt_copy(s, th_view(&c), th_view(&a), N));
    }
    TH_CHECK(barriers(s) == 199, "200 dependent copies need 199 barriers (got %u)", barriers(s));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&c, y);
    th_compare("chain of 200 copies", y, x, N, 0, 0);
    /* Replay: new input, same recorded commands. */
    th_fill_uniform(x, N, 5, 6);
    th_buf_write(&a, x);
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&c, y);
    th_compare("replayed chain sees the new input", y, x, N, 0, 0);
    th_buf_guards_ok(&a, "chain a");
    th_buf_guards_ok(&c, "chain c");
    /* Recording into a stream that has run needs a reset first. */
    TH_STATUS(ctx, vkt_fill(s, th_view(&a), N, 0.0f), VKT_ERROR_STATE);
    TH_CHECK(strstr(vkt_context_errmsg(ctx), "vkt_stream_reset") != NULL,
             "the message says to reset: %s", vkt_context_errmsg(ctx));
    TH_OK(ctx, vkt_stream_reset(s));
    TH_OK(ctx, vkt_fill(s, th_view(&a), N, 0.5f));
    TH_OK(ctx, vkt_stream_run(s));
    th_buf_read(&a, y);
    TH_CHECK(y[0] == 0.5f && y[N - 1] == 0.5f, "a reset stream records new work");
    vkt_stream_destroy(s);
    th_buf_destroy(&a);
    th_buf_destroy(&c);
    free(x);
    free(y);
}

static void test_timestamps(vkt_context *ctx)
{
    vkt_device_info info;
    vkt_context_device_info(ctx, &info);
    if (!info.timestamps) {
        TH_CHECK(1, "device has no timestamps: skipped");
        return;
    }
    enum { N = 1 << 20 };
    vkt_buffer *b = NULL;
    TH_OK(ctx, vkt_buffer_create(ctx, 2 * N * 4, VKT_MEMORY_DEVICE, &b));
    vkt_stream *s = th_stream(ctx, 1);
    TH_OK(ctx, vkt_fill(s, (vkt_view){b, 0}, N, 1.0f));
    TH_OK(ctx, vkt_copy(s, (vkt_view){b, 0}, (vkt_view){b, N}, N));
    TH_OK(ctx, vkt_unary(s, VKT_UNARY_SCALE, 2.0f, (vkt_view){b, N}, (vkt_view){b, N}, N));
    vkt_timing t[8];
    uint32_t n = 0;
    TH_STATUS(ctx, vkt_stream_timings(s, t, 8, &n), VKT_ERROR_STATE);
    TH_OK(ctx, vkt_stream_run(s));
    TH_OK(ctx, vkt_stream_timings(s, t, 8, &n));
    TH_CHECK(n == 3, "one timing per dispatch (got %u)", n);
    int ok = n == 3;
    for (uint32_t i = 0; i < n; i++)
        ok &= t[i].kernel != NULL && t[i].microseconds > 0 && t[i].microseconds < 1e7;
    TH_CHECK(ok, "timings are named and positive");
    vkt_stream *plain = th_stream(ctx, 0);
    TH_STATUS(ctx, vkt_stream_timings(plain, t, 8, &n), VKT_ERROR_STATE);
    vkt_stream_destroy(plain);
    vkt_stream_destroy(s);
    vkt_buffer_destroy(b);
}

/* The pipeline cache files (pipelines-*.bin) in dir: how many, the sizes of the first
 * into *size; with `corrupt`, each replaced by 100 random bytes. */
static int cache_files(const char *dir, uint64_t *size, int corrupt)
{
    char **names;
    size_t n;
    int found = 0;
    *size = 0;
    if (plat_list_dir(dir, &names, &n) != 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if (strncmp(names[i], "pipelines-", 10) != 0 || len < 14 ||
            strcmp(names[i] + len - 4, ".bin") != 0)
            continue;
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        uint64_t s = 0;
        if (plat_file_stat(path, &s, NULL) == 0 && !found++)
            *size = s;
        if (corrupt) {
            unsigned char junk[100];
            for (int k = 0; k < 100; k++)
                junk[k] = (unsigned char)th_rand_u64();
            TH_CHECK(plat_write_file_atomic(path, junk, sizeof junk) == 0, "corrupt %s", path);
        }
    }
    plat_free_names(names, n);
    return found;
}

static void test_pipeline_cache(void)
{
    char dir[512];
    th_temp_dir("cache", dir, sizeof dir);
    char old[1024] = "";
    if (getenv("VKT_CACHE_DIR"))
        snprintf(old, sizeof old, "%s", getenv("VKT_CACHE_DIR"));
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/nested/dir", dir);
    plat_setenv("VKT_CACHE_DIR", sub);
    for (int round = 0; round < 3; round++) {
        vkt_context *ctx = NULL;
        TH_OK(NULL, vkt_context_create(th_instance, NULL, &ctx));
        vkt_buffer *b = NULL;
        vkt_stream *s = NULL;
        TH_OK(ctx, vkt_buffer_create(ctx, 4096, VKT_MEMORY_DEVICE, &b));
        TH_OK(ctx, vkt_stream_create(ctx, NULL, &s));
        TH_OK(ctx, vkt_fill(s, (vkt_view){b, 0}, 1024, 3.0f));
        TH_OK(ctx, vkt_stream_run(s));
        float v = 0;
        vkt_buffer_read(b, 4092, &v, 4);
        TH_CHECK(v == 3.0f, "round %d: kernel ran with the cache", round);
        vkt_context_destroy(ctx);
        uint64_t size;
        int files = cache_files(sub, &size, 0);
        TH_CHECK(files >= 1 && size > 0,
                 "round %d: a pipeline cache file exists in %s (%llu bytes)", round, sub,
                 (unsigned long long)size);
        if (round == 1) /* corrupt it: the next context must ignore it, not crash */
            TH_CHECK(cache_files(sub, &size, 1) >= 1, "corrupting the cache file");
    }
    th_remove_tree(dir);
    TH_CHECK(plat_file_stat(dir, NULL, NULL) != 0, "cleanup");
    if (old[0])
        plat_setenv("VKT_CACHE_DIR", old);
    else
        plat_setenv("VKT_CACHE_DIR", NULL);
}

int main(void)
{
    th_init("test_stream");
    vkt_context *ctx = th_context(VKT_KERNELS_AUTO);
    test_barrier_placement(ctx);
    test_chain_and_replay(ctx);
    test_timestamps(ctx);
    test_pipeline_cache();
    return th_finish();
}
